/* Sizes with units ("24GiB", "512MB") as the byte keys and max_shard_size take them. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/check.h"

/* ---- byte sizes ---- */

int64_t tt_parse_bytes(const char *text) {
    if (!text) return -1;
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) return -1;
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*p); p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - digit) / 10) return -1;
        whole = whole * 10 + digit;
    }
    uint64_t fraction = 0, fraction_scale = 1; /* the first 18 fractional digits are plenty */
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (int digits = 0; isdigit((unsigned char)*p); p++, digits++)
            if (digits < 18) {
                fraction = fraction * 10 + (uint64_t)(*p - '0');
                fraction_scale *= 10;
            }
    }
    while (*p == ' ' || *p == '\t') p++;
    /* Bare K/M/G/T are binary, as in `free -g` and memory limits; KB/MB/GB/TB are decimal. */
    static const struct {
        const char *unit;
        uint64_t factor;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"K", 1ull << 10},
                 {"KiB", 1ull << 10},
                 {"KB", 1000ull},
                 {"M", 1ull << 20},
                 {"MiB", 1ull << 20},
                 {"MB", 1000000ull},
                 {"G", 1ull << 30},
                 {"GiB", 1ull << 30},
                 {"GB", 1000000000ull},
                 {"T", 1ull << 40},
                 {"TiB", 1ull << 40},
                 {"TB", 1000000000000ull}};
    const char *end = p + strlen(p);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t unit_length = (size_t)(end - p);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strlen(units[i].unit) != unit_length || strncasecmp(p, units[i].unit, unit_length) != 0) continue;
        uint64_t factor = units[i].factor;
        if (factor == 1 && fraction != 0) return -1; /* a fraction of a byte */
        if (whole > (uint64_t)INT64_MAX / factor) return -1;
        uint64_t bytes = whole * factor;
        if (fraction) {
            long double extra = floorl((long double)fraction * (long double)factor / (long double)fraction_scale);
            if ((long double)bytes + extra > (long double)INT64_MAX) return -1;
            bytes += (uint64_t)extra;
            if (bytes > (uint64_t)INT64_MAX) return -1;
        }
        return (int64_t)bytes;
    }
    return -1;
}
