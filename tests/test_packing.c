/* Sample packing on the CPU oracle:
 *  - first-fit decreasing packs a worked example into the bins it must;
 *  - the loader packs a version 2 file's documents (targets inside each document only, positions
 *    restarting at 0, padding after them) and a version 1 stream's documents at its eos ids (long
 *    ones dropped or truncated and counted), deterministically, with documents held out for eval;
 *  - a packed micro-batch is the documents run one by one: each document's loss and gradient
 *    contribution (the packed batch with only that document's targets) equal bit for bit those of the
 *    document with every other document removed (its tokens made padding), and those of the document
 *    alone in an unpacked sequence of its own, wherever it lies in the packed batch (the CPU's GEMMs give
 *    a row the same bits at any row); the whole packed batch's loss and gradients equal the sum of the
 *    documents' (each from zero) up to rounding; without the document mask they would not.
 *    (test_packing_exact.c: the whole batch bit for bit against the documents accumulated one by one.) */
#include <string.h>

#include "core/rng.h"
#include "data/sequence_packing.h"
#include "data/token_file.h"
#include "memory/plan.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/data.h"
#include "train/model_io.h"
#include "train/model_setup.h"
#include "train/step.h"

static void test_first_fit_decreasing(void) {
    const int64_t lengths[] = {3, 7, 5, 5, 2, 8, 1};
    tt_packing p;
    tt_pack_documents(lengths, 7, 10, &p);
    /* 8 -> bin 0, 7 -> bin 1, 5 and 5 -> bin 2, 3 -> bin 1, 2 -> bin 0, 1 -> bin 3 */
    const int64_t start[] = {0, 2, 4, 6, 7}, members[] = {4, 5, 0, 1, 2, 3, 6};
    TT_EXPECT(p.bin_count == 4 && p.tokens == 31, "%lld bins, %lld tokens", (long long)p.bin_count,
              (long long)p.tokens);
    TT_EXPECT(p.bin_count == 4 && memcmp(p.bin_start, start, sizeof start) == 0 &&
                  memcmp(p.members, members, sizeof members) == 0,
              "first-fit decreasing bins");
    tt_packing_free(&p);
    /* every bin within capacity, every document once, many documents */
    enum { COUNT = 5000 };
    int64_t *many = malloc(sizeof(int64_t) * COUNT);
    tt_rng rng;
    tt_rng_seed(&rng, 9);
    int64_t total = 0;
    for (int i = 0; i < COUNT; i++) total += many[i] = 1 + (int64_t)(tt_rng_next(&rng) % 100);
    tt_pack_documents(many, COUNT, 128, &p);
    bool ok = p.tokens == total && p.bin_start[p.bin_count] == COUNT;
    int *seen = calloc(COUNT, sizeof(int));
    for (int64_t b = 0; b < p.bin_count && ok; b++) {
        int64_t used = 0;
        for (int64_t m = p.bin_start[b]; m < p.bin_start[b + 1]; m++) {
            used += many[p.members[m]];
            seen[p.members[m]]++;
            ok = ok && (m == p.bin_start[b] || p.members[m] > p.members[m - 1]);
        }
        ok = ok && used >= 1 && used <= 128;
    }
    for (int i = 0; i < COUNT; i++) ok = ok && seen[i] == 1;
    TT_EXPECT(ok, "5000 documents packed: every bin within 128 tokens, each document once, ascending in its bin");
    TT_EXPECT((double)total / ((double)p.bin_count * 128) > 0.95, "efficiency %.3f",
              (double)total / ((double)p.bin_count * 128));
    free(seen);
    free(many);
    tt_packing_free(&p);
}

/* First-fit in the given order (axolotl's multipack pack_group): bins in the order opened, members in the order they
 * came, at most max_per_bin a bin, groups packed apart. */
