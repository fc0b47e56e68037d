/* Checkpoint loading and saving: round trips in F32 and BF16, the other layouts a loader
 * meets (backbone. prefix, fused experts, shards), broken checkpoints, and the
 * transformers-made fixtures. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autocompress/arch.h"
#include "autocompress/config_json.h"
#include "autocompress/model.h"
#include "autocompress/safetensors.h"

/* Six layers, every kind, two MoE layers that differ (one without a shared expert). */
static const char *const ARCH_JSON =
    "{\"model_type\": \"nemotron_h_puzzle\", \"vocab_size\": 40, \"hidden_size\": 16,"
    " \"layer_norm_epsilon\": 1e-5, \"tie_word_embeddings\": false, \"chunk_size\": 8,"
    " \"mamba_num_heads\": 4, \"mamba_head_dim\": 4, \"n_groups\": 2, \"ssm_state_size\": 4, \"conv_kernel\": 3,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 4, \"intermediate_size\": 40,"
    " \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8,"
    " \"moe_shared_expert_intermediate_size\": 12,"
    " \"block_configs\": [{\"block_type\": \"mamba\"}, {\"block_type\": \"attention\"}, {\"block_type\": \"mlp\"},"
    "  {\"block_type\": \"moe\"}, {\"block_type\": \"moe\", \"n_routed_experts\": 6, \"moe_intermediate_size\": 4,"
    "  \"moe_shared_expert_intermediate_size\": 0}, {\"block_type\": \"mamba\"}]}";

/* ---- helpers ---- */

static ac_model *make_model(int tie)
{
    ac_arch arch;
    assert_int_equal(ac_config_json_parse(ARCH_JSON, "test", &arch), AC_OK);
    arch.tie_embeddings = tie;
    ac_model *m;
    assert_int_equal(ac_model_create(&arch, &m), AC_OK);
    ac_arch_free(&arch);
    /* Deterministic values with full mantissas over several binades, so bf16 rounding
     * changes almost every one of them. */
    size_t n;
    float *w = ac_model_arena(m, &n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float u = (float)((s >> 11) * (1.0 / 9007199254740992.0)); /* [0, 1) */
        w[i] = (u - 0.5f) * (float)(1 << (s & 3));
    }
    return m;
}

