/* The memory formula W + C + P + R (autocompress/cost.h), term by term, from an
 * architecture and a workload, with the block scratch the runtime plans. */
#include "cost/cost_internal.h"
#include "runtime/runtime_internal.h"

/* Floats per token of the block's forward temporaries (the runtime's plan). */
double ac_block_scratch_floats(const ac_arch *arch, const ac_block_dims *b)
{
    switch (b->kind) {
    case AC_BLOCK_MAMBA: return (double)ac_mamba2_scratch_per_token(arch, b);
    case AC_BLOCK_ATTENTION: return (double)ac_attention_scratch_per_token(arch, b);
    case AC_BLOCK_MLP: return (double)ac_mlp_scratch_per_token(arch, b);
    case AC_BLOCK_MOE: return (double)ac_moe_scratch_per_token(arch, b);
    }
    return 0;
}

/* K and V rows the request writes: the context, the input and every decoded token fed. */
double ac_block_kv_bytes(const ac_block_dims *b, const ac_contract_workload *w)
{
    if (b->kind != AC_BLOCK_ATTENTION)
        return 0;
    double rows = (double)(w->cached_tokens + w->input_tokens) + ac_workload_decode_steps(w);
    return (double)w->batch * 2.0 * b->attn_kv_heads * b->attn_head_dim * rows * sizeof(float);
}

double ac_block_state_bytes(const ac_block_dims *b, const ac_contract_workload *w)
{
    if (b->kind != AC_BLOCK_MAMBA)
        return 0;
    double conv = (double)ac_mamba_conv_dim(b) * (b->conv_kernel - 1);
    double ssm = (double)b->mamba_heads * b->mamba_head_dim * b->ssm_state;
    return (double)w->batch * (conv + ssm) * sizeof(float);
}

/* R given the widest block's scratch per token: residual stream, normed input and block
 * output, the scratch, the attention workspace (one row per thread over the longest
 * sequence) and the logits of the batch. The widest call is the prefill (the context
 * is built in chunks no longer than the input). */
double ac_fixed_activation_bytes(const ac_arch *arch, const ac_contract_workload *w, int threads, double scratch_floats)
{
    double T = (double)w->batch * (double)w->input_tokens, D = arch->hidden;
    double longest = (double)(w->cached_tokens + w->input_tokens) + ac_workload_decode_steps(w);
    return (3.0 * T * D + T * scratch_floats + 1.0) * sizeof(float) + (double)threads * longest * sizeof(float) +
           (double)w->batch * arch->vocab * sizeof(float);
}

ac_memory_terms ac_memory_formula(const ac_arch *arch, const ac_contract_workload *w, int threads)
{
    ac_memory_terms m = {0, 0, 0, 0};
    m.weights = (double)ac_arch_param_counts(arch).total * sizeof(float);
    double spt = 0;
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        m.kv += ac_block_kv_bytes(b, w);
        m.state += ac_block_state_bytes(b, w);
        double s = ac_block_scratch_floats(arch, b);
        spt = s > spt ? s : spt;
    }
    m.activations = ac_fixed_activation_bytes(arch, w, threads, spt);
    return m;
}
