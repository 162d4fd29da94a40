/* The CPU AdamW (see cpu_adamw.h). Compiled with -ffp-contract=off (CMakeLists.txt): a fused
 * multiply-add would round once where the CPU backend rounds twice, and the bits would differ. */
#include "train/cpu_adamw.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/process_cpus.h"

/* Elements per piece of work a thread takes from the job at a time (8 MiB of every fp32 array): threads take
 * pieces until none is left, so one that the OS descheduled (the GPU-driving thread shares the cores) delays
 * the update by a piece, not by its whole share. */
#define ADAMW_PIECE (1024 * 1024)
/* Below this many elements the caller does everything: waking the pool costs more. Each element
 * is computed the same way either way. */
#define ADAMW_PARALLEL_MIN_ELEMENTS 65536

/* tt_f32_to_bf16's rounding: to nearest even, NaN kept quiet. */
static inline uint16_t round_to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* The CPU backend's element update (ops_cpu_impl.h adamw_update), operation for operation. */
static void adamw_scalar(float *p, float *m, float *v, const float *g, uint16_t *w, int64_t n,
                         const tt_adamw_scalars *k, float decay) {
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * k->grad_scale;
        float pi = p[i] * decay;
        const float mi = k->beta1 * m[i] + k->one_minus_beta1 * gi;
        const float vi = k->beta2 * v[i] + k->one_minus_beta2 * gi * gi;
        const float denom = sqrtf(vi) / k->bias_correction2_sqrt + k->eps;
        pi = pi + k->neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (w) w[i] = round_to_bf16(pi);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void adamw_avx2(float *p, float *m, float *v, const float *g, uint16_t *w,
                                                       int64_t n, const tt_adamw_scalars *k, float decay) {
    const __m256 beta1 = _mm256_set1_ps(k->beta1), one_minus_beta1 = _mm256_set1_ps(k->one_minus_beta1);
    const __m256 beta2 = _mm256_set1_ps(k->beta2), one_minus_beta2 = _mm256_set1_ps(k->one_minus_beta2);
    const __m256 eps = _mm256_set1_ps(k->eps), neg_step_size = _mm256_set1_ps(k->neg_step_size);
    const __m256 bc2_sqrt = _mm256_set1_ps(k->bias_correction2_sqrt), scale = _mm256_set1_ps(k->grad_scale);
    const __m256 decay_v = _mm256_set1_ps(decay);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf_bits = _mm256_set1_epi32(0x7f800000);
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), scale);
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay_v);
        const __m256 mi =
            _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(one_minus_beta1, gi));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(v + i)),
                                        _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, gi), gi));
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
        pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step_size, mi), denom));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, pi);
        if (w) {
            const __m256i bits = _mm256_castps_si256(pi);
            const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf_bits);
            const __m256i rounded = _mm256_srli_epi32(
                _mm256_add_epi32(bits, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(bits, 16), one))), 16);
            const __m256i nan_value = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
            const __m256i halves = _mm256_blendv_epi8(rounded, nan_value, is_nan);
            /* 32 -> 16 bits: pack (values fit, no saturation), then put the two lanes' halves together */
            const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), 0xD8);
            _mm_storeu_si128((__m128i *)(w + i), _mm256_castsi256_si128(packed));
        }
    }
    adamw_scalar(p + i, m + i, v + i, g + i, w ? w + i : NULL, n - i, k, decay);
}

__attribute__((target("avx512f"))) static void adamw_avx512(float *p, float *m, float *v, const float *g, uint16_t *w,
                                                            int64_t n, const tt_adamw_scalars *k, float decay) {
    const __m512 beta1 = _mm512_set1_ps(k->beta1), one_minus_beta1 = _mm512_set1_ps(k->one_minus_beta1);
    const __m512 beta2 = _mm512_set1_ps(k->beta2), one_minus_beta2 = _mm512_set1_ps(k->one_minus_beta2);
    const __m512 eps = _mm512_set1_ps(k->eps), neg_step_size = _mm512_set1_ps(k->neg_step_size);
    const __m512 bc2_sqrt = _mm512_set1_ps(k->bias_correction2_sqrt), scale = _mm512_set1_ps(k->grad_scale);
    const __m512 decay_v = _mm512_set1_ps(decay);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf_bits = _mm512_set1_epi32(0x7f800000);
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), scale);
        __m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), decay_v);
        const __m512 mi =
            _mm512_add_ps(_mm512_mul_ps(beta1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(one_minus_beta1, gi));
        const __m512 vi = _mm512_add_ps(_mm512_mul_ps(beta2, _mm512_loadu_ps(v + i)),
                                        _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, gi), gi));
        const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2_sqrt), eps);
        pi = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(neg_step_size, mi), denom));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        _mm512_storeu_ps(p + i, pi);
        if (w) {
            const __m512i bits = _mm512_castps_si512(pi);
            const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf_bits);
            const __m512i rounded = _mm512_srli_epi32(
                _mm512_add_epi32(bits, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(bits, 16), one))), 16);
            const __m512i nan_value = _mm512_or_si512(_mm512_srli_epi32(bits, 16), quiet);
            const __m512i halves = _mm512_mask_blend_epi32(is_nan, rounded, nan_value);
            _mm256_storeu_si256((__m256i *)(w + i), _mm512_cvtepi32_epi16(halves));
        }
    }
    adamw_scalar(p + i, m + i, v + i, g + i, w ? w + i : NULL, n - i, k, decay);
}
#endif

