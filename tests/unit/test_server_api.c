/* The completions API's request parsing (adapters/server/srv_api.c) against the small
 * prose checkpoint, the error body, and the server's config file (srv_config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/srv.h"

#define PROSE AC_SOURCE_DIR "/examples/parent/prose"

static srv_model *model;
static srv_config config;

static int setup(void **state)
{
    (void)state;
    srv_config_defaults(&config);
    if (srv_model_load(PROSE, NULL, "cpu", AC_DTYPE_F32, &model) != AC_OK) {
        fprintf(stderr, "cannot load %s: %s\n", PROSE, ac_error_message());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    srv_model_free(model);
    return 0;
}

static srv_request *parse(const char *body, srv_error *err)
{
    memset(err, 0, sizeof *err);
    return srv_api_parse_completion(body, strlen(body), model, &config, err);
}

static srv_request *parse_ok(const char *body)
{
    srv_error err;
    srv_request *req = parse(body, &err);
    if (!req)
        fail_msg("%s: refused with %d: %s", body, err.status, err.message);
    return req;
}

/* The body is refused with a 400 of type invalid_request_error whose message holds
 * `names` (the field) and whose code is `code` (when given). */
static void parse_bad(const char *body, const char *names, const char *code)
{
    srv_error err;
    srv_request *req = parse(body, &err);
    if (req) {
        srv_request_free(req);
        fail_msg("%s: accepted", body);
    }
    assert_int_equal(err.status, 400);
    assert_non_null(err.type);
    assert_string_equal(err.type, "invalid_request_error");
    if (!strstr(err.message, names))
        fail_msg("%s: the message \"%s\" does not name %s", body, err.message, names);
    if (code) {
        assert_non_null(err.code);
        assert_string_equal(err.code, code);
    }
}

static void expect_tokens(const char *text, const srv_request *req)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(ac_tokenizer_encode(model->tokenizer, text, strlen(text), &ids, &n), AC_OK);
    assert_true(n > 0);
    assert_int_equal(req->n_prompt, (int)n);
    assert_memory_equal(req->prompt, ids, n * sizeof *ids);
    free(ids);
}

/* ---- valid bodies ---- */

static void test_defaults(void **state)
{
    (void)state;
    srv_request *req = parse_ok("{\"prompt\": \"The meaning of life is\"}");
    assert_int_equal(req->max_tokens, config.default_max_tokens);
    assert_true(req->temperature == 1.0f);
    assert_true(req->top_p == 1.0f);
    assert_int_equal(req->logprobs, -1);
    assert_int_equal(req->stream, 0);
    assert_int_equal(req->echo, 0);
    assert_int_equal(req->include_usage, 0);
    assert_int_equal(req->n_stop, 0);
    assert_non_null(req->prompt_text);
    assert_string_equal(req->prompt_text, "The meaning of life is");
    expect_tokens("The meaning of life is", req);
    assert_int_equal(strncmp(req->id, "cmpl-", 5), 0);
    assert_true(req->created > 1.6e9);

    /* null is the default too */
    srv_request *nulls = parse_ok("{\"prompt\": \"x\", \"max_tokens\": null, \"temperature\": null, \"top_p\": null,"
                                  " \"stop\": null, \"logprobs\": null, \"stream\": null, \"n\": null}");
    assert_int_equal(nulls->max_tokens, config.default_max_tokens);
    assert_true(nulls->temperature == 1.0f);
    assert_true(nulls->top_p == 1.0f);
    assert_int_equal(nulls->logprobs, -1);
    assert_int_equal(nulls->n_stop, 0);
    /* every request its own id, and without a seed its own seed */
    assert_string_not_equal(req->id, nulls->id);
    assert_true(req->seed != nulls->seed);
    srv_request_free(req);
    srv_request_free(nulls);

    /* a different default from the config */
    config.default_max_tokens = 7;
    req = parse_ok("{\"prompt\": \"x\"}");
    assert_int_equal(req->max_tokens, 7);
    srv_request_free(req);
    srv_config_defaults(&config);
}

