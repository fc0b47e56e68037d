/* Cost tables and the cost model: latency, throughput and memory of any architecture in
 * a contract's search space, predicted from per-layer measurements taken on the device
 * under the contract's workload (autocompress/profile.h fills the tables).
 *
 * Workload. A request is `batch` sequences, each with `cached_tokens` already in its
 * cache, that prefill `input_tokens` in one forward call (step 0, which also yields the
 * first output token) and then decode the other output_tokens - 1 tokens one step at a
 * time. Decode step t (1 <= t < output_tokens) runs with c_t = cached + input + t - 1
 * tokens in each cache. Latency is the request's time from the start of the prefill to
 * the end of the last decode step; the cached context is not part of the request (it is
 * "already in the cache", built by earlier requests). Throughput is output tokens per
 * second of a static batch: batch * output_tokens / latency.
 *
 * Tables. One row per (layer kind, dims, hidden size): a Mamba row per head count, an
 * attention row, an MLP row per width (also what a MoE layer becomes when its routed
 * experts are removed: its shared expert), a MoE row per (experts, expert width, shared
 * width); plus per hidden size the embedding lookup, the LM head, sampling and "other"
 * (the part of a step no site covers; its prefill value also holds the request's time
 * outside its steps). A row holds the median prefill time and, for
 * decode, the per-step medians and their least-squares line a + b * c_t. The model uses
 * the line: over the contract's own steps its sum equals the sum of the per-step medians
 * (a least-squares line with an intercept has residuals summing to zero), it smooths
 * single-step noise, and it extends to other output lengths.
 *
 * Memory = W + C + P + R + eps, in bytes of what the process holds:
 *   W  weights as the engine holds them (f32 on the CPU);
 *   C  K and V rows written: batch x attention layers x 2 x kv heads x head dim x
 *      (cached + input + output - 1) tokens;
 *   P  Mamba conv and SSM state of every sequence;
 *   R  the runtime's buffers at the workload's widest call (batch x input tokens): the
 *      residual stream, normed input and block output, the block scratch (the widest
 *      layer's temporaries, MoE routing and expert buffers included), the attention
 *      workspace and the logits;
 *   eps the residual of the profiling runs' measured peaks over W + C + P + R (allocator,
 *      thread stacks, BLAS packing buffers, code pages): the median over the runs at the
 *      candidate's hidden size (BLAS buffers grow with the matrices' inner dimension),
 *      or over all runs when none was at that size.
 * The conventional formula is W + C + P.
 *
 * Expected cost. The search holds one categorical distribution per axis (autocompress's
 * routers): global axes (hidden size; Mamba heads when the contract makes them global)
 * and per-layer axes (Mamba heads when per layer, experts, routed width, shared width,
 * keep or remove). Axes are independent, so a layer's configuration has probability
 * prod over its axes, and the expected latency, W, C and P, sums of per-layer terms, are
 * multilinear in the probabilities: E = sum_g p(g) sum_l sum_c pi_l(c) cost_l(c | g),
 * with g the global choice (hidden, global heads) every per-layer term is conditioned
 * on (eps depends on the hidden size only). R's block scratch is a maximum over layers; given g the layers are independent
 * and E[max] = v_K - sum_k (v_{k+1} - v_k) prod_l F_l(v_k) over the sorted values v_k,
 * F_l the layer's CDF, which is multilinear as well. Gradients are exact derivatives of
 * these polynomials. Predicted throughput is batch * output_tokens / E[latency] and its
 * gradient follows by the chain rule. */
#ifndef AUTOCOMPRESS_COST_H
#define AUTOCOMPRESS_COST_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/arch.h"
#include "autocompress/contract.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_ROW_MAMBA = AC_BLOCK_MAMBA,
    AC_ROW_ATTENTION = AC_BLOCK_ATTENTION,
    AC_ROW_MLP = AC_BLOCK_MLP,
    AC_ROW_MOE = AC_BLOCK_MOE,
    AC_ROW_EMBEDDING,
    AC_ROW_LM_HEAD,
    AC_ROW_SAMPLE,
    AC_ROW_OTHER,
    AC_ROW_COUNT
} ac_row_kind;

