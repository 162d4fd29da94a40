/* The files of a dataset entry of records, and their records one after another. An entry's path is a JSON or JSONL
 * file (.json, .jsonl, either with .gz or .zst), a Parquet file (data/parquet.h), a directory of them, or a Hugging
 * Face Hub dataset name read from the local Hugging Face cache (core/hf_cache.h). A directory gives its data files under it, in path order (the hidden
 * ones, README.md and the like left out); where their names say which split each holds, as the datasets library
 * reads names (train-00000-of-00002.jsonl, data/train.json, test.jsonl, validation/...), the train split's alone,
 * which is what axolotl loads. */
#ifndef TT_DATA_DATASET_FILES_H
#define TT_DATA_DATASET_FILES_H

#include <jansson.h>
#include <stddef.h>

typedef struct tt_dataset_files {
    char **paths; /* [count] */
    int count;
} tt_dataset_files;

/* The entry's data files; tt_die when there are none, naming what the directory holds instead (Arrow, CSV)
 * or where the Hub name was looked for. config_name (or NULL): the dataset's configuration, axolotl's name: a
 * directory of that name in the dataset (allenai/c4's en/). */
void tt_dataset_files_find(const char *path, const char *config_name, tt_dataset_files *out);
void tt_dataset_files_free(tt_dataset_files *files);

/* Every record of the files, file after file (json_records.h and parquet.h, whose errors name the file and the line
 * or row). */
typedef struct tt_dataset_records tt_dataset_records;
tt_dataset_records *tt_dataset_records_open(const tt_dataset_files *files);
json_t *tt_dataset_records_next(tt_dataset_records *r); /* NULL after the last file's last record */
const char *tt_dataset_records_where(const tt_dataset_records *r);
size_t tt_dataset_records_bytes(const tt_dataset_records *r);
void tt_dataset_records_close(tt_dataset_records *r);   /* checks the file being read ended cleanly */
void tt_dataset_records_discard(tt_dataset_records *r); /* stops early */

#endif
