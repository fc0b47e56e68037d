/* config.json <-> ac_arch for nemotron_h and nemotron_h_puzzle (see config_json.h). Key
 * names, aliases and the layer-type spellings follow transformers'
 * configuration_nemotron_h.py. */
#include "autocompress/config_json.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults where a key may be absent (transformers' NemotronHConfig defaults). */
#define DEFAULT_NORM_EPS 1e-5
#define DEFAULT_CHUNK_SIZE 128
#define DEFAULT_TIME_STEP_MIN 0.001
#define DEFAULT_ATTN_HEAD_DIM 128

enum { CONFIG_MAX_BYTES = 64 << 20 };

typedef struct {
    const char *src;    /* the file name in messages */
    const cJSON *root;
    const cJSON *entry; /* the block_configs entry of the layer being read, or NULL */
    int index;          /* that entry's index */
} reader;

static ac_status rfail(const reader *r, ac_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static ac_status rfail(const reader *r, ac_status code, const char *fmt, ...)
{
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(code, "%s: %s", r->src, message);
}

/* Python's json keeps the last of duplicate keys and cJSON the first: refuse them. */
static ac_status check_duplicates(const reader *r, const cJSON *obj, const char *where)
{
    for (const cJSON *a = obj->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string))
                return rfail(r, AC_ERR_INVALID, "%s%skey '%s' appears twice", where, where[0] ? ": " : "",
                             a->string);
    return AC_OK;
}

/* ---- key lookup: the layer's block_configs entry first, then the global config ---- */

typedef struct {
    const cJSON *item; /* NULL when absent or null */
    char path[96];     /* "key" or "block_configs[3].key" for messages */
} found;

static const cJSON *member(const cJSON *obj, const char *key)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

/* `alias` is a legacy spelling of `key` (global config only); when both are present
 * they must agree. */
static ac_status lookup(const reader *r, const char *key, const char *alias, found *f)
{
    f->item = NULL;
    snprintf(f->path, sizeof f->path, "%s", key);
    const cJSON *v = member(r->entry, key);
    if (v) {
        f->item = v;
        snprintf(f->path, sizeof f->path, "block_configs[%d].%s", r->index, key);
        return AC_OK;
    }
    v = member(r->root, key);
    const cJSON *a = alias ? member(r->root, alias) : NULL;
    if (v && a && !cJSON_Compare(v, a, 1))
        return rfail(r, AC_ERR_INVALID, "%s and its alias %s disagree", key, alias);
    if (!v && a) {
        v = a;
        snprintf(f->path, sizeof f->path, "%s", alias);
    }
    f->item = v;
    return AC_OK;
}

static ac_status missing(const reader *r, const char *key)
{
    if (r->entry)
        return rfail(r, AC_ERR_INVALID, "block_configs[%d]: missing %s (neither the entry nor the global config sets it)",
                     r->index, key);
    return rfail(r, AC_ERR_INVALID, "missing %s", key);
}

/* An integer >= min. has_default: absent means `def`. */
static ac_status get_int(const reader *r, const char *key, const char *alias, int has_default, int def, int min,
                         int *out, found *where)
{
    found f;
    ac_status st = lookup(r, key, alias, &f);
    if (st != AC_OK)
        return st;
    if (where)
        *where = f;
    if (!f.item) {
        if (!has_default)
            return missing(r, key);
        *out = def;
        return AC_OK;
    }
    if (!cJSON_IsNumber(f.item))
        return rfail(r, AC_ERR_INVALID, "%s must be an integer, got %s", f.path, ac_json_type_name(f.item));
    double d = f.item->valuedouble;
    if (d != floor(d) || !(d >= (double)INT_MIN && d <= (double)INT_MAX))
        return rfail(r, AC_ERR_INVALID, "%s must be an integer, got %.17g", f.path, d);
    if (d < min)
        return rfail(r, AC_ERR_INVALID, "%s must be %s, got %d", f.path, min == 1 ? "positive" : ">= 0", (int)d);
    *out = (int)d;
    return AC_OK;
}