bool tt_cpu_adamw_isa_supported(tt_cpu_adamw_isa isa) {
    switch (isa) {
    case TT_CPU_ADAMW_SCALAR: return true;
#if defined(__x86_64__)
    case TT_CPU_ADAMW_AVX2: return __builtin_cpu_supports("avx2");
    case TT_CPU_ADAMW_AVX512: return __builtin_cpu_supports("avx512f");
#else
    default: return false;
#endif
    }
    return false;
}

tt_cpu_adamw_isa tt_cpu_adamw_best_isa(void) {
    if (tt_cpu_adamw_isa_supported(TT_CPU_ADAMW_AVX512)) return TT_CPU_ADAMW_AVX512;
    if (tt_cpu_adamw_isa_supported(TT_CPU_ADAMW_AVX2)) return TT_CPU_ADAMW_AVX2;
    return TT_CPU_ADAMW_SCALAR;
}

const char *tt_cpu_adamw_isa_name(tt_cpu_adamw_isa isa) {
    switch (isa) {
    case TT_CPU_ADAMW_AVX512: return "AVX-512";
    case TT_CPU_ADAMW_AVX2: return "AVX2";
    default: return "scalar";
    }
}

void tt_cpu_adamw_range(tt_cpu_adamw_isa isa, float *master, float *m, float *v, const float *g, uint16_t *weight_bf16,
                        int64_t n, const tt_adamw_scalars *scalars, float decay) {
    if (n <= 0) return;
#if defined(__x86_64__)
    if (isa == TT_CPU_ADAMW_AVX512) {
        adamw_avx512(master, m, v, g, weight_bf16, n, scalars, decay);
        return;
    }
    if (isa == TT_CPU_ADAMW_AVX2) {
        adamw_avx2(master, m, v, g, weight_bf16, n, scalars, decay);
        return;
    }
#endif
    adamw_scalar(master, m, v, g, weight_bf16, n, scalars, decay);
}

/* ---------------------------------------------------------------- the pool */

typedef struct adamw_job {
    float *master, *m, *v;
    const float *g;
    uint16_t *weight_bf16;
    const int64_t *segment_start;
    const unsigned char *segment_decays;
    int segments;
    const tt_adamw_scalars *scalars;
    int shares;     /* threads taking part */
    int64_t pieces; /* ADAMW_PIECE-element pieces of the job */
} adamw_job;

typedef struct pool_thread {
    struct tt_cpu_adamw_pool *pool;
    int index; /* its share: 1 .. threads - 1 (the caller takes 0) */
    int cpu;   /* pinned to, or -1 */
    pthread_t handle;
} pool_thread;

struct tt_cpu_adamw_pool {
    int threads;
    tt_cpu_adamw_isa isa;
    pool_thread *workers; /* [threads - 1] */
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
    uint64_t generation; /* bumped per job: a worker runs each generation once */
    int pending;         /* workers still on the current job */
    bool stopping;
    adamw_job job;
    int64_t next_piece; /* the current job's next piece to take (atomically) */
};

/* Elements [lo, hi) of the job (absolute, within its segments), every segment clipped to it. */
static void run_range(const tt_cpu_adamw_pool *pool, const adamw_job *job, int64_t lo, int64_t hi) {
    for (int s = 0; s < job->segments && lo < hi; s++) {
        const int64_t a = job->segment_start[s] > lo ? job->segment_start[s] : lo;
        const int64_t b = job->segment_start[s + 1] < hi ? job->segment_start[s + 1] : hi;
        if (a >= b) continue;
        const float decay = job->segment_decays[s] ? job->scalars->decay : 1.0f;
        tt_cpu_adamw_range(pool->isa, job->master + a, job->m + a, job->v + a, job->g + a,
                           job->weight_bf16 ? job->weight_bf16 + a : NULL, b - a, job->scalars, decay);
    }
}

