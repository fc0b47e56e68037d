/* `autocompress logits` and `generate` end to end: the command's output against the
 * transformers references of the committed fixtures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autocompress/safetensors.h"
#include "autocompress/tokenizer.h"

#define FIXTURES AC_SOURCE_DIR "/tests/fixtures/nemotron_h"

static ac_safetensors *open_reference(const char *fixture)
{
    char path[512];
    ac_safetensors *ref;
    snprintf(path, sizeof path, "%s/%s/reference.safetensors", FIXTURES, fixture);
    assert_int_equal(ac_safetensors_open(path, &ref), AC_OK);
    return ref;
}

/* "1,2,3" from an I32 tensor. */
static void ids_text(const ac_tensor_view *ids, char *out, size_t size)
{
    const int32_t *v = ids->data;
    size_t n = 0;
    for (int64_t i = 0; i < ids->shape[0]; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%d", i ? "," : "", v[i]);
}

/* Runs the command, returns its exit status and its stdout (and stderr) in `out`. */
static int run(const char *args, char *out, size_t size)
{
    char command[4096];
    snprintf(command, sizeof command, "%s %s 2>&1", AC_CLI_PATH, args);
    FILE *p = popen(command, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_logits_npy_matches_reference(void **state)
{
    (void)state;
    ac_safetensors *ref = open_reference("moe_grouped_bf16");
    const ac_tensor_view *ids = ac_safetensors_find(ref, "seq.2.ids");
    const ac_tensor_view *expected = ac_safetensors_find(ref, "seq.2.logits");
    char text[1024], args[2048], out[4096];
    char npy[] = "/tmp/ac_test_logits_XXXXXX";
    int fd = mkstemp(npy);
    assert_true(fd >= 0);
    close(fd);
    ids_text(ids, text, sizeof text);
    snprintf(args, sizeof args, "logits --model %s/moe_grouped_bf16 --ids %s --out %s", FIXTURES, text, npy);
    assert_int_equal(run(args, out, sizeof out), 0);
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)expected->shape[0], (long long)expected->shape[1]);
    assert_non_null(strstr(out, shape));

    /* .npy: magic, version 1.0, little-endian header length, a dict, then the floats */
    FILE *f = fopen(npy, "rb");
    assert_non_null(f);
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    assert_memory_equal(pre, "\x93NUMPY\x01\x00", 8);
    size_t header = pre[8] | (size_t)pre[9] << 8;
    assert_int_equal((10 + header) % 64, 0);
    char dict[256] = {0};
    assert_int_equal(fread(dict, 1, header, f), header);
    char want[128];
    snprintf(want, sizeof want, "'shape': (%lld, %lld)", (long long)expected->shape[0], (long long)expected->shape[1]);
    assert_non_null(strstr(dict, "'descr': '<f4'"));
    assert_non_null(strstr(dict, want));
    size_t count = (size_t)(expected->shape[0] * expected->shape[1]);
    float *got = malloc(count * sizeof *got);
    assert_int_equal(fread(got, sizeof *got, count, f), count);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    unlink(npy);
    const float *e = expected->data;
    for (size_t i = 0; i < count; i++)
        assert_true(fabsf(got[i] - e[i]) <= 1e-4f);
    free(got);
    ac_safetensors_close(ref);
}

static void test_generate_greedy_matches_transformers(void **state)
{
    (void)state;
    const char *fixtures[] = {"hybrid_f32", "moe_grouped_bf16", "puzzle_hetero"};
    for (int k = 0; k < 3; k++) {
        ac_safetensors *ref = open_reference(fixtures[k]);
        const ac_tensor_view *ids = ac_safetensors_find(ref, "seq.3.ids");
        const ac_tensor_view *greedy = ac_safetensors_find(ref, "seq.3.greedy");
        char text[1024], expected[1024], args[2048], out[4096];
        ids_text(ids, text, sizeof text);
        ids_text(greedy, expected, sizeof expected);
        snprintf(args, sizeof args, "generate --model %s/%s --ids %s --max-tokens %lld", FIXTURES, fixtures[k], text,
                 (long long)greedy->shape[0]);
        assert_int_equal(run(args, out, sizeof out), 0);
        out[strcspn(out, "\n")] = '\0';
        assert_string_equal(out, expected);
        ac_safetensors_close(ref);
    }
}

static void test_sampling_is_reproducible_by_seed(void **state)
{
    (void)state;
    char a[4096], b[4096], c[4096];
    const char *base = "generate --model " FIXTURES "/hybrid_f32 --ids 5,6,7 --max-tokens 24 --temperature 1.0 --top-p 0.9";
    char args[1024];
    snprintf(args, sizeof args, "%s --seed 11", base);
    assert_int_equal(run(args, a, sizeof a), 0);
    assert_int_equal(run(args, b, sizeof b), 0);
    snprintf(args, sizeof args, "%s --seed 12", base);
    assert_int_equal(run(args, c, sizeof c), 0);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
}

/* --prompt is the tokenizer's encoding fed to the ids path, and the continuation its
 * decoding: checked on the committed prose parent, whose directory holds tokenizer.json. */
static void test_prompt_is_encode_generate_decode(void **state)
{
    (void)state;
    const char *model = AC_SOURCE_DIR "/examples/parent/prose";
    const char *prompt = "You will be";
    ac_tokenizer *tok;
    assert_int_equal(ac_tokenizer_load(AC_SOURCE_DIR "/examples/parent/prose/tokenizer.json", &tok), AC_OK);
    int32_t *ids;
    size_t n;
    assert_int_equal(ac_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n), AC_OK);
    char text[256], args[1024], by_ids[4096], by_prompt[4096];
    size_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%d", i ? "," : "", ids[i]);
    snprintf(args, sizeof args, "generate --model %s --ids %s --max-tokens 12", model, text);
    assert_int_equal(run(args, by_ids, sizeof by_ids), 0);
    snprintf(args, sizeof args, "generate --model %s --prompt '%s' --max-tokens 12", model, prompt);
    assert_int_equal(run(args, by_prompt, sizeof by_prompt), 0);

    /* decode the id list the ids path printed (no end-of-text among them, or --prompt stops there) */
    int32_t out[16];
    int count = 0;
    for (char *p = by_ids; *p && *p != '\n' && count < 16;) {
        out[count++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',')
            p++;
    }
    assert_int_equal(count, 12);
    char *decoded;
    size_t len;
    assert_int_equal(ac_tokenizer_decode(tok, out, (size_t)count, &decoded, &len), AC_OK);
    assert_true(len > 0);
    assert_int_equal(strncmp(by_prompt, decoded, len), 0);
    assert_int_equal(by_prompt[len], '\n');
    free(decoded);
    free(ids);
    ac_tokenizer_free(tok);
}

