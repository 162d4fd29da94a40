/* What a file's name says: its suffix, and whether it holds records a dataset entry reads (JSON, JSON lines,
 * compressed or not, or Parquet). One list for the configuration (an entry that needs a type) and the dataset reader
 * (a directory's data files) alike. */
#ifndef TT_CORE_FILE_NAMES_H
#define TT_CORE_FILE_NAMES_H

#include <stdbool.h>

bool tt_ends_with(const char *s, const char *suffix);
/* .json, .jsonl or .ndjson (any case), plain or .gz / .zst; or .parquet */
bool tt_is_records_file(const char *name);
bool tt_is_parquet_file(const char *name);

#endif
