/* use_tensorboard: true, read back by an independent reader. A tiny run (the tiertrain binary, TT_BINARY) trains 6
 * steps with evals and writes output_dir/runs/<run>/events.out.tfevents.*; this test reads the records as TensorBoard
 * does: each length and payload checked against its masked CRC-32C (computed here with a table of its own, not the
 * writer's function), the payload decoded as the Event protocol buffer by field number and wire type (wall_time,
 * step, file_version, summary.value.tag / simple_value). The first event names the file version; every step's
 * train/loss, train/learning_rate, train/grad_norm and train/epoch equal metrics.jsonl's row as floats (to the one
 * float step its 9 printed digits may move them), and eval/loss its evals; a record with a flipped byte fails its CRC. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_util.h"

static uint32_t crc_table[256];

static void crc_table_init(void) { /* CRC-32C, reflected polynomial 0x82F63B78, a byte at a time */
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t masked_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    c = ~c;
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t varint(const unsigned char **p, const unsigned char *end) {
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        const unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
    }
    return v;
}

/* The scalars read: (step, tag, value). */
typedef struct scalar {
    int64_t step;
    char tag[64];
    float value;
} scalar;

static scalar scalars[4096];
static int scalar_count;
static char file_version[64];

/* Summary.Value: tag (1, string) and simple_value (2, float). */
static void read_value(const unsigned char *p, const unsigned char *end, int64_t step) {
    scalar *s = &scalars[scalar_count];
    memset(s, 0, sizeof *s);
    s->step = step;
    while (p < end) {
        const uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 2)) {
            const uint64_t n = varint(&p, end);
            snprintf(s->tag, sizeof s->tag, "%.*s", (int)n, (const char *)p);
            p += n;
        } else if (key == (2 << 3 | 5)) {
            memcpy(&s->value, p, 4);
            p += 4;
        } else {
            TT_EXPECT(false, "an unexpected field %llu in a summary value", (unsigned long long)key);
            return;
        }
    }
    if (scalar_count < (int)(sizeof scalars / sizeof scalars[0]) - 1) scalar_count++;
}

/* Event: wall_time (1, double), step (2, varint), file_version (3, string), summary (5, message of values (1)). */
static void read_event(const unsigned char *p, const unsigned char *end) {
    int64_t step = 0;
    bool has_wall_time = false;
    const unsigned char *summary = NULL, *summary_end = NULL;
    while (p < end) {
        const uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 1)) {
            double wall;
            memcpy(&wall, p, 8);
            has_wall_time = wall > 1.6e9;
            p += 8;
        } else if (key == (2 << 3 | 0)) {
            step = (int64_t)varint(&p, end);
        } else if (key == (3 << 3 | 2)) {
            const uint64_t n = varint(&p, end);
            snprintf(file_version, sizeof file_version, "%.*s", (int)n, (const char *)p);
            p += n;
        } else if (key == (5 << 3 | 2)) {
            const uint64_t n = varint(&p, end);
            summary = p;
            summary_end = p + n;
            p += n;
        } else {
            TT_EXPECT(false, "an unexpected field %llu in an event", (unsigned long long)key);
            return;
        }
    }
    TT_EXPECT(has_wall_time, "every event has a wall time");
    for (const unsigned char *q = summary; q && q < summary_end;) {
        const uint64_t key = varint(&q, summary_end), n = varint(&q, summary_end);
        TT_EXPECT(key == (1 << 3 | 2), "a summary holds values");
        read_value(q, q + n, step);
        q += n;
    }
}

/* Every record of the file; false at the first bad checksum. */
static bool read_records(const unsigned char *data, size_t size, int *records) {
    size_t at = 0;
    *records = 0;
    while (at < size) {
        if (size - at < 12) return false;
        uint64_t length;
        memcpy(&length, data + at, 8);
        if (le32(data + at + 8) != masked_crc32c(data + at, 8)) return false;
        if (size - at - 12 < length + 4) return false;
        const unsigned char *payload = data + at + 12;
        if (le32(payload + length) != masked_crc32c(payload, length)) return false;
        read_event(payload, payload + length);
        at += 12 + length + 4;
        (*records)++;
    }
    return true;
}

/* The event's float against metrics.jsonl's value: metrics.jsonl prints the double to 9 digits, so the float of that
 * may round the other way from the float of the double itself: one float step apart at most. */
static bool same_float(float event, double metrics) {
    const float f = (float)metrics;
    return event == f || event == nextafterf(f, INFINITY) || event == nextafterf(f, -INFINITY);
}

static float value_of(int64_t step, const char *tag) {
    for (int i = 0; i < scalar_count; i++)
        if (scalars[i].step == step && strcmp(scalars[i].tag, tag) == 0) return scalars[i].value;
    return NAN;
}

