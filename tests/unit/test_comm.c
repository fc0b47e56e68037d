/* The communicator. Run alone: the single process (NULL and "single" alike), backend
 * names, shards, and the errors for MPI asked for where there is none. Run under
 * `mpirun -np N` (ctest does, N = 2 and 3, when MPI was built): sums that equal the
 * rank-order sum bit for bit, across chunk boundaries and for counts below N, broadcast,
 * barrier and the settings check. With AC_TEST_COMM=nccl (ctest's test_comm_nccl2, when
 * NCCL was built) the same over NCCL, whose ring order makes the sums equal on every rank
 * and close to the rank-order sum; it skips (77) where there is no GPU. A sum of buffers in
 * a device's memory (the guarded test backend, which the host cannot touch) goes through
 * host staging to the same result. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/comm.h"
#include "comm/comm_device.h"
#include "comm/comm_internal.h"
#include "guarded_backend.h"

static void assert_error_mentions(ac_status st, const char *text)
{
    assert_int_not_equal(st, AC_OK);
    if (!strstr(ac_error_message(), text))
        fail_msg("error '%s' does not mention '%s'", ac_error_message(), text);
    ac_clear_error();
}

/* ---- one process ---- */

static void test_null_is_one_process(void **state)
{
    (void)state;
    assert_int_equal(ac_comm_rank(NULL), 0);
    assert_int_equal(ac_comm_size(NULL), 1);
    assert_int_equal(ac_comm_ranks_on_host(NULL), 1);
    assert_string_equal(ac_comm_backend_name(NULL), "single");
    float f[3] = {1.5f, -2.0f, 3.25f};
    double d = 7.0;
    assert_int_equal(ac_comm_allreduce_f32(NULL, f, 3), AC_OK);
    assert_int_equal(ac_comm_allreduce_f64(NULL, &d, 1), AC_OK);
    assert_true(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f && d == 7.0);
    assert_int_equal(ac_comm_broadcast(NULL, f, sizeof f, 0), AC_OK);
    assert_int_equal(ac_comm_barrier(NULL), AC_OK);
    assert_int_equal(ac_comm_check_same(NULL, "settings", "anything"), AC_OK);
    int b, e;
    ac_comm_shard(NULL, 7, &b, &e);
    assert_int_equal(b, 0);
    assert_int_equal(e, 7);
}

static void test_single_backend(void **state)
{
    (void)state;
    ac_comm_params p = ac_comm_default_params();
    p.kind = AC_COMM_SINGLE;
    ac_comm *c = NULL;
    assert_int_equal(ac_comm_init(&p, &c), AC_OK);
    assert_int_equal(ac_comm_size(c), 1);
    assert_string_equal(ac_comm_backend_name(c), "single");
    double d[2] = {1, 2};
    assert_int_equal(ac_comm_allreduce_f64(c, d, 2), AC_OK);
    assert_true(d[0] == 1 && d[1] == 2);
    assert_error_mentions(ac_comm_broadcast(c, d, sizeof d, 1), "broadcast from rank 1 of 1");
    ac_comm_free(c);
}

static void test_kinds_and_params(void **state)
{
    (void)state;
    ac_comm_kind k;
    assert_int_equal(ac_comm_kind_parse("nccl", &k), AC_OK);
    assert_int_equal(k, AC_COMM_NCCL);
    assert_int_equal(ac_comm_kind_parse("auto", &k), AC_OK);
    assert_int_equal(k, AC_COMM_AUTO);
    assert_error_mentions(ac_comm_kind_parse("gloo", &k), "unknown backend 'gloo'");
    ac_comm_params p = ac_comm_default_params();
    assert_true(p.timeout_s > 0);
    p.timeout_s = 0;
    ac_comm *c = NULL;
    assert_error_mentions(ac_comm_init(&p, &c), "timeout must be positive");
    assert_null(c);
}

