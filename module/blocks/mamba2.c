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
 * scratch and keeps none. A training forward with c->saved keeps its projections, the
 * scan's output and kept states (as many as the backend keeps, ac_k_ssd_states_floats)
 * and the gated norm's output, so its backward recomputes nothing; without them the
 * backward recomputes the forward from xn. */
#include "blocks/block.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* proj, xbc, dt and y a token, and A [H] (-exp(A_log), made where the ops run) and the
 * gated norm's group scales under a head mask (G <= H), which one token's share covers
 * whatever T is. */
static size_t mamba2_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)ac_mamba_in_proj_dim(b) + (size_t)ac_mamba_conv_dim(b) + (size_t)b->mamba_heads +
           (size_t)ac_mamba_d_inner(b) + 2 * (size_t)b->mamba_heads;
}

/* A training forward keeps, per token, in_proj's output, the conv's, dt, the scan's
 * output y and the gated norm's output: proj | xbc | dt | y | normed; then the scan's
 * kept states, sequence by sequence (mamba2_saved_per_sequence). */
static size_t mamba2_saved_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)ac_mamba_in_proj_dim(b) + (size_t)ac_mamba_conv_dim(b) + (size_t)b->mamba_heads +
           2 * (size_t)ac_mamba_d_inner(b);
}

static size_t mamba2_saved_per_sequence(const ac_block_dims *b, const ac_backend *be, int seq_len)
{
    return ac_k_ssd_states_floats(be, seq_len, b->mamba_heads, b->mamba_head_dim, b->ssm_state);
}

/* The forward's internals [T rows each] and the scan's states (sequence after sequence,
 * ac_k_ssd_states_floats each): in c->saved when it is set; else proj, xbc and dt in
 * scratch and the rest NULL (each pass makes its own). */
typedef struct {
    float *proj, *xbc, *dt, *y, *normed, *states;
} mamba2_kept;

static int kept_internals(ac_block_ctx *c, const ac_block_dims *b, int T, mamba2_kept *k)
{
    size_t nproj = (size_t)ac_mamba_in_proj_dim(b), conv = (size_t)ac_mamba_conv_dim(b);
    size_t dI = (size_t)ac_mamba_d_inner(b);
    if (c->saved) {
        k->proj = c->saved;
        k->xbc = k->proj + (size_t)T * nproj;
        k->dt = k->xbc + (size_t)T * conv;
        k->y = k->dt + (size_t)T * (size_t)b->mamba_heads;
        k->normed = k->y + (size_t)T * dI;
        k->states = k->normed + (size_t)T * dI;
        return 1;
    }
    *k = (mamba2_kept){.proj = ac_block_scratch(c, (size_t)T * nproj), .xbc = ac_block_scratch(c, (size_t)T * conv),
                       .dt = ac_block_scratch(c, (size_t)T * (size_t)b->mamba_heads)};
    return 0;
}

/* Floats of one sequence's conv and SSM state; the cache holds them in this order. */
static size_t conv_state_floats(const ac_block_dims *b) { return (size_t)ac_mamba_conv_dim(b) * (b->conv_kernel - 1); }
static size_t ssm_state_floats(const ac_block_dims *b)
{
    return (size_t)b->mamba_heads * b->mamba_head_dim * b->ssm_state;
}
static size_t mamba2_state_floats(const ac_block_dims *b) { return conv_state_floats(b) + ssm_state_floats(b); }

/* Per token: the forward's buffers (proj, xbc, dt, y) plus the masked y, the norm output
 * (later its gradient) and its copy for a head mask's width gradient, dL/dy, dproj, dxbc,
 * ddt, the norm's rstd, the saved states and the scan backward's work (at most
 * ac_k_ssd_backward_work_per_token a token). Fixed-size buffers are counted per
 * token too, which covers them for any T >= 1: the conv weight and bias gradients summed
 * over sequences (conv (K + 1)), and the zero states of the training forward (conv (K-1)
 * + H P N), so the training reservation also plans ac_mamba2_forward without caches; and
 * A, dA and dD (3 H), the group scales of the norm and of its backward (2 G <= 2 H). */
static size_t mamba2_backward_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    size_t H = (size_t)b->mamba_heads, G = (size_t)b->mamba_groups;
    size_t nproj = (size_t)ac_mamba_in_proj_dim(b), conv = (size_t)ac_mamba_conv_dim(b);
    size_t dI = (size_t)ac_mamba_d_inner(b), hpn = ssm_state_floats(b);
    size_t scan_work = ac_k_ssd_backward_work_per_token(b->mamba_heads, b->mamba_head_dim, b->ssm_state);
    return 2 * nproj + 2 * conv + 2 * H + 5 * dI + G + hpn + scan_work + conv * (b->conv_kernel + 1) +
           conv_state_floats(b) + hpn + 5 * H;
}

