/* Models cut from a parent: every tensor keeps the parent's leading hidden channels,
 * heads, groups, experts and FFN channels (the prefix an importance ranking would keep
 * once channels are sorted); what the parent lacks stays random. Also loading the parent
 * itself, with random weights when its directory has only config.json. */
#include "cost/cost_internal.h"
#include "model/model_internal.h"

#include "autocompress/config_json.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int min_int(int a, int b) { return a < b ? a : b; }

/* dst rows [d0, d0 + n) of width dcols <- src rows [s0, s0 + n) of width scols; the
 * first min(dcols, scols) columns of each. */
static void copy_rows(float *dst, int dcols, int d0, const float *src, int scols, int s0, int n)
{
    int c = min_int(dcols, scols);
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)(d0 + r) * dcols, src + (size_t)(s0 + r) * scols, (size_t)c * sizeof *dst);
}

static void copy_vec(float *dst, int dn, const float *src, int sn)
{
    if (dst && src)
        memcpy(dst, src, (size_t)min_int(dn, sn) * sizeof *dst);
}

static void slice_mamba(const ac_block_dims *cb, ac_layer_weights *cw, int Dc, const ac_block_dims *pb,
                        const ac_layer_weights *pw, int Dp, int conv_bias)
{
    int P = cb->mamba_head_dim, N = cb->ssm_state;
    if (pb->mamba_head_dim != P || pb->ssm_state != N || pb->conv_kernel != cb->conv_kernel)
        return; /* other head shapes: nothing lines up; keep the random weights */
    int Hc = cb->mamba_heads, Hp = pb->mamba_heads, Gc = cb->mamba_groups, Gp = pb->mamba_groups;
    int dIc = Hc * P, dIp = Hp * P, h = min_int(Hc, Hp), g = min_int(Gc, Gp), K = cb->conv_kernel;
    /* in_proj rows: z | x | B | C | dt */
    copy_rows(cw->in_proj, Dc, 0, pw->in_proj, Dp, 0, h * P);
    copy_rows(cw->in_proj, Dc, dIc, pw->in_proj, Dp, dIp, h * P);
    copy_rows(cw->in_proj, Dc, 2 * dIc, pw->in_proj, Dp, 2 * dIp, g * N);
    copy_rows(cw->in_proj, Dc, 2 * dIc + Gc * N, pw->in_proj, Dp, 2 * dIp + Gp * N, g * N);
    copy_rows(cw->in_proj, Dc, 2 * dIc + 2 * Gc * N, pw->in_proj, Dp, 2 * dIp + 2 * Gp * N, h);
    /* conv channels: x | B | C, each row K taps */
    copy_rows(cw->conv_w, K, 0, pw->conv_w, K, 0, h * P);
    copy_rows(cw->conv_w, K, dIc, pw->conv_w, K, dIp, g * N);
    copy_rows(cw->conv_w, K, dIc + Gc * N, pw->conv_w, K, dIp + Gp * N, g * N);
    if (conv_bias && cw->conv_b && pw->conv_b) {
        copy_rows(cw->conv_b, 1, 0, pw->conv_b, 1, 0, h * P);
        copy_rows(cw->conv_b, 1, dIc, pw->conv_b, 1, dIp, g * N);
        copy_rows(cw->conv_b, 1, dIc + Gc * N, pw->conv_b, 1, dIp + Gp * N, g * N);
    }
    copy_vec(cw->dt_bias, Hc, pw->dt_bias, Hp);
    copy_vec(cw->A_log, Hc, pw->A_log, Hp);
    copy_vec(cw->D, Hc, pw->D, Hp);
    copy_vec(cw->gate_norm, dIc, pw->gate_norm, dIp);
    copy_rows(cw->out_proj, dIc, 0, pw->out_proj, dIp, 0, min_int(Dc, Dp));
}

static void slice_attention(const ac_block_dims *cb, ac_layer_weights *cw, int Dc, const ac_block_dims *pb,
                            const ac_layer_weights *pw, int Dp)
{
    if (cb->attn_head_dim != pb->attn_head_dim)
        return;
    int hd = cb->attn_head_dim;
    int q = min_int(cb->attn_heads, pb->attn_heads) * hd, kv = min_int(cb->attn_kv_heads, pb->attn_kv_heads) * hd;
    copy_rows(cw->q_proj, Dc, 0, pw->q_proj, Dp, 0, q);
    copy_rows(cw->k_proj, Dc, 0, pw->k_proj, Dp, 0, kv);
    copy_rows(cw->v_proj, Dc, 0, pw->v_proj, Dp, 0, kv);
    copy_rows(cw->o_proj, cb->attn_heads * hd, 0, pw->o_proj, pb->attn_heads * hd, 0, min_int(Dc, Dp));
}