const char *ac_row_kind_name(ac_row_kind kind); /* "mamba" ... "sample", "other" */

typedef struct {
    ac_row_kind kind;
    int hidden;
    int heads;                            /* mamba */
    int experts, expert_ffn, shared_ffn;  /* moe */
    int ffn;                              /* mlp */
    double prefill_us, prefill_spread_us; /* median and 1.4826 x MAD of the samples */
    double decode_a_us, decode_b_us;      /* step time at context c: a + b c */
    double decode_spread_us;              /* median over steps of 1.4826 x MAD */
    int n_steps;                          /* per-step medians, steps 1..n_steps */
    double *step_us;                      /* owned by the tables */
    int samples;                          /* occurrences combined (slots x runs) */
} ac_cost_row;

/* One profiling run's memory: its hidden size, the measured peak and the formula's
 * terms, bytes. */
typedef struct {
    int hidden;
    double measured, weights, kv, state, activations;
} ac_memory_point;

typedef struct ac_cost_tables ac_cost_tables;

/* What measured a set of cost tables, or what would measure them here: the fields that
 * change the times and the memory of the same model. Strings are "" where they do not
 * apply (the GPU's on a CPU contract). */
/* How profiling reduces its samples to rows; a change that moves the rows' values bumps
 * it, so tables (and cached ones) of the old method are not taken for this one's. 2: the
 * mean over a slot's requests (1: the median). */
enum { AC_PROFILE_METHOD = 2 };

typedef struct {
    char version[32];        /* the autocompress version that measured */
    int method;              /* AC_PROFILE_METHOD of the profiler that measured (1: none recorded) */
    char device[16];         /* the contract's device kind: "cpu", "cuda" */
    char cpu_model[96];      /* /proc/cpuinfo's model name */
    char cpu_isa[160];       /* the kernel-choosing ISA features (ac_cpu_isa) */
    char blas_core[32];      /* the OpenBLAS kernel set */
    int threads;             /* host threads the runs used */
    ac_dtype weights;        /* the served weights */
    char gpu_name[96];       /* CUDA: the device's name, memory, driver and capability */
    double gpu_memory_bytes;
    char gpu_driver[16];
    char gpu_capability[8];
} ac_cost_fingerprint;

/* The fingerprint of this machine serving `contract`: its CPU, the threads the contract
 * gets here, and on a CUDA contract the device it computes on (gpu_name "no GPU" where
 * there is none). */
ac_status ac_cost_fingerprint_here(const ac_contract *contract, ac_cost_fingerprint *fp);

/* Metadata of the measurement the tables come from. */
typedef struct {
    char contract[AC_CONTRACT_NAME_MAX];
    char device[AC_CONTRACT_NAME_MAX];
    ac_dtype weights;     /* the served weights the runs measured (the contract's) */
    ac_contract_workload workload;
    int threads;          /* threads the runs used */
    int repeats;          /* timed requests per run */
    int runs;             /* profiling runs */
    int layers_per_run;   /* layers of each profiling model */
    double seconds;       /* wall time of the whole profiling */
    double reference_ms;  /* the parent's request at the machine's median speed over the
                             profiling (0: times not normalised); every time in the rows
                             is at that speed (autocompress/profile.h) */
    double reference_slope; /* how a profiling model's time moves with the reference's
                               (log-log, within runs): the exponent of the correction */
    double eps_bytes;     /* memory residual: median over all runs */
    double eps_spread_bytes;
    int has_fingerprint;  /* 0: tables written before fingerprints */
    ac_cost_fingerprint fingerprint;
} ac_cost_tables_info;

