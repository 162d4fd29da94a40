#include "train/adamw_8bit_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "memory/adamw_8bit_layout.h"
#include "ops/dynamic_map.h"
#include "train/model_io.h"

/* The two moments in host memory, in the layout's buffers. */
typedef struct host_moments {
    unsigned char *buffer[2];
    tt_adamw_8bit_moment moment[2];
} host_moments;

static host_moments host_moments_alloc(const tt_adamw_8bit_layout *layout) {
    host_moments h;
    for (int k = 0; k < 2; k++) {
        h.buffer[k] = tt_xcalloc(layout->moment_bytes ? layout->moment_bytes : 1, 1, "8-bit AdamW state");
        h.moment[k] = tt_adamw_8bit_moment_in(layout, h.buffer[k]);
    }
    return h;
}

static void host_moments_free(host_moments *h) {
    free(h->buffer[0]);
    free(h->buffer[1]);
}

static const char *const moment_names[2] = {"exp_avg", "exp_avg_sq"};

void tt_adamw_8bit_save(const tt_model_state *s, const char *path) {
    const tt_adamw_8bit_layout *layout = s->adamw_8bit;
    TT_CHECK(layout, "an 8-bit AdamW save without its layout");
    const tt_param_table *table = &s->params;
    float maps[2][TT_DYNAMIC_MAP_CODES];
    tt_dynamic_map_build(maps[0], true);
    tt_dynamic_map_build(maps[1], false);
    host_moments h = host_moments_alloc(layout);
    tt_backend_download(s->backend, h.buffer[0], s->adam_m, layout->moment_bytes);
    tt_backend_download(s->backend, h.buffer[1], s->adam_v, layout->moment_bytes);

    tt_st_writer writer;
    tt_st_writer_init(&writer);
    tt_st_writer_add_metadata(&writer, "optimizer", "adamw_bnb_8bit");
    char name[192];
    const int64_t map_shape[1] = {TT_DYNAMIC_MAP_CODES};
    for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "quantization_map.%s", moment_names[k]);
        tt_st_writer_add(&writer, name, TT_F32, 1, map_shape, NULL);
    }
    for (int i = 0; i < layout->count; i++) {
        const tt_adamw_8bit_tensor *t = &layout->tensors[i];
        const tt_param_info *p = &table->params[layout->param[i]];
        snprintf(name, sizeof name, "master.%s", p->name);
        tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, NULL);
        const int64_t blocks[1] = {tt_adamw_8bit_blocks(t->numel)};
        for (int k = 0; k < 2; k++) {
            if (t->quantized) {
                snprintf(name, sizeof name, "%s_codes.%s", moment_names[k], p->name);
                tt_st_writer_add(&writer, name, TT_U8, p->ndim, p->shape, NULL);
                snprintf(name, sizeof name, "%s_absmax.%s", moment_names[k], p->name);
                tt_st_writer_add(&writer, name, TT_F32, 1, blocks, NULL);
            } else {
                snprintf(name, sizeof name, "%s.%s", moment_names[k], p->name);
                tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, NULL);
            }
        }
    }
    tt_st_writer_begin(&writer, path);
    for (int k = 0; k < 2; k++) tt_st_writer_write(&writer, maps[k], sizeof maps[k]);
    int64_t largest = 1;
    for (int i = 0; i < layout->count; i++)
        if (layout->tensors[i].numel > largest) largest = layout->tensors[i].numel;
    float *master = tt_xmalloc(tt_mul_size((size_t)largest, sizeof(float), "a tensor of the save"), "a tensor");
    for (int i = 0; i < layout->count; i++) {
        const tt_adamw_8bit_tensor *t = &layout->tensors[i];
        tt_model_get_trainable_range(s, TT_TRAINABLE_WEIGHTS, t->element, t->numel, master);
        tt_st_writer_write(&writer, master, (size_t)t->numel * sizeof(float));
        for (int k = 0; k < 2; k++) {
            const tt_adamw_8bit_moment *m = &h.moment[k];
            if (t->quantized) {
                tt_st_writer_write(&writer, m->codes + t->state, (size_t)t->numel);
                tt_st_writer_write(&writer, m->absmax + t->block,
                                   (size_t)tt_adamw_8bit_blocks(t->numel) * sizeof(float));
            } else {
                tt_st_writer_write(&writer, m->fp32 + t->state, (size_t)t->numel * sizeof(float));
            }
        }
    }
    tt_st_writer_finish(&writer);
    tt_st_writer_free(&writer);
    free(master);
    host_moments_free(&h);
}

