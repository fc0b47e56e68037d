/* The tests' small hybrid model: pattern M*E-ME (Mamba2, attention, MoE, MLP, Mamba2,
 * MoE), every layer with the same block dims (each kind reads its own fields), random
 * weights; the two sets of dims the device tests use; a device model's arena read back;
 * soft masks on every axis, and the search's steps (masked distillation) on a model,
 * wherever it lives; a prompt and its decode steps, and two sequences decoding together,
 * for comparing two models. */
#ifndef AC_TESTS_HYBRID_MODEL_H
#define AC_TESTS_HYBRID_MODEL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/masks.h"
#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "autocompress/sample.h"
#include "autocompress/train.h"
#include "model/model_internal.h"

#define HYBRID_PATTERN "M*E-ME"
enum { HYBRID_LAYERS = sizeof HYBRID_PATTERN - 1 };

static ac_model *hybrid_model(int vocab, int hidden, const ac_block_dims *dims, uint64_t seed, float std)
{
    const char *pattern = HYBRID_PATTERN;
    int L = HYBRID_LAYERS;
    ac_arch a = {.vocab = vocab, .hidden = hidden, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, L), AC_OK);
    for (int i = 0; i < L; i++) {
        a.layers[i] = *dims;
        a.layers[i].kind = pattern[i] == 'M' ? AC_BLOCK_MAMBA : pattern[i] == '*' ? AC_BLOCK_ATTENTION
                           : pattern[i] == '-' ? AC_BLOCK_MLP : AC_BLOCK_MOE;
    }
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    ac_model_init_random(m, seed, std);
    return m;
}

