/* Mamba2 mixer: in_proj -> [z | xBC | dt]; causal conv + SiLU over xBC; selective scan
 * with grouped B/C; head mask; gated grouped RMSNorm with z; out_proj. Forward and backward.
 *
 * dt: transformers (5.x) clamps softplus(dt + dt_bias) to >= time_step_min on its prefill
 * paths (the torch chunked scan and the fused kernels), but not in its single-token
 * decode update, so its own prefill and decode disagree whenever dt falls below the
 * floor. This engine clamps everywhere: prefill is what every reference logit comes from,
 * and one rule keeps a decoded sequence identical to the same sequence prefilled.
 *
 * Training (seqs->caches == NULL): every sequence starts from zero conv and SSM state in
 * scratch and keeps none. The backward recomputes the forward from xn and stores every
 * step's SSM state ([T, H, P, N], T the packed tokens) for the reverse recurrence: one
 * forward scan, no chunk checkpoints, at H*P*N floats a token of scratch. */
#include "runtime/runtime_internal.h"

#include <math.h>
#include <string.h>

size_t ac_mamba2_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)ac_mamba_in_proj_dim(b) + (size_t)ac_mamba_conv_dim(b) + (size_t)b->mamba_heads +
           (size_t)ac_mamba_d_inner(b);
}

/* Floats of one sequence's conv and SSM state. */
static size_t conv_state_floats(const ac_block_dims *b) { return (size_t)ac_mamba_conv_dim(b) * (b->conv_kernel - 1); }
static size_t ssm_state_floats(const ac_block_dims *b)
{
    return (size_t)b->mamba_heads * b->mamba_head_dim * b->ssm_state;
}

/* Per token: the forward's buffers (proj, xbc, dt, y) plus the masked y, the norm output
 * (later its gradient), dL/dy, dproj, dxbc, ddt, the norm's rstd, the saved states and
 * the scan backward's work (2 H N a token plus H P N). Fixed-size buffers are counted per
 * token too, which covers them for any T >= 1: the conv weight and bias gradients summed
 * over sequences (conv (K + 1)), and the zero states of the training forward (conv (K-1)
 * + H P N), so the training reservation also plans ac_mamba2_forward without caches. */
size_t ac_mamba2_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t H = (size_t)b->mamba_heads, N = (size_t)b->ssm_state, G = (size_t)b->mamba_groups;
    size_t nproj = (size_t)ac_mamba_in_proj_dim(b), conv = (size_t)ac_mamba_conv_dim(b);
    size_t dI = (size_t)ac_mamba_d_inner(b), hpn = ssm_state_floats(b);
    return 2 * nproj + 2 * conv + 2 * H + 4 * dI + G + hpn + 2 * H * N + hpn + conv * (b->conv_kernel + 1) +
           conv_state_floats(b) + hpn;
}

