/* The CUDA side of the copy engine and of the trace's timeline (see copy_async in ops/backend.h): two copy streams, one per
 * direction, beside the compute stream, and a ring of per-copy events; one engine per CUDA backend. Ordering
 * guarantees:
 *   - a copy starts after every op issued on the compute stream before it, and after the copy
 *     named as `after` (on either stream);
 *   - copies of one direction run in issue order;
 *   - tt_cuda_copy_wait makes the compute stream wait for a copy without blocking the host;
 *   - tt_cuda_copy_host_wait may be called from any thread (the disk IO thread waits for a
 *     copy into its staging buffer this way).
 * A ticket's events are reused TT_CUDA_COPY_WINDOW copies later, after the host has seen them
 * complete (which also records the copy's duration), so a ticket older than that is done. */
#ifndef TT_OPS_CUDA_COPY_ENGINE_CUDA_H
#define TT_OPS_CUDA_COPY_ENGINE_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TT_CUDA_COPY_WINDOW 256

typedef struct tt_cuda_copy_engine tt_cuda_copy_engine;

/* The engine beside the compute stream `compute` (on the current device); destroy after the streams are idle. */
tt_cuda_copy_engine *tt_cuda_copy_engine_create(cudaStream_t compute);
void tt_cuda_copy_engine_destroy(tt_cuda_copy_engine *engine);

uint64_t tt_cuda_copy_async(tt_cuda_copy_engine *engine, void *dst, const void *src, size_t bytes, bool to_host,
                            uint64_t after);
void tt_cuda_copy_wait(tt_cuda_copy_engine *engine, uint64_t ticket);
void tt_cuda_copy_host_wait(tt_cuda_copy_engine *engine, uint64_t ticket);
bool tt_cuda_copy_done(tt_cuda_copy_engine *engine, uint64_t ticket);
void tt_cuda_copy_set_delay(tt_cuda_copy_engine *engine, unsigned max_us);
void tt_cuda_copy_stats(tt_cuda_copy_engine *engine, size_t *to_host, size_t *to_device, double *copy_seconds,
                        double *exposed_seconds);

/* The timeline (see timestamp in ops/backend.h): events on the compute stream, converted to
 * CLOCK_MONOTONIC seconds through an origin event the host saw complete at start. */
uint64_t tt_cuda_timestamp(tt_cuda_copy_engine *engine);
double tt_cuda_timestamp_seconds(tt_cuda_copy_engine *engine, uint64_t id);
bool tt_cuda_copy_span(tt_cuda_copy_engine *engine, uint64_t ticket, double *start, double *end);

/* Idles `stream` for about `nanoseconds` (one thread spinning on the global timer). */
void tt_cuda_idle(cudaStream_t stream, uint64_t nanoseconds);

#ifdef __cplusplus
}
#endif

#endif
