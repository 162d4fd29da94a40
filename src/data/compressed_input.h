/* Dataset files compressed as Hugging Face's json loader takes them (data.jsonl.gz, data.json.zst): gzip through
 * zlib, Zstandard through libzstd, told by their magic bytes (not the extension), decompressed as the reader reads,
 * so a dataset never exists decompressed on disk or whole in memory. */
#ifndef TT_DATA_COMPRESSED_INPUT_H
#define TT_DATA_COMPRESSED_INPUT_H

#include <stdio.h>

/* f (a file opened for reading at its start, owned from here on) as a stream of its decompressed bytes when it is
 * gzip or Zstandard, else f itself; fclose frees both. A corrupt or truncated stream is a read error (ferror), whose
 * reason tt_decompress_error gives. */
FILE *tt_decompressing(FILE *f, const char *path);
/* Why the last read of a decompressing stream on this thread failed ("dataset x.jsonl.gz: the gzip stream is
 * truncated ..."), or "". */
const char *tt_decompress_error(void);

#endif
