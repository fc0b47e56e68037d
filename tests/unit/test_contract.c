/* Contract reader: the six example contracts against the paper's numbers (Tables 1-3),
 * malformed contracts rejected with FILE:LINE, relative targets and their resolution,
 * and the string and I/O entry points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/contract.h"

#define EXAMPLES AC_SOURCE_DIR "/examples/contracts/"
#define BAD AC_SOURCE_DIR "/tests/contracts/bad/"

/* A valid contract that the files under tests/contracts/bad/ each break in one place
 * (there it follows a one-line comment, so its lines are one higher). */
static const char base_text[] =
    "name = \"bad\";\n"
    "hardware = {\n"
    "  device = \"cpu\";\n"
    "  threads = 1;\n"
    "};\n"
    "workload = {\n"
    "  batch = 1;\n"
    "  input_tokens = 64;\n"
    "  output_tokens = 8;\n"
    "};\n"
    "targets = {\n"
    "  latency_ms = 100.0;\n"
    "};\n"
    "search_space = {\n"
    "  hidden_sizes = [256, 128];\n"
    "  mamba_heads = { values = [8, 4]; scope = \"global\"; };\n"
    "  routed_experts = [16, 8];\n"
    "  routed_ffn = [128, 0];\n"
    "  shared_ffn = [256, 0];\n"
    "};\n";

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-9 * fmax(1.0, fabs(want)))
        fail_msg("got %.12g, want %.12g", got, want);
}