void ac_mamba2_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total;
    int H = b->mamba_heads, P = b->mamba_head_dim, N = b->ssm_state, G = b->mamba_groups;
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), nproj = ac_mamba_in_proj_dim(b);
    const float *mask = masks ? masks->mamba_heads : NULL;

    float *proj = ac_scratch(rt, (size_t)T * nproj); /* z | xBC | dt per row */
    float *xbc = ac_scratch(rt, (size_t)T * conv);   /* after conv + SiLU: x | B | C */
    float *dt = ac_scratch(rt, (size_t)T * H);
    float *y = ac_scratch(rt, (size_t)T * dI);
    /* training: a fresh state per sequence (planned by ac_runtime_reserve_training) */
    float *conv0 = NULL, *ssm0 = NULL;
    if (!seqs->caches) {
        conv0 = ac_scratch(rt, conv_state_floats(b));
        ssm0 = ac_scratch(rt, ssm_state_floats(b));
    }
    float A[AC_MAX_MAMBA_HEADS];
    for (int h = 0; h < H; h++)
        A[h] = -expf(w->A_log[h]);

    ac_k_linear(&rt->kctx, T, nproj, D, xn, D, w->in_proj, 0.0f, proj, nproj);
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        float *conv_state = conv0, *ssm_state = ssm0;
        if (seqs->caches) {
            ac_cache_layers *c = &seqs->caches[s]->l;
            conv_state = c->conv[layer];
            ssm_state = c->ssm[layer];
        } else {
            memset(conv0, 0, conv_state_floats(b) * sizeof *conv0);
            memset(ssm0, 0, ssm_state_floats(b) * sizeof *ssm0);
        }
        const float *rows = proj + (size_t)o * nproj;
        ac_k_conv1d_silu(&rt->kctx, L, conv, b->conv_kernel, rows + dI, nproj, w->conv_w, w->conv_b,
                         conv_state, xbc + (size_t)o * conv, conv);
        ac_k_softplus_dt(&rt->kctx, L, H, rows + dI + conv, nproj, w->dt_bias, a->time_step_min,
                         dt + (size_t)o * H);
        const float *xs = xbc + (size_t)o * conv;
        ac_k_ssd_scan(&rt->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv,
                      dt + (size_t)o * H, A, w->D, ssm_state, y + (size_t)o * dI, dI);
    }
    if (mask)
        ac_k_mul_heads(&rt->kctx, T, H, P, mask, y, dI);
    ac_k_gated_rmsnorm(&rt->kctx, T, dI, dI / G, y, dI, proj, nproj, w->gate_norm, a->norm_eps, y, dI);
    ac_k_linear(&rt->kctx, T, D, dI, y, dI, w->out_proj, 0.0f, out, D);
}