static void test_every_field(void **state)
{
    (void)state;
    srv_request *req = parse_ok(
        "{\"model\": \"prose\", \"prompt\": \"Hello there\", \"max_tokens\": 5, \"temperature\": 0,"
        " \"top_p\": 0.5, \"seed\": 42, \"stop\": [\"\\n\", \"END\"], \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"logprobs\": 3, \"echo\": true, \"n\": 1,"
        " \"best_of\": 1, \"presence_penalty\": 0, \"frequency_penalty\": 0, \"user\": \"u-1\", \"suffix\": null}");
    assert_int_equal(req->max_tokens, 5);
    assert_true(req->temperature == 0.0f);
    assert_true(req->top_p == 0.5f);
    assert_true(req->seed == 42);
    assert_int_equal(req->n_stop, 2);
    assert_string_equal(req->stop[0], "\n");
    assert_string_equal(req->stop[1], "END");
    assert_int_equal(req->stream, 1);
    assert_int_equal(req->include_usage, 1);
    assert_int_equal(req->logprobs, 3);
    assert_int_equal(req->echo, 1);
    expect_tokens("Hello there", req);
    srv_request_free(req);

    /* one stop as a string; the extremes of the ranges */
    req = parse_ok("{\"prompt\": \"a\", \"stop\": \"xyz\", \"temperature\": 2, \"top_p\": 1, \"logprobs\": 20,"
                   " \"max_tokens\": 1, \"stream\": false, \"echo\": false}");
    assert_int_equal(req->n_stop, 1);
    assert_string_equal(req->stop[0], "xyz");
    assert_true(req->temperature == 2.0f);
    assert_int_equal(req->logprobs, 20);
    assert_int_equal(req->max_tokens, 1);
    assert_int_equal(req->stream, 0);
    srv_request_free(req);

    /* four stops is the most */
    req = parse_ok("{\"prompt\": \"a\", \"stop\": [\"1\", \"2\", \"3\", \"4\"], \"logprobs\": 0}");
    assert_int_equal(req->n_stop, 4);
    assert_string_equal(req->stop[3], "4");
    assert_int_equal(req->logprobs, 0);
    srv_request_free(req);

    /* max_tokens 0 only with echo */
    req = parse_ok("{\"prompt\": \"a\", \"max_tokens\": 0, \"echo\": true}");
    assert_int_equal(req->max_tokens, 0);
    srv_request_free(req);
}

static void test_prompt_forms(void **state)
{
    (void)state;
    srv_request *req = parse_ok("{\"prompt\": [1, 2, 3, 4095]}");
    assert_null(req->prompt_text);
    assert_int_equal(req->n_prompt, 4);
    assert_int_equal(req->prompt[0], 1);
    assert_int_equal(req->prompt[2], 3);
    assert_int_equal(req->prompt[3], 4095);
    srv_request_free(req);

    req = parse_ok("{\"prompt\": [\"one string, in an array\"]}");
    assert_non_null(req->prompt_text);
    assert_string_equal(req->prompt_text, "one string, in an array");
    expect_tokens("one string, in an array", req);
    srv_request_free(req);

    /* JSON escapes are decoded before tokenizing */
    req = parse_ok("{\"prompt\": \"caf\\u00e9\\n\\ttab\"}");
    assert_string_equal(req->prompt_text, "caf\xc3\xa9\n\ttab");
    expect_tokens("caf\xc3\xa9\n\ttab", req);
    srv_request_free(req);
}

/* ---- malformed bodies ---- */

static void test_malformed_json(void **state)
{
    (void)state;
    parse_bad("{\"prompt\": \"a\"", "JSON", "invalid_json");
    parse_bad("", "JSON", "invalid_json");
    parse_bad("{prompt: 1}", "JSON", "invalid_json");
    parse_bad("[\"prompt\"]", "object", NULL);
    parse_bad("\"a prompt\"", "object", NULL);
    parse_bad("42", "object", NULL);
    parse_bad("null", "object", NULL);
    /* one JSON value and nothing after it but white space */
    srv_request *req = parse_ok("  {\"prompt\": \"a\"}\r\n\t ");
    srv_request_free(req);
    parse_bad("{\"prompt\": \"a\"} {\"prompt\": \"b\"}", "JSON", "invalid_json");
    parse_bad("{\"prompt\": \"a\"}garbage", "JSON", "invalid_json");
}