/* An FFN pair up [F, D] and down [D, F]. */
static void slice_ffn(float *cup, float *cdown, int Fc, int Dc, const float *pup, const float *pdown, int Fp, int Dp)
{
    if (!cup || !pup || Fc <= 0 || Fp <= 0)
        return;
    copy_rows(cup, Dc, 0, pup, Dp, 0, min_int(Fc, Fp));
    copy_rows(cdown, Fc, 0, pdown, Fp, 0, min_int(Dc, Dp));
}

static void slice_moe(const ac_block_dims *cb, ac_layer_weights *cw, int Dc, const ac_block_dims *pb,
                      const ac_layer_weights *pw, int Dp)
{
    int E = min_int(cb->n_experts, pb->n_experts), Ic = cb->expert_ffn, Ip = pb->expert_ffn;
    copy_rows(cw->router, Dc, 0, pw->router, Dp, 0, E);
    copy_vec(cw->router_bias, cb->n_experts, pw->router_bias, pb->n_experts);
    for (int e = 0; e < E; e++)
        slice_ffn(cw->experts_up + (size_t)e * Ic * Dc, cw->experts_down + (size_t)e * Dc * Ic, Ic, Dc,
                  pw->experts_up + (size_t)e * Ip * Dp, pw->experts_down + (size_t)e * Dp * Ip, Ip, Dp);
    slice_ffn(cw->up_proj, cw->down_proj, cb->shared_ffn, Dc, pw->up_proj, pw->down_proj, pb->shared_ffn, Dp);
}

ac_status ac_slice_model(const ac_model *parent, const ac_arch *arch, const int *parent_layer, uint64_t seed,
                         ac_model **out)
{
    *out = NULL;
    if (parent->arch.vocab != arch->vocab)
        return ac_fail(AC_ERR_INVALID, "slice: vocabulary %d differs from the parent's %d", arch->vocab,
                       parent->arch.vocab);
    ac_model *m = NULL;
    ac_status st = ac_model_create(arch, &m);
    if (st != AC_OK)
        return st;
    ac_model_init_random(m, seed, 0.02f);
    int Dc = arch->hidden, Dp = parent->arch.hidden, V = arch->vocab;
    copy_rows(m->embeddings, Dc, 0, parent->embeddings, Dp, 0, V);
    if (!arch->tie_embeddings)
        copy_rows(m->lm_head, Dc, 0, parent->lm_head, Dp, 0, V);
    copy_vec(m->norm_f, Dc, parent->norm_f, Dp);
    for (int i = 0; i < arch->n_layers; i++) {
        int p = parent_layer ? parent_layer[i] : i;
        if (p < 0 || p >= parent->arch.n_layers)
            continue;
        const ac_block_dims *cb = &arch->layers[i], *pb = &parent->arch.layers[p];
        ac_layer_weights *cw = &m->layers[i];
        const ac_layer_weights *pw = &parent->layers[p];
        copy_vec(cw->norm, Dc, pw->norm, Dp);
        if (cb->kind == AC_BLOCK_MAMBA && pb->kind == AC_BLOCK_MAMBA)
            slice_mamba(cb, cw, Dc, pb, pw, Dp, arch->use_conv_bias && parent->arch.use_conv_bias);
        else if (cb->kind == AC_BLOCK_ATTENTION && pb->kind == AC_BLOCK_ATTENTION)
            slice_attention(cb, cw, Dc, pb, pw, Dp);
        else if (cb->kind == AC_BLOCK_MOE && pb->kind == AC_BLOCK_MOE)
            slice_moe(cb, cw, Dc, pb, pw, Dp);
        else if (cb->kind == AC_BLOCK_MLP && pb->kind == AC_BLOCK_MLP)
            slice_ffn(cw->up_proj, cw->down_proj, cb->ffn, Dc, pw->up_proj, pw->down_proj, pb->ffn, Dp);
        else if (cb->kind == AC_BLOCK_MLP && pb->kind == AC_BLOCK_MOE) /* routed experts removed */
            slice_ffn(cw->up_proj, cw->down_proj, cb->ffn, Dc, pw->up_proj, pw->down_proj, pb->shared_ffn, Dp);
    }
    *out = m;
    return AC_OK;
}

static int exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

ac_status ac_load_parent_arch(const char *dir, ac_arch *arch)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ac_config_json_read(path, arch);
}

ac_status ac_load_parent(const char *dir, uint64_t seed, ac_model **model)
{
    *model = NULL;
    if (exists(dir, "model.safetensors") || exists(dir, "model.safetensors.index.json"))
        return ac_model_load(dir, model);
    ac_arch arch;
    ac_status st = ac_load_parent_arch(dir, &arch);
    if (st != AC_OK)
        return st;
    st = ac_model_create(&arch, model);
    ac_arch_free(&arch);
    if (st == AC_OK)
        ac_model_init_random(*model, seed, 0.02f);
    return st;
}
