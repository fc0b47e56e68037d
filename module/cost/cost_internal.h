/* What the cost module's files share: the search-space helpers, the memory formula's
 * terms, the parent, the workload server, one measurement and the tables' keys. */
#ifndef AC_COST_INTERNAL_H
#define AC_COST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/model.h"
#include "autocompress/probe.h"
#include "autocompress/runtime.h"

/* ---- the search space (space.c) ---- */

/* The Mamba group count a layer of `heads` heads gets: the largest divisor of the
 * parent's group count that divides `heads` (so pruned heads stay groupable). */
int ac_mamba_groups_for(int heads, int parent_groups);
/* Sets b to `parent` with the given configuration applied. */
void ac_dims_mamba(ac_block_dims *b, const ac_block_dims *parent, int heads);
void ac_dims_moe(ac_block_dims *b, const ac_block_dims *parent, int experts, int expert_ffn, int shared_ffn);
void ac_dims_mlp(ac_block_dims *b, const ac_block_dims *parent, int ffn);
/* "moe E16 F128 S256", "mamba H8", "attention", "mlp F256" */
void ac_row_label(const ac_cost_row *key, char *buf, size_t size);

/* ---- the memory formula's terms (memory.c) ---- */

double ac_block_scratch_floats(const ac_arch *arch, const ac_block_dims *b);
double ac_block_kv_bytes(const ac_block_dims *b, const ac_contract_workload *w);
double ac_block_state_bytes(const ac_block_dims *b, const ac_contract_workload *w);
/* R given the widest block's scratch floats per token. */
double ac_fixed_activation_bytes(const ac_arch *arch, const ac_contract_workload *w, int threads, double scratch_floats);

/* ---- the parent (parent.c) ---- */

/* The parent: DIR's checkpoint, or DIR/config.json with random weights (seed) when the
 * directory holds no weights. */
ac_status ac_load_parent(const char *dir, uint64_t seed, ac_model **model);
/* Only its architecture. */
ac_status ac_load_parent_arch(const char *dir, ac_arch *arch);

/* ---- serving the workload (serve.c) ---- */

typedef struct ac_server ac_server;

/* Floats a server needs for its context snapshot (Mamba state of every sequence). The
 * caller allocates it (so it can be touched before a memory baseline). */
size_t ac_server_snapshot_floats(const ac_arch *arch, int batch);
ac_status ac_server_create(const ac_model *model, const ac_contract_workload *w, uint64_t seed, float *snapshot,
                           ac_server **server);
void ac_server_free(ac_server *server);
void ac_server_set_probe(ac_server *server, ac_probe *probe);
/* Builds the cached context (untimed phase "context"), then snapshots it. */
ac_status ac_server_build_context(ac_server *server);
/* One request from the context: prefill, then up to `max_steps` decode steps (-1: the
 * workload's). *seconds: from the prefill's start to the last step's end. */
ac_status ac_server_request(ac_server *server, int max_steps, double *seconds);
/* The runtime's own accounting of what it holds now (resident: the process's). */
ac_memory_sample ac_server_memory(const ac_server *server);

/* ---- one measurement: a model built from the parent, serving the workload in a child
 * process (measure.c) ---- */

enum { AC_MEASURE_MAX_REPEATS = 64 };

typedef struct {
    const char *model_dir;   /* the parent */
    uint64_t seed;
    const ac_arch *arch;     /* the model to measure */
    const int *parent_layer; /* its layers' parent layers */
    ac_contract_workload workload;
    int threads;             /* as the contract gives it (0: all cores) */
    int repeats;             /* timed requests (at most; see min_seconds) */
    double min_seconds;      /* > 0: stop after the first request that brings the timed
                                total to min_seconds (so a cheap workload gets more samples
                                from the same process, a costly one just one) */
    int warmup_steps;        /* decode steps of the untimed warm-up request */
    size_t probe_capacity;   /* spans to keep; 0: no probe */
    int reference;           /* also time a request of the parent itself right after each */
    const char *reference_dir; /* with reference: the checkpoint to time instead of the parent
                                  (NULL: model_dir's; `measure` times a pruned checkpoint
                                  against the parent its tables were profiled with) */
    const char *device;      /* where the model runs: NULL (the CPU) or "cuda" (device time
                                per layer from the CUPTI probe, memory from the device's
                                own accounting) */
    ac_dtype weights;        /* the model served as (the contract's hardware.weights) */
} ac_measure_job;

typedef struct {
    int32_t repeats, threads; /* repeats: the timed requests done */
    uint32_t n_spans, dropped;
    double seconds[AC_MEASURE_MAX_REPEATS]; /* each timed request */
    double reference_seconds[AC_MEASURE_MAX_REPEATS]; /* the parent's request after each, when job->reference */
    int32_t retried;          /* requests run again because another process took a core */
    double measured_bytes;   /* peak resident size over the size before the model was built */
    ac_memory_sample accounted; /* the runtime's own accounting at the end */
} ac_measure_result;

/* *spans (malloc'd, result->n_spans of them; NULL without a probe) are the timed
 * requests' spans, request after request (each request's clock starts at 0). */
ac_status ac_measure(const ac_measure_job *job, ac_measure_result *result, ac_span **spans);

/* ---- tables (tables.c) ---- */

/* Keys equal (kind and that kind's dims, hidden). */
int ac_row_same_key(const ac_cost_row *a, const ac_cost_row *b);

#endif