static void test_shards_cover_rows_in_rank_order(void **state)
{
    (void)state;
    for (int size = 1; size <= 5; size++)
        for (int rows = 0; rows <= 12; rows++) {
            int next = 0;
            for (int rank = 0; rank < size; rank++) {
                ac_comm c = {.rank = rank, .size = size};
                int b, e;
                ac_comm_shard(&c, rows, &b, &e);
                assert_int_equal(b, next);
                assert_true(e - b == rows / size || e - b == rows / size + 1);
                next = e;
            }
            assert_int_equal(next, rows);
        }
}

static void test_missing_mpi_is_named(void **state)
{
    (void)state;
    ac_comm_params p = ac_comm_default_params();
    ac_comm *c = NULL;
    p.kind = AC_COMM_MPI;
#ifdef AC_HAVE_MPI
    assert_error_mentions(ac_comm_init(&p, &c), "not started by mpirun");
#else
    assert_error_mentions(ac_comm_init(&p, &c), "built without MPI");
#endif
#ifndef AC_HAVE_NCCL
    p.kind = AC_COMM_NCCL;
    assert_error_mentions(ac_comm_init(&p, &c), "built without it");
#endif
    /* as if mpirun had started this process as one of 2 */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    p.kind = AC_COMM_SINGLE;
    assert_error_mentions(ac_comm_init(&p, &c), "mpirun started 2 ranks");
#ifndef AC_HAVE_MPI
    p.kind = AC_COMM_AUTO;
    assert_error_mentions(ac_comm_init(&p, &c), "started by mpirun (2 ranks) but this autocompress was built without");
#endif
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_null(c);
}

/* ---- under mpirun ---- */

static ac_comm *world;
static int on_nccl; /* NCCL sums: the same on every rank, in ring order */

static ac_status join(void)
{
    ac_comm_params p = ac_comm_default_params();
    p.kind = on_nccl ? AC_COMM_NCCL : AC_COMM_MPI;
    p.timeout_s = 60;
    return ac_comm_init(&p, &world);
}

static int leave_world(void **state)
{
    (void)state;
    ac_comm_free(world);
    return 0;
}

/* A value of rank r at index i whose sum depends on the order of the additions. */
static double value(int r, size_t i)
{
    static const double pattern[3] = {1e8, -1e8, 1.0};
    return pattern[(r + i) % 3] * (double)(1 + i % 5) + 0.001 * (double)r;
}

static void test_ranks(void **state)
{
    (void)state;
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    assert_true(n >= 2);
    assert_true(r >= 0 && r < n);
    assert_string_equal(ac_comm_backend_name(world), on_nccl ? "nccl" : "mpi");
    assert_int_equal(ac_comm_ranks_on_host(world), n); /* ctest starts them on this host */
}

static void check_sum_f32(size_t count)
{
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    float *buf = malloc((count + 1) * sizeof *buf);
    assert_non_null(buf);
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)value(r, i);
    assert_int_equal(ac_comm_allreduce_f32(world, buf, count), AC_OK);
    for (size_t i = 0; i < count; i++) {
        float want = (float)value(0, i), scale = fabsf(want);
        for (int k = 1; k < n; k++) {
            want += (float)value(k, i);
            scale += fabsf((float)value(k, i));
        }
        if (on_nccl ? fabsf(want - buf[i]) > 1e-6f * scale : memcmp(&want, &buf[i], sizeof want) != 0)
            fail_msg("f32 sum of %zu values, element %zu: %.9g, want %.9g (rank order)", count, i, buf[i], want);
    }
    free(buf);
}

static void check_sum_f64(size_t count)
{
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    double *buf = malloc((count + 1) * sizeof *buf);
    assert_non_null(buf);
    for (size_t i = 0; i < count; i++)
        buf[i] = value(r, i);
    assert_int_equal(ac_comm_allreduce_f64(world, buf, count), AC_OK);
    for (size_t i = 0; i < count; i++) {
        double want = value(0, i), scale = fabs(want);
        for (int k = 1; k < n; k++) {
            want += value(k, i);
            scale += fabs(value(k, i));
        }
        if (on_nccl ? fabs(want - buf[i]) > 1e-12 * scale : memcmp(&want, &buf[i], sizeof want) != 0)
            fail_msg("f64 sum of %zu values, element %zu: %.17g, want %.17g (rank order)", count, i, buf[i], want);
    }
    free(buf);
}

