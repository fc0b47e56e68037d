/* Cost tables carry the fingerprint of what measured them. The machine's fingerprint
 * against /proc/cpuinfo read here; tables of this machine pass; another thread count,
 * device, weights, CPU or version is refused naming each field, and passes with
 * allow_foreign while still naming them; tables without a fingerprint are refused; the
 * fingerprint survives a JSON round trip; the tables cache's key changes with what
 * profiling depends on and only with that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/contract.h"
#include "autocompress/cost.h"

static const char *const contract_text =
    "name = \"fp\"; hardware = { device = \"cpu\"; threads = %d; weights = \"%s\"; };\n"
    "workload = { batch = 1; cached_tokens = 0; input_tokens = %d; output_tokens = 4; };\n"
    "targets = { latency_ms = %.1f; };\n"
    "search_space = { hidden_sizes = [16, 12]; mamba_heads = { values = [4, 2]; };\n"
    "  routed_experts = [4, 2]; routed_ffn = [8, 0]; shared_ffn = [8, 0]; };\n";

static void make_contract(ac_contract *c, int threads, const char *weights, int input_tokens, double latency_ms)
{
    char text[1024];
    snprintf(text, sizeof text, contract_text, threads, weights, input_tokens, latency_ms);
    assert_int_equal(ac_contract_parse_string(text, "test", c), AC_OK);
}

/* Tables as this machine would write them for `c`. */
static ac_cost_tables *tables_measured_here(const ac_contract *c)
{
    ac_cost_tables_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.contract, sizeof info.contract, "%s", c->name);
    info.workload = c->workload;
    info.weights = c->hardware.weights;
    info.threads = 1;
    info.has_fingerprint = 1;
    assert_int_equal(ac_cost_fingerprint_here(c, &info.fingerprint), AC_OK);
    ac_cost_tables *t = NULL;
    assert_int_equal(ac_cost_tables_create(&info, &t), AC_OK);
    return t;
}

static void test_fingerprint_reads_this_machine(void **state)
{
    (void)state;
    ac_contract c;
    make_contract(&c, 1, "f32", 8, 1.0);
    ac_cost_fingerprint fp;
    assert_int_equal(ac_cost_fingerprint_here(&c, &fp), AC_OK);
    /* the model name as the kernel reports it, read independently */
    FILE *f = fopen("/proc/cpuinfo", "r");
    assert_non_null(f);
    char line[1024], model[256] = "unknown";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':') + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(model, sizeof model, "%s", v);
            break;
        }
    fclose(f);
    assert_string_equal(fp.cpu_model, model);
    assert_string_equal(fp.device, "cpu");
    assert_int_equal(fp.threads, 1);
    assert_int_equal(fp.weights, AC_DTYPE_F32);
    assert_true(fp.version[0] != '\0');
    assert_string_equal(fp.gpu_name, "");
    /* all cores: the contract's 0 resolved to what runs here */
    make_contract(&c, 0, "f32", 8, 1.0);
    assert_int_equal(ac_cost_fingerprint_here(&c, &fp), AC_OK);
    assert_int_equal(fp.threads, (int)sysconf(_SC_NPROCESSORS_ONLN));
}

static void test_same_machine_passes(void **state)
{
    (void)state;
    ac_contract c;
    make_contract(&c, 1, "f32", 8, 1.0);
    ac_cost_tables *t = tables_measured_here(&c);
    char differs[1024];
    assert_int_equal(ac_cost_tables_check_machine(t, "t.json", &c, 0, differs, sizeof differs), AC_OK);
    assert_string_equal(differs, "");
    /* the targets do not enter: another latency target, the same tables */
    make_contract(&c, 1, "f32", 8, 5.0);
    assert_int_equal(ac_cost_tables_check_machine(t, "t.json", &c, 0, differs, sizeof differs), AC_OK);
    ac_cost_tables_free(t);
}

/* Checks that tables measured for `measured` are refused for `used`, naming `field`
 * (and the tables' path), and pass with allow_foreign, still naming it. */
static void expect_refused(const ac_contract *measured, const ac_cost_tables *t, const ac_contract *used,
                           const char *field)
{
    (void)measured;
    char differs[1024];
    assert_int_equal(ac_cost_tables_check_machine(t, "t.json", used, 0, differs, sizeof differs), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), field));
    assert_non_null(strstr(ac_error_message(), "t.json"));
    assert_non_null(strstr(ac_error_message(), "--foreign-tables"));
    assert_int_equal(ac_cost_tables_check_machine(t, "t.json", used, 1, differs, sizeof differs), AC_OK);
    assert_non_null(strstr(differs, field));
}