/* Heads of 4 (the guarded-device tests: many steps, cheap). */
static inline ac_block_dims hybrid_tiny_dims(void)
{
    return (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 4, .mamba_groups = 2, .ssm_state = 4,
                           .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 4,
                           .ffn = 12, .n_experts = 6, .top_k = 2, .expert_ffn = 6, .shared_ffn = 5,
                           .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
}

/* Heads of 8 (the GPU tests: kernels past their smallest shapes). */
static inline ac_block_dims hybrid_small_dims(void)
{
    return (ac_block_dims){.mamba_heads = 4, .mamba_head_dim = 8, .mamba_groups = 2, .ssm_state = 8,
                           .conv_kernel = 4, .attn_heads = 4, .attn_kv_heads = 2, .attn_head_dim = 8,
                           .ffn = 48, .n_experts = 8, .top_k = 2, .expert_ffn = 16, .shared_ffn = 24,
                           .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling = 2.0f};
}

/* A model's arena (on whatever backend) copied into out on the host. */
static inline void host_arena_copy(const ac_model *m, float *out)
{
    ac_model *back;
    assert_int_equal(ac_model_to_backend(m, NULL, &back), AC_OK);
    size_t n;
    const float *w = ac_model_arena(back, &n);
    memcpy(out, w, n * sizeof *out);
    ac_model_free(back);
}

/* Soft masks on every axis of a hybrid model (values in (0, 1], expert 1's score at 0 so
 * that it is never chosen, each layer's last Mamba head at 0.1) and room for every mask
 * gradient: index [0] the masks, [1] their gradients. Axes: Mamba heads, experts, expert
 * scores, FFN channels (an MLP's, or every routed expert's), shared-FFN channels. */
enum { HYBRID_AXES = 5, HYBRID_MAX_WIDTH = 64, HYBRID_MAX_HIDDEN = 32 };

typedef struct {
    float axes[2][HYBRID_AXES][HYBRID_LAYERS][HYBRID_MAX_WIDTH];
    float hidden[2][HYBRID_MAX_HIDDEN], gate[2][HYBRID_LAYERS];
    const float *mask_of[HYBRID_AXES][HYBRID_LAYERS];
    float *grad_of[HYBRID_AXES][HYBRID_LAYERS];
    ac_masks masks;
    ac_mask_grads grads;
} hybrid_masks;

/* The width of mask axis `axis` on a layer of dims b (0: the kind has none). */
static inline int hybrid_mask_width(const ac_block_dims *b, int axis)
{
    int moe = b->kind == AC_BLOCK_MOE;
    switch (axis) {
    case 0: return b->kind == AC_BLOCK_MAMBA ? b->mamba_heads : 0;
    case 1:
    case 2: return moe ? b->n_experts : 0;
    case 3: return moe ? b->expert_ffn : b->kind == AC_BLOCK_MLP ? b->ffn : 0;
    default: return moe ? b->shared_ffn : 0;
    }
}

static inline void hybrid_make_masks(const ac_model *m, hybrid_masks *k)
{
    memset(k, 0, sizeof *k);
    assert_true(m->arch.hidden <= HYBRID_MAX_HIDDEN && m->arch.n_layers == HYBRID_LAYERS);
    for (int c = 0; c < m->arch.hidden; c++)
        k->hidden[0][c] = c % 3 == 0 ? 0.5f : 1.0f;
    for (int l = 0; l < HYBRID_LAYERS; l++) {
        k->gate[0][l] = 0.6f + 0.05f * (float)l;
        for (int a = 0; a < HYBRID_AXES; a++) {
            int width = hybrid_mask_width(&m->arch.layers[l], a);
            assert_true(width <= HYBRID_MAX_WIDTH);
            for (int i = 0; i < width; i++)
                k->axes[0][a][l][i] = a == 0 && i == width - 1 ? 0.1f : a == 2 && i == 1 ? 0.0f
                                                                 : 1.0f - 0.07f * (float)(i % 8);
            k->mask_of[a][l] = width ? k->axes[0][a][l] : NULL;
            k->grad_of[a][l] = width ? k->axes[1][a][l] : NULL;
        }
    }
    k->masks = (ac_masks){k->hidden[0], k->mask_of[0], k->mask_of[1], k->mask_of[2], k->mask_of[3], k->mask_of[4],
                          k->gate[0]};
    k->grads = (ac_mask_grads){k->hidden[1], k->grad_of[0], k->grad_of[1], k->grad_of[2], k->grad_of[3],
                               k->grad_of[4], k->gate[1]};
}

/* Fails unless every axis's gradient, the hidden mask's and the gate's moved from zero
 * (so that comparing them compares something). */
static inline void hybrid_assert_mask_grads_moved(const hybrid_masks *k)
{
    for (int a = 0; a <= HYBRID_AXES + 1; a++) {
        const float *g = a < HYBRID_AXES ? k->axes[1][a][0] : a == HYBRID_AXES ? k->hidden[1] : k->gate[1];
        size_t n = a < HYBRID_AXES ? HYBRID_LAYERS * HYBRID_MAX_WIDTH : a == HYBRID_AXES ? HYBRID_MAX_HIDDEN
                                                                                           : HYBRID_LAYERS;
        double moved = 0.0;
        for (size_t i = 0; i < n; i++)
            moved += fabs(g[i]);
        if (moved == 0.0)
            fail_msg("mask gradient %d (axes, then hidden, then gate) stayed zero", a);
    }
}

/* Two distillation steps of `m` (batch x seq tokens) from `teacher` (on the same device)
 * under `masks`, adding to `mask_grads`; each step's loss, and the weight gradients
 * copied to the host. */
static inline void hybrid_masked_steps(const ac_model *m, const ac_model *teacher, int batch, int seq,
                                       const ac_masks *masks, ac_mask_grads *mask_grads, double *losses,
                                       float *wgrads)
{
    ac_model *grads;
    assert_int_equal(ac_model_create_on(&m->arch, m->backend, &grads), AC_OK);
    ac_train_step *step, *tstep;
    assert_int_equal(ac_train_step_create(m, batch, seq, &step), AC_OK);
    assert_int_equal(ac_train_step_create(teacher, batch, seq, &tstep), AC_OK);
    int n = batch * seq;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    assert_non_null(tokens);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < n; i++)
            tokens[i] = (i * 5 + s * 7 + 2) % m->arch.vocab;
        double unused;
        ac_step_inputs tin = {.tokens = tokens, .targets = tokens};
        assert_int_equal(ac_train_step_loss(tstep, &tin, &unused), AC_OK);
        ac_step_inputs in = {.tokens = tokens, .teacher_logits = ac_train_step_logits(tstep), .kd_tau = 1.5f,
                             .masks = masks, .grads = grads, .mask_grads = mask_grads};
        assert_int_equal(ac_train_step_run(step, &in, &losses[s]), AC_OK);
    }
    free(tokens);
    host_arena_copy(grads, wgrads);
    ac_train_step_free(tstep);
    ac_train_step_free(step);
    ac_model_free(grads);
}

/* The search's steps (hybrid_masked_steps under hybrid_make_masks) on the host models
 * and on their copies on `backend`: each side's masks and mask gradients, losses and
 * weight gradients (n floats each), for a test to compare. */
typedef struct {
    hybrid_masks host, dev;
    double host_loss[2], dev_loss[2];
    float *host_grads, *dev_grads;
    size_t n;
} hybrid_masked_run;

