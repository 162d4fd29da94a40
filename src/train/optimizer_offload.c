/* Optimizer offload: the schedule and the worker thread (see optimizer_offload.h for the orderings). */
#include "train/optimizer_offload.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "memory/size_table.h"

typedef enum unit_phase {
    UNIT_IDLE,     /* nothing pending on the host */
    UNIT_QUEUED,   /* its gradient copy out is under way; the worker will update it */
    UNIT_UPDATING, /* the worker is on it */
    UNIT_UPDATED,  /* new weights in host memory; the main thread starts their copy back */
} unit_phase;

struct tt_optimizer_offload_unit {
    int64_t start, end;     /* elements of the host share (empty: start == end, or a compute-tier unit) */
    unit_phase phase;       /* under the worker's lock */
    uint64_t gradient_copy; /* ticket of this step's copy out */
    uint64_t weight_copy;   /* ticket of the copy back the compute stream has not waited for yet, or 0 */
    bool stamped;           /* queued with its update's scalars (the gradient scale known) */
    tt_adamw_scalars scalars;
    /* the host segments clipped to the unit, in host-share elements */
    int segments;
    int64_t *segment_start;        /* [segments + 1] */
    unsigned char *segment_decays; /* [segments] */
};

struct tt_optimizer_offload_worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a unit's phase, the scale or stopping changed */
    bool stopping;
    bool scale_known; /* the armed update's scalars are final: units queued from now on get them */
    tt_adamw_scalars scalars;
    /* main thread only: the armed step */
    bool armed;
    float learning_rate;
    int64_t step;
    bool clipping;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool unit_on_host(const tt_optimizer_offload *o, int64_t u) {
    return u >= o->first_host_unit && u < o->end_unit && o->units[u].end > o->units[u].start;
}

/* The CPU AdamW over elements [start, end) of the host share (any thread; one at a time). */
static void update_host_range(tt_optimizer_offload *o, int segments, const int64_t *segment_start,
                              const unsigned char *segment_decays, const tt_adamw_scalars *scalars) {
    if (segments <= 0) return;
    const double t0 = now_seconds();
    tt_cpu_adamw_pool_update(o->pool, o->master, o->m, o->v, o->gradients, o->weights_bf16, segment_start,
                             segment_decays, segments, scalars);
    const int64_t n = segment_start[segments] - segment_start[0];
    o->adamw_seconds += now_seconds() - t0;
    o->adamw_parameters += n;
    /* read master, m, v, gradient; write master, m, v and the bf16 copy */
    o->adamw_bytes += (double)n * (16.0 + 12.0 + (o->weights_bf16 ? 2.0 : 0.0));
}

/* The unit the worker updates next (under its lock), or -1: of the queued units with their scalars, the lowest
 * whose gradients have arrived (the next forward needs the lowest first); when none has, the one whose copy
 * out was issued first, which the copy stream finishes first. The host issues the backward ahead of the GPU,
 * so the lowest queued unit's gradients may be the last to come: waiting for them would leave the CPU idle
 * through the backward while the units above it are ready. */
static int64_t next_unit(const tt_optimizer_offload *o) {
    int64_t earliest = -1;
    for (int64_t u = o->first_host_unit; u < o->end_unit; u++) {
        const tt_optimizer_offload_unit *unit = &o->units[u];
        if (unit->phase != UNIT_QUEUED || !unit->stamped) continue;
        if (tt_backend_copy_done(o->backend, unit->gradient_copy)) return u;
        if (earliest < 0 || unit->gradient_copy < o->units[earliest].gradient_copy) earliest = u;
    }
    return earliest;
}

