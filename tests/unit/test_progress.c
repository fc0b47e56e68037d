#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/log.h"
#include "autocompress/progress.h"
#include "autocompress/status.h"

/* Reads the whole stream back as a string (caller frees). */
static char *slurp(FILE *stream)
{
    long size = ftell(stream);
    char *text = calloc((size_t)size + 1, 1);
    rewind(stream);
    assert_int_equal(fread(text, 1, (size_t)size, stream), (size_t)size);
    return text;
}

static void test_json_lines_are_throttled_and_carry_rate_and_eta(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_progress *p;
    assert_int_equal(ac_progress_init(&p, "distill", 1000, "tok", AC_PROGRESS_JSON, out), AC_OK);
    ac_progress_metric(p, "loss", 2.5);
    ac_progress_update_at(p, 100, 0.5);  /* first report: always shown */
    ac_progress_update_at(p, 200, 0.9);  /* within the 1 s interval: suppressed */
    ac_progress_metric(p, "loss", 1.25);
    ac_progress_update_at(p, 400, 2.0);  /* shown */
    ac_progress_finish(p);
    ac_progress_free(p);

    char *text = slurp(out);
    fclose(out);
    char *save = NULL;
    char *line1 = strtok_r(text, "\n", &save);
    char *line2 = strtok_r(NULL, "\n", &save);
    char *line3 = strtok_r(NULL, "\n", &save);
    assert_non_null(line3);
    assert_null(strtok_r(NULL, "\n", &save));

    cJSON *first = cJSON_Parse(line1);
    cJSON *second = cJSON_Parse(line2);
    cJSON *last = cJSON_Parse(line3);
    assert_non_null(first);
    assert_non_null(second);
    assert_non_null(last);
    assert_string_equal(cJSON_GetObjectItem(first, "task")->valuestring, "distill");
    assert_float_equal(cJSON_GetObjectItem(first, "done")->valuedouble, 100, 1e-9);
    assert_float_equal(cJSON_GetObjectItem(first, "rate")->valuedouble, 200, 1e-9);
    assert_float_equal(cJSON_GetObjectItem(first, "eta_s")->valuedouble, 4.5, 1e-9);
    assert_float_equal(cJSON_GetObjectItem(first, "loss")->valuedouble, 2.5, 1e-12);
    assert_float_equal(cJSON_GetObjectItem(second, "done")->valuedouble, 400, 1e-9);
    assert_float_equal(cJSON_GetObjectItem(second, "eta_s")->valuedouble, 3.0, 1e-9);
    assert_float_equal(cJSON_GetObjectItem(second, "loss")->valuedouble, 1.25, 1e-12);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(second, "final")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(last, "final")));
    cJSON_Delete(first);
    cJSON_Delete(second);
    cJSON_Delete(last);
    free(text);
}

static void test_interval_can_be_set(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_progress *p;
    assert_int_equal(ac_progress_init(&p, "search", 100, "steps", AC_PROGRESS_JSON, out), AC_OK);
    ac_progress_set_interval(p, 5.0);
    ac_progress_update_at(p, 10, 0.5); /* first report: always shown */
    ac_progress_update_at(p, 20, 2.0); /* past JSON's default 1 s, within 5 s: suppressed */
    ac_progress_update_at(p, 30, 5.6); /* 5.1 s after the first: shown */
    ac_progress_set_interval(p, 0.0);
    ac_progress_update_at(p, 40, 5.6); /* no interval: every update shown */
    ac_progress_free(p);

    char *text = slurp(out);
    fclose(out);
    double want[] = {10, 30, 40};
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    for (int i = 0; i < 3; i++, line = strtok_r(NULL, "\n", &save)) {
        assert_non_null(line);
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        assert_float_equal(cJSON_GetObjectItem(o, "done")->valuedouble, want[i], 1e-9);
        cJSON_Delete(o);
    }
    assert_null(line);
    free(text);
}

static void test_bar_shows_fraction_rate_eta_and_metrics(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_progress *p;
    assert_int_equal(ac_progress_init(&p, "search", 2000, "tok", AC_PROGRESS_BAR, out), AC_OK);
    ac_progress_metric(p, "loss", 0.75);
    ac_progress_update_at(p, 1000, 10.0);
    ac_progress_free(p);
    char *text = slurp(out);
    fclose(out);
    assert_non_null(strstr(text, "search ["));
    assert_non_null(strstr(text, " 50.0%"));
    assert_non_null(strstr(text, "1.00k/2.00k tok"));
    assert_non_null(strstr(text, "100.0 tok/s"));
    assert_non_null(strstr(text, "ETA 00:10"));
    assert_non_null(strstr(text, "loss=0.75"));
    free(text);
}