static void test_sums_in_rank_order(void **state)
{
    (void)state;
    /* fewer values than ranks, odd counts, and more than one chunk (4M values) */
    size_t counts[] = {1, 2, 3, 7, 1000, ((size_t)1 << 22) + 5};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        check_sum_f32(counts[i]);
        check_sum_f64(counts[i]);
    }
}

/* The gradients of a run on a device: summed through host staging, the host sum's bits. */
static void test_sums_through_a_device(void **state)
{
    (void)state;
    enum { COUNT = 1003 };
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    float host[COUNT], staging[COUNT], back[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        host[i] = (float)value(r, i);
    float *dev = guarded_backend.alloc(sizeof host);
    assert_non_null(dev);
    guarded_backend.copy(dev, host, sizeof host, AC_COPY_HOST_TO_DEVICE);
    assert_int_equal(ac_comm_allreduce_device_f32(world, &guarded_backend, dev, COUNT, staging), AC_OK);
    assert_int_equal(ac_comm_allreduce_f32(world, host, COUNT), AC_OK);
    guarded_backend.copy(back, dev, sizeof back, AC_COPY_DEVICE_TO_HOST);
    assert_memory_equal(back, host, sizeof back);
    int changed = 0; /* the ranks' values were summed */
    for (size_t i = 0; i < COUNT; i++)
        changed += host[i] != (float)value(r, i);
    assert_true(n < 2 || changed > COUNT / 2);
    guarded_backend.free(dev);
}

static void test_broadcast_and_barrier(void **state)
{
    (void)state;
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    for (int root = 0; root < n; root++) {
        char buf[100];
        memset(buf, r == root ? 'a' + root : '?', sizeof buf);
        assert_int_equal(ac_comm_broadcast(world, buf, sizeof buf, root), AC_OK);
        for (size_t i = 0; i < sizeof buf; i++)
            assert_int_equal(buf[i], 'a' + root);
    }
    assert_int_equal(ac_comm_barrier(world), AC_OK);
    assert_error_mentions(ac_comm_broadcast(world, &r, sizeof r, n), "broadcast from rank");
}

static void test_settings_check(void **state)
{
    (void)state;
    int n = ac_comm_size(world), r = ac_comm_rank(world);
    assert_int_equal(ac_comm_check_same(world, "settings", "lr=0.001 batch=8"), AC_OK);
    /* the last rank differs: every rank fails, naming it */
    char text[64], who[32];
    snprintf(text, sizeof text, "lr=%s", r == n - 1 ? "0.002" : "0.001");
    snprintf(who, sizeof who, "rank %d", n - 1);
    ac_status st = ac_comm_check_same(world, "settings", text);
    assert_int_not_equal(st, AC_OK);
    assert_non_null(strstr(ac_error_message(), "settings differ between ranks"));
    assert_non_null(strstr(ac_error_message(), who));
    assert_non_null(strstr(ac_error_message(), "lr=0.001"));
    ac_clear_error();
    /* and the communicator still works */
    check_sum_f64(5);
}

int main(void)
{
    if (ac_comm_launched_ranks() > 1) {
        const char *kind = getenv("AC_TEST_COMM");
        on_nccl = kind && !strcmp(kind, "nccl");
        ac_status st = join();
        if (st == AC_ERR_DEVICE) { /* no GPU, or not one for each rank */
            printf("SKIP: %s\n", ac_error_message());
            return 77;
        }
        if (st != AC_OK) {
            fprintf(stderr, "cannot join: %s\n", ac_error_message());
            return 1;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_ranks),
            cmocka_unit_test(test_sums_in_rank_order),
            cmocka_unit_test(test_sums_through_a_device),
            cmocka_unit_test(test_broadcast_and_barrier),
            cmocka_unit_test(test_settings_check),
        };
        return cmocka_run_group_tests(tests, NULL, leave_world);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_is_one_process),
        cmocka_unit_test(test_single_backend),
        cmocka_unit_test(test_kinds_and_params),
        cmocka_unit_test(test_shards_cover_rows_in_rank_order),
        cmocka_unit_test(test_missing_mpi_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