/* A finite number; positive, or >= 0 when allow_zero. */
static ac_status get_float(const reader *r, const char *key, const char *alias, double def, int allow_zero, float *out)
{
    found f;
    ac_status st = lookup(r, key, alias, &f);
    if (st != AC_OK)
        return st;
    if (!f.item) {
        *out = (float)def;
        return AC_OK;
    }
    if (!cJSON_IsNumber(f.item))
        return rfail(r, AC_ERR_INVALID, "%s must be a number, got %s", f.path, ac_json_type_name(f.item));
    double d = f.item->valuedouble;
    float v = (float)d;
    if (!isfinite(v) || v < 0.0f || (v == 0.0f && !allow_zero))
        return rfail(r, AC_ERR_INVALID, "%s must be %s and finite, got %.9g", f.path,
                     allow_zero ? ">= 0" : "positive", d);
    *out = v;
    return AC_OK;
}

static ac_status get_bool(const reader *r, const char *key, const char *alias, int def, int *out)
{
    found f;
    ac_status st = lookup(r, key, alias, &f);
    if (st != AC_OK)
        return st;
    if (!f.item) {
        *out = def;
        return AC_OK;
    }
    if (!cJSON_IsBool(f.item))
        return rfail(r, AC_ERR_INVALID, "%s must be true or false, got %s", f.path, ac_json_type_name(f.item));
    *out = cJSON_IsTrue(f.item) ? 1 : 0;
    return AC_OK;
}

/* ---- what the engine cannot run ---- */

static ac_status refuse_true(const reader *r, const char *key, const char *what)
{
    int v = 0;
    ac_status st = get_bool(r, key, NULL, 0, &v);
    if (st != AC_OK)
        return st;
    if (v)
        return rfail(r, AC_ERR_UNSUPPORTED, "%s is true: %s is not supported", key, what);
    return AC_OK;
}

static ac_status require_string(const reader *r, const char *key, const char *want)
{
    found f;
    ac_status st = lookup(r, key, NULL, &f);
    if (st != AC_OK || !f.item)
        return st;
    if (!cJSON_IsString(f.item))
        return rfail(r, AC_ERR_INVALID, "%s must be a string, got %s", f.path, ac_json_type_name(f.item));
    if (strcmp(f.item->valuestring, want))
        return rfail(r, AC_ERR_UNSUPPORTED, "%s '%s' is not supported (only '%s')", f.path, f.item->valuestring, want);
    return AC_OK;
}

static ac_status refuse_latent(const reader *r)
{
    found f;
    ac_status st = lookup(r, "moe_latent_size", NULL, &f);
    if (st != AC_OK || !f.item)
        return st;
    if (cJSON_IsNumber(f.item))
        return rfail(r, AC_ERR_UNSUPPORTED, "%s is %.17g: latent MoE projections are not supported (must be null)",
                     f.path, f.item->valuedouble);
    return rfail(r, AC_ERR_UNSUPPORTED, "%s must be null (latent MoE projections are not supported), got %s", f.path,
                 ac_json_type_name(f.item));
}

static ac_status check_supported(const reader *r)
{
    ac_status st;
    if ((st = refuse_true(r, "use_bias", "bias in the Mamba projections")) != AC_OK ||
        (st = refuse_true(r, "mlp_bias", "bias in the MLP projections")) != AC_OK ||
        (st = refuse_true(r, "attention_bias", "bias in the attention projections")) != AC_OK ||
        (st = refuse_latent(r)) != AC_OK || (st = require_string(r, "mlp_hidden_act", "relu2")) != AC_OK ||
        (st = require_string(r, "mamba_hidden_act", "silu")) != AC_OK)
        return st;
    return AC_OK;
}

/* ---- layer kinds ---- */

static int kind_from_letter(char c, ac_block_kind *kind)
{
    switch (c) {
    case 'M': *kind = AC_BLOCK_MAMBA; return 1;
    case '*': *kind = AC_BLOCK_ATTENTION; return 1;
    case '-': *kind = AC_BLOCK_MLP; return 1;
    case 'E': *kind = AC_BLOCK_MOE; return 1;
    }
    return 0;
}

/* transformers calls mamba "linear_attention" and attention "full_attention"; older
 * configs use mamba/attention. */
