/* The architecture description: names, ownership, validation, derived dims, parameter
 * counts and a human-readable summary. */
#include "autocompress/arch.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

char ac_block_letter(ac_block_kind kind)
{
    switch (kind) {
    case AC_BLOCK_MAMBA: return 'M';
    case AC_BLOCK_ATTENTION: return '*';
    case AC_BLOCK_MLP: return '-';
    case AC_BLOCK_MOE: return 'E';
    }
    return '?';
}

const char *ac_block_name(ac_block_kind kind)
{
    switch (kind) {
    case AC_BLOCK_MAMBA: return "mamba";
    case AC_BLOCK_ATTENTION: return "attention";
    case AC_BLOCK_MLP: return "mlp";
    case AC_BLOCK_MOE: return "moe";
    }
    return "unknown";
}

/* Replaces arch->layers with n_layers zeroed entries. The previous array (if any) is
 * not freed: callers start from a zeroed ac_arch or call ac_arch_free first. */
ac_status ac_arch_alloc_layers(ac_arch *arch, int n_layers)
{
    if (n_layers < 0)
        return ac_fail(AC_ERR_INVALID, "arch: negative layer count %d", n_layers);
    arch->layers = NULL;
    arch->n_layers = 0;
    if (n_layers == 0)
        return AC_OK;
    arch->layers = calloc((size_t)n_layers, sizeof *arch->layers);
    if (!arch->layers)
        return ac_fail(AC_ERR_NOMEM, "arch: cannot allocate %d layers", n_layers);
    arch->n_layers = n_layers;
    return AC_OK;
}

ac_status ac_arch_copy(ac_arch *dst, const ac_arch *src)
{
    ac_arch copy = *src;
    copy.layers = NULL;
    if (src->n_layers > 0) {
        if (!src->layers)
            return ac_fail(AC_ERR_INVALID, "arch: %d layers but no layer array", src->n_layers);
        copy.layers = malloc((size_t)src->n_layers * sizeof *copy.layers);
        if (!copy.layers)
            return ac_fail(AC_ERR_NOMEM, "arch: cannot allocate %d layers", src->n_layers);
        memcpy(copy.layers, src->layers, (size_t)src->n_layers * sizeof *copy.layers);
    }
    *dst = copy;
    return AC_OK;
}

void ac_arch_free(ac_arch *arch)
{
    if (!arch)
        return;
    free(arch->layers);
    arch->layers = NULL;
    arch->n_layers = 0;
}

int ac_mamba_d_inner(const ac_block_dims *b) { return b->mamba_heads * b->mamba_head_dim; }

int ac_mamba_conv_dim(const ac_block_dims *b)
{
    return ac_mamba_d_inner(b) + 2 * b->mamba_groups * b->ssm_state;
}

int ac_mamba_in_proj_dim(const ac_block_dims *b)
{
    return 2 * ac_mamba_d_inner(b) + 2 * b->mamba_groups * b->ssm_state + b->mamba_heads;
}

/* ---- validation ---- */

#define LAYER_FAIL(i, b, ...) layer_fail((i), (b), __VA_ARGS__)