static void test_first_fit_in_order(void) {
    const int64_t lengths[] = {3, 7, 5, 5, 2, 8, 1};
    tt_packing p;
    tt_pack_in_order(lengths, 7, 10, 200, 100000, &p);
    /* 3 -> bin 0, 7 -> bin 0 (10), 5 -> bin 1, 5 -> bin 1 (10), 2 -> bin 2, 8 -> bin 2 (10), 1 -> bin 3 */
    const int64_t start[] = {0, 2, 4, 6, 7}, members[] = {0, 1, 2, 3, 4, 5, 6};
    TT_EXPECT(p.bin_count == 4 && p.tokens == 31 && memcmp(p.bin_start, start, sizeof start) == 0 &&
                  memcmp(p.members, members, sizeof members) == 0,
              "first fit in order: %lld bins", (long long)p.bin_count);
    tt_packing_free(&p);
    /* a later, smaller document goes back to the first bin with room */
    const int64_t back[] = {6, 6, 3, 4};
    tt_pack_in_order(back, 4, 10, 200, 100000, &p);
    const int64_t back_start[] = {0, 2, 4}, back_members[] = {0, 2, 1, 3};
    TT_EXPECT(p.bin_count == 2 && memcmp(p.bin_start, back_start, sizeof back_start) == 0 &&
                  memcmp(p.members, back_members, sizeof back_members) == 0,
              "6 | 6, then 3 into bin 0 (9), 4 into bin 1 (10)");
    tt_packing_free(&p);
    /* at most two documents a bin (bin_size); groups of three packed apart */
    const int64_t ones[] = {1, 1, 1, 1, 1};
    tt_pack_in_order(ones, 5, 10, 2, 100000, &p);
    TT_EXPECT(p.bin_count == 3 && p.bin_start[1] == 2 && p.bin_start[2] == 4, "bin_size 2: %lld bins",
              (long long)p.bin_count);
    tt_packing_free(&p);
    tt_pack_in_order(ones, 5, 10, 200, 3, &p);
    TT_EXPECT(p.bin_count == 2 && p.bin_start[1] == 3 && p.bin_start[2] == 5, "groups of 3: bins {0,1,2} {3,4}");
    tt_packing_free(&p);
}

/* Documents 0..3 of lengths 3, 5, 2, 4 (tokens 10 + 10 d + k), the first token of each masked. */
static char *write_documents_file(void) {
    static uint32_t tokens[14];
    static uint8_t labels[14];
    static uint64_t starts[] = {0, 3, 8, 10, 14};
    for (int d = 0; d < 4; d++)
        for (uint64_t t = starts[d]; t < starts[d + 1]; t++) {
            tokens[t] = (uint32_t)(10 + 10 * d + (int)(t - starts[d]));
            labels[t] = t != starts[d];
        }
    tt_token_documents docs = {.tokens = tokens,
                               .labels = labels,
                               .starts = starts,
                               .token_count = 14,
                               .document_count = 4,
                               .vocab_size = 100,
                               .eos_id = TT_TOKEN_NO_EOS,
                               .pad_id = 99};
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/docs.tok", tt_test_scratch_dir);
    tt_token_file_write_documents(path, &docs);
    return path;
}

/* One packed sequence's documents (by their first input, 10 d), checked: targets inside each document, positions
 * from 0, padding after them. Returns how many documents it holds; marks them in seen[4]. */
static int check_packed_row(const int32_t *in, const int32_t *tg, const int32_t *pos, int seq_len, int *seen) {
    static const int length[4] = {3, 5, 2, 4};
    int t = 0, documents = 0;
    while (t < seq_len && in[t] != 99) {
        const int d = in[t] / 10 - 1;
        if (d < 0 || d > 3 || t + length[d] > seq_len) return -1;
        for (int k = 0; k < length[d]; k++, t++) {
            const bool last = k + 1 == length[d];
            if (in[t] != 10 + 10 * d + k || pos[t] != k || tg[t] != (last ? TT_IGNORE_INDEX : 10 + 10 * d + k + 1))
                return -1;
        }
        seen[d]++;
        documents++;
    }
    for (int k = 0; t < seq_len; t++, k++)
        if (in[t] != 99 || tg[t] != TT_IGNORE_INDEX || pos[t] != k) return -1;
    return documents;
}

