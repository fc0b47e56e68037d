/* Pruning: the parent reordered by importance (so every kept width is a prefix of the
 * most important channels, heads and experts), then sliced to a smaller architecture.
 * Pruning never invents weights: every dimension of the architecture must fit inside the
 * parent layer it comes from, or the call is refused with the layer and field named. */
#ifndef AUTOCOMPRESS_PRUNE_H
#define AUTOCOMPRESS_PRUNE_H

#include "autocompress/dtype.h"
#include "autocompress/model.h"
#include "autocompress/importance.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const ac_importance *importance; /* NULL: the parent is already in importance order
                                        (e.g. the weights of search --train-weights) */
    const int *parent_layers;        /* child layer i comes from parent layer parent_layers[i]
                                        (strictly increasing); NULL: layer i from layer i */
} ac_prune_params;

/* Refuses a child that does not fit inside the parent: another vocabulary or embedding
 * tying, a larger hidden size, a parent layer out of order or out of range, another
 * block kind (an MLP may come from a MoE layer's shared expert), a larger width, head
 * or expert count, or a changed fixed dimension (head and state sizes, groups, top-k). */
ac_status ac_prune_check(const ac_arch *parent, const ac_arch *child, const int *parent_layers);

/* The pruned model (parent unchanged; params->importance is not modified). */
ac_status ac_prune(const ac_model *parent, const ac_arch *child, const ac_prune_params *params, ac_model **out);

/* The "parent_layers" array of a search.json (n_layers entries), malloc'd. */
ac_status ac_prune_read_parent_layers(const char *search_json, int n_layers, int **parent_layers);

/* Writes `model` as a Hugging Face checkpoint in out_dir (config.json in the
 * nemotron_h_puzzle form when layers differ, model.safetensors in `dtype`) with the
 * tokenizer files of parent_dir copied beside it (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json: those that exist). */
ac_status ac_prune_save(const ac_model *model, const char *parent_dir, const char *out_dir, ac_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