void ac_mamba2_backward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                        const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total, K = b->conv_kernel;
    int H = b->mamba_heads, P = b->mamba_head_dim, N = b->ssm_state, G = b->mamba_groups;
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), nproj = ac_mamba_in_proj_dim(b);
    size_t hpn = ssm_state_floats(b);
    const float *mask = masks ? masks->mamba_heads : NULL;
    float *dmask = mask && mask_grads ? mask_grads->mamba_heads : NULL;
    int longest = 0;
    for (int s = 0; s < seqs->n; s++)
        longest = seqs->len[s] > longest ? seqs->len[s] : longest;

    float *proj = ac_scratch(rt, (size_t)T * nproj);
    float *xbc = ac_scratch(rt, (size_t)T * conv);
    float *dt = ac_scratch(rt, (size_t)T * H);
    float *states = ac_scratch(rt, (size_t)T * hpn);
    float *y = ac_scratch(rt, (size_t)T * dI);                    /* the scan's output */
    float *ym = mask ? ac_scratch(rt, (size_t)T * dI) : y;        /* masked: the norm's input */
    float *nrm = ac_scratch(rt, (size_t)T * dI);                  /* norm output, then its gradient */
    float *dy = ac_scratch(rt, (size_t)T * dI);
    float *dproj = ac_scratch(rt, (size_t)T * nproj);
    float *dxbc = ac_scratch(rt, (size_t)T * conv);
    float *ddt = ac_scratch(rt, (size_t)T * H);
    float *rstd = ac_scratch(rt, (size_t)T * G);
    float *work = ac_scratch(rt, (size_t)H * (2 * (size_t)longest + (size_t)P) * N);
    float *conv0 = ac_scratch(rt, conv_state_floats(b));
    /* Gradients that sum over sequences go to zeroed buffers first and into grad once,
     * so a gradient arena holds the same sums whatever it held before (twice = 2x). */
    float *dconv_w = NULL, *dconv_b = NULL;
    float A[AC_MAX_MAMBA_HEADS], dA[AC_MAX_MAMBA_HEADS], dD[AC_MAX_MAMBA_HEADS];
    for (int h = 0; h < H; h++) {
        A[h] = -expf(w->A_log[h]);
        dA[h] = dD[h] = 0.0f;
    }
    if (grad) {
        dconv_w = ac_scratch(rt, (size_t)conv * (K + 1));
        memset(dconv_w, 0, (size_t)conv * (K + 1) * sizeof *dconv_w);
        dconv_b = w->conv_b ? dconv_w + (size_t)conv * K : NULL;
    }

    /* recompute the forward, keeping every state */
    ac_k_linear(&rt->kctx, T, nproj, D, xn, D, w->in_proj, 0.0f, proj, nproj);
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        const float *rows = proj + (size_t)o * nproj;
        memset(conv0, 0, conv_state_floats(b) * sizeof *conv0);
        ac_k_conv1d_silu(&rt->kctx, L, conv, K, rows + dI, nproj, w->conv_w, w->conv_b, conv0,
                         xbc + (size_t)o * conv, conv);
        ac_k_softplus_dt(&rt->kctx, L, H, rows + dI + conv, nproj, w->dt_bias, a->time_step_min,
                         dt + (size_t)o * H);
        const float *xs = xbc + (size_t)o * conv;
        ac_k_ssd_scan_save(&rt->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H,
                           A, w->D, NULL, states + (size_t)o * hpn, y + (size_t)o * dI, dI);
    }
    if (mask) {
        memcpy(ym, y, (size_t)T * dI * sizeof *ym);
        ac_k_mul_heads(&rt->kctx, T, H, P, mask, ym, dI);
    }
    ac_k_gated_rmsnorm(&rt->kctx, T, dI, dI / G, ym, dI, proj, nproj, w->gate_norm, a->norm_eps, nrm, dI);

    /* out_proj: the weight gradient reads the norm output, which then becomes its gradient */
    if (grad)
        ac_k_linear_backward(&rt->kctx, T, D, dI, nrm, dI, NULL, dout, D, 0.0f, NULL, dI, grad->out_proj);
    ac_k_linear_backward(&rt->kctx, T, D, dI, NULL, dI, w->out_proj, dout, D, 0.0f, nrm, dI, NULL);
    /* gated norm: dL/d(masked y) to dy, dL/dz straight into dproj's z columns */
    ac_k_gated_rmsnorm_backward(&rt->kctx, T, dI, dI / G, ym, dI, proj, nproj, w->gate_norm, a->norm_eps, nrm, dI,
                                dy, dI, dproj, nproj, grad ? grad->gate_norm : NULL, rstd);
    if (mask)
        ac_k_mul_heads_backward(&rt->kctx, T, H, P, mask, y, dI, dy, dI, dmask);
    /* scan, then conv + SiLU, per sequence; softplus is per token */
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        const float *xs = xbc + (size_t)o * conv;
        float *dxs = dxbc + (size_t)o * conv;
        ac_k_ssd_scan_backward(&rt->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H,
                               A, w->D, NULL, states + (size_t)o * hpn, dy + (size_t)o * dI, dI, dxs, conv, dxs + dI,
                               dxs + dI + G * N, conv, ddt + (size_t)o * H, grad ? dA : NULL, grad ? dD : NULL,
                               work);
        ac_k_conv1d_silu_backward(&rt->kctx, L, conv, K, proj + (size_t)o * nproj + dI, nproj, w->conv_w, w->conv_b,
                                  NULL, dxs, conv, dproj + (size_t)o * nproj + dI, nproj, dconv_w, dconv_b);
    }
    ac_k_softplus_dt_backward(&rt->kctx, T, H, proj + dI + conv, nproj, w->dt_bias, a->time_step_min, ddt,
                              dproj + dI + conv, nproj, grad ? grad->dt_bias : NULL);
    if (grad) {
        for (int h = 0; h < H; h++) {
            grad->A_log[h] += dA[h] * A[h]; /* A = -exp(A_log): dA_log = dA * A */
            grad->D[h] += dD[h];
        }
        ac_k_add(&rt->kctx, (size_t)conv * K, dconv_w, grad->conv_w);
        if (dconv_b)
            ac_k_add(&rt->kctx, (size_t)conv, dconv_b, grad->conv_b);
    }
    ac_k_linear_backward(&rt->kctx, T, nproj, D, xn, D, w->in_proj, dproj, nproj, 0.0f, dxn, D,
                         grad ? grad->in_proj : NULL);
}