ac_status ac_cost_tables_create(const ac_cost_tables_info *info, ac_cost_tables **tables);
void ac_cost_tables_free(ac_cost_tables *tables);
const ac_cost_tables_info *ac_cost_tables_get_info(const ac_cost_tables *tables);
void ac_cost_tables_set_info(ac_cost_tables *tables, const ac_cost_tables_info *info);
/* Copies `row` (and its steps) in; a row with the same key is replaced. */
ac_status ac_cost_tables_add_row(ac_cost_tables *tables, const ac_cost_row *row);
size_t ac_cost_tables_row_count(const ac_cost_tables *tables);
const ac_cost_row *ac_cost_tables_row(const ac_cost_tables *tables, size_t i);
/* The row with the kind and dims of `key` (only the fields of that kind are compared). */
const ac_cost_row *ac_cost_tables_find(const ac_cost_tables *tables, const ac_cost_row *key);
ac_status ac_cost_tables_add_memory(ac_cost_tables *tables, const ac_memory_point *point);
size_t ac_cost_tables_memory_count(const ac_cost_tables *tables);
const ac_memory_point *ac_cost_tables_memory(const ac_cost_tables *tables, size_t i);
/* JSON, written through PATH.tmp and a rename. Reading names the file and field on error. */
ac_status ac_cost_tables_write(const ac_cost_tables *tables, const char *path);
ac_status ac_cost_tables_read(const char *path, ac_cost_tables **tables);

/* Whether `tables` were measured here for `contract`: their fingerprint against the
 * contract's device, threads and weights and against this machine
 * (ac_cost_fingerprint_here). Every field that differs goes into `differs` (cap bytes;
 * "" when none) as "FIELD: tables X, here Y", separated by "; ". When some differ and
 * `allow_foreign` is 0 this fails with AC_ERR_INVALID naming `tables_path` and each
 * field; with `allow_foreign` it returns AC_OK and the caller warns and reports. Tables
 * without a fingerprint differ in "fingerprint". */
ac_status ac_cost_tables_check_machine(const ac_cost_tables *tables, const char *tables_path,
                                       const ac_contract *contract, int allow_foreign, char *differs, size_t cap);

/* Where a folder of cached tables keeps those profiled here for `contract` and the parent
 * in `model_dir` (config.json, and model.safetensors when it has weights) with `repeats`
 * sweeps and `seed`: DIR/NAME-KEY.json, KEY a hash of this machine's fingerprint, the
 * contract's hardware, workload and search space, the parent's files, the repeats and
 * the seed. Anything else that changes gives another path. */
ac_status ac_cost_tables_cache_path(const char *dir, const char *model_dir, const ac_contract *contract, int repeats,
                                    uint64_t seed, char *path, size_t cap);

/* A row's time over the workload: prefill plus every decode step on its line (us). */
double ac_cost_row_workload_us(const ac_cost_row *row, const ac_contract_workload *w);
/* Decode steps of a request (output_tokens - 1, or 0) and their contexts' sum. */
int ac_workload_decode_steps(const ac_contract_workload *w);
double ac_workload_context_sum(const ac_contract_workload *w);

/* ---- the memory formula ---- */

typedef struct {
    double weights, kv, state, activations; /* W, C, P, R in bytes */
} ac_memory_terms;

/* W, C, P and R of `arch` serving workload `w` with `threads` host threads, its weights
 * stored as `weights` (f32, or a bf16 serving copy's). */
ac_memory_terms ac_memory_formula(const ac_arch *arch, ac_dtype weights, const ac_contract_workload *w, int threads);

/* ---- the cost model ---- */

typedef enum {
    AC_AXIS_HIDDEN,      /* global */
    AC_AXIS_MAMBA_HEADS, /* global or per Mamba layer; value 0 = remove the layer (only in
                            the AC_MAMBA_REMOVAL_HEADS layout) */
    AC_AXIS_EXPERTS,     /* per MoE layer */
    AC_AXIS_ROUTED_FFN,  /* per MoE layer; 0 = no routed experts (the layer is its shared expert) */
    AC_AXIS_SHARED_FFN,  /* per MoE layer; 0 = no shared expert */
    AC_AXIS_KEEP         /* per removable layer: values 1 (keep), 0 (remove) */
} ac_axis_kind;