static int kind_from_name(const char *name, ac_block_kind *kind)
{
    if (!strcmp(name, "mamba") || !strcmp(name, "linear_attention"))
        *kind = AC_BLOCK_MAMBA;
    else if (!strcmp(name, "attention") || !strcmp(name, "full_attention"))
        *kind = AC_BLOCK_ATTENTION;
    else if (!strcmp(name, "mlp"))
        *kind = AC_BLOCK_MLP;
    else if (!strcmp(name, "moe"))
        *kind = AC_BLOCK_MOE;
    else
        return 0;
    return 1;
}

static ac_status pattern_from_string(const reader *r, const cJSON *v, ac_block_kind **kinds, int *n)
{
    if (!cJSON_IsString(v))
        return rfail(r, AC_ERR_INVALID, "hybrid_override_pattern must be a string, got %s", ac_json_type_name(v));
    const char *s = v->valuestring;
    size_t len = strlen(s);
    if (len == 0)
        return rfail(r, AC_ERR_INVALID, "hybrid_override_pattern is empty");
    if (len > INT_MAX / 2)
        return rfail(r, AC_ERR_INVALID, "hybrid_override_pattern is too long");
    *kinds = malloc(len * sizeof **kinds);
    if (!*kinds)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", r->src);
    for (size_t i = 0; i < len; i++)
        if (!kind_from_letter(s[i], &(*kinds)[i]))
            return rfail(r, AC_ERR_INVALID,
                         "hybrid_override_pattern[%zu]: unknown layer letter '%c' (expected M, *, - or E)", i, s[i]);
    *n = (int)len;
    return AC_OK;
}

static ac_status pattern_from_list(const reader *r, const cJSON *v, ac_block_kind **kinds, int *n)
{
    if (!cJSON_IsArray(v))
        return rfail(r, AC_ERR_INVALID, "layers_block_type must be an array of strings, got %s", ac_json_type_name(v));
    int len = cJSON_GetArraySize(v);
    if (len == 0)
        return rfail(r, AC_ERR_INVALID, "layers_block_type is empty");
    *kinds = malloc((size_t)len * sizeof **kinds);
    if (!*kinds)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", r->src);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return rfail(r, AC_ERR_INVALID, "layers_block_type[%d] must be a string, got %s", i, ac_json_type_name(e));
        if (!kind_from_name(e->valuestring, &(*kinds)[i]))
            return rfail(r, AC_ERR_INVALID,
                         "layers_block_type[%d]: unknown block type '%s' (expected mamba or linear_attention, "
                         "attention or full_attention, mlp, moe)",
                         i, e->valuestring);
    }
    *n = len;
    return AC_OK;
}

/* The nemotron_h pattern: hybrid_override_pattern and/or layers_block_type (which must
 * then agree). */
static ac_status read_pattern(const reader *r, ac_block_kind **kinds, int *n)
{
    const cJSON *pat = member(r->root, "hybrid_override_pattern");
    const cJSON *list = member(r->root, "layers_block_type");
    if (!pat && !list)
        return rfail(r, AC_ERR_INVALID, "missing hybrid_override_pattern (or layers_block_type)");
    if (!list)
        return pattern_from_string(r, pat, kinds, n);
    ac_status st = pattern_from_list(r, list, kinds, n);
    if (st != AC_OK || !pat)
        return st;
    ac_block_kind *other = NULL;
    int m = 0;
    st = pattern_from_string(r, pat, &other, &m);
    if (st == AC_OK && m != *n)
        st = rfail(r, AC_ERR_INVALID, "hybrid_override_pattern has %d layers but layers_block_type has %d", m, *n);
    for (int i = 0; st == AC_OK && i < m; i++)
        if (other[i] != (*kinds)[i])
            st = rfail(r, AC_ERR_INVALID, "hybrid_override_pattern[%d] '%c' disagrees with layers_block_type[%d]", i,
                       ac_block_letter(other[i]), i);
    free(other);
    return st;
}

/* ---- one layer ---- */

/* Prefix for cross-field messages: "block_configs[3]: " or "". */
static const char *layer_where(const reader *r, char *buf, size_t size)
{
    if (r->entry)
        snprintf(buf, size, "block_configs[%d]: ", r->index);
    else
        buf[0] = '\0';
    return buf;
}

