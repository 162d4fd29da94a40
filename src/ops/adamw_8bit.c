/* bitsandbytes' 8-bit AdamW: what its implementations share (ops/adamw_8bit.h). */
#include "ops/adamw_8bit.h"

void tt_adamw_8bit_maps_build(tt_adamw_8bit_maps *maps) {
    tt_dynamic_map_build(maps->first, true);
    tt_dynamic_map_build(maps->second, false);
}