enum { AC_AXIS_MAX_VALUES = AC_CONTRACT_MAX_CANDIDATES + 1 };

typedef struct {
    ac_axis_kind kind;
    int layer;  /* parent layer index; -1 for a global axis */
    int count;  /* candidate values */
    int offset; /* where its probabilities start in the flat vector */
    int values[AC_AXIS_MAX_VALUES];
} ac_cost_axis;

const char *ac_axis_kind_name(ac_axis_kind kind);

typedef struct ac_cost_model ac_cost_model;

typedef struct {
    double latency_ms, prefill_ms, decode_ms;
    double throughput_tok_s;
    double memory_bytes; /* W + C + P + R + eps */
    double weights_bytes, kv_bytes, state_bytes, activation_bytes, eps_bytes;
    double conventional_bytes; /* W + C + P */
} ac_cost_prediction;

/* How a removable Mamba layer's removal is laid out on the axes, in a space whose Mamba
 * heads are per layer and removable (search_space.mamba_heads.remove): GATE gives the
 * layer a keep axis and its heads axis only the contract's values, so a search gates the
 * whole layer (x + g mixer(x)) and its output, like its expected cost, is linear in the
 * keep probability; HEADS makes removal the heads axis's extra value 0, so a search's
 * soft mask scales every head by the keep probability and the width-normalised gated
 * norm makes the layer's output fall as its square root (the earlier layout, kept for
 * ablations). Other spaces get the same axes either way. */
typedef enum { AC_MAMBA_REMOVAL_GATE = 0, AC_MAMBA_REMOVAL_HEADS } ac_mamba_removal;

/* A model for candidates of `parent` (whose layer pattern and fixed dims every candidate
 * keeps) in `contract`'s search space, from `tables` (kept by reference: free the model
 * first), its axes in the AC_MAMBA_REMOVAL_GATE layout. Fails naming the first row the
 * tables lack, or a workload that differs from the one the tables were measured under. */
ac_status ac_cost_model_create(const ac_cost_tables *tables, const ac_arch *parent, const ac_contract *contract,
                               ac_cost_model **model);
/* The same with the Mamba removal laid out as `removal` says. */
ac_status ac_cost_model_create_with(const ac_cost_tables *tables, const ac_arch *parent, const ac_contract *contract,
                                    ac_mamba_removal removal, ac_cost_model **model);
void ac_cost_model_free(ac_cost_model *model);

int ac_cost_model_axis_count(const ac_cost_model *model);
const ac_cost_axis *ac_cost_model_axis(const ac_cost_model *model, int i);
/* Length of the flat probability (and gradient) vector: the sum of the axes' counts. */
int ac_cost_model_prob_count(const ac_cost_model *model);

/* A concrete candidate: choice[a] indexes axis a's values. */
ac_status ac_cost_predict(const ac_cost_model *model, const int *choice, ac_cost_prediction *out);
/* The architecture of a candidate; parent_layer (n_layers of the result, may be NULL)
 * receives each layer's parent layer. Free with ac_arch_free. */
ac_status ac_cost_choice_arch(const ac_cost_model *model, const int *choice, ac_arch *arch, int *parent_layer);
/* The choice that gives `arch` (layers matched to the parent's in order); fails when a
 * dimension is not a candidate value. */
ac_status ac_cost_arch_choice(const ac_cost_model *model, const ac_arch *arch, int *choice);
ac_status ac_cost_predict_arch(const ac_cost_model *model, const ac_arch *arch, ac_cost_prediction *out);

/* Expected costs under per-axis probabilities probs[prob_count] (each axis's entries
 * should sum to 1; they are used as given). Gradients (prob_count entries each, any may
 * be NULL) are overwritten with d latency_ms / d p, d memory_bytes / d p and
 * d throughput_tok_s / d p. */
ac_status ac_cost_expected(const ac_cost_model *model, const double *probs, ac_cost_prediction *out,
                           double *d_latency_ms, double *d_memory_bytes, double *d_throughput);

#ifdef __cplusplus
}
#endif
#endif