static char *make_dir(void)
{
    char *dir = strdup("/tmp/ac_model_io_XXXXXX");
    assert_non_null(mkdtemp(dir));
    return dir;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_dir(char *dir)
{
    assert_int_equal(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(dir);
}

static char *path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static int exists(const char *dir, const char *name)
{
    char *p = path_in(dir, name);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

static ac_model *load_ok(const char *dir)
{
    ac_model *m = NULL;
    ac_status st = ac_model_load(dir, &m);
    if (st != AC_OK)
        fail_msg("loading %s: %s", dir, ac_error_message());
    return m;
}

/* Loading fails with every needle in the message. */
static void load_fails(const char *dir, const char *needle, const char *needle2)
{
    ac_model *m = (ac_model *)1;
    ac_status st = ac_model_load(dir, &m);
    if (st == AC_OK || !strstr(ac_error_message(), needle) || (needle2 && !strstr(ac_error_message(), needle2)))
        fail_msg("expected a load error with '%s' / '%s', got %s: '%s'", needle, needle2 ? needle2 : "",
                 ac_status_name(st), ac_error_message());
    assert_null(m);
}

static void assert_arch_equal(const ac_arch *a, const ac_arch *b)
{
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->vocab, b->vocab);
    assert_int_equal(a->hidden, b->hidden);
    assert_int_equal(a->tie_embeddings, b->tie_embeddings);
    for (int i = 0; i < a->n_layers; i++) {
        assert_int_equal(a->layers[i].kind, b->layers[i].kind);
        assert_int_equal(ac_block_param_count(a, &a->layers[i]), ac_block_param_count(b, &b->layers[i]));
        assert_int_equal(ac_block_active_param_count(a, &a->layers[i]), ac_block_active_param_count(b, &b->layers[i]));
    }
}

static void assert_same_weights(const ac_model *a, const ac_model *b)
{
    assert_arch_equal(ac_model_arch(a), ac_model_arch(b));
    assert_int_equal(ac_model_param_count(a), ac_model_param_count(b));
    for (size_t i = 0; i < ac_model_param_count(a); i++) {
        const ac_param *p = ac_model_param(a, i), *q = ac_model_param(b, i);
        assert_string_equal(p->name, q->name);
        assert_int_equal(p->count, q->count);
        if (memcmp(p->data, q->data, p->count * sizeof(float)))
            fail_msg("weights of %s differ", p->name);
    }
}

/* Those ac_model_save keeps in F32 in a BF16 checkpoint. */
static int stays_f32(const char *name)
{
    size_t n = strlen(name);
#define ENDS(s) (n >= strlen(s) && !strcmp(name + n - strlen(s), s))
    return ENDS("norm.weight") || ENDS(".A_log") || ENDS(".D") || ENDS(".dt_bias") ||
           ENDS(".e_score_correction_bias") || ENDS(".gate.weight") || !strcmp(name, "norm_f.weight");
#undef ENDS
}

typedef struct {
    const char *prefix;  /* before every name but lm_head */
    int fused;           /* routed experts as [E, I, D] / [E, D, I] */
    int embedding_alias; /* "embedding.weight" */
    const char *skip;    /* a tensor (unprefixed) to leave out */
    const char *extra;   /* a full tensor name to add */
    const char *extra2;
    int lm_head_copy;    /* also store lm_head.weight = the embeddings (tied models) */
} layout;

/* Writes DIR/config.json and DIR/model.safetensors by hand, the way other tools do. */
static void write_custom(const char *dir, const ac_model *m, const layout *o)
{
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    char name[160];
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i);
        if (o->skip && !strcmp(o->skip, p->name))
            continue;
        int layer, expert;
        char which[16];
        int n = 0;
        if (o->fused && sscanf(p->name, "layers.%d.mixer.experts.%d.%15[a-z_].weight%n", &layer, &expert, which, &n) == 3 &&
            !p->name[n]) {
            if (expert != 0)
                continue;
            int E = ac_model_arch(m)->layers[layer].n_experts;
            int64_t shape[3] = {E, p->shape[0], p->shape[1]};
            snprintf(name, sizeof name, "%slayers.%d.mixer.experts.%s", o->prefix, layer, which);
            char unprefixed[96];
            snprintf(unprefixed, sizeof unprefixed, "layers.%d.mixer.experts.%s", layer, which);
            if (o->skip && !strcmp(o->skip, unprefixed))
                continue;
            assert_int_equal(ac_safetensors_writer_add(w, name, AC_DTYPE_F32, 3, shape, p->data), AC_OK);
            continue;
        }
        const char *base = o->embedding_alias && !strcmp(p->name, "embeddings.weight") ? "embedding.weight" : p->name;
        snprintf(name, sizeof name, "%s%s", strcmp(p->name, "lm_head.weight") ? o->prefix : "", base);
        assert_int_equal(ac_safetensors_writer_add(w, name, AC_DTYPE_F32, p->ndim, p->shape, p->data), AC_OK);
    }
    static const float one[4] = {1, 2, 3, 4};
    const int64_t four = 4;
    if (o->extra)
        assert_int_equal(ac_safetensors_writer_add(w, o->extra, AC_DTYPE_F32, 1, &four, one), AC_OK);
    if (o->extra2)
        assert_int_equal(ac_safetensors_writer_add(w, o->extra2, AC_DTYPE_F32, 1, &four, one), AC_OK);
    if (o->lm_head_copy) {
        const ac_param *e = ac_model_find_param(m, "embeddings.weight");
        assert_int_equal(ac_safetensors_writer_add(w, "lm_head.weight", AC_DTYPE_F32, 2, e->shape, e->data), AC_OK);
    }
    char *st_path = path_in(dir, "model.safetensors");
    assert_int_equal(ac_safetensors_writer_write(w, st_path), AC_OK);
    ac_safetensors_writer_free(w);
    free(st_path);
    char *cfg = path_in(dir, "config.json");
    assert_int_equal(ac_config_json_write(cfg, ac_model_arch(m)), AC_OK);
    free(cfg);
}

/* ---- round trips ---- */

