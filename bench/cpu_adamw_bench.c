/* The CPU AdamW's achieved memory bandwidth: `build/bench_cpu_adamw [parameters] [threads] [4k]`
 * updates that many fp32 parameters (master, m, v, gradient; bf16 weights out) repeatedly with
 * each vector path this CPU runs and reports bytes read + written per second: per parameter 16
 * read (master, m, v, gradient) and 14 written (master, m, v, bf16 weight). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/arena.h"
#include "train/cpu_adamw.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 64 * 1000 * 1000;
    const int threads = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || threads < 1) {
        fprintf(stderr, "usage: %s [parameters >= 1] [threads >= 1]\n", argv[0]);
        return 1;
    }
    /* one block, as optimizer offload's host arena is (tt_host_block_alloc: 2 MiB pages when large);
     * a third argument "4k" takes plain pages instead, for comparison */
    const bool small_pages = argc > 3 && strcmp(argv[3], "4k") == 0;
    const size_t vector = ((size_t)n * sizeof(float) + 4095) / 4096 * 4096;
    const size_t block_bytes = 4 * vector + ((size_t)n * sizeof(uint16_t) + 4095) / 4096 * 4096;
    unsigned char *block = small_pages ? aligned_alloc(4096, block_bytes) : tt_host_block_alloc(block_bytes);
    if (!block) {
        fprintf(stderr, "out of memory for %lld parameters\n", (long long)n);
        return 1;
    }
    float *master = (float *)block, *m = (float *)(block + vector), *v = (float *)(block + 2 * vector);
    float *g = (float *)(block + 3 * vector);
    uint16_t *w = (uint16_t *)(block + 4 * vector);
    for (int64_t i = 0; i < n; i++) {
        master[i] = (float)(i % 1000) * 1e-3f;
        m[i] = v[i] = 0.0f;
        g[i] = (float)((i * 7) % 13) * 1e-3f - 6e-3f;
    }
    memset(w, 0, sizeof(uint16_t) * (size_t)n);
    const int64_t start[2] = {0, n};
    const unsigned char decays[1] = {1};
    const double bytes_per_step = 30.0 * (double)n;
    printf("CPU AdamW over %lld parameters, %d threads (%ld CPUs online):\n", (long long)n, threads,
           sysconf(_SC_NPROCESSORS_ONLN));
    for (int isa = TT_CPU_ADAMW_SCALAR; isa <= TT_CPU_ADAMW_AVX512; isa++) {
        if (!tt_cpu_adamw_isa_supported((tt_cpu_adamw_isa)isa)) continue;
        tt_cpu_adamw_pool *pool = tt_cpu_adamw_pool_create(threads, (tt_cpu_adamw_isa)isa);
        double best = 1e30;
        for (int step = 1; step <= 6; step++) {
            const tt_adamw_scalars k = tt_adamw_scalars_for(1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, step, 1.0f);
            const double t0 = now_seconds();
            tt_cpu_adamw_pool_update(pool, master, m, v, g, w, start, decays, 1, &k);
            const double t = now_seconds() - t0;
            if (step > 1 && t < best) best = t; /* the first step touches the pages */
        }
        printf("  %-8s %8.2f ms per step, %6.2f GB/s (read + written), %.0f M parameters/s\n",
               tt_cpu_adamw_isa_name((tt_cpu_adamw_isa)isa), best * 1e3, bytes_per_step / best / 1e9,
               (double)n / best / 1e6);
        tt_cpu_adamw_pool_free(pool);
    }
    if (small_pages) free(block);
    else tt_host_block_free(block);
    return 0;
}
