/* TensorBoard's event files (use_tensorboard: true), written without TensorFlow: a file of records
 *   uint64 length | uint32 masked CRC-32C of the length | data[length] | uint32 masked CRC-32C of the data
 * (little-endian; the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8), each record's data an Event protocol buffer:
 * the first {wall_time: 1, file_version: 3 = "brain.Event:2"}, then one per step {wall_time: 1 (double), step: 2
 * (varint), summary: 5 {value: 1 {tag: 1 (string), simple_value: 2 (float)} ...}}. The file is
 * output_dir/runs/<date>_<host>/events.out.tfevents.<unix seconds>.<host>, where transformers' Trainer puts its own;
 * `tensorboard --logdir output_dir/runs` shows it. */
#ifndef TT_TRAIN_TENSORBOARD_H
#define TT_TRAIN_TENSORBOARD_H

#include <stdint.h>
#include <stdio.h>

typedef struct tt_tensorboard {
    FILE *file;
    char path[4608];
} tt_tensorboard;

/* One scalar of a step's event. */
typedef struct tt_tensorboard_scalar {
    const char *tag; /* "train/loss", ... */
    double value;    /* written as a float, as TensorBoard's simple_value */
} tt_tensorboard_scalar;

/* Creates the run's directory under output_dir/runs and its event file, with the file-version event. */
void tt_tensorboard_open(tt_tensorboard *tb, const char *output_dir);
/* One event of `count` scalars at `step`, flushed to the file. */
void tt_tensorboard_write(tt_tensorboard *tb, int64_t step, const tt_tensorboard_scalar *scalars, int count);
void tt_tensorboard_close(tt_tensorboard *tb);

/* CRC-32C (Castagnoli) of data, as the records' checksums take it before the mask. */
uint32_t tt_crc32c(const void *data, size_t size);

#endif
