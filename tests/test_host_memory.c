/* The host's memory for runs (core/host_memory.h): a cgroup's limit text read as bytes or none, the physical memory
 * at most the machine's and the budget under it. */
#include <unistd.h>

#include "core/host_memory.h"
#include "test_util.h"

int main(void) {
    TT_EXPECT(tt_cgroup_limit_from_text("1073741824\n") == ((size_t)1 << 30), "v2 bytes");
    TT_EXPECT(tt_cgroup_limit_from_text("17179869184") == ((size_t)16 << 30), "bytes without a newline");
    TT_EXPECT(tt_cgroup_limit_from_text("max\n") == 0, "v2 \"max\": no limit");
    TT_EXPECT(tt_cgroup_limit_from_text("9223372036854771712\n") == 0, "v1's \"unlimited\": no limit");
    TT_EXPECT(tt_cgroup_limit_from_text("") == 0 && tt_cgroup_limit_from_text(NULL) == 0 &&
                  tt_cgroup_limit_from_text("12abc") == 0 && tt_cgroup_limit_from_text("-5") == 0,
              "nothing, or not a number: no limit");

    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const size_t machine = (size_t)pages * (size_t)page, physical = tt_host_memory_physical();
    TT_EXPECT(physical > 0 && physical <= machine, "the memory for runs (%zu) within the machine's (%zu)", physical,
              machine);
    const size_t one = tt_host_memory_default_budget(1), two = tt_host_memory_default_budget(2);
    TT_EXPECT(one > 0 && one < physical && two == one / 2, "the budget: %zu of %zu, %zu a process of two", one,
              physical, two);
    return tt_test_summary("host memory");
}
