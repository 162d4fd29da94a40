/* Host half of the deterministic embedding backward: positions grouped by token id. */
#include <string.h>

#include "core/check.h"
#include "ops/cuda/ops_cuda.h"

int64_t tt_embedding_backward_order(const int32_t *ids, int64_t N, int64_t vocab, int32_t *order, int32_t *starts,
                                    int32_t *segment_tokens, int32_t *counts) {
    /* counts[vocab + 1]: a stable counting sort keeps positions ascending within a token. */
    memset(counts, 0, sizeof(int32_t) * (size_t)(vocab + 1));
    for (int64_t n = 0; n < N; n++) {
        TT_CHECK(ids[n] >= 0 && ids[n] < vocab, "token id %d at %lld outside [0, %lld)", ids[n], (long long)n,
                 (long long)vocab);
        counts[ids[n] + 1]++;
    }
    int64_t segments = 0;
    for (int64_t v = 0; v < vocab; v++) {
        if (counts[v + 1] > 0) segment_tokens[segments++] = (int32_t)v;
        counts[v + 1] += counts[v];
    }
    for (int64_t s = 0; s < segments; s++) starts[s] = counts[segment_tokens[s]];
    starts[segments] = (int32_t)N;
    for (int64_t n = 0; n < N; n++) order[counts[ids[n]]++] = (int32_t)n;
    return segments;
}
