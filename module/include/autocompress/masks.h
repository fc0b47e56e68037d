/* Soft architecture masks: the search's handle on the model. Each multiplies one axis by
 * weights in [0, 1]; a NULL pointer is no mask (and costs nothing), a mask of ones
 * changes no bit. Pointers are per layer; entries for layers of another kind are NULL.
 *
 * Where each applies:
 *   hidden      [D]      every block's normed input and its output before the residual add,
 *                        the embeddings and the final norm's output (and sets the norms'
 *                        width, below)
 *   mamba_heads [H]      each head's scan output y (before the gated norm, and sets its
 *                        groups' widths, below)
 *   experts     [E]      each routed expert's output (selection unchanged: output masking)
 *   expert_scores [E]    each routed expert's score before the top-k (top-k score
 *                        masking): its odds times the mask, sigmoid(logit + log m);
 *                        an expert whose mask is 0 is never chosen, as if removed
 *   ffn         [F | I]  MLP channels, or every routed expert's channels, after relu2
 *   shared_ffn  [S]      the shared expert's channels after relu2
 *   layer_gate  [L]      scales the block's contribution: x + g * mixer(norm(x))
 *
 * With a hidden mask, every RMSNorm averages over the kept width sum(hidden), not D; with
 * a head mask, each group's gated norm over P times the sum of its heads' mask. So at 0/1
 * values every mask (experts with score masking) gives exactly the model sliced to the
 * kept parts, heads taken within their groups. */
#ifndef AUTOCOMPRESS_MASKS_H
#define AUTOCOMPRESS_MASKS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const float *hidden;
    const float *const *mamba_heads;
    const float *const *experts;
    const float *const *expert_scores;
    const float *const *ffn;
    const float *const *shared_ffn;
    const float *layer_gate;
} ac_masks;

/* Gradients of the same shapes; a NULL pointer means that gradient is not wanted.
 * Gradients accumulate (+=). */
typedef struct {
    float *hidden;
    float *const *mamba_heads;
    float *const *experts;
    float *const *expert_scores;
    float *const *ffn;
    float *const *shared_ffn;
    float *layer_gate;
} ac_mask_grads;

#ifdef __cplusplus
}
#endif

#endif
