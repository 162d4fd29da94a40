/* The TCP rendezvous of a torchrun-style launch (src/dist/bootstrap.c), with two processes on this machine: rank 0
 * hands its blob to rank 1; the connection then watches for a rank that ends without a goodbye (killed, or dead on
 * an error) and says which, at once, while an orderly close (the run's end) is not taken for a loss. NCCL uses it
 * on the GPU path; here it is tested alone. */
#include <string.h>

#include "dist/bootstrap.h"
#include "test_util.h"

static tt_launch launch_of(int rank, int port) {
    tt_launch l = {
        .kind = TT_LAUNCH_TORCHRUN, .rank = rank, .size = 2, .local_rank = rank, .local_size = 2, .master_port = port};
    snprintf(l.master_addr, sizeof l.master_addr, "127.0.0.1");
    return l;
}

/* Waits up to `seconds` for the watch to report a loss; returns the lost rank or -1. */
static int lost_within(const tt_bootstrap *b, double seconds) {
    for (int i = 0; i < (int)(seconds * 100); i++) {
        const int lost = tt_bootstrap_lost_rank(b);
        if (lost >= 0) return lost;
        usleep(10 * 1000);
    }
    return -1;
}

typedef enum ending { RANK1_KILLED, RANK1_CLOSES, RANK0_CLOSES_FIRST } ending;

/* Rank 1, in a child: exit 0 when it received the blob (and, where rank 0 closes first, saw no loss). */
static void rank1(int port, ending how) {
    tt_launch l = launch_of(1, port);
    char blob[32] = {0};
    tt_bootstrap *b = tt_bootstrap_share(&l, blob, sizeof blob, 20);
    if (strcmp(blob, "the NCCL id") != 0) _exit(3);
    if (how == RANK0_CLOSES_FIRST) _exit(lost_within(b, 2) < 0 ? 0 : 4);
    usleep(200 * 1000);
    if (how == RANK1_CLOSES) tt_bootstrap_close(b);
    _exit(0); /* RANK1_KILLED: no goodbye, as a killed process */
}

static void one_case(int port, ending how, const char *what) {
    const pid_t child = fork();
    if (child == 0) rank1(port, how);
    tt_launch l = launch_of(0, port);
    char blob[32] = "the NCCL id";
    tt_bootstrap *b = tt_bootstrap_share(&l, blob, sizeof blob, 20);
    const int lost = how == RANK0_CLOSES_FIRST ? -1 : lost_within(b, how == RANK1_KILLED ? 5 : 2);
    tt_bootstrap_close(b);
    int status = 0;
    waitpid(child, &status, 0);
    TT_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: rank 1 received the blob%s (exit %d)", what,
              how == RANK0_CLOSES_FIRST ? " and saw no loss" : "", WEXITSTATUS(status));
    if (how == RANK1_KILLED) TT_EXPECT(lost == 1, "%s: seen as rank 1 lost (lost %d)", what, lost);
    if (how == RANK1_CLOSES) TT_EXPECT(lost < 0, "%s: not a loss (lost %d)", what, lost);
}

int main(void) {
    /* ports from the process id, away from torchrun's usual 29500 */
    const int port = 40000 + (int)(getpid() % 5000) * 4;
    one_case(port, RANK1_KILLED, "rank 1 ends without a goodbye");
    one_case(port + 2, RANK1_CLOSES, "rank 1 closes in order");
    one_case(port + 4, RANK0_CLOSES_FIRST, "rank 0 closes in order first");
    return tt_test_summary("bootstrap");
}
