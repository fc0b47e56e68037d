/* Mamba2 mixer: in_proj -> [z | xBC | dt]; causal conv + SiLU over xBC; selective scan
 * with grouped B/C; gated grouped RMSNorm with z; out_proj. */
#include "runtime/runtime_internal.h"

#include <math.h>

size_t ac_mamba2_scratch_per_token(const ac_arch *arch, const ac_block_dims *b)
{
    (void)arch;
    return (size_t)ac_mamba_in_proj_dim(b) + (size_t)ac_mamba_conv_dim(b) + (size_t)b->mamba_heads +
           (size_t)ac_mamba_d_inner(b);
}

void ac_mamba2_forward(ac_runtime *rt, int layer, const ac_seqs *seqs, const float *xn, float *out)
{
    const ac_arch *a = &rt->model->arch;
    const ac_block_dims *b = &a->layers[layer];
    const ac_layer_weights *w = &rt->model->layers[layer];
    int D = a->hidden, T = seqs->total;
    int H = b->mamba_heads, P = b->mamba_head_dim, N = b->ssm_state, G = b->mamba_groups;
    int dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), nproj = ac_mamba_in_proj_dim(b);

    float *proj = ac_scratch(rt, (size_t)T * nproj); /* z | xBC | dt per row */
    float *xbc = ac_scratch(rt, (size_t)T * conv);   /* after conv + SiLU: x | B | C */
    float *dt = ac_scratch(rt, (size_t)T * H);
    float *y = ac_scratch(rt, (size_t)T * dI);
    float A[AC_MAX_MAMBA_HEADS];
    for (int h = 0; h < H; h++)
        A[h] = -expf(w->A_log[h]);

    ac_k_linear(&rt->kctx, T, nproj, D, xn, D, w->in_proj, 0.0f, proj, nproj);
    for (int s = 0; s < seqs->n; s++) {
        int o = seqs->offset[s], L = seqs->len[s];
        ac_cache_layers *c = &seqs->caches[s]->l;
        const float *rows = proj + (size_t)o * nproj;
        ac_k_conv1d_silu(&rt->kctx, L, conv, b->conv_kernel, rows + dI, nproj, w->conv_w, w->conv_b,
                         c->conv[layer], xbc + (size_t)o * conv, conv);
        ac_k_softplus_dt(&rt->kctx, L, H, rows + dI + conv, nproj, w->dt_bias, a->time_step_min,
                         dt + (size_t)o * H);
        const float *xs = xbc + (size_t)o * conv;
        ac_k_ssd_scan(&rt->kctx, L, H, P, N, G, xs, conv, xs + dI, xs + dI + G * N, conv,
                      dt + (size_t)o * H, A, w->D, c->ssm[layer], y + (size_t)o * dI, dI);
    }
    ac_k_gated_rmsnorm(&rt->kctx, T, dI, dI / G, y, dI, proj, nproj, w->gate_norm, a->norm_eps, y, dI);
    ac_k_linear(&rt->kctx, T, D, dI, y, dI, w->out_proj, 0.0f, out, D);
}