static void *worker_main(void *arg) {
    tt_optimizer_offload *o = arg;
    struct tt_optimizer_offload_worker *w = o->worker;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        int64_t pick = -1;
        while (!w->stopping) {
            pick = next_unit(o);
            if (pick >= 0) break;
            pthread_cond_wait(&w->changed, &w->lock);
        }
        if (w->stopping) break;
        tt_optimizer_offload_unit *unit = &o->units[pick];
        unit->phase = UNIT_UPDATING;
        const tt_adamw_scalars scalars = unit->scalars;
        const uint64_t copy = unit->gradient_copy;
        pthread_mutex_unlock(&w->lock);
        tt_backend_copy_host_wait(o->backend, copy);
        update_host_range(o, unit->segments, unit->segment_start, unit->segment_decays, &scalars);
        pthread_mutex_lock(&w->lock);
        unit->phase = UNIT_UPDATED;
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

tt_optimizer_offload *tt_optimizer_offload_create(tt_model_state *s, int threads) {
    if (!s->plan.optimizer_offload) return NULL;
    const tt_precision *p = &s->plan.precision;
    if (p->gradient != TT_F32 || p->moment != TT_F32)
        tt_die("optimizer_cpu_offload needs fp32 gradients and moments (master_weights: true)");
    tt_optimizer_offload *o = tt_xcalloc(1, sizeof *o, "optimizer offload");
    const int64_t L = s->config.num_layers;
    o->backend = s->backend;
    o->state = s;
    o->num_layers = L;
    o->overlap = s->plan.optimizer_overlap;
    o->unit_start = s->unit_start;
    /* the top of this rank's zero_stage shard, or of the model */
    tt_optimizer_host_units(o->unit_start, &s->plan, &s->sizes, &o->first_host_unit, &o->end_unit);
    o->host_start = s->sizes.optimizer_host_start;
    o->host_numel = s->sizes.optimizer_host_numel;
    TT_CHECK(o->unit_start[o->first_host_unit] == o->host_start, "the host share starts at a unit boundary");
    o->weight_bytes = s->plan.weight_bytes;
    o->gradient_bytes = s->plan.gradient_bytes;
    /* zero_stage 2 keeps the shard's gradients together elsewhere in the buffer (optimizer_shards.h) */
    o->device_gradients = s->sizes.sharded_gradient_slot && o->host_numel
                              ? tt_model_gradients_at(s, o->host_start)
                              : (unsigned char *)s->gradients + (size_t)o->host_start * o->gradient_bytes;

    const tt_param_table *t = &s->params;
    o->host_segments =
        tt_clip_segments(t->decay_segment_start, t->decay_segment_decays, t->decay_segments, o->host_start,
                         o->host_start + o->host_numel, &o->host_segment_start, &o->host_segment_decays);
    o->units = tt_xcalloc((size_t)L + 2, sizeof(tt_optimizer_offload_unit), "optimizer units");
    o->ring_partial = tt_xcalloc((size_t)L + 2, sizeof(bool), "gradient ring");
    o->ring_load_unit[0] = o->ring_load_unit[1] = -1;
    for (int64_t u = 0; u < L + 2; u++) {
        tt_optimizer_offload_unit *unit = &o->units[u];
        if (u >= o->first_host_unit && u < o->end_unit) {
            unit->start = o->unit_start[u] - o->host_start;
            unit->end = o->unit_start[u + 1] - o->host_start;
        }
        unit->segments = tt_clip_segments(o->host_segment_start, o->host_segment_decays, o->host_segments, unit->start,
                                          unit->end, &unit->segment_start, &unit->segment_decays);
        for (int k = 0; k <= unit->segments; k++) unit->segment_start[k] += unit->start; /* host-share elements */
    }
    if (o->host_numel == 0) return o;

    TT_CHECK(s->host.base != NULL || s->host.measuring, "the size table gives optimizer offload a host arena");
    o->master = tt_arena_push(&s->host, s->sizes.host_master, TT_CLASS_MASTER, "offloaded master weights");
    o->m = tt_arena_push(&s->host, s->sizes.host_optimizer_state / 2, TT_CLASS_OPTIMIZER_STATE,
                         "offloaded AdamW first moment");
    o->v = tt_arena_push(&s->host, s->sizes.host_optimizer_state / 2, TT_CLASS_OPTIMIZER_STATE,
                         "offloaded AdamW second moment");
    o->gradients = tt_arena_push(&s->host, s->sizes.host_gradients, TT_CLASS_GRADIENT, "offloaded gradient staging");
    o->weights_bf16 = s->sizes.host_weights
                          ? tt_arena_push(&s->host, s->sizes.host_weights, tt_trainable_weight_class(&s->params),
                                          "offloaded weight staging")
                          : NULL;
    TT_CHECK(o->weights_bf16 == NULL || o->weight_bytes == 2, "bf16 weight staging");
    if (s->measuring) return o; /* the dry run: no memory to clear, no update to run */
    memset(o->master, 0, s->sizes.host_master);
    memset(o->m, 0, s->sizes.host_optimizer_state / 2);
    memset(o->v, 0, s->sizes.host_optimizer_state / 2);
    memset(o->gradients, 0, s->sizes.host_gradients);

    /* With overlap the CPU update runs while the main thread drives the GPU: one core stays free for it (with
     * every core taken by pinned AdamW threads, the main thread's kernel launches wait for a time slice and the
     * GPU idles). */
    const int cores = omp_get_max_threads();
    const int pool_threads = threads > 0 ? threads : o->overlap && cores > 2 ? cores - 1 : cores;
    o->pool = tt_cpu_adamw_pool_create(pool_threads, tt_cpu_adamw_best_isa());
    if (o->overlap) {
        o->worker = tt_xcalloc(1, sizeof *o->worker, "optimizer offload worker");
        pthread_mutex_init(&o->worker->lock, NULL);
        pthread_cond_init(&o->worker->changed, NULL);
        if (pthread_create(&o->worker->thread, NULL, worker_main, o) != 0)
            tt_die("could not start the CPU optimizer thread (overlap_cpu_optimizer_d2h_h2d); set "
                   "overlap_cpu_optimizer_d2h_h2d: false");
    }
    return o;
}

void tt_optimizer_offload_free(tt_optimizer_offload *o) {
    if (!o) return;
    if (o->worker) {
        /* queued units whose update never came (a run stopped on a non-finite gradient) are dropped */
        pthread_mutex_lock(&o->worker->lock);
        o->worker->stopping = true;
        pthread_cond_broadcast(&o->worker->changed);
        pthread_mutex_unlock(&o->worker->lock);
        pthread_join(o->worker->thread, NULL);
        pthread_mutex_destroy(&o->worker->lock);
        pthread_cond_destroy(&o->worker->changed);
        free(o->worker);
    }
    /* copies still reading or writing the host arena end before it is freed */
    if (o->host_numel) tt_backend_synchronize(o->backend);
    tt_cpu_adamw_pool_free(o->pool);
    for (int64_t u = 0; u < o->num_layers + 2; u++) {
        free(o->units[u].segment_start);
        free(o->units[u].segment_decays);
    }
    free(o->units);
    free(o->ring_partial);
    free(o->host_segment_start);
    free(o->host_segment_decays);
    free(o);
}

/* Whether unit u's weights are weight-offloaded (cpu_offloading_weights): the weight stream reads them from their
 * home, the host buffer the CPU AdamW writes, so there is nothing to copy back. */
static bool unit_weights_offloaded(const tt_optimizer_offload *o, int64_t u) {
    return u >= 1 && u <= o->num_layers && tt_weight_stream_has(&o->state->weight_offload, u - 1);
}

/* Where unit u's new weights go on the compute tier, and where they come from. */
static void *unit_device_weights(const tt_optimizer_offload *o, int64_t u) {
    return tt_model_trainable_weights_at(o->state, o->unit_start[u]);
}

static const void *unit_host_weights(const tt_optimizer_offload *o, const tt_optimizer_offload_unit *unit) {
    return o->weights_bf16 ? (const void *)(o->weights_bf16 + unit->start) : (const void *)(o->master + unit->start);
}

void *tt_optimizer_offload_weights_home(const tt_optimizer_offload *o, int64_t element) {
    TT_CHECK(element >= o->host_start && element < o->host_start + o->host_numel,
             "trainable element %lld is in the optimizer's host share", (long long)element);
    const size_t at = (size_t)(element - o->host_start);
    return o->weights_bf16 ? (void *)(o->weights_bf16 + at) : (void *)(o->master + at);
}

/* Starts the copy back of every updated unit (main thread). */
static void copy_back_updated(tt_optimizer_offload *o) {
    if (!o->worker) return;
    /* under the lock: the worker never holds it while it waits on the copy engine, so no order inversion */
    pthread_mutex_lock(&o->worker->lock);
    for (int64_t u = 0; u < o->num_layers + 2; u++) {
        tt_optimizer_offload_unit *unit = &o->units[u];
        if (unit->phase != UNIT_UPDATED) continue;
        unit->phase = UNIT_IDLE;
        if (unit_weights_offloaded(o, u)) continue;
        const size_t n = (size_t)(unit->end - unit->start);
        unit->weight_copy = tt_backend_copy_async(o->backend, unit_device_weights(o, u), unit_host_weights(o, unit),
                                                  n * o->weight_bytes, false, 0);
    }
    pthread_mutex_unlock(&o->worker->lock);
}

/* Blocks until unit u is neither queued nor being updated (main thread). false: it is queued for an update whose
 * gradient scale never came. */
static bool wait_for_unit(tt_optimizer_offload *o, int64_t u) {
    struct tt_optimizer_offload_worker *w = o->worker;
    pthread_mutex_lock(&w->lock);
    while (o->units[u].phase == UNIT_UPDATING || (o->units[u].phase == UNIT_QUEUED && o->units[u].stamped))
        pthread_cond_wait(&w->changed, &w->lock);
    const bool stranded = o->units[u].phase == UNIT_QUEUED;
    pthread_mutex_unlock(&w->lock);
    return !stranded;
}

void tt_optimizer_offload_expect_gradients(tt_optimizer_offload *o, const tt_adamw_settings *settings,
                                           float learning_rate, int64_t step) {
    if (!o || !o->worker) return;
    /* the previous step's units may still be on their way: they carry their own scalars */
    struct tt_optimizer_offload_worker *w = o->worker;
    w->armed = true;
    w->learning_rate = learning_rate;
    w->step = step;
    w->clipping = settings->max_grad_norm > 0.0f;
    pthread_mutex_lock(&w->lock);
    /* without clipping the factor is 1 and known now, so the worker updates each unit as it arrives */
    w->scale_known = !w->clipping;
    if (!w->clipping)
        w->scalars = tt_adamw_scalars_for(learning_rate, settings->beta1, settings->beta2, settings->epsilon,
                                          settings->weight_decay, step, 1.0f);
    pthread_mutex_unlock(&w->lock);
}

void tt_optimizer_offload_before_forward(tt_optimizer_offload *o, int64_t u) {
    if (!o || !o->worker) return;
    copy_back_updated(o);
    if (!unit_on_host(o, u)) return;
    TT_CHECK(wait_for_unit(o, u), "the forward reads unit %lld before the optimizer step that updates it",
             (long long)u);
    copy_back_updated(o);
    tt_optimizer_offload_unit *unit = &o->units[u];
    if (unit->weight_copy) {
        tt_backend_copy_wait(o->backend, unit->weight_copy);
        unit->weight_copy = 0;
    }
}

bool tt_optimizer_offload_unit_streamed(const tt_optimizer_offload *o, int64_t u) {
    return o && u >= o->state->sizes.gradient_ring_first && u <= o->num_layers;
}

/* Starts copying unit u's partial gradients (an earlier micro-batch's, in the host staging) back into its ring
 * slot, after the slot's last copy out (which, on the same in-order copy stream, follows the copy out of u's
 * partial gradients). */
static void load_partial(tt_optimizer_offload *o, int64_t u) {
    const tt_optimizer_offload_unit *unit = &o->units[u];
    o->ring_load[u % 2] =
        tt_backend_copy_async(o->backend, tt_model_unit_gradients(o->state, u),
                              (unsigned char *)o->gradients + (size_t)unit->start * o->gradient_bytes,
                              (size_t)(unit->end - unit->start) * o->gradient_bytes, false, o->ring_copy[u % 2]);
    o->ring_load_unit[u % 2] = u;
}

void tt_optimizer_offload_before_backward(tt_optimizer_offload *o, int64_t u) {
    if (!tt_optimizer_offload_unit_streamed(o, u)) return;
    tt_model_state *s = o->state;
    if (o->ring_partial[u]) { /* an earlier micro-batch's gradients come back (prefetched a layer ahead) */
        if (o->ring_load_unit[u % 2] != u) load_partial(o, u);
        tt_backend_copy_wait(o->backend, o->ring_load[u % 2]);
        o->ring_load_unit[u % 2] = -1;
        return;
    }
    tt_backend_copy_wait(o->backend, o->ring_copy[u % 2]);
    tt_backend_zero(o->backend, tt_model_unit_gradients(s, u),
                    (size_t)(s->unit_start[u + 1] - s->unit_start[u]) * o->gradient_bytes);
}

void tt_optimizer_offload_after_backward(tt_optimizer_offload *o, int64_t u) {
    if (!o || !o->worker || !unit_on_host(o, u)) return;
    const bool streamed = tt_optimizer_offload_unit_streamed(o, u), final = o->worker->armed;
    if (!streamed && !final) return; /* the whole buffer keeps accumulating */
    tt_model_state *s = o->state;
    tt_optimizer_offload_unit *unit = &o->units[u];
    const size_t n = (size_t)(unit->end - unit->start), at = (size_t)unit->start * o->gradient_bytes;
    const void *from = tt_model_unit_gradients(s, u);
    if (streamed && final) /* the gradient norm's share of this unit, before the slot is reused */
        tt_backend_sum_squares(o->backend, &s->norm_partials[u], from, s->unit_start[u + 1] - s->unit_start[u]);
    const uint64_t ticket =
        tt_backend_copy_async(o->backend, (unsigned char *)o->gradients + at, from, n * o->gradient_bytes, true, 0);
    if (streamed) {
        o->ring_copy[u % 2] = ticket;
        o->ring_partial[u] = !final;
        /* the slot is free once this copy is done: the unit two below, whose slot it is, may come back into it */
        if (tt_optimizer_offload_unit_streamed(o, u - 2) && o->ring_partial[u - 2]) load_partial(o, u - 2);
        if (!final) return;
    }
    struct tt_optimizer_offload_worker *w = o->worker;
    pthread_mutex_lock(&w->lock);
    TT_CHECK(unit->phase == UNIT_IDLE, "unit %lld's gradients arrive twice in one step", (long long)u);
    unit->gradient_copy = ticket;
    unit->phase = UNIT_QUEUED;
    unit->stamped = w->scale_known;
    unit->scalars = w->scalars;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

void tt_optimizer_offload_hook(void *ctx, tt_hook_point point, int64_t u, bool train) {
    tt_optimizer_offload *o = ctx;
    switch (point) {
    case TT_HOOK_BEFORE_FORWARD:
        tt_optimizer_offload_before_forward(o, u);
        /* decoder layer u - 1's weight stream prefetches layer u, which reads its home: after its CPU update */
        if (u >= 1 && u <= o->num_layers && tt_weight_stream_has(&o->state->weight_offload, u))
            tt_optimizer_offload_before_forward(o, u + 1);
        return;
    case TT_HOOK_BEFORE_GRADIENTS: tt_optimizer_offload_before_backward(o, u); return;
    case TT_HOOK_AFTER_BACKWARD: tt_optimizer_offload_after_backward(o, u); return;
    case TT_HOOK_AFTER_FORWARD:
    case TT_HOOK_BEFORE_BACKWARD: return;
    }
}

void tt_optimizer_offload_update(tt_optimizer_offload *o, const tt_adamw_settings *settings, float lr, int64_t step,
                                 float grad_scale) {
    tt_model_state *s = o->state;
    tt_compute_tier_adamw(s, settings, lr, step, grad_scale); /* the compute tier's share, as without offload */
    if (o->host_numel == 0) return;
    struct tt_optimizer_offload_worker *w = o->worker;
    if (w && w->armed) {
        TT_CHECK(w->learning_rate == lr && w->step == step, "the update is the one armed");
        TT_CHECK(w->clipping || grad_scale == 1.0f, "no clipping, no scale");
        w->armed = false;
        pthread_mutex_lock(&w->lock);
        if (w->clipping) {
            w->scalars = tt_adamw_scalars_for(lr, settings->beta1, settings->beta2, settings->epsilon,
                                              settings->weight_decay, step, grad_scale);
            w->scale_known = true;
            for (int64_t u = o->first_host_unit; u < o->end_unit; u++)
                if (o->units[u].phase == UNIT_QUEUED && !o->units[u].stamped) {
                    o->units[u].scalars = w->scalars;
                    o->units[u].stamped = true;
                }
            pthread_cond_broadcast(&w->changed);
        }
        pthread_mutex_unlock(&w->lock);
        /* the next step zeroes the gradients on the compute stream: after the copies out have read them */
        for (int64_t u = o->first_host_unit; u < o->end_unit; u++)
            if (unit_on_host(o, u)) tt_backend_copy_wait(o->backend, o->units[u].gradient_copy);
        copy_back_updated(o);
        return;
    }
    /* After the backward, synchronously: the share's gradients out, the CPU AdamW, the weights back. */
    tt_optimizer_offload_finish(o);
    const uint64_t out = tt_backend_copy_async(o->backend, o->gradients, o->device_gradients,
                                               (size_t)o->host_numel * o->gradient_bytes, true, 0);
    tt_backend_copy_host_wait(o->backend, out);
    const tt_adamw_scalars scalars = tt_adamw_scalars_for(lr, settings->beta1, settings->beta2, settings->epsilon,
                                                          settings->weight_decay, step, grad_scale);
    update_host_range(o, o->host_segments, o->host_segment_start, o->host_segment_decays, &scalars);
    /* unit by unit (weight-offloaded units have theirs in place already); the copy stream runs them in order, so
     * the last one's completion is everyone's */
    uint64_t back = 0;
    for (int64_t u = o->first_host_unit; u < o->end_unit; u++)
        if (unit_on_host(o, u) && !unit_weights_offloaded(o, u))
            back = tt_backend_copy_async(o->backend, unit_device_weights(o, u), unit_host_weights(o, &o->units[u]),
                                         (size_t)(o->units[u].end - o->units[u].start) * o->weight_bytes, false, out);
    tt_backend_copy_wait(o->backend, back);          /* the next forward reads them; the host goes on */
    o->units[o->first_host_unit].weight_copy = back; /* finish() waits for it on the host */
}

void tt_optimizer_offload_finish(tt_optimizer_offload *o) {
    if (!o || o->host_numel == 0) return;
    if (o->worker) {
        for (int64_t u = o->first_host_unit; u < o->end_unit; u++)
            if (unit_on_host(o, u) && !wait_for_unit(o, u)) {
                /* its update never came (the step stopped before it): it stays as it was */
                pthread_mutex_lock(&o->worker->lock);
                o->units[u].phase = UNIT_IDLE;
                pthread_mutex_unlock(&o->worker->lock);
            }
        copy_back_updated(o);
    }
    for (int64_t u = o->first_host_unit; u < o->end_unit; u++)
        if (o->units[u].weight_copy) {
            tt_backend_copy_host_wait(o->backend, o->units[u].weight_copy);
            o->units[u].weight_copy = 0;
        }
}

void tt_optimizer_offload_describe(const tt_optimizer_offload *o, char *buf, size_t size) {
    buf[0] = 0;
    if (!o || o->adamw_parameters == 0 || o->adamw_seconds <= 0) return;
    snprintf(buf, size,
             "CPU AdamW (%s, %d threads): %.2f GB/s (read + written) over %.3fM parameters per step, %.3f s in %lld "
             "parameter updates",
             tt_cpu_adamw_isa_name(tt_cpu_adamw_pool_isa(o->pool)), tt_cpu_adamw_pool_threads(o->pool),
             o->adamw_bytes / o->adamw_seconds / 1e9, (double)o->host_numel / 1e6, o->adamw_seconds,
             (long long)o->adamw_parameters);
}
