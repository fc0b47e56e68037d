/* The one op interface. Every op takes a kernel context (the backend's stream and
 * workspace) and plain pointers, which are device pointers on an accelerator backend.
 * Matrices are row-major; `ld*` is the distance in floats between consecutive rows, so
 * an op can read columns of a wider buffer (a slice of a fused projection) in place.
 * The CPU implementations (kernels/cpu) are the reference for every other backend.
 *
 * A backend is a table of function pointers (struct ac_backend below): its memory
 * (alloc, free, copy, memset_zero, sync), the device facts that measurement and planning
 * ask for, and one member per op of kernels/ops.def. A kernel context names the backend
 * its ops run on; ac_k_X(ctx, ...) calls ctx->backend->X(ctx, ...), the CPU backend's
 * when ctx->backend is NULL, so callers never name a backend themselves. */
#ifndef AC_KERNELS_H
#define AC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"

/* The most taps of ac_k_conv1d_silu (the CPU holds a block of channels' taps on the stack),
 * and the most experts a token of ac_k_moe_token may pick (models pick 1-22; more take
 * the grouped path). */
enum { AC_K_MAX_CONV_TAPS = 16, AC_K_MAX_MOE_PICKS = 64 };

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ac_backend ac_backend;
typedef struct ac_probe ac_probe; /* autocompress/probe.h */

/* One MoE layer's feed-forward as ac_k_moe_token reads it: the struct in host memory, what
 * it points to in the backend's. Widths D (hidden), E experts of I channels, a shared
 * expert of S (0: none). The four matrices are floats, or bf16 values (uint16_t) when
 * bf16 is set, read as ac_k_linear_bf16 reads its weights. */
typedef struct {
    int D, E, I, S;
    int bf16;
    const void *experts_up;   /* [E, I, D] */
    const void *experts_down; /* [E, D, I] */
    const void *shared_up;    /* [S, D] */
    const void *shared_down;  /* [D, S] */
    const float *experts_mask; /* [E] scales each expert's routing weight, or NULL */
    const float *ffn_mask;     /* [I] the routed experts' channels, or NULL */
    const float *shared_mask;  /* [S] the shared expert's channels, or NULL */
} ac_k_moe_ffn;

typedef struct {
    void *stream;           /* backend stream (cudaStream_t); unused on the CPU */
    void *workspace;        /* scratch memory owned by the caller */
    size_t workspace_bytes;
    const ac_backend *backend; /* NULL: the CPU backend */
} ac_kctx;

/* What a backend's `identify` gives. */
typedef struct {
    char name[96];          /* "NVIDIA H100 80GB HBM3" */
    double memory_bytes;    /* the device's memory */
    char driver[16];        /* the driver's CUDA version, "12.4" */
    char capability[8];     /* compute capability, "9.0" */
} ac_device_identity;

/* The direction of a backend copy. On the CPU every kind is a memcpy. */
typedef enum {
    AC_COPY_HOST_TO_DEVICE,
    AC_COPY_DEVICE_TO_HOST,
    AC_COPY_DEVICE_TO_DEVICE
} ac_copy_kind;

/* Sets flush-to-zero and denormals-are-zero on the calling thread and its OpenMP team
 * (once per calling thread; kernels/cpu/fpenv.c says why). Forwards and training steps
 * call it first. */
void ac_k_flush_denormals(void);

/* The workspace ac_k_attention_backward needs for sequences of up to `longest` tokens
 * (the CPU kernel gives each thread two tiles of query rows by keys). */
size_t ac_k_attention_backward_workspace(int threads, int longest);

struct ac_backend {
    const char *name; /* "cpu", "cuda": what ac_backend_find takes */
    /* ssd_scan_save keeps the state every this many steps (the CPU 32, its backward's
     * chunk; CUDA 1): see ac_k_ssd_states_floats. */
    int ssd_state_interval;
    /* The most tokens of one forward whose MoE layers take ac_k_moe_token rather than
     * grouping the tokens by expert on the host, which reads the routing back: the CPU 1
     * (grouping there runs one GEMM per expert), CUDA 16 (a server's batched decode step
     * never waits for the host). */
    int moe_token_batch;

    /* ---- memory: device memory on an accelerator, host memory on the CPU ---- */

    void *(*alloc)(size_t bytes); /* NULL when out of memory */
    /* The same for a buffer its user writes whole every time it is used (weights,
     * gradients, optimizer moments, a training step's activations): the CPU puts those
     * of 2 MiB and more on huge pages, which a buffer sized for the worst case and
     * filled in part (a server's activations and caches) should not be, since a huge
     * page is resident whole once one byte of it is touched. */
    void *(*alloc_dense)(size_t bytes);
    void (*free)(void *p);        /* p may be NULL */
    void (*copy)(void *dst, const void *src, size_t bytes, ac_copy_kind kind);
    void (*memset_zero)(void *p, size_t bytes);
    /* Waits until every op queued on ctx's stream has finished (a no-op on the CPU). */
    void (*sync)(ac_kctx *ctx);
    /* NULL when the backend can run on this machine, else why not ("no CUDA device: ...");
     * a backend's other members may be called only when this is NULL. */
    const char *(*unavailable)(void);
    /* The first failure of an op, allocation or copy since the last call, naming the op
     * and the device's reason (NULL: none), and forgets it. Ops return nothing: a caller
     * checks here after a sync, where an accelerator reports what went wrong. */
    const char *(*take_error)(void);

