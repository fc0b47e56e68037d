/* Deployment contracts: the hardware, workload shape, targets, search space and token
 * budgets one compression run must meet, read from a libconfig file.
 *
 * A contract file has these groups (examples/contracts/ has six complete ones):
 *
 *   name = "rtx5070-npc";                       required, 1..127 characters
 *   hardware = {                                required
 *     device = "cuda:0";                        required: "cpu", "cuda" or "cuda:N" (first device)
 *     name = "RTX 5070";                        optional label
 *     weights = "bf16";                         optional: "f32" (default) or "bf16", the
 *                                                 product weights' dtype when serving
 *                                                 (ac_model_to_device_as): measured and
 *                                                 profiled so, and the memory formula's W
 *     threads = 0;                              optional, 0..AC_CONTRACT_MAX_THREADS, 0 = all
 *                                                 cores (default 0)
 *     memory_gib = 12.0;                        optional, > 0: memory of one device, an upper
 *                                                 bound on the served model's memory: with no
 *                                                 memory target it is the memory target
 *                                                 (ac_contract_resolve_targets)
 *     count = 1;                                optional, >= 1 (default 1); == tp * dp
 *     tensor_parallel = 1;                      optional, must be 1 (the default): a model is
 *                                                 served and measured on one device; a
 *                                                 larger value is refused, not ignored
 *     data_parallel = 1;                        optional, >= 1 (default 1): independent
 *                                                 replicas, one a device, each serving the
 *                                                 workload (batch is per replica); per-device
 *                                                 targets are one replica's, measured as one
 *                                                 replica on one device
 *   };
 *   workload = {                                required
 *     batch = 1;                                required, >= 1 (sequences per device)
 *     cached_tokens = 0;                        optional, >= 0 (default 0)
 *     input_tokens = 2048;                      required, >= 1
 *     output_tokens = 256;                      required, >= 1 (throughput counts them)
 *   };
 *   targets = {                                 required, at least one entry, each > 0
 *     latency_ms = 750.0;                       end-to-end latency of one request
 *     throughput_tok_s = 7330.0;                output tokens per second per device (one
 *                                                 replica; data_parallel of them serve
 *                                                 data_parallel times as many)
 *     memory_gib = 4.0;                         serving memory per device
 *     latency_ratio = 0.65;                     the same three relative to the parent:
 *     throughput_ratio = 1.5;                     target = ratio x the parent's cost,
 *     memory_ratio = 0.46;                        resolved by ac_contract_resolve_targets
 *     margin = 0.02;                            optional, in [0, 0.5) (default 0.02): the
 *                                                 search plans for every target tightened
 *                                                 by this fraction (the cost model's error),
 *                                                 measurement judges the targets themselves
 *   };                                          (any finite value > 0; a quantity is given
 *                                                 absolutely or relatively, not both)
 *   parent = { name = "..."; latency_ms = 1147.0; memory_gib = 8.76;
 *              throughput_tok_s = 4922.0; };    optional group, every entry optional, > 0
 *   search_space = {                            required
 *     hidden_sizes   = [1920, 1792, 1280];      required lists, strictly descending,
 *     routed_experts = [128, 96, 64, 32];         values > 0, 1..32 entries; a
 *     routed_ffn     = [960, 704, 0];             one-entry list fixes that axis.
 *     shared_ffn     = [3712, 2688, 0];           routed_ffn and shared_ffn may end in
 *                                                 0, meaning "remove".
 *     mamba_heads = { values = [64];            required group; values as above;
 *                     scope = "per_layer";      optional "global" | "per_layer" (default
 *                                                 "global");
 *                     remove = true; };         optional, default false; true needs
 *                                                 "mamba" in removable
 *     removable = ["mamba", "moe"];             optional; layer kinds the search may drop
 *                                                 ("mamba", "moe", "mlp", "attention", no
 *                                                 repeats); omitted, [] or () = depth fixed
 *   };
 *   budgets = { search_tokens = 4180000000L;    optional group, entries optional, >= 0;
 *               kd_tokens = 30000000000L; };      int or int64 ('L' suffix) values
 *
 * Integer fields reject floats and strings; float fields accept integers. An integer
 * literal that does not fit 32 bits must carry libconfig's L suffix (libconfig 1.5 would
 * otherwise wrap it silently; the loader rejects it instead). Unknown keys are errors in
 * every group. Every error message reads "FILE:LINE: message"; for a missing entry, and
 * for a rule between entries (tp * dp != count, no target), LINE is the line of the
 * enclosing group (1 for the top level); for a bad list element, the element's line; for
 * a quantity given both ways (latency_ms and latency_ratio), the line of the ratio.
 * targets.memory_gib may not exceed hardware.memory_gib when both are given (a
 * memory_ratio is checked against it once resolved). Rules that need the parent's
 * architecture (routed experts against its top_k) are ac_contract_check_parent's. */
