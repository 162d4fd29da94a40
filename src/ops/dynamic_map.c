/* The dynamic maps (dynamic_map.h). Compiled with -ffp-contract=off (CMakeLists.txt): every product and sum is
 * rounded on its own, as torch rounds them. */
#include "ops/dynamic_map.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/check.h"

/* torch.linspace(0.1, 1, points, dtype=float32) element i, by its element formula: from the start in the first
 * half, from the end in the second. */
static float linspace_point(int64_t points, int64_t i) {
    const float start = 0.1f, end = 1.0f;
    const float step = (end - start) / (float)(points - 1);
    if (i < points / 2) return start + step * (float)i;
    return end - step * (float)(points - i - 1);
}

static int compare_floats(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void tt_dynamic_map_build(float map[TT_DYNAMIC_MAP_CODES], bool is_signed) {
    enum { EXPONENT_BITS = 7 }; /* max_exponent_bits; with 8 bits, 7 non-sign bits: no extra linear items */
    int count = 0;
    for (int e = 0; e < EXPONENT_BITS; e++) {
        const int64_t points = (is_signed ? INT64_C(1) << e : INT64_C(1) << (e + 1)) + 1;
        const float decade = (float)pow(10.0, (double)(e - (EXPONENT_BITS - 1))); /* python's 10 ** (e - 6) */
        for (int64_t i = 0; i + 1 < points; i++) {
            const float midpoint = (linspace_point(points, i) + linspace_point(points, i + 1)) / 2.0f;
            map[count++] = decade * midpoint;
            if (is_signed) map[count++] = -decade * midpoint;
        }
    }
    map[count++] = 0.0f;
    map[count++] = 1.0f;
    TT_CHECK(count == TT_DYNAMIC_MAP_CODES, "a dynamic map of %d codes", count);
    qsort(map, TT_DYNAMIC_MAP_CODES, sizeof(float), compare_floats);
}

unsigned char tt_dynamic_map_nearest(const float map[TT_DYNAMIC_MAP_CODES], float x, bool is_signed) {
    return tt_dynamic_map_nearest_in(map, x, is_signed);
}
