/* Opening input files tiertrain did not write (checkpoints, configs, indexes) safely: only a
 * regular file is accepted, and a FIFO, device, socket or directory is refused at once with a
 * message naming the path, never waited on (a plain open() of a FIFO blocks until a writer
 * comes). */
#ifndef TT_CORE_INPUT_FILE_H
#define TT_CORE_INPUT_FILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* A read-only descriptor of path, which is a regular file (*st gets its fstat); tt_die naming
 * path and `expected` ("a config.json") otherwise. */
int tt_open_regular_file(const char *path, const char *expected, struct stat *st);

/* The same, for a caller with its own message (or an optional file): -1 with errno set when path
 * cannot be opened; still tt_die when it exists but is not a regular file. */
int tt_try_open_regular_file(const char *path, const char *expected, struct stat *st);

/* fopen(path, "rb") through that check: NULL with errno set when path cannot be opened. */
FILE *tt_fopen_regular_file(const char *path, const char *expected);

/* json_loadf of path, refusing what is not a regular file or is over max_bytes (tt_die). NULL
 * and *error filled (as json_load_file does) when path cannot be opened or is not valid JSON, for
 * the caller's message. */
json_t *tt_json_load_regular_file(const char *path, size_t flags, size_t max_bytes, const char *expected,
                                  json_error_t *error);

#endif