/* Tensor `name` of the file, of dtype and shape dims[ndim], into dst. */
static void load_tensor(void *dst, const tt_st_file *file, const char *name, tt_dtype dtype, int ndim,
                        const int64_t *dims) {
    const tt_st_tensor *t = tt_st_find(file, name);
    if (!t)
        tt_die("%s: tensor '%s' is missing; the checkpoint does not belong to this model and optimizer (optimizer: "
               "adamw_bnb_8bit)",
               file->path, name);
    bool same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == dims[d];
    if (!same)
        tt_die("%s: tensor '%s' has another dtype or shape than this model's 8-bit AdamW state; the checkpoint does "
               "not belong to this model and optimizer",
               file->path, name);
    memcpy(dst, t->data, t->bytes);
}

void tt_adamw_8bit_load_moments(tt_model_state *s, const tt_st_file *file) {
    const tt_adamw_8bit_layout *layout = s->adamw_8bit;
    TT_CHECK(layout, "an 8-bit AdamW load without its layout");
    if (!tt_st_find(file, "quantization_map.exp_avg"))
        tt_die("%s: the checkpoint holds no 8-bit AdamW state (no quantization_map.exp_avg): it was saved with "
               "optimizer: adamw_torch; resume with the optimizer it was saved with",
               file->path);
    char name[192];
    const int64_t map_shape[1] = {TT_DYNAMIC_MAP_CODES};
    for (int k = 0; k < 2; k++) { /* the codes mean values of these maps only */
        float ours[TT_DYNAMIC_MAP_CODES], theirs[TT_DYNAMIC_MAP_CODES];
        tt_dynamic_map_build(ours, k == 0);
        snprintf(name, sizeof name, "quantization_map.%s", moment_names[k]);
        load_tensor(theirs, file, name, TT_F32, 1, map_shape);
        if (memcmp(ours, theirs, sizeof ours) != 0)
            tt_die("%s: '%s' differs from the map this version quantizes with; the codes cannot be read", file->path,
                   name);
    }
    host_moments h = host_moments_alloc(layout);
    for (int i = 0; i < layout->count; i++) {
        const tt_adamw_8bit_tensor *t = &layout->tensors[i];
        const tt_param_info *p = &s->params.params[layout->param[i]];
        const int64_t blocks[1] = {tt_adamw_8bit_blocks(t->numel)};
        for (int k = 0; k < 2; k++) {
            const tt_adamw_8bit_moment *m = &h.moment[k];
            if (t->quantized) {
                snprintf(name, sizeof name, "%s_codes.%s", moment_names[k], p->name);
                load_tensor(m->codes + t->state, file, name, TT_U8, p->ndim, p->shape);
                snprintf(name, sizeof name, "%s_absmax.%s", moment_names[k], p->name);
                load_tensor(m->absmax + t->block, file, name, TT_F32, 1, blocks);
            } else {
                snprintf(name, sizeof name, "%s.%s", moment_names[k], p->name);
                load_tensor(m->fp32 + t->state, file, name, TT_F32, p->ndim, p->shape);
            }
        }
    }
    tt_backend_upload(s->backend, s->adam_m, h.buffer[0], layout->moment_bytes);
    tt_backend_upload(s->backend, s->adam_v, h.buffer[1], layout->moment_bytes);
    tt_backend_synchronize(s->backend);
    host_moments_free(&h);
}
