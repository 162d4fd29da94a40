#include "dist/bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void send_all(int fd, const void *data, size_t bytes, const char *peer) {
    const unsigned char *p = data;
    while (bytes) {
        const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
        if (n <= 0) tt_die("bootstrap: sending to %s failed: %s", peer, strerror(errno));
        p += n;
        bytes -= (size_t)n;
    }
}

static void recv_all(int fd, void *data, size_t bytes, const char *peer, int timeout_seconds) {
    unsigned char *p = data;
    while (bytes) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_seconds * 1000) <= 0)
            tt_die("bootstrap: nothing from %s in %d s; is rank 0 running with the same WORLD_SIZE?", peer,
                   timeout_seconds);
        const ssize_t n = recv(fd, p, bytes, 0);
        if (n <= 0) tt_die("bootstrap: %s closed the connection before sending the NCCL id", peer);
        p += n;
        bytes -= (size_t)n;
    }
}

/* MASTER_PORT + 1: torchrun's agent keeps its store on MASTER_PORT */
static int bootstrap_port(const tt_launch *l) { return l->master_port + 1; }

/* Rank 0's listening socket on every address: IPv6 taking IPv4 clients too, or IPv4 alone where IPv6 is off. */
static int listen_socket(const tt_launch *l) {
    const int on = 1, off = 0;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    int status = -1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        struct sockaddr_in6 addr = {
            .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)bootstrap_port(l)), .sin6_addr = in6addr_any};
        status = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    } else {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) tt_die("bootstrap: cannot open a socket: %s", strerror(errno));
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        struct sockaddr_in addr = {
            .sin_family = AF_INET, .sin_port = htons((uint16_t)bootstrap_port(l)), .sin_addr.s_addr = INADDR_ANY};
        status = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    }
    if (status != 0 || listen(fd, l->size) != 0)
        tt_die("bootstrap: rank 0 cannot listen on port %d (MASTER_PORT + 1): %s; choose a MASTER_PORT whose next port "
               "is free",
               bootstrap_port(l), strerror(errno));
    return fd;
}

/* The open connections: rank 0 holds one to each other rank, the others one to rank 0. */
struct tt_bootstrap {
    int count;
    int *fd;         /* [count] */
    int *peer;       /* [count]: the rank at the other end */
    bool *done;      /* [count]: it said goodbye */
    atomic_int lost; /* -1, or the rank that ended without a goodbye */
    atomic_bool stop;
    pthread_t watch;
    bool watching;
};

static const char goodbye = 'B';

static tt_bootstrap *connections(int count) {
    tt_bootstrap *b = tt_xcalloc(1, sizeof(tt_bootstrap), "bootstrap connections");
    b->fd = tt_xcalloc((size_t)count + 1, sizeof(int), "bootstrap connections");
    b->peer = tt_xcalloc((size_t)count + 1, sizeof(int), "bootstrap connections");
    b->done = tt_xcalloc((size_t)count + 1, sizeof(bool), "bootstrap connections");
    atomic_init(&b->lost, -1);
    atomic_init(&b->stop, false);
    return b;
}

static void serve(const tt_launch *l, const void *blob, size_t bytes, int timeout_seconds, tt_bootstrap *b) {
    const int fd = listen_socket(l);
    for (int joined = 1; joined < l->size; joined++) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_seconds * 1000) <= 0)
            tt_die("bootstrap: rank 0 waited %d s on port %d, and %d of the %d other ranks came; start every rank with "
                   "the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE",
                   timeout_seconds, bootstrap_port(l), joined - 1, l->size - 1);
        const int client = accept(fd, NULL, NULL);
        if (client < 0) tt_die("bootstrap: accept failed: %s", strerror(errno));
        int32_t rank = -1; /* each rank says which it is, for the watch's messages */
        recv_all(client, &rank, sizeof rank, "a rank", timeout_seconds);
        send_all(client, blob, bytes, "a rank");
        b->fd[b->count] = client;
        b->peer[b->count++] = rank;
    }
    close(fd);
}

static void join(const tt_launch *l, void *blob, size_t bytes, int timeout_seconds, tt_bootstrap *b) {
    char port[16], peer[300];
    snprintf(port, sizeof port, "%d", bootstrap_port(l));
    snprintf(peer, sizeof peer, "rank 0 at %s:%d (MASTER_PORT + 1)", l->master_addr, bootstrap_port(l));
    const double deadline = now_seconds() + timeout_seconds;
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found = NULL;
        const int status = getaddrinfo(l->master_addr, port, &hints, &found);
        if (status != 0) tt_die("bootstrap: MASTER_ADDR '%s': %s", l->master_addr, gai_strerror(status));
        for (struct addrinfo *a = found; a; a = a->ai_next) {
            const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0) continue;
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                freeaddrinfo(found);
                const int32_t rank = l->rank;
                send_all(fd, &rank, sizeof rank, peer);
                recv_all(fd, blob, bytes, peer, timeout_seconds);
                b->fd[b->count] = fd;
                b->peer[b->count++] = 0;
                return;
            }
            close(fd);
        }
        freeaddrinfo(found);
        if (now_seconds() > deadline)
            tt_die("bootstrap: could not reach %s in %d s; start rank 0, or check MASTER_ADDR and MASTER_PORT", peer,
                   timeout_seconds);
        usleep(100 * 1000); /* rank 0 may not listen yet */
    }
}

/* The watch: a connection that reads the end of the stream (or fails) before a goodbye is a lost rank. */
static void *watch(void *arg) {
    tt_bootstrap *b = arg;
    struct pollfd *pfd = tt_xcalloc((size_t)b->count + 1, sizeof(struct pollfd), "the liveness watch");
    while (!atomic_load(&b->stop) && atomic_load(&b->lost) < 0) {
        int open = 0;
        for (int i = 0; i < b->count; i++) pfd[i] = (struct pollfd){.fd = b->done[i] ? -1 : b->fd[i], .events = POLLIN};
        for (int i = 0; i < b->count; i++) open += !b->done[i];
        if (!open) break;
        if (poll(pfd, (nfds_t)b->count, 200) <= 0) continue;
        for (int i = 0; i < b->count; i++) {
            if (b->done[i] || !pfd[i].revents) continue;
            char byte = 0;
            const ssize_t n = recv(b->fd[i], &byte, 1, MSG_DONTWAIT);
            if (n == 1 && byte == goodbye) b->done[i] = true;
            else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) atomic_store(&b->lost, b->peer[i]);
        }
    }
    free(pfd);
    return NULL;
}

tt_bootstrap *tt_bootstrap_share(const tt_launch *launch, void *blob, size_t bytes, int timeout_seconds) {
    tt_bootstrap *b = connections(launch->size);
    if (launch->rank == 0) serve(launch, blob, bytes, timeout_seconds, b);
    else join(launch, blob, bytes, timeout_seconds, b);
    b->watching = pthread_create(&b->watch, NULL, watch, b) == 0;
    if (!b->watching) tt_die("bootstrap: cannot start the liveness watch thread");
    return b;
}

int tt_bootstrap_lost_rank(const tt_bootstrap *b) { return b ? atomic_load(&b->lost) : -1; }

void tt_bootstrap_close(tt_bootstrap *b) {
    if (!b) return;
    for (int i = 0; i < b->count; i++) (void)send(b->fd[i], &goodbye, 1, MSG_NOSIGNAL);
    atomic_store(&b->stop, true);
    if (b->watching) pthread_join(b->watch, NULL);
    for (int i = 0; i < b->count; i++) close(b->fd[i]);
    free(b->fd);
    free(b->peer);
    free(b->done);
    free(b);
}
