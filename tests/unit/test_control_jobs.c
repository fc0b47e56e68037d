/* The pieces of a job that need no child: job.json written and read back field for field,
 * and a damaged one refused naming the field; job ids (they name directories: nothing but
 * "job-" and digits passes); the child's stderr lines (compress's stage line, JSON
 * progress, anything else ignored); a missed contract explained from measure.json; a
 * contract rewritten for a live workload (new workload, new targets, the rest kept; a bad
 * target refused by the contract parser); a jobs directory that a server left with a job
 * running reads it interrupted when opened again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/contract.h"
#include "autocompress/control.h"
#include "control/control_internal.h"

static char tmp_dir[] = "/tmp/ac_control_XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static ac_job_info sample_job(const char *id)
{
    ac_job_info j;
    memset(&j, 0, sizeof j);
    snprintf(j.id, sizeof j.id, "%s", id);
    snprintf(j.dir, sizeof j.dir, "%s/%s", tmp_dir, id);
    j.state = AC_JOB_MISSED;
    j.spec = ac_job_spec_default();
    snprintf(j.spec.parent, sizeof j.spec.parent, "/models/parent");
    snprintf(j.spec.data, sizeof j.spec.data, "/data");
    snprintf(j.spec.method, sizeof j.spec.method, "minitron++");
    j.spec.kd_tokens = 123456789012;
    j.spec.batch = 4;
    j.spec.swap_auto = 0;
    snprintf(j.spec.origin, sizeof j.spec.origin, "policy");
    snprintf(j.spec.reason, sizeof j.spec.reason, "p95 \"quoted\" over");
    snprintf(j.stage, sizeof j.stage, "distill");
    j.stage_index = 4;
    j.stage_count = 7;
    snprintf(j.task, sizeof j.task, "distill");
    snprintf(j.unit, sizeof j.unit, "tok");
    j.done = 1024;
    j.total = 4096;
    j.rate = 333.5;
    j.eta_s = -1;
    j.created_at = 1.7e9;
    j.started_at = 1.7e9 + 1;
    j.exit_code = 3;
    j.swapped = 0;
    snprintf(j.message, sizeof j.message, "measured to miss");
    return j;
}

static void test_job_round_trip(void **state)
{
    (void)state;
    ac_job_info j = sample_job("job-0007"), r;
    assert_int_equal(mkdir(j.dir, 0755), 0);
    assert_int_equal(ac_job_write(&j), AC_OK);
    assert_int_equal(ac_job_read(j.dir, &r), AC_OK);
    assert_string_equal(r.id, "job-0007");
    assert_int_equal(r.state, AC_JOB_MISSED);
    assert_string_equal(r.spec.method, "minitron++");
    assert_true(r.spec.kd_tokens == 123456789012);
    assert_int_equal(r.spec.batch, 4);
    assert_int_equal(r.spec.swap_auto, 0);
    assert_string_equal(r.spec.reason, "p95 \"quoted\" over");
    assert_string_equal(r.stage, "distill");
    assert_int_equal(r.stage_index, 4);
    assert_true(r.done == 1024 && r.total == 4096 && r.rate == 333.5 && r.eta_s == -1);
    assert_true(r.created_at == 1.7e9 && r.ended_at == 0);
    assert_int_equal(r.exit_code, 3);
    assert_string_equal(r.message, "measured to miss");

    char path[2048];
    snprintf(path, sizeof path, "%s/job.json", j.dir);
    write_file(path, "{\"id\": \"job-0007\", \"state\": \"dancing\"}");
    assert_int_equal(ac_job_read(j.dir, &r), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "dancing"));
    write_file(path, "{\"id\": \"job-0007\", \"state\": \"failed\", \"stage\": 5}");
    assert_int_equal(ac_job_read(j.dir, &r), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "\"stage\" must be a string"));
}

/* a directory whose job.json does not fit is refused (AC_ERR_INVALID; a read of the
 * truncated path would fail with AC_ERR_IO). The message names the path first, so its
 * end is cut at the error message's 1024 bytes. */