static void test_save_load_f32_exact(void **state)
{
    (void)state;
    for (int tie = 0; tie <= 1; tie++) {
        ac_model *m = make_model(tie);
        char *dir = make_dir();
        char *sub = path_in(dir, "a/b/student"); /* created as needed */
        assert_int_equal(ac_model_save(m, sub, AC_DTYPE_F32), AC_OK);
        assert_true(exists(sub, "config.json"));
        assert_true(exists(sub, "model.safetensors"));
        assert_false(exists(sub, "model.safetensors.tmp"));
        assert_false(exists(sub, "config.json.tmp"));
        ac_model *back = load_ok(sub);
        assert_same_weights(m, back);
        /* Saving over an existing checkpoint replaces it. */
        assert_int_equal(ac_model_save(back, sub, AC_DTYPE_F32), AC_OK);
        ac_model *again = load_ok(sub);
        assert_same_weights(m, again);
        /* What is in the file: prefix model., lm_head bare, metadata format pt, all F32. */
        ac_safetensors_set *set;
        assert_int_equal(ac_safetensors_index_open(sub, &set), AC_OK);
        assert_string_equal(ac_safetensors_set_metadata(set, "format"), "pt");
        assert_non_null(ac_safetensors_set_find(set, "model.embeddings.weight"));
        assert_non_null(ac_safetensors_set_find(set, "model.layers.3.mixer.experts.3.down_proj.weight"));
        assert_int_equal(ac_safetensors_set_find(set, "lm_head.weight") != NULL, !tie);
        for (size_t i = 0; i < ac_safetensors_set_count(set); i++)
            assert_int_equal(ac_safetensors_set_at(set, i)->dtype, AC_DTYPE_F32);
        assert_int_equal(ac_safetensors_set_count(set), ac_model_param_count(m));
        ac_safetensors_set_close(set);
        ac_model_free(again);
        ac_model_free(back);
        ac_model_free(m);
        free(sub);
        remove_dir(dir);
    }
}

static void test_save_bf16(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    char *dir = make_dir();
    assert_int_equal(ac_model_save(m, dir, AC_DTYPE_BF16), AC_OK);
    ac_model *back = load_ok(dir);
    size_t rounded = 0, kept = 0;
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i), *q = ac_model_param(back, i);
        assert_string_equal(p->name, q->name);
        for (size_t k = 0; k < p->count; k++) {
            float want = stays_f32(p->name) ? p->data[k] : ac_bf16_to_float(ac_float_to_bf16(p->data[k]));
            if (memcmp(&want, &q->data[k], sizeof want))
                fail_msg("%s[%zu]: %.9g, want %.9g", p->name, k, (double)q->data[k], (double)want);
        }
        if (stays_f32(p->name))
            kept++;
        else
            rounded++;
    }
    assert_true(kept >= 6 * 1 + 2 * 5 + 1); /* every norm, A_log, D, dt_bias, router */
    assert_true(rounded > 20);
    /* The stored dtypes. */
    ac_safetensors_set *set;
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    const char *f32[] = {"model.layers.0.norm.weight", "model.layers.0.mixer.norm.weight", "model.layers.0.mixer.A_log",
                         "model.layers.0.mixer.D", "model.layers.5.mixer.dt_bias", "model.norm_f.weight",
                         "model.layers.3.mixer.gate.e_score_correction_bias", "model.layers.4.mixer.gate.weight"};
    const char *bf16[] = {"model.embeddings.weight", "lm_head.weight", "model.layers.0.mixer.in_proj.weight",
                          "model.layers.0.mixer.conv1d.weight", "model.layers.0.mixer.conv1d.bias",
                          "model.layers.1.mixer.q_proj.weight", "model.layers.3.mixer.experts.1.up_proj.weight",
                          "model.layers.3.mixer.shared_experts.down_proj.weight"};
    for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++) {
        const ac_tensor_view *v = ac_safetensors_set_find(set, f32[i]);
        assert_non_null(v);
        if (v->dtype != AC_DTYPE_F32)
            fail_msg("%s stored as %s", f32[i], ac_dtype_name(v->dtype));
    }
    for (size_t i = 0; i < sizeof bf16 / sizeof *bf16; i++) {
        const ac_tensor_view *v = ac_safetensors_set_find(set, bf16[i]);
        assert_non_null(v);
        if (v->dtype != AC_DTYPE_BF16)
            fail_msg("%s stored as %s", bf16[i], ac_dtype_name(v->dtype));
    }
    ac_safetensors_set_close(set);
    /* config.json says so. */
    char *cfg = path_in(dir, "config.json");
    FILE *f = fopen(cfg, "r");
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "\"torch_dtype\":\t\"bfloat16\""));
    assert_non_null(strstr(text, "\"model_type\":\t\"nemotron_h_puzzle\""));
    free(cfg);
    /* Other dtypes are refused. */
    assert_int_equal(ac_model_save(m, dir, AC_DTYPE_F16), AC_ERR_UNSUPPORTED);
    ac_model_free(back);
    ac_model_free(m);
    remove_dir(dir);
}