static ac_status read_mamba(const reader *r, ac_block_dims *b)
{
    ac_status st;
    found heads, groups;
    char w[48];
    if ((st = get_int(r, "mamba_num_heads", NULL, 0, 0, 1, &b->mamba_heads, &heads)) != AC_OK ||
        (st = get_int(r, "mamba_head_dim", NULL, 0, 0, 1, &b->mamba_head_dim, NULL)) != AC_OK ||
        (st = get_int(r, "n_groups", "mamba_n_groups", 0, 0, 1, &b->mamba_groups, &groups)) != AC_OK ||
        (st = get_int(r, "ssm_state_size", NULL, 0, 0, 1, &b->ssm_state, NULL)) != AC_OK ||
        (st = get_int(r, "conv_kernel", "mamba_d_conv", 0, 0, 1, &b->conv_kernel, NULL)) != AC_OK)
        return st;
    if (b->mamba_heads % b->mamba_groups)
        return rfail(r, AC_ERR_INVALID, "%s%s %d is not a multiple of %s %d", layer_where(r, w, sizeof w), heads.path,
                     b->mamba_heads, groups.path, b->mamba_groups);
    return AC_OK;
}

static ac_status read_attention(const reader *r, ac_block_dims *b)
{
    ac_status st;
    found heads, kv;
    char w[48];
    if ((st = get_int(r, "num_attention_heads", NULL, 0, 0, 1, &b->attn_heads, &heads)) != AC_OK)
        return st;
    /* transformers: num_key_value_heads null means one KV head per query head. */
    if ((st = lookup(r, "num_key_value_heads", NULL, &kv)) != AC_OK)
        return st;
    const cJSON *raw = r->entry ? cJSON_GetObjectItemCaseSensitive(r->entry, "num_key_value_heads") : NULL;
    if (!raw)
        raw = cJSON_GetObjectItemCaseSensitive(r->root, "num_key_value_heads");
    if (cJSON_IsNull(raw))
        b->attn_kv_heads = b->attn_heads;
    else if ((st = get_int(r, "num_key_value_heads", NULL, 0, 0, 1, &b->attn_kv_heads, &kv)) != AC_OK)
        return st;
    if ((st = get_int(r, "head_dim", NULL, 1, DEFAULT_ATTN_HEAD_DIM, 1, &b->attn_head_dim, NULL)) != AC_OK)
        return st;
    if (b->attn_heads % b->attn_kv_heads)
        return rfail(r, AC_ERR_INVALID, "%s%s %d is not a multiple of %s %d", layer_where(r, w, sizeof w), heads.path,
                     b->attn_heads, kv.path, b->attn_kv_heads);
    return AC_OK;
}

static ac_status read_moe(const reader *r, ac_block_dims *b)
{
    ac_status st;
    found experts, topk, ngroup, topkg;
    char w[48];
    if ((st = refuse_latent(r)) != AC_OK ||
        (st = get_int(r, "n_routed_experts", "num_local_experts", 0, 0, 1, &b->n_experts, &experts)) != AC_OK ||
        (st = get_int(r, "num_experts_per_tok", NULL, 0, 0, 1, &b->top_k, &topk)) != AC_OK ||
        (st = get_int(r, "moe_intermediate_size", NULL, 0, 0, 1, &b->expert_ffn, NULL)) != AC_OK ||
        (st = get_int(r, "moe_shared_expert_intermediate_size", NULL, 0, 0, 0, &b->shared_ffn, NULL)) != AC_OK ||
        (st = get_int(r, "n_group", NULL, 1, 1, 1, &b->n_group, &ngroup)) != AC_OK ||
        (st = get_int(r, "topk_group", NULL, 1, 1, 1, &b->topk_group, &topkg)) != AC_OK ||
        (st = get_bool(r, "norm_topk_prob", NULL, 1, &b->norm_topk_prob)) != AC_OK ||
        (st = get_float(r, "routed_scaling_factor", NULL, 1.0, 0, &b->routed_scaling)) != AC_OK)
        return st;
    layer_where(r, w, sizeof w);
    if (b->top_k > b->n_experts)
        return rfail(r, AC_ERR_INVALID, "%s%s %d exceeds %s %d", w, topk.path, b->top_k, experts.path, b->n_experts);
    if (b->n_experts % b->n_group)
        return rfail(r, AC_ERR_INVALID, "%s%s %d is not a multiple of %s %d", w, experts.path, b->n_experts,
                     ngroup.path, b->n_group);
    if (b->topk_group > b->n_group)
        return rfail(r, AC_ERR_INVALID, "%s%s %d exceeds %s %d", w, topkg.path, b->topk_group, ngroup.path,
                     b->n_group);
    return AC_OK;
}

