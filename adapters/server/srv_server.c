/* The server: its life cycle, the references that keep models alive, hot swaps, and
 * what the endpoints read of it. The scheduler thread it starts (srv_sched.c) runs the
 * slots; the server lock guards the queue, the current model, model references, the
 * active count and the swap state. */
#include "server/srv_server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autocompress/clock.h"
#include "autocompress/host.h"
#include "autocompress/probe.h"


/* ---- references (server lock held) ---- */

void srv_model_ref_locked(srv_model *m) { m->refs++; }

void srv_model_unref_locked(srv_server *s, srv_model *m)
{
    if (!m || --m->refs > 0)
        return;
    srv_model_free(m);
    s->live_models--;
    pthread_cond_broadcast(&s->state_cv);
}

void srv_server_release_model(srv_server *s, srv_model *m)
{
    pthread_mutex_lock(&s->mu);
    srv_model_unref_locked(s, m);
    pthread_mutex_unlock(&s->mu);
}

void srv_server_release_request(srv_server *s, srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    int last = --req->refs <= 0;
    pthread_mutex_unlock(&req->mu);
    if (!last)
        return;
    srv_server_release_model(s, req->model);
    srv_request_free(req);
}

/* ---- life cycle ---- */

ac_status srv_server_create(const srv_config *config, srv_metrics *metrics, srv_server **out)
{
    *out = NULL;
    srv_server *s = calloc(1, sizeof *s);
    if (!s)
        return ac_fail(AC_ERR_NOMEM, "out of memory for the server");
    s->cfg = *config;
    s->metrics = metrics;
    s->baseline_resident = ac_cpu_resident_bytes();
    int n = config->slots, q = config->max_queue > 0 ? config->max_queue : 1;
    s->cfg.max_queue = q;
    s->queue = calloc((size_t)q, sizeof *s->queue);
    if (!s->queue || srv_sched_init(s) != AC_OK) {
        srv_server_free(s);
        return ac_fail(AC_ERR_NOMEM, "out of memory for %d slots", n);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->swap_mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->state_cv, NULL);
    const char *tables = config->profile_tables[0] ? config->profile_tables : config->control.tables;
    if (tables[0]) {
        ac_status st = ac_cost_tables_read(tables, &s->profile_tables); /* its message names the file */
        if (st != AC_OK) {
            srv_server_free(s);
            return st;
        }
    }
    if (pthread_create(&s->thread, NULL, srv_sched_main, s) != 0) {
        srv_server_free(s);
        return ac_fail(AC_ERR_INTERNAL, "cannot start the scheduler thread");
    }
    s->thread_started = 1;
    *out = s;
    return AC_OK;
}

void srv_server_stop(srv_server *s)
{
    if (!s || !s->thread_started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->work_cv);
    pthread_cond_broadcast(&s->state_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_started = 0;
    srv_sched_abort(s);
}

void srv_server_free(srv_server *s)
{
    if (!s)
        return;
    srv_server_stop(s);
    srv_sched_release(s);
    if (s->current)
        srv_model_unref_locked(s, s->current);
    free(s->queue);
    ac_cost_tables_free(s->profile_tables);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->swap_mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->state_cv);
    free(s);
}

const srv_config *srv_server_config(const srv_server *s) { return &s->cfg; }

static void publish_model(srv_server *s, srv_model *m)
{
    /* without a profile (out of memory) the model serves all the same */
    if (!m->live &&
        ac_live_profile_create(ac_model_arch(m->model), s->cfg.profile_every, &m->live) != AC_OK)
        m->live = NULL;
    m->refs = 1;
    m->generation = ++s->generation;
    s->live_models++;
    srv_model *old = s->current;
    s->current = m;
    if (old)
        srv_model_unref_locked(s, old);
    pthread_cond_broadcast(&s->work_cv); /* idle caches of the old model go now */
    pthread_cond_broadcast(&s->state_cv);
}

ac_status srv_server_load_initial(srv_server *s, const char *path)
{
    srv_model *m = NULL;
    ac_status st = srv_model_load(path, s->cfg.model_name, s->cfg.device, s->cfg.weights, &m);
    if (st != AC_OK)
        return st;
    pthread_mutex_lock(&s->mu);
    publish_model(s, m);
    pthread_mutex_unlock(&s->mu);
    return AC_OK;
}

int srv_server_ready(srv_server *s)
{
    pthread_mutex_lock(&s->mu);
    int ready = s->current != NULL && !s->draining;
    pthread_mutex_unlock(&s->mu);
    return ready;
}

srv_model *srv_server_acquire_model(srv_server *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->draining && !s->stopping)
        pthread_cond_wait(&s->state_cv, &s->mu);
    srv_model *m = s->stopping ? NULL : s->current;
    if (m)
        srv_model_ref_locked(m);
    pthread_mutex_unlock(&s->mu);
    return m;
}

