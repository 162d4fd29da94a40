/* Attention outputs offloaded instead of recomputed. Under checkpointing a layer's backward first recomputes its
 * forward, attention included, whose cost grows with the square of the sequence while its output grows linearly: at
 * long context the attention forward is the larger part of the recompute (Qwen3-1.7B at 64k: about an eighth of the
 * step). Keeping a checkpointed layer's attention output and log-sum-exp in pinned host memory between its forward
 * and its backward (what selective_checkpointing {save: [attention], offload: true} asks for), copied on the copy
 * engine's streams while the layers compute, spares that recompute; the GPU holds the kept activations' staging ring
 * (plan.saved_ring buffers) more, and the
 * kept tensors have the recomputed ones' bits, so the run's bits do not change.
 *
 * Where it is worth it: the attention forward of T tokens takes 2 T^2 H d FLOPs and its output 2 T H d bytes, so the
 * forward takes T x (copy bandwidth / attention rate) times the copy's time: on the H100, 53 GB/s pinned and about
 * 600 TFLOP/s, the forward is the longer from T of about 11k tokens. Below TT_ATTENTION_OFFLOAD_MIN_TOKENS the
 * saving is small and the host memory and the link are left to what the run asked for. */
#ifndef TT_MEMORY_ATTENTION_OFFLOAD_H
#define TT_MEMORY_ATTENTION_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "memory/plan.h"
#include "memory/size_table.h"

#define TT_ATTENTION_OFFLOAD_MIN_TOKENS 16384

/* On a plan whose compute tier is the GPU and whose queries each attend to at least TT_ATTENTION_OFFLOAD_MIN_TOKENS
 * keys (attention_span: the sequence, or a sliding window when it is shorter; the recompute's cost grows with it, the
 * copy's does not): from the top layer down, the layers that recompute everything on the compute tier (no offloaded
 * slot) switch to keep their attention output and log-sum-exp in pinned memory and recompute the rest, as many as
 * fit: every tier's peak, priced by the pricer, within gpu_budget and pinned_budget (0: unlimited). Nothing where
 * any layer input or kept activation is on the disk tier, nor with packed documents (each attends within its own
 * document: the span is not known from the plan). Returns how many layers switched. */
int64_t tt_plan_offload_attention(tt_plan *plan, const tt_plan_pricer *pricer, size_t gpu_budget, size_t pinned_budget,
                                  int64_t attention_span);

/* The keys a query attends to at most: the whole sequence (with sequence parallel every rank's tokens, as the
 * attention sees them after the exchange), or the sliding window (> 0) when it is shorter. */
int64_t tt_attention_span(const tt_plan *plan, int64_t sliding_window);

#endif