/* The width each group's gated norm keeps under a head mask: P * the sum of its heads'
 * mask (the norm then averages over those channels, as the model without the masked
 * heads does). 1 when some group's width differs from group_size (the plain norm
 * otherwise, bit for bit). */
static int group_widths(const float *mask, int H, int P, int G, float *width)
{
    int per = H / G, differs = 0;
    for (int g = 0; g < G; g++) {
        double m = 0.0;
        for (int h = g * per; h < (g + 1) * per; h++)
            m += mask ? mask[h] : 1.0f;
        width[g] = (float)(m * P);
        differs |= width[g] != (float)(per * P);
    }
    return differs;
}

/* A group whose mask keeps less than this share of a head is off: its output is zero
 * (its input is, up to rounding), and the norm's width terms would divide by ~0. */
#define AC_MIN_GROUP_WIDTH 1e-6f

/* out = the gated norm of y (masked) with z, each group over its kept width M_g:
 * sqrt(M_g / gs) * the norm with eps M_g / gs (as in the driver's width_norm). */
static void width_gated_norm(ac_block_ctx *c, int T, int dI, int G, const float *y, const float *z, int ldz,
                             const float *w, float eps, const float *width, float *out)
{
    int gs = dI / G;
    float scale[AC_MAX_MAMBA_HEADS];
    for (int g = 0; g < G; g++) {
        int off = width[g] < AC_MIN_GROUP_WIDTH;
        ac_k_gated_rmsnorm(c->kctx, T, gs, gs, y + (size_t)g * gs, dI, z + (size_t)g * gs, ldz, w + (size_t)g * gs,
                           off ? eps : eps * width[g] / (float)gs, out + (size_t)g * gs, dI);
        scale[g] = off ? 0.0f : sqrtf(width[g] / (float)gs);
    }
    ac_k_mul_heads(c->kctx, T, G, gs, ac_block_upload(c, scale, (size_t)G), out, dI);
}

/* Backward of width_gated_norm, given out (its output) and dout = dL/dout (scaled in
 * place): dy, dz overwritten, dw += (may be NULL), rstd [G, T] scratch; and, when dmask is
 * given, each head's share of dL/dM_g (M_g = P * the sum of its group's mask):
 * dL/dM_g = sum over rows of a (1 - eps / r^2) / (2 M_g), a = <dout, out> over the group,
 * r^2 = S / M_g + eps = gs / (M_g rstd^2). */
static void width_gated_norm_backward(ac_block_ctx *c, int T, int dI, int G, int P, const float *y, const float *z,
                                      int ldz, const float *w, float eps, const float *width, const float *out,
                                      float *dout, float *dy, float *dz, float *dw, float *rstd, float *dmask)
{
    int gs = dI / G, per = gs / P;
    float scale[AC_MAX_MAMBA_HEADS];
    for (int g = 0; g < G; g++)
        scale[g] = width[g] < AC_MIN_GROUP_WIDTH ? 0.0f : sqrtf(width[g] / (float)gs);
    ac_k_mul_heads(c->kctx, T, G, gs, ac_block_upload(c, scale, (size_t)G), dout, dI);
    for (int g = 0; g < G; g++)
        ac_k_gated_rmsnorm_backward(c->kctx, T, gs, gs, y + (size_t)g * gs, dI, z + (size_t)g * gs, ldz,
                                    w + (size_t)g * gs, scale[g] > 0 ? eps * width[g] / (float)gs : eps,
                                    dout + (size_t)g * gs, dI,
                                    dy + (size_t)g * gs, dI, dz + (size_t)g * gs, ldz, dw ? dw + (size_t)g * gs : NULL,
                                    rstd + (size_t)g * T);
    for (int g = 0; dmask && g < G; g++)
        if (scale[g] != 0.0f) /* an off group has no width gradient */
            ac_k_gated_rmsnorm_width_backward(c->kctx, T, gs, out + (size_t)g * gs, dI, dout + (size_t)g * gs, dI,
                                              rstd + (size_t)g * T, eps, width[g], scale[g], (float)P, per,
                                              dmask + (size_t)g * per);
}

