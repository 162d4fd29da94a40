/* The blocks, by the kind a description names (block.h). */
#include "train/block.h"

#include "core/check.h"

const tt_block *tt_block_for(const tt_arch *arch) {
    switch (arch->block) {
    case TT_BLOCK_DENSE: return &tt_block_dense;
    case TT_BLOCK_MOE: return &tt_block_moe;
    }
    TT_CHECK(false, "%s: block kind %d", arch->model_type, (int)arch->block);
    return NULL;
}