static inline void hybrid_masked_run_both(ac_model *host, const ac_model *teacher, const ac_backend *backend,
                                          int batch, int seq, hybrid_masked_run *r)
{
    ac_model *dev, *dev_teacher;
    assert_int_equal(ac_model_to_backend(host, backend, &dev), AC_OK);
    assert_int_equal(ac_model_to_backend(teacher, backend, &dev_teacher), AC_OK);
    hybrid_make_masks(host, &r->host);
    hybrid_make_masks(host, &r->dev);
    ac_model_arena(host, &r->n);
    r->host_grads = malloc(r->n * sizeof *r->host_grads);
    r->dev_grads = malloc(r->n * sizeof *r->dev_grads);
    assert_true(r->host_grads && r->dev_grads);
    hybrid_masked_steps(host, teacher, batch, seq, &r->host.masks, &r->host.grads, r->host_loss, r->host_grads);
    hybrid_masked_steps(dev, dev_teacher, batch, seq, &r->dev.masks, &r->dev.grads, r->dev_loss, r->dev_grads);
    ac_model_free(dev);
    ac_model_free(dev_teacher);
}

static inline void hybrid_masked_run_free(hybrid_masked_run *r)
{
    free(r->host_grads);
    free(r->dev_grads);
}

/* ---- runs of a model's forward for comparing two models ---- */

/* A prompt of `prompt` tokens (vocab V), its logits [prompt, V], then `gen` decode steps
 * with their logits [gen, V]: each step takes the greedy token of the step before
 * (written to tokens [gen]), or feed's token when feed is given, so that two models'
 * steps read the same inputs. */
static inline void hybrid_generate(const ac_model *m, int V, int prompt, int gen, const int32_t *feed,
                                   float *prompt_logits, float *step_logits, int32_t *tokens)
{
    ac_runtime *rt;
    ac_cache *c;
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    assert_int_equal(ac_cache_create(m, &c), AC_OK);
    int32_t *ids = malloc((size_t)prompt * sizeof *ids);
    assert_non_null(ids);
    for (int t = 0; t < prompt; t++)
        ids[t] = (t * 17 + 5) % V;
    const int32_t *seq[1] = {ids};
    int n[1] = {prompt};
    ac_batch b = {.n_seqs = 1, .tokens = seq, .n_tokens = n, .caches = &c};
    assert_int_equal(ac_runtime_forward(rt, &b, AC_LOGITS_ALL, prompt_logits), AC_OK);
    int32_t next = ac_argmax(prompt_logits + (size_t)(prompt - 1) * V, V);
    for (int g = 0; g < gen; g++) {
        tokens[g] = next;
        const int32_t *one[1] = {feed ? &feed[g] : &tokens[g]};
        int ones[1] = {1};
        ac_batch d = {.n_seqs = 1, .tokens = one, .n_tokens = ones, .caches = &c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, step_logits + (size_t)g * V), AC_OK);
        next = ac_argmax(step_logits + (size_t)g * V, V);
    }
    free(ids);
    ac_cache_free(c);
    ac_runtime_free(rt);
}

/* Two sequences (prompt and prompt / 2 tokens) prefilled together, then `gen` steps
 * decoding both at once: the last logits of each call, [1 + gen, 2, V]. */
static inline void hybrid_decode_pair(const ac_model *m, int V, int prompt, int gen, float *out)
{
    ac_runtime *rt;
    ac_cache *c[2];
    assert_int_equal(ac_runtime_create(m, &rt), AC_OK);
    int32_t *a = malloc((size_t)prompt * sizeof *a), *b = malloc((size_t)prompt * sizeof *b);
    assert_true(a && b);
    for (int t = 0; t < prompt; t++) {
        a[t] = (t * 13 + 1) % V;
        b[t] = (t * 29 + 7) % V;
    }
    for (int s = 0; s < 2; s++)
        assert_int_equal(ac_cache_create(m, &c[s]), AC_OK);
    const int32_t *seqs[2] = {a, b};
    int n[2] = {prompt, prompt / 2};
    ac_batch first = {.n_seqs = 2, .tokens = seqs, .n_tokens = n, .caches = c};
    assert_int_equal(ac_runtime_forward(rt, &first, AC_LOGITS_LAST, out), AC_OK);
    for (int g = 0; g < gen; g++) {
        int32_t next[2] = {(g * 7 + 3) % V, (g * 5 + 1) % V};
        const int32_t *one[2] = {&next[0], &next[1]};
        int ones[2] = {1, 1};
        ac_batch d = {.n_seqs = 2, .tokens = one, .n_tokens = ones, .caches = c};
        assert_int_equal(ac_runtime_forward(rt, &d, AC_LOGITS_LAST, out + (size_t)(g + 1) * 2 * V), AC_OK);
    }
    for (int s = 0; s < 2; s++)
        ac_cache_free(c[s]);
    free(a);
    free(b);
    ac_runtime_free(rt);
}

/* max |a - b| / max |a| over n values */
static inline double hybrid_relative(const float *a, const float *b, size_t n)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return scale > 0.0 ? worst / scale : worst;
}

#endif