static ac_status read_layer(const reader *r, ac_block_kind kind, ac_block_dims *b)
{
    memset(b, 0, sizeof *b);
    b->kind = kind;
    switch (kind) {
    case AC_BLOCK_MAMBA: return read_mamba(r, b);
    case AC_BLOCK_ATTENTION: return read_attention(r, b);
    case AC_BLOCK_MLP: return get_int(r, "intermediate_size", NULL, 0, 0, 1, &b->ffn, NULL);
    case AC_BLOCK_MOE: return read_moe(r, b);
    }
    return ac_fail(AC_ERR_INTERNAL, "config: bad block kind");
}

/* ---- the whole config ---- */

static ac_status read_globals(reader *r, ac_arch *arch)
{
    ac_status st;
    if ((st = get_int(r, "vocab_size", NULL, 0, 0, 1, &arch->vocab, NULL)) != AC_OK ||
        (st = get_int(r, "hidden_size", NULL, 0, 0, 1, &arch->hidden, NULL)) != AC_OK ||
        (st = get_float(r, "layer_norm_epsilon", NULL, DEFAULT_NORM_EPS, 0, &arch->norm_eps)) != AC_OK ||
        (st = get_bool(r, "tie_word_embeddings", NULL, 0, &arch->tie_embeddings)) != AC_OK ||
        (st = get_bool(r, "use_conv_bias", "mamba_conv_bias", 1, &arch->use_conv_bias)) != AC_OK ||
        (st = get_int(r, "chunk_size", "mamba_chunk_size", 1, DEFAULT_CHUNK_SIZE, 1, &arch->chunk_size, NULL)) != AC_OK ||
        (st = get_float(r, "time_step_min", "mamba_dt_min", DEFAULT_TIME_STEP_MIN, 1, &arch->time_step_min)) != AC_OK)
        return st;
    return AC_OK;
}

static ac_status check_layer_count(const reader *r, int n, const char *what)
{
    int declared = n;
    found f;
    ac_status st = get_int(r, "num_hidden_layers", NULL, 1, n, 1, &declared, &f);
    if (st != AC_OK)
        return st;
    if (declared != n)
        return rfail(r, AC_ERR_INVALID, "num_hidden_layers %d does not match the %d layers of %s", declared, n, what);
    return AC_OK;
}

static ac_status read_plain(reader *r, ac_arch *arch)
{
    ac_block_kind *kinds = NULL;
    int n = 0;
    ac_status st = read_pattern(r, &kinds, &n);
    if (st == AC_OK)
        st = check_layer_count(r, n, member(r->root, "layers_block_type") ? "layers_block_type" : "hybrid_override_pattern");
    if (st == AC_OK)
        st = ac_arch_alloc_layers(arch, n);
    for (int i = 0; st == AC_OK && i < n; i++)
        st = read_layer(r, kinds[i], &arch->layers[i]);
    free(kinds);
    return st;
}

static ac_status read_puzzle(reader *r, ac_arch *arch)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(r->root, "block_configs");
    if (!list || cJSON_IsNull(list))
        return rfail(r, AC_ERR_INVALID, "missing block_configs (model_type nemotron_h_puzzle needs one entry per layer)");
    if (!cJSON_IsArray(list))
        return rfail(r, AC_ERR_INVALID, "block_configs must be an array of objects, got %s", ac_json_type_name(list));
    int n = cJSON_GetArraySize(list);
    if (n == 0)
        return rfail(r, AC_ERR_INVALID, "block_configs is empty");
    ac_status st = check_layer_count(r, n, "block_configs");
    if (st == AC_OK)
        st = ac_arch_alloc_layers(arch, n);
    int i = 0;
    for (const cJSON *e = list->child; st == AC_OK && e; e = e->next, i++) {
        r->entry = NULL;
        if (!cJSON_IsObject(e)) {
            st = rfail(r, AC_ERR_INVALID, "block_configs[%d] must be an object, got %s", i, ac_json_type_name(e));
            break;
        }
        char where[40];
        snprintf(where, sizeof where, "block_configs[%d]", i);
        if ((st = check_duplicates(r, e, where)) != AC_OK)
            break;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "block_type");
        ac_block_kind kind;
        if (!type || cJSON_IsNull(type))
            st = rfail(r, AC_ERR_INVALID, "block_configs[%d]: missing block_type", i);
        else if (!cJSON_IsString(type))
            st = rfail(r, AC_ERR_INVALID, "block_configs[%d].block_type must be a string, got %s", i, ac_json_type_name(type));
        else if (!kind_from_name(type->valuestring, &kind))
            st = rfail(r, AC_ERR_INVALID,
                       "block_configs[%d].block_type '%s' is unknown (expected mamba, attention, mlp or moe)", i,
                       type->valuestring);
        if (st != AC_OK)
            break;
        r->entry = e;
        r->index = i;
        st = read_layer(r, kind, &arch->layers[i]);
    }
    r->entry = NULL;
    return st;
}

