/* A full disk and short writes while the library writes JSON (tables, reports), a
 * safetensors file and a training checkpoint. The disk fills through RLIMIT_FSIZE (a
 * write past the limit fails with EFBIG, as one on a full disk fails with ENOSPC, for
 * write(2) and stdio alike); short writes come from a link-time wrapper of write(2) that
 * takes at most a few bytes a call. Each failed write must be a clear error naming the
 * file, leave the previous version intact, and leave no temporary file behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/model.h"
#include "autocompress/optim.h"
#include "autocompress/safetensors.h"
#include "util/json_util.h"
#include "train/checkpoint.h"

#define PUZZLE AC_SOURCE_DIR "/tests/fixtures/nemotron_h/puzzle_hetero"

static size_t short_writes; /* > 0: write(2) takes at most this many bytes a call */

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
    return __real_write(fd, buf, short_writes && n > short_writes ? short_writes : n);
}

static char dir[64];

static void limit_file_size(rlim_t bytes)
{
    struct rlimit r;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &r), 0);
    r.rlim_cur = bytes;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &r), 0);
}

static void unlimit_file_size(void) { limit_file_size(RLIM_INFINITY); }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_true(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* No NAME.tmp (file or directory) is left in the test directory. */
static void assert_no_temporaries(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp"))
            fail_msg("%s/%s was left behind", dir, e->d_name);
    closedir(d);
}

static void expect_write_error(ac_status st, const char *path_part)
{
    assert_int_equal(st, AC_ERR_IO);
    const char *m = ac_error_message();
    if (!strstr(m, path_part) || !strstr(m, "too large"))
        fail_msg("the error does not name the file and the cause: %s", m);
}

static char *text_of(size_t n, char fill)
{
    char *t = malloc(n + 1);
    memset(t, fill, n);
    t[n] = 0;
    return t;
}

static void test_text_file(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/tables.json", dir);
    char *v1 = text_of(3000, 'a'), *v2 = text_of(6000, 'b');
    assert_int_equal(ac_write_text_file(path, v1), AC_OK);
    /* the disk fills: at no byte, halfway, one byte short */
    rlim_t limits[] = {0, 1, 3000, 5999};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        limit_file_size(limits[i]);
        ac_status st = ac_write_text_file(path, v2);
        unlimit_file_size();
        expect_write_error(st, "tables.json");
        size_t len;
        char *now = slurp(path, &len);
        assert_string_equal(now, v1);
        free(now);
        assert_no_temporaries();
    }
    /* writes that take a few bytes at a time still write it all */
    short_writes = 7;
    assert_int_equal(ac_write_text_file(path, v2), AC_OK);
    short_writes = 0;
    size_t len;
    char *now = slurp(path, &len);
    assert_string_equal(now, v2);
    free(now);
    free(v1);
    free(v2);
}

static void test_safetensors(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    float a[256], b[512];
    for (int i = 0; i < 256; i++)
        a[i] = (float)i;
    for (int i = 0; i < 512; i++)
        b[i] = -(float)i;
    int64_t shape_a[1] = {256}, shape_b[1] = {512};
    ac_safetensors_writer *w = NULL;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "a", AC_DTYPE_F32, 1, shape_a, a), AC_OK);
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
    size_t len1;
    char *v1 = slurp(path, &len1);

    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "b", AC_DTYPE_F32, 1, shape_b, b), AC_OK);
    limit_file_size(1000);
    ac_status st = ac_safetensors_writer_write(w, path);
    unlimit_file_size();
    expect_write_error(st, "weights.safetensors");
    size_t len;
    char *now = slurp(path, &len);
    assert_true(len == len1 && !memcmp(now, v1, len));
    free(now);
    assert_no_temporaries();
    short_writes = 5;
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    short_writes = 0;
    ac_safetensors_writer_free(w);
    ac_safetensors *st2 = NULL;
    assert_int_equal(ac_safetensors_open(path, &st2), AC_OK);
    const ac_tensor_view *v = ac_safetensors_find(st2, "b");
    assert_non_null(v);
    assert_int_equal(memcmp(v->data, b, sizeof b), 0);
    ac_safetensors_close(st2);
    free(v1);
}

static void test_checkpoint(void **state)
{
    (void)state;
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", dir);
    ac_model *model = NULL;
    assert_int_equal(ac_model_load(PUZZLE, &model), AC_OK);
    ac_adamw_params ap = ac_adamw_default_params();
    ac_adamw *opt = NULL;
    assert_int_equal(ac_adamw_create(model, &ap, &opt), AC_OK);
    ac_train_state s1 = {.step = 10, .tokens = 1000};
    snprintf(s1.run, sizeof s1.run, "fault test");
    assert_int_equal(ac_checkpoint_save(ckpt, model, opt, &s1), AC_OK);
    /* the next save hits a full disk in the weights, then (a limit the weights fit
     * under) in the moments, which are twice their size */
    char path[256];
    struct stat weights;
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    assert_int_equal(stat(path, &weights), 0);
    rlim_t limits[] = {100, (rlim_t)weights.st_size + 4096};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        ac_train_state s2 = s1;
        s2.step = 20 + (int)i;
        limit_file_size(limits[i]);
        ac_status st = ac_checkpoint_save(ckpt, model, opt, &s2);
        unlimit_file_size();
        if (st == AC_OK) /* the limit was above every file of the checkpoint */
            fail_msg("a save under a %llu-byte limit succeeded", (unsigned long long)limits[i]);
        assert_int_equal(st, AC_ERR_IO);
        assert_non_null(strstr(ac_error_message(), "checkpoint"));
        ac_model *back = NULL;
        ac_train_state got;
        assert_int_equal(ac_checkpoint_load(ckpt, &back, &got), AC_OK);
        assert_int_equal(got.step, 10);
        ac_model_free(back);
        assert_no_temporaries();
    }
    ac_adamw_free(opt);
    ac_model_free(model);
}

static int setup(void **state)
{
    (void)state;
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    snprintf(dir, sizeof dir, "/tmp/ac-fault-write-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_file),
        cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
