/* What the server's two files share: srv_server.c (its life cycle, model references,
 * swaps and introspection) and srv_sched.c (the slots, admission and the step loop).
 * Not for the rest of the server. */
#ifndef AUTOCOMPRESS_SRV_SERVER_INTERNAL_H
#define AUTOCOMPRESS_SRV_SERVER_INTERNAL_H

#include "server/srv.h"

typedef struct {
    srv_model *model;  /* the model of `cache` (a reference), or NULL */
    ac_cache *cache;
    int32_t *history;  /* the tokens in the cache */
    int n_history;
    size_t cap_history;
    srv_request *req;  /* NULL: free */
    int fed;           /* prompt tokens in the cache */
    int decoding;
    int32_t next;      /* decoding: the token fed next */
    ac_sampler sampler;
    uint64_t last_used;
    /* this step */
    int step_tokens;
    int step_row;      /* first logits row (all-logits mode) or the sequence index */
} srv_slot;

struct srv_server {
    srv_config cfg;
    srv_metrics *metrics;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* the scheduler: new work or a state change */
    pthread_cond_t state_cv; /* swaps and admission: idle, freed, resumed */
    pthread_t thread;
    int thread_started, stopping;
    srv_model *current;
    int generation;
    int draining;            /* a drain-first swap holds admission */
    int live_models;         /* loaded and not yet freed */
    srv_request **queue;     /* ring of cfg.max_queue */
    int q_head, q_len;
    srv_slot *slots;
    int active;
    uint64_t clock;
    pthread_mutex_t swap_mu;
    srv_swap_record history[SRV_SWAP_HISTORY];
    int n_history;
    /* scheduler buffers */
    float *logits, *work;
    size_t logits_cap, work_cap;
    const int32_t **tok_ptr;
    int *n_tok;
    ac_cache **caches;
    srv_slot **batch;
    srv_model **step_models;
    ac_cost_tables *profile_tables; /* what GET /admin/profile compares with, or NULL */
    size_t baseline_resident;       /* the process before it loaded a model */
    int64_t memory_sampled_ns;      /* the scheduler's last memory sample for the profile */
};

/* Model references (server lock held): taking one, and dropping one (the last frees
 * the model and wakes whoever waits for models to go). */
void srv_model_ref_locked(srv_model *m);
void srv_model_unref_locked(srv_server *s, srv_model *m);

/* The scheduler (srv_sched.c). */
/* Allocates the slots and the step's buffers for cfg.slots sequences. */
ac_status srv_sched_init(srv_server *s);
/* Frees what srv_sched_init made and the slots' caches (their model references too). */
void srv_sched_release(srv_server *s);
/* The scheduler thread's body: runs until s->stopping. */
void *srv_sched_main(void *server);
/* After the thread stopped: every request still running or queued ends with an error. */
void srv_sched_abort(srv_server *s);

#endif
