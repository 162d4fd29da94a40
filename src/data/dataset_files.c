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
#include "core/file_names.h"
#include "core/hf_cache.h"
#include "data/json_records.h"
#include "data/parquet.h"

enum { MAX_DEPTH = 16, MAX_FILES = 100000 };

static bool is_metadata(const char *name) { /* the datasets library's files that are not data */
    return strcmp(name, "config.json") == 0 || strcmp(name, "dataset_info.json") == 0 ||
           strcmp(name, "dataset_infos.json") == 0 || strcmp(name, "dataset_dict.json") == 0 ||
           strcmp(name, "state.json") == 0;
}

/* A data format the datasets library reads and tiertrain does not (yet): named in the error when nothing else is. */
static const char *other_data_format(const char *name) {
    if (tt_ends_with(name, ".arrow")) return "Arrow";
    if (tt_ends_with(name, ".csv") || tt_ends_with(name, ".tsv")) return "CSV";
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
        } else if (S_ISREG(st.st_mode) && tt_is_records_file(e->d_name) && !is_metadata(e->d_name)) {
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

/* The datasets library's words for splits (case as written) and the characters around them: "-._ 0-9" and '/'. */
static const char *const train_words[] = {"train", "training"};
static const char *const other_words[] = {"validation", "valid", "dev", "val", "test", "testing", "eval", "evaluation"};

static bool is_split_separator(char c) {
    return c == '-' || c == '.' || c == '_' || c == ' ' || (c >= '0' && c <= '9');
}

/* The split a name (a file's or a directory's) names, as the datasets library's patterns read it: the word at its
 * start followed by a separator ("train.jsonl", "train-00000"), or between separators ("c4-train.00000"); for a
 * directory also the word alone ("train/") or at its end ("data_train/"). */
static split_kind split_in_name(const char *name, size_t len, bool directory) {
    split_kind kind = SPLIT_NONE;
    for (int group = 0; group < 2 && kind == SPLIT_NONE; group++) {
        const char *const *words = group ? other_words : train_words;
        const int count = group ? 8 : 2;
        for (int w = 0; w < count; w++) {
            const size_t n = strlen(words[w]);
            for (size_t at = 0; at + n <= len; at++) {
                if (memcmp(name + at, words[w], n) != 0) continue;
                const bool before = at == 0 || is_split_separator(name[at - 1]);
                const bool after = at + n < len ? is_split_separator(name[at + n]) : directory;
                if (before && after) {
                    kind = group ? SPLIT_OTHER : SPLIT_TRAIN;
                    break;
                }
            }
            if (kind != SPLIT_NONE) break;
        }
    }
    return kind;
}

/* A sharded file's split, as data/<split>-00000-of-00003.<ext> names it (into split, "" when not sharded). */
static void sharded_split(const char *relative, char *split, size_t size) {
    split[0] = 0;
    if (strncmp(relative, "/data/", 6) != 0 || strchr(relative + 6, '/')) return;
    const char *name = relative + 6, *dash = strstr(name, "-of-");
    if (!dash || dash - name < 6 || dash[-6] != '-') return;
    for (int k = 1; k <= 5; k++)
        if (!isdigit((unsigned char)dash[-k]) || !isdigit((unsigned char)dash[3 + k])) return;
    snprintf(split, size, "%.*s", (int)(dash - 6 - name), name);
}

/* The split of a file's path below the dataset's root, by its directories (directory) or its file name. */
static split_kind split_of(const char *relative, bool directory) {
    const char *base = strrchr(relative, '/');
    base = base ? base + 1 : relative;
    if (!directory) return split_in_name(base, strlen(base), false);
    split_kind kind = SPLIT_NONE;
    for (const char *p = relative; p < base && kind == SPLIT_NONE;) {
        while (p < base && *p == '/') p++;
        const char *end = p;
        while (end < base && *end != '/') end++;
        if (end > p) kind = split_in_name(p, (size_t)(end - p), true);
        p = end;
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
    root = tt_hf_local_path(path, TT_HF_DATASET, NULL, "dataset"); /* a Hub name: its snapshot, or an error */
    if (stat(root, &st) != 0)
        tt_die("cannot open dataset %s: %s; check the path under datasets (a JSON or JSONL file, a directory of them, "
               "or a Hugging Face dataset name in the local cache)",
               path, strerror(errno));
    for (size_t n = strlen(root); n > 1 && root[n - 1] == '/';) root[--n] = 0; /* (data/ as data) */
    if (config_name) {                                                         /* the configuration's directory */
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
    /* the train split's files, as the datasets library infers splits: a sharded data/<split>-NNNNN-of-NNNNN layout,
     * else the directories' names, else the files' names, else every file */
    const size_t root_len = strlen(root);
    bool *keep = tt_xcalloc((size_t)list.count, sizeof(bool), "dataset files");
    char split[256], splits[512] = "";
    bool sharded = false;
    for (int i = 0; i < list.count && !sharded; i++) {
        sharded_split(list.paths[i] + root_len, split, sizeof split);
        sharded = split[0] != 0;
    }
    int kept = 0;
    if (sharded) {
        for (int i = 0; i < list.count; i++) {
            sharded_split(list.paths[i] + root_len, split, sizeof split);
            keep[i] = strcmp(split, "train") == 0;
            kept += keep[i];
            if (split[0] && !strstr(splits, split) && strlen(splits) + strlen(split) + 3 < sizeof splits)
                snprintf(splits + strlen(splits), sizeof splits - strlen(splits), "%s%s", splits[0] ? ", " : "", split);
        }
        if (!kept)
            tt_die("dataset %s: its shards name the splits %s and none is train; give the shard files to train on as "
                   "the entry's path",
                   path, splits);
    } else {
        bool named = false;
        for (int pass = 0; pass < 2 && !named; pass++) { /* directories first, then file names */
            for (int i = 0; i < list.count; i++) {
                split_kind k = split_of(list.paths[i] + root_len, pass == 0);
                named |= k != SPLIT_NONE;
                keep[i] = k == SPLIT_TRAIN;
            }
        }
        for (int i = 0; i < list.count; i++) {
            if (!named) keep[i] = true;
            kept += keep[i];
        }
        if (!kept)
            tt_die("dataset %s: its files' names give splits (%s, ...) but none is train; give the file to train on as "
                   "the entry's path",
                   path, list.paths[0] + root_len + 1);
    }
    /* one format, the more common one, as the datasets library loads (JSON lines and a Parquet copy are one data) */
    int parquet = 0;
    for (int i = 0; i < list.count; i++) parquet += keep[i] && tt_is_parquet_file(list.paths[i]);
    const bool want_parquet = 2 * parquet >= kept;
    out->paths = tt_xmalloc(sizeof(char *) * (size_t)list.count, "dataset files");
    for (int i = 0; i < list.count; i++) {
        if (keep[i] && tt_is_parquet_file(list.paths[i]) == want_parquet) out->paths[out->count++] = list.paths[i];
        else free(list.paths[i]);
    }
    free(keep);
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
            if (tt_is_parquet_file(path)) r->parquet = tt_parquet_open(path);
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