/* Python's json.dumps writes float("inf") as a bare Infinity (transformers' Mamba
 * configs carry "time_step_limit": [0.0, Infinity]), which is not JSON. Outside
 * strings, Infinity and -Infinity become 1e999 (an overflow cJSON reads as inf), padded
 * with spaces so error columns stay right. Returns a malloc'd copy, or NULL. */
static char *replace_infinity(const char *text)
{
    size_t n = strlen(text);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    memcpy(out, text, n + 1);
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        char c = out[i];
        if (in_string) {
            if (c == '\\' && i + 1 < n)
                i++;
            else if (c == '"')
                in_string = 0;
            continue;
        }
        if (c == '"') {
            in_string = 1;
        } else if (c == 'I' && !strncmp(out + i, "Infinity", 8)) {
            memcpy(out + i, "1e999   ", 8);
            i += 7;
        }
    }
    return out;
}

ac_status ac_config_json_parse(const char *text, const char *source, ac_arch *arch)
{
    memset(arch, 0, sizeof *arch);
    reader r = {.src = source ? source : "config.json", .index = -1};
    char *patched = replace_infinity(text);
    if (!patched)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", r.src);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(patched, strlen(patched), &end, 0);
    if (!root && end)
        end = text + (end - patched);
    free(patched);
    if (!root) {
        const char *at = end; /* cJSON_GetErrorPtr() would point into the freed copy */
        if (!at)
            return rfail(&r, AC_ERR_INVALID, "invalid JSON");
        int line = 1, column = 1;
        for (const char *p = text; p < at; p++) {
            if (*p == '\n') {
                line++;
                column = 1;
            } else {
                column++;
            }
        }
        char near[24];
        size_t k = 0;
        for (const char *p = at; *p && k + 1 < sizeof near; p++)
            near[k++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
        near[k] = '\0';
        return rfail(&r, AC_ERR_INVALID, "invalid JSON at line %d, column %d (near '%s')", line, column, near);
    }
    r.root = root;
    ac_status st = AC_OK;
    const cJSON *mt = NULL;
    if (!cJSON_IsObject(root))
        st = rfail(&r, AC_ERR_INVALID, "the top level must be a JSON object, got %s", ac_json_type_name(root));
    else
        st = check_duplicates(&r, root, "");
    if (st == AC_OK) {
        mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        if (!mt || cJSON_IsNull(mt))
            st = rfail(&r, AC_ERR_INVALID, "missing model_type");
        else if (!cJSON_IsString(mt))
            st = rfail(&r, AC_ERR_INVALID, "model_type must be a string, got %s", ac_json_type_name(mt));
        else if (strcmp(mt->valuestring, "nemotron_h") && strcmp(mt->valuestring, "nemotron_h_puzzle"))
            st = rfail(&r, AC_ERR_UNSUPPORTED, "model_type '%s' is not supported (nemotron_h or nemotron_h_puzzle)",
                       mt->valuestring);
        else if (!strcmp(mt->valuestring, "nemotron_h") && member(root, "block_configs"))
            st = rfail(&r, AC_ERR_INVALID,
                       "block_configs is only read with model_type nemotron_h_puzzle, not nemotron_h");
    }
    if (st == AC_OK)
        st = check_supported(&r);
    if (st == AC_OK)
        st = read_globals(&r, arch);
    if (st == AC_OK)
        st = strcmp(mt->valuestring, "nemotron_h_puzzle") ? read_plain(&r, arch) : read_puzzle(&r, arch);
    if (st == AC_OK) {
        st = ac_arch_validate(arch);
        if (st != AC_OK)
            st = ac_fail_context(st, "%s", r.src);
    }
    cJSON_Delete(root);
    if (st != AC_OK)
        ac_arch_free(arch);
    return st;
}

ac_status ac_config_json_read(const char *path, ac_arch *arch)
{
    memset(arch, 0, sizeof *arch);
    char *text;
    size_t len;
    ac_status st = ac_read_text_file(path, CONFIG_MAX_BYTES, &text, &len);
    if (st != AC_OK)
        return st;
    st = ac_config_json_parse(text, path, arch);
    free(text);
    return st;
}

/* ---- writing ---- */

/* The shortest decimal that reads back as the same float, as a JSON number (cJSON
 * prints doubles with up to 17 digits, which would turn 1e-5f into 9.99999974737875e-06). */
static cJSON *float_number(float v)
{
    char buf[40];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v)
            break;
    }
    return cJSON_CreateNumber(strtod(buf, NULL));
}