static void test_bad_prompt(void **state)
{
    (void)state;
    parse_bad("{}", "'prompt'", "missing_field");
    parse_bad("{\"max_tokens\": 3}", "'prompt'", "missing_field");
    parse_bad("{\"prompt\": 5}", "'prompt'", NULL);
    parse_bad("{\"prompt\": {\"text\": \"a\"}}", "'prompt'", NULL);
    parse_bad("{\"prompt\": true}", "'prompt'", NULL);
    parse_bad("{\"prompt\": null}", "'prompt'", NULL);
    parse_bad("{\"prompt\": [1, 4096]}", "'prompt[1]'", NULL);
    parse_bad("{\"prompt\": [1, 2, -1]}", "'prompt[2]'", NULL);
    parse_bad("{\"prompt\": [1, 2.5]}", "'prompt[1]'", NULL);
    parse_bad("{\"prompt\": [1, \"two\"]}", "'prompt[1]'", NULL);
    parse_bad("{\"prompt\": \"\"}", "'prompt'", NULL);
    parse_bad("{\"prompt\": []}", "'prompt'", NULL);
    parse_bad("{\"prompt\": [\"one\", \"two\"]}", "'prompt'", NULL);
    parse_bad("{\"prompt\": [[1, 2], [3]]}", "'prompt'", NULL);
}

static void test_bad_values(void **state)
{
    (void)state;
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": -1}", "'max_tokens'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": 2.5}", "'max_tokens'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": \"10\"}", "'max_tokens'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": 0}", "'max_tokens'", NULL);
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": 1e30}", "'max_tokens'", NULL);
    parse_bad("{\"prompt\": \"a\", \"temperature\": 2.5}", "'temperature'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"temperature\": -0.1}", "'temperature'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"temperature\": \"hot\"}", "'temperature'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"top_p\": 0}", "'top_p'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"top_p\": 1.01}", "'top_p'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"seed\": 1.5}", "'seed'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stop\": [\"1\", \"2\", \"3\", \"4\", \"5\"]}", "'stop'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stop\": \"\"}", "'stop'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stop\": [\"x\", \"\"]}", "'stop'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stop\": [1]}", "'stop'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stop\": 7}", "'stop'", NULL);
    parse_bad("{\"prompt\": \"a\", \"logprobs\": 21}", "'logprobs'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"logprobs\": -1}", "'logprobs'", "invalid_value");
    parse_bad("{\"prompt\": \"a\", \"logprobs\": true}", "'logprobs'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"stream\": \"yes\"}", "'stream'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"stream\": 1}", "'stream'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"echo\": \"no\"}", "'echo'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"stream_options\": 3}", "'stream_options'", NULL);
    parse_bad("{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": 1}}", "'stream_options'", NULL);
    parse_bad("{\"prompt\": \"a\", \"model\": 3}", "'model'", "invalid_type");
    parse_bad("{\"prompt\": \"a\", \"n\": 2}", "'n'", NULL);
    parse_bad("{\"prompt\": \"a\", \"best_of\": 3}", "'best_of'", NULL);
    parse_bad("{\"prompt\": \"a\", \"presence_penalty\": 0.5}", "'presence_penalty'", NULL);
    parse_bad("{\"prompt\": \"a\", \"frequency_penalty\": -1}", "'frequency_penalty'", NULL);
    parse_bad("{\"prompt\": \"a\", \"user\": 5}", "'user'", NULL);
    parse_bad("{\"prompt\": \"a\", \"suffix\": \"tail\"}", "'suffix'", NULL);
}

static void test_unknown_and_duplicate_fields(void **state)
{
    (void)state;
    parse_bad("{\"prompt\": \"a\", \"colour\": \"blue\"}", "'colour'", "unknown_parameter");
    parse_bad("{\"prompt\": \"a\", \"Prompt\": \"b\"}", "'Prompt'", "unknown_parameter");
    parse_bad("{\"prompt\": \"a\", \"max_tokens\": 3, \"max_tokens\": 4}", "'max_tokens'", NULL);
    parse_bad("{\"prompt\": \"a\", \"prompt\": \"b\"}", "'prompt'", NULL);
    /* the unknown field is named wherever it comes */
    parse_bad("{\"zzz\": 1, \"prompt\": \"a\"}", "'zzz'", "unknown_parameter");
}