static void test_packed_loader(void) {
    char *path = write_documents_file();
    tt_dataset ds;
    tt_dataset_open_packed(&ds, &path, 1, 100, 8, 0.0, 1, false, 200, 100000);
    TT_EXPECT(ds.packing.train_documents == 4 && ds.packing.train_tokens == 14 && ds.train_count >= 2 &&
                  ds.train_count <= 3 && ds.packing.train_sequences == ds.train_count,
              "%lld sequences of %lld documents", (long long)ds.train_count, (long long)ds.packing.train_documents);
    int32_t in[8], tg[8], pos[8];
    /* three epochs: each visits every document once, in sequences of whole documents */
    for (int e = 0; e < 3; e++) {
        int seen[4] = {0, 0, 0, 0};
        bool rows_ok = ds.epoch == e && ds.index_in_epoch == 0;
        const int64_t sequences = ds.train_count;
        TT_EXPECT(tt_dataset_epoch_sequences(&ds, e) == sequences, "epoch %d's count", e);
        for (int64_t i = 0; i < sequences; i++) {
            tt_dataset_next_train_positions(&ds, in, tg, pos);
            rows_ok = rows_ok && check_packed_row(in, tg, pos, 8, seen) >= 1;
        }
        TT_EXPECT(rows_ok && seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1,
                  "epoch %d: every document once, inputs, targets inside each document, positions from 0, padding", e);
    }
    tt_dataset_close(&ds);
    /* a held-out document is packed apart */
    tt_dataset_open_packed(&ds, &path, 1, 100, 8, 1, 1, false, 200, 100000);
    TT_EXPECT(ds.packing.eval_documents == 1 && ds.eval_count == 1 && ds.packing.train_documents == 3,
              "one eval document in one eval sequence (%lld, %lld)", (long long)ds.packing.eval_documents,
              (long long)ds.eval_count);
    tt_dataset_get_eval_positions(&ds, 0, in, tg, pos);
    TT_EXPECT(pos[0] == 0 && in[0] % 10 == 0, "the eval sequence starts a document");
    tt_dataset_close(&ds);
    free(path);

    /* version 1: documents end at eos (id 1); the 9-token one is longer than 6 */
    const uint32_t stream[] = {5, 6, 1, 7, 8, 9, 10, 11, 12, 13, 14, 1, 15, 1, 16, 17};
    char v1[4200];
    snprintf(v1, sizeof v1, "%s/stream.tok", tt_test_scratch_dir);
    tt_token_file_write(v1, stream, 16, 100, 1);
    char *v1_path = v1;
    tt_dataset_open_packed(&ds, &v1_path, 1, 100, 6, 0.0, 3, false, 200, 100000);
    TT_EXPECT(ds.packing.dropped == 1 && ds.packing.train_documents == 3 && ds.packing.train_tokens == 7,
              "drop: %lld dropped, %lld documents of %lld tokens", (long long)ds.packing.dropped,
              (long long)ds.packing.train_documents, (long long)ds.packing.train_tokens);
    tt_dataset_next_train_positions(&ds, in, tg, pos);
    /* one bin of 6 can hold 3 + 2 ({5,6,1}, {15,1}) or the trailing {16,17} */
    bool stream_ok = true;
    for (int t = 0; t < 6; t++)
        stream_ok = stream_ok && (pos[t] == 0 || tg[t - 1] == in[t] || tg[t - 1] == TT_IGNORE_INDEX);
    TT_EXPECT(stream_ok && ds.train_count >= 2 && ds.train_count <= 3, "version 1 documents packed at their eos ids");
    tt_dataset_close(&ds);
    tt_dataset_open_packed(&ds, &v1_path, 1, 100, 6, 0.0, 3, true, 200, 100000);
    TT_EXPECT(ds.packing.truncated == 1 && ds.packing.train_documents == 4 && ds.packing.train_tokens == 13,
              "truncate: %lld truncated, %lld documents of %lld tokens", (long long)ds.packing.truncated,
              (long long)ds.packing.train_documents, (long long)ds.packing.train_tokens);
    tt_dataset_close(&ds);
}