/* ---- other layouts ---- */

static void test_backbone_prefix_fused_experts(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    const layout variants[] = {
        {.prefix = "backbone.", .fused = 1},
        {.prefix = "backbone.", .embedding_alias = 1},
        {.prefix = "model.", .fused = 1, .extra = "mtp.layers.0.norm.weight", .extra2 = "model.mtp.fc.weight"},
    };
    for (size_t k = 0; k < sizeof variants / sizeof *variants; k++) {
        char *dir = make_dir();
        write_custom(dir, m, &variants[k]);
        ac_model *back = load_ok(dir);
        assert_same_weights(m, back);
        ac_model_free(back);
        remove_dir(dir);
    }
    ac_model_free(m);
    /* Tied: a redundant stored lm_head is accepted. */
    ac_model *t = make_model(1);
    char *dir = make_dir();
    write_custom(dir, t, &(layout){.prefix = "model.", .lm_head_copy = 1});
    ac_model *back = load_ok(dir);
    assert_same_weights(t, back);
    ac_model_free(back);
    write_custom(dir, t, &(layout){.prefix = "model.", .extra = "lm_head.weight"});
    load_fails(dir, "unexpected tensor 'lm_head.weight'", NULL); /* shape [4]: not a copy of the embeddings */
    remove_dir(dir);
    ac_model_free(t);
}

static void test_sharded_fixture_resaved(void **state)
{
    (void)state;
    /* Copy the sharded fixture, load it, save over it: the stale index must go. */
    char src[512];
    snprintf(src, sizeof src, "%s/tests/fixtures/nemotron_h/hybrid_f32", AC_SOURCE_DIR);
    char *dir = make_dir();
    const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < 4; i++) {
        char from[600];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        char *to = path_in(dir, files[i]);
        FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
        assert_non_null(in);
        assert_non_null(out);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
        fclose(out);
        free(to);
    }
    ac_model *m = load_ok(dir);
    assert_int_equal(ac_model_save(m, dir, AC_DTYPE_BF16), AC_OK);
    assert_false(exists(dir, "model.safetensors.index.json"));
    ac_model *back = load_ok(dir);
    for (size_t i = 0; i < ac_model_param_count(m); i++) {
        const ac_param *p = ac_model_param(m, i), *q = ac_model_param(back, i);
        for (size_t k = 0; k < p->count; k++) {
            float want = stays_f32(p->name) ? p->data[k] : ac_bf16_to_float(ac_float_to_bf16(p->data[k]));
            assert_memory_equal(&want, &q->data[k], sizeof want);
        }
    }
    ac_model_free(back);
    ac_model_free(m);
    remove_dir(dir);
}

/* ---- broken checkpoints ---- */

static void test_missing_tensor(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    char *dir = make_dir();
    write_custom(dir, m, &(layout){.prefix = "model.", .skip = "layers.1.mixer.k_proj.weight"});
    load_fails(dir, "tensor 'model.layers.1.mixer.k_proj.weight' is missing from the checkpoint", dir);
    write_custom(dir, m, &(layout){.prefix = "backbone.", .skip = "layers.5.mixer.conv1d.bias"});
    load_fails(dir, "tensor 'backbone.layers.5.mixer.conv1d.bias' is missing", NULL);
    write_custom(dir, m, &(layout){.prefix = "model.", .skip = "layers.3.mixer.experts.2.down_proj.weight"});
    load_fails(dir, "tensor 'model.layers.3.mixer.experts.2.down_proj.weight' is missing", NULL);
    write_custom(dir, m, &(layout){.prefix = "model.", .fused = 1, .skip = "layers.4.mixer.experts.up_proj"});
    load_fails(dir, "tensor 'model.layers.4.mixer.experts.0.up_proj.weight' is missing",
               "neither is the fused 'layers.4.mixer.experts.up_proj' there");
    write_custom(dir, m, &(layout){.prefix = "model.", .skip = "lm_head.weight"});
    load_fails(dir, "no 'lm_head.weight'", "tie_word_embeddings false");
    remove_dir(dir);
    ac_model_free(m);
}