static void assert_candidates(const ac_candidates *c, const int *want, int n)
{
    assert_int_equal(c->count, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(c->values[i], want[i]);
}
#define CANDIDATES(c, ...)                                                                   \
    do {                                                                                     \
        static const int want_[] = {__VA_ARGS__};                                            \
        assert_candidates((c), want_, (int)(sizeof want_ / sizeof want_[0]));                \
    } while (0)

static void load_ok(const char *path, ac_contract *c)
{
    ac_status st = ac_contract_load(path, c);
    if (st != AC_OK)
        fail_msg("%s: %s", path, ac_error_message());
}

static void assert_lightning_space(const ac_contract *c)
{
    const ac_contract_search_space *s = &c->search;
    CANDIDATES(&s->hidden_sizes, 2688, 2432, 2176, 1920, 1664, 1408);
    CANDIDATES(&s->mamba_heads.values, 64, 56, 48, 40, 32);
    assert_int_equal(s->mamba_heads.scope, AC_SCOPE_GLOBAL);
    assert_false(s->mamba_heads.remove);
    CANDIDATES(&s->routed_experts, 128, 112, 96, 80, 64);
    CANDIDATES(&s->routed_ffn, 1856, 1536, 1280, 1024);
    CANDIDATES(&s->shared_ffn, 3712, 2816, 1920);
    assert_false(s->removable.mamba || s->removable.moe || s->removable.mlp ||
                 s->removable.attention);
}

static void test_rtx5070_npc(void **state)
{
    (void)state;
    ac_contract c;
    load_ok(EXAMPLES "rtx5070-npc.cfg", &c);
    assert_string_equal(c.name, "rtx5070-npc");
    assert_string_equal(c.source, EXAMPLES "rtx5070-npc.cfg");
    assert_string_equal(c.hardware.device, "cuda:0");
    assert_int_equal(c.hardware.kind, AC_DEVICE_CUDA);
    assert_int_equal(c.hardware.index, 0);
    assert_string_equal(c.hardware.name, "RTX 5070");
    assert_true(c.hardware.has_memory);
    assert_near(c.hardware.memory_gib, 12.0);
    assert_int_equal(c.hardware.count, 1);
    assert_int_equal(c.hardware.tensor_parallel, 1);
    assert_int_equal(c.hardware.data_parallel, 1);
    assert_int_equal(c.workload.batch, 1);
    assert_int_equal(c.workload.cached_tokens, 0);
    assert_int_equal(c.workload.input_tokens, 2048);
    assert_int_equal(c.workload.output_tokens, 256);
    assert_true(c.targets.has_latency);
    assert_near(c.targets.latency_ms, 750.0);
    assert_true(c.targets.has_memory);
    assert_near(c.targets.memory_gib, 4.0);
    assert_false(c.targets.has_throughput);
    assert_true(c.parent.present);
    assert_string_equal(c.parent.name, "Nemotron Nano 3 Elastic 12B");
    assert_true(c.parent.cost.has_latency);
    assert_near(c.parent.cost.latency_ms, 1147.0);
    assert_true(c.parent.cost.has_memory);
    assert_near(c.parent.cost.memory_gib, 8.76);
    assert_false(c.parent.cost.has_throughput);
    CANDIDATES(&c.search.hidden_sizes, 1920, 1792, 1664, 1536, 1408, 1280);
    CANDIDATES(&c.search.mamba_heads.values, 64);
    assert_int_equal(c.search.mamba_heads.scope, AC_SCOPE_PER_LAYER);
    assert_true(c.search.mamba_heads.remove);
    CANDIDATES(&c.search.routed_experts, 128, 96, 64, 32);
    CANDIDATES(&c.search.routed_ffn, 960, 704, 448, 192, 0);
    CANDIDATES(&c.search.shared_ffn, 3712, 2688, 1856, 1024, 0);
    assert_true(c.search.removable.mamba);
    assert_true(c.search.removable.moe);
    assert_false(c.search.removable.mlp);
    assert_false(c.search.removable.attention);
    assert_true(c.budgets.has_search_tokens);
    assert_true(c.budgets.search_tokens == INT64_C(4180000000));
    assert_true(c.budgets.has_kd_tokens);
    assert_true(c.budgets.kd_tokens == INT64_C(30000000000));
}

static void test_rtx5080_coding(void **state)
{
    (void)state;
    ac_contract c;
    load_ok(EXAMPLES "rtx5080-coding.cfg", &c);
    assert_string_equal(c.name, "rtx5080-coding");
    assert_int_equal(c.hardware.kind, AC_DEVICE_CUDA);
    assert_int_equal(c.hardware.index, 0);
    assert_string_equal(c.hardware.name, "RTX 5080");
    assert_true(c.hardware.has_memory);
    assert_near(c.hardware.memory_gib, 16.0);
    assert_int_equal(c.hardware.count, 1);
    assert_int_equal(c.hardware.tensor_parallel, 1);
    assert_int_equal(c.hardware.data_parallel, 1);
    assert_int_equal(c.workload.batch, 1);
    assert_int_equal(c.workload.cached_tokens, 262144);
    assert_int_equal(c.workload.input_tokens, 16384);
    assert_int_equal(c.workload.output_tokens, 1024);
    assert_true(c.targets.has_latency);
    assert_near(c.targets.latency_ms, 11500.0);
    assert_true(c.targets.has_memory);
    assert_near(c.targets.memory_gib, 13.96);
    assert_false(c.targets.has_throughput);
    assert_true(c.parent.present);
    assert_string_equal(c.parent.name, "Nemotron 3.5 Lightning");
    assert_near(c.parent.cost.latency_ms, 12440.0);
    assert_near(c.parent.cost.memory_gib, 23.67);
    assert_false(c.parent.cost.has_throughput);
    assert_lightning_space(&c);
    assert_true(c.budgets.search_tokens == INT64_C(2850000000));
    assert_true(c.budgets.kd_tokens == INT64_C(10000000000));
}

static void test_h100_datacenter(void **state)
{
    (void)state;
    ac_contract c;
    load_ok(EXAMPLES "h100-datacenter.cfg", &c);
    assert_string_equal(c.name, "h100-datacenter");
    assert_int_equal(c.hardware.kind, AC_DEVICE_CUDA);
    assert_string_equal(c.hardware.name, "H100");
    assert_near(c.hardware.memory_gib, 80.0);
    assert_int_equal(c.hardware.count, 8);
    assert_int_equal(c.hardware.tensor_parallel, 1);
    assert_int_equal(c.hardware.data_parallel, 8);
    assert_int_equal(c.workload.batch, 128);
    assert_int_equal(c.workload.cached_tokens, 0);
    assert_int_equal(c.workload.input_tokens, 8192);
    assert_int_equal(c.workload.output_tokens, 65536);
    assert_true(c.targets.has_throughput);
    assert_near(c.targets.throughput_tok_s, 7330.0);
    assert_false(c.targets.has_latency);
    assert_false(c.targets.has_memory);
    assert_true(c.parent.present);
    assert_true(c.parent.cost.has_throughput);
    assert_near(c.parent.cost.throughput_tok_s, 4922.0);
    assert_false(c.parent.cost.has_latency);
    assert_false(c.parent.cost.has_memory);
    assert_lightning_space(&c);
    assert_true(c.budgets.search_tokens == INT64_C(3000000000));
    assert_true(c.budgets.kd_tokens == INT64_C(10000000000));
}

/* The CPU contracts: the parent's sizes head every candidate list. */
static void assert_cpu_parent_first(const ac_contract *c)
{
    assert_int_equal(c->hardware.kind, AC_DEVICE_CPU);
    assert_int_equal(c->hardware.count, 1);
    assert_false(c->hardware.has_memory);
    assert_int_equal(c->search.hidden_sizes.values[0], 256);
    assert_int_equal(c->search.mamba_heads.values.values[0], 8);
    assert_int_equal(c->search.routed_experts.values[0], 16);
    assert_int_equal(c->search.routed_ffn.values[0], 128);
    assert_int_equal(c->search.shared_ffn.values[0], 256);
}

static void test_cpu_examples(void **state)
{
    (void)state;
    ac_contract c;

    load_ok(EXAMPLES "cpu-latency.cfg", &c);
    assert_string_equal(c.name, "cpu-latency");
    assert_cpu_parent_first(&c);
    assert_int_equal(c.hardware.threads, 2);
    assert_int_equal(c.workload.batch, 1);
    assert_int_equal(c.workload.cached_tokens, 0);
    assert_int_equal(c.workload.input_tokens, 256);
    assert_int_equal(c.workload.output_tokens, 32);
    /* the paper's RTX 5070 ratios, relative to the parent, no absolute target */
    assert_false(c.targets.has_latency || c.targets.has_memory || c.targets.has_throughput);
    assert_true(c.ratios.has_latency && c.ratios.has_memory);
    assert_false(c.ratios.has_throughput);
    assert_near(c.ratios.latency, 0.65);
    assert_near(c.ratios.memory, 0.46);

    load_ok(EXAMPLES "cpu-long-context.cfg", &c);
    assert_string_equal(c.name, "cpu-long-context");
    assert_cpu_parent_first(&c);
    assert_int_equal(c.workload.batch, 1);
    assert_int_equal(c.workload.cached_tokens, 2048);
    assert_int_equal(c.workload.input_tokens, 256);
    assert_int_equal(c.workload.output_tokens, 64);
    /* the RTX 5080 ratios */
    assert_false(c.targets.has_latency || c.targets.has_memory || c.targets.has_throughput);
    assert_true(c.ratios.has_latency && c.ratios.has_memory);
    assert_false(c.ratios.has_throughput);
    assert_near(c.ratios.latency, 0.92);
    assert_near(c.ratios.memory, 0.59);

    load_ok(EXAMPLES "cpu-throughput.cfg", &c);
    assert_string_equal(c.name, "cpu-throughput");
    assert_cpu_parent_first(&c);
    assert_int_equal(c.workload.batch, 16);
    assert_int_equal(c.workload.cached_tokens, 0);
    assert_int_equal(c.workload.input_tokens, 128);
    assert_int_equal(c.workload.output_tokens, 128);
    /* the H100 ratio */
    assert_false(c.targets.has_latency || c.targets.has_memory || c.targets.has_throughput);
    assert_true(c.ratios.has_throughput);
    assert_false(c.ratios.has_latency || c.ratios.has_memory);
    assert_near(c.ratios.throughput, 1.5);

    /* resolved against a parent's costs: 1.5 x its throughput; no other target */
    ac_contract_costs parent = {.has_latency = true, .latency_ms = 400.0, .has_throughput = true,
                                .throughput_tok_s = 800.0, .has_memory = true,
                                .memory_gib = 0.1};
    ac_contract_costs t;
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_true(t.has_throughput);
    assert_near(t.throughput_tok_s, 1200.0);
    assert_false(t.has_latency || t.has_memory);
}

/* The six examples resolve: the GPU ones without a parent (absolute targets only), the
 * CPU ones against their parent's costs. */
static void test_examples_resolve(void **state)
{
    (void)state;
    static const char *const gpu[] = {"rtx5070-npc.cfg", "rtx5080-coding.cfg",
                                      "h100-datacenter.cfg"};
    ac_contract c;
    ac_contract_costs t;
    for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s%s", EXAMPLES, gpu[i]);
        load_ok(path, &c);
        if (ac_contract_resolve_targets(&c, NULL, &t) != AC_OK)
            fail_msg("%s: %s", path, ac_error_message());
        assert_true(t.has_latency == c.targets.has_latency &&
                    t.has_throughput == c.targets.has_throughput && t.has_memory);
        assert_true(t.latency_ms == c.targets.latency_ms &&
                    t.throughput_tok_s == c.targets.throughput_tok_s);
    }
    /* the memory bound: the target where the file gives one (4.0 within 12, 13.96 within
     * 16), else the device's 80 GiB (h100-datacenter has no memory target) */
    static const double memory[] = {4.0, 13.96, 80.0};
    for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s%s", EXAMPLES, gpu[i]);
        load_ok(path, &c);
        assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_OK);
        assert_near(t.memory_gib, memory[i]);
    }
    ac_contract_costs parent = {.has_latency = true, .latency_ms = 1000.0, .has_throughput = true,
                                .throughput_tok_s = 100.0, .has_memory = true,
                                .memory_gib = 0.5};
    load_ok(EXAMPLES "cpu-latency.cfg", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_true(t.has_latency && t.has_memory && !t.has_throughput);
    assert_near(t.latency_ms, 650.0);
    assert_near(t.memory_gib, 0.23);
    load_ok(EXAMPLES "cpu-long-context.cfg", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.latency_ms, 920.0);
    assert_near(t.memory_gib, 0.295);
    /* a ratio with no parent at all names the quantity */
    ac_clear_error();
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "latency_ratio"));
    assert_false(t.has_latency || t.has_memory || t.has_throughput);
}

