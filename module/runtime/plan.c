/* The runtime's memory plan (runtime/plan.h), from the block table's sizes. */
#include "runtime/plan.h"

#include "kernels/kernels.h"
#include "blocks/block.h"

size_t ac_plan_scratch_per_token(const ac_arch *arch)
{
    size_t widest = 0;
    for (int i = 0; i < arch->n_layers; i++) {
        size_t need = ac_block(&arch->layers[i])->scratch_per_token(arch, &arch->layers[i]);
        widest = need > widest ? need : widest;
    }
    return widest;
}

size_t ac_plan_host_per_token(const ac_arch *arch)
{
    size_t most = 0;
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_ops *k = ac_block(&arch->layers[i]);
        size_t need = k->host_per_token ? k->host_per_token(&arch->layers[i]) : 0;
        most = need > most ? need : most;
    }
    return most;
}

size_t ac_plan_backward_scratch_per_token(const ac_arch *arch)
{
    size_t widest = ac_plan_scratch_per_token(arch);
    for (int i = 0; i < arch->n_layers; i++) {
        size_t need = ac_block(&arch->layers[i])->backward_scratch_per_token(arch, &arch->layers[i]);
        widest = need > widest ? need : widest;
    }
    return widest;
}

size_t ac_plan_block_state_floats(const ac_block_dims *b) { return ac_block(b)->state_floats(b); }

size_t ac_plan_block_kv_floats_per_token(const ac_block_dims *b)
{
    const ac_block_ops *ops = ac_block(b);
    return 2 * (size_t)ops->kv_heads(b) * (size_t)ops->kv_head_dim(b);
}

size_t ac_plan_state_floats(const ac_arch *arch)
{
    size_t n = 0;
    for (int i = 0; i < arch->n_layers; i++)
        n += ac_plan_block_state_floats(&arch->layers[i]);
    return n;
}

ac_activation_plan ac_plan_activations(const ac_arch *arch, size_t scratch_per_token, int tokens, size_t workspace)
{
    size_t T = (size_t)tokens, D = (size_t)arch->hidden;
    ac_activation_plan p;
    p.stream = T * D * sizeof(float);
    p.scratch = (T * scratch_per_token + 1) * sizeof(float);
    p.workspace = workspace;
    p.staging = T * 3 * sizeof(int32_t);
    return p;
}

size_t ac_plan_serving_workspace(int threads, int queries, int keys, int longest)
{
    /* the CPU kernel's, which the plan knows no backend to replace (CUDA reserves the same) */
    size_t prompt = ac_cpu_backend.attention_workspace(threads, queries, keys);
    size_t step = ac_cpu_backend.attention_workspace(threads, 1, longest);
    return prompt > step ? prompt : step;
}

size_t ac_activation_plan_bytes(const ac_activation_plan *plan)
{
    return 3 * plan->stream + plan->scratch + plan->workspace + plan->staging;
}
