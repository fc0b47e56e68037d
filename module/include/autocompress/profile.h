/* Profiling runs (paper, Figure 4) and the validation of the cost model.
 *
 * Profiling. For every hidden size of the contract's search space, profiling models are
 * built whose layers carry different candidate configurations. A model has `layers`
 * slots (default: as many as the parent has layers, so its working set is a candidate's).
 * By default the slots follow the parent's layer pattern and each takes its weights from
 * the parent layer at its position, so every layer sees inputs like those it sees in a
 * candidate; this matters on the CPU, where attention's cost depends on its data (the
 * softmax's expf takes a slow path when scores underflow, which activations grown through
 * a stack of other layers make them do; docs/results.md has the times of the same
 * attention prefill both ways). `balanced` shares the slots out instead, so that
 * the kinds with many configurations get most of them (every kind keeps one; MoE, with
 * experts x routed width x shared width configurations, gets the rest): fewer runs, for
 * devices whose kernels cost the same whatever the data. Each slot holds
 * the next configuration of its kind (MoE slots cycle through the MoE configurations,
 * "no routed experts" run as an MLP of the shared width; Mamba slots through the head
 * counts; attention slots hold the one attention configuration), so configurations that
 * fit more than once are measured in several slots and runs. Weights are sliced from a
 * parent layer of the slot's kind (random where the parent has no weights or is
 * smaller), so routers route as trained ones do. Each model serves the workload: the
 * cached context is built first, untimed, in chunks of the input length; then, after an
 * untimed warm-up request (prefill and two decode steps), timed requests (see
 * `requests`) each prefill the input and decode. The CPU probe splits every step at layer
 * boundaries. This is done in `repeats` sweeps over all runs (each run once per sweep, in
 * a fresh process, each sweep with its own prompt: MoE routing, and so MoE time, depends
 * on the tokens), so a slow phase of a shared machine costs every row one sample rather
 * than one row all of its samples. A request during which the process got less than 85%
 * of threads x wall time of CPU (another process took a core: the threads spin or compute
 * whenever they run) is run again, up to 8 times.
 *
 * Machine speed. On a shared host the speed drifts from request to request and differs
 * from process to process (more between processes than between requests of one process:
 * see docs/results.md), and most of the drift is common to whatever runs at that moment:
 * the log ratio of two models' requests timed one after the other varies much less than
 * either. Every child therefore also times a request of the parent itself right after
 * each measured one (the reference), and each sample is scaled by the median reference
 * over the whole profiling over its own reference, so the rows are at the machine's
 * median speed. Per slot the prefill samples give a mean, and the decode steps per-step
 * means (a request's time is the sum of its sites' times, so their expected values are
 * what add up; the median of a decode step's small right-skewed times falls short of its
 * mean, which put whole-request predictions 4-10% low); slots with the same
 * configuration (across runs) are combined by the median, and the decode means get their
 * least-squares line in the context.
 *
 * Each run executes in a child process (fork), so its memory peak (VmHWM) is its own:
 * the measured memory of a run is its peak resident size over the resident size before
 * the model was built, and the residual over W + C + P + R is eps (autocompress/cost.h).
 * The calling process itself runs no OpenMP region (libgomp's pool does not survive a
 * fork). */
#ifndef AUTOCOMPRESS_PROFILE_H
#define AUTOCOMPRESS_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "autocompress/comm.h"
#include "autocompress/contract.h"
#include "autocompress/cost.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Timed requests per measurement process: `requests` when set, else (0, the default)
 * as many as fit in AC_AUTO_REQUEST_SECONDS of timed requests, at least one and at most
 * AC_MAX_REQUESTS. A fresh process costs far more than a cheap request (loading, slicing,
 * building the context, a warm-up), so a short workload takes several samples from each
 * process and a long one just one. */
enum { AC_MAX_REQUESTS = 8 };
#define AC_AUTO_REQUEST_SECONDS 0.3

