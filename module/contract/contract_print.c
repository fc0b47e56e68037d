/* A human-readable listing of every field of a contract. */
#include "autocompress/contract.h"

#include <inttypes.h>

const char *ac_device_kind_name(ac_device_kind kind)
{
    switch (kind) {
    case AC_DEVICE_CPU: return "cpu";
    case AC_DEVICE_CUDA: return "cuda";
    }
    return "unknown";
}

const char *ac_search_scope_name(ac_search_scope scope)
{
    switch (scope) {
    case AC_SCOPE_GLOBAL: return "global";
    case AC_SCOPE_PER_LAYER: return "per_layer";
    }
    return "unknown";
}

static void print_candidates(FILE *out, const char *label, const ac_candidates *c)
{
    fprintf(out, "    %-17s", label);
    for (int i = 0; i < c->count; i++)
        fprintf(out, "%s%d", i ? ", " : "", c->values[i]);
    fprintf(out, "  (%d candidate%s)\n", c->count, c->count == 1 ? "" : "s");
}

static void print_cost(FILE *out, const char *label, bool has, const char *relation, double v)
{
    if (has)
        fprintf(out, "    %-17s%s%g\n", label, relation, v);
    else
        fprintf(out, "    %-17s-\n", label);
}

static void print_costs(FILE *out, const ac_contract_costs *c)
{
    print_cost(out, "latency_ms", c->has_latency, "", c->latency_ms);
    print_cost(out, "throughput_tok_s", c->has_throughput, "", c->throughput_tok_s);
    print_cost(out, "memory_gib", c->has_memory, "", c->memory_gib);
}

/* A target given absolutely prints as "latency_ms <= 750", relatively as
 * "latency_ratio <= 0.65 x the parent's latency_ms"; neither as "latency_ms -". */
static void print_target(FILE *out, const char *key, const char *ratio_key, const char *relation,
                         bool has, double v, bool has_ratio, double ratio)
{
    if (has_ratio)
        fprintf(out, "    %-17s%s%g x the parent's %s\n", ratio_key, relation, ratio, key);
    else
        print_cost(out, key, has, relation, v);
}

/* With no memory target of its own, hardware.memory_gib bounds the memory
 * (ac_contract_resolve_targets). */
static void print_targets(FILE *out, const ac_contract *c)
{
    const ac_contract_costs *t = &c->targets;
    const ac_contract_ratios *r = &c->ratios;
    print_target(out, "latency_ms", "latency_ratio", "<= ", t->has_latency, t->latency_ms,
                 r->has_latency, r->latency);
    print_target(out, "throughput_tok_s", "throughput_ratio", ">= ", t->has_throughput,
                 t->throughput_tok_s, r->has_throughput, r->throughput);
    if (c->hardware.has_memory && !t->has_memory && !r->has_memory)
        fprintf(out, "    %-17s<= %g (hardware.memory_gib: one device's memory)\n", "memory_gib",
                c->hardware.memory_gib);
    else
        print_target(out, "memory_gib", "memory_ratio", "<= ", t->has_memory, t->memory_gib,
                     r->has_memory, r->memory);
}

static void print_margin(FILE *out, double margin)
{
    fprintf(out, "    %-17s%g (the search plans %g%% inside every target)\n", "margin", margin, 100.0 * margin);
}

static void print_tokens(FILE *out, const char *label, bool has, int64_t v)
{
    if (!has) {
        fprintf(out, "    %-17s-\n", label);
        return;
    }
    static const struct { double scale; const char *suffix; } units[] = {
        {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if ((double)v >= units[i].scale) {
            fprintf(out, "    %-17s%" PRId64 " (%.3g%s)\n", label, v, (double)v / units[i].scale,
                    units[i].suffix);
            return;
        }
    fprintf(out, "    %-17s%" PRId64 "\n", label, v);
}

void ac_contract_print(const ac_contract *c, FILE *out)
{
    const ac_contract_hardware *hw = &c->hardware;
    const ac_contract_workload *w = &c->workload;
    const ac_contract_search_space *s = &c->search;
    const ac_contract_removable *rm = &s->removable;

    fprintf(out, "contract %s", c->name);
    if (c->source[0])
        fprintf(out, " (%s)", c->source);
    fprintf(out, "\n  hardware:\n");
    fprintf(out, "    %-17s%s (%s, index %d)\n", "device", hw->device,
            ac_device_kind_name(hw->kind), hw->index);
    fprintf(out, "    %-17s%s\n", "name", hw->name[0] ? hw->name : "-");
    fprintf(out, "    %-17s%s\n", "weights", ac_weights_dtype_name(hw->weights));
    if (hw->threads)
        fprintf(out, "    %-17s%d\n", "threads", hw->threads);
    else
        fprintf(out, "    %-17s0 (all cores)\n", "threads");
    print_cost(out, "memory_gib", hw->has_memory, "", hw->memory_gib);
    fprintf(out, "    %-17s%d\n", "count", hw->count);
    fprintf(out, "    %-17s%d\n", "tensor_parallel", hw->tensor_parallel);
    if (hw->data_parallel > 1)
        fprintf(out, "    %-17s%d (replicas, one a device; each serves the workload and meets the targets, "
                "measured as one)\n", "data_parallel", hw->data_parallel);
    else
        fprintf(out, "    %-17s%d\n", "data_parallel", hw->data_parallel);

    fprintf(out, "  workload:\n");
    fprintf(out, "    %-17s%d\n", "batch", w->batch);
    fprintf(out, "    %-17s%" PRId64 "\n", "cached_tokens", w->cached_tokens);
    fprintf(out, "    %-17s%" PRId64 "\n", "input_tokens", w->input_tokens);
    fprintf(out, "    %-17s%" PRId64 "\n", "output_tokens", w->output_tokens);

    fprintf(out, "  targets:\n");
    print_targets(out, c);
    print_margin(out, c->margin);

    if (c->parent.present) {
        fprintf(out, "  parent:\n");
        fprintf(out, "    %-17s%s\n", "name", c->parent.name[0] ? c->parent.name : "-");
        print_costs(out, &c->parent.cost);
    } else {
        fprintf(out, "  parent:            -\n");
    }

    fprintf(out, "  search_space:\n");
    print_candidates(out, "hidden_sizes", &s->hidden_sizes);
    print_candidates(out, "mamba_heads", &s->mamba_heads.values);
    fprintf(out, "    %-17s%s\n", "  scope", ac_search_scope_name(s->mamba_heads.scope));
    fprintf(out, "    %-17s%s\n", "  remove", s->mamba_heads.remove ? "true" : "false");
    print_candidates(out, "routed_experts", &s->routed_experts);
    print_candidates(out, "routed_ffn", &s->routed_ffn);
    print_candidates(out, "shared_ffn", &s->shared_ffn);
    fprintf(out, "    %-17s", "removable");
    if (!rm->mamba && !rm->moe && !rm->mlp && !rm->attention) {
        fprintf(out, "none (depth fixed)\n");
    } else {
        const char *sep = "";
        if (rm->mamba) { fprintf(out, "%smamba", sep); sep = ", "; }
        if (rm->moe) { fprintf(out, "%smoe", sep); sep = ", "; }
        if (rm->mlp) { fprintf(out, "%smlp", sep); sep = ", "; }
        if (rm->attention) fprintf(out, "%sattention", sep);
        fprintf(out, "\n");
    }

    fprintf(out, "  budgets:\n");
    print_tokens(out, "search_tokens", c->budgets.has_search_tokens, c->budgets.search_tokens);
    print_tokens(out, "kd_tokens", c->budgets.has_kd_tokens, c->budgets.kd_tokens);
}