static void mamba2_forward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks, float *out)
{
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total;
    int H = b->mamba_heads, P = b->mamba_head_dim, N = b->ssm_state, G = b->mamba_groups;
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), nproj = ac_mamba_in_proj_dim(b);
    const float *mask = masks ? masks->mamba_heads : NULL;

    mamba2_kept k; /* proj: z | xBC | dt per row; xbc after conv + SiLU: x | B | C; dt */
    int keep = kept_internals(c, b, T, &k);
    float *proj = k.proj, *xbc = k.xbc, *dt = k.dt;
    float *y = keep ? k.y : ac_block_scratch(c, (size_t)T * dI);
    size_t states_at = 0;
    /* training: a fresh state per sequence (planned by ac_runtime_reserve_training) */
    float *conv0 = NULL, *ssm0 = NULL;
    if (!seqs->caches) {
        conv0 = ac_block_scratch(c, conv_state_floats(b));
        ssm0 = ac_block_scratch(c, ssm_state_floats(b));
    }
    float *A = ac_block_scratch(c, (size_t)H);
    ac_k_neg_exp(c->kctx, H, w->A_log, A);

    ac_block_linear(c, T, nproj, D, xn, D, w->in_proj, 0.0f, proj, nproj);
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        float *conv_state = conv0, *ssm_state = ssm0;
        if (seqs->caches) {
            conv_state = seqs->caches[s]->state[layer];
            ssm_state = conv_state + conv_state_floats(b);
        } else {
            ac_block_zero(c->kctx, conv0, conv_state_floats(b));
            ac_block_zero(c->kctx, ssm0, ssm_state_floats(b));
        }
        const float *rows = proj + (size_t)o * nproj;
        ac_k_conv1d_silu(c->kctx, L, conv, b->conv_kernel, rows + dI, nproj, w->conv_w, w->conv_b,
                         conv_state, xbc + (size_t)o * conv, conv);
        ac_k_softplus_dt(c->kctx, L, H, rows + dI + conv, nproj, w->dt_bias, a->time_step_min,
                         dt + (size_t)o * H);
        const float *xs = xbc + (size_t)o * conv;
        if (keep) { /* the zero state0 of training */
            ac_k_ssd_scan_save(c->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H,
                               A, w->D, NULL, k.states + states_at, y + (size_t)o * dI, dI);
            states_at += ac_k_ssd_states_floats(ac_backend_of(c->kctx), L, H, P, N);
        } else {
            ac_k_ssd_scan(c->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H, A,
                          w->D, ssm_state, y + (size_t)o * dI, dI);
        }
    }
    /* the masked y, in place unless y is kept for the backward */
    float *ym = y;
    if (mask) {
        if (keep) {
            ym = ac_block_scratch(c, (size_t)T * dI);
            ac_block_copy(c->kctx, ym, y, (size_t)T * dI);
        }
        ac_k_mul_heads(c->kctx, T, H, P, mask, ym, dI);
    }
    float *normed = keep ? k.normed : ym, width[AC_MAX_MAMBA_HEADS];
    if (group_widths(masks ? ac_block_mask_host(masks->host_mamba_heads, mask) : NULL, H, P, G, width))
        width_gated_norm(c, T, dI, G, ym, proj, nproj, w->gate_norm, a->norm_eps, width, normed);
    else
        ac_k_gated_rmsnorm(c->kctx, T, dI, dI / G, ym, dI, proj, nproj, w->gate_norm, a->norm_eps, normed, dI);
    ac_block_linear(c, T, D, dI, normed, dI, w->out_proj, 0.0f, out, D);
}