/* Per-epoch packing: 60 documents of 1..20 tokens (document d's first token is d + 1, the rest 500 + k) in
 * sequences of 32: each epoch packs them anew in its own seeded order; every epoch holds every training document
 * once; two epochs differ; a dataset opened again and set to a position mid-epoch 2 goes on exactly as the first
 * did; the eval documents stay out, packed once. */
enum { EPOCH_DOCS = 60, EPOCH_SEQ = 32 };

static char *write_many_documents(void) {
    static uint32_t tokens[EPOCH_DOCS * 20];
    static uint8_t labels[EPOCH_DOCS * 20];
    static uint64_t starts[EPOCH_DOCS + 1];
    tt_rng rng;
    tt_rng_seed(&rng, 77);
    uint64_t at = 0;
    for (int d = 0; d < EPOCH_DOCS; d++) {
        starts[d] = at;
        const int length = 1 + (int)(tt_rng_next(&rng) % 20);
        for (int k = 0; k < length; k++, at++) {
            tokens[at] = k == 0 ? (uint32_t)(d + 1) : (uint32_t)(500 + k);
            labels[at] = 1;
        }
    }
    starts[EPOCH_DOCS] = at;
    tt_token_documents docs = {.tokens = tokens,
                               .labels = labels,
                               .starts = starts,
                               .token_count = at,
                               .document_count = EPOCH_DOCS,
                               .vocab_size = 1000,
                               .eos_id = TT_TOKEN_NO_EOS,
                               .pad_id = 999};
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/many.tok", tt_test_scratch_dir);
    tt_token_file_write_documents(path, &docs);
    return path;
}

/* The next `count` sequences' inputs into rows[count][EPOCH_SEQ]. */
static void draw(tt_dataset *ds, int64_t count, int32_t *rows) {
    int32_t tg[EPOCH_SEQ], pos[EPOCH_SEQ];
    for (int64_t i = 0; i < count; i++) tt_dataset_next_train_positions(ds, rows + i * EPOCH_SEQ, tg, pos);
}

/* Every document in rows[count] (by its first token, d + 1) counted into seen[EPOCH_DOCS + 1]. */
static void count_documents(const int32_t *rows, int64_t count, int *seen) {
    for (int64_t i = 0; i < count; i++) {
        for (int t = 0; t < EPOCH_SEQ; t++) {
            const int32_t id = rows[i * EPOCH_SEQ + t];
            if (id >= 1 && id <= EPOCH_DOCS) seen[id]++;
        }
    }
}