/* Takes pieces of the job until none is left (any thread of the job; each element is updated the same way
 * whichever thread takes it). */
static void run_pieces(tt_cpu_adamw_pool *pool, const adamw_job *job) {
    const int64_t first = job->segment_start[0], end = job->segment_start[job->segments];
    for (;;) {
        const int64_t piece = __atomic_fetch_add(&pool->next_piece, 1, __ATOMIC_RELAXED);
        if (piece >= job->pieces) return;
        const int64_t lo = first + piece * ADAMW_PIECE, hi = lo + ADAMW_PIECE < end ? lo + ADAMW_PIECE : end;
        run_range(pool, job, lo, hi);
    }
}

static void *pool_worker(void *arg) {
    pool_thread *self = arg;
    tt_cpu_adamw_pool *pool = self->pool;
    if (self->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(self->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort: unpinned still computes right */
    }
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->stopping && pool->generation == seen) pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stopping) break;
        seen = pool->generation;
        const adamw_job job = pool->job;
        pthread_mutex_unlock(&pool->lock);
        if (self->index < job.shares) run_pieces(pool, &job);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0) pthread_cond_signal(&pool->finished);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

tt_cpu_adamw_pool *tt_cpu_adamw_pool_create(int threads, tt_cpu_adamw_isa isa) {
    TT_CHECK(threads >= 1, "CPU AdamW threads %d", threads);
    TT_CHECK(tt_cpu_adamw_isa_supported(isa), "this CPU cannot run the %s AdamW", tt_cpu_adamw_isa_name(isa));
    tt_cpu_adamw_pool *pool = tt_xcalloc(1, sizeof *pool, "the CPU AdamW pool");
    pool->threads = threads;
    pool->isa = isa;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->finished, NULL);
    /* one CPU of the process's per worker, after the first (where the caller most likely runs); the process's CPUs,
     * not the caller's affinity: where OpenMP binds its threads, libgomp pinned the caller to one place */
    int cpus[CPU_SETSIZE];
    const int cpu_count = tt_process_cpus(cpus, CPU_SETSIZE);
    pool->workers = threads > 1 ? tt_xcalloc((size_t)threads - 1, sizeof(pool_thread), "the CPU AdamW pool") : NULL;
    for (int t = 1; t < threads; t++) {
        pool_thread *w = &pool->workers[t - 1];
        *w = (pool_thread){.pool = pool, .index = t, .cpu = cpu_count ? cpus[t % cpu_count] : -1};
        if (pthread_create(&w->handle, NULL, pool_worker, w) != 0)
            tt_die("could not start a CPU AdamW thread (%d of %d); lower num_threads", t, threads);
    }
    return pool;
}

void tt_cpu_adamw_pool_free(tt_cpu_adamw_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int t = 1; t < pool->threads; t++) pthread_join(pool->workers[t - 1].handle, NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->finished);
    free(pool->workers);
    free(pool);
}

int tt_cpu_adamw_pool_threads(const tt_cpu_adamw_pool *pool) { return pool->threads; }
tt_cpu_adamw_isa tt_cpu_adamw_pool_isa(const tt_cpu_adamw_pool *pool) { return pool->isa; }

void tt_cpu_adamw_pool_update(tt_cpu_adamw_pool *pool, float *master, float *m, float *v, const float *g,
                              uint16_t *weight_bf16, const int64_t *segment_start, const unsigned char *segment_decays,
                              int segments, const tt_adamw_scalars *scalars) {
    if (segments <= 0) return;
    const int64_t total = segment_start[segments] - segment_start[0];
    adamw_job job = {.master = master,
                     .m = m,
                     .v = v,
                     .g = g,
                     .weight_bf16 = weight_bf16,
                     .segment_start = segment_start,
                     .segment_decays = segment_decays,
                     .segments = segments,
                     .scalars = scalars,
                     .shares = 1};
    if (pool->threads == 1 || total < ADAMW_PARALLEL_MIN_ELEMENTS) {
        run_range(pool, &job, segment_start[0], segment_start[segments]);
        return;
    }
    job.pieces = (total + ADAMW_PIECE - 1) / ADAMW_PIECE;
    job.shares = job.pieces < pool->threads ? (int)job.pieces : pool->threads;
    pthread_mutex_lock(&pool->lock);
    pool->job = job;
    pool->next_piece = 0;
    pool->pending = pool->threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    run_pieces(pool, &job);
    pthread_mutex_lock(&pool->lock);
    while (pool->pending > 0) pthread_cond_wait(&pool->finished, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
