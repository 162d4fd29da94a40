/* Causal grouped-query fused attention through cuDNN's C backend API.
 *
 * cuDNN's fused flash-attention engines do not take an "attention" operation in 9.x (the single
 * SDPA node has no causal mask); they pattern-match an operation graph of matmuls, pointwise ops
 * and reductions, the same graph cudnn-frontend lowers its SDPA nodes to. A graph that differs
 * from that pattern in a node, a data type or an order of operands gets no engine, so the graphs
 * below follow the frontend's lowering closely, including details that look arbitrary (which
 * virtual tensors are bf16, the reshape views, the multiply by one in the backward graph).
 *
 * Forward (training mode), tensors as [batch, heads, rows, cols]:
 *   S = Q K^T; S *= scale; [soft-capping: S = cap * tanh(S / cap)]; causal mask (row >= col, else -inf);
 *   [sliding window: col + window > row, else -inf]; M = rowmax(S);
 *   E = exp(S - M); Z = rowsum(E); lse = M + log(Z); P = E / Z (bf16); O = P V.
 * Backward:
 *   Dsum = rowsum(dO * O) * 1; S = Q K^T * scale [soft-capped]; causal [and window] mask; P = exp(S - lse);
 *   dV = P^T dO; dP = dO V^T; dS = (dP - Dsum) * P [* (1 - tanh^2(S / cap))] * scale; dK = dS^T Q; dQ = dS K.
 * The window and the soft-capping are built as cudnn-frontend's composite diagonal-band mask and its Softcap score
 * modifier lower them (the node order there is what the engines match).
 * With grouped-query heads, K and V broadcast over the query heads of their group in the matmuls,
 * and dK, dV come from per-query-head bf16 products summed over the group by a reduction.
 *
 * Determinism: the default backward graph accumulates dQ in an fp32 tensor that cuDNN's engine
 * adds into from several key blocks at once (atomics: not bitwise reproducible), then converts
 * it to bf16. The deterministic graph writes dQ straight from the matmul; on Hopper that selects
 * the engine that keeps the whole bf16 dP matrix in the workspace and needs no atomics (what
 * cudnn-frontend's sdpa_backward set_deterministic_algorithm does on sm90; cuDNN >= 8.9.5). */
#include "ops/cuda/attention_cudnn.h"

#include <cudnn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/cuda/cuda_check.h"

/* The oldest cuDNN this accepts: cudnn-frontend refuses the bf16 SDPA backward on 9.10.0 and
 * 9.10.1 (known bugs), and before 9.10 the backward graph needs a second padding mask and a
 * different mask value that are not built here. */
#define OLDEST_CUDNN_VERSION 91002
/* Up to this version the backward engine misbehaves when T is not a multiple of 128 unless the
 * graph carries a padding mask (with actual lengths = T); cudnn-frontend adds the same one. */
#define PADDING_WORKAROUND_LAST_VERSION 91500

/* Unique ids of the tensors that live in memory (the variant pack names them); virtual tensors,
 * which never leave the engine, are numbered from FIRST_VIRTUAL_UID. */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_ATTN_SCALE,
    UID_ONE,
    UID_NEG_INF_CAUSAL,
    UID_NEG_INF_PADDING,
    UID_SOFTMAX_SUM,
    UID_DQ_ACCUMULATOR,
    UID_SEQ_LEN_Q,
    UID_SEQ_LEN_KV,
    UID_WINDOW,
    UID_NEG_INF_WINDOW,
    UID_SOFTCAP,
    FIRST_VIRTUAL_UID = 1000,
};

#define MAX_GRAPH_OPS 64
#define MAX_PACK_TENSORS 20
#define WORKSPACE_ALIGNMENT 256

/* Every descriptor a plan made; destroyed together, newest first. */
typedef struct descriptor_list {
    cudnnBackendDescriptor_t *items;
    int count, capacity;
} descriptor_list;

static void descriptor_list_add(descriptor_list *list, cudnnBackendDescriptor_t descriptor) {
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? 2 * list->capacity : 128;
        list->items = tt_xrealloc(list->items, sizeof(*list->items) * (size_t)list->capacity, "cuDNN descriptors");
    }
    list->items[list->count++] = descriptor;
}