static int add_ok(cJSON *obj, const char *key, cJSON *v)
{
    if (!v)
        return 0;
    return cJSON_AddItemToObject(obj, key, v) ? 1 : (cJSON_Delete(v), 0);
}

static int add_int(cJSON *obj, const char *key, int v) { return add_ok(obj, key, cJSON_CreateNumber(v)); }
static int add_bool(cJSON *obj, const char *key, int v) { return add_ok(obj, key, cJSON_CreateBool(v)); }
static int add_str(cJSON *obj, const char *key, const char *v) { return add_ok(obj, key, cJSON_CreateString(v)); }
static int add_float(cJSON *obj, const char *key, float v) { return add_ok(obj, key, float_number(v)); }

/* The keys of one block (without block_type), into `obj`. */
static int add_block_keys(cJSON *obj, const ac_block_dims *b)
{
    switch (b->kind) {
    case AC_BLOCK_MAMBA:
        return add_int(obj, "mamba_num_heads", b->mamba_heads) && add_int(obj, "mamba_head_dim", b->mamba_head_dim) &&
               add_int(obj, "n_groups", b->mamba_groups) && add_int(obj, "ssm_state_size", b->ssm_state) &&
               add_int(obj, "conv_kernel", b->conv_kernel);
    case AC_BLOCK_ATTENTION:
        return add_int(obj, "num_attention_heads", b->attn_heads) &&
               add_int(obj, "num_key_value_heads", b->attn_kv_heads) && add_int(obj, "head_dim", b->attn_head_dim);
    case AC_BLOCK_MLP: return add_int(obj, "intermediate_size", b->ffn);
    case AC_BLOCK_MOE:
        return add_int(obj, "n_routed_experts", b->n_experts) && add_int(obj, "num_experts_per_tok", b->top_k) &&
               add_int(obj, "moe_intermediate_size", b->expert_ffn) &&
               add_int(obj, "moe_shared_expert_intermediate_size", b->shared_ffn) &&
               add_int(obj, "n_group", b->n_group) && add_int(obj, "topk_group", b->topk_group) &&
               add_bool(obj, "norm_topk_prob", b->norm_topk_prob) &&
               add_float(obj, "routed_scaling_factor", b->routed_scaling);
    }
    return 0;
}

static const char *torch_dtype_name(ac_dtype dtype)
{
    switch (dtype) {
    case AC_DTYPE_F32: return "float32";
    case AC_DTYPE_BF16: return "bfloat16";
    case AC_DTYPE_F16: return "float16";
    default: return NULL;
    }
}