int srv_server_submit(srv_server *s, srv_request *req)
{
    pthread_mutex_lock(&s->mu);
    int ok = !s->stopping && s->q_len < s->cfg.max_queue;
    if (ok) {
        req->refs = 2; /* the HTTP thread and the scheduler */
        req->t_arrival = req->t_arrival > 0 ? req->t_arrival : ac_monotonic_s();
        s->queue[(s->q_head + s->q_len) % s->cfg.max_queue] = req;
        s->q_len++;
        pthread_cond_signal(&s->work_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ---- swaps ---- */

static void record_swap(srv_server *s, const srv_swap_record *r)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_history == SRV_SWAP_HISTORY) {
        memmove(s->history, s->history + 1, (SRV_SWAP_HISTORY - 1) * sizeof *s->history);
        s->n_history--;
    }
    s->history[s->n_history++] = *r;
    pthread_mutex_unlock(&s->mu);
    srv_metrics_swap(s->metrics, r->ok);
}

/* Drain first: stop admitting, let every request finish, free the model, then load. On
 * a failed load the old checkpoint is loaded again. */
static ac_status swap_draining(srv_server *s, const char *path, srv_model **loaded)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    while ((s->active > 0 || s->q_len > 0) && !s->stopping)
        pthread_cond_wait(&s->state_cv, &s->mu);
    char old_path[SRV_PATH_MAX] = "";
    srv_model *old = s->current;
    if (old)
        snprintf(old_path, sizeof old_path, "%s", old->path);
    s->current = NULL;
    if (old)
        srv_model_unref_locked(s, old);
    pthread_cond_broadcast(&s->work_cv);
    while (s->live_models > 0 && !s->stopping)
        pthread_cond_wait(&s->state_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    ac_status st = srv_model_load(path, s->cfg.model_name, s->cfg.device, s->cfg.weights, loaded);
    if (st != AC_OK && old_path[0]) {
        char message[512];
        snprintf(message, sizeof message, "%s", ac_error_message());
        srv_model *back = NULL;
        if (srv_model_load(old_path, s->cfg.model_name, s->cfg.device, s->cfg.weights, &back) == AC_OK) {
            pthread_mutex_lock(&s->mu);
            publish_model(s, back);
            pthread_mutex_unlock(&s->mu);
        }
        st = ac_fail(st, "%s%s", message, back ? "" : "; reloading the previous model failed too: no model serves");
    }
    pthread_mutex_lock(&s->mu);
    if (st == AC_OK)
        publish_model(s, *loaded);
    s->draining = 0;
    pthread_cond_broadcast(&s->state_cv);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int srv_server_swap(srv_server *s, const char *path, int drain_first, srv_swap_record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (pthread_mutex_trylock(&s->swap_mu) != 0) {
        snprintf(rec->message, sizeof rec->message, "another swap is in progress");
        return 409;
    }
    double t0 = ac_monotonic_s();
    rec->at = (double)time(NULL);
    rec->drain_first = drain_first;
    snprintf(rec->path, sizeof rec->path, "%s", path);
    srv_model *m = NULL;
    ac_status st;
    if (drain_first) {
        st = swap_draining(s, path, &m);
    } else {
        st = srv_model_load(path, s->cfg.model_name, s->cfg.device, s->cfg.weights, &m);
        if (st == AC_OK) {
            pthread_mutex_lock(&s->mu);
            publish_model(s, m);
            pthread_mutex_unlock(&s->mu);
        }
    }
    rec->ok = st == AC_OK;
    rec->seconds = ac_monotonic_s() - t0;
    snprintf(rec->message, sizeof rec->message, "%s", st == AC_OK ? "swapped" : ac_error_message());
    record_swap(s, rec);
    pthread_mutex_unlock(&s->swap_mu);
    return st == AC_OK ? 200 : st == AC_ERR_NOMEM ? 507 : 422;
}

/* ---- introspection ---- */

srv_gauges srv_server_gauges(srv_server *s)
{
    pthread_mutex_lock(&s->mu);
    srv_gauges g = {s->active, s->q_len, s->current ? s->current->generation : 0, s->current && !s->draining};
    pthread_mutex_unlock(&s->mu);
    return g;
}

void srv_server_model_name(srv_server *s, char *name, size_t size)
{
    pthread_mutex_lock(&s->mu);
    snprintf(name, size, "%s", s->current ? s->current->name : (s->cfg.model_name[0] ? s->cfg.model_name : "none"));
    pthread_mutex_unlock(&s->mu);
}

void srv_server_status(srv_server *s, srv_status *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    srv_model *m = s->current;
    if (m) {
        out->has_model = 1;
        snprintf(out->name, sizeof out->name, "%s", m->name);
        snprintf(out->path, sizeof out->path, "%s", m->path);
        snprintf(out->architecture, sizeof out->architecture, "%s", m->summary);
        out->parameters = m->params;
        out->generation = m->generation;
        out->loaded_at = m->loaded_at;
    }
    out->state = s->draining ? "draining" : m ? "serving" : "loading";
    out->slots = s->cfg.slots;
    out->active_slots = s->active;
    out->queue_depth = s->q_len;
    out->models_loaded = s->live_models;
    out->n_swaps = s->n_history;
    memcpy(out->swaps, s->history, (size_t)s->n_history * sizeof *s->history);
    pthread_mutex_unlock(&s->mu);
}

int srv_server_profile(srv_server *s, char **json, char *why, size_t size)
{
    *json = NULL;
    pthread_mutex_lock(&s->mu);
    srv_model *m = s->current;
    if (m)
        srv_model_ref_locked(m);
    pthread_mutex_unlock(&s->mu);
    if (!m || !m->live) {
        snprintf(why, size, "%s", m ? "the served model has no profile (out of memory when it was loaded)"
                                    : "no model is being served");
        if (m)
            srv_server_release_model(s, m);
        return 503;
    }
    *json = ac_live_profile_json(m->live, s->profile_tables);
    srv_server_release_model(s, m);
    return 200;
}

void srv_server_set_profile_every(srv_server *s, int every)
{
    pthread_mutex_lock(&s->mu);
    s->cfg.profile_every = every;
    if (s->current && s->current->live)
        ac_live_profile_set_every(s->current->live, every);
    pthread_mutex_unlock(&s->mu);
}
