#include "ops/cuda/copy_engine_cuda.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/trace.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_check.h"

/* One copy: its events on the copy stream and what it moved. */
typedef struct copy_record {
    uint64_t ticket; /* 0: slot unused */
    cudaEvent_t started, done;
    size_t bytes;
    bool to_host;
} copy_record;

/* One compute-stream wait: events before and after it, whose distance is the time the compute
 * stream stood still. */
typedef struct wait_record {
    bool pending;
    cudaEvent_t before, after;
} wait_record;

struct tt_cuda_copy_engine {
    cudaStream_t compute, to_host, to_device;
    cudaEvent_t compute_mark; /* re-recorded before each copy: a wait takes the latest record */
    copy_record copies[TT_CUDA_COPY_WINDOW];
    wait_record waits[TT_CUDA_COPY_WINDOW];
    uint64_t issued, waits_issued;
    pthread_mutex_t lock; /* the ring, against the disk IO thread's host waits */
    unsigned delay_max_us;
    unsigned delay_seed;
    size_t bytes_to_host, bytes_to_device;
    double copy_seconds, exposed_seconds;
    /* the timeline: an event the host saw complete at a known CLOCK_MONOTONIC time, and marks */
    cudaEvent_t origin;
    double origin_seconds;
    cudaEvent_t *marks; /* [TT_TIMELINE_WINDOW], created on first use (only traced runs pay) */
    uint64_t marks_made;
};

tt_cuda_copy_engine *tt_cuda_copy_engine_create(cudaStream_t compute) {
    tt_cuda_copy_engine *engine = tt_xcalloc(1, sizeof *engine, "the copy engine");
    pthread_mutex_init(&engine->lock, NULL);
    engine->compute = compute;
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&engine->to_host, cudaStreamNonBlocking));
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&engine->to_device, cudaStreamNonBlocking));
    TT_CUDA_CHECK(cudaEventCreateWithFlags(&engine->compute_mark, cudaEventDisableTiming));
    for (int i = 0; i < TT_CUDA_COPY_WINDOW; i++) {
        TT_CUDA_CHECK(cudaEventCreate(&engine->copies[i].started));
        TT_CUDA_CHECK(cudaEventCreate(&engine->copies[i].done));
        TT_CUDA_CHECK(cudaEventCreate(&engine->waits[i].before));
        TT_CUDA_CHECK(cudaEventCreate(&engine->waits[i].after));
    }
    engine->delay_seed = 12345;
    TT_CUDA_CHECK(cudaEventCreate(&engine->origin));
    TT_CUDA_CHECK(cudaEventRecord(engine->origin, compute));
    TT_CUDA_CHECK(cudaEventSynchronize(engine->origin));
    engine->origin_seconds = tt_monotonic_seconds();
    return engine;
}

void tt_cuda_copy_engine_destroy(tt_cuda_copy_engine *engine) {
    if (!engine) return;
    TT_CUDA_CHECK(cudaStreamSynchronize(engine->to_host));
    TT_CUDA_CHECK(cudaStreamSynchronize(engine->to_device));
    for (int i = 0; i < TT_CUDA_COPY_WINDOW; i++) {
        TT_CUDA_CHECK(cudaEventDestroy(engine->copies[i].started));
        TT_CUDA_CHECK(cudaEventDestroy(engine->copies[i].done));
        TT_CUDA_CHECK(cudaEventDestroy(engine->waits[i].before));
        TT_CUDA_CHECK(cudaEventDestroy(engine->waits[i].after));
    }
    if (engine->marks)
        for (int i = 0; i < TT_TIMELINE_WINDOW; i++) TT_CUDA_CHECK(cudaEventDestroy(engine->marks[i]));
    free(engine->marks);
    TT_CUDA_CHECK(cudaEventDestroy(engine->origin));
    TT_CUDA_CHECK(cudaEventDestroy(engine->compute_mark));
    TT_CUDA_CHECK(cudaStreamDestroy(engine->to_host));
    TT_CUDA_CHECK(cudaStreamDestroy(engine->to_device));
    pthread_mutex_destroy(&engine->lock);
    free(engine);
}