static void test_other_hardware_is_refused(void **state)
{
    (void)state;
    ac_contract c, other;
    make_contract(&c, 1, "f32", 8, 1.0);
    ac_cost_tables *t = tables_measured_here(&c);

    make_contract(&other, 1, "bf16", 8, 1.0);
    expect_refused(&c, t, &other, "weights");

    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
        make_contract(&other, 2, "f32", 8, 1.0);
        expect_refused(&c, t, &other, "threads: tables 1, here 2");
    }

    make_contract(&other, 1, "f32", 8, 1.0);
    other.hardware.kind = AC_DEVICE_CUDA;
    expect_refused(&c, t, &other, "device: tables \"cpu\", here \"cuda\"");

    ac_cost_tables_info info = *ac_cost_tables_get_info(t);
    snprintf(info.fingerprint.cpu_model, sizeof info.fingerprint.cpu_model, "Some Other CPU");
    snprintf(info.fingerprint.version, sizeof info.fingerprint.version, "0.0.0-old");
    info.fingerprint.method = 1;
    ac_cost_tables_set_info(t, &info);
    char differs[1024];
    expect_refused(&c, t, &c, "cpu_model: tables \"Some Other CPU\"");
    assert_int_equal(ac_cost_tables_check_machine(t, "t.json", &c, 1, differs, sizeof differs), AC_OK);
    assert_non_null(strstr(differs, "version: tables \"0.0.0-old\""));
    assert_non_null(strstr(differs, "method: tables 1, here 2"));

    info.has_fingerprint = 0;
    ac_cost_tables_set_info(t, &info);
    expect_refused(&c, t, &c, "fingerprint");
    ac_cost_tables_free(t);
}

static void test_fingerprint_round_trip(void **state)
{
    (void)state;
    ac_contract c;
    make_contract(&c, 1, "bf16", 8, 1.0);
    ac_cost_tables *t = tables_measured_here(&c);
    ac_cost_tables_info info = *ac_cost_tables_get_info(t);
    snprintf(info.fingerprint.gpu_name, sizeof info.fingerprint.gpu_name, "Card \"X\"");
    info.fingerprint.gpu_memory_bytes = 81559.0 * 1048576.0;
    snprintf(info.fingerprint.gpu_driver, sizeof info.fingerprint.gpu_driver, "12.4");
    snprintf(info.fingerprint.gpu_capability, sizeof info.fingerprint.gpu_capability, "9.0");
    ac_cost_tables_set_info(t, &info);
    char path[] = "/tmp/ac_fingerprint_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ac_cost_tables_write(t, path), AC_OK);
    ac_cost_tables *back = NULL;
    assert_int_equal(ac_cost_tables_read(path, &back), AC_OK);
    const ac_cost_fingerprint *a = &info.fingerprint, *b = &ac_cost_tables_get_info(back)->fingerprint;
    assert_true(ac_cost_tables_get_info(back)->has_fingerprint);
    assert_string_equal(a->version, b->version);
    assert_int_equal(a->method, b->method);
    assert_string_equal(a->device, b->device);
    assert_string_equal(a->cpu_model, b->cpu_model);
    assert_string_equal(a->cpu_isa, b->cpu_isa);
    assert_string_equal(a->blas_core, b->blas_core);
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->weights, b->weights);
    assert_string_equal(a->gpu_name, b->gpu_name);
    assert_true(a->gpu_memory_bytes == b->gpu_memory_bytes);
    assert_string_equal(a->gpu_driver, b->gpu_driver);
    assert_string_equal(a->gpu_capability, b->gpu_capability);
    unlink(path);
    ac_cost_tables_free(back);
    ac_cost_tables_free(t);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_cache_key_follows_what_profiling_reads(void **state)
{
    (void)state;
    char parent[] = "/tmp/ac_fp_parent_XXXXXX";
    assert_non_null(mkdtemp(parent));
    write_file(parent, "config.json", "{\"hidden_size\": 16}\n");
    ac_contract c;
    char base[512], again[512], other[512];
    make_contract(&c, 1, "f32", 8, 1.0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, base, sizeof base), AC_OK);
    assert_int_equal(strncmp(base, "/cache/fp-", 10), 0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, again, sizeof again), AC_OK);
    assert_string_equal(base, again);
    /* targets: not what profiling measures */
    make_contract(&c, 1, "f32", 8, 7.0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, again, sizeof again), AC_OK);
    assert_string_equal(base, again);
    /* workload, weights, sweeps, seed and the parent's files each give another key */
    make_contract(&c, 1, "f32", 9, 1.0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, other, sizeof other), AC_OK);
    assert_string_not_equal(base, other);
    make_contract(&c, 1, "bf16", 8, 1.0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, other, sizeof other), AC_OK);
    assert_string_not_equal(base, other);
    make_contract(&c, 1, "f32", 8, 1.0);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 4, 1, other, sizeof other), AC_OK);
    assert_string_not_equal(base, other);
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 2, other, sizeof other), AC_OK);
    assert_string_not_equal(base, other);
    write_file(parent, "model.safetensors", "weights");
    assert_int_equal(ac_cost_tables_cache_path("/cache", parent, &c, 5, 1, other, sizeof other), AC_OK);
    assert_string_not_equal(base, other);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", parent);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", parent);
    unlink(path);
    rmdir(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint_reads_this_machine),
        cmocka_unit_test(test_same_machine_passes),
        cmocka_unit_test(test_other_hardware_is_refused),
        cmocka_unit_test(test_fingerprint_round_trip),
        cmocka_unit_test(test_cache_key_follows_what_profiling_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