static ac_status layer_fail(int i, const ac_block_dims *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ac_status layer_fail(int i, const ac_block_dims *b, const char *fmt, ...)
{
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(AC_ERR_INVALID, "arch: layer %d (%s): %s", i, ac_block_name(b->kind), message);
}

/* Dimensions multiply into tensor sizes; keep every derived row count inside int. */
static int fits_int(int64_t v) { return v > 0 && v <= INT_MAX; }

static ac_status validate_mamba(int i, const ac_block_dims *b)
{
    if (b->mamba_heads <= 0)
        return LAYER_FAIL(i, b, "mamba_heads must be positive, got %d", b->mamba_heads);
    if (b->mamba_heads > AC_MAX_MAMBA_HEADS)
        return LAYER_FAIL(i, b, "mamba_heads %d exceeds the engine's limit of %d", b->mamba_heads, AC_MAX_MAMBA_HEADS);
    if (b->mamba_head_dim <= 0)
        return LAYER_FAIL(i, b, "mamba_head_dim must be positive, got %d", b->mamba_head_dim);
    if (b->mamba_groups <= 0)
        return LAYER_FAIL(i, b, "mamba_groups must be positive, got %d", b->mamba_groups);
    if (b->ssm_state <= 0)
        return LAYER_FAIL(i, b, "ssm_state must be positive, got %d", b->ssm_state);
    if (b->conv_kernel <= 0)
        return LAYER_FAIL(i, b, "conv_kernel must be positive, got %d", b->conv_kernel);
    if (b->mamba_heads % b->mamba_groups)
        return LAYER_FAIL(i, b, "mamba_heads %d is not a multiple of mamba_groups %d", b->mamba_heads,
                          b->mamba_groups);
    int64_t d_inner = (int64_t)b->mamba_heads * b->mamba_head_dim;
    int64_t in_proj = 2 * d_inner + 2 * (int64_t)b->mamba_groups * b->ssm_state + b->mamba_heads;
    if (!fits_int(in_proj))
        return LAYER_FAIL(i, b, "in_proj rows (2 d_inner + 2 groups state + heads = %" PRId64 ") overflow", in_proj);
    return AC_OK;
}

static ac_status validate_attention(int i, const ac_block_dims *b)
{
    if (b->attn_heads <= 0)
        return LAYER_FAIL(i, b, "attn_heads must be positive, got %d", b->attn_heads);
    if (b->attn_kv_heads <= 0)
        return LAYER_FAIL(i, b, "attn_kv_heads must be positive, got %d", b->attn_kv_heads);
    if (b->attn_head_dim <= 0)
        return LAYER_FAIL(i, b, "attn_head_dim must be positive, got %d", b->attn_head_dim);
    if (b->attn_heads % b->attn_kv_heads)
        return LAYER_FAIL(i, b, "attn_heads %d is not a multiple of attn_kv_heads %d", b->attn_heads,
                          b->attn_kv_heads);
    if (!fits_int((int64_t)b->attn_heads * b->attn_head_dim))
        return LAYER_FAIL(i, b, "attn_heads x attn_head_dim overflows");
    return AC_OK;
}

static ac_status validate_moe(int i, const ac_block_dims *b)
{
    if (b->n_experts <= 0)
        return LAYER_FAIL(i, b, "n_experts must be positive, got %d", b->n_experts);
    if (b->n_experts > AC_MAX_EXPERTS)
        return LAYER_FAIL(i, b, "n_experts %d exceeds the engine's limit of %d", b->n_experts, AC_MAX_EXPERTS);
    if (b->top_k <= 0)
        return LAYER_FAIL(i, b, "top_k must be positive, got %d", b->top_k);
    if (b->top_k > b->n_experts)
        return LAYER_FAIL(i, b, "top_k %d exceeds n_experts %d", b->top_k, b->n_experts);
    if (b->expert_ffn <= 0)
        return LAYER_FAIL(i, b, "expert_ffn must be positive, got %d", b->expert_ffn);
    if (b->shared_ffn < 0)
        return LAYER_FAIL(i, b, "shared_ffn must be >= 0 (0: no shared expert), got %d", b->shared_ffn);
    if (b->n_group <= 0)
        return LAYER_FAIL(i, b, "n_group must be positive, got %d", b->n_group);
    if (b->n_experts % b->n_group)
        return LAYER_FAIL(i, b, "n_experts %d is not a multiple of n_group %d", b->n_experts, b->n_group);
    if (b->n_group > 1 && b->n_experts / b->n_group < 2)
        return LAYER_FAIL(i, b, "n_group %d leaves fewer than 2 experts per group (a group scores its top 2)",
                          b->n_group);
    if (b->topk_group <= 0 || b->topk_group > b->n_group)
        return LAYER_FAIL(i, b, "topk_group %d must be in [1, n_group %d]", b->topk_group, b->n_group);
    if ((int64_t)b->topk_group * (b->n_experts / b->n_group) < b->top_k)
        return LAYER_FAIL(i, b, "top_k %d exceeds the %d experts in topk_group %d groups", b->top_k,
                          b->topk_group * (b->n_experts / b->n_group), b->topk_group);
    if (b->norm_topk_prob != 0 && b->norm_topk_prob != 1)
        return LAYER_FAIL(i, b, "norm_topk_prob must be 0 or 1, got %d", b->norm_topk_prob);
    if (!(b->routed_scaling > 0.0f) || !isfinite(b->routed_scaling))
        return LAYER_FAIL(i, b, "routed_scaling must be positive and finite, got %g", (double)b->routed_scaling);
    return AC_OK;
}

ac_status ac_arch_validate(const ac_arch *arch)
{
    if (!arch)
        return ac_fail(AC_ERR_INVALID, "arch: NULL");
    if (arch->vocab <= 0)
        return ac_fail(AC_ERR_INVALID, "arch: vocab must be positive, got %d", arch->vocab);
    if (arch->hidden <= 0)
        return ac_fail(AC_ERR_INVALID, "arch: hidden must be positive, got %d", arch->hidden);
    if (arch->n_layers <= 0)
        return ac_fail(AC_ERR_INVALID, "arch: n_layers must be positive, got %d", arch->n_layers);
    if (!arch->layers)
        return ac_fail(AC_ERR_INVALID, "arch: %d layers but no layer array", arch->n_layers);
    if (!(arch->norm_eps > 0.0f) || !isfinite(arch->norm_eps))
        return ac_fail(AC_ERR_INVALID, "arch: norm_eps must be positive and finite, got %g", (double)arch->norm_eps);
    if (arch->tie_embeddings != 0 && arch->tie_embeddings != 1)
        return ac_fail(AC_ERR_INVALID, "arch: tie_embeddings must be 0 or 1, got %d", arch->tie_embeddings);
    if (arch->use_conv_bias != 0 && arch->use_conv_bias != 1)
        return ac_fail(AC_ERR_INVALID, "arch: use_conv_bias must be 0 or 1, got %d", arch->use_conv_bias);
    if (arch->chunk_size <= 0)
        return ac_fail(AC_ERR_INVALID, "arch: chunk_size must be positive, got %d", arch->chunk_size);
    if (!(arch->time_step_min >= 0.0f) || !isfinite(arch->time_step_min))
        return ac_fail(AC_ERR_INVALID, "arch: time_step_min must be >= 0 and finite, got %g",
                       (double)arch->time_step_min);
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        ac_status st;
        switch (b->kind) {
        case AC_BLOCK_MAMBA: st = validate_mamba(i, b); break;
        case AC_BLOCK_ATTENTION: st = validate_attention(i, b); break;
        case AC_BLOCK_MLP:
            st = b->ffn > 0 ? AC_OK : LAYER_FAIL(i, b, "ffn must be positive, got %d", b->ffn);
            break;
        case AC_BLOCK_MOE: st = validate_moe(i, b); break;
        default:
            return ac_fail(AC_ERR_INVALID, "arch: layer %d: unknown block kind %d", i, (int)b->kind);
        }
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

/* ---- homogeneity ---- */

/* 1 when a and b (of the same kind) agree on every field that kind uses. */
static int same_dims(const ac_block_dims *a, const ac_block_dims *b)
{
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case AC_BLOCK_MAMBA:
        return a->mamba_heads == b->mamba_heads && a->mamba_head_dim == b->mamba_head_dim &&
               a->mamba_groups == b->mamba_groups && a->ssm_state == b->ssm_state &&
               a->conv_kernel == b->conv_kernel;
    case AC_BLOCK_ATTENTION:
        return a->attn_heads == b->attn_heads && a->attn_kv_heads == b->attn_kv_heads &&
               a->attn_head_dim == b->attn_head_dim;
    case AC_BLOCK_MLP: return a->ffn == b->ffn;
    case AC_BLOCK_MOE:
        return a->n_experts == b->n_experts && a->top_k == b->top_k && a->expert_ffn == b->expert_ffn &&
               a->shared_ffn == b->shared_ffn && a->n_group == b->n_group && a->topk_group == b->topk_group &&
               a->norm_topk_prob == b->norm_topk_prob && a->routed_scaling == b->routed_scaling;
    }
    return 0;
}

int ac_arch_is_homogeneous(const ac_arch *arch)
{
    const ac_block_dims *first[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        if ((unsigned)b->kind > AC_BLOCK_MOE)
            return 0;
        if (!first[b->kind])
            first[b->kind] = b;
        else if (!same_dims(first[b->kind], b))
            return 0;
    }
    return 1;
}

/* ---- parameter counts ---- */

/* Everything but the routed experts, plus `experts` of them. */
static int64_t block_params(const ac_arch *arch, const ac_block_dims *b, int64_t experts)
{
    int64_t D = arch->hidden;
    int64_t n = D; /* the block's pre-norm */
    switch (b->kind) {
    case AC_BLOCK_MAMBA: {
        int64_t dI = ac_mamba_d_inner(b), conv = ac_mamba_conv_dim(b), H = b->mamba_heads;
        n += (int64_t)ac_mamba_in_proj_dim(b) * D + conv * b->conv_kernel + (arch->use_conv_bias ? conv : 0) +
             3 * H + dI + D * dI;
        break;
    }
    case AC_BLOCK_ATTENTION: {
        int64_t q = (int64_t)b->attn_heads * b->attn_head_dim, kv = (int64_t)b->attn_kv_heads * b->attn_head_dim;
        n += 2 * q * D + 2 * kv * D;
        break;
    }
    case AC_BLOCK_MLP: n += 2 * (int64_t)b->ffn * D; break;
    case AC_BLOCK_MOE:
        n += (int64_t)b->n_experts * D + b->n_experts + experts * 2 * (int64_t)b->expert_ffn * D +
             2 * (int64_t)b->shared_ffn * D;
        break;
    }
    return n;
}

int64_t ac_block_param_count(const ac_arch *arch, const ac_block_dims *b)
{
    return block_params(arch, b, b->kind == AC_BLOCK_MOE ? b->n_experts : 0);
}

int64_t ac_block_active_param_count(const ac_arch *arch, const ac_block_dims *b)
{
    return block_params(arch, b, b->kind == AC_BLOCK_MOE ? b->top_k : 0);
}

ac_param_counts ac_arch_param_counts(const ac_arch *arch)
{
    ac_param_counts c = {0, 0, 0};
    int64_t embed = (int64_t)arch->vocab * arch->hidden;
    int64_t outer = embed + arch->hidden + (arch->tie_embeddings ? 0 : embed); /* + norm_f, lm_head */
    c.embedding = embed;
    c.total = outer;
    c.active = outer;
    for (int i = 0; i < arch->n_layers; i++) {
        c.total += ac_block_param_count(arch, &arch->layers[i]);
        c.active += ac_block_active_param_count(arch, &arch->layers[i]);
    }
    return c;
}

/* ---- printing ---- */

/* 1234567 -> "1,234,567" */
static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%" PRId64, v < 0 ? -v : v);
    size_t n = strlen(digits), o = 0;
    if (v < 0 && o + 1 < size)
        buf[o++] = '-';
    for (size_t i = 0; i < n && o + 1 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && o + 1 < size)
            buf[o++] = ',';
        if (o + 1 < size)
            buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

void ac_arch_print(const ac_arch *arch, FILE *out)
{
    char g1[32], g2[32];
    fprintf(out, "pattern: ");
    for (int i = 0; i < arch->n_layers; i++)
        fputc(ac_block_letter(arch->layers[i].kind), out);
    int kinds[4] = {0, 0, 0, 0};
    for (int i = 0; i < arch->n_layers; i++)
        if ((unsigned)arch->layers[i].kind <= AC_BLOCK_MOE)
            kinds[arch->layers[i].kind]++;
    fprintf(out, " (%d layers: %d mamba, %d attention, %d mlp, %d moe%s)\n", arch->n_layers, kinds[0], kinds[1],
            kinds[2], kinds[3], ac_arch_is_homogeneous(arch) ? "" : "; heterogeneous");
    fprintf(out, "vocab %d, hidden %d, norm_eps %g, tie_embeddings %s, conv_bias %s, chunk_size %d, time_step_min %g\n",
            arch->vocab, arch->hidden, (double)arch->norm_eps, arch->tie_embeddings ? "yes" : "no",
            arch->use_conv_bias ? "yes" : "no", arch->chunk_size, (double)arch->time_step_min);
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        fprintf(out, "  layer %3d %c %-9s ", i, ac_block_letter(b->kind), ac_block_name(b->kind));
        switch (b->kind) {
        case AC_BLOCK_MAMBA:
            fprintf(out, "heads %d x %d (d_inner %d), groups %d, state %d, conv %d, in_proj %d", b->mamba_heads,
                    b->mamba_head_dim, ac_mamba_d_inner(b), b->mamba_groups, b->ssm_state, b->conv_kernel,
                    ac_mamba_in_proj_dim(b));
            break;
        case AC_BLOCK_ATTENTION:
            fprintf(out, "heads %d, kv_heads %d, head_dim %d", b->attn_heads, b->attn_kv_heads, b->attn_head_dim);
            break;
        case AC_BLOCK_MLP: fprintf(out, "ffn %d", b->ffn); break;
        case AC_BLOCK_MOE:
            fprintf(out, "experts %d (top %d) x ffn %d, shared %d, groups %d (top %d), norm_topk %s, scale %g",
                    b->n_experts, b->top_k, b->expert_ffn, b->shared_ffn, b->n_group, b->topk_group,
                    b->norm_topk_prob ? "yes" : "no", (double)b->routed_scaling);
            break;
        }
        int64_t total = ac_block_param_count(arch, b), active = ac_block_active_param_count(arch, b);
        if (active != total)
            fprintf(out, "; params %s (active %s)\n", grouped(total, g1, sizeof g1), grouped(active, g2, sizeof g2));
        else
            fprintf(out, "; params %s\n", grouped(total, g1, sizeof g1));
    }
}