/* Fails unless the last message begins "FILE:LINE: " and contains `word`. */
static void assert_error_at(ac_status st, const char *file, int line, const char *word)
{
    char prefix[1200];
    const char *msg = ac_error_message();
    snprintf(prefix, sizeof prefix, "%s:%d: ", file, line);
    if (st != AC_ERR_INVALID)
        fail_msg("%s: status %s, want invalid input (message: %s)", file, ac_status_name(st), msg);
    if (strncmp(msg, prefix, strlen(prefix)))
        fail_msg("message \"%s\" does not start with \"%s\"", msg, prefix);
    if (!strstr(msg + strlen(prefix), word))
        fail_msg("message \"%s\" does not mention \"%s\"", msg, word);
}

static void test_bad_contracts(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int line;
        const char *word;
    } cases[] = {
        {"syntax-error.cfg", 9, "syntax error"},
        {"unknown-key-top.cfg", 12, "colour"},
        {"unknown-key-hardware.cfg", 6, "gpus"},
        {"unknown-key-mamba.cfg", 17, "heads"},
        {"wrong-type.cfg", 8, "workload.batch: expected an integer, got a string"},
        {"float-for-int.cfg", 9, "workload.input_tokens: expected an integer, got a float"},
        {"list-element-type.cfg", 18, "routed_experts[1]: expected an integer, got a string"},
        {"empty-list.cfg", 19, "routed_ffn: empty list"},
        {"negative-size.cfg", 19, "routed_ffn[1] = -64"},
        {"zero-hidden.cfg", 16, "hidden_sizes[1] = 0: must be > 0"},
        {"not-descending.cfg", 16, "strictly descending"},
        {"duplicate-values.cfg", 18, "routed_experts[2] = 8: duplicate"},
        {"no-target.cfg", 12, "no target"},
        {"bad-device.cfg", 4, "gpu0"},
        {"bad-weights.cfg", 5, "hardware.weights: 'f16' is neither"},
        {"tp-dp-mismatch.cfg", 3, "does not equal count (8)"},
        {"missing-workload.cfg", 1, "workload"},
        {"missing-field.cfg", 7, "input_tokens"},
        {"bad-scope.cfg", 17, "per_head"},
        {"bad-removable.cfg", 21, "ffn"},
        {"int-overflow.cfg", 23, "30000000000L"},
        {"remove-not-removable.cfg", 17, "removable"},
        {"negative-budget.cfg", 23, "budgets.search_tokens = -1"},
        {"tensor-parallel.cfg", 7, "hardware.tensor_parallel = 2: not supported"},
        {"zero-output.cfg", 10, "workload.output_tokens = 0: must be > 0"},
        {"missing-output.cfg", 7, "output_tokens"},
        {"too-many-threads.cfg", 5, "hardware.threads = 100000: at most 4096"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        ac_contract c;
        snprintf(path, sizeof path, "%s%s", BAD, cases[i].file);
        memset(&c, 0x5a, sizeof c);
        ac_clear_error();
        ac_status st = ac_contract_load(path, &c);
        assert_error_at(st, path, cases[i].line, cases[i].word);
        assert_int_equal(c.name[0], 0); /* zeroed on failure */
        assert_int_equal(c.workload.batch, 0);
    }
}