static cJSON *build(const ac_arch *arch, const char *dtype_name)
{
    /* The plain form cannot say "no shared expert": transformers always builds one. */
    int puzzle = !ac_arch_is_homogeneous(arch);
    for (int i = 0; i < arch->n_layers; i++)
        if (arch->layers[i].kind == AC_BLOCK_MOE && arch->layers[i].shared_ffn == 0)
            puzzle = 1;
    cJSON *root = cJSON_CreateObject();
    cJSON *archs = cJSON_CreateArray();
    char *pattern = malloc((size_t)arch->n_layers + 1);
    int ok = root && archs && pattern;
    if (ok) {
        for (int i = 0; i < arch->n_layers; i++)
            pattern[i] = ac_block_letter(arch->layers[i].kind);
        pattern[arch->n_layers] = '\0';
        /* As published puzzle checkpoints name their class (vLLM registers both). */
        ok = cJSON_AddItemToArray(archs, cJSON_CreateString(puzzle ? "NemotronHPuzzleForCausalLM"
                                                                   : "NemotronHForCausalLM")) &&
             cJSON_AddItemToObject(root, "architectures", archs);
        if (!ok)
            cJSON_Delete(archs);
        archs = NULL;
    }
    ok = ok && add_str(root, "model_type", puzzle ? "nemotron_h_puzzle" : "nemotron_h") &&
         add_str(root, "torch_dtype", dtype_name) && add_int(root, "vocab_size", arch->vocab) &&
         add_int(root, "hidden_size", arch->hidden) && add_int(root, "num_hidden_layers", arch->n_layers) &&
         add_str(root, "hybrid_override_pattern", pattern) && add_float(root, "layer_norm_epsilon", arch->norm_eps) &&
         add_bool(root, "tie_word_embeddings", arch->tie_embeddings) &&
         add_bool(root, "use_conv_bias", arch->use_conv_bias) && add_int(root, "chunk_size", arch->chunk_size) &&
         add_float(root, "time_step_min", arch->time_step_min);
    /* Global values: those of the first layer of each kind (the puzzle entries carry
     * every layer's own). */
    int seen[4] = {0, 0, 0, 0};
    for (int i = 0; ok && i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        if (!seen[b->kind]) {
            seen[b->kind] = 1;
            ok = add_block_keys(root, b);
        }
    }
    ok = ok && add_bool(root, "use_bias", 0) && add_bool(root, "mlp_bias", 0) && add_bool(root, "attention_bias", 0) &&
         add_str(root, "mlp_hidden_act", "relu2") && add_str(root, "mamba_hidden_act", "silu");
    if (ok && puzzle) {
        cJSON *list = cJSON_CreateArray();
        ok = list && cJSON_AddItemToObject(root, "block_configs", list);
        if (!ok)
            cJSON_Delete(list);
        for (int i = 0; ok && i < arch->n_layers; i++) {
            cJSON *e = cJSON_CreateObject();
            ok = e && cJSON_AddItemToArray(list, e);
            if (!ok) {
                cJSON_Delete(e);
                break;
            }
            ok = add_str(e, "block_type", ac_block_name(arch->layers[i].kind)) && add_block_keys(e, &arch->layers[i]);
        }
    }
    free(pattern);
    cJSON_Delete(archs);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

ac_status ac_config_json_format(const ac_arch *arch, ac_dtype dtype, char **text)
{
    *text = NULL;
    const char *dtype_name = torch_dtype_name(dtype);
    if (!dtype_name)
        return ac_fail(AC_ERR_INVALID, "config.json: torch_dtype must be F32, BF16 or F16, got %s", ac_dtype_name(dtype));
    ac_status st = ac_arch_validate(arch);
    if (st != AC_OK)
        return st;
    cJSON *root = build(arch, dtype_name);
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "config.json: out of memory");
    char *printed = cJSON_Print(root);
    cJSON_Delete(root);
    if (!printed)
        return ac_fail(AC_ERR_NOMEM, "config.json: out of memory");
    /* Hand back malloc'd memory with a final newline whatever cJSON's hooks are. */
    size_t n = strlen(printed);
    *text = malloc(n + 2);
    if (*text) {
        memcpy(*text, printed, n);
        (*text)[n] = '\n';
        (*text)[n + 1] = '\0';
    }
    cJSON_free(printed);
    return *text ? AC_OK : ac_fail(AC_ERR_NOMEM, "config.json: out of memory");
}

ac_status ac_config_json_write_dtype(const char *path, const ac_arch *arch, ac_dtype dtype)
{
    char *text;
    ac_status st = ac_config_json_format(arch, dtype, &text);
    if (st != AC_OK)
        return ac_fail_context(st, "%s", path);
    st = ac_write_text_file(path, text);
    free(text);
    return st;
}

ac_status ac_config_json_write(const char *path, const ac_arch *arch)
{
    return ac_config_json_write_dtype(path, arch, AC_DTYPE_F32);
}
