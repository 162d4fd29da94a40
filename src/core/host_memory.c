#include "core/host_memory.h"

#include <unistd.h>

#include "core/fault_inject.h"

#define SYSTEM_RESERVE_LEAST ((size_t)4 << 30)

size_t tt_host_memory_default_budget(int processes) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return 0;
    const size_t physical = tt_fault_physical_memory((size_t)pages * (size_t)page);
    size_t reserve = physical / 16;
    if (reserve < SYSTEM_RESERVE_LEAST) reserve = SYSTEM_RESERVE_LEAST;
    if (physical <= 2 * reserve) reserve = physical / 2; /* a small machine: keep half for the run */
    return (physical - reserve) / (size_t)(processes > 1 ? processes : 1);
}