static void test_plain_lines_start_throttle_and_end(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_progress *p;
    unsetenv("AC_PROGRESS_INTERVAL");
    assert_int_equal(ac_progress_init(&p, "profile", 85, "runs", AC_PROGRESS_LINES, out), AC_OK);
    ac_progress_update_at(p, 3, 9.0);    /* within 10 s of the start line: suppressed */
    ac_progress_metric(p, "run_s", 0.5);
    ac_progress_update_at(p, 12, 151.0); /* shown: 12 runs in 151 s, 73 left at that rate */
    ac_progress_update_at(p, 13, 155.0); /* within 10 s of the last: suppressed */
    ac_progress_finish(p);               /* always shown (real clock: well under a second) */
    ac_progress_free(p);
    char *text = slurp(out);
    fclose(out);
    assert_string_equal(text, "profile: started, 85 runs to do\n"
                              "profile: 12/85 runs (14%), 2m31s elapsed, about 15m19s left, run_s=0.5\n"
                              "profile: done, 13/85 runs (15%), 0s in all, run_s=0.5\n");
    free(text);
}

static void test_line_interval_from_the_environment(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_progress *p;
    setenv("AC_PROGRESS_INTERVAL", "0", 1);
    assert_int_equal(ac_progress_init(&p, "eval", 0, "tok", AC_PROGRESS_LINES, out), AC_OK);
    unsetenv("AC_PROGRESS_INTERVAL");
    ac_progress_update_at(p, 1000, 0.4); /* no interval: every update, no ETA without a total */
    ac_progress_update_at(p, 2000, 0.6);
    ac_progress_free(p);
    char *text = slurp(out);
    fclose(out);
    assert_string_equal(text, "eval: started\neval: 1000 tok, 0s elapsed\neval: 2000 tok, 1s elapsed\n");
    free(text);
}

static void test_mode_names(void **state)
{
    (void)state;
    ac_progress_mode mode;
    assert_int_equal(ac_progress_mode_from_name("json", &mode), AC_OK);
    assert_int_equal(mode, AC_PROGRESS_JSON);
    assert_int_equal(ac_progress_mode_from_name("lines", &mode), AC_OK);
    assert_int_equal(mode, AC_PROGRESS_LINES);
    assert_int_equal(ac_progress_mode_from_name("fancy", &mode), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "'fancy'"));
}

static void test_status_message_and_context(void **state)
{
    (void)state;
    ac_clear_error();
    assert_string_equal(ac_error_message(), "");
    assert_int_equal(ac_fail(AC_ERR_INVALID, "line %d: bad value", 7), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "line 7: bad value");
    assert_int_equal(ac_fail_context(AC_ERR_IO, "%s", "model.safetensors"), AC_ERR_IO);
    assert_string_equal(ac_error_message(), "model.safetensors: line 7: bad value");
    assert_string_equal(ac_status_name(AC_ERR_NOMEM), "out of memory");
}

static void test_log_levels_filter(void **state)
{
    (void)state;
    FILE *out = tmpfile();
    ac_log_set_stream(out);
    ac_log_set_level(AC_LOG_WARN);
    ac_info("hidden %d", 1);
    ac_warn("shown %d", 2);
    ac_log_set_stream(NULL);
    ac_log_set_level(AC_LOG_INFO);
    char *text = slurp(out);
    fclose(out);
    assert_null(strstr(text, "hidden"));
    assert_non_null(strstr(text, "warn  shown 2"));
    assert_int_equal(ac_log_level_from_name("debug"), AC_LOG_DEBUG);
    assert_int_equal(ac_log_level_from_name("loud"), -1);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_lines_are_throttled_and_carry_rate_and_eta),
        cmocka_unit_test(test_interval_can_be_set),
        cmocka_unit_test(test_bar_shows_fraction_rate_eta_and_metrics),
        cmocka_unit_test(test_plain_lines_start_throttle_and_end),
        cmocka_unit_test(test_line_interval_from_the_environment),
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_status_message_and_context),
        cmocka_unit_test(test_log_levels_filter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
