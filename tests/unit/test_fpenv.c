/* Subnormal floats are flushed to zero on every thread that computes: by a forward of the
 * runtime on the thread that calls it and its whole OpenMP team, and by
 * ac_k_flush_denormals directly. A thread that never ran a forward keeps IEEE subnormals,
 * which is what shows the setting is the runtime's doing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

#include "autocompress/model.h"
#include "autocompress/runtime.h"
#include "kernels/kernels.h"

#define FIXTURES AC_SOURCE_DIR "/tests/fixtures/nemotron_h"

/* 1 when this thread flushes both subnormal results and subnormal inputs to zero. */
static int flushes(void)
{
    volatile float tiny = FLT_MIN, quarter = 0.25f, one = 1.0f;
    volatile float made = tiny * quarter; /* FTZ: a subnormal result */
    volatile float sub = made;
    volatile float fed = sub * one;       /* DAZ: a subnormal input */
    return made == 0.0f && fed == 0.0f;
}

/* Threads of the calling thread's OpenMP team that flush (the caller included). */
static int team_flushing(int *team)
{
    int n = 0, size = 0;
#pragma omp parallel reduction(+ : n)
    {
        n += flushes();
#pragma omp single
        size = omp_get_num_threads();
    }
    *team = size;
    return n;
}

typedef struct {
    int before, after, team, flushing;
} observed;

static void *forward_in_a_fresh_thread(void *arg)
{
    observed *o = arg;
    o->before = flushes();
    ac_model *m = NULL;
    ac_runtime *rt = NULL;
    ac_cache *cache = NULL;
    if (ac_model_load(FIXTURES "/hybrid_f32", &m) != AC_OK || ac_runtime_create(m, &rt) != AC_OK ||
        ac_cache_create(m, &cache) != AC_OK)
        return NULL;
    int32_t ids[3] = {3, 1, 4}, counts[1] = {3};
    const int32_t *tokens[1] = {ids};
    ac_cache *caches[1] = {cache};
    ac_batch b = {1, tokens, counts, caches};
    float *logits = malloc((size_t)ac_model_arch(m)->vocab * sizeof *logits);
    if (logits && ac_runtime_forward(rt, &b, AC_LOGITS_LAST, logits) == AC_OK) {
        o->after = flushes();
        o->flushing = team_flushing(&o->team);
    }
    free(logits);
    ac_cache_free(cache);
    ac_runtime_free(rt);
    ac_model_free(m);
    return NULL;
}

static void test_a_forward_flushes_its_thread_and_team(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    observed o = {-1, -1, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, forward_in_a_fresh_thread, &o), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(o.before, 0); /* IEEE behaviour until the first forward */
    assert_int_equal(o.after, 1);
    assert_int_equal(o.team, 2);
    assert_int_equal(o.flushing, 2);
}

static void test_flush_covers_the_callers_team(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    int team = 0;
    assert_int_equal(flushes(), 0); /* this thread has run no forward */
    ac_k_flush_denormals();
    assert_int_equal(flushes(), 1);
    int flushing = team_flushing(&team);
    assert_int_equal(team, 2);
    assert_int_equal(flushing, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_forward_flushes_its_thread_and_team),
        cmocka_unit_test(test_flush_covers_the_callers_team),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