static int shell(const char *command) {
    fflush(stdout);
    const int status = system(command);
    return status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

/* The event file under dir/runs/<one directory>/, malloc'd, or NULL. */
static char *find_event_file(const char *output_dir) {
    char runs[4200], *found = NULL;
    snprintf(runs, sizeof runs, "%s/runs", output_dir);
    DIR *d = opendir(runs);
    if (!d) return NULL;
    for (struct dirent *e; (e = readdir(d)) && !found;) {
        if (e->d_name[0] == '.') continue;
        char run[4600];
        snprintf(run, sizeof run, "%s/%s", runs, e->d_name);
        DIR *r = opendir(run);
        for (struct dirent *f; r && (f = readdir(r)) && !found;)
            if (strncmp(f->d_name, "events.out.tfevents.", 20) == 0) {
                found = malloc(strlen(run) + strlen(f->d_name) + 2);
                sprintf(found, "%s/%s", run, f->d_name);
            }
        if (r) closedir(r);
    }
    closedir(d);
    return found;
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    const char *tiertrain = getenv("TT_BINARY");
    if (!tiertrain) {
        printf("test_tensorboard: TT_BINARY (the tiertrain binary) is not set; skipped\n");
        return 77;
    }
    crc_table_init();
    tt_test_scratch_open("tensorboard");
    tt_test_write_text("model.json", "{\"model_type\": \"llama\", \"vocab_size\": 257, \"hidden_size\": 16, "
                                     "\"intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
                                     "\"num_key_value_heads\": 1, \"max_position_embeddings\": 64, \"rms_norm_eps\": "
                                     "1e-5, \"tie_word_embeddings\": false}\n");
    char command[16384];
    snprintf(command, sizeof command,
             "cd '%s' && '%s' tokenize --bytes -o data.tok '%s/README.md' > /dev/null && '%s' train "
             "model_config=model.json datasets=[data.tok] sequence_len=32 micro_batch_size=2 max_steps=6 "
             "val_set_size=0.1 eval_steps=3 save_strategy=no learning_rate=3e-3 warmup_steps=2 use_tensorboard=true "
             "progress=false device=cpu output_dir=out > train.log 2>&1",
             tt_test_scratch_dir, tiertrain, source_dir, tiertrain);
    TT_EXPECT(shell(command) == 0, "the run trains (%s/train.log)", tt_test_scratch_dir);
    char *out = tt_test_path("out");
    char *events = find_event_file(out);
    TT_EXPECT(events != NULL, "an event file under out/runs/<run>/");
    if (events) {
        FILE *f = fopen(events, "rb");
        unsigned char *data = malloc(1 << 20);
        const size_t size = f ? fread(data, 1, 1 << 20, f) : 0;
        if (f) fclose(f);
        int records = 0;
        TT_EXPECT(read_records(data, size, &records), "every record's length and data pass their CRC-32C");
        TT_EXPECT(strcmp(file_version, "brain.Event:2") == 0, "the first event names the file version (%s)",
                  file_version);
        TT_EXPECT(records == 1 + 6 + 2, "a version event, 6 steps and 2 evals: %d records", records);
        /* every step's figures against metrics.jsonl */
        char *metrics = tt_test_path("out/metrics.jsonl");
        FILE *m = fopen(metrics, "r");
        char line[8192];
        int steps = 0, evals = 0;
        while (m && fgets(line, sizeof line, m)) {
            json_error_t error;
            json_t *row = json_loads(line, 0, &error);
            const int64_t step = json_integer_value(json_object_get(row, "step"));
            json_t *loss = json_object_get(row, "loss"), *eval = json_object_get(row, "eval_loss");
            if (loss) {
                steps++;
                TT_EXPECT(same_float(value_of(step, "train/loss"), json_number_value(loss)), "step %lld: train/loss",
                          (long long)step);
                TT_EXPECT(
                    same_float(value_of(step, "train/learning_rate"), json_number_value(json_object_get(row, "lr"))),
                    "step %lld: train/learning_rate", (long long)step);
                TT_EXPECT(
                    same_float(value_of(step, "train/grad_norm"), json_number_value(json_object_get(row, "grad_norm"))),
                    "step %lld: train/grad_norm", (long long)step);
                TT_EXPECT(same_float(value_of(step, "train/epoch"), json_number_value(json_object_get(row, "epoch"))),
                          "step %lld: train/epoch", (long long)step);
                TT_EXPECT(value_of(step, "memory/host_peak_mib") > 0, "step %lld: the host tier's peak",
                          (long long)step);
            }
            if (eval) {
                evals++;
                TT_EXPECT(same_float(value_of(step, "eval/loss"), json_number_value(eval)), "step %lld: eval/loss",
                          (long long)step);
                TT_EXPECT(fabsf(value_of(step, "eval/perplexity") - expf((float)json_number_value(eval))) <
                              1e-4f * value_of(step, "eval/perplexity"),
                          "step %lld: eval/perplexity", (long long)step);
            }
            json_decref(row);
        }
        if (m) fclose(m);
        TT_EXPECT(steps == 6 && evals == 2, "metrics.jsonl: %d steps, %d evals", steps, evals);
        /* a flipped byte in the last record's data fails its checksum */
        data[size - 6] ^= 0x40;
        scalar_count = 0;
        TT_EXPECT(!read_records(data, size, &records), "a corrupted record fails its CRC");
        free(metrics);
        free(data);
        free(events);
    }
    free(out);
    tt_test_scratch_close();
    return tt_test_summary("tensorboard");
}