static void mamba2_backward(ac_block_ctx *c, int layer, const ac_seqs *seqs, const float *xn, const ac_block_masks *masks,
                        const float *dout, float *dxn, ac_layer_weights *grad, ac_block_mask_grads *mask_grads)
{
    const ac_arch *a = c->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &c->layers[layer];
    int D = a->hidden, T = seqs->total, K = b->conv_kernel;
    int H = b->mamba_heads, P = b->mamba_head_dim, N = b->ssm_state, G = b->mamba_groups;
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), nproj = ac_mamba_in_proj_dim(b);
    size_t hpn = ssm_state_floats(b);
    const float *mask = masks ? masks->mamba_heads : NULL;
    float *dmask = mask && mask_grads ? mask_grads->mamba_heads : NULL;
    int longest = 0;
    for (int s = 0; s < seqs->n; s++)
        longest = seqs->len[s] > longest ? seqs->len[s] : longest;

    mamba2_kept k;
    int kept = kept_internals(c, b, T, &k); /* everything from this pass's forward */
    float *proj = k.proj, *xbc = k.xbc, *dt = k.dt;
    float *states = kept ? k.states : ac_block_scratch(c, (size_t)T * hpn);
    float *y = kept ? k.y : ac_block_scratch(c, (size_t)T * dI);       /* the scan's output */
    float *ym = mask ? ac_block_scratch(c, (size_t)T * dI) : y;        /* masked: the norm's input */
    float *nrm = ac_block_scratch(c, (size_t)T * dI);                  /* norm output (unless kept), then its gradient */
    float *dy = ac_block_scratch(c, (size_t)T * dI);
    float *dproj = ac_block_scratch(c, (size_t)T * nproj);
    float *dxbc = ac_block_scratch(c, (size_t)T * conv);
    float *ddt = ac_block_scratch(c, (size_t)T * H);
    float *rstd = ac_block_scratch(c, (size_t)T * G);
    const ac_backend *be = ac_backend_of(c->kctx);
    float *work = ac_block_scratch(c, ac_k_ssd_backward_work_floats(be, longest, H, P, N));
    float *conv0 = ac_block_scratch(c, conv_state_floats(b));
    /* Gradients that sum over sequences go to zeroed buffers first and into grad once,
     * so a gradient arena holds the same sums whatever it held before (twice = 2x). */
    float *dconv_w = NULL, *dconv_b = NULL;
    float *A = ac_block_scratch(c, (size_t)H), *dA = ac_block_scratch(c, (size_t)H), *dD = ac_block_scratch(c, (size_t)H);
    ac_k_neg_exp(c->kctx, H, w->A_log, A);
    ac_block_zero(c->kctx, dA, (size_t)H);
    ac_block_zero(c->kctx, dD, (size_t)H);
    if (grad) {
        dconv_w = ac_block_scratch(c, (size_t)conv * (K + 1));
        ac_block_zero(c->kctx, dconv_w, (size_t)conv * (K + 1));
        dconv_b = w->conv_b ? dconv_w + (size_t)conv * K : NULL;
    }

    size_t states_at = 0; /* the scan's states sequence after sequence, as the forward keeps them */
    /* recompute the forward when it kept nothing, keeping the scan's states */
    if (!kept)
        ac_k_linear(c->kctx, T, nproj, D, xn, D, w->in_proj, 0.0f, proj, nproj);
    for (int s = 0; !kept && s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        const float *rows = proj + (size_t)o * nproj;
        ac_block_zero(c->kctx, conv0, conv_state_floats(b));
        ac_k_conv1d_silu(c->kctx, L, conv, K, rows + dI, nproj, w->conv_w, w->conv_b, conv0, xbc + (size_t)o * conv,
                         conv);
        ac_k_softplus_dt(c->kctx, L, H, rows + dI + conv, nproj, w->dt_bias, a->time_step_min, dt + (size_t)o * H);
        const float *xs = xbc + (size_t)o * conv;
        ac_k_ssd_scan_save(c->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H,
                           A, w->D, NULL, states + states_at, y + (size_t)o * dI, dI);
        states_at += ac_k_ssd_states_floats(be, L, H, P, N);
    }
    if (mask) {
        ac_block_copy(c->kctx, ym, y, (size_t)T * dI);
        ac_k_mul_heads(c->kctx, T, H, P, mask, ym, dI);
    }
    float width[AC_MAX_MAMBA_HEADS];
    int widened = group_widths(masks ? ac_block_mask_host(masks->host_mamba_heads, mask) : NULL, H, P, G, width);
    /* the norm's output: kept, or made in nrm and (for the width's gradient, after nrm
     * turns into its gradient) copied */
    const float *normed = kept ? k.normed : nrm, *out_kept = NULL;
    if (!kept && widened)
        width_gated_norm(c, T, dI, G, ym, proj, nproj, w->gate_norm, a->norm_eps, width, nrm);
    else if (!kept)
        ac_k_gated_rmsnorm(c->kctx, T, dI, dI / G, ym, dI, proj, nproj, w->gate_norm, a->norm_eps, nrm, dI);
    if (widened && dmask && kept) {
        out_kept = k.normed;
    } else if (widened && dmask) {
        float *copy = ac_block_scratch(c, (size_t)T * dI);
        ac_block_copy(c->kctx, copy, nrm, (size_t)T * dI);
        out_kept = copy;
    }

    /* out_proj: the weight gradient reads the norm output; its gradient goes to nrm */
    if (grad)
        ac_k_linear_backward(c->kctx, T, D, dI, normed, dI, NULL, dout, D, 0.0f, NULL, dI, grad->out_proj);
    ac_k_linear_backward(c->kctx, T, D, dI, NULL, dI, w->out_proj, dout, D, 0.0f, nrm, dI, NULL);
    /* gated norm: dL/d(masked y) to dy, dL/dz straight into dproj's z columns */
    if (widened)
        width_gated_norm_backward(c, T, dI, G, P, ym, proj, nproj, w->gate_norm, a->norm_eps, width, out_kept, nrm, dy,
                                  dproj, grad ? grad->gate_norm : NULL, rstd, dmask);
    else
        ac_k_gated_rmsnorm_backward(c->kctx, T, dI, dI / G, ym, dI, proj, nproj, w->gate_norm, a->norm_eps, nrm,
                                    dI, dy, dI, dproj, nproj, grad ? grad->gate_norm : NULL, rstd);
    if (mask)
        ac_k_mul_heads_backward(c->kctx, T, H, P, mask, y, dI, dy, dI, dmask);
    /* scan, then conv + SiLU, per sequence; softplus is per token */
    states_at = 0;
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        const float *xs = xbc + (size_t)o * conv;
        float *dxs = dxbc + (size_t)o * conv;
        ac_k_ssd_scan_backward(c->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv, dt + (size_t)o * H,
                               A, w->D, NULL, states + states_at, dy + (size_t)o * dI, dI, dxs, conv, dxs + dI,
                               dxs + dI + G * N, conv, ddt + (size_t)o * H, grad ? dA : NULL, grad ? dD : NULL,
                               work);
        states_at += ac_k_ssd_states_floats(be, L, H, P, N);
        ac_k_conv1d_silu_backward(c->kctx, L, conv, K, proj + (size_t)o * nproj + dI, nproj, w->conv_w, w->conv_b,
                                  NULL, dxs, conv, dproj + (size_t)o * nproj + dI, nproj, dconv_w, dconv_b);
    }
    ac_k_softplus_dt_backward(c->kctx, T, H, proj + dI + conv, nproj, w->dt_bias, a->time_step_min, ddt,
                              dproj + dI + conv, nproj, grad ? grad->dt_bias : NULL);
    if (grad) {
        ac_k_mul_columns(c->kctx, 1, H, A, dA, H); /* A = -exp(A_log): dA_log = dA * A */
        ac_k_add(c->kctx, (size_t)H, dA, grad->A_log);
        ac_k_add(c->kctx, (size_t)H, dD, grad->D);
        ac_k_add(c->kctx, (size_t)conv * K, dconv_w, grad->conv_w);
        if (dconv_b)
            ac_k_add(c->kctx, (size_t)conv, dconv_b, grad->conv_b);
    }
    ac_k_linear_backward(c->kctx, T, nproj, D, xn, D, w->in_proj, dproj, nproj, 0.0f, dxn, D,
                         grad ? grad->in_proj : NULL);
}