/* An event's time in CLOCK_MONOTONIC seconds (the event is complete). */
static double event_seconds(const tt_cuda_copy_engine *engine, cudaEvent_t event) {
    float ms = 0;
    TT_CUDA_CHECK(cudaEventElapsedTime(&ms, engine->origin, event));
    return engine->origin_seconds + 1e-3 * (double)ms;
}

uint64_t tt_cuda_timestamp(tt_cuda_copy_engine *engine) {
    if (!engine->marks) {
        engine->marks = tt_xcalloc(TT_TIMELINE_WINDOW, sizeof(cudaEvent_t), "timeline marks");
        for (int i = 0; i < TT_TIMELINE_WINDOW; i++) TT_CUDA_CHECK(cudaEventCreate(&engine->marks[i]));
    }
    const uint64_t id = ++engine->marks_made;
    TT_CUDA_CHECK(cudaEventRecord(engine->marks[id % TT_TIMELINE_WINDOW], engine->compute));
    return id;
}

double tt_cuda_timestamp_seconds(tt_cuda_copy_engine *engine, uint64_t id) {
    if (!id || id > engine->marks_made || engine->marks_made - id >= TT_TIMELINE_WINDOW) return NAN;
    cudaEvent_t mark = engine->marks[id % TT_TIMELINE_WINDOW];
    TT_CUDA_CHECK(cudaEventSynchronize(mark));
    return event_seconds(engine, mark);
}

bool tt_cuda_copy_span(tt_cuda_copy_engine *engine, uint64_t ticket, double *start, double *end) {
    pthread_mutex_lock(&engine->lock);
    copy_record *r = ticket && ticket <= engine->issued ? &engine->copies[ticket % TT_CUDA_COPY_WINDOW] : NULL;
    const bool known = r && r->ticket == ticket;
    if (known) {
        TT_CUDA_CHECK(cudaEventSynchronize(r->done));
        *start = event_seconds(engine, r->started);
        *end = event_seconds(engine, r->done);
    }
    pthread_mutex_unlock(&engine->lock);
    return known;
}

/* Adds a finished copy's duration and bytes to the totals (the host has seen it complete). */
static void account_copy(tt_cuda_copy_engine *engine, copy_record *r) {
    if (!r->ticket) return;
    TT_CUDA_CHECK(cudaEventSynchronize(r->done));
    float ms = 0;
    TT_CUDA_CHECK(cudaEventElapsedTime(&ms, r->started, r->done));
    engine->copy_seconds += 1e-3 * ms;
    *(r->to_host ? &engine->bytes_to_host : &engine->bytes_to_device) += r->bytes;
    r->ticket = 0;
}

static void account_wait(tt_cuda_copy_engine *engine, wait_record *w) {
    if (!w->pending) return;
    TT_CUDA_CHECK(cudaEventSynchronize(w->after));
    float ms = 0;
    TT_CUDA_CHECK(cudaEventElapsedTime(&ms, w->before, w->after));
    engine->exposed_seconds += 1e-3 * ms;
    w->pending = false;
}

/* The record of a ticket still in the window, or NULL when the ticket is older (and done). */
static copy_record *record_of(tt_cuda_copy_engine *engine, uint64_t ticket) {
    TT_CHECK(ticket <= engine->issued, "copy ticket %llu not issued yet (last %llu)", (unsigned long long)ticket,
             (unsigned long long)engine->issued);
    copy_record *r = &engine->copies[ticket % TT_CUDA_COPY_WINDOW];
    return r->ticket == ticket ? r : NULL;
}