typedef struct {
    int repeats;             /* sweeps: each run measured once per sweep (default 5) */
    int requests;            /* timed requests per measurement; 0: auto (above) */
    int layers;              /* layers of a profiling model; 0: the parent's count */
    int balanced;            /* 1: slots shared out by configuration count (fewer runs) */
    int no_reference;        /* 1: no reference requests, times as measured */
    uint64_t seed;           /* token ids and random weights */
    ac_progress_mode progress;
    FILE *progress_stream;   /* default stderr */
    const char *trace_path;  /* Chrome trace JSON of every run's first timed request, or NULL
                                (with ranks: rank 0's runs; rank r's in PATH.rankR) */
    ac_comm *comm;           /* ranks (NULL: one process): run i is measured by rank i % size, one
                                device per rank, and every rank ends with the merged tables */
} ac_profile_params;

ac_profile_params ac_profile_default_params(void);

typedef struct {
    int runs;
    int rows;               /* distinct table rows filled */
    double rows_per_run;    /* slot measurements (layers + fixed sites) per run */
    double seconds;         /* wall time, all runs */
    int threads;            /* host threads used */
    int threads_clamped;    /* the contract asked for more threads than cores */
    int retried;            /* requests run again: another process had taken a core */
    double requests_per_run; /* timed requests per measurement, on average */
} ac_profile_report;

/* Profiles the search space of `contract` for the parent in `model_dir` (a checkpoint,
 * or a directory with only config.json: weights are then random). */
ac_status ac_profile_run(const char *model_dir, const ac_contract *contract, const ac_profile_params *params,
                         ac_cost_tables **tables, ac_profile_report *report);

/* ---- validation ---- */

typedef struct {
    int n;                  /* held-out architectures drawn (default 20) */
    const char *const *archs; /* more held-out architectures, given (the picks of a search or
                                 of Minitron++: config.json or arch.json files), measured
                                 before the drawn ones and scored apart too; may be NULL */
    int n_archs;
    int repeats;            /* sweeps: each architecture measured once per sweep (default 10) */
    int requests;           /* timed requests per measurement; 0: auto (above) */
    int no_reference;       /* 1: no reference requests (only raw times) */
    uint64_t seed;
    ac_progress_mode progress;
    FILE *progress_stream;
} ac_validate_params;

ac_validate_params ac_validate_default_params(void);

typedef struct {
    char description[160];  /* hidden size and per-layer configuration */
    int given;              /* one of params->archs (else drawn) */
    double params;          /* parameter count */
    ac_cost_prediction predicted;
    double latency_ms;      /* measured: median of the timed requests */
    double latency_spread_ms;
    /* the same at the profiling's machine speed: each request scaled by the tables'
     * reference_ms over the validation's median reference, and by (that median over the
     * reference request timed right after it) ^ reference_slope (ac_speed_factor; 0
     * without references) */
    double latency_norm_ms;
    double throughput_norm_tok_s;
    double throughput_tok_s;
    double memory_bytes;    /* measured peak over the pre-model baseline */
} ac_validate_entry;

/* One timed request of the validation. */
typedef struct {
    int arch, sweep;
    double ms;              /* as measured */
    double reference_ms;    /* the parent's request timed right after it (0: none) */
} ac_validate_sample;

typedef struct {
    int n;
    ac_validate_entry *entries;   /* n of them, owned */
    ac_validate_sample *samples;  /* n_samples of them in time order, owned */
    size_t n_samples;
    double latency_mape, latency_max_ape;       /* percent, raw measurement */
    double throughput_mape, throughput_max_ape;
    int normalised;                             /* the _norm figures are set */
    double latency_norm_mape, latency_norm_max_ape;
    double throughput_norm_mape, throughput_norm_max_ape;
    double memory_mape, memory_max_ape;
    double conventional_memory_mape;            /* W + C + P against the measurement */
    int n_given;                                /* the given architectures' errors apart */
    double given_latency_mape, given_latency_norm_mape, given_latency_norm_max_ape;
    double given_memory_mape, given_memory_max_ape;
    double reference_slope;      /* how the measured times move with the reference here
                                    (log-log, within architectures): the correction's exponent */
    double reference_noise_pct;  /* the parent's reference request: 1.4826 MAD over median,
                                    percent (how steady the machine was; 0 without references) */
    double seconds;
    int retried;            /* requests run again: another process had taken a core */
    double requests_per_arch; /* timed requests per architecture (all sweeps), on average */
} ac_validate_report;

