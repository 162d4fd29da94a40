/* Dataset files compressed as Hugging Face's json loader takes them (data.jsonl.gz, data.json.zst): gzip through
 * zlib, Zstandard through libzstd, told by their magic bytes (not the extension), decompressed as the reader reads,
 * so a dataset never exists decompressed on disk or whole in memory. */
#ifndef TT_DATA_COMPRESSED_INPUT_H
#define TT_DATA_COMPRESSED_INPUT_H

#include <stdio.h>

/* f (a file opened for reading at its start, owned from here on) as a stream of its decompressed bytes when it is
 * gzip or Zstandard, else f itself. A corrupt stream dies naming path when it is read; fclose frees both. */
FILE *tt_decompressing(FILE *f, const char *path);

#endif
