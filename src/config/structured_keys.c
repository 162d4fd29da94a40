/* Keys whose value is a mapping or a list: special_tokens, selective_checkpointing,
 * gradient_checkpointing_kwargs, adapter, lora_target_modules, frozen_layers, eot_tokens. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/check.h"

void cfg_set_special_tokens(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                            yaml_node_t *node) {
    char **slots[4] = {&c->special_bos, &c->special_eos, &c->special_pad, &c->special_unk};
    for (int i = 0; i < 4; i++) {
        free(*slots[i]);
        *slots[i] = NULL;
    }
    if (cfg_is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE)
        cfg_die_type(src, node, k, "a mapping such as {eos_token: \"<|im_end|>\"}, or ~");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        int slot = cfg_index_in_list("bos_token|eos_token|pad_token|unk_token", name, false);
        if (slot < 0)
            cfg_die_at(src, key,
                       "special_tokens: '%s' is not supported; it takes bos_token, eos_token, pad_token and unk_token",
                       name);
        if (value->type != YAML_SCALAR_NODE || cfg_is_null(value) || !*cfg_scalar_text(value))
            cfg_die_at(src, value, "special_tokens: %s: expected a token such as \"<|im_end|>\"", name);
        free(*slots[slot]);
        *slots[slot] = tt_xstrdup(cfg_scalar_text(value));
    }
}

/* selective_checkpointing: auto (the plan decides), off (~, false, {}) or {save: [attention], offload: false}. */
void cfg_set_selective(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                       yaml_node_t *node) {
    c->selective_checkpointing = false;
    c->selective_offload = false;
    c->selective_auto = node->type == YAML_SCALAR_NODE && strcmp(cfg_scalar_text(node), "auto") == 0;
    if (c->selective_auto || cfg_is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE)
        cfg_die_type(src, node, k, "a mapping {save: [attention], offload: false}, auto or ~");
    bool saves_attention = false;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        if (strcmp(name, "save") == 0) {
            if (value->type != YAML_SEQUENCE_NODE)
                cfg_die_at(src, value, "selective_checkpointing: save: expected a list such as [attention]");
            for (yaml_node_item_t *item = value->data.sequence.items.start; item < value->data.sequence.items.top;
                 item++) {
                yaml_node_t *entry = yaml_document_get_node(doc, *item);
                if (entry->type != YAML_SCALAR_NODE || strcmp(cfg_scalar_text(entry), "attention") != 0) {
                    char buf[256];
                    cfg_die_at(
                        src, entry,
                        "selective_checkpointing: save: %s is not something tiertrain can keep; the one choice is "
                        "attention (the attention output and its log-sum-exp)",
                        cfg_describe_value(entry, buf, sizeof buf));
                }
                saves_attention = true;
            }
        } else if (strcmp(name, "offload") == 0) {
            bool offload;
            if (value->type != YAML_SCALAR_NODE || !cfg_parse_bool(cfg_scalar_text(value), &offload))
                cfg_die_at(src, value, "selective_checkpointing: offload: expected true or false");
            c->selective_offload = offload;
        } else {
            cfg_die_at(src, key,
                       "selective_checkpointing: unknown key '%s'; it takes save (a list: [attention]) and "
                       "offload (true or false)",
                       name);
        }
    }
    if (!saves_attention)
        cfg_die_at(src, node,
                   "selective_checkpointing: save lists nothing; use save: [attention], or turn it off with ~");
    c->selective_checkpointing = true;
}

/* gradient_checkpointing_kwargs: transformers' keyword arguments of its checkpoint function. Only
 * use_reentrant is meaningful there and it picks between two PyTorch implementations of the same
 * arithmetic; anything else would change what checkpointing does and is refused. */
void cfg_set_checkpointing_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                                  yaml_node_t *node) {
    c->use_reentrant = false;
    if (cfg_is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE) cfg_die_type(src, node, k, "a mapping such as {use_reentrant: false}, or ~");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        if (strcmp(name, "use_reentrant") != 0)
            cfg_die_at(src, key,
                       "gradient_checkpointing_kwargs: '%s' is not supported; the one key is use_reentrant (for which "
                       "layers are checkpointed see recompute_method and selective_checkpointing)",
                       name);
        if (value->type != YAML_SCALAR_NODE || !cfg_parse_bool(cfg_scalar_text(value), &c->use_reentrant))
            cfg_die_at(src, value, "gradient_checkpointing_kwargs: use_reentrant: expected true or false");
    }
}

/* adapter: lora, or ~ (false) for full fine-tuning. */
void cfg_set_adapter(tt_run_config *c, const source *src, yaml_node_t *node) {
    char buf[256];
    bool b;
    const char *text = node->type == YAML_SCALAR_NODE ? cfg_scalar_text(node) : "";
    if (cfg_is_null(node) || (cfg_parse_bool(text, &b) && !b)) {
        c->adapter = TT_ADAPTER_NONE;
        return;
    }
    if (strcmp(text, "lora") == 0) {
        c->adapter = TT_ADAPTER_LORA;
        return;
    }
    if (strcmp(text, "qlora") == 0) {
        c->adapter = TT_ADAPTER_QLORA;
        return;
    }
    cfg_die_at(src, node, "adapter must be lora or qlora (or ~ for full fine-tuning); got %s",
               cfg_describe_value(node, buf, sizeof buf));
}

