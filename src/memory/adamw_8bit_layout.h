/* Where the 8-bit AdamW (optimizer: adamw_bnb_8bit, ops/adamw_8bit.h) keeps the moments of the trainable
 * parameters. Every trainable parameter of TT_ADAMW_8BIT_MIN_NUMEL elements or more is an 8-bit tensor: per moment
 * one code per element and one fp32 absmax per 256-element block of its own (bitsandbytes quantizes each tensor on
 * its own, so a block never spans two parameters, whatever the padding between them); a smaller one keeps two fp32
 * moments. Each moment is one buffer on the compute tier:
 *   [codes of the 8-bit tensors, table order | their absmax, table order | fp32 moments of the others, table order]
 * each part starting TT_ALIGNMENT-aligned. The size table prices these bytes, the step program pushes two such
 * buffers, the update and the checkpoint read them through this layout. */
#ifndef TT_MEMORY_ADAMW_8BIT_LAYOUT_H
#define TT_MEMORY_ADAMW_8BIT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model/params.h"
#include "ops/adamw_8bit.h"

typedef struct tt_adamw_8bit_layout {
    int count;                         /* trainable parameters */
    tt_adamw_8bit_tensor *tensors;     /* [count], table order; element: in the trainable layout */
    int *param;                        /* [count]: each one's index in the parameter table */
    int64_t quantized_numel;           /* codes per moment */
    int64_t blocks;                    /* absmax values per moment */
    int64_t fp32_numel;                /* fp32 values per moment */
    size_t absmax_offset, fp32_offset; /* bytes from the start of a moment's buffer */
    size_t moment_bytes;               /* one moment's buffer */
} tt_adamw_8bit_layout;

void tt_adamw_8bit_layout_build(tt_adamw_8bit_layout *layout, const tt_param_table *params);
void tt_adamw_8bit_layout_free(tt_adamw_8bit_layout *layout);

/* The bytes of one moment's buffer, without building the layout's arrays. */
size_t tt_adamw_8bit_moment_bytes(const tt_param_table *params);

/* A moment's parts in its buffer (moment_bytes bytes). */
tt_adamw_8bit_moment tt_adamw_8bit_moment_in(const tt_adamw_8bit_layout *layout, void *buffer);

/* The tensors lying in the trainable elements [lo, hi), with their elements counted from lo, into a freshly
 * allocated array (NULL when none); returns how many. A parameter cut by lo or hi is an internal error: the update's
 * pieces are whole optimizer units. */
int tt_adamw_8bit_tensors_in(const tt_adamw_8bit_layout *layout, int64_t lo, int64_t hi, tt_adamw_8bit_tensor **out);

#endif