/* The text the bad files break is itself valid, and parse_string fills the defaults. */
static void test_parse_string_defaults(void **state)
{
    (void)state;
    ac_contract c;
    ac_status st = ac_contract_parse_string(base_text, "inline", &c);
    if (st != AC_OK)
        fail_msg("%s", ac_error_message());
    assert_string_equal(c.name, "bad");
    assert_string_equal(c.source, "inline");
    assert_int_equal(c.hardware.kind, AC_DEVICE_CPU);
    assert_string_equal(c.hardware.name, "");
    assert_int_equal(c.hardware.threads, 1);
    assert_int_equal(c.hardware.count, 1);
    assert_int_equal(c.hardware.tensor_parallel, 1);
    assert_int_equal(c.hardware.data_parallel, 1);
    assert_false(c.hardware.has_memory);
    assert_int_equal(c.workload.cached_tokens, 0);
    assert_int_equal(c.workload.output_tokens, 8);
    assert_false(c.parent.present);
    assert_int_equal(c.search.mamba_heads.scope, AC_SCOPE_GLOBAL);
    assert_false(c.search.mamba_heads.remove);
    assert_false(c.search.removable.mamba || c.search.removable.moe);
    assert_false(c.budgets.has_search_tokens || c.budgets.has_kd_tokens);
    assert_near(c.margin, 0.02);
    CANDIDATES(&c.search.routed_ffn, 128, 0);
}

/* `text` with its first `from` replaced by `to` (malloc'd). */
static char *edit_text(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at)
        fail_msg("'%s' not in the text", from);
    size_t head = (size_t)(at - text), total = strlen(text) + strlen(to) + 1;
    char *out = malloc(total);
    assert_non_null(out);
    snprintf(out, total, "%.*s%s%s", (int)head, text, to, at + strlen(from));
    return out;
}

/* Replaces the first `from` in base_text with `to` and parses the result. */
static ac_status parse_edit(const char *from, const char *to, const char *name, ac_contract *c)
{
    char *text = edit_text(base_text, from, to);
    ac_status st = ac_contract_parse_string(text, name, c);
    free(text);
    return st;
}

static void expect_ok(const char *from, const char *to, ac_contract *c)
{
    if (parse_edit(from, to, "edit", c) != AC_OK)
        fail_msg("'%s' -> '%s': %s", from, to, ac_error_message());
}

static void expect_bad(const char *from, const char *to, int line, const char *word)
{
    ac_contract c;
    ac_status st = parse_edit(from, to, "edit", &c);
    assert_error_at(st, "edit", line, word);
}