/* lora_target_modules: [q_proj, v_proj, ...] (PEFT's names) or the short names [q, v, ...]; one name alone is a
 * list of one. */
void cfg_set_lora_targets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    c->lora_target_modules = 0;
    if (cfg_is_null(node)) return;
    if (node->type == YAML_MAPPING_NODE)
        cfg_die_at(src, node,
                   "lora_target_modules: expected a list of module names such as [q_proj, v_proj], got a "
                   "mapping");
    yaml_node_item_t one = 0, *first = &one, *end = &one + 1;
    if (node->type == YAML_SEQUENCE_NODE) {
        first = node->data.sequence.items.start;
        end = node->data.sequence.items.top;
    }
    for (yaml_node_item_t *item = first; item < end; item++) {
        yaml_node_t *entry = node->type == YAML_SEQUENCE_NODE ? yaml_document_get_node(doc, *item) : node;
        char buf[256];
        int module = -1;
        for (int m = 0; entry->type == YAML_SCALAR_NODE && m < TT_LORA_MODULE_COUNT && module < 0; m++)
            if (strcmp(cfg_scalar_text(entry), tt_lora_module_name((tt_lora_module)m)) == 0 ||
                strcmp(cfg_scalar_text(entry), tt_lora_module_short_name((tt_lora_module)m)) == 0)
                module = m;
        if (module < 0)
            cfg_die_at(
                src, entry,
                "lora_target_modules: %s is not a linear layer tiertrain can put an adapter on; choose from "
                "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (or q, k, v, o, gate, up, down), or "
                "set lora_target_linear: true for all of them",
                cfg_describe_value(entry, buf, sizeof buf));
        c->lora_target_modules |= 1u << module;
    }
}

static int compare_int64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* frozen_layers: [0, 1, ...] (or one index); kept ascending, each index once. Indices past the model's
 * layers are found when the model is read. */
void cfg_set_layer_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                        yaml_node_t *node) {
    free(c->frozen_layers);
    c->frozen_layers = NULL;
    c->frozen_layer_count = 0;
    if (cfg_is_null(node)) return;
    if (node->type == YAML_MAPPING_NODE) cfg_die_type(src, node, k, "a list of layer indices such as [0, 1]");
    size_t count = node->type == YAML_SEQUENCE_NODE
                       ? (size_t)(node->data.sequence.items.top - node->data.sequence.items.start)
                       : 1;
    if (count == 0) return;
    int64_t *layers = tt_xcalloc(count, sizeof(int64_t), "frozen_layers");
    c->frozen_layers = layers;
    for (size_t i = 0; i < count; i++) {
        yaml_node_t *entry =
            node->type == YAML_SEQUENCE_NODE ? yaml_document_get_node(doc, node->data.sequence.items.start[i]) : node;
        int64_t v = -1;
        if (entry->type != YAML_SCALAR_NODE || cfg_parse_int64(cfg_scalar_text(entry), &v) != 0 || v < 0) {
            char buf[256];
            cfg_die_at(src, entry, "%s: expected layer indices (integers from 0), got %s", k->name,
                       cfg_describe_value(entry, buf, sizeof buf));
        }
        for (size_t j = 0; j < i; j++)
            if (layers[j] == v)
                cfg_die_at(src, entry, "%s lists layer %lld twice; list each layer once", k->name, (long long)v);
        layers[i] = v;
        c->frozen_layer_count++;
    }
    qsort(layers, count, sizeof(int64_t), compare_int64);
}

void cfg_set_string_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                         yaml_node_t *node) {
    char ***list = (char ***)((char *)c + k->offset);
    int *count = (int *)((char *)c + k->count_offset);
    cfg_free_strings(*list, *count);
    *list = NULL;
    *count = 0;
    if (cfg_is_null(node)) return;
    if (node->type != YAML_SEQUENCE_NODE) cfg_die_type(src, node, k, "a list of tokens such as [\"<|im_end|>\"], or ~");
    *list = tt_xmalloc(sizeof(char *), k->name); /* given, even if empty */
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(doc, *it);
        char buf[256];
        if (item->type != YAML_SCALAR_NODE || cfg_is_null(item) || !*cfg_scalar_text(item))
            cfg_die_at(src, item, "%s: expected tokens such as \"<|im_end|>\", got %s", k->name,
                       cfg_describe_value(item, buf, sizeof buf));
        for (int i = 0; i < *count; i++)
            if (strcmp((*list)[i], cfg_scalar_text(item)) == 0)
                cfg_die_at(src, item, "%s lists '%s' twice; list each token once", k->name, cfg_scalar_text(item));
        cfg_push_string(list, count, cfg_scalar_text(item));
    }
}
