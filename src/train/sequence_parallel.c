#include "train/step_internal.h"

#include "core/check.h"

/* The exchange's geometry for tensors of `heads` heads: a rank's tokens [B, T/N] by heads*hd values, a block (what
 * one rank sends another) [B, T/N] by heads/N*hd. */
typedef struct exchange_shape {
    int64_t ranks, batch, local_tokens; /* N, B, T/N */
    size_t row, block_row;              /* bytes: heads*hd and heads/N*hd values */
    size_t block;                       /* bytes of a block: B * T/N block rows */
} exchange_shape;

static exchange_shape shape_of(const tt_model_state *s, int64_t heads) {
    const int64_t N = s->plan.sequence_parallel, B = s->plan.micro_batch, local = s->plan.seq_len;
    const size_t a = s->plan.activation_bytes, row = (size_t)(heads * s->config.head_dim) * a;
    return (exchange_shape){.ranks = N,
                            .batch = B,
                            .local_tokens = local,
                            .row = row,
                            .block_row = row / (size_t)N,
                            .block = (size_t)(B * local) * (row / (size_t)N)};
}

static void exchange(const tt_model_state *s, const void *send, void *recv, size_t block) {
    if (s->measuring) return; /* the dry run prices the buffers; nothing moves */
    TT_CHECK(s->sequence_exchange != NULL, "sequence parallel without the ranks' exchange");
    /* on the side queue: after the packing the compute stream issued, and the unpacking waits for it (no host
     * wait: the next kernels are queued while the tokens travel) */
    tt_backend_side_begin(s->backend);
    s->sequence_exchange->all_to_all(s->sequence_exchange->ctx, send, recv, block);
    tt_backend_side_wait(s->backend, tt_backend_side_end(s->backend));
}

/* local [B, T/N, heads*hd] -> whole [B, T, heads/N*hd]: head block j of every token goes to rank j; rank i's tokens
 * come back as tokens [i*T/N, (i+1)*T/N) of each sequence. */
static void to_heads(tt_model_state *s, int64_t heads, void *whole, const void *local, void *send, void *recv) {
    const tt_backend *b = s->backend;
    const exchange_shape e = shape_of(s, heads);
    const size_t rows = (size_t)(e.batch * e.local_tokens);
    for (int64_t j = 0; j < e.ranks; j++)
        tt_backend_copy_2d(b, (unsigned char *)send + (size_t)j * e.block, e.block_row,
                           (const unsigned char *)local + (size_t)j * e.block_row, e.row, e.block_row, rows);
    exchange(s, send, recv, e.block);
    const size_t run = (size_t)e.local_tokens * e.block_row; /* one sequence's tokens of one rank */
    for (int64_t i = 0; i < e.ranks; i++)
        for (int64_t q = 0; q < e.batch; q++)
            tt_backend_copy(b, (unsigned char *)whole + ((size_t)(q * e.ranks + i)) * run,
                            (const unsigned char *)recv + (size_t)i * e.block + (size_t)q * run, run);
}

/* whole [B, T, heads/N*hd] -> local [B, T/N, heads*hd]: the inverse of to_heads. */
static void to_tokens(tt_model_state *s, int64_t heads, void *local, const void *whole, void *send, void *recv) {
    const tt_backend *b = s->backend;
    const exchange_shape e = shape_of(s, heads);
    const size_t run = (size_t)e.local_tokens * e.block_row;
    for (int64_t j = 0; j < e.ranks; j++)
        for (int64_t q = 0; q < e.batch; q++)
            tt_backend_copy(b, (unsigned char *)send + (size_t)j * e.block + (size_t)q * run,
                            (const unsigned char *)whole + ((size_t)(q * e.ranks + j)) * run, run);
    exchange(s, send, recv, e.block);
    const size_t rows = (size_t)(e.batch * e.local_tokens);
    for (int64_t i = 0; i < e.ranks; i++)
        tt_backend_copy_2d(b, (unsigned char *)local + (size_t)i * e.block_row, e.row,
                           (const unsigned char *)recv + (size_t)i * e.block, e.block_row, e.block_row, rows);
}

static void *push(tt_model_state *s, size_t bytes, const char *what) {
    return tt_arena_push(&s->arena, bytes, TT_CLASS_WORKSPACE, what);
}

/* The staging of the exchanges and the whole sequence's q, k, v and attention output, pushed on the arena. */
typedef struct exchanged {
    tt_arena_mark mark; /* popping to it releases them */
    void *send, *recv, *q, *k, *v, *out;
} exchanged;

/* Pushes them and fills q, k, v with the whole sequence's, for this rank's heads. */
static exchanged exchange_qkv(tt_model_state *s, const void *q, const void *k, const void *v) {
    const size_t q_bytes = s->sizes.sequence_parallel_q, kv_bytes = s->sizes.sequence_parallel_kv;
    exchanged x = {.mark = tt_arena_get_mark(&s->arena)};
    x.send = push(s, q_bytes, "sequence parallel send");
    x.recv = push(s, q_bytes, "sequence parallel receive");
    x.q = push(s, q_bytes, "q, all tokens");
    x.k = push(s, kv_bytes, "k, all tokens");
    x.v = push(s, kv_bytes, "v, all tokens");
    x.out = push(s, q_bytes, "attention output, all tokens");
    to_heads(s, s->config.num_heads, x.q, q, x.send, x.recv);
    to_heads(s, s->config.num_kv_heads, x.k, k, x.send, x.recv);
    to_heads(s, s->config.num_kv_heads, x.v, v, x.send, x.recv);
    return x;
}

void tt_sequence_parallel_attention_forward(tt_model_state *s, const tt_attention_shape *shape, void *out, float *lse,
                                            const void *q, const void *k, const void *v) {
    const exchanged x = exchange_qkv(s, q, k, v);
    tt_backend_attention_forward(s->backend, x.out, lse, x.q, x.k, x.v, shape);
    to_tokens(s, s->config.num_heads, out, x.out, x.send, x.recv);
    tt_arena_pop_to(&s->arena, x.mark);
}

void tt_sequence_parallel_attention_backward(tt_model_state *s, const tt_attention_shape *shape, void *dq, void *dk,
                                             void *dv, const void *d_out, const void *out, const float *lse,
                                             const void *q, const void *k, const void *v, void *workspace, void *spare,
                                             size_t spare_bytes) {
    const int64_t H = s->config.num_heads, Hkv = s->config.num_kv_heads;
    const size_t q_bytes = s->sizes.sequence_parallel_q, kv_bytes = s->sizes.sequence_parallel_kv;
    const exchanged x = exchange_qkv(s, q, k, v);
    void *d_out_all = push(s, q_bytes, "d attention output, all tokens"), *dq_all = push(s, q_bytes, "d q, all tokens");
    void *dk_all = push(s, kv_bytes, "d k, all tokens"), *dv_all = push(s, kv_bytes, "d v, all tokens");
    to_heads(s, H, x.out, out, x.send, x.recv);
    to_heads(s, H, d_out_all, d_out, x.send, x.recv);
    tt_backend_attention_backward(s->backend, dq_all, dk_all, dv_all, d_out_all, x.out, lse, x.q, x.k, x.v, shape,
                                  workspace, spare, spare_bytes);
    to_tokens(s, H, dq, dq_all, x.send, x.recv);
    to_tokens(s, Hkv, dk, dk_all, x.send, x.recv);
    to_tokens(s, Hkv, dv, dv_all, x.send, x.recv);
    tt_arena_pop_to(&s->arena, x.mark);
}