static void test_packing_per_epoch(void) {
    char *path = write_many_documents();
    tt_dataset a, b;
    tt_dataset_open_packed(&a, &path, 1, 1000, EPOCH_SEQ, 6, 5, false, 200, 100000);
    TT_EXPECT(a.packing.train_documents == 54 && a.packing.eval_documents == 6, "54 training, 6 eval documents");
    const int64_t n0 = a.train_count, n1 = tt_dataset_epoch_sequences(&a, 1);
    int32_t *epoch0 = malloc(sizeof(int32_t) * (size_t)(n0 * EPOCH_SEQ));
    int32_t *epoch1 = malloc(sizeof(int32_t) * (size_t)(n1 * EPOCH_SEQ));
    draw(&a, n0, epoch0);
    TT_EXPECT(a.epoch == 1 && a.index_in_epoch == 0 && a.train_count == n1,
              "epoch 2 packed: %lld sequences, %lld "
              "counted ahead",
              (long long)a.train_count, (long long)n1);
    draw(&a, n1, epoch1);
    /* each epoch: every training document exactly once, no eval document */
    int seen0[EPOCH_DOCS + 1] = {0}, seen1[EPOCH_DOCS + 1] = {0}, eval_seen[EPOCH_DOCS + 1] = {0};
    count_documents(epoch0, n0, seen0);
    count_documents(epoch1, n1, seen1);
    int32_t in[EPOCH_SEQ], tg[EPOCH_SEQ], pos[EPOCH_SEQ];
    for (int64_t i = 0; i < a.eval_count; i++) {
        tt_dataset_get_eval_positions(&a, i, in, tg, pos);
        count_documents(in, 1, eval_seen);
    }
    bool once = true;
    for (int d = 1; d <= EPOCH_DOCS; d++)
        once = once && seen0[d] == !eval_seen[d] && seen1[d] == !eval_seen[d] && eval_seen[d] <= 1;
    TT_EXPECT(once, "both epochs hold every training document exactly once, and no eval document");
    /* the epochs' packings differ */
    TT_EXPECT(n0 != n1 || memcmp(epoch0, epoch1, sizeof(int32_t) * (size_t)(n0 * EPOCH_SEQ)) != 0,
              "epoch 2 is packed anew, not epoch 1 again");
    /* the same seed: the same packing; set to (epoch 2, sequence 3) it goes on as the first did */
    tt_dataset_open_packed(&b, &path, 1, 1000, EPOCH_SEQ, 6, 5, false, 200, 100000);
    int32_t *again = malloc(sizeof(int32_t) * (size_t)(n0 * EPOCH_SEQ));
    draw(&b, n0, again);
    TT_EXPECT(memcmp(again, epoch0, sizeof(int32_t) * (size_t)(n0 * EPOCH_SEQ)) == 0, "the same seed packs the same");
    tt_dataset_close(&b);
    tt_dataset_open_packed(&b, &path, 1, 1000, EPOCH_SEQ, 6, 5, false, 200, 100000);
    tt_dataset_set_position(&b, 1, 3);
    TT_EXPECT(b.train_count == n1, "the resumed epoch's packing");
    draw(&b, n1 - 3, again);
    TT_EXPECT(memcmp(again, epoch1 + 3 * EPOCH_SEQ, sizeof(int32_t) * (size_t)((n1 - 3) * EPOCH_SEQ)) == 0,
              "a dataset set to epoch 2, sequence 3 draws what the uninterrupted one drew");
    TT_EXPECT(b.epoch == 2 && b.index_in_epoch == 0, "and then moves to epoch 3");
    tt_dataset_close(&b);
    /* the number of sequences in 2.5 epochs: both whole epochs and half the third */
    const double in_epochs = tt_dataset_sequences_in_epochs(&a, 2.5);
    TT_EXPECT(in_epochs == (double)n0 + (double)n1 + 0.5 * (double)tt_dataset_epoch_sequences(&a, 2),
              "sequences in 2.5 epochs: %g", in_epochs);
    /* another seed, another packing */
    tt_dataset_open_packed(&b, &path, 1, 1000, EPOCH_SEQ, 6, 6, false, 200, 100000);
    TT_EXPECT(b.train_count > 0, "seed 6 opens");
    tt_dataset_close(&b);
    tt_dataset_close(&a);
    free(again);
    free(epoch0);
    free(epoch1);
    free(path);
}

/* ---- the model: packed == one by one ---- */

enum { B = 2, T = 16 };

typedef struct layout {
    int documents;
    int sequence[8], start[8], length[8]; /* document d: sequence, first token, length */
} layout;

