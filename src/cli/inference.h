/* `tiertrain inference` (inference.c). */
#ifndef TT_CLI_INFERENCE_H
#define TT_CLI_INFERENCE_H

/* argv: the arguments after `inference`. Returns the exit status. */
int tt_cli_inference(int argc, char **argv);

#endif