static void test_context_length(void **state)
{
    (void)state;
    config.context_tokens = 40;
    char body[512];
    int n = snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < 30; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", i ? ", " : "", 100 + i);
    /* 30 + 10 fits exactly */
    snprintf(body + n, sizeof body - (size_t)n, "], \"max_tokens\": 10}");
    srv_request *req = parse_ok(body);
    assert_int_equal(req->n_prompt, 30);
    srv_request_free(req);
    /* 30 + 11 does not */
    snprintf(body + n, sizeof body - (size_t)n, "], \"max_tokens\": 11}");
    srv_error err;
    assert_null(parse(body, &err));
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    assert_non_null(err.code);
    assert_string_equal(err.code, "context_length_exceeded");
    assert_non_null(strstr(err.message, "max_tokens"));
    assert_non_null(strstr(err.message, "40"));
    assert_non_null(strstr(err.message, "30"));
    assert_non_null(strstr(err.message, "11"));
    /* the default max_tokens (16) counts too */
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    assert_null(parse(body, &err));
    assert_string_equal(err.code, "context_length_exceeded");
    /* a prompt alone longer than the context */
    config.context_tokens = 20;
    snprintf(body + n, sizeof body - (size_t)n, "], \"max_tokens\": 1}");
    assert_null(parse(body, &err));
    assert_string_equal(err.code, "context_length_exceeded");
    srv_config_defaults(&config);
}

/* ---- the error body ---- */

static void test_error_json(void **state)
{
    (void)state;
    srv_error e = {400, "invalid_request_error", "invalid_value", "'top_p' must be in (0, 1], got \"0\""};
    char *text = srv_api_error_json(&e);
    assert_non_null(text);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    assert_int_equal(cJSON_GetArraySize(o), 1);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    assert_true(cJSON_IsObject(err));
    assert_int_equal(cJSON_GetArraySize(err), 3);
    const cJSON *message = cJSON_GetObjectItemCaseSensitive(err, "message");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(err, "type");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    assert_true(cJSON_IsString(message) && cJSON_IsString(type) && cJSON_IsString(code));
    assert_string_equal(message->valuestring, e.message);
    assert_string_equal(type->valuestring, "invalid_request_error");
    assert_string_equal(code->valuestring, "invalid_value");
    cJSON_Delete(o);
    free(text);

    /* no code: null; no type: server_error */
    srv_error bare = {500, NULL, NULL, "out of memory"};
    text = srv_api_error_json(&bare);
    o = cJSON_Parse(text);
    err = cJSON_GetObjectItemCaseSensitive(o, "error");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(err, "code")));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(err, "type")->valuestring, "server_error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring, "out of memory");
    cJSON_Delete(o);
    free(text);

    /* what the parser fills in comes out the same way */
    srv_error perr;
    assert_null(parse("{\"prompt\": \"a\", \"n\": 3}", &perr));
    text = srv_api_error_json(&perr);
    o = cJSON_Parse(text);
    err = cJSON_GetObjectItemCaseSensitive(o, "error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(err, "type")->valuestring, "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring, perr.message);
    cJSON_Delete(o);
    free(text);
}

/* ---- the config file ---- */

