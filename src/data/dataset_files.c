/* A JSON dataset entry's files and their records (dataset_files.h). */
#include "data/dataset_files.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/hf_cache.h"
#include "data/json_records.h"
#include "data/parquet.h"

enum { MAX_DEPTH = 16, MAX_FILES = 100000 };

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool is_parquet(const char *name) { return ends_with(name, ".parquet"); }

static bool is_data_file(const char *name) {
    static const char *const suffixes[] = {".json",     ".jsonl",     ".json.gz", ".jsonl.gz",
                                           ".json.zst", ".jsonl.zst", ".ndjson",  ".parquet"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (ends_with(name, suffixes[i])) return true;
    return false;
}

/* A data format the datasets library reads and tiertrain does not (yet): named in the error when nothing else is. */
static const char *other_data_format(const char *name) {
    if (ends_with(name, ".arrow")) return "Arrow";
    if (ends_with(name, ".csv") || ends_with(name, ".tsv")) return "CSV";
    return NULL;
}

typedef struct file_list {
    char **paths;
    int count, cap;
    const char *other; /* a format found and not read */
    char other_example[512];
} file_list;

static void walk(const char *dir, int depth, file_list *list) {
    if (depth > MAX_DEPTH) tt_die("dataset directory %s: more than %d levels of directories", dir, MAX_DEPTH);
    DIR *d = opendir(dir);
    if (!d) tt_die("cannot read dataset directory %s: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue; /* ., .., .gitattributes, .cache */
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *path = tt_xmalloc(n, "a path");
        snprintf(path, n, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) { /* a dangling link (an interrupted download): not data */
            free(path);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            walk(path, depth + 1, list);
            free(path);
        } else if (S_ISREG(st.st_mode) && is_data_file(e->d_name)) {
            if (list->count == MAX_FILES) tt_die("dataset directory %s: more than %d data files", dir, MAX_FILES);
            if (list->count == list->cap) {
                list->cap = list->cap ? 2 * list->cap : 16;
                list->paths = tt_xrealloc(list->paths, sizeof(char *) * (size_t)list->cap, "dataset files");
            }
            list->paths[list->count++] = path;
        } else {
            if (!list->other && other_data_format(e->d_name)) {
                list->other = other_data_format(e->d_name);
                snprintf(list->other_example, sizeof list->other_example, "%s", path);
            }
            free(path);
        }
    }
    closedir(d);
}

typedef enum { SPLIT_NONE, SPLIT_TRAIN, SPLIT_OTHER } split_kind;

/* The split a file's path (below the dataset's root) names, as the datasets library reads file and directory names:
 * a keyword between separators (-, _, ., /, space, digits). */
static split_kind split_of(const char *relative) {
    static const char *const train[] = {"train", "training"};
    static const char *const other[] = {"test", "testing", "eval", "evaluation", "validation", "valid", "dev", "val"};
    split_kind kind = SPLIT_NONE;
    for (const char *p = relative; *p;) {
        while (*p && !isalpha((unsigned char)*p)) p++;
        const char *start = p;
        while (isalpha((unsigned char)*p)) p++;
        size_t n = (size_t)(p - start);
        if (n == 0) break;
        char word[16];
        if (n >= sizeof word) continue;
        for (size_t i = 0; i < n; i++) word[i] = (char)tolower((unsigned char)start[i]);
        word[n] = 0;
        for (size_t i = 0; i < sizeof train / sizeof train[0]; i++)
            if (strcmp(word, train[i]) == 0) return SPLIT_TRAIN;
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
            if (strcmp(word, other[i]) == 0) kind = SPLIT_OTHER;
    }
    return kind;
}

static int compare_paths(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void tt_dataset_files_find(const char *path, const char *config_name, tt_dataset_files *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    char *root = NULL;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        if (config_name)
            tt_die("dataset %s: name '%s' (a configuration of the dataset) applies to a directory or a Hub dataset, "
                   "not a file; remove it",
                   path, config_name);
        out->paths = tt_xmalloc(sizeof(char *), "dataset files");
        out->paths[0] = tt_xstrdup(path);
        out->count = 1;
        return;
    }
    if (stat(path, &st) == 0) root = tt_xstrdup(path);
    else if (tt_hf_is_repo_id(path)) {
        char why[2048];
        root = tt_hf_cache_snapshot(path, TT_HF_DATASET, NULL, why, sizeof why);
        if (!root) tt_die("dataset '%s': %s", path, why);
    } else {
        tt_die("cannot open dataset %s: %s; check the path under datasets (a JSON or JSONL file, a directory of them, "
               "or a Hugging Face dataset name in the local cache)",
               path, strerror(errno));
    }
    if (config_name) { /* the configuration's directory */
        size_t n = strlen(root) + strlen(config_name) + 2;
        char *dir = tt_xmalloc(n, "a path");
        snprintf(dir, n, "%s/%s", root, config_name);
        if (strchr(config_name, '/') || config_name[0] == '.' || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            tt_die("dataset %s has no configuration '%s' (no directory %s); give one of its directories as name, or "
                   "remove name",
                   path, config_name, dir);
        free(root);
        root = dir;
    }
    file_list list = {0};
    walk(root, 0, &list);
    if (list.count == 0) {
        if (list.other)
            tt_die("dataset %s holds %s files (%s) and no JSON, JSONL or Parquet; tiertrain reads those (JSON also "
                   ".gz, .zst): convert them, e.g. `python -c \"import datasets; datasets.load_dataset('%s', "
                   "split='train').to_json('train.jsonl')\"`, and give that file",
                   path, list.other, list.other_example, path);
        tt_die("dataset %s holds no JSON, JSONL or Parquet files (.json, .jsonl, .json.gz, .jsonl.zst, .parquet, ...)",
               path);
    }
    qsort(list.paths, (size_t)list.count, sizeof(char *), compare_paths);
    /* the train split's files, where the names tell splits apart */
    bool named = false, train = false;
    const size_t root_len = strlen(root);
    for (int i = 0; i < list.count; i++) {
        split_kind k = split_of(list.paths[i] + root_len);
        named |= k != SPLIT_NONE;
        train |= k == SPLIT_TRAIN;
    }
    if (named && !train)
        tt_die("dataset %s: its files' names give splits (%s, ...) but none is train; give the file to train on as the "
               "entry's path",
               path, list.paths[0] + root_len + 1);
    out->paths = tt_xmalloc(sizeof(char *) * (size_t)list.count, "dataset files");
    for (int i = 0; i < list.count; i++) {
        if (!named || split_of(list.paths[i] + root_len) == SPLIT_TRAIN) out->paths[out->count++] = list.paths[i];
        else free(list.paths[i]);
    }
    free(list.paths);
    free(root);
}

void tt_dataset_files_free(tt_dataset_files *files) {
    for (int i = 0; i < files->count; i++) free(files->paths[i]);
    free(files->paths);
    memset(files, 0, sizeof *files);
}

struct tt_dataset_records {
    const tt_dataset_files *files;
    int next_file;
    tt_json_records *current; /* the JSON file being read, or NULL */
    tt_parquet *parquet;      /* the Parquet file being read, or NULL */
    size_t bytes;
};

tt_dataset_records *tt_dataset_records_open(const tt_dataset_files *files) {
    tt_dataset_records *r = tt_xcalloc(1, sizeof *r, "a dataset reader");
    r->files = files;
    return r;
}

json_t *tt_dataset_records_next(tt_dataset_records *r) {
    for (;;) {
        if (!r->current && !r->parquet) {
            if (r->next_file == r->files->count) {
                r->bytes = 0;
                return NULL;
            }
            const char *path = r->files->paths[r->next_file++];
            if (is_parquet(path)) r->parquet = tt_parquet_open(path);
            else r->current = tt_json_records_open(path);
        }
        if (r->parquet) {
            json_t *row = tt_parquet_next(r->parquet);
            r->bytes = 0; /* (a row group is in memory already) */
            if (row) return row;
            tt_parquet_close(r->parquet);
            r->parquet = NULL;
            continue;
        }
        json_t *record = tt_json_records_next(r->current);
        if (record) {
            r->bytes = tt_json_records_bytes(r->current);
            return record;
        }
        tt_json_records_close(r->current);
        r->current = NULL;
    }
}

const char *tt_dataset_records_where(const tt_dataset_records *r) {
    return r->parquet ? tt_parquet_where(r->parquet) : r->current ? tt_json_records_where(r->current) : "";
}

size_t tt_dataset_records_bytes(const tt_dataset_records *r) { return r->bytes; }

void tt_dataset_records_close(tt_dataset_records *r) {
    if (r->current) tt_json_records_close(r->current);
    tt_parquet_close(r->parquet);
    free(r);
}

void tt_dataset_records_discard(tt_dataset_records *r) {
    if (r->current) tt_json_records_discard(r->current);
    tt_parquet_close(r->parquet);
    free(r);
}