/* ---- the kind's entry in the block table ---- */

static ac_status mamba2_validate(int i, const ac_block_dims *b)
{
    if (b->mamba_heads <= 0)
        return ac_layer_fail(i, b, "mamba_heads must be positive, got %d", b->mamba_heads);
    if (b->mamba_heads > AC_MAX_MAMBA_HEADS)
        return ac_layer_fail(i, b, "mamba_heads %d exceeds the engine's limit of %d", b->mamba_heads,
                             AC_MAX_MAMBA_HEADS);
    if (b->mamba_head_dim <= 0)
        return ac_layer_fail(i, b, "mamba_head_dim must be positive, got %d", b->mamba_head_dim);
    if (b->mamba_groups <= 0)
        return ac_layer_fail(i, b, "mamba_groups must be positive, got %d", b->mamba_groups);
    if (b->ssm_state <= 0)
        return ac_layer_fail(i, b, "ssm_state must be positive, got %d", b->ssm_state);
    if (b->conv_kernel <= 0)
        return ac_layer_fail(i, b, "conv_kernel must be positive, got %d", b->conv_kernel);
    if (b->conv_kernel > AC_K_MAX_CONV_TAPS)
        return ac_layer_fail(i, b, "conv_kernel %d exceeds the engine's limit of %d", b->conv_kernel,
                             AC_K_MAX_CONV_TAPS);
    if (b->mamba_heads % b->mamba_groups)
        return ac_layer_fail(i, b, "mamba_heads %d is not a multiple of mamba_groups %d", b->mamba_heads,
                             b->mamba_groups);
    int64_t d_inner = (int64_t)b->mamba_heads * b->mamba_head_dim;
    int64_t in_proj = 2 * d_inner + 2 * (int64_t)b->mamba_groups * b->ssm_state + b->mamba_heads;
    if (in_proj <= 0 || in_proj > INT_MAX)
        return ac_layer_fail(i, b, "in_proj rows (2 d_inner + 2 groups state + heads = %" PRId64 ") overflow",
                             in_proj);
    return AC_OK;
}