static void test_parse_string_errors(void **state)
{
    (void)state;
    ac_contract c;

    /* the name for errors stands in for FILE, "<string>" without one */
    assert_error_at(ac_contract_parse_string("name = ;\n", "my-contract", &c), "my-contract", 1,
                    "syntax error");
    assert_error_at(ac_contract_parse_string("name = \"x\";\n", NULL, &c), "<string>", 1,
                    "hardware");
    assert_error_at(ac_contract_parse_string("", NULL, &c), "<string>", 1, "name");
    assert_int_equal(ac_contract_parse_string(NULL, "x", &c), AC_ERR_INVALID);

    /* devices */
    expect_ok("\"cpu\"", "\"cuda:3\"", &c);
    assert_int_equal(c.hardware.kind, AC_DEVICE_CUDA);
    assert_int_equal(c.hardware.index, 3);
    expect_ok("\"cpu\"", "\"cuda\"", &c);
    assert_int_equal(c.hardware.kind, AC_DEVICE_CUDA);
    assert_int_equal(c.hardware.index, 0);
    expect_bad("\"cpu\"", "\"cud\"", 3, "bad device");
    expect_bad("\"cpu\"", "\"cuda:\"", 3, "bad device");
    expect_bad("\"cpu\"", "\"cuda:-1\"", 3, "bad device");
    expect_bad("\"cpu\"", "\"cuda:1x\"", 3, "bad device");
    expect_bad("\"cpu\"", "\"CPU\"", 3, "bad device");
    expect_bad("device = \"cpu\";", "device = 0;", 3, "expected a string");
    expect_bad("threads = 1;", "threads = -1;", 4, "hardware.threads = -1: must be >= 0");
    expect_ok("threads = 1;", "threads = 4096;", &c);
    assert_int_equal(c.hardware.threads, 4096);
    expect_bad("threads = 1;", "threads = 4097;", 4, "hardware.threads = 4097: at most 4096");
    expect_ok("threads = 1;", "threads = 0;", &c); /* all cores */
    assert_int_equal(c.hardware.threads, 0);
    expect_ok("output_tokens = 8;", "output_tokens = 1;", &c);
    assert_int_equal(c.workload.output_tokens, 1);
    expect_bad("output_tokens = 8;", "output_tokens = 0;", 9, "workload.output_tokens = 0: must be > 0");

    /* data parallel replicas are accepted; tensor parallelism is refused, not ignored */
    expect_ok("threads = 1;", "count = 4; data_parallel = 4;", &c);
    assert_int_equal(c.hardware.data_parallel, 4);
    assert_int_equal(c.hardware.tensor_parallel, 1);
    expect_bad("threads = 1;", "count = 4; tensor_parallel = 4; data_parallel = 1;", 4,
               "hardware.tensor_parallel = 4: not supported");
    expect_bad("threads = 1;", "count = 4; tensor_parallel = 2; data_parallel = 2;", 4,
               "hardware.tensor_parallel = 2: not supported");
    expect_bad("threads = 1;", "count = 3; data_parallel = 4;", 2, "does not equal count (3)");

    /* targets: any one suffices, each > 0, memory within the device's */
    expect_ok("latency_ms = 100.0;", "throughput_tok_s = 50;", &c);
    assert_true(c.targets.has_throughput);
    assert_near(c.targets.throughput_tok_s, 50.0);
    expect_ok("latency_ms = 100.0;", "memory_gib = 1;", &c);
    assert_true(c.targets.has_memory && !c.targets.has_latency);
    expect_bad("latency_ms = 100.0;", "latency_ms = 0.0;", 12, "must be > 0");
    expect_bad("latency_ms = 100.0;", "latency_ms = \"fast\";", 12, "expected a number");
    expect_bad("latency_ms = 100.0;", "", 11, "no target");
    expect_ok("threads = 1;", "memory_gib = 8.0;", &c);
    assert_near(c.hardware.memory_gib, 8.0);
    char *two = edit_text(base_text, "threads = 1;", "memory_gib = 2.0;");
    char *three = edit_text(two, "latency_ms = 100.0;", "memory_gib = 4.0;");
    assert_error_at(ac_contract_parse_string(three, "edit", &c), "edit", 12,
                    "targets.memory_gib = 4 exceeds hardware.memory_gib = 2");
    free(three);
    free(two);

    /* the margin: a fraction in [0, 0.5), not a target by itself */
    expect_ok("latency_ms = 100.0;", "latency_ms = 100.0; margin = 0.1;", &c);
    assert_near(c.margin, 0.1);
    expect_ok("latency_ms = 100.0;", "latency_ms = 100.0; margin = 0;", &c);
    assert_near(c.margin, 0.0);
    expect_bad("latency_ms = 100.0;", "latency_ms = 100.0; margin = -0.01;", 12, "targets.margin = -0.01: must be in [0, 0.5)");
    expect_bad("latency_ms = 100.0;", "latency_ms = 100.0; margin = 0.5;", 12, "must be in [0, 0.5)");
    expect_bad("latency_ms = 100.0;", "latency_ms = 100.0; margin = \"2%\";", 12, "targets.margin: expected a number");
    expect_bad("latency_ms = 100.0;", "margin = 0.1;", 11, "no target");

    /* groups and lists of the wrong shape */
    expect_bad("targets = {\n  latency_ms = 100.0;\n};", "targets = 3;", 11, "expected a group");
    expect_bad("hidden_sizes = [256, 128];", "hidden_sizes = 256;", 15, "expected a list");
    expect_bad("mamba_heads = { values = [8, 4]; scope = \"global\"; };", "mamba_heads = [8];",
               16, "expected a group");
    expect_bad("values = [8, 4]; ", "", 16, "values");
    expect_bad("scope = \"global\";", "remove = 1;", 16, "expected true or false");
    expect_bad("[16, 8]", "[16, 8.5]", 17, "mismatched");
    expect_bad("name = \"bad\";", "name = \"\";", 1, "empty");
    expect_bad("input_tokens = 64;", "input_tokens = 0;", 8, "must be > 0");
    expect_bad("batch = 1;", "batch = 0;", 7, "workload.batch = 0");

    /* 32 candidates are fine, 33 are not */
    char list[512] = "hidden_sizes = [";
    for (int i = 33; i >= 1; i--)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%d%s", i * 8, i > 1 ? ", " : "];");
    expect_bad("hidden_sizes = [256, 128];", list, 15, "at most 32");
    char *cut = strstr(list, ", 8];");
    assert_non_null(cut);
    strcpy(cut, "];");
    expect_ok("hidden_sizes = [256, 128];", list, &c);
    assert_int_equal(c.search.hidden_sizes.count, 32);
    assert_int_equal(c.search.hidden_sizes.values[31], 16);

    /* removable: every kind once; () and [] both mean depth fixed */
    expect_ok("shared_ffn = [256, 0];",
              "shared_ffn = [256, 0]; removable = [\"attention\", \"mlp\", \"moe\", \"mamba\"];",
              &c);
    assert_true(c.search.removable.mamba && c.search.removable.moe && c.search.removable.mlp &&
                c.search.removable.attention);
    expect_ok("shared_ffn = [256, 0];", "shared_ffn = [256, 0]; removable = ();", &c);
    assert_false(c.search.removable.mamba);
    expect_bad("shared_ffn = [256, 0];", "shared_ffn = [256, 0]; removable = [\"moe\", \"moe\"];",
               19, "duplicate");
    expect_bad("shared_ffn = [256, 0];", "shared_ffn = [256, 0]; removable = (\"moe\", 1);", 19,
               "expected a string");

    /* only routed_ffn and shared_ffn may hold 0 */
    expect_bad("[16, 8]", "[16, 0]", 17, "routed_experts[1] = 0: must be > 0");
    expect_bad("values = [8, 4]", "values = [8, 0]", 16, "values[1] = 0");
    expect_bad("[256, 0]", "[256, -1]", 19, "shared_ffn[1] = -1");
}

