#include "memory/disk_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fault_inject.h"

/* A ring of queued jobs; the worker takes them in order. */
#define QUEUE_CAPACITY 64

typedef struct disk_job {
    bool write;
    int64_t slot;
    void *buf;
    size_t bytes;
    void (*ready)(void *ready_ctx, uint64_t ticket); /* called by the worker before the transfer, or NULL */
    void *ready_ctx;
    uint64_t ready_ticket;
} disk_job;

struct tt_disk_store {
    int fd;
    bool direct;
    char path[4200];
    size_t slot_bytes;
    int64_t slots;

    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_t worker;
    disk_job queue[QUEUE_CAPACITY];
    int64_t submitted, done; /* tickets: job k is the k-th submitted (1-based) */
    bool stopping;
    int error; /* errno of the first failed job, 0 if none */
    int64_t error_slot;
    bool error_write;

    size_t written, read;
    double io_seconds;

    /* A measuring store (tt_disk_store_open_measure) has no file and no thread; it remembers the slots
     * written, whose bytes are the disk tier's need. */
    bool measuring;
    bool *slot_written; /* [slots] */
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whole transfers: pread/pwrite may move fewer bytes than asked. */
static int transfer(const tt_disk_store *s, const disk_job *job) {
    const off_t offset = (off_t)job->slot * (off_t)s->slot_bytes;
    /* O_DIRECT transfers whole aligned blocks: the slot's rounded size (the buffer has room) */
    const size_t bytes =
        s->direct ? (job->bytes + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT : job->bytes;
    size_t moved = 0;
    if (job->write) {
        const int injected = tt_fault_before_write(bytes); /* a test hook (fault_inject.h); 0 outside tests */
        if (injected) return injected;
    }
    while (moved < bytes) {
        ssize_t n = job->write ? pwrite(s->fd, (const char *)job->buf + moved, bytes - moved, offset + (off_t)moved)
                               : pread(s->fd, (char *)job->buf + moved, bytes - moved, offset + (off_t)moved);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO; /* a read past what was written: the store is out of step */
        moved += (size_t)n;
    }
    return 0;
}

static void *worker_main(void *arg) {
    tt_disk_store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->done == s->submitted && !s->stopping) pthread_cond_wait(&s->changed, &s->lock);
        if (s->done == s->submitted) break; /* stopping, nothing left */
        const disk_job job = s->queue[s->done % QUEUE_CAPACITY];
        pthread_mutex_unlock(&s->lock);
        if (job.ready) job.ready(job.ready_ctx, job.ready_ticket); /* e.g. the GPU copy into the buffer is done */
        const double start = now_seconds();
        const int error = transfer(s, &job);
        const double seconds = now_seconds() - start;
        pthread_mutex_lock(&s->lock);
        if (error && !s->error) {
            s->error = error;
            s->error_slot = job.slot;
            s->error_write = job.write;
        }
        if (job.write) s->written += job.bytes;
        else s->read += job.bytes;
        s->io_seconds += seconds;
        s->done++;
        pthread_cond_broadcast(&s->changed);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

bool tt_disk_free_bytes(const char *dir, size_t *free_bytes) {
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0) return false;
    *free_bytes = tt_fault_free_bytes((size_t)fs.f_bavail * (size_t)fs.f_frsize);
    return true;
}

size_t tt_disk_budget(size_t free_bytes, int processes) {
    const size_t share = free_bytes / (size_t)(processes > 1 ? processes : 1);
    return share - share / 1024;
}

tt_disk_store *tt_disk_store_open(const char *dir, int64_t slots, size_t slot_bytes) {
    tt_disk_store *s = tt_xcalloc(1, sizeof *s, "the disk store");
    s->slots = slots;
    s->slot_bytes = (slot_bytes + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT;
    snprintf(s->path, sizeof s->path, "%s/tiertrain-activations-XXXXXX", dir);
    int fd = mkstemp(s->path);
    if (fd < 0)
        tt_die("offload_dir '%s': cannot create the activation file: %s; set offload_dir to a writable directory "
               "on a local disk",
               dir, strerror(errno));
    /* Gone from the directory at once: the space is freed when the process ends, however it ends. */
    unlink(s->path);
    /* O_DIRECT skips the page cache (the data is read back once, much later); tmpfs and some
     * filesystems refuse it, and then the page cache is used, with a warning. */
    int flags = fcntl(fd, F_GETFL);
    s->direct = flags >= 0 && fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
    if (!s->direct)
        tt_warn("offload_dir '%s' does not allow O_DIRECT; activations go through the page cache, which takes host "
                "memory and may slow the run",
                dir);
    const off_t size = (off_t)slots * (off_t)s->slot_bytes;
    int error = tt_fault_before_write((size_t)size); /* a test hook (fault_inject.h); 0 outside tests */
    if (!error) error = posix_fallocate(fd, 0, size);
    if (error) {
        close(fd);
        char need[32];
        tt_die("offload_dir '%s': cannot reserve %s for offloaded activations: %s; free disk space or choose "
               "another offload_dir",
               dir, tt_format_bytes((size_t)size, need, sizeof need), strerror(error));
    }
    s->fd = fd;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) tt_die("cannot start the disk IO thread");
    return s;
}

tt_disk_store *tt_disk_store_open_measure(int64_t slots, size_t slot_bytes) {
    tt_disk_store *s = tt_xcalloc(1, sizeof *s, "the disk store");
    s->slots = slots;
    s->slot_bytes = (slot_bytes + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT;
    s->fd = -1;
    s->measuring = true;
    s->slot_written = tt_xcalloc((size_t)slots + 1, sizeof(bool), "the disk store");
    return s;
}

size_t tt_disk_store_bytes_written(const tt_disk_store *s) {
    if (!s) return 0;
    int64_t used = 0;
    for (int64_t slot = 0; s->slot_written && slot < s->slots; slot++) used += s->slot_written[slot];
    return (size_t)used * s->slot_bytes;
}

size_t tt_disk_store_reserved_bytes(const tt_disk_store *s) {
    return s && !s->measuring ? (size_t)s->slots * s->slot_bytes : 0;
}

void tt_disk_store_close(tt_disk_store *s) {
    if (!s) return;
    if (s->measuring) {
        free(s->slot_written);
        free(s);
        return;
    }
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->changed);
    close(s->fd);
    free(s);
}

static int64_t submit(tt_disk_store *s, bool write, int64_t slot, void *buf, size_t bytes,
                      void (*ready)(void *ready_ctx, uint64_t ticket), void *ready_ctx, uint64_t ready_ticket) {
    TT_CHECK(slot >= 0 && slot < s->slots && bytes <= s->slot_bytes, "disk store slot %lld of %lld, %zu bytes",
             (long long)slot, (long long)s->slots, bytes);
    TT_CHECK(!s->direct || ((uintptr_t)buf % TT_DISK_ALIGNMENT) == 0, "disk store buffer not %zu-aligned",
             TT_DISK_ALIGNMENT);
    if (s->measuring) { /* done at once */
        if (write) s->slot_written[slot] = true;
        s->done = ++s->submitted;
        return s->submitted;
    }
    pthread_mutex_lock(&s->lock);
    while (s->submitted - s->done == QUEUE_CAPACITY) pthread_cond_wait(&s->changed, &s->lock);
    s->queue[s->submitted % QUEUE_CAPACITY] = (disk_job){.write = write,
                                                         .slot = slot,
                                                         .buf = buf,
                                                         .bytes = bytes,
                                                         .ready = ready,
                                                         .ready_ctx = ready_ctx,
                                                         .ready_ticket = ready_ticket};
    const int64_t ticket = ++s->submitted;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    return ticket;
}

int64_t tt_disk_store_write(tt_disk_store *s, int64_t slot, const void *buf, size_t bytes,
                            void (*ready)(void *ready_ctx, uint64_t ticket), void *ready_ctx, uint64_t ready_ticket) {
    return submit(s, true, slot, (void *)buf, bytes, ready, ready_ctx, ready_ticket);
}

int64_t tt_disk_store_read(tt_disk_store *s, int64_t slot, void *buf, size_t bytes,
                           void (*ready)(void *ready_ctx, uint64_t ticket), void *ready_ctx, uint64_t ready_ticket) {
    return submit(s, false, slot, buf, bytes, ready, ready_ctx, ready_ticket);
}

void tt_disk_store_wait(tt_disk_store *s, int64_t ticket) {
    if (s->measuring) return;
    pthread_mutex_lock(&s->lock);
    while (s->done < ticket && !s->error) pthread_cond_wait(&s->changed, &s->lock);
    const int error = s->error;
    const int64_t slot = s->error_slot;
    const bool write = s->error_write;
    pthread_mutex_unlock(&s->lock);
    if (error)
        tt_die("offloaded activations: %s slot %lld of the activation file %s (in offload_dir, unlinked at its "
               "creation, so nothing is left behind) failed: %s; check the disk's free space and health, or use "
               "activation_offloading: legacy",
               write ? "writing" : "reading", (long long)slot, s->path, strerror(error));
}

void tt_disk_store_stats(const tt_disk_store *s, size_t *written, size_t *read, double *io_seconds) {
    if (s->measuring) {
        *written = *read = 0;
        *io_seconds = 0;
        return;
    }
    pthread_mutex_lock((pthread_mutex_t *)&s->lock);
    *written = s->written;
    *read = s->read;
    *io_seconds = s->io_seconds;
    pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
}