#ifndef AUTOCOMPRESS_CONTRACT_H
#define AUTOCOMPRESS_CONTRACT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "autocompress/arch.h"
#include "autocompress/dtype.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    AC_CONTRACT_NAME_MAX = 128,      /* bytes of a name, label or path, with the NUL */
    AC_CONTRACT_MAX_CANDIDATES = 32, /* entries of one search axis */
    AC_CONTRACT_MAX_FILE_BYTES = 1 << 20,
    AC_CONTRACT_MAX_THREADS = 4096   /* hardware.threads: more than any one host has */
};

/* The cost model under-predicts a measured checkpoint a little (its validated error on
 * held-out architectures, in docs/results.md, plus the spread of one run's pick), so a
 * search that plans right on a target misses it when measured about half the time: the
 * default margin covers that error. */
#define AC_CONTRACT_DEFAULT_MARGIN 0.02
#define AC_CONTRACT_MAX_MARGIN 0.5

typedef enum { AC_DEVICE_CPU = 0, AC_DEVICE_CUDA = 1 } ac_device_kind;

typedef enum { AC_SCOPE_GLOBAL = 0, AC_SCOPE_PER_LAYER = 1 } ac_search_scope;

/* One search axis: `count` candidate values, strictly descending. */
typedef struct {
    int count;
    int values[AC_CONTRACT_MAX_CANDIDATES];
} ac_candidates;

typedef struct {
    char device[AC_CONTRACT_NAME_MAX]; /* as written: "cpu", "cuda" (cuda:0) or "cuda:N" */
    ac_device_kind kind;
    int index;                       /* N of "cuda:N", the first of `count` devices; 0 for cpu */
    char name[AC_CONTRACT_NAME_MAX]; /* label such as "RTX 5070"; "" when not given */
    ac_dtype weights;                /* the served product weights: AC_DTYPE_F32 or AC_DTYPE_BF16 */
    int threads;                     /* host threads, 0 = all cores */
    bool has_memory;
    double memory_gib;               /* memory of one device, when has_memory: bounds the memory */
    int count;                       /* devices, tensor_parallel * data_parallel */
    int tensor_parallel;             /* always 1: larger values are refused */
    int data_parallel;               /* replicas, one a device, each measured alike */
} ac_contract_hardware;

typedef struct {
    int batch;             /* concurrent sequences per device (per data-parallel rank) */
    int64_t cached_tokens; /* context already in the cache before the request */
    int64_t input_tokens;  /* prompt tokens prefilled by the request */
    int64_t output_tokens; /* tokens decoded */
} ac_contract_workload;

/* Measured or target costs; each value is meaningful only when its flag is set. */
typedef struct {
    bool has_latency;
    double latency_ms;       /* end-to-end latency of one request (at most, for a target) */
    bool has_throughput;
    double throughput_tok_s; /* output tokens per second per device (at least) */
    bool has_memory;
    double memory_gib;       /* serving memory per device (at most) */
} ac_contract_costs;

/* Targets relative to the parent: target = ratio x the parent's cost. Each value is
 * finite and > 0, meaningful only when its flag is set. */
typedef struct {
    bool has_latency;
    double latency;    /* latency_ratio: of the parent's latency_ms */
    bool has_throughput;
    double throughput; /* throughput_ratio: of the parent's throughput_tok_s */
    bool has_memory;
    double memory;     /* memory_ratio: of the parent's memory_gib */
} ac_contract_ratios;

typedef struct {
    bool present;                    /* the file has a parent group */
    char name[AC_CONTRACT_NAME_MAX]; /* "" when not given */
    ac_contract_costs cost;          /* the parent's measured costs */
} ac_contract_parent;

typedef struct {
    ac_candidates values;
    ac_search_scope scope; /* one head count for all layers, or one per Mamba layer */
    bool remove;           /* each Mamba layer may be removed: a keep axis per layer in the cost
                              model (per-layer scope with AC_MAMBA_REMOVAL_HEADS: one more value,
                              0, on this axis) */
} ac_contract_mamba_heads;