static int mamba2_same_dims(const ac_block_dims *a, const ac_block_dims *b)
{
    return a->mamba_heads == b->mamba_heads && a->mamba_head_dim == b->mamba_head_dim &&
           a->mamba_groups == b->mamba_groups && a->ssm_state == b->ssm_state && a->conv_kernel == b->conv_kernel;
}

static int64_t mamba2_params(const ac_arch *arch, const ac_block_dims *b, int active)
{
    (void)active;
    int64_t D = arch->hidden, dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), H = b->mamba_heads;
    return (int64_t)ac_mamba_in_proj_dim(b) * D + conv * b->conv_kernel + (arch->use_conv_bias ? conv : 0) + 3 * H +
           dI + D * dI;
}

static void mamba2_print(const ac_block_dims *b, FILE *out)
{
    fprintf(out, "heads %d x %d (d_inner %d), groups %d, state %d, conv %d, in_proj %d", b->mamba_heads,
            b->mamba_head_dim, ac_mamba_d_inner(b), b->mamba_groups, b->ssm_state, b->conv_kernel,
            ac_mamba_in_proj_dim(b));
}

static void mamba2_tag(const ac_block_dims *b, char *buf, size_t size) { snprintf(buf, size, "M%d", b->mamba_heads); }

static void mamba2_layout(ac_layout *l, int i, const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w)
{
    int D = arch->hidden, dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), H = b->mamba_heads;
    ac_layout_product(l, &w->in_proj, 2, AC_SHAPE(ac_mamba_in_proj_dim(b), D), "layers.%d.mixer.in_proj.weight", i);
    ac_layout_param(l, &w->conv_w, 3, AC_SHAPE(conv, 1, b->conv_kernel), "layers.%d.mixer.conv1d.weight", i);
    if (arch->use_conv_bias)
        ac_layout_param(l, &w->conv_b, 1, AC_SHAPE(conv), "layers.%d.mixer.conv1d.bias", i);
    ac_layout_param(l, &w->dt_bias, 1, AC_SHAPE(H), "layers.%d.mixer.dt_bias", i);
    ac_layout_param(l, &w->A_log, 1, AC_SHAPE(H), "layers.%d.mixer.A_log", i);
    ac_layout_param(l, &w->D, 1, AC_SHAPE(H), "layers.%d.mixer.D", i);
    ac_layout_param(l, &w->gate_norm, 1, AC_SHAPE(dI), "layers.%d.mixer.norm.weight", i);
    ac_layout_product(l, &w->out_proj, 2, AC_SHAPE(D, dI), "layers.%d.mixer.out_proj.weight", i);
}

/* One head's weights, parent head ph into child head ch: its z, x and dt rows of
 * in_proj, its conv channels, dt_bias, A_log, D, its gated-norm weights and its
 * out_proj columns (of the hidden rows both have). */
static void copy_head(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw, const ac_arch *parent,
                      const ac_block_dims *pb, const ac_layer_weights *pw, int ch, int ph)
{
    int P = cb->mamba_head_dim, N = cb->ssm_state, K = cb->conv_kernel;
    int Dc = child->hidden, Dp = parent->hidden, D = Dc < Dp ? Dc : Dp;
    int dIc = cb->mamba_heads * P, dIp = pb->mamba_heads * P;
    int Gc = cb->mamba_groups, Gp = pb->mamba_groups;
    ac_copy_rows(cw->in_proj, Dc, ch * P, pw->in_proj, Dp, ph * P, P);
    ac_copy_rows(cw->in_proj, Dc, dIc + ch * P, pw->in_proj, Dp, dIp + ph * P, P);
    ac_copy_rows(cw->in_proj, Dc, 2 * dIc + 2 * Gc * N + ch, pw->in_proj, Dp, 2 * dIp + 2 * Gp * N + ph, 1);
    ac_copy_rows(cw->conv_w, K, ch * P, pw->conv_w, K, ph * P, P);
    if (cw->conv_b && pw->conv_b)
        ac_copy_rows(cw->conv_b, 1, ch * P, pw->conv_b, 1, ph * P, P);
    const float *pv[3] = {pw->dt_bias, pw->A_log, pw->D};
    float *cv[3] = {cw->dt_bias, cw->A_log, cw->D};
    for (int i = 0; i < 3; i++)
        if (cv[i] && pv[i])
            cv[i][ch] = pv[i][ph];
    if (cw->gate_norm && pw->gate_norm)
        memcpy(cw->gate_norm + (size_t)ch * P, pw->gate_norm + (size_t)ph * P, (size_t)P * sizeof(float));
    for (int d = 0; d < D; d++)
        memcpy(cw->out_proj + (size_t)d * dIc + (size_t)ch * P, pw->out_proj + (size_t)d * dIp + (size_t)ph * P,
               (size_t)P * sizeof(float));
}

