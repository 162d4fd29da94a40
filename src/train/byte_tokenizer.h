/* The built-in byte-level tokenizer: each byte is its own token (ids 0-255) and every
 * document (input file) ends with an end-of-sequence token (256). It exists so that the demo
 * and the tests need no downloaded tokenizer; real models use their own tokenizer through
 * tools/tokenize_hf.py. */
#ifndef TT_TRAIN_BYTE_TOKENIZER_H
#define TT_TRAIN_BYTE_TOKENIZER_H

#define TT_BYTE_TOKENIZER_VOCAB 257
#define TT_BYTE_TOKENIZER_EOS 256

/* Writes one token file (vocab_size 257, eos 256) from the given files, one document each: a
 * file's bytes become ids 0-255, then eos. An unreadable input is an error naming it; an empty
 * one is skipped with a warning; all empty is an error. */
void tt_tokenize_bytes(char *const *input_paths, int count, const char *output_path);

#endif