static void test_wrong_shape(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    char *dir = make_dir();
    assert_int_equal(ac_model_save(m, dir, AC_DTYPE_F32), AC_OK);
    /* A config that disagrees with the weights. */
    ac_arch arch;
    assert_int_equal(ac_arch_copy(&arch, ac_model_arch(m)), AC_OK);
    arch.layers[2].ffn = 24;
    char *cfg = path_in(dir, "config.json");
    assert_int_equal(ac_config_json_write(cfg, &arch), AC_OK);
    char want[256];
    snprintf(want, sizeof want,
             "%s/model.safetensors: tensor 'model.layers.2.mixer.up_proj.weight' has shape [40, 16] but the config "
             "needs [24, 16]",
             dir);
    load_fails(dir, want, NULL);
    /* Fused experts of the wrong count. */
    arch.layers[2].ffn = 40;
    arch.layers[4].expert_ffn = 8;
    write_custom(dir, m, &(layout){.prefix = "model.", .fused = 1});
    assert_int_equal(ac_config_json_write(cfg, &arch), AC_OK);
    load_fails(dir, "tensor 'model.layers.4.mixer.experts.up_proj' has shape [6, 4, 16] but the config needs [6, 8, 16]",
               NULL);
    ac_arch_free(&arch);
    free(cfg);
    remove_dir(dir);
    ac_model_free(m);
}

static void test_unexpected_tensor(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    char *dir = make_dir();
    write_custom(dir, m, &(layout){.prefix = "model.", .extra = "model.layers.0.mixer.bogus.weight"});
    char want[256];
    snprintf(want, sizeof want, "%s/model.safetensors: unexpected tensor 'model.layers.0.mixer.bogus.weight'", dir);
    load_fails(dir, want, "does the config match the weights?");
    /* A checkpoint with one layer more than its config says. */
    write_custom(dir, m, &(layout){.prefix = "model.", .extra = "model.layers.6.norm.weight"});
    load_fails(dir, "unexpected tensor 'model.layers.6.norm.weight'", NULL);
    /* Both prefixes: the second copy is unexpected. */
    write_custom(dir, m, &(layout){.prefix = "model.", .extra = "backbone.norm_f.weight"});
    load_fails(dir, "unexpected tensor 'backbone.norm_f.weight'", NULL);
    remove_dir(dir);
    ac_model_free(m);
}

static void test_truncated_and_absent(void **state)
{
    (void)state;
    ac_model *m = make_model(0);
    char *dir = make_dir();
    assert_int_equal(ac_model_save(m, dir, AC_DTYPE_BF16), AC_OK);
    char *st = path_in(dir, "model.safetensors");
    struct stat sb;
    assert_int_equal(stat(st, &sb), 0);
    assert_int_equal(truncate(st, sb.st_size / 2), 0);
    load_fails(dir, st, NULL);
    assert_int_equal(truncate(st, 5), 0);
    load_fails(dir, st, NULL);
    unlink(st);
    load_fails(dir, dir, NULL); /* no weights at all */
    char *cfg = path_in(dir, "config.json");
    unlink(cfg);
    load_fails(dir, "config.json: cannot open", NULL);
    FILE *f = fopen(cfg, "w");
    fputs("{\"model_type\": \"nemotron_h\", ", f);
    fclose(f);
    load_fails(dir, "config.json: invalid JSON", NULL);
    free(cfg);
    free(st);
    remove_dir(dir);
    ac_model_free(m);
}

/* ---- the transformers fixtures ---- */