/* Leading heads and groups, taken within groups: child group g keeps the leading heads
 * of parent group g (the reorder ranks heads within their group, and the search's masks
 * keep prefixes per group), with that group's B and C. A parent of other head shapes
 * lines up with nothing and is left alone. */
static void mamba2_slice(const ac_arch *child, const ac_block_dims *cb, ac_layer_weights *cw, const ac_arch *parent,
                         const ac_block_dims *pb, const ac_layer_weights *pw)
{
    int P = cb->mamba_head_dim, N = cb->ssm_state, K = cb->conv_kernel;
    if (pb->kind != AC_BLOCK_MAMBA || pb->mamba_head_dim != P || pb->ssm_state != N || pb->conv_kernel != K)
        return;
    int Dc = child->hidden, Dp = parent->hidden;
    int Hc = cb->mamba_heads, Hp = pb->mamba_heads, Gc = cb->mamba_groups, Gp = pb->mamba_groups;
    int dIc = Hc * P, dIp = Hp * P, g = Gc < Gp ? Gc : Gp;
    int hc = Hc / Gc, hp = Hp / Gp, h = hc < hp ? hc : hp;
    for (int grp = 0; grp < g; grp++)
        for (int j = 0; j < h; j++)
            copy_head(child, cb, cw, parent, pb, pw, grp * hc + j, grp * hp + j);
    /* B and C rows of in_proj, then their conv channels */
    ac_copy_rows(cw->in_proj, Dc, 2 * dIc, pw->in_proj, Dp, 2 * dIp, g * N);
    ac_copy_rows(cw->in_proj, Dc, 2 * dIc + Gc * N, pw->in_proj, Dp, 2 * dIp + Gp * N, g * N);
    ac_copy_rows(cw->conv_w, K, dIc, pw->conv_w, K, dIp, g * N);
    ac_copy_rows(cw->conv_w, K, dIc + Gc * N, pw->conv_w, K, dIp + Gp * N, g * N);
    if (cw->conv_b && pw->conv_b) {
        ac_copy_rows(cw->conv_b, 1, dIc, pw->conv_b, 1, dIp, g * N);
        ac_copy_rows(cw->conv_b, 1, dIc + Gc * N, pw->conv_b, 1, dIp + Gp * N, g * N);
    }
}

/* ---- the search ---- */

static int mamba2_axis_length(const ac_block_dims *b, ac_layer_axis axis)
{
    return axis == AC_LAYER_MAMBA_HEADS ? b->mamba_heads : 0;
}

static int mamba2_axis_run(const ac_block_dims *b, ac_layer_axis axis)
{
    return axis == AC_LAYER_MAMBA_HEADS ? b->mamba_heads / b->mamba_groups : 0;
}

/* Heads are kept as a prefix of each group. */
static int mamba2_cost_axis(const ac_block_dims *b, ac_axis_kind kind, int *groups)
{
    *groups = b->mamba_groups > 0 ? b->mamba_groups : 1;
    return kind == AC_AXIS_MAMBA_HEADS ? AC_LAYER_MAMBA_HEADS : -1;
}

static size_t mamba2_importance_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)ac_mamba_d_inner(b);
}

static size_t mamba2_importance_doubles(const ac_block_dims *b) { return (size_t)ac_mamba_d_inner(b); }

/* The channel scores of the x slice of in_proj (xn @ in_proj[dI:2dI]^T, before the conv). */
static void mamba2_importance_add(const ac_importance_chunk *ch, const ac_arch *arch, const ac_block_dims *b,
                                  const ac_layer_weights *w, double *acc)
{
    int D = arch->hidden, dI = ac_mamba_d_inner(b);
    ac_k_linear(ch->kctx, ch->T, dI, D, ch->xn, D, w->in_proj + (size_t)dI * D, 0.0f, ch->scratch, dI);
    ac_importance_add_means(ch, ch->scratch, dI, dI, acc);
}

/* A head's score: the L2 norm of its channels' scores. */
static void mamba2_importance_finish(const ac_block_dims *b, const double *acc, float *const *scores)
{
    int P = b->mamba_head_dim;
    for (int h = 0; h < b->mamba_heads; h++) {
        double sum = 0.0;
        for (int p = 0; p < P; p++)
            sum += acc[h * P + p];
        scores[AC_LAYER_MAMBA_HEADS][h] = (float)sqrt(sum);
    }
}

