/* Tokenizer throughput: MB/s of text encoded by one thread, then by N threads sharing one
 * loaded tokenizer (each thread encodes its share of the documents). The first pass over the
 * corpus warms the per-thread pre-token caches, as a long tokenization run would be warm.
 *
 * usage: bench_tokenizer TOKENIZER_JSON_OR_DIR THREADS FILE... */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "data/tokenizer.h"

typedef struct doc {
    char *text;
    size_t len;
} doc;

typedef struct job {
    const tt_tokenizer *tok;
    const doc *docs;
    int first, step, count, passes;
    int64_t tokens;
} job;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run_job(void *arg) {
    job *j = arg;
    tt_token_ids ids = {0};
    for (int p = 0; p < j->passes; p++)
        for (int i = j->first; i < j->count; i += j->step) {
            ids.count = 0;
            tt_tokenizer_encode(j->tok, j->docs[i].text, j->docs[i].len, true, &ids);
            j->tokens += ids.count;
        }
    tt_token_ids_free(&ids);
    return NULL;
}

/* Seconds for `threads` threads to encode every document `passes` times. */
static double timed(const tt_tokenizer *tok, const doc *docs, int count, int threads, int passes, int64_t *tokens) {
    pthread_t *t = tt_xcalloc((size_t)threads, sizeof(pthread_t), "threads");
    job *jobs = tt_xcalloc((size_t)threads, sizeof(job), "jobs");
    double start = now_seconds();
    for (int k = 0; k < threads; k++) {
        jobs[k] = (job){tok, docs, k, threads, count, passes, 0};
        pthread_create(&t[k], NULL, run_job, &jobs[k]);
    }
    *tokens = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(t[k], NULL);
        *tokens += jobs[k].tokens;
    }
    double seconds = now_seconds() - start;
    free(t);
    free(jobs);
    return seconds;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON_OR_DIR THREADS FILE...\n", argv[0]);
        return 1;
    }
    double t0 = now_seconds();
    tt_tokenizer *tok = tt_tokenizer_load(argv[1]);
    double load = now_seconds() - t0;
    int threads = atoi(argv[2]);
    int count = argc - 3;
    doc *docs = tt_xcalloc((size_t)count, sizeof(doc), "documents");
    size_t bytes = 0;
    for (int i = 0; i < count; i++) {
        FILE *f = fopen(argv[3 + i], "rb");
        if (!f) tt_die("cannot read %s", argv[3 + i]);
        fseek(f, 0, SEEK_END);
        docs[i].len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        docs[i].text = tt_xmalloc(docs[i].len + 1, "document");
        if (fread(docs[i].text, 1, docs[i].len, f) != docs[i].len) tt_die("cannot read %s", argv[3 + i]);
        fclose(f);
        bytes += docs[i].len;
    }
    int64_t tokens;
    double cold = timed(tok, docs, count, 1, 1, &tokens);
    const int passes = 3;
    double one = timed(tok, docs, count, 1, passes, &tokens);
    double many = timed(tok, docs, count, threads, passes, &tokens);
    double mb = (double)bytes * 1e-6;
    printf("%s: load %.2f s; %d documents, %.2f MB, %lld tokens per pass\n", argv[1], load, count, mb,
           (long long)(tokens / passes));
    printf("  1 thread, cold cache: %.1f MB/s\n", mb / cold);
    printf("  1 thread:  %.1f MB/s\n", mb * passes / one);
    printf("  %d threads: %.1f MB/s\n", threads, mb * passes / many);
    for (int i = 0; i < count; i++) free(docs[i].text);
    free(docs);
    tt_tokenizer_free(tok);
    return 0;
}
