/* Minitron importance on calibration tokens and the function-preserving reorder of a
 * model by it, so that every candidate width is a prefix (module/importance/). Pruning,
 * the search and Minitron++ read it. */
#ifndef AUTOCOMPRESS_IMPORTANCE_H
#define AUTOCOMPRESS_IMPORTANCE_H

#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/model.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Minitron's estimators: for every axis, sqrt(sum over sequences of (mean over the
 * sequence of |activation|)^2), higher = more important. Arrays of layers of another
 * kind are NULL. */
typedef struct {
    int n_layers, hidden;
    float *hidden_channels; /* [D] every block's normed input (pre-norm output), summed over layers */
    float **mamba_heads;    /* per Mamba layer [H]: L2 of the head's channel scores of the x slice of in_proj */
    float **experts;        /* per MoE layer [E]: sum of the expert's output norms / tokens routed to it */
    float **ffn;            /* per MLP layer [F] (down_proj input), per MoE layer [I] (summed over experts) */
    float **shared_ffn;     /* per MoE layer with a shared expert [S] */
    float *depth;           /* [L]: mean over sequences of 1 - cos(block input, block output) per token */
    int64_t tokens;         /* calibration tokens seen */
    ac_arch arch;           /* the architecture the arrays are shaped by (owned; set by compute and load,
                               needed by save) */
} ac_importance;

/* Scores of `model` on n_seqs sequences of seq_len tokens (tokens[n_seqs * seq_len]). */
ac_status ac_importance_compute(const ac_model *model, const int32_t *tokens, int n_seqs, int seq_len,
                                ac_importance *out);
void ac_importance_free(ac_importance *imp);
/* A deep copy (dst is overwritten, free it with ac_importance_free). */
ac_status ac_importance_copy(ac_importance *dst, const ac_importance *src);
/* As safetensors (tensors "hidden", "layers.N.mamba_heads", ...); load checks the
 * shapes against `arch` and names what differs. */
ac_status ac_importance_save(const ac_importance *imp, const char *path);
ac_status ac_importance_load(const char *path, const ac_arch *arch, ac_importance *out);

/* Reorders `model` in place by `imp`, without changing its function: hidden channels,
 * MLP, routed-expert (one order per layer for all its experts) and shared-expert
 * channels, experts (with their router rows and correction bias) in descending score,
 * Mamba heads in descending score within each group (a head keeps its group). `imp` is
 * permuted the same way, so afterwards every array is in the model's new order. */
ac_status ac_model_reorder(ac_model *model, ac_importance *imp);

#ifdef __cplusplus
}
#endif

#endif