static void test_job_path_too_long(void **state)
{
    (void)state;
    char dir[AC_JOB_PATH_MAX + 16];
    memset(dir, 'd', sizeof dir - 1);
    dir[sizeof dir - 1] = '\0';
    ac_job_info r;
    assert_int_equal(ac_job_read(dir, &r), AC_ERR_INVALID);
    assert_memory_equal(ac_error_message(), dir, 64);
}

static void test_job_ids(void **state)
{
    (void)state;
    assert_true(ac_job_id_valid("job-0001"));
    assert_true(ac_job_id_valid("job-12345"));
    assert_false(ac_job_id_valid("job-"));
    assert_false(ac_job_id_valid("job-12a"));
    assert_false(ac_job_id_valid("../job-1"));
    assert_false(ac_job_id_valid("job-1/.."));
    assert_false(ac_job_id_valid("JOB-1"));
    assert_false(ac_job_id_valid("job-123456789012345678901234567890"));
}

static void test_child_lines(void **state)
{
    (void)state;
    ac_job_info j;
    memset(&j, 0, sizeof j);
    assert_int_equal(ac_job_parse_line("compress: stage 4/7 distill: knowledge distillation from the parent", &j), 1);
    assert_string_equal(j.stage, "distill");
    assert_int_equal(j.stage_index, 4);
    assert_int_equal(j.stage_count, 7);
    assert_true(j.eta_s == -1);
    assert_int_equal(ac_job_parse_line("{\"task\":\"distill\",\"done\":2048,\"total\":8192,\"unit\":\"tok\","
                                       "\"elapsed_s\":3,\"rate\":682.7,\"eta_s\":9.5,\"loss\":0.4,\"final\":false}",
                                       &j), 0);
    assert_string_equal(j.task, "distill");
    assert_string_equal(j.unit, "tok");
    assert_true(j.done == 2048 && j.total == 8192 && j.rate == 682.7 && j.eta_s == 9.5);
    assert_string_equal(j.stage, "distill"); /* progress does not move the stage */
    /* anything else leaves the job as it was */
    assert_int_equal(ac_job_parse_line("04:25:13.607 info  distill step 468/585", &j), 0);
    assert_int_equal(ac_job_parse_line("{\"not progress\": 1}", &j), 0);
    assert_int_equal(ac_job_parse_line("{broken", &j), 0);
    assert_int_equal(ac_job_parse_line("compress: stage x/7 distill:", &j), 0);
    assert_true(j.done == 2048);
    assert_string_equal(j.stage, "distill");
}

static void test_missed_reason(void **state)
{
    (void)state;
    ac_job_info j = sample_job("job-0008");
    char out[2048], message[512];
    snprintf(out, sizeof out, "%s/out", j.dir);
    assert_int_equal(mkdir(j.dir, 0755), 0);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(out, sizeof out, "%s/out/measure.json", j.dir);
    write_file(out, "{\"latency_ms\": {\"target\": 100, \"measured\": 120.5, \"pass\": false},"
                    " \"throughput_tok_s\": {\"measured\": 10, \"pass\": true},"
                    " \"memory_bytes\": {\"target\": 5e6, \"measured\": 4e6, \"pass\": true}}");
    ac_job_missed_reason(&j, message, sizeof message);
    assert_string_equal(message, "measured to miss its contract: latency_ms 120.5 against a target of 100");
}

static const char base_contract[] =
    "name = \"base\";\n"
    "hardware = { device = \"cpu\"; threads = 2; };\n"
    "workload = { batch = 1; input_tokens = 256; output_tokens = 32; };\n"
    "targets = { latency_ratio = 0.65; memory_ratio = 0.46; };\n"
    "search_space = { hidden_sizes = [256, 128]; mamba_heads = { values = [8]; remove = true; };\n"
    "  routed_experts = [16, 8]; routed_ffn = [128, 0]; shared_ffn = [256, 0]; removable = [\"mamba\"]; };\n"
    "budgets = { search_tokens = 1000; kd_tokens = 2000; };\n";