static void make_state(tt_model_state *s, bool qwen3, bool packed) {
    tt_model_config config = tt_test_tiny_config(qwen3);
    tt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.num_layers = config.num_layers;
    plan.layers = calloc((size_t)config.num_layers, sizeof(tt_layer_plan));
    for (int64_t l = 0; l < config.num_layers; l++) {
        plan.layers[l].recompute = TT_RECOMPUTE_NOTHING;
        plan.layers[l].saved_activation_tier = TT_TIER_HOST;
        plan.layers[l].layer_input_tier = TT_TIER_HOST;
    }
    plan.compute_tier = TT_TIER_HOST;
    plan.offload_dir = "/tmp";
    plan.offload_ring = 2;
    plan.saved_ring = 1;
    plan.micro_batch = B;
    plan.seq_len = T;
    plan.loss_chunk = 8;
    plan.packed_documents = packed;
    plan.precision = (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    plan.activation_bytes = plan.weight_bytes = plan.gradient_bytes = plan.moment_bytes = 4;
    tt_plan_tile_mlp(&plan, 1);
    const tt_trainable_spec spec = {0};
    tt_model_state_init_trainable(s, &config, &plan, &spec, tt_test_cpu_backend(), 0);
    float *initial = calloc((size_t)s->params.total_numel, sizeof(float));
    tt_weights_init_random(initial, &s->params, 0.3, 17);
    tt_model_set_weights(s, initial);
    free(initial);
}

/* One forward/backward from zero gradients; returns the loss sum, the gradients into grad. */
static double run_step(tt_model_state *s, const int32_t *in, const int32_t *tg, const int32_t *pos, float *grad,
                       int64_t *count) {
    tt_model_set_batch(s, in, tg);
    if (pos) tt_model_set_positions(s, pos);
    tt_backend_zero(s->backend, s->gradients, s->sizes.gradients);
    double loss = tt_step_forward_backward(s, 1.0, count);
    memcpy(grad, s->gradients, s->sizes.gradients);
    return loss;
}

static void test_packed_equals_one_by_one(bool qwen3, const layout *lay) {
    tt_model_state packed, alone;
    make_state(&packed, qwen3, true);
    make_state(&alone, qwen3, false);
    const int64_t n_grad = (int64_t)(packed.sizes.gradients / sizeof(float));
    int32_t tokens[B * T], in[B * T], tg[B * T], pos[B * T];
    tt_rng rng;
    tt_rng_seed(&rng, 77);
    for (int n = 0; n < B * T; n++) tokens[n] = (int32_t)(tt_rng_next(&rng) % 50);
    /* the packed micro-batch: each document's tokens at positions 0, 1, ...; padding (input 0, ignored) where no
     * document is, a document of its own (positions counting from 0 after a document) */
    bool padding[B * T];
    for (int n = 0; n < B * T; n++) padding[n] = true;
    for (int d = 0; d < lay->documents; d++)
        for (int k = 0; k < lay->length[d]; k++) {
            const int n = lay->sequence[d] * T + lay->start[d] + k;
            in[n] = tokens[n];
            pos[n] = k;
            padding[n] = false;
        }
    for (int n = 0; n < B * T; n++)
        if (padding[n]) {
            in[n] = 0;
            pos[n] = n % T > 0 && padding[n - 1] ? pos[n - 1] + 1 : 0;
        }
    float *grad = malloc(packed.sizes.gradients), *sum = calloc((size_t)n_grad, sizeof(float));
    float *reference = malloc(alone.sizes.gradients);
    double loss_sum = 0;
    int64_t count_sum = 0;
    for (int d = 0; d < lay->documents; d++) {
        /* the packed batch with only document d's targets */
        for (int n = 0; n < B * T; n++) tg[n] = TT_IGNORE_INDEX;
        const int first = lay->sequence[d] * T + lay->start[d];
        for (int k = 0; k + 1 < lay->length[d]; k++) tg[first + k] = tokens[first + k + 1];
        int64_t count = 0, count_alone = 0;
        const double loss = run_step(&packed, in, tg, pos, grad, &count);
        for (int64_t i = 0; i < n_grad; i++) sum[i] += grad[i];
        loss_sum += loss;
        count_sum += count;

        /* document d alone at its place: every other document's tokens become padding. Nothing of them may
         * reach document d's loss or gradient, bit for bit. */
        int32_t in_alone[B * T], tg_alone[B * T];
        for (int n = 0; n < B * T; n++) in_alone[n] = n >= first && n < first + lay->length[d] ? in[n] : 0;
        const double loss_here = run_step(&packed, in_alone, tg, pos, reference, &count_alone);
        int64_t differ = 0;
        for (int64_t i = 0; i < n_grad; i++) differ += grad[i] != reference[i];
        TT_EXPECT(count == count_alone && memcmp(&loss, &loss_here, sizeof loss) == 0 && differ == 0,
                  "qwen3=%d document %d (%d tokens at %d:%d): packed loss %.17g over %lld, alone at its place %.17g "
                  "over %lld; %lld of %lld gradient values differ",
                  qwen3, d, lay->length[d], lay->sequence[d], lay->start[d], loss, (long long)count, loss_here,
                  (long long)count_alone, (long long)differ, (long long)n_grad);

        /* document d as a sequence of its own, unpacked (positions 0.. from the sequence's start, padding after
         * it): the same function, bit for bit wherever the document lies in the packed batch. */
        for (int n = 0; n < B * T; n++) {
            in_alone[n] = 0;
            tg_alone[n] = TT_IGNORE_INDEX;
        }
        for (int k = 0; k < lay->length[d]; k++) {
            in_alone[k] = tokens[first + k];
            if (k + 1 < lay->length[d]) tg_alone[k] = tokens[first + k + 1];
        }
        const double loss_alone = run_step(&alone, in_alone, tg_alone, NULL, reference, &count_alone);
        differ = 0;
        for (int64_t i = 0; i < n_grad; i++) differ += grad[i] != reference[i];
        TT_EXPECT(count == count_alone && memcmp(&loss, &loss_alone, sizeof loss) == 0 && differ == 0,
                  "qwen3=%d document %d at %d:%d: packed loss %.17g, alone %.17g; %lld gradient values differ", qwen3,
                  d, lay->sequence[d], lay->start[d], loss, loss_alone, (long long)differ);
    }
    /* the whole packed batch: the sum of the documents, up to rounding */
    for (int n = 0; n < B * T; n++) tg[n] = TT_IGNORE_INDEX;
    for (int d = 0; d < lay->documents; d++) {
        const int first = lay->sequence[d] * T + lay->start[d];
        for (int k = 0; k + 1 < lay->length[d]; k++) tg[first + k] = tokens[first + k + 1];
    }
    int64_t count = 0;
    const double loss = run_step(&packed, in, tg, pos, grad, &count);
    TT_EXPECT(count == count_sum && fabs(loss - loss_sum) <= 1e-12 * fabs(loss_sum),
              "qwen3=%d: packed batch loss %.17g over %lld, sum of documents %.17g over %lld", qwen3, loss,
              (long long)count, loss_sum, (long long)count_sum);
    TT_EXPECT(tt_max_rel_error_f32(grad, sum, (size_t)n_grad) < 1e-4,
              "qwen3=%d: packed gradients vs the sum of the documents': max relative error %g", qwen3,
              tt_max_rel_error_f32(grad, sum, (size_t)n_grad));
    /* without the document mask and the restarting positions the documents would see each other */
    if (lay->documents > B) {
        int64_t count_plain = 0;
        for (int n = 0; n < B * T; n++) pos[n] = n % T;
        const double loss_plain = run_step(&packed, in, tg, pos, grad, &count_plain);
        TT_EXPECT(fabs(loss_plain - loss) > 1e-6 * fabs(loss),
                  "qwen3=%d: one document per sequence changes the loss (%.17g vs %.17g)", qwen3, loss_plain, loss);
    }
    free(grad);
    free(sum);
    free(reference);
    tt_model_state_free(&packed);
    tt_model_state_free(&alone);
}

int main(void) {
    tt_test_scratch_open("packing");
    test_first_fit_decreasing();
    test_first_fit_in_order();
    test_packing_per_epoch();
    test_packed_loader();
    /* sequence 0: documents of 5, 7 and 3 tokens, one token of padding; sequence 1: documents of 1, 9
     * and 6 tokens (full) */
    const layout mixed = {
        .documents = 6, .sequence = {0, 0, 0, 1, 1, 1}, .start = {0, 5, 12, 0, 1, 10}, .length = {5, 7, 3, 1, 9, 6}};
    /* one document filling a sequence, one with padding after it */
    const layout whole = {.documents = 2, .sequence = {0, 1}, .start = {0, 0}, .length = {16, 11}};
    for (int qwen3 = 0; qwen3 < 2; qwen3++) {
        test_packed_equals_one_by_one(qwen3, &mixed);
        test_packed_equals_one_by_one(qwen3, &whole);
    }
    tt_test_scratch_close();
    return tt_test_summary("packing");
}
