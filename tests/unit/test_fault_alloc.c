/* Allocation failure at every allocation site reachable from model loading, request
 * parsing and a hot swap (the server's model loading: tokenizer, weights, runtime). The
 * library's malloc, calloc, realloc, strdup and posix_memalign (the CPU backend's dense
 * buffers: the weights) are wrapped at link time (-Wl,--wrap, see
 * tests/CMakeLists.txt): a first run records every call site, then the operation runs
 * once per site with that site's first call failing. Each run must end in a clean error
 * (a status and a message) or succeed by a fallback; never crash, and (under ASan, whose
 * leak check runs at exit) leak nothing. After a failed swap the old model still serves.
 * (cJSON, libconfig and OpenBLAS allocate inside their own libraries, unwrapped.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/model.h"
#include "server/srv.h"

#define PROSE AC_SOURCE_DIR "/examples/parent/prose"
#define CODE AC_SOURCE_DIR "/examples/parent/code"
#define PUZZLE AC_SOURCE_DIR "/tests/fixtures/nemotron_h/puzzle_hetero"

enum { MAX_SITES = 4096 };

static void *sites[MAX_SITES];
static int n_sites, recording, site_overflow;
static void *fail_site;  /* the first call from here fails (then it is cleared) */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
int __real_posix_memalign(void **p, size_t align, size_t n);

/* Whether the call from `site` fails; records the site on the recording run. */
static int inject(void *site)
{
    if (recording) {
        int i = 0;
        while (i < n_sites && sites[i] != site)
            i++;
        if (i == n_sites) {
            if (n_sites < MAX_SITES)
                sites[n_sites++] = site;
            else
                site_overflow = 1;
        }
        return 0;
    }
    if (fail_site && site == fail_site) {
        fail_site = NULL;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n) { return inject(__builtin_return_address(0)) ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return inject(__builtin_return_address(0)) ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return inject(__builtin_return_address(0)) ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return inject(__builtin_return_address(0)) ? NULL : __real_strdup(s); }
int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    return inject(__builtin_return_address(0)) ? ENOMEM : __real_posix_memalign(p, align, n);
}

typedef ac_status (*operation)(void *ctx);

/* Records the operation's sites, then fails each in turn: how many runs ended in an
 * error. `name` labels the printout. */
static int walk(const char *name, operation op, void *ctx)
{
    n_sites = 0;
    site_overflow = 0;
    recording = 1;
    ac_status st = op(ctx);
    recording = 0;
    if (st != AC_OK)
        fail_msg("%s: fails without an injected failure: %s", name, ac_error_message());
    assert_false(site_overflow);
    assert_true(n_sites > 0);
    int errors = 0, recorded = n_sites;
    void *list[MAX_SITES];
    memcpy(list, sites, (size_t)recorded * sizeof *list);
    for (int i = 0; i < recorded; i++) {
        fail_site = list[i];
        st = op(ctx);
        fail_site = NULL;
        if (st != AC_OK) {
            const char *message = ac_error_message();
            if (!message || !message[0])
                fail_msg("%s: site %d of %d failed without a message", name, i + 1, recorded);
            errors++;
        }
    }
    printf("%s: %d allocation sites, %d runs ended in an error, %d recovered\n", name, recorded, errors,
           recorded - errors);
    return errors;
}

static ac_status load_model(void *ctx)
{
    ac_model *m = NULL;
    ac_status st = ac_model_load((const char *)ctx, &m);
    ac_model_free(m);
    return st;
}

static void test_model_load(void **state)
{
    (void)state;
    assert_true(walk("ac_model_load (puzzle fixture)", load_model, PUZZLE) > 0);
}

typedef struct {
    srv_model *model;
    srv_config config;
} parse_ctx;

static ac_status parse_request(void *ctx)
{
    parse_ctx *p = ctx;
    static const char body[] = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, \"stop\": [\"\\n\", \"END\"], "
                               "\"logprobs\": 2, \"echo\": true, \"model\": \"prose\"}";
    srv_error err;
    memset(&err, 0, sizeof err);
    srv_request *req = srv_api_parse_completion(body, sizeof body - 1, p->model, &p->config, &err);
    if (req) {
        srv_request_free(req);
        return AC_OK;
    }
    return ac_fail(err.status == 500 ? AC_ERR_NOMEM : AC_ERR_INVALID, "%s", err.message);
}

static void test_request_parse(void **state)
{
    (void)state;
    parse_ctx p;
    srv_config_defaults(&p.config);
    assert_int_equal(srv_model_load(PROSE, NULL, "cpu", AC_DTYPE_F32, &p.model), AC_OK);
    assert_true(walk("srv_api_parse_completion", parse_request, &p) > 0);
    srv_model_free(p.model);
}

typedef struct {
    srv_server *server;
    int on_code; /* the served model is the code parent */
} swap_ctx;

static int generation_of(srv_server *s)
{
    srv_gauges g = srv_server_gauges(s);
    return g.generation;
}

/* A swap to the other parent (the server's model loading: tokenizer, weights, runtime). */
static ac_status swap_to_the_other(void *ctx)
{
    swap_ctx *w = ctx;
    int before = generation_of(w->server);
    srv_swap_record rec;
    if (srv_server_swap(w->server, w->on_code ? PROSE : CODE, 0, &rec) != 200) {
        if (generation_of(w->server) != before)
            return ac_fail(AC_ERR_INTERNAL, "a failed swap changed the served model");
        return ac_fail(AC_ERR_NOMEM, "swap failed: %s", rec.message);
    }
    w->on_code = !w->on_code;
    return AC_OK;
}

static void test_swap(void **state)
{
    (void)state;
    srv_config c;
    srv_config_defaults(&c);
    c.slots = 1;
    c.threads = 1;
    srv_metrics *metrics = NULL;
    swap_ctx w = {0};
    assert_int_equal(srv_metrics_create(c.slots, &metrics), AC_OK);
    assert_int_equal(srv_server_create(&c, metrics, &w.server), AC_OK);
    assert_int_equal(srv_server_load_initial(w.server, PROSE), AC_OK);
    assert_true(walk("srv_server_swap (tokenizer, weights, runtime)", swap_to_the_other, &w) > 0);
    /* after every failure the server still serves a request, on the model it had */
    srv_model *m = srv_server_acquire_model(w.server);
    assert_non_null(m);
    assert_string_equal(m->name, w.on_code ? "code" : "prose");
    srv_error err;
    static const char body[] = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, \"temperature\": 0}";
    srv_request *req = srv_api_parse_completion(body, sizeof body - 1, m, &c, &err);
    assert_non_null(req);
    req->model = m;
    assert_true(srv_server_submit(w.server, req));
    pthread_mutex_lock(&req->mu);
    while (req->finish == SRV_FINISH_NONE)
        pthread_cond_wait(&req->cv, &req->mu);
    pthread_mutex_unlock(&req->mu);
    assert_true(req->finish != SRV_FINISH_ERROR);
    assert_int_equal(req->n_generated, 4);
    srv_server_release_request(w.server, req);
    srv_server_stop(w.server);
    srv_server_free(w.server);
    srv_metrics_free(metrics);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_load),
        cmocka_unit_test(test_request_parse),
        cmocka_unit_test(test_swap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