static void test_target_ratios(void **state)
{
    (void)state;
    ac_contract c;

    /* each ratio alone is a target, > 0 and finite, any size (a throughput ratio > 1) */
    expect_ok("latency_ms = 100.0;", "latency_ratio = 0.65;", &c);
    assert_true(c.ratios.has_latency);
    assert_near(c.ratios.latency, 0.65);
    assert_false(c.ratios.has_throughput || c.ratios.has_memory);
    assert_false(c.targets.has_latency || c.targets.has_throughput || c.targets.has_memory);
    expect_ok("latency_ms = 100.0;", "throughput_ratio = 2;", &c);
    assert_true(c.ratios.has_throughput && !c.ratios.has_latency);
    assert_near(c.ratios.throughput, 2.0);
    expect_ok("latency_ms = 100.0;", "memory_ratio = 1.25;", &c);
    assert_true(c.ratios.has_memory);
    assert_near(c.ratios.memory, 1.25);

    /* absolute and relative mix across quantities */
    expect_ok("latency_ms = 100.0;", "latency_ms = 100.0; memory_ratio = 0.5; "
              "throughput_ratio = 1.5;", &c);
    assert_true(c.targets.has_latency && !c.targets.has_memory && !c.targets.has_throughput);
    assert_true(c.ratios.has_memory && c.ratios.has_throughput && !c.ratios.has_latency);

    /* ... but not for one quantity: the error names both keys, at the ratio's line */
    expect_bad("latency_ms = 100.0;", "latency_ms = 100.0;\n  latency_ratio = 0.5;", 13,
               "targets.latency_ms and targets.latency_ratio both given");
    expect_bad("latency_ms = 100.0;", "throughput_ratio = 1.5;\n  throughput_tok_s = 10;", 12,
               "targets.throughput_tok_s and targets.throughput_ratio both given");
    expect_bad("latency_ms = 100.0;", "memory_gib = 1.0; memory_ratio = 0.5;", 12,
               "targets.memory_gib and targets.memory_ratio");

    /* bad values */
    expect_bad("latency_ms = 100.0;", "latency_ratio = 0;", 12,
               "targets.latency_ratio = 0: must be > 0");
    expect_bad("latency_ms = 100.0;", "latency_ratio = 0.0;", 12, "must be > 0");
    expect_bad("latency_ms = 100.0;", "throughput_ratio = -1.5;", 12,
               "targets.throughput_ratio = -1.5: must be > 0");
    expect_bad("latency_ms = 100.0;", "memory_ratio = \"half\";", 12,
               "targets.memory_ratio: expected a number, got a string");
    expect_bad("latency_ms = 100.0;", "memory_ratio = true;", 12, "expected a number");
    expect_bad("latency_ms = 100.0;", "latency_ratios = 0.5;", 12,
               "unknown key 'latency_ratios' in targets");
    expect_bad("latency_ms = 100.0;", "", 11, "latency_ratio");

    /* a memory ratio is not checked against the device at parse time */
    char *mem = edit_text(base_text, "threads = 1;", "memory_gib = 2.0;");
    char *rel = edit_text(mem, "latency_ms = 100.0;", "memory_ratio = 0.5;");
    assert_int_equal(ac_contract_parse_string(rel, "edit", &c), AC_OK);
    free(rel);
    free(mem);
}

static void test_resolve_targets(void **state)
{
    (void)state;
    ac_contract c;
    ac_contract_costs t, parent = {.has_latency = true, .latency_ms = 200.0,
                                   .has_throughput = true, .throughput_tok_s = 50.0,
                                   .has_memory = true, .memory_gib = 3.0};

    /* absolute targets pass through, with or without a parent */
    expect_ok("latency_ms = 100.0;", "latency_ms = 100.0; memory_gib = 1.5;", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_OK);
    assert_true(t.has_latency && t.has_memory && !t.has_throughput);
    assert_near(t.latency_ms, 100.0);
    assert_near(t.memory_gib, 1.5);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.latency_ms, 100.0); /* the parent's 200 is not used */
    assert_false(t.has_throughput);

    /* ratios resolve against the parent; absolute ones stay */
    expect_ok("latency_ms = 100.0;", "latency_ratio = 0.5; throughput_ratio = 1.5; "
              "memory_gib = 2.5;", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_true(t.has_latency && t.has_throughput && t.has_memory);
    assert_near(t.latency_ms, 100.0);
    assert_near(t.throughput_tok_s, 75.0);
    assert_near(t.memory_gib, 2.5);

    /* no parent, or a parent lacking the cost a ratio needs: the quantity is named */
    ac_clear_error();
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "edit: targets.latency_ratio = 0.5 needs the "
                                               "parent's latency (latency_ms)"));
    assert_false(t.has_latency || t.has_throughput || t.has_memory);
    ac_contract_costs partial = parent;
    partial.has_throughput = false;
    assert_int_equal(ac_contract_resolve_targets(&c, &partial, &t), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "throughput_ratio = 1.5"));
    assert_non_null(strstr(ac_error_message(), "throughput_tok_s"));
    assert_false(t.has_latency || t.has_throughput || t.has_memory);
    /* a cost the ratio does not need may be missing */
    partial = parent;
    partial.has_memory = false;
    assert_int_equal(ac_contract_resolve_targets(&c, &partial, &t), AC_OK);
    /* a parent cost that is not > 0 is as good as missing */
    partial = parent;
    partial.latency_ms = 0;
    assert_int_equal(ac_contract_resolve_targets(&c, &partial, &t), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "latency_ms"));

    /* a resolved memory target must fit the device */
    char *mem = edit_text(base_text, "threads = 1;", "memory_gib = 2.0;");
    char *rel = edit_text(mem, "latency_ms = 100.0;", "memory_ratio = 0.5;");
    assert_int_equal(ac_contract_parse_string(rel, "edit", &c), AC_OK);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK); /* 1.5 <= 2 */
    assert_near(t.memory_gib, 1.5);
    parent.memory_gib = 6.0;
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_ERR_INVALID); /* 3 */
    assert_non_null(strstr(ac_error_message(), "exceeds hardware.memory_gib = 2"));
    assert_false(t.has_memory);
    parent.memory_gib = 4.0; /* 2.0: exactly the device's */
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.memory_gib, 2.0);
    free(rel);
    free(mem);

    /* NULL arguments */
    assert_int_equal(ac_contract_resolve_targets(NULL, &parent, &t), AC_ERR_INVALID);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, NULL), AC_ERR_INVALID);
}