static char *write_file(const char *text)
{
    char *path = strdup("/tmp/ac_server_cfg_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void test_config_good(void **state)
{
    (void)state;
    char *path = write_file("# a server\n"
                            "host = \"0.0.0.0\";\n"
                            "port = 9001;\n"
                            "slots = 3;\n"
                            "max_queue = 17;\n"
                            "prefill_chunk = 64;\n"
                            "max_step_tokens = 100;\n"
                            "context_tokens = 2048;\n"
                            "default_max_tokens = 33;\n"
                            "max_body_bytes = 65536;\n"
                            "max_connections = 9;\n"
                            "threads = 2;\n"
                            "model_name = \"served\";\n"
                            "admin_token = \"s3cret\";\n"
                            "prefix_reuse = false;\n");
    srv_config c;
    srv_config_defaults(&c);
    assert_int_equal(srv_config_load(path, &c), AC_OK);
    assert_string_equal(c.host, "0.0.0.0");
    assert_int_equal(c.port, 9001);
    assert_int_equal(c.slots, 3);
    assert_int_equal(c.max_queue, 17);
    assert_int_equal(c.prefill_chunk, 64);
    assert_int_equal(c.max_step_tokens, 100);
    assert_int_equal(c.context_tokens, 2048);
    assert_int_equal(c.default_max_tokens, 33);
    assert_int_equal(c.max_body_bytes, 65536);
    assert_int_equal(c.max_connections, 9);
    assert_int_equal(c.threads, 2);
    assert_string_equal(c.model_name, "served");
    assert_string_equal(c.admin_token, "s3cret");
    assert_int_equal(c.prefix_reuse, 0);
    unlink(path);
    free(path);

    /* settings the file leaves out keep the defaults */
    path = write_file("port = 1234;\n");
    srv_config d, defaults;
    srv_config_defaults(&d);
    srv_config_defaults(&defaults);
    assert_int_equal(srv_config_load(path, &d), AC_OK);
    assert_int_equal(d.port, 1234);
    d.port = defaults.port;
    assert_memory_equal(&d, &defaults, sizeof d);
    unlink(path);
    free(path);
}

/* Loading fails with AC_ERR_INVALID and a message naming the file, ":LINE:" and `names`. */
static void config_bad(const char *text, const char *line, const char *names)
{
    char *path = write_file(text);
    srv_config c;
    srv_config_defaults(&c);
    ac_status st = srv_config_load(path, &c);
    const char *message = ac_error_message();
    if (st != AC_ERR_INVALID)
        fail_msg("%s: status %d (%s)", text, st, message);
    if (!strstr(message, path) || !strstr(message, line) || !strstr(message, names))
        fail_msg("\"%s\" should name %s, line %s and %s", message, path, line, names);
    unlink(path);
    free(path);
}

static void test_config_bad(void **state)
{
    (void)state;
    config_bad("port = 8000;\ncolour = \"blue\";\n", ":2:", "colour");
    config_bad("port = 8000;\nslots = 4;\nslots_per_gpu = 4;\n", ":3:", "slots_per_gpu");
    config_bad("slots = \"four\";\n", ":1:", "slots");
    config_bad("\nport = 80.5;\n", ":2:", "port");
    config_bad("host = 127;\n", ":1:", "host");
    config_bad("port = 1;\n\nprefix_reuse = 1;\n", ":3:", "prefix_reuse");
    config_bad("admin_token = true;\n", ":1:", "admin_token");
    config_bad("host = \"127.0.0.1\";\nport = 70000;\n", ":2:", "port");
    config_bad("port = -1;\n", ":1:", "port");
    config_bad("slots = 0;\n", ":1:", "slots");
    config_bad("max_body_bytes = 10;\n", ":1:", "max_body_bytes");
    config_bad("context_tokens = 1;\n", ":1:", "context_tokens");
    config_bad("port = 1;\ndrain_timeout_s = -1.0;\n", ":2:", "drain_timeout_s");
    config_bad("drain_timeout_s = \"soon\";\n", ":1:", "drain_timeout_s");
    config_bad("max_tokens_limit = -5;\n", ":1:", "max_tokens_limit");
    config_bad("max_prompt_tokens = 1.5;\n", ":1:", "max_prompt_tokens");
    config_bad("port = 8000;\nslots = ;\n", ":2:", "syntax"); /* a syntax error: the file and line */
    config_bad("server = { port = 1; };\n", ":1:", "server");

    /* a file that is not there */
    srv_config c;
    srv_config_defaults(&c);
    assert_int_equal(srv_config_load("/nonexistent/server.cfg", &c), AC_ERR_IO);
    assert_non_null(strstr(ac_error_message(), "/nonexistent/server.cfg"));
}

static void test_config_env(void **state)
{
    (void)state;
    srv_config c;
    srv_config_defaults(&c);
    assert_int_equal(c.admin_token[0], 0); /* admin is off by default */
    setenv("AUTOCOMPRESS_ADMIN_TOKEN", "from-env", 1);
    srv_config_apply_env(&c);
    assert_string_equal(c.admin_token, "from-env");
    snprintf(c.admin_token, sizeof c.admin_token, "from-config");
    srv_config_apply_env(&c);
    assert_string_equal(c.admin_token, "from-config");
    unsetenv("AUTOCOMPRESS_ADMIN_TOKEN");
    srv_config_defaults(&c);
    srv_config_apply_env(&c);
    assert_int_equal(c.admin_token[0], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_field),
        cmocka_unit_test(test_prompt_forms),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_bad_prompt),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_unknown_and_duplicate_fields),
        cmocka_unit_test(test_context_length),
        cmocka_unit_test(test_error_json),
        cmocka_unit_test(test_config_good),
        cmocka_unit_test(test_config_bad),
        cmocka_unit_test(test_config_env),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