typedef struct {
    bool mamba, moe, mlp, attention; /* layer kinds the search may remove */
} ac_contract_removable;

typedef struct {
    ac_candidates hidden_sizes;   /* global */
    ac_contract_mamba_heads mamba_heads;
    ac_candidates routed_experts; /* per MoE layer */
    ac_candidates routed_ffn;     /* per MoE layer; 0 allowed */
    ac_candidates shared_ffn;     /* per MoE layer; 0 allowed */
    ac_contract_removable removable;
} ac_contract_search_space;

typedef struct {
    bool has_search_tokens;
    int64_t search_tokens; /* tokens for architecture search */
    bool has_kd_tokens;
    int64_t kd_tokens;     /* tokens for knowledge-distillation recovery */
} ac_contract_budgets;

typedef struct {
    char name[AC_CONTRACT_NAME_MAX];
    char source[AC_CONTRACT_NAME_MAX]; /* the path or name_for_errors it was read from */
    ac_contract_hardware hardware;
    ac_contract_workload workload;
    ac_contract_costs targets;  /* the absolute targets (latency_ms, ...), as given */
    ac_contract_ratios ratios;  /* the relative ones (latency_ratio, ...); for each
                                 * quantity at most one of the two flags is set, and at
                                 * least one flag is set in all */
    double margin;              /* targets.margin: the fraction the search keeps clear of
                                 * every target (AC_CONTRACT_DEFAULT_MARGIN when not given) */
    ac_contract_parent parent;
    ac_contract_search_space search;
    ac_contract_budgets budgets;
} ac_contract;

/* Reads and validates the contract at `path`. AC_ERR_IO (message names the path) when
 * the file cannot be read; AC_ERR_INVALID with "FILE:LINE: message" when it is malformed.
 * `*out` is fully written on success and zeroed on failure. */
ac_status ac_contract_load(const char *path, ac_contract *out);

/* The same for contract text in memory; `name_for_errors` (NULL: "<string>") stands in
 * for FILE in messages and fills out->source. @include paths resolve against the
 * current directory. */
ac_status ac_contract_parse_string(const char *text, const char *name_for_errors, ac_contract *out);

/* The targets of `c` as absolute costs: each absolute target copied, each relative one
 * resolved as ratio x the parent's cost (out->latency_ms = ratios.latency x
 * parent->latency_ms, and so for throughput_tok_s and memory_gib); a quantity with no
 * target has its flag clear. `parent` may be NULL when `c` has no ratio; otherwise each
 * quantity with a ratio needs that cost in `parent` (flag set, finite, > 0). Fails with
 * AC_ERR_INVALID naming the quantity when it lacks one, or when a resolved memory target
 * exceeds hardware.memory_gib; `*out` is zeroed on failure. With no memory target and
 * hardware.memory_gib given, out->memory_gib is hardware.memory_gib (the model must fit
 * one device), so the memory bound is min(the target, hardware.memory_gib) always. */
ac_status ac_contract_resolve_targets(const ac_contract *c, const ac_contract_costs *parent,
                                      ac_contract_costs *out);

/* Writes every field of `c` in a human-readable form. */
void ac_contract_print(const ac_contract *c, FILE *out);

/* The rules between a contract and the parent it compresses, checked wherever the two
 * meet (profiling, the cost model and so search, measure and compress; `contract check
 * --parent`): every search_space.routed_experts candidate is at least each parent MoE
 * layer's top_k (fewer experts than a token is routed to is no MoE layer). AC_ERR_INVALID
 * naming the candidate, the layer and its top_k. */
ac_status ac_contract_check_parent(const ac_contract *c, const ac_arch *parent);

const char *ac_device_kind_name(ac_device_kind kind);
/* The backend a contract's work runs on (ac_model_to_device's name): NULL for cpu,
 * "cuda" for cuda:0, the device the CUDA backend uses; another index is refused, naming
 * CUDA_VISIBLE_DEVICES. A cuda contract on a machine that cannot run it (a build without
 * the CUDA backend, no GPU) fails with AC_ERR_UNSUPPORTED "... cannot be measured here:
 * WHY", so every command that profiles, searches, distils or measures says so before its
 * work. */
ac_status ac_contract_compute_device(const ac_contract *contract, const char **device);
const char *ac_search_scope_name(ac_search_scope scope);

#ifdef __cplusplus
}
#endif
#endif