uint64_t tt_cuda_copy_async(tt_cuda_copy_engine *engine, void *dst, const void *src, size_t bytes, bool to_host,
                            uint64_t after) {
    cudaStream_t stream = to_host ? engine->to_host : engine->to_device;
    TT_CUDA_CHECK(cudaEventRecord(engine->compute_mark, engine->compute));
    TT_CUDA_CHECK(cudaStreamWaitEvent(stream, engine->compute_mark, 0));
    pthread_mutex_lock(&engine->lock);
    if (after) {
        copy_record *before = record_of(engine, after);
        if (before) TT_CUDA_CHECK(cudaStreamWaitEvent(stream, before->done, 0));
    }
    const uint64_t ticket = ++engine->issued;
    copy_record *r = &engine->copies[ticket % TT_CUDA_COPY_WINDOW];
    account_copy(engine, r); /* the copy that held this slot, TT_CUDA_COPY_WINDOW tickets ago */
    if (engine->delay_max_us) {
        const unsigned us = (unsigned)(rand_r(&engine->delay_seed) % (engine->delay_max_us + 1));
        tt_cuda_idle(stream, 1000ull * us);
    }
    TT_CUDA_CHECK(cudaEventRecord(r->started, stream));
    if (bytes)
        TT_CUDA_CHECK(
            cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream));
    TT_CUDA_CHECK(cudaEventRecord(r->done, stream));
    r->ticket = ticket;
    r->bytes = bytes;
    r->to_host = to_host;
    pthread_mutex_unlock(&engine->lock);
    return ticket;
}

void tt_cuda_copy_wait(tt_cuda_copy_engine *engine, uint64_t ticket) {
    if (!ticket) return;
    pthread_mutex_lock(&engine->lock);
    copy_record *r = record_of(engine, ticket);
    if (r) {
        wait_record *w = &engine->waits[++engine->waits_issued % TT_CUDA_COPY_WINDOW];
        account_wait(engine, w);
        TT_CUDA_CHECK(cudaEventRecord(w->before, engine->compute));
        TT_CUDA_CHECK(cudaStreamWaitEvent(engine->compute, r->done, 0));
        TT_CUDA_CHECK(cudaEventRecord(w->after, engine->compute));
        w->pending = true;
    }
    pthread_mutex_unlock(&engine->lock);
}

void tt_cuda_copy_host_wait(tt_cuda_copy_engine *engine, uint64_t ticket) {
    if (!ticket) return;
    pthread_mutex_lock(&engine->lock);
    copy_record *r = record_of(engine, ticket);
    /* The event outlives reuse of its slot: waiting on a later copy of the same slot only waits longer. */
    cudaEvent_t done = r ? r->done : NULL;
    pthread_mutex_unlock(&engine->lock);
    if (done) TT_CUDA_CHECK(cudaEventSynchronize(done));
}

bool tt_cuda_copy_done(tt_cuda_copy_engine *engine, uint64_t ticket) {
    if (!ticket) return true;
    pthread_mutex_lock(&engine->lock);
    copy_record *r = record_of(engine, ticket);
    cudaEvent_t done = r ? r->done : NULL;
    pthread_mutex_unlock(&engine->lock);
    if (!done) return true; /* older than the window: done long ago */
    const cudaError_t status = cudaEventQuery(done);
    if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
    }
    TT_CUDA_CHECK(status);
    return true;
}

void tt_cuda_copy_set_delay(tt_cuda_copy_engine *engine, unsigned max_us) { engine->delay_max_us = max_us; }

void tt_cuda_copy_stats(tt_cuda_copy_engine *engine, size_t *to_host, size_t *to_device, double *copy_seconds,
                        double *exposed_seconds) {
    pthread_mutex_lock(&engine->lock);
    for (int i = 0; i < TT_CUDA_COPY_WINDOW; i++) {
        account_copy(engine, &engine->copies[i]);
        account_wait(engine, &engine->waits[i]);
    }
    *to_host = engine->bytes_to_host;
    *to_device = engine->bytes_to_device;
    *copy_seconds = engine->copy_seconds;
    *exposed_seconds = engine->exposed_seconds;
    pthread_mutex_unlock(&engine->lock);
}
