#include "train/tensorboard.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "train/checkpoint.h"

uint32_t tt_crc32c(const void *data, size_t size) {
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; i++) {
        crc ^= p[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t masked_crc(const void *data, size_t size) {
    const uint32_t crc = tt_crc32c(data, size);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* A protocol buffer being built (the events are small: a few hundred bytes). */
typedef struct message {
    unsigned char bytes[4096];
    size_t size;
} message;

static void put_byte(message *m, unsigned char b) {
    TT_CHECK(m->size < sizeof m->bytes, "a TensorBoard event of more than %zu bytes", sizeof m->bytes);
    m->bytes[m->size++] = b;
}

static void put_varint(message *m, uint64_t v) {
    while (v >= 0x80) {
        put_byte(m, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    put_byte(m, (unsigned char)v);
}

static void put_fixed(message *m, const void *value, size_t size) { /* little-endian hosts only (x86-64, aarch64) */
    for (size_t i = 0; i < size; i++) put_byte(m, ((const unsigned char *)value)[i]);
}

/* field (wire type 2): length, then bytes */
static void put_bytes(message *m, int field, const void *bytes, size_t size) {
    put_varint(m, (uint64_t)field << 3 | 2);
    put_varint(m, size);
    for (size_t i = 0; i < size; i++) put_byte(m, ((const unsigned char *)bytes)[i]);
}

static void put_wall_time(message *m) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const double wall = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    put_varint(m, 1u << 3 | 1); /* wall_time: double */
    put_fixed(m, &wall, sizeof wall);
}

static void write_record(tt_tensorboard *tb, const message *m) {
    const uint64_t length = m->size;
    const uint32_t length_crc = masked_crc(&length, sizeof length), data_crc = masked_crc(m->bytes, m->size);
    if (fwrite(&length, sizeof length, 1, tb->file) != 1 || fwrite(&length_crc, sizeof length_crc, 1, tb->file) != 1 ||
        fwrite(m->bytes, 1, m->size, tb->file) != m->size || fwrite(&data_crc, sizeof data_crc, 1, tb->file) != 1 ||
        fflush(tb->file) != 0)
        tt_die("cannot write the TensorBoard event file %s (disk full?)", tb->path);
}

void tt_tensorboard_open(tt_tensorboard *tb, const char *output_dir) {
    char host[256] = "localhost", dir[4352], stamp[32];
    gethostname(host, sizeof host - 1);
    const time_t now = time(NULL);
    struct tm local;
    localtime_r(&now, &local);
    strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &local);
    snprintf(dir, sizeof dir, "%s/runs/%s_%s", output_dir, stamp, host);
    tt_make_directories(dir);
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s", dir, (long long)now, host);
    tb->file = fopen(tb->path, "wb");
    if (!tb->file) tt_die("cannot create the TensorBoard event file %s: check output_dir", tb->path);
    message m = {.size = 0};
    put_wall_time(&m);
    put_bytes(&m, 3, "brain.Event:2", strlen("brain.Event:2")); /* file_version */
    write_record(tb, &m);
}

void tt_tensorboard_write(tt_tensorboard *tb, int64_t step, const tt_tensorboard_scalar *scalars, int count) {
    message summary = {.size = 0};
    for (int i = 0; i < count; i++) {
        message value = {.size = 0};
        put_bytes(&value, 1, scalars[i].tag, strlen(scalars[i].tag));
        const float v = (float)scalars[i].value;
        put_varint(&value, 2u << 3 | 5); /* simple_value: float */
        put_fixed(&value, &v, sizeof v);
        put_bytes(&summary, 1, value.bytes, value.size);
    }
    message event = {.size = 0};
    put_wall_time(&event);
    put_varint(&event, 2u << 3 | 0); /* step: varint */
    put_varint(&event, (uint64_t)step);
    put_bytes(&event, 5, summary.bytes, summary.size);
    write_record(tb, &event);
}

void tt_tensorboard_close(tt_tensorboard *tb) {
    if (tb->file) fclose(tb->file);
    tb->file = NULL;
}