/* hardware.memory_gib bounds the memory: the resolved memory target is the smaller of
 * the contract's own memory target and the device's memory, the device's when there is
 * no target. Each expected value is the contract's numbers worked out here. */
static void test_memory_bound(void **state)
{
    (void)state;
    ac_contract c;
    ac_contract_costs t, parent = {.has_latency = true, .latency_ms = 200.0, .has_memory = true, .memory_gib = 3.0};
    /* no memory target: the device's 2.5 GiB becomes it, with or without a parent */
    expect_ok("threads = 1;", "memory_gib = 2.5;", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_OK);
    assert_true(t.has_memory && t.has_latency && !t.has_throughput);
    assert_near(t.memory_gib, 2.5);
    assert_near(t.latency_ms, 100.0);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.memory_gib, 2.5);
    /* a target below the device's memory stays: min(1.25, 2.5) */
    char *dev = edit_text(base_text, "threads = 1;", "memory_gib = 2.5;");
    char *abs = edit_text(dev, "latency_ms = 100.0;", "latency_ms = 100.0; memory_gib = 1.25;");
    assert_int_equal(ac_contract_parse_string(abs, "edit", &c), AC_OK);
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_OK);
    assert_near(t.memory_gib, 1.25);
    /* a ratio: 0.5 x the parent's 3.0 = 1.5 < 2.5 */
    char *rel = edit_text(dev, "latency_ms = 100.0;", "latency_ms = 100.0; memory_ratio = 0.5;");
    assert_int_equal(ac_contract_parse_string(rel, "edit", &c), AC_OK);
    assert_int_equal(ac_contract_resolve_targets(&c, &parent, &t), AC_OK);
    assert_near(t.memory_gib, 1.5);
    /* no device memory, no memory target: memory stays unbounded */
    expect_ok("threads = 1;", "threads = 2;", &c);
    assert_int_equal(ac_contract_resolve_targets(&c, NULL, &t), AC_OK);
    assert_false(t.has_memory);
    free(rel);
    free(abs);
    free(dev);
}

/* A parent with one MoE layer routing each token to `top_k` of 16 experts, between two
 * Mamba layers (only the MoE layer's top_k matters to the check). */
static void moe_parent(ac_arch *a, int top_k)
{
    static ac_block_dims layers[3];
    memset(layers, 0, sizeof layers);
    layers[0].kind = layers[2].kind = AC_BLOCK_MAMBA;
    layers[1].kind = AC_BLOCK_MOE;
    layers[1].n_experts = 16;
    layers[1].top_k = top_k;
    *a = (ac_arch){.vocab = 32, .hidden = 256, .n_layers = 3, .layers = layers};
}

/* routed_experts = [16, 8] (base_text) against parents of top_k 8 (the fewest equals
 * it: fine) and 9 (8 < 9: refused, naming the candidate, the layer and its top_k). */
static void test_check_parent(void **state)
{
    (void)state;
    ac_contract c;
    ac_arch parent;
    assert_int_equal(ac_contract_parse_string(base_text, "edit", &c), AC_OK);
    moe_parent(&parent, 8);
    assert_int_equal(ac_contract_check_parent(&c, &parent), AC_OK);
    moe_parent(&parent, 9);
    ac_clear_error();
    assert_int_equal(ac_contract_check_parent(&c, &parent), AC_ERR_INVALID);
    const char *msg = ac_error_message();
    if (!strstr(msg, "edit: search_space.routed_experts[1] = 8 is below the parent's top_k") ||
        !strstr(msg, " 9 of layer 1"))
        fail_msg("unclear message: %s", msg);
    /* a parent without MoE layers has no top_k to meet */
    moe_parent(&parent, 9);
    parent.layers[1].kind = AC_BLOCK_MLP;
    assert_int_equal(ac_contract_check_parent(&c, &parent), AC_OK);
}