static void test_fixtures(void **state)
{
    (void)state;
    struct {
        const char *name, *pattern;
        int64_t total;
        int tie;
        const char *probe; /* a stored tensor compared with the loaded weight */
    } fx[] = {
        {"hybrid_f32", "M*-EME*-M", 231832, 0, "backbone.layers.3.mixer.experts.5.up_proj.weight"},
        {"moe_grouped_bf16", "MEME*E", 316704, 0, "model.layers.1.mixer.experts.7.down_proj.weight"},
        {"puzzle_hetero", "ME*-EM-E", 184128, 1, "model.layers.4.mixer.gate.weight"},
    };
    for (size_t k = 0; k < sizeof fx / sizeof *fx; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/nemotron_h/%s", AC_SOURCE_DIR, fx[k].name);
        ac_model *m = load_ok(dir);
        const ac_arch *a = ac_model_arch(m);
        assert_int_equal(a->n_layers, (int)strlen(fx[k].pattern));
        for (int i = 0; i < a->n_layers; i++)
            assert_int_equal(ac_block_letter(a->layers[i].kind), fx[k].pattern[i]);
        assert_int_equal(ac_arch_param_counts(a).total, fx[k].total);
        assert_int_equal(a->tie_embeddings, fx[k].tie);
        size_t n;
        ac_model_arena(m, &n);
        assert_int_equal((int64_t)n, fx[k].total);
        ac_safetensors_set *set;
        assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
        const ac_tensor_view *v = ac_safetensors_set_find(set, fx[k].probe);
        assert_non_null(v);
        const char *unprefixed = strchr(fx[k].probe, '.') + 1;
        const ac_param *p = ac_model_find_param(m, unprefixed);
        assert_non_null(p);
        float *want = malloc(p->count * sizeof *want);
        assert_int_equal(ac_convert_to_f32(v->dtype, v->data, want, p->count), AC_OK);
        assert_memory_equal(want, p->data, p->count * sizeof *want);
        free(want);
        ac_safetensors_set_close(set);
        /* Resaving keeps every value (F32 exactly; the bf16 fixture's values are bf16 already). */
        char *out = make_dir();
        assert_int_equal(ac_model_save(m, out, k == 1 ? AC_DTYPE_BF16 : AC_DTYPE_F32), AC_OK);
        ac_model *back = load_ok(out);
        assert_same_weights(m, back);
        ac_model_free(back);
        remove_dir(out);
        ac_model_free(m);
    }
    /* Layer details of the puzzle fixture. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/nemotron_h/puzzle_hetero", AC_SOURCE_DIR);
    ac_model *m = load_ok(dir);
    const ac_arch *a = ac_model_arch(m);
    assert_int_equal(a->layers[4].shared_ffn, 0);
    assert_int_equal(a->layers[4].n_group, 2);
    assert_int_equal(a->layers[4].norm_topk_prob, 0);
    assert_int_equal(a->layers[7].n_experts, 12);
    assert_int_equal(a->layers[7].top_k, 2);
    assert_int_equal(a->layers[6].ffn, 56);
    assert_int_equal(a->layers[2].attn_head_dim, 24);
    assert_null(ac_model_find_param(m, "layers.4.mixer.shared_experts.up_proj.weight"));
    assert_null(ac_model_find_param(m, "lm_head.weight"));
    ac_model_free(m);
}

static void test_cli_info(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' info --model '%s/tests/fixtures/nemotron_h/moe_grouped_bf16' 2>&1", AC_CLI_PATH,
             AC_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, p);
    text[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(text, "pattern: MEME*E"));
    assert_non_null(strstr(text, "parameters: total 316,704, active 156,960, embedding 8,192"));
    assert_non_null(strstr(text, "in the checkpoint:     635,008 bytes"));
    assert_non_null(strstr(text, "in f32 (loaded):       1,266,816 bytes"));
    snprintf(cmd, sizeof cmd, "'%s' info --model /nonexistent/dir 2>&1 >/dev/null", AC_CLI_PATH);
    p = popen(cmd, "r");
    n = fread(text, 1, sizeof text - 1, p);
    text[n] = '\0';
    int rc = pclose(p);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    assert_non_null(strstr(text, "autocompress info: /nonexistent/dir/config.json: cannot open"));
    snprintf(cmd, sizeof cmd, "'%s' info 2>/dev/null", AC_CLI_PATH);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_f32_exact),
        cmocka_unit_test(test_save_bf16),
        cmocka_unit_test(test_backbone_prefix_fused_experts),
        cmocka_unit_test(test_sharded_fixture_resaved),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_unexpected_tensor),
        cmocka_unit_test(test_truncated_and_absent),
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_cli_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