static void test_bad_arguments_are_clear_errors(void **state)
{
    (void)state;
    char out[4096];
    assert_int_equal(run("logits --model " FIXTURES "/hybrid_f32 --ids 1,x,3", out, sizeof out), 2);
    assert_non_null(strstr(out, "item 2 ('x')"));
    assert_int_equal(run("logits --model " FIXTURES "/hybrid_f32 --ids 1,99999", out, sizeof out), 2);
    assert_non_null(strstr(out, "token id 99999"));
    assert_int_equal(run("logits --model /nonexistent/model --ids 1", out, sizeof out), 1);
    assert_non_null(strstr(out, "/nonexistent/model"));
    assert_int_equal(run("generate --model " FIXTURES "/hybrid_f32 --ids 1 --max-tokens -3", out, sizeof out), 2);
    assert_non_null(strstr(out, "--max-tokens"));
    assert_int_equal(run("generate --ids 1", out, sizeof out), 2);
    assert_non_null(strstr(out, "--model"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_npy_matches_reference),
        cmocka_unit_test(test_generate_greedy_matches_transformers),
        cmocka_unit_test(test_sampling_is_reproducible_by_seed),
        cmocka_unit_test(test_prompt_is_encode_generate_decode),
        cmocka_unit_test(test_bad_arguments_are_clear_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