/* Samples params->n architectures uniformly from the search space (a seed's draw; the
 * profiling models are never among them: those carry several configurations of a kind
 * at once), slices their weights from the parent (the first channels, heads and
 * experts), measures each end to end (in `repeats` sweeps over all of them, each time in
 * a fresh child process that times `requests` requests, each sweep with its own prompt;
 * the median of all counts) and compares with the model: raw, and (when the tables carry
 * a reference) at the profiling's machine speed, each request scaled by reference_ms over
 * the parent request timed in its own process. */
ac_status ac_cost_validate(const char *model_dir, const ac_contract *contract, const ac_cost_tables *tables,
                           const ac_validate_params *params, ac_validate_report *report);
void ac_validate_report_free(ac_validate_report *report);
/* Writes every timed request (report->samples) as tab-separated values with a header
 * line: arch, sweep, ms, reference_ms. */
ac_status ac_validate_write_samples(const ac_validate_report *report, const char *path);
/* A PNG of predicted against measured latency (or throughput) and memory, via gnuplot. */
ac_status ac_validate_plot(const ac_validate_report *report, const ac_contract *contract, const char *png_path);

/* ---- measuring a checkpoint against its contract (measure_model.c) ---- */

typedef struct {
    const char *parent_dir;        /* the parent the tables were profiled with: its request is
                                      the speed reference, and ratio targets are relative to
                                      its predicted cost; NULL: raw times, absolute targets only */
    const ac_cost_tables *tables;  /* the parent's tables: prediction and speed correction (NULL: none) */
    int sweeps;                    /* fresh processes, each timing `requests` requests (default 5) */
    int requests;                  /* 0: auto, as profiling and validation do */
    uint64_t seed;                 /* prompt tokens; sweep s uses seed + s */
    ac_progress_mode progress;
    FILE *progress_stream;
} ac_measure_params;

ac_measure_params ac_measure_default_params(void);

/* One quantity against its target. `value` is what is compared: the speed-corrected
 * measurement when the report is normalised, the raw one otherwise. */
typedef struct {
    int has_target;
    double target;         /* latency ms (at most), throughput tok/s (at least), memory bytes (at most) */
    double raw, value;     /* measured; value = raw, or at the profiling's machine speed */
    double predicted;      /* the cost model's (0 without tables, or outside the search space) */
    int pass;              /* met, or no target */
} ac_measure_quantity;

typedef struct {
    char contract[AC_CONTRACT_NAME_MAX];
    ac_contract_workload workload;
    int threads;
    int data_parallel;      /* the contract's replicas: one is measured, on one device, and its
                               throughput and memory are per device (each replica's) */
    int samples, retried;   /* timed requests over all sweeps; requests run again */
    int normalised;         /* value = speed-corrected (tables with a reference, a parent) */
    double latency_spread_ms;
    double reference_slope; /* the tables' exponent of a request's own deviation */
    int predicted;          /* the cost model predicted this architecture */
    ac_measure_quantity latency_ms, throughput_tok_s, memory_bytes;
    double weights_bytes;   /* W of the formula, for the report */
    double parameters;
    int pass;               /* every target met */
    double seconds;
} ac_measure_report;

/* Serves `contract`'s workload on the checkpoint in `model_dir` in params->sweeps fresh
 * processes (the measurement of profiling and validation: context, warm-up, clean timed
 * requests, the memory peak over the pre-model baseline), each request followed by one
 * of the parent's when params->parent_dir and tables with a reference are given; the
 * median request, corrected by (the tables' reference / its own reference)^slope,
 * against the contract's targets (ratios resolved against the parent's predicted cost,
 * as the search resolves them). */
ac_status ac_measure_checkpoint(const char *model_dir, const ac_contract *contract, const ac_measure_params *params,
                                ac_measure_report *report);
/* The report as JSON text (malloc'd). */
ac_status ac_measure_report_json(const ac_measure_report *report, char **text);

#ifdef __cplusplus
}
#endif
#endif