static void test_budgets_and_literals(void **state)
{
    (void)state;
    ac_contract c;
    const char *tail = "shared_ffn = [256, 0];\n};\nbudgets = {\n  search_tokens = %s;\n"
                       "  kd_tokens = %s;\n};\n";
    char edit[256];

    snprintf(edit, sizeof edit, tail, "2147483647", "9000000000000000000L");
    expect_ok("shared_ffn = [256, 0];\n};\n", edit, &c);
    assert_true(c.budgets.search_tokens == INT64_C(2147483647));
    assert_true(c.budgets.kd_tokens == INT64_C(9000000000000000000));
    snprintf(edit, sizeof edit, tail, "0", "0x10");
    expect_ok("shared_ffn = [256, 0];\n};\n", edit, &c);
    assert_true(c.budgets.has_search_tokens && c.budgets.search_tokens == 0);
    assert_true(c.budgets.kd_tokens == 16);

    snprintf(edit, sizeof edit, tail, "2147483648", "0");
    expect_bad("shared_ffn = [256, 0];\n};\n", edit, 22, "2147483648L");
    snprintf(edit, sizeof edit, tail, "1", "0x100000000");
    expect_bad("shared_ffn = [256, 0];\n};\n", edit, 23, "32 bits");
    snprintf(edit, sizeof edit, tail, "1.5e9", "0");
    expect_bad("shared_ffn = [256, 0];\n};\n", edit, 22, "expected an integer, got a float");
    snprintf(edit, sizeof edit, tail, "1", "\"many\"");
    expect_bad("shared_ffn = [256, 0];\n};\n", edit, 23, "got a string");
    expect_bad("shared_ffn = [256, 0];\n};\n",
               "shared_ffn = [256, 0];\n};\nbudgets = { search_tokens = 1; kd = 2; };\n", 21,
               "unknown key 'kd' in budgets");

    /* large numbers in comments, strings and floats are not integers */
    expect_ok("name = \"bad\";",
              "# 99999999999\nname = \"bad 99999999999\"; /* 99999999999\n */ // 99999999999\n",
              &c);
    assert_string_equal(c.name, "bad 99999999999");
    expect_ok("latency_ms = 100.0;", "latency_ms = 99999999999.5;", &c);
    expect_ok("latency_ms = 100.0;", "latency_ms = 1.5e+3;", &c);
    assert_near(c.targets.latency_ms, 1500.0);
    expect_bad("latency_ms = 100.0;", "latency_ms = 100.0; k99999999999 = 1;", 12,
               "unknown key 'k99999999999' in targets");
}

static void test_parent_group(void **state)
{
    (void)state;
    ac_contract c;
    expect_ok("targets = {", "parent = { };\ntargets = {", &c);
    assert_true(c.parent.present);
    assert_string_equal(c.parent.name, "");
    assert_false(c.parent.cost.has_latency || c.parent.cost.has_memory ||
                 c.parent.cost.has_throughput);
    expect_bad("targets = {", "parent = { name = \"p\"; speed = 1; };\ntargets = {", 11,
               "unknown key 'speed' in parent");
    expect_bad("targets = {", "parent = { memory_gib = -1.0; };\ntargets = {", 11,
               "parent.memory_gib = -1: must be > 0");
}

static void test_missing_file(void **state)
{
    (void)state;
    ac_contract c;
    const char *path = AC_SOURCE_DIR "/tests/contracts/no-such-contract.cfg";
    ac_status st = ac_contract_load(path, &c);
    assert_int_equal(st, AC_ERR_IO);
    assert_non_null(strstr(ac_error_message(), path));
    assert_int_equal(ac_contract_load(AC_SOURCE_DIR "/tests/contracts", &c) == AC_OK, 0);
}

static void test_print(void **state)
{
    (void)state;
    ac_contract c;
    char *text = NULL;
    size_t size = 0;
    load_ok(EXAMPLES "rtx5070-npc.cfg", &c);
    FILE *out = open_memstream(&text, &size);
    assert_non_null(out);
    ac_contract_print(&c, out);
    fclose(out);
    static const char *const want[] = {
        "contract rtx5070-npc", "cuda:0", "RTX 5070", "2048", "256", "<= 750", "<= 4",
        "Nemotron Nano 3 Elastic 12B", "1147", "8.76", "1920, 1792, 1664, 1536, 1408, 1280",
        "per_layer", "960, 704, 448, 192, 0", "3712, 2688, 1856, 1024, 0", "mamba, moe",
        "4180000000", "30000000000", "tensor_parallel", "data_parallel", "cached_tokens"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i]))
            fail_msg("printout lacks \"%s\":\n%s", want[i], text);
    free(text);

    /* relative targets print as multiples of the parent's cost */
    load_ok(EXAMPLES "cpu-latency.cfg", &c);
    out = open_memstream(&text, &size);
    assert_non_null(out);
    ac_contract_print(&c, out);
    fclose(out);
    static const char *const rel[] = {
        "latency_ratio    <= 0.65 x the parent's latency_ms",
        "throughput_tok_s -", "memory_ratio     <= 0.46 x the parent's memory_gib",
        "margin           0.02 (the search plans 2% inside every target)"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
        if (!strstr(text, rel[i]))
            fail_msg("printout lacks \"%s\":\n%s", rel[i], text);
    free(text);

    /* no memory target: the device's memory bounds it; the replicas are explained */
    load_ok(EXAMPLES "h100-datacenter.cfg", &c);
    out = open_memstream(&text, &size);
    assert_non_null(out);
    ac_contract_print(&c, out);
    fclose(out);
    static const char *const dp[] = {"memory_gib       <= 80 (hardware.memory_gib",
                                     "data_parallel    8 (replicas, one a device"};
    for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++)
        if (!strstr(text, dp[i]))
            fail_msg("printout lacks \"%s\":\n%s", dp[i], text);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rtx5070_npc),
        cmocka_unit_test(test_rtx5080_coding),
        cmocka_unit_test(test_h100_datacenter),
        cmocka_unit_test(test_cpu_examples),
        cmocka_unit_test(test_bad_contracts),
        cmocka_unit_test(test_parse_string_defaults),
        cmocka_unit_test(test_parse_string_errors),
        cmocka_unit_test(test_examples_resolve),
        cmocka_unit_test(test_target_ratios),
        cmocka_unit_test(test_resolve_targets),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_check_parent),
        cmocka_unit_test(test_budgets_and_literals),
        cmocka_unit_test(test_parent_group),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