static void test_contract_rewrite(void **state)
{
    (void)state;
    ac_contract_workload w = {4, 2, 17, 9};
    char *text = NULL;
    assert_int_equal(ac_contract_rewrite(base_contract, "base.cfg", &w, NULL, 0, &text), AC_OK);
    ac_contract c;
    assert_int_equal(ac_contract_parse_string(text, "rewritten", &c), AC_OK);
    assert_int_equal(c.workload.batch, 4);
    assert_int_equal(c.workload.cached_tokens, 2);
    assert_int_equal(c.workload.input_tokens, 17);
    assert_int_equal(c.workload.output_tokens, 9);
    assert_true(c.ratios.has_latency && c.ratios.latency == 0.65); /* targets kept */
    assert_int_equal(c.hardware.threads, 2);
    assert_true(c.budgets.kd_tokens == 2000);
    free(text);

    ac_contract_target t[] = {{"memory_ratio", 0.8}};
    assert_int_equal(ac_contract_rewrite(base_contract, "base.cfg", &w, t, 1, &text), AC_OK);
    assert_int_equal(ac_contract_parse_string(text, "rewritten", &c), AC_OK);
    assert_false(c.ratios.has_latency); /* the targets replaced */
    assert_true(c.ratios.has_memory && c.ratios.memory == 0.8);
    free(text);

    ac_contract_target bad[] = {{"speed_ratio", 0.8}};
    assert_int_equal(ac_contract_rewrite(base_contract, "base.cfg", &w, bad, 1, &text), AC_ERR_INVALID);
    assert_null(text);
    assert_non_null(strstr(ac_error_message(), "speed_ratio"));
    ac_contract_target not_a_name[] = {{"a b", 0.8}};
    assert_int_equal(ac_contract_rewrite(base_contract, "base.cfg", &w, not_a_name, 1, &text), AC_ERR_INVALID);
    assert_int_equal(ac_contract_rewrite("name = ;", "broken.cfg", &w, NULL, 0, &text), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "broken.cfg:1"));
    ac_contract_workload empty = {1, 0, 0, 9};
    assert_int_equal(ac_contract_rewrite(base_contract, "base.cfg", &empty, NULL, 0, &text), AC_ERR_INVALID);
}

static void test_running_job_reads_interrupted(void **state)
{
    (void)state;
    char jobs_dir[512];
    snprintf(jobs_dir, sizeof jobs_dir, "%s/jobs", tmp_dir);
    assert_int_equal(mkdir(jobs_dir, 0755), 0);
    ac_job_info j = sample_job("job-0003");
    snprintf(j.dir, sizeof j.dir, "%s/job-0003", jobs_dir);
    j.state = AC_JOB_RUNNING;
    j.pid = 12345;
    assert_int_equal(mkdir(j.dir, 0755), 0);
    assert_int_equal(ac_job_write(&j), AC_OK);
    ac_jobs_config cfg = {jobs_dir, "/bin/false", 1, 10, NULL, NULL};
    ac_jobs *jobs = NULL;
    assert_int_equal(ac_jobs_open(&cfg, &jobs), AC_OK);
    ac_job_info r;
    assert_int_equal(ac_jobs_get(jobs, "job-0003", &r), AC_JOBS_DONE);
    assert_int_equal(r.state, AC_JOB_INTERRUPTED);
    assert_int_equal(r.pid, 0);
    assert_non_null(strstr(r.message, "stage distill"));
    assert_int_equal(ac_jobs_get(jobs, "job-0004", &r), AC_JOBS_NOT_FOUND);
    assert_int_equal(ac_jobs_get(jobs, "../etc", &r), AC_JOBS_NOT_FOUND);
    assert_int_equal(ac_jobs_cancel(jobs, "job-0003"), AC_JOBS_WRONG_STATE);
    assert_false(ac_jobs_running(jobs, NULL));
    ac_jobs_close(jobs);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_round_trip),       cmocka_unit_test(test_job_ids),
        cmocka_unit_test(test_child_lines),          cmocka_unit_test(test_missed_reason),
        cmocka_unit_test(test_contract_rewrite),     cmocka_unit_test(test_running_job_reads_interrupted),
        cmocka_unit_test(test_job_path_too_long),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