static void mamba2_permute_hidden(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w,
                                  const int *perm, float *tmp)
{
    int D = arch->hidden;
    ac_permute_cols(w->in_proj, (size_t)ac_mamba_in_proj_dim(b), D, perm, tmp);
    ac_permute_blocks(w->out_proj, D, (size_t)ac_mamba_d_inner(b), perm, tmp);
}

/* Heads (within their groups, as axis_run sorts them): their z and x rows and dt row of
 * in_proj, their x conv channels, dt_bias, A_log, D, their gated-norm weights (the norm's
 * groups are dI/G channels, so a head stays in its group's norm) and their out_proj
 * columns. B and C do not move. */
static void mamba2_permute_axis(const ac_arch *arch, const ac_block_dims *b, ac_layer_weights *w,
                                ac_layer_axis axis, const int *p, float *tmp)
{
    if (axis != AC_LAYER_MAMBA_HEADS)
        return;
    int D = arch->hidden, H = b->mamba_heads, P = b->mamba_head_dim, K = b->conv_kernel;
    int dI = ac_mamba_d_inner(b), GN = b->mamba_groups * b->ssm_state;
    size_t PD = (size_t)P * D;
    ac_permute_blocks(w->in_proj, H, PD, p, tmp);                                        /* z */
    ac_permute_blocks(w->in_proj + (size_t)dI * D, H, PD, p, tmp);                       /* x */
    ac_permute_blocks(w->in_proj + (size_t)(2 * dI + 2 * GN) * D, H, (size_t)D, p, tmp); /* dt */
    ac_permute_blocks(w->conv_w, H, (size_t)P * K, p, tmp); /* the x channels lead the conv */
    if (w->conv_b)
        ac_permute_blocks(w->conv_b, H, (size_t)P, p, tmp);
    ac_permute_blocks(w->dt_bias, H, 1, p, tmp);
    ac_permute_blocks(w->A_log, H, 1, p, tmp);
    ac_permute_blocks(w->D, H, 1, p, tmp);
    ac_permute_blocks(w->gate_norm, H, (size_t)P, p, tmp);
    ac_permute_in_rows(w->out_proj, (size_t)D, (size_t)dI, 0, H, (size_t)P, p, tmp);
}

static ac_status mamba2_check_cut(int i, int p, const ac_block_dims *c, const ac_block_dims *pb)
{
    ac_status st = ac_check_same_kind(i, p, c, pb);
    if (st != AC_OK)
        return st;
    const ac_dim_pair fixed[] = {{"mamba_head_dim", c->mamba_head_dim, pb->mamba_head_dim},
                                 {"mamba_groups", c->mamba_groups, pb->mamba_groups},
                                 {"ssm_state", c->ssm_state, pb->ssm_state},
                                 {"conv_kernel", c->conv_kernel, pb->conv_kernel}};
    st = ac_check_dims(i, p, fixed, 4, 1);
    if (st != AC_OK)
        return st;
    return ac_check_dims(i, p, &(ac_dim_pair){"mamba_heads", c->mamba_heads, pb->mamba_heads}, 1, 0);
}

static void mamba2_row_key(const ac_block_dims *b, ac_cost_row *key) { key->heads = b->mamba_heads; }

const ac_block_ops ac_mamba2_ops = {
    .kind = AC_BLOCK_MAMBA,
    .name = "mamba",
    .letter = 'M',
    .validate = mamba2_validate,
    .same_dims = mamba2_same_dims,
    .params = mamba2_params,
    .print = mamba2_print,
    .tag = mamba2_tag,
    .layout = mamba2_layout,
    .slice = mamba2_slice,
    .scratch_per_token = mamba2_scratch_per_token,
    .backward_scratch_per_token = mamba2_backward_scratch_per_token,
    .saved_per_token = mamba2_saved_per_token,
    .saved_per_sequence = mamba2_saved_per_sequence,
    .state_floats = mamba2_state_floats,
    .kv_heads = ac_block_no_kv,
    .kv_head_dim = ac_block_no_kv,
    .forward = mamba2_forward,
    .backward = mamba2_backward,
    .axis_length = mamba2_axis_length,
    .axis_run = mamba2_axis_run,
    .cost_axis = mamba2_cost_axis,
    .importance_per_token = mamba2_importance_per_token,
    .importance_doubles = mamba2_importance_doubles,
    .importance_add = mamba2_importance_add,
    .importance_finish = mamba2_importance_finish,
    .permute_hidden = mamba2_permute_hidden,
    .permute_axis = mamba2_permute_axis,
    .check_cut = mamba2_check_cut,
    .row_key = mamba2_row_key,
};