    /* ---- device facts: what planning and measurement ask of the device ---- */

    /* Device memory in use by the device's own accounting, 0 when it cannot say (the
     * CPU: the process's resident size is the host's measure, probes/cpu). */
    size_t (*bytes_in_use)(void);
    /* A probe (autocompress/probe.h) that times the sites of forwards run on this
     * backend: the CPU probe, keeping up to `capacity` spans; CUDA's CUPTI probe, which
     * keeps every record. AC_ERR_UNSUPPORTED with *probe NULL where there is none. */
    ac_status (*probe_create)(size_t capacity, ac_probe **probe);
    /* The workspace (in bytes) that ac_k_attention needs for `queries` new tokens of one
     * sequence reaching `keys` positions when `threads` threads run it. The runtime
     * reserves it; the memory model plans the CPU's (runtime/plan.c). */
    size_t (*attention_workspace)(int threads, int queries, int keys);

    /* The device's identity for the cost tables' fingerprint (autocompress/cost.h): its
     * name, memory, driver and compute capability. NULL on the CPU, whose identity the
     * host gives (autocompress/host.h). */
    void (*identify)(ac_device_identity *id);

    /* ---- the ops, with their contracts: kernels/ops.def ---- */

#define AC_OP(name, params, args) void(*name) params;
#define AC_OP_VALUE(type, name, params, args) type(*name) params;
#include "kernels/ops.def"
};

/* The reference backend (kernels/cpu), always compiled in. */
extern const ac_backend ac_cpu_backend;

/* The backend a context's ops run on: ctx->backend, or the CPU backend when that (or ctx)
 * is NULL. */
static inline const ac_backend *ac_backend_of(const ac_kctx *ctx)
{
    return ctx && ctx->backend ? ctx->backend : &ac_cpu_backend;
}

/* The compiled-in backends (kernels/backend.c): "cpu" always, "cuda" when built with
 * AC_HAVE_CUDA (listed even where there is no GPU: ask its `unavailable`).
 * ac_backend_find returns NULL for a name not compiled in; ac_backend_at returns NULL
 * outside 0..ac_backend_count()-1. */
const ac_backend *ac_backend_find(const char *name);
int ac_backend_count(void);
const ac_backend *ac_backend_at(int i);

/* The backend to compute on, by name ("cpu", "cuda"): NULL with why in msg (cap bytes)
 * when it is not compiled in or cannot run on this machine. */
const ac_backend *ac_backend_select(const char *name, char *msg, size_t cap);

/* Adds a backend that ac_backend_find and ac_backend_select then know by its name (a
 * test's instrumented backend; not listed by ac_backend_at). Not thread-safe: register
 * before any use. Fails when the name is taken or the list is full. */
ac_status ac_backend_register(const ac_backend *be);

/* ---- the ops: each runs ac_backend_of(ctx)'s member of the same name (documented in
 * kernels/ops.def) ---- */

#define AC_OP(name, params, args)          \
    static inline void ac_k_##name params \
    {                                     \
        ac_backend_of(ctx)->name args;    \
    }
#define AC_OP_VALUE(type, name, params, args) \
    static inline type ac_k_##name params     \
    {                                         \
        return ac_backend_of(ctx)->name args; \
    }
#include "kernels/ops.def"

/* Floats of `states` for a T-step ac_k_ssd_scan_save: a state [H, P, N] every
 * ssd_state_interval steps, ceil(T / interval) of them. */
static inline size_t ac_k_ssd_states_floats(const ac_backend *be, int T, int H, int P, int N)
{
    int interval = be->ssd_state_interval;
    return (size_t)((T + interval - 1) / interval) * H * P * N;
}

/* No backend keeps ssd_scan_save's states further apart than this many steps. */
#define AC_SSD_MAX_STATE_INTERVAL 32

/* Floats of the work buffer of a T-step ac_k_ssd_scan_backward, enough for the CPU's
 * chunked backward over chunks of Q = min(interval, T) steps: per head, dB and dC rows
 * [T, N] each, 5 [Q, Q], 6 [Q, P], 2 [Q, N], 7 [Q], 4 [P, N] and 2 floats. */
static inline size_t ac_k_ssd_backward_work_floats(const ac_backend *be, int T, int H, int P, int N)
{
    size_t Q = (size_t)(be->ssd_state_interval < T ? be->ssd_state_interval : T);
    return (size_t)H * (2 * (size_t)T * N + 5 * Q * Q + 6 * Q * P + 2 * Q * N + 7 * Q + 4 * (size_t)P * N + 2);
}

/* A bound on ac_k_ssd_backward_work_floats(be, T, ...) / T for every T >= 1 and backend,
 * for plans made per token: with Q <= T, each term's Q over T is at most 1, and Q^2 / T
 * at most Q <= AC_SSD_MAX_STATE_INTERVAL. */
static inline size_t ac_k_ssd_backward_work_per_token(int H, int P, int N)
{
    size_t p = (size_t)P, n = (size_t)N;
    return (size_t)H * (2 * n + 5 * AC_SSD_MAX_STATE_INTERVAL + 6 * p + 2 * n + 7 + 4 * p * n + 2);
}

#ifdef __cplusplus
}
#endif

#endif
