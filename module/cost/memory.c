/* The memory formula W + C + P + R (autocompress/cost.h), term by term, from an
 * architecture and a workload, with the sizes the runtime plans (runtime/plan.h). */
#include "cost/cost_internal.h"
#include "runtime/plan.h"

/* Floats per token of the block's forward temporaries (the runtime's plan). */
double ac_block_scratch_floats(const ac_arch *arch, const ac_block_dims *b)
{
    ac_arch one = *arch;
    one.n_layers = 1;
    one.layers = (ac_block_dims *)b;
    return (double)ac_plan_scratch_per_token(&one);
}

/* K and V rows the request writes: the context, the input and every decoded token fed. */
double ac_block_kv_bytes(const ac_block_dims *b, const ac_contract_workload *w)
{
    double rows = (double)(w->cached_tokens + w->input_tokens) + ac_workload_decode_steps(w);
    return (double)w->batch * (double)ac_plan_block_kv_floats_per_token(b) * rows * sizeof(float);
}

double ac_block_state_bytes(const ac_block_dims *b, const ac_contract_workload *w)
{
    return (double)w->batch * (double)ac_plan_block_state_floats(b) * sizeof(float);
}

/* R given the widest block's scratch per token: the runtime's buffers for the widest
 * call, the prefill of the batch (the context is built in chunks no longer than the
 * input), with the attention workspace of the prefill or of the longest decode step,
 * and the logits of the batch. */
double ac_fixed_activation_bytes(const ac_arch *arch, const ac_contract_workload *w, int threads, double scratch_floats)
{
    int T = (int)(w->batch * w->input_tokens);
    int prompt_keys = (int)(w->cached_tokens + w->input_tokens);
    int longest = prompt_keys + ac_workload_decode_steps(w);
    size_t workspace = ac_plan_serving_workspace(threads, (int)w->input_tokens, prompt_keys, longest);
    ac_activation_plan plan = ac_plan_activations(arch, 0, T, workspace);
    return (double)ac_activation_plan_bytes(&plan) + (double)T * scratch_floats * sizeof(float) +
           (double)w->batch * arch->vocab * sizeof(float);
}

ac_memory_terms ac_memory_formula(const ac_arch *arch, ac_dtype weights, const ac_contract_workload *w, int threads)
{
    ac_memory_terms m = {0, 0, 0, 0};
    m.weights = (double)ac_arch_weight_bytes(arch, weights);
    for (int i = 0; i < arch->n_layers; i++) {
        m.kv += ac_block_kv_bytes(&arch->layers[i], w);
        m.state += ac_block_state_bytes(&arch->layers[i], w);
    }
    m.activations = ac_fixed_activation_bytes(arch, w, threads, (double)ac_plan_scratch_per_token(arch));
    return m;
}