static void descriptor_list_destroy(descriptor_list *list) {
    for (int i = list->count - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(list->items[i]);
    free(list->items);
    *list = (descriptor_list){0};
}

/* One execution plan. */
typedef struct attention_plan {
    descriptor_list owned;
    cudnnBackendDescriptor_t plan;
    int64_t workspace_bytes;
    int64_t engine_index;
    bool engine_nondeterministic;
} attention_plan;

/* The variant pack of one call site's last call (rebuilt when a pointer changes): the forward's, and one per head
 * group and key chunk of the backward, so that calls with the same pointers (a recomputed layer's, step after step)
 * build none, whichever plan they share. */
typedef struct pack_cache {
    cudnnBackendDescriptor_t variant_pack;
    int count;
    int64_t uids[MAX_PACK_TENSORS];
    void *pointers[MAX_PACK_TENSORS];
    void *workspace;
} pack_cache;

static void attention_plan_destroy(attention_plan *p);

struct tt_cudnn_attention {
    tt_attention_shape shape;
    size_t dp_limit; /* dP bytes the deterministic backward may keep per call */
    cudnnHandle_t handle;
    attention_plan forward;
    /* The backward plans: one, or where one kv head's group over the whole sequence is over the dP
     * limit, one per chunk of keys: keys [chunk_start, chunk_start + chunk_len) against queries
     * [chunk_start, T), dQ written per chunk in bf16 and summed in chunk order in an fp32 scratch.
     * (A graph with an fp32 dQ finalizes but selects an engine mode that then asks for a dQ pointer
     * the graph does not have: cuDNN 9.14, CUDNN_STATUS_BAD_PARAM_NULL_POINTER "dq_ptr".)
     * [chunks] each. */
    attention_plan *backward;
    int64_t chunks;
    int64_t *chunk_start, *chunk_len;
    /* the queries each chunk's call covers from chunk_start on: T - chunk_start, or with a sliding window only those
     * that see one of the chunk's keys (rounded up to 128, at most T - chunk_start) */
    int64_t *chunk_queries;
    /* the plan each chunk runs: the first chunk of the same queries and keys (their plans are the same; a window's
     * chunks share one or two) */
    int64_t *chunk_plan;
    pack_cache forward_pack;
    pack_cache *backward_packs; /* [slices * chunks]: head group s's chunk c at s * chunks + c */
    bool deterministic_graph;
    bool padding_workaround;
    /* The deterministic backward keeps a [B, heads, T, T] bf16 dP in its workspace, so it runs on
     * groups of slice_kv_heads kv heads (and their query heads) at a time, one call per group,
     * with the same strides into the full tensors: the workspace holds one group's dP. */
    int64_t slice_heads, slice_kv_heads, slices;
    int32_t *seq_lens; /* device [2][B]: actual query and key lengths (= T) for the padding mask */
    /* by-value scalars: the variant pack points at them */
    float attn_scale, negative_infinity, one;
    float window, softcap; /* the sliding window (keys) and the soft-capping, as the graphs read them; 0: none */
    /* Backward workspace: [softmax_sum fp32 B*Hq*T | dQ accumulator (atomic graph) | lane 0 | lane 1 | ...]. A
     * lane runs head groups one after another on its own stream with its own share: [engine workspace |
     * with key chunks: the group's dQ sum fp32 and one chunk's dQ bf16, B*T*Hs*hd]. Offsets of the share are
     * from its start. Groups touch disjoint heads, so lanes change no bits. */
    size_t softmax_sum_offset, dq_accumulator_offset, first_lane_offset, lane_bytes, dq_sum_offset, dq_partial_offset,
        backward_workspace_bytes, workspace_bytes;
    int max_lanes, most_lanes_run;
    cudaStream_t lane_stream[TT_CUDNN_ATTENTION_MAX_LANES];
    cudaEvent_t fork, lane_done[TT_CUDNN_ATTENTION_MAX_LANES];
    char description[512];
    char forward_description[192]; /* the forward's part of it */
};

static void cudnn_version_text(size_t version, char *buf, size_t size) {
    snprintf(buf, size, "%zu.%zu.%zu", version / 10000, (version % 10000) / 100, version % 100);
}

const char *tt_cudnn_version_string(char *text, size_t size) {
    char runtime[32], headers[32];
    cudnn_version_text(cudnnGetVersion(), runtime, sizeof runtime);
    cudnn_version_text((size_t)CUDNN_VERSION, headers, sizeof headers);
    snprintf(text, size, "%s (built against %s)", runtime, headers);
    return text;
}

/* cuDNN's explanation of the last failure, on one line. */
static void last_cudnn_error(char *buf, size_t size) {
    buf[0] = 0;
    cudnnGetLastErrorString(buf, size);
    for (char *c = buf; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
}

/* ---------------------------------------------------------------------------------------------
 * Graph building. The first failure is recorded (which graph, which descriptor, which attribute,
 * cuDNN's status and its last error string) and every later call returns at once, so the
 * builders read as straight-line code and the reason names the first thing that went wrong. */

typedef struct graph_builder {
    const char *graph; /* "forward" / "backward" */
    descriptor_list *owned;
    cudnnBackendDescriptor_t ops[MAX_GRAPH_OPS];
    int op_count;
    int64_t next_virtual_uid;
    bool failed;
    char why[1024];
} graph_builder;

static void record_reason(graph_builder *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record_reason(graph_builder *g, const char *fmt, ...) {
    if (g->failed) return;
    g->failed = true;
    int n = snprintf(g->why, sizeof g->why, "%s graph: ", g->graph);
    va_list args;
    va_start(args, fmt);
    vsnprintf(g->why + n, sizeof g->why - (size_t)n, fmt, args);
    va_end(args);
}

static void record_status(graph_builder *g, cudnnStatus_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void record_status(graph_builder *g, cudnnStatus_t status, const char *fmt, ...) {
    if (g->failed) return;
    char where[384], detail[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(where, sizeof where, fmt, args);
    va_end(args);
    last_cudnn_error(detail, sizeof detail);
    record_reason(g, "%s: %s (%d)%s%s", where, cudnnGetErrorString(status), (int)status, detail[0] ? ": " : "", detail);
}

static cudnnBackendDescriptor_t new_descriptor(graph_builder *g, cudnnBackendDescriptorType_t type, const char *what) {
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t descriptor = NULL;
    cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &descriptor);
    if (status != CUDNN_STATUS_SUCCESS) {
        record_status(g, status, "%s: cudnnBackendCreateDescriptor", what);
        return NULL;
    }
    descriptor_list_add(g->owned, descriptor);
    return descriptor;
}

static void set_attribute(graph_builder *g, cudnnBackendDescriptor_t descriptor, const char *what,
                          const char *attribute_name, cudnnBackendAttributeName_t attribute,
                          cudnnBackendAttributeType_t type, int64_t count, const void *values) {
    if (g->failed) return;
    cudnnStatus_t status = cudnnBackendSetAttribute(descriptor, attribute, type, count, values);
    if (status != CUDNN_STATUS_SUCCESS) record_status(g, status, "%s: set %s", what, attribute_name);
}
#define SET_ATTRIBUTE(g, descriptor, what, attribute, type, count, values) \
    set_attribute((g), (descriptor), (what), #attribute, (attribute), (type), (count), (values))

static void finalize(graph_builder *g, cudnnBackendDescriptor_t descriptor, const char *what) {
    if (g->failed) return;
    cudnnStatus_t status = cudnnBackendFinalize(descriptor);
    if (status != CUDNN_STATUS_SUCCESS) record_status(g, status, "%s: cudnnBackendFinalize", what);
}

typedef struct tensor_shape {
    int64_t dims[4], strides[4];
} tensor_shape;

static cudnnBackendDescriptor_t make_tensor(graph_builder *g, const char *name, int64_t uid, cudnnDataType_t type,
                                            tensor_shape shape, bool is_virtual, bool by_value) {
    char what[128];
    snprintf(what, sizeof what, "tensor '%s' (uid %lld)", name, (long long)uid);
    cudnnBackendDescriptor_t t = new_descriptor(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    int64_t alignment = 16; /* tensor-core engines need 16-byte aligned rows */
    SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, shape.dims);
    SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, shape.strides);
    SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    bool yes = true;
    if (is_virtual) SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (by_value) SET_ATTRIBUTE(g, t, what, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    finalize(g, t, what);
    return t;
}

static cudnnBackendDescriptor_t virtual_tensor(graph_builder *g, const char *name, cudnnDataType_t type,
                                               tensor_shape shape) {
    return make_tensor(g, name, g->next_virtual_uid++, type, shape, true, false);
}

/* An fp32 scalar passed by value (the variant pack points at host memory), broadcast to all. */
static cudnnBackendDescriptor_t scalar_tensor(graph_builder *g, const char *name, int64_t uid) {
    tensor_shape one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    return make_tensor(g, name, uid, CUDNN_DATA_FLOAT, one, false, true);
}

static void add_op(graph_builder *g, cudnnBackendDescriptor_t op) {
    if (g->failed) return;
    TT_CHECK(g->op_count < MAX_GRAPH_OPS, "more than %d ops in the cuDNN %s graph", MAX_GRAPH_OPS, g->graph);
    g->ops[g->op_count++] = op;
}

/* y = mode(x, b, t); axis >= 0 only for GEN_INDEX. TANH_BWD: y = dx = b (dy) * (1 - tanh^2(x)). */
static void pointwise(graph_builder *g, const char *name, cudnnPointwiseMode_t mode, cudnnDataType_t math_precision,
                      int64_t axis, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y) {
    char what[128];
    snprintf(what, sizeof what, "op '%s' (pointwise mode %d) descriptor", name, (int)mode);
    cudnnBackendDescriptor_t desc = new_descriptor(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math_precision);
    if (axis >= 0) SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, desc, what);

    snprintf(what, sizeof what, "op '%s' (pointwise mode %d)", name, (int)mode);
    cudnnBackendDescriptor_t op = new_descriptor(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (mode == CUDNN_POINTWISE_TANH_BWD) { /* an activation's backward: b is dy, y is dx */
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    } else {
        if (b) SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        if (t) SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    }
    float alpha = 1.0f;
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    finalize(g, op, what);
    add_op(g, op);
}

/* c = a b over the last two dims, batch dims broadcast (grouped-query heads); the overrides are
 * the actual-length tensors of the padding workaround, or NULL. */
static void matmul(graph_builder *g, const char *name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m_override, cudnnBackendDescriptor_t n_override,
                   cudnnBackendDescriptor_t k_override) {
    char what[128];
    snprintf(what, sizeof what, "op '%s' (matmul) descriptor", name);
    cudnnBackendDescriptor_t desc = new_descriptor(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(g, desc, what);

    snprintf(what, sizeof what, "op '%s' (matmul)", name);
    cudnnBackendDescriptor_t op = new_descriptor(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
    if (m_override)
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &m_override);
    if (n_override)
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &n_override);
    if (k_override)
        SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                      &k_override);
    finalize(g, op, what);
    add_op(g, op);
}

/* y = reduce(x) over the dims where y has extent 1. */
static void reduction(graph_builder *g, const char *name, cudnnReduceTensorOp_t operation, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y) {
    char what[128];
    snprintf(what, sizeof what, "op '%s' (reduction) descriptor", name);
    cudnnBackendDescriptor_t desc = new_descriptor(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    SET_ATTRIBUTE(g, desc, what, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &operation);
    finalize(g, desc, what);

    snprintf(what, sizeof what, "op '%s' (reduction)", name);
    cudnnBackendDescriptor_t op = new_descriptor(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
    finalize(g, op, what);
    add_op(g, op);
}

/* y is x seen through other dims and strides (the transposed views of the backward graph). */
static void reshape(graph_builder *g, const char *name, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    char what[128];
    snprintf(what, sizeof what, "op '%s' (reshape)", name);
    cudnnBackendDescriptor_t op = new_descriptor(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET_ATTRIBUTE(g, op, what, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    finalize(g, op, what);
    add_op(g, op);
}

/* A mask's row and column indices of the scores: int32 with fp32 math, as cudnn-frontend's diagonal band mask builds
 * them (each mask its own, in the frontend's order: the engines match the graph node by node). */
static void score_indices(graph_builder *g, const char *mask, cudnnBackendDescriptor_t scores, tensor_shape shape,
                          cudnnBackendDescriptor_t *row, cudnnBackendDescriptor_t *col) {
    char name[64];
    snprintf(name, sizeof name, "%s gen_row_index", mask);
    *row = virtual_tensor(g, name, CUDNN_DATA_INT32, shape);
    pointwise(g, name, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, scores, NULL, NULL, *row);
    snprintf(name, sizeof name, "%s gen_col_index", mask);
    *col = virtual_tensor(g, name, CUDNN_DATA_INT32, shape);
    pointwise(g, name, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, scores, NULL, NULL, *col);
}

/* The scores where keep holds, -inf (the scalar negative_infinity_uid) elsewhere: BINARY_SELECT, y = t ? x : b. */
static cudnnBackendDescriptor_t masked_scores(graph_builder *g, const char *mask, cudnnBackendDescriptor_t scores,
                                              cudnnBackendDescriptor_t keep, tensor_shape shape,
                                              int64_t negative_infinity_uid) {
    char name[64];
    snprintf(name, sizeof name, "-inf (%s mask)", mask);
    cudnnBackendDescriptor_t negative_infinity = scalar_tensor(g, name, negative_infinity_uid);
    snprintf(name, sizeof name, "%s select", mask);
    cudnnBackendDescriptor_t masked = virtual_tensor(g, name, CUDNN_DATA_FLOAT, shape);
    pointwise(g, name, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, scores, negative_infinity, keep, masked);
    return masked;
}

/* Top-left causal mask: scores where row >= col, -inf elsewhere (the comparison boolean). */
static cudnnBackendDescriptor_t causal_mask(graph_builder *g, cudnnBackendDescriptor_t scores, tensor_shape shape) {
    cudnnBackendDescriptor_t row, col;
    score_indices(g, "causal", scores, shape, &row, &col);
    cudnnBackendDescriptor_t keep = virtual_tensor(g, "causal row >= col", CUDNN_DATA_BOOLEAN, shape);
    pointwise(g, "causal row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep);
    return masked_scores(g, "causal", scores, keep, shape, UID_NEG_INF_CAUSAL);
}

/* Sliding window: scores where col + window > row (key j visible to query i iff i - j < window), -inf elsewhere;
 * after the causal mask, as cudnn-frontend's left-bound diagonal band (the window a float scalar, the sum in fp32). */
static cudnnBackendDescriptor_t window_mask(graph_builder *g, cudnnBackendDescriptor_t scores, tensor_shape shape) {
    cudnnBackendDescriptor_t row, col;
    score_indices(g, "window", scores, shape, &row, &col);
    cudnnBackendDescriptor_t window = scalar_tensor(g, "sliding window", UID_WINDOW);
    cudnnBackendDescriptor_t shifted = virtual_tensor(g, "col + window", CUDNN_DATA_FLOAT, shape);
    pointwise(g, "window col + window", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, -1, col, window, NULL, shifted);
    cudnnBackendDescriptor_t keep = virtual_tensor(g, "col + window > row", CUDNN_DATA_BOOLEAN, shape);
    pointwise(g, "window col + window > row", CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, -1, shifted, row, NULL, keep);
    return masked_scores(g, "window", scores, keep, shape, UID_NEG_INF_WINDOW);
}

/* y = mode(x, b) into a new fp32 virtual tensor of the scores' shape. */
static cudnnBackendDescriptor_t scores_pointwise(graph_builder *g, const char *name, cudnnPointwiseMode_t mode,
                                                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                                 tensor_shape shape) {
    cudnnBackendDescriptor_t y = virtual_tensor(g, name, CUDNN_DATA_FLOAT, shape);
    pointwise(g, name, mode, CUDNN_DATA_FLOAT, -1, x, b, NULL, y);
    return y;
}

/* Soft-capping of the scaled scores, cap * tanh(S / cap) (cap: the graph's one softcap scalar); *before_tanh
 * receives S / cap, which the backward's derivative reads. */
static cudnnBackendDescriptor_t softcap_forward(graph_builder *g, cudnnBackendDescriptor_t scores, tensor_shape shape,
                                                cudnnBackendDescriptor_t cap, cudnnBackendDescriptor_t *before_tanh) {
    *before_tanh = scores_pointwise(g, "div_by_soft_cap", CUDNN_POINTWISE_DIV, scores, cap, shape);
    cudnnBackendDescriptor_t t =
        scores_pointwise(g, "softcap tanh", CUDNN_POINTWISE_TANH_FWD, *before_tanh, NULL, shape);
    return scores_pointwise(g, "mul_by_soft_cap", CUDNN_POINTWISE_MUL, t, cap, shape);
}

/* The soft-capping's backward on dS: dS * cap, times 1 - tanh^2(S / cap), / cap (cudnn-frontend's order). */
static cudnnBackendDescriptor_t softcap_backward(graph_builder *g, cudnnBackendDescriptor_t ds, tensor_shape shape,
                                                 cudnnBackendDescriptor_t cap, cudnnBackendDescriptor_t before_tanh) {
    cudnnBackendDescriptor_t times_cap =
        scores_pointwise(g, "mul_by_soft_cap_bprop", CUDNN_POINTWISE_MUL, ds, cap, shape);
    /* TANH_BWD: x is tanh's input, b the incoming gradient */
    cudnnBackendDescriptor_t through_tanh =
        scores_pointwise(g, "dtanh", CUDNN_POINTWISE_TANH_BWD, before_tanh, times_cap, shape);
    return scores_pointwise(g, "div_by_soft_cap_bprop", CUDNN_POINTWISE_DIV, through_tanh, cap, shape);
}

/* The padding mask of the T % 128 workaround: scores where row < seq_len_q and col < seq_len_kv
 * (always true here: both lengths are T), -inf elsewhere. */
static cudnnBackendDescriptor_t padding_mask(graph_builder *g, cudnnBackendDescriptor_t scores, tensor_shape shape,
                                             cudnnBackendDescriptor_t seq_len_q, cudnnBackendDescriptor_t seq_len_kv) {
    cudnnBackendDescriptor_t row = virtual_tensor(g, "padding row index", CUDNN_DATA_INT32, shape);
    pointwise(g, "padding gen_row_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, scores, NULL, NULL, row);
    cudnnBackendDescriptor_t col = virtual_tensor(g, "padding column index", CUDNN_DATA_INT32, shape);
    pointwise(g, "padding gen_col_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, scores, NULL, NULL, col);
    cudnnBackendDescriptor_t row_in = virtual_tensor(g, "row < seq_len_q", CUDNN_DATA_BOOLEAN, shape);
    pointwise(g, "padding row < seq_len_q", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, -1, row, seq_len_q, NULL,
              row_in);
    cudnnBackendDescriptor_t col_in = virtual_tensor(g, "col < seq_len_kv", CUDNN_DATA_BOOLEAN, shape);
    pointwise(g, "padding col < seq_len_kv", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, -1, col, seq_len_kv, NULL,
              col_in);
    cudnnBackendDescriptor_t keep = virtual_tensor(g, "padding keep", CUDNN_DATA_BOOLEAN, shape);
    pointwise(g, "padding row and col", CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, -1, row_in, col_in, NULL,
              keep);
    return masked_scores(g, "padding", scores, keep, shape, UID_NEG_INF_PADDING);
}

/* The layouts of one shape. Our q is [B*T, Hq*hd] token-major: as [B, Hq, T, hd] its strides are
 * (T*Hq*hd, hd, Hq*hd, 1); K^T is k seen as [B, Hkv, hd, T]. */
typedef struct attention_layouts {
    tensor_shape q, k, k_transposed, v_transposed, scores, scores_transposed, row, per_query_head, per_query_head_keys,
        dout_times_out, dq_partial, seq_len;
} attention_layouts;

/* Hs query heads and Hks kv heads of the full H and Hk, Tq queries and Tk keys of the full T: dims
 * count the slice, the strides of tensors in memory (q, k, v, out, their gradients, lse) step over
 * the full tensors. dq_partial: a key chunk's dQ in the [B, T, Hs, D] scratch of one head group. */
static attention_layouts layouts_of(const tt_attention_shape *s, int64_t Hs, int64_t Hks, int64_t Tq, int64_t Tk) {
    const int64_t B = s->batch, H = s->num_heads, Hk = s->num_kv_heads, T = s->seq_len, D = s->head_dim;
    attention_layouts l = {
        .q = {{B, Hs, Tq, D}, {T * H * D, D, H * D, 1}},
        .k = {{B, Hks, Tk, D}, {T * Hk * D, D, Hk * D, 1}},
        .k_transposed = {{B, Hks, D, Tk}, {T * Hk * D, D, 1, Hk * D}},
        .v_transposed = {{B, Hks, D, Tk}, {T * Hk * D, D, 1, Hk * D}},
        .scores = {{B, Hs, Tq, Tk}, {Hs * Tq * Tk, Tq * Tk, Tk, 1}},
        .scores_transposed = {{B, Hs, Tk, Tq}, {Hs * Tq * Tk, Tq * Tk, 1, Tk}},
        .row = {{B, Hs, Tq, 1}, {H * T, T, 1, 1}},
        .per_query_head = {{B, Hs, Tq, D}, {Hs * Tq * D, Tq * D, D, 1}},
        .per_query_head_keys = {{B, Hs, Tk, D}, {Hs * Tk * D, Tk * D, D, 1}},
        /* the (overlapping, never materialized) strides cudnn-frontend gives this virtual tensor */
        .dout_times_out = {{B, Hs, Tq, D}, {Hs * Tq * D, Tq * D, Hs * D, 1}},
        .dq_partial = {{B, Hs, Tq, D}, {T * Hs * D, D, Hs * D, 1}},
        .seq_len = {{B, 1, 1, 1}, {1, 1, 1, 1}},
    };
    return l;
}

static void build_forward_graph(graph_builder *g, const tt_attention_shape *s) {
    attention_layouts l = layouts_of(s, s->num_heads, s->num_kv_heads, s->seq_len, s->seq_len);
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = make_tensor(g, "Q", UID_Q, bf16, l.q, false, false);
    cudnnBackendDescriptor_t kt = make_tensor(g, "K^T", UID_K, bf16, l.k_transposed, false, false);
    cudnnBackendDescriptor_t v = make_tensor(g, "V", UID_V, bf16, l.k, false, false);
    cudnnBackendDescriptor_t o = make_tensor(g, "O", UID_O, bf16, l.q, false, false);
    cudnnBackendDescriptor_t stats = make_tensor(g, "stats (lse)", UID_STATS, f32, l.row, false, false);
    cudnnBackendDescriptor_t scale = scalar_tensor(g, "attn_scale", UID_ATTN_SCALE);

    cudnnBackendDescriptor_t s1 = virtual_tensor(g, "Q K^T", f32, l.scores);
    matmul(g, "bmm1 Q K^T", q, kt, s1, NULL, NULL, NULL);
    cudnnBackendDescriptor_t s2 = virtual_tensor(g, "scaled scores", f32, l.scores);
    pointwise(g, "attn_scale", CUDNN_POINTWISE_MUL, f32, -1, s1, scale, NULL, s2);
    cudnnBackendDescriptor_t before_tanh = NULL;
    if (s->softcap != 0) s2 = softcap_forward(g, s2, l.scores, scalar_tensor(g, "softcap", UID_SOFTCAP), &before_tanh);
    cudnnBackendDescriptor_t s3 = causal_mask(g, s2, l.scores);
    if (s->sliding_window != 0) s3 = window_mask(g, s3, l.scores);

    cudnnBackendDescriptor_t max = virtual_tensor(g, "row max", f32, l.row);
    reduction(g, "softmax max", CUDNN_REDUCE_TENSOR_MAX, s3, max);
    cudnnBackendDescriptor_t shifted = virtual_tensor(g, "scores - max", f32, l.scores);
    pointwise(g, "softmax sub max", CUDNN_POINTWISE_SUB, f32, -1, s3, max, NULL, shifted);
    cudnnBackendDescriptor_t e = virtual_tensor(g, "exp(scores - max)", f32, l.scores);
    pointwise(g, "softmax exp", CUDNN_POINTWISE_EXP, f32, -1, shifted, NULL, NULL, e);
    cudnnBackendDescriptor_t sum = virtual_tensor(g, "row sum of exp", f32, l.row);
    reduction(g, "softmax sum", CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cudnnBackendDescriptor_t log_sum = virtual_tensor(g, "log(row sum)", f32, l.row);
    pointwise(g, "softmax log", CUDNN_POINTWISE_LOG, f32, -1, sum, NULL, NULL, log_sum);
    pointwise(g, "stats = max + log(sum)", CUDNN_POINTWISE_ADD, f32, -1, max, log_sum, NULL, stats);
    /* the second matmul's A operand must have the I/O type */
    cudnnBackendDescriptor_t p = virtual_tensor(g, "softmax P", bf16, l.scores);
    pointwise(g, "softmax div", CUDNN_POINTWISE_DIV, f32, -1, e, sum, NULL, p);
    matmul(g, "bmm2 P V", p, v, o, NULL, NULL, NULL);
}

/* How the backward graph writes dQ. */
typedef enum dq_output {
    DQ_ATOMIC,  /* into an fp32 accumulator with atomics, then dQ (the default graph) */
    DQ_DIRECT,  /* straight from the matmul, bf16 (deterministic, whole sequence) */
    DQ_PARTIAL, /* a key chunk's contribution into the bf16 dq_partial scratch (deterministic) */
} dq_output;

static void build_backward_graph(graph_builder *g, const tt_attention_shape *s, dq_output dq_out,
                                 bool padding_workaround, int64_t slice_heads, int64_t slice_kv_heads, int64_t Tq,
                                 int64_t Tk) {
    attention_layouts l = layouts_of(s, slice_heads, slice_kv_heads, Tq, Tk);
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    const bool grouped = slice_kv_heads != slice_heads;
    cudnnBackendDescriptor_t q = make_tensor(g, "Q", UID_Q, bf16, l.q, false, false);
    cudnnBackendDescriptor_t kt = make_tensor(g, "K^T", UID_K, bf16, l.k_transposed, false, false);
    cudnnBackendDescriptor_t vt = make_tensor(g, "V^T", UID_V, bf16, l.v_transposed, false, false);
    cudnnBackendDescriptor_t o = make_tensor(g, "O", UID_O, bf16, l.q, false, false);
    cudnnBackendDescriptor_t dout = make_tensor(g, "dO", UID_DO, bf16, l.q, false, false);
    cudnnBackendDescriptor_t stats = make_tensor(g, "stats (lse)", UID_STATS, f32, l.row, false, false);
    cudnnBackendDescriptor_t dq = dq_out == DQ_PARTIAL
                                      ? make_tensor(g, "dQ of the key chunk", UID_DQ, bf16, l.dq_partial, false, false)
                                      : make_tensor(g, "dQ", UID_DQ, bf16, l.q, false, false);
    cudnnBackendDescriptor_t dk = make_tensor(g, "dK", UID_DK, bf16, l.k, false, false);
    cudnnBackendDescriptor_t dv = make_tensor(g, "dV", UID_DV, bf16, l.k, false, false);
    cudnnBackendDescriptor_t scale = scalar_tensor(g, "attn_scale", UID_ATTN_SCALE);
    cudnnBackendDescriptor_t one = scalar_tensor(g, "one (no dropout)", UID_ONE);
    /* rowsum(dO * O) in memory (the workspace): the engine reads it once per key block */
    cudnnBackendDescriptor_t softmax_sum = make_tensor(g, "softmax_sum", UID_SOFTMAX_SUM, f32, l.row, false, false);
    cudnnBackendDescriptor_t seq_len_q = NULL, seq_len_kv = NULL;
    if (padding_workaround) {
        seq_len_q = make_tensor(g, "seq_len_q", UID_SEQ_LEN_Q, CUDNN_DATA_INT32, l.seq_len, false, false);
        seq_len_kv = make_tensor(g, "seq_len_kv", UID_SEQ_LEN_KV, CUDNN_DATA_INT32, l.seq_len, false, false);
    }

    /* softmax_sum = rowsum(dO * O) * 1 */
    cudnnBackendDescriptor_t dout_out = virtual_tensor(g, "dO * O", f32, l.dout_times_out);
    pointwise(g, "mul dO O", CUDNN_POINTWISE_MUL, f32, -1, dout, o, NULL, dout_out);
    cudnnBackendDescriptor_t row_sum = virtual_tensor(g, "rowsum(dO * O)", f32, l.row);
    reduction(g, "reduce dO O", CUDNN_REDUCE_TENSOR_ADD, dout_out, row_sum);
    pointwise(g, "scale by dropout inverse (1)", CUDNN_POINTWISE_MUL, f32, -1, row_sum, one, NULL, softmax_sum);

    /* P = exp(scale * Q K^T - lse), masked */
    cudnnBackendDescriptor_t s1 = virtual_tensor(g, "Q K^T", f32, l.scores);
    matmul(g, "matmul Q K^T", q, kt, s1, seq_len_q, seq_len_kv, NULL);
    cudnnBackendDescriptor_t s2 = virtual_tensor(g, "scaled scores", f32, l.scores);
    pointwise(g, "mul attn_scale", CUDNN_POINTWISE_MUL, f32, -1, s1, scale, NULL, s2);
    cudnnBackendDescriptor_t before_tanh = NULL, cap = NULL;
    if (s->softcap != 0) {
        cap = scalar_tensor(g, "softcap", UID_SOFTCAP);
        s2 = softcap_forward(g, s2, l.scores, cap, &before_tanh);
    }
    if (padding_workaround) s2 = padding_mask(g, s2, l.scores, seq_len_q, seq_len_kv);
    cudnnBackendDescriptor_t s3 = virtual_tensor(g, "scores - lse", f32, l.scores);
    pointwise(g, "sub lse", CUDNN_POINTWISE_SUB, f32, -1, s2, stats, NULL, s3);
    cudnnBackendDescriptor_t s4 = causal_mask(g, s3, l.scores);
    if (s->sliding_window != 0) s4 = window_mask(g, s4, l.scores);
    cudnnBackendDescriptor_t p = virtual_tensor(g, "P", f32, l.scores);
    pointwise(g, "exp", CUDNN_POINTWISE_EXP, f32, -1, s4, NULL, NULL, p);

    /* dV = P^T dO (per query head, then summed over each kv head's group) */
    cudnnBackendDescriptor_t pt = virtual_tensor(g, "P^T", bf16, l.scores_transposed);
    reshape(g, "reshape P to P^T", p, pt);
    if (!grouped) {
        matmul(g, "matmul P^T dO", pt, dout, dv, seq_len_kv, NULL, seq_len_q);
    } else {
        cudnnBackendDescriptor_t dv_full = virtual_tensor(g, "dV per query head", bf16, l.per_query_head_keys);
        matmul(g, "matmul P^T dO", pt, dout, dv_full, seq_len_kv, NULL, seq_len_q);
        reduction(g, "sum dV over the group", CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
    }

    /* dS = (dO V^T - softmax_sum) * P * scale */
    cudnnBackendDescriptor_t dp = virtual_tensor(g, "dP = dO V^T", f32, l.scores);
    matmul(g, "matmul dO V^T", dout, vt, dp, seq_len_q, seq_len_kv, NULL);
    cudnnBackendDescriptor_t dp_centered = virtual_tensor(g, "dP - softmax_sum", f32, l.scores);
    pointwise(g, "sub softmax_sum", CUDNN_POINTWISE_SUB, f32, -1, dp, softmax_sum, NULL, dp_centered);
    cudnnBackendDescriptor_t dp_p = virtual_tensor(g, "(dP - softmax_sum) * P", f32, l.scores);
    pointwise(g, "mul P", CUDNN_POINTWISE_MUL, f32, -1, dp_centered, p, NULL, dp_p);
    if (s->softcap != 0) dp_p = softcap_backward(g, dp_p, l.scores, cap, before_tanh);
    cudnnBackendDescriptor_t ds = virtual_tensor(g, "dS", f32, l.scores);
    pointwise(g, "mul dS attn_scale", CUDNN_POINTWISE_MUL, f32, -1, dp_p, scale, NULL, ds);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = virtual_tensor(g, "dS^T", bf16, l.scores_transposed);
    reshape(g, "reshape dS to dS^T", ds, dst);
    if (!grouped) {
        matmul(g, "matmul dS^T Q", dst, q, dk, seq_len_kv, NULL, seq_len_q);
    } else {
        cudnnBackendDescriptor_t dk_full = virtual_tensor(g, "dK per query head", bf16, l.per_query_head_keys);
        matmul(g, "matmul dS^T Q", dst, q, dk_full, seq_len_kv, NULL, seq_len_q);
        reduction(g, "sum dK over the group", CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
    }

    /* dQ = dS K, with K seen back through K^T (virtual, fp32 as the frontend leaves it) */
    cudnnBackendDescriptor_t k = virtual_tensor(g, "K (view of K^T)", f32, l.k);
    reshape(g, "reshape K^T to K", kt, k);
    if (dq_out != DQ_ATOMIC) {
        matmul(g, "matmul dS K", ds, k, dq, seq_len_q, NULL, seq_len_kv);
    } else {
        cudnnBackendDescriptor_t dq_accumulator =
            make_tensor(g, "dQ fp32 accumulator", UID_DQ_ACCUMULATOR, f32, l.per_query_head, false, false);
        matmul(g, "matmul dS K", ds, k, dq_accumulator, seq_len_q, NULL, seq_len_kv);
        pointwise(g, "dQ = identity(accumulator)", CUDNN_POINTWISE_IDENTITY, f32, -1, dq_accumulator, NULL, NULL, dq);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Engine choice: the operation graph, cuDNN's heuristics (mode A, then the fallback list), and
 * the first engine config that finalizes into an execution plan. */

static void describe_engine(cudnnBackendDescriptor_t config, int64_t *index, bool *nondeterministic) {
    *index = -1;
    *nondeterministic = false;
    cudnnBackendDescriptor_t engine = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                 &engine) == CUDNN_STATUS_SUCCESS &&
        count == 1) {
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, index);
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t note_count = 0;
        if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes) == CUDNN_STATUS_SUCCESS) {
            for (int64_t i = 0; i < note_count && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
                if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *nondeterministic = true;
        }
    }
    cudnnBackendDestroyDescriptor(engine);
}

/* The engine configs the heuristics propose in `mode`, created in g->owned; returns the count. */
static int64_t query_engine_configs(graph_builder *g, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                    const char *mode_name, cudnnBackendDescriptor_t **configs) {
    *configs = NULL;
    char what[96];
    snprintf(what, sizeof what, "engine heuristics (mode %s)", mode_name);
    cudnnBackendDescriptor_t heuristics = new_descriptor(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
    SET_ATTRIBUTE(g, heuristics, what, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET_ATTRIBUTE(g, heuristics, what, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(g, heuristics, what);
    if (g->failed) return 0;
    int64_t available = 0;
    cudnnStatus_t status = cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, NULL);
    if (status != CUDNN_STATUS_SUCCESS) {
        record_status(g, status, "%s: get CUDNN_ATTR_ENGINEHEUR_RESULTS count", what);
        return 0;
    }
    if (available <= 0) return 0;
    *configs = tt_xcalloc((size_t)available, sizeof(**configs), "cuDNN engine configs");
    for (int64_t i = 0; i < available; i++)
        (*configs)[i] = new_descriptor(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (g->failed) return 0;
    int64_t returned = 0;
    status = cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      available, &returned, *configs);
    if (status != CUDNN_STATUS_SUCCESS) {
        record_status(g, status, "%s: get CUDNN_ATTR_ENGINEHEUR_RESULTS", what);
        return 0;
    }
    return returned < available ? returned : available;
}

/* An execution plan for one engine config, or a failure status and the step that failed. */
static cudnnStatus_t try_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t config, cudnnBackendDescriptor_t *plan,
                              const char **failed_step) {
    *plan = NULL;
    cudnnStatus_t status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
    *failed_step = "create CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR";
    if (status != CUDNN_STATUS_SUCCESS) return status;
    status = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    *failed_step = "set CUDNN_ATTR_EXECUTION_PLAN_HANDLE";
    if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          1, &config);
        *failed_step = "set CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG";
    }
    if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnBackendFinalize(*plan);
        *failed_step = "finalize the execution plan";
    }
    if (status != CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(*plan);
        *plan = NULL;
    }
    return status;
}

/* Tries configs in order; when prefer_deterministic, those cuDNN notes as nondeterministic only
 * after all others. Returns true with p->plan set. */
static bool plan_from_configs(graph_builder *g, attention_plan *p, cudnnHandle_t handle,
                              cudnnBackendDescriptor_t *configs, int64_t count, bool prefer_deterministic,
                              char *first_failure, size_t first_failure_size) {
    /* with a preference, pass 0 takes the configs without the note and pass 1 the rest */
    for (int pass = 0; pass < (prefer_deterministic ? 2 : 1); pass++) {
        for (int64_t i = 0; i < count; i++) {
            int64_t engine_index;
            bool nondeterministic;
            describe_engine(configs[i], &engine_index, &nondeterministic);
            if (prefer_deterministic && nondeterministic != (pass == 1)) continue;
            cudnnBackendDescriptor_t plan;
            const char *failed_step;
            cudnnStatus_t status = try_plan(handle, configs[i], &plan, &failed_step);
            if (status != CUDNN_STATUS_SUCCESS) {
                if (!first_failure[0]) {
                    char detail[512];
                    last_cudnn_error(detail, sizeof detail);
                    snprintf(first_failure, first_failure_size, "engine %lld: %s: %s (%d)%s%s", (long long)engine_index,
                             failed_step, cudnnGetErrorString(status), (int)status, detail[0] ? ": " : "", detail);
                }
                continue;
            }
            descriptor_list_add(g->owned, plan);
            p->plan = plan;
            p->engine_index = engine_index;
            p->engine_nondeterministic = nondeterministic;
            int64_t returned = 0;
            status = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                              &returned, &p->workspace_bytes);
            if (status != CUDNN_STATUS_SUCCESS)
                record_status(g, status, "engine %lld: get CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE",
                              (long long)engine_index);
            return true;
        }
    }
    return false;
}

static void build_plan(graph_builder *g, attention_plan *p, cudnnHandle_t handle, bool prefer_deterministic) {
    cudnnBackendDescriptor_t graph = new_descriptor(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    SET_ATTRIBUTE(g, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                  g->op_count, g->ops);
    SET_ATTRIBUTE(g, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(g, graph, "operation graph");
    if (g->failed) return;

    const struct {
        cudnnBackendHeurMode_t mode;
        const char *name;
    } modes[] = {{CUDNN_HEUR_MODE_A, "A"}, {CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}};
    int64_t proposed[2] = {0, 0};
    char first_failure[768] = "";
    for (int m = 0; m < 2 && !g->failed; m++) {
        cudnnBackendDescriptor_t *configs;
        proposed[m] = query_engine_configs(g, graph, modes[m].mode, modes[m].name, &configs);
        bool found = !g->failed && plan_from_configs(g, p, handle, configs, proposed[m], prefer_deterministic,
                                                     first_failure, sizeof first_failure);
        free(configs);
        if (found) return;
    }
    if (proposed[0] + proposed[1] == 0)
        record_reason(g,
                      "cuDNN's heuristics (modes A and FALLBACK) propose no engine for this %d-op graph "
                      "(the fused attention pattern was not recognized, or the shape is unsupported)",
                      g->op_count);
    else
        record_reason(g,
                      "none of the %lld engine configs cuDNN proposed (mode A: %lld, FALLBACK: %lld) finalized "
                      "into a plan; first failure: %s",
                      (long long)(proposed[0] + proposed[1]), (long long)proposed[0], (long long)proposed[1],
                      first_failure);
}

/* ---------------------------------------------------------------------------------------------
 * Execution. A failure here is a bug or a broken device, not an unsupported shape: die with the
 * call, cuDNN's status name and its last error string. */

static void die_on_cudnn_failure(cudnnStatus_t status, const char *file, int line, const char *call,
                                 const char *which) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    char detail[512];
    last_cudnn_error(detail, sizeof detail);
    tt_check_failed(file, line, call, "cuDNN attention %s: %s (%d)%s%s", which, cudnnGetErrorString(status),
                    (int)status, detail[0] ? ": " : "", detail);
}
#define TT_CUDNN_CHECK(call, which) die_on_cudnn_failure((call), __FILE__, __LINE__, #call, (which))

/* The tensors of one call: unique ids and where each lives (device memory, or host memory for
 * the by-value scalars). */
typedef struct variant_pack_entries {
    int count;
    int64_t uids[MAX_PACK_TENSORS];
    void *pointers[MAX_PACK_TENSORS];
} variant_pack_entries;

static void pack_add(variant_pack_entries *e, int64_t uid, const void *pointer) {
    TT_CHECK(e->count < MAX_PACK_TENSORS, "more than %d tensors in a cuDNN variant pack", MAX_PACK_TENSORS);
    e->uids[e->count] = uid;
    e->pointers[e->count++] = (void *)pointer;
}

static void execute_plan(tt_cudnn_attention *a, const attention_plan *p, pack_cache *cache, const char *which,
                         const variant_pack_entries *e, void *workspace, cudaStream_t stream) {
    TT_CHECK(workspace || a->workspace_bytes == 0, "cuDNN attention %s: no workspace (needs %zu bytes)", which,
             a->workspace_bytes);
    TT_CUDNN_CHECK(cudnnSetStream(a->handle, stream), which);
    const size_t uid_bytes = sizeof(int64_t) * (size_t)e->count, pointer_bytes = sizeof(void *) * (size_t)e->count;
    bool same = cache->variant_pack && cache->count == e->count && cache->workspace == workspace &&
                memcmp(cache->uids, e->uids, uid_bytes) == 0 &&
                memcmp(cache->pointers, e->pointers, pointer_bytes) == 0;
    if (!same) {
        if (cache->variant_pack) cudnnBackendDestroyDescriptor(cache->variant_pack);
        cache->variant_pack = NULL;
        cudnnBackendDescriptor_t pack;
        TT_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), which);
        TT_CUDNN_CHECK(
            cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, e->count, e->uids),
            which);
        TT_CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                                e->count, e->pointers),
                       which);
        TT_CUDNN_CHECK(
            cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace),
            which);
        TT_CUDNN_CHECK(cudnnBackendFinalize(pack), which);
        cache->variant_pack = pack;
        cache->count = e->count;
        cache->workspace = workspace;
        memcpy(cache->uids, e->uids, uid_bytes);
        memcpy(cache->pointers, e->pointers, pointer_bytes);
    }
    TT_CUDNN_CHECK(cudnnBackendExecute(a->handle, p->plan, cache->variant_pack), which);
}

/* The window's and the soft-capping's scalars, in the graphs that have them. */
static void pack_optional_scalars(tt_cudnn_attention *a, variant_pack_entries *e) {
    if (a->window != 0) {
        pack_add(e, UID_WINDOW, &a->window);
        pack_add(e, UID_NEG_INF_WINDOW, &a->negative_infinity);
    }
    if (a->softcap != 0) pack_add(e, UID_SOFTCAP, &a->softcap);
}

void tt_cudnn_attention_forward(tt_cudnn_attention *a, tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                const tt_bf16 *v, void *workspace, cudaStream_t stream) {
    variant_pack_entries e = {0};
    pack_add(&e, UID_Q, q);
    pack_add(&e, UID_K, k); /* the graph reads it as K^T: same memory, swapped dims and strides */
    pack_add(&e, UID_V, v);
    pack_add(&e, UID_O, out);
    pack_add(&e, UID_STATS, lse);
    pack_add(&e, UID_ATTN_SCALE, &a->attn_scale);
    pack_add(&e, UID_NEG_INF_CAUSAL, &a->negative_infinity);
    pack_optional_scalars(a, &e);
    execute_plan(a, &a->forward, &a->forward_pack, "forward", &e, workspace, stream);
}

int tt_cudnn_attention_lanes_for(const tt_cudnn_attention *a, size_t workspace_bytes) {
    if (workspace_bytes < a->backward_workspace_bytes) return 0;
    if (a->max_lanes == 1) return 1; /* the atomic graph, or one group: lane_bytes may be 0 */
    const size_t extra = (workspace_bytes - a->backward_workspace_bytes) / a->lane_bytes;
    return extra + 1 < (size_t)a->max_lanes ? (int)extra + 1 : a->max_lanes;
}

/* Lanes in spare memory beside those of the workspace, up to max_lanes in all. */
static int spare_lanes(const tt_cudnn_attention *a, int workspace_lanes, const void *spare, size_t spare_bytes) {
    if (!spare || workspace_lanes >= a->max_lanes) return 0;
    const size_t skip = (WORKSPACE_ALIGNMENT - (uintptr_t)spare % WORKSPACE_ALIGNMENT) % WORKSPACE_ALIGNMENT;
    if (spare_bytes <= skip) return 0;
    const size_t fit = (spare_bytes - skip) / a->lane_bytes;
    return fit < (size_t)(a->max_lanes - workspace_lanes) ? (int)fit : a->max_lanes - workspace_lanes;
}

int tt_cudnn_attention_most_lanes(const tt_cudnn_attention *a) { return a->most_lanes_run; }

size_t tt_cudnn_attention_lane_bytes(const tt_cudnn_attention *a) { return a->max_lanes > 1 ? a->lane_bytes : 0; }

/* One head group's calls (all its key chunks) on one stream, with one lane's share of the workspace. */
static void backward_group(tt_cudnn_attention *a, int64_t slice, tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv,
                           const tt_bf16 *dout, const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                           const tt_bf16 *k, const tt_bf16 *v, void *workspace, char *lane, cudaStream_t stream) {
    const int64_t B = a->shape.batch, D = a->shape.head_dim, T = a->shape.seq_len;
    const int64_t H = a->shape.num_heads, Hk = a->shape.num_kv_heads, Hs = a->slice_heads;
    float *softmax_sum = (float *)((char *)workspace + a->softmax_sum_offset);
    float *dq_sum = (float *)(lane + a->dq_sum_offset);
    tt_bf16 *dq_partial = (tt_bf16 *)(lane + a->dq_partial_offset);
    /* the group's first query head and kv head; the graph's strides step over the full tensors */
    const int64_t h = slice * a->slice_heads, kv = slice * a->slice_kv_heads;
    if (a->chunks > 1 && a->window != 0)
        TT_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, sizeof(float) * (size_t)(B * T * Hs * D), stream));
    for (int64_t c = 0; c < a->chunks; c++) {
        /* keys [k0, k0 + len) against queries [k0, k0 + chunk_queries): every pointer starts at row k0 */
        const int64_t k0 = a->chunk_start[c];
        variant_pack_entries e = {0};
        pack_add(&e, UID_Q, q + (k0 * H + h) * D);
        pack_add(&e, UID_K, k + (k0 * Hk + kv) * D);
        pack_add(&e, UID_V, v + (k0 * Hk + kv) * D); /* read as V^T */
        pack_add(&e, UID_O, out + (k0 * H + h) * D);
        pack_add(&e, UID_DO, dout + (k0 * H + h) * D);
        pack_add(&e, UID_STATS, lse + h * T + k0);
        if (a->chunks == 1) pack_add(&e, UID_DQ, dq + h * D);
        else pack_add(&e, UID_DQ, dq_partial + k0 * Hs * D);
        pack_add(&e, UID_DK, dk + (k0 * Hk + kv) * D);
        pack_add(&e, UID_DV, dv + (k0 * Hk + kv) * D);
        pack_add(&e, UID_ATTN_SCALE, &a->attn_scale);
        pack_add(&e, UID_ONE, &a->one);
        pack_add(&e, UID_NEG_INF_CAUSAL, &a->negative_infinity);
        pack_optional_scalars(a, &e);
        pack_add(&e, UID_SOFTMAX_SUM, softmax_sum + h * T + k0);
        if (!a->deterministic_graph) pack_add(&e, UID_DQ_ACCUMULATOR, (char *)workspace + a->dq_accumulator_offset);
        if (a->padding_workaround) {
            pack_add(&e, UID_SEQ_LEN_Q, a->seq_lens);
            pack_add(&e, UID_SEQ_LEN_KV, a->seq_lens + a->shape.batch);
            pack_add(&e, UID_NEG_INF_PADDING, &a->negative_infinity);
        }
        execute_plan(a, &a->backward[a->chunk_plan[c]], &a->backward_packs[slice * a->chunks + c], "backward", &e, lane,
                     stream);
        /* with a window a chunk covers only some rows: the sum starts at zero (0 + x = x, the same bits) */
        if (a->chunks > 1)
            tt_cuda_dq_chunk_accumulate(dq_sum, dq_partial, B, T, k0, a->chunk_queries[c], Hs * D,
                                        c == 0 && a->window == 0, stream);
    }
    if (a->chunks > 1) tt_cuda_dq_chunk_store(dq + h * D, H * D, dq_sum, B * T, Hs * D, stream);
}

void tt_cudnn_attention_backward(tt_cudnn_attention *a, tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                 const tt_bf16 *out, const float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                 const tt_bf16 *v, void *workspace, size_t workspace_bytes, void *spare,
                                 size_t spare_bytes, cudaStream_t stream) {
    const int workspace_lanes = tt_cudnn_attention_lanes_for(a, workspace_bytes);
    TT_CHECK(workspace_lanes >= 1, "cuDNN attention backward: workspace of %zu bytes, needs at least %zu",
             workspace_bytes, a->backward_workspace_bytes);
    const int lanes = workspace_lanes + spare_lanes(a, workspace_lanes, spare, spare_bytes);
    if (lanes > a->most_lanes_run) a->most_lanes_run = lanes;
    char *first_lane = (char *)workspace + a->first_lane_offset;
    char *first_spare_lane =
        spare ? (char *)spare + (WORKSPACE_ALIGNMENT - (uintptr_t)spare % WORKSPACE_ALIGNMENT) % WORKSPACE_ALIGNMENT
              : NULL;
    if (lanes == 1) {
        for (int64_t slice = 0; slice < a->slices; slice++)
            backward_group(a, slice, dq, dk, dv, dout, out, lse, q, k, v, workspace, first_lane, stream);
        return;
    }
    /* lane i takes groups i, i + lanes, ...: forked from and joined back into the caller's stream */
    TT_CUDA_CHECK(cudaEventRecord(a->fork, stream));
    for (int i = 0; i < lanes; i++) TT_CUDA_CHECK(cudaStreamWaitEvent(a->lane_stream[i], a->fork, 0));
    for (int64_t slice = 0; slice < a->slices; slice++) {
        const int i = (int)(slice % lanes);
        char *lane = i < workspace_lanes ? first_lane + (size_t)i * a->lane_bytes
                                         : first_spare_lane + (size_t)(i - workspace_lanes) * a->lane_bytes;
        backward_group(a, slice, dq, dk, dv, dout, out, lse, q, k, v, workspace, lane, a->lane_stream[i]);
    }
    for (int i = 0; i < lanes; i++) {
        TT_CUDA_CHECK(cudaEventRecord(a->lane_done[i], a->lane_stream[i]));
        TT_CUDA_CHECK(cudaStreamWaitEvent(stream, a->lane_done[i], 0));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Creation. */

static size_t align_up(size_t bytes) {
    return (bytes + WORKSPACE_ALIGNMENT - 1) / WORKSPACE_ALIGNMENT * WORKSPACE_ALIGNMENT;
}

/* Why this shape or this cuDNN cannot run here, or NULL. */
static const char *unsupported_reason(const tt_attention_shape *s, size_t version, int sm_major, char *buf,
                                      size_t size) {
    char text[32];
    cudnn_version_text(version, text, sizeof text);
    if (version < OLDEST_CUDNN_VERSION)
        snprintf(buf, size, "cuDNN %s is too old: the fused causal attention graphs here need cuDNN >= 9.10.2", text);
    else if (s->sliding_window < 0 || s->sliding_window > (int64_t)1 << 24)
        snprintf(buf, size, "sliding_window %lld: the graphs add it to a column index in fp32 (at most 2^24)",
                 (long long)s->sliding_window);
    else if (s->batch < 1 || s->seq_len < 2 || s->num_heads < 1 || s->num_kv_heads < 1)
        snprintf(buf, size, "shape B=%lld T=%lld Hq=%lld Hkv=%lld: cuDNN's fused attention needs T >= 2",
                 (long long)s->batch, (long long)s->seq_len, (long long)s->num_heads, (long long)s->num_kv_heads);
    else if (s->num_heads % s->num_kv_heads != 0)
        snprintf(buf, size, "Hq=%lld is not a multiple of Hkv=%lld", (long long)s->num_heads,
                 (long long)s->num_kv_heads);
    else if (s->head_dim % 8 != 0 || s->head_dim > (sm_major == 9 ? 256 : 128))
        snprintf(buf, size,
                 "head_dim %lld: cuDNN's fused attention backward needs a multiple of 8 up to %d on this GPU (sm_%d)",
                 (long long)s->head_dim, sm_major == 9 ? 256 : 128, sm_major * 10);
    else if (s->seq_len > INT32_MAX)
        snprintf(buf, size, "T=%lld does not fit the int32 sequence lengths", (long long)s->seq_len);
    else return NULL;
    return buf;
}

static void copy_reason(char *why_not, size_t why_not_size, const tt_attention_shape *s, const char *reason) {
    if (!why_not || why_not_size == 0) return;
    char version[32];
    cudnn_version_text(cudnnGetVersion(), version, sizeof version);
    snprintf(why_not, why_not_size,
             "cuDNN %s, attention B=%lld T=%lld Hq=%lld Hkv=%lld hd=%lld: %s (cuDNN's own log: rerun with "
             "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr)",
             version, (long long)s->batch, (long long)s->seq_len, (long long)s->num_heads, (long long)s->num_kv_heads,
             (long long)s->head_dim, reason);
}

/* The calls of the deterministic backward, whose engine keeps each call's [B, heads, Tq, Tk] bf16
 * dP in its workspace: the most kv heads per call whose whole-sequence dP fits the limit, dividing
 * Hkv evenly; where not even one kv head's group fits, one group per call over chunks of keys,
 * each as long as the limit allows against the queries from its start on (multiples of 128: the
 * queries and keys of every chunk then stay multiples of 128 as the engine wants). False, with
 * the reason, when that cannot be done. */
#define MAX_KEY_CHUNKS 256

/* The queries from a chunk's start on that see one of its `keys` keys through the sliding window: keys + window - 1,
 * rounded up to 128 (the engine's multiple), at most the `queries` left. */
static int64_t window_queries(const tt_attention_shape *s, int64_t queries, int64_t keys) {
    const int64_t seen = (keys + s->sliding_window - 1 + 127) / 128 * 128;
    return seen < queries ? seen : queries;
}

/* Stores the chunks of a schedule. */
static void set_chunks(tt_cudnn_attention *a, int64_t count, const int64_t *starts, const int64_t *lengths,
                       const int64_t *queries) {
    a->chunks = count;
    a->chunk_start = tt_xrealloc(a->chunk_start, sizeof(int64_t) * (size_t)count, "attention key chunks");
    a->chunk_len = tt_xrealloc(a->chunk_len, sizeof(int64_t) * (size_t)count, "attention key chunks");
    a->chunk_queries = tt_xrealloc(a->chunk_queries, sizeof(int64_t) * (size_t)count, "attention key chunks");
    memcpy(a->chunk_start, starts, sizeof(int64_t) * (size_t)count);
    memcpy(a->chunk_len, lengths, sizeof(int64_t) * (size_t)count);
    memcpy(a->chunk_queries, queries, sizeof(int64_t) * (size_t)count);
}

/* A sliding window: the deterministic engine computes every pair of a call's [queries, keys] rectangle below the
 * diagonal, masked or not (H200, 16k tokens, 8 heads of 256: a 1024-key window's backward took as long as the causal
 * one's), so the keys go in chunks of the window (rounded up to 128), each against the queries that see them: about
 * 1.5 x window x T pairs instead of T^2 / 2. As many kv heads per call as the dP limit allows. False (the causal
 * schedule then runs) where T % 128 != 0, the sequence is not over twice a chunk, or one kv head does not fit. */
static bool windowed_schedule(tt_cudnn_attention *a, const tt_attention_shape *s) {
    const int64_t T = s->seq_len, group = s->num_heads / s->num_kv_heads;
    const int64_t keys = (s->sliding_window + 127) / 128 * 128;
    if (s->sliding_window <= 0 || T % 128 != 0 || T <= 2 * keys || T / keys + 1 > MAX_KEY_CHUNKS) return false;
    const double dp_per_kv_head =
        2.0 * (double)s->batch * (double)group * (double)keys * (double)window_queries(s, T, keys);
    int64_t kv = s->num_kv_heads;
    while (kv > 1 && (s->num_kv_heads % kv != 0 || dp_per_kv_head * (double)kv > (double)a->dp_limit)) kv--;
    if (dp_per_kv_head * (double)kv > (double)a->dp_limit) return false;
    a->slice_kv_heads = kv;
    a->slice_heads = kv * group;
    int64_t count = 0, starts[MAX_KEY_CHUNKS], lengths[MAX_KEY_CHUNKS], queries[MAX_KEY_CHUNKS];
    for (int64_t start = 0; start < T; start += keys, count++) {
        starts[count] = start;
        lengths[count] = keys < T - start ? keys : T - start;
        queries[count] = window_queries(s, T - start, lengths[count]);
    }
    set_chunks(a, count, starts, lengths, queries);
    return true;
}

static bool deterministic_schedule(tt_cudnn_attention *a, const tt_attention_shape *s, char *reason, size_t size) {
    if (windowed_schedule(a, s)) return true;
    const size_t dp_limit = a->dp_limit;
    const int64_t group = s->num_heads / s->num_kv_heads, T = s->seq_len;
    const double dp_per_kv_head = 2.0 * (double)s->batch * (double)group * (double)T * (double)T;
    int64_t kv = s->num_kv_heads;
    while (kv > 1 && (s->num_kv_heads % kv != 0 || dp_per_kv_head * (double)kv > dp_limit)) kv--;
    a->slice_kv_heads = kv;
    a->slice_heads = kv * group;
    if (dp_per_kv_head * (double)kv <= dp_limit) return true;
    char need[32], limit[32];
    tt_format_bytes((size_t)dp_per_kv_head, need, sizeof need);
    tt_format_bytes(dp_limit, limit, sizeof limit);
    if (T % 128 != 0) {
        snprintf(reason, size,
                 "the deterministic backward keeps dP [B, heads, T, T] in bf16: %s for one kv head's group, over the "
                 "%s limit, and T %% 128 != 0 rules out running it over chunks of keys",
                 need, limit);
        return false;
    }
    const double dp_per_query_key = 2.0 * (double)s->batch * (double)group;
    int64_t count = 0, start = 0;
    int64_t starts[MAX_KEY_CHUNKS], lengths[MAX_KEY_CHUNKS], query_counts[MAX_KEY_CHUNKS];
    while (start < T) {
        const int64_t queries = T - start;
        int64_t keys = (int64_t)((double)dp_limit / (dp_per_query_key * (double)queries)) / 128 * 128;
        if (keys > queries) keys = queries;
        if (s->sliding_window != 0) /* the most keys whose window of queries fits the limit */
            for (keys = queries / 128 * 128; keys >= 128; keys -= 128)
                if (dp_per_query_key * (double)keys * (double)window_queries(s, queries, keys) <= (double)dp_limit)
                    break;
        if (keys < 128 || count == MAX_KEY_CHUNKS) {
            snprintf(reason, size,
                     "the deterministic backward keeps dP [B, heads, T, T] in bf16: %s for one kv head's group, over "
                     "the %s limit, and %s",
                     need, limit,
                     keys < 128 ? "even 128 keys against the whole sequence do not fit it"
                                : "more than 256 chunks of keys would be needed");
            return false;
        }
        starts[count] = start;
        query_counts[count] = s->sliding_window != 0 ? window_queries(s, queries, keys) : queries;
        lengths[count++] = keys;
        start += keys;
    }
    set_chunks(a, count, starts, lengths, query_counts);
    return true;
}

tt_cudnn_attention *tt_cudnn_attention_create(const tt_attention_shape *s, int deterministic_backward, size_t dp_limit,
                                              char *why_not, size_t why_not_size) {
    if (why_not && why_not_size) why_not[0] = 0;
    const size_t version = cudnnGetVersion();
    int device = 0, sm_major = 0;
    cudaError_t cuda_status = cudaGetDevice(&device);
    if (cuda_status == cudaSuccess)
        cuda_status = cudaDeviceGetAttribute(&sm_major, cudaDevAttrComputeCapabilityMajor, device);
    char reason[1024];
    if (cuda_status != cudaSuccess) {
        snprintf(reason, sizeof reason, "no usable CUDA device: %s", cudaGetErrorString(cuda_status));
        copy_reason(why_not, why_not_size, s, reason);
        return NULL;
    }
    if (unsupported_reason(s, version, sm_major, reason, sizeof reason)) {
        copy_reason(why_not, why_not_size, s, reason);
        return NULL;
    }

    tt_cudnn_attention *a = tt_xcalloc(1, sizeof(*a), "cuDNN attention");
    a->shape = *s;
    a->dp_limit = dp_limit;
    a->attn_scale = (float)s->scale;
    a->negative_infinity = -INFINITY;
    a->one = 1.0f;
    a->deterministic_graph = deterministic_backward != 0;
    a->slice_heads = s->num_heads;
    a->slice_kv_heads = s->num_kv_heads;
    a->chunks = 1;
    a->chunk_start = tt_xcalloc(1, sizeof(int64_t), "attention key chunks");
    a->chunk_len = tt_xcalloc(1, sizeof(int64_t), "attention key chunks");
    a->chunk_len[0] = s->seq_len;
    a->chunk_queries = tt_xcalloc(1, sizeof(int64_t), "attention key chunks");
    a->chunk_queries[0] = s->seq_len;
    a->window = (float)s->sliding_window;
    a->softcap = (float)s->softcap;
    if (a->deterministic_graph && !deterministic_schedule(a, s, reason, sizeof reason)) {
        copy_reason(why_not, why_not_size, s, reason);
        free(a->chunk_start);
        free(a->chunk_len);
        free(a->chunk_queries);
        free(a);
        return NULL;
    }
    a->slices = s->num_kv_heads / a->slice_kv_heads;
    a->padding_workaround = s->seq_len % 128 != 0 && version <= PADDING_WORKAROUND_LAST_VERSION;
    cudnnStatus_t status = cudnnCreate(&a->handle);
    if (status != CUDNN_STATUS_SUCCESS) {
        char detail[512];
        last_cudnn_error(detail, sizeof detail);
        snprintf(reason, sizeof reason, "cudnnCreate: %s (%d)%s%s", cudnnGetErrorString(status), (int)status,
                 detail[0] ? ": " : "", detail);
        copy_reason(why_not, why_not_size, s, reason);
        free(a);
        return NULL;
    }
    if (a->padding_workaround) {
        const int64_t B = s->batch;
        int32_t *lengths = tt_xmalloc(sizeof(int32_t) * 2 * (size_t)B, "sequence lengths");
        for (int64_t i = 0; i < 2 * B; i++) lengths[i] = (int32_t)s->seq_len;
        TT_CUDA_CHECK(cudaMalloc((void **)&a->seq_lens, sizeof(int32_t) * 2 * (size_t)B));
        TT_CUDA_CHECK(cudaMemcpy(a->seq_lens, lengths, sizeof(int32_t) * 2 * (size_t)B, cudaMemcpyHostToDevice));
        free(lengths);
    }

    graph_builder *g = tt_xcalloc(1, sizeof(*g), "cuDNN graph builder");
    *g = (graph_builder){.graph = "forward", .owned = &a->forward.owned, .next_virtual_uid = FIRST_VIRTUAL_UID};
    build_forward_graph(g, s);
    build_plan(g, &a->forward, a->handle, false);
    a->backward = tt_xcalloc((size_t)a->chunks, sizeof(attention_plan), "attention backward plans");
    a->chunk_plan = tt_xcalloc((size_t)a->chunks, sizeof(int64_t), "attention key chunks");
    a->backward_packs = tt_xcalloc((size_t)(a->slices * a->chunks), sizeof(pack_cache), "attention variant packs");
    for (int64_t c = 0; c < a->chunks && !g->failed; c++) {
        const dq_output dq_out = !a->deterministic_graph ? DQ_ATOMIC : a->chunks == 1 ? DQ_DIRECT : DQ_PARTIAL;
        const int64_t queries = a->chunk_queries[c];
        a->chunk_plan[c] = c;
        for (int64_t d = 0; d < c; d++)
            if (a->chunk_queries[d] == queries && a->chunk_len[d] == a->chunk_len[c]) {
                a->chunk_plan[c] = d;
                break;
            }
        if (a->chunk_plan[c] != c) continue;
        *g =
            (graph_builder){.graph = "backward", .owned = &a->backward[c].owned, .next_virtual_uid = FIRST_VIRTUAL_UID};
        build_backward_graph(g, s, dq_out, a->padding_workaround, a->slice_heads, a->slice_kv_heads, queries,
                             a->chunk_len[c]);
        build_plan(g, &a->backward[c], a->handle, a->deterministic_graph);
    }
    if (g->failed) {
        copy_reason(why_not, why_not_size, s, g->why);
        free(g);
        tt_cudnn_attention_destroy(a);
        return NULL;
    }
    free(g);

    /* the backward workspace: see the struct */
    const size_t rows = (size_t)(s->batch * s->num_heads * s->seq_len);
    int64_t engine_workspace = 0;
    for (int64_t c = 0; c < a->chunks; c++)
        if (a->backward[c].workspace_bytes > engine_workspace) engine_workspace = a->backward[c].workspace_bytes;
    a->softmax_sum_offset = 0;
    a->dq_accumulator_offset = align_up(rows * sizeof(float));
    a->first_lane_offset =
        a->dq_accumulator_offset + (a->deterministic_graph ? 0 : align_up(rows * (size_t)s->head_dim * sizeof(float)));
    const size_t group_dq = (size_t)(s->batch * s->seq_len * a->slice_heads * s->head_dim);
    a->dq_sum_offset = align_up((size_t)engine_workspace);
    a->dq_partial_offset = a->dq_sum_offset + (a->chunks > 1 ? align_up(group_dq * sizeof(float)) : 0);
    a->lane_bytes = a->dq_partial_offset + (a->chunks > 1 ? align_up(group_dq * sizeof(tt_bf16)) : 0);
    a->backward_workspace_bytes = a->first_lane_offset + a->lane_bytes;
    a->workspace_bytes = a->backward_workspace_bytes > (size_t)a->forward.workspace_bytes
                             ? a->backward_workspace_bytes
                             : (size_t)a->forward.workspace_bytes;
    /* lanes: only the deterministic graph runs several groups, at most this many at once */
    a->max_lanes = a->deterministic_graph
                       ? (int)(a->slices < TT_CUDNN_ATTENTION_MAX_LANES ? a->slices : TT_CUDNN_ATTENTION_MAX_LANES)
                       : 1;
    if (a->max_lanes > 1) {
        TT_CUDA_CHECK(cudaEventCreateWithFlags(&a->fork, cudaEventDisableTiming));
        for (int i = 0; i < a->max_lanes; i++) {
            TT_CUDA_CHECK(cudaStreamCreateWithFlags(&a->lane_stream[i], cudaStreamNonBlocking));
            TT_CUDA_CHECK(cudaEventCreateWithFlags(&a->lane_done[i], cudaEventDisableTiming));
        }
    }

    char forward_ws[32], backward_ws[32], scratch[32], chunking[160] = "", version_text[96], masks[96] = "";
    if (a->chunks > 1)
        snprintf(chunking, sizeof chunking, " x %lld key chunks (%lld to %lld keys%s, dQ summed in fp32)",
                 (long long)a->chunks, (long long)a->chunk_len[0], (long long)a->chunk_len[a->chunks - 1],
                 s->sliding_window ? ", each against the queries its keys' window reaches" : "");
    if (s->sliding_window) snprintf(masks, sizeof masks, ", sliding window of %lld keys", (long long)s->sliding_window);
    if (s->softcap) {
        const size_t used = strlen(masks);
        snprintf(masks + used, sizeof masks - used, ", soft-capping %g", s->softcap);
    }
    snprintf(a->forward_description, sizeof a->forward_description, "cuDNN %s: forward engine %lld (workspace %s)%s",
             tt_cudnn_version_string(version_text, sizeof version_text), (long long)a->forward.engine_index,
             tt_format_bytes((size_t)a->forward.workspace_bytes, forward_ws, sizeof forward_ws), masks);
    snprintf(a->description, sizeof a->description,
             "cuDNN %s: forward engine %lld (workspace %s); backward engine %lld%s (workspace %s + %s scratch), %s "
             "graph in %lld head group(s)%s%s%s%s",
             tt_cudnn_version_string(version_text, sizeof version_text), (long long)a->forward.engine_index,
             tt_format_bytes((size_t)a->forward.workspace_bytes, forward_ws, sizeof forward_ws),
             (long long)a->backward[0].engine_index,
             a->backward[0].engine_nondeterministic ? " [NONDETERMINISTIC note]" : "",
             tt_format_bytes((size_t)engine_workspace, backward_ws, sizeof backward_ws),
             tt_format_bytes(a->backward_workspace_bytes - (size_t)engine_workspace, scratch, sizeof scratch),
             a->deterministic_graph ? "deterministic (dQ without atomics)" : "default (fp32 dQ accumulator)",
             (long long)a->slices, chunking, masks, a->padding_workaround ? ", T % 128 padding-mask workaround" : "",
             a->deterministic_graph && sm_major != 9 ? ", deterministic graph untested off Hopper" : "");
    return a;
}

size_t tt_cudnn_attention_workspace_bytes(const tt_cudnn_attention *a) { return a->workspace_bytes; }

size_t tt_cudnn_attention_forward_workspace_bytes(const tt_cudnn_attention *a) {
    return (size_t)a->forward.workspace_bytes;
}

int tt_cudnn_attention_backward_is_deterministic(const tt_cudnn_attention *a) {
    if (!a->deterministic_graph) return 0;
    for (int64_t c = 0; c < a->chunks; c++)
        if (a->backward[c].engine_nondeterministic) return 0;
    return 1;
}

const char *tt_cudnn_attention_describe(const tt_cudnn_attention *a) { return a->description; }

const char *tt_cudnn_attention_describe_forward(const tt_cudnn_attention *a) { return a->forward_description; }

static void attention_plan_destroy(attention_plan *p) { descriptor_list_destroy(&p->owned); }

static void pack_cache_destroy(pack_cache *cache) {
    if (cache->variant_pack) cudnnBackendDestroyDescriptor(cache->variant_pack);
    cache->variant_pack = NULL;
}

void tt_cudnn_attention_destroy(tt_cudnn_attention *a) {
    if (!a) return;
    if (a->backward)
        for (int64_t c = 0; c < a->chunks; c++) attention_plan_destroy(&a->backward[c]);
    free(a->backward);
    free(a->chunk_start);
    free(a->chunk_len);
    free(a->chunk_queries);
    free(a->chunk_plan);
    if (a->backward_packs)
        for (int64_t i = 0; i < a->slices * a->chunks; i++) pack_cache_destroy(&a->backward_packs[i]);
    free(a->backward_packs);
    pack_cache_destroy(&a->forward_pack);
    attention_plan_destroy(&a->forward);
    if (a->seq_lens) cudaFree(a->seq_lens);
    if (a->max_lanes > 1) {
        cudaEventDestroy(a->fork);
        for (int i = 0; i < a->max_lanes; i++) {
            cudaStreamDestroy(a->lane_stream[i]);
            cudaEventDestroy(a->lane_done[i]);
        }
    }
    if (a->handle) cudnnDestroy(a->handle);
    free(a);
}
