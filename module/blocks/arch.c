/* The architecture description: names, ownership, validation, derived dims, parameter
 * counts and a human-readable summary. */
#include "autocompress/arch.h"
#include "blocks/block.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

char ac_block_letter(ac_block_kind kind)
{
    const ac_block_ops *ops = ac_block_ops_of(kind);
    return ops ? ops->letter : '?';
}

const char *ac_block_name(ac_block_kind kind)
{
    const ac_block_ops *ops = ac_block_ops_of(kind);
    return ops ? ops->name : "unknown";
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
        const ac_block_ops *ops = ac_block_ops_of(arch->layers[i].kind);
        if (!ops)
            return ac_fail(AC_ERR_INVALID, "arch: layer %d: unknown block kind %d", i, (int)arch->layers[i].kind);
        ac_status st = ops->validate(i, &arch->layers[i]);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

/* ---- homogeneity ---- */

int ac_arch_is_homogeneous(const ac_arch *arch)
{
    const ac_block_dims *first[AC_BLOCK_KINDS] = {NULL};
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        const ac_block_ops *ops = ac_block_ops_of(b->kind);
        if (!ops)
            return 0;
        if (!first[b->kind])
            first[b->kind] = b;
        else if (!ops->same_dims(first[b->kind], b))
            return 0;
    }
    return 1;
}

/* ---- parameter counts ---- */

/* The block's pre-norm and its mixer. */
int64_t ac_block_param_count(const ac_arch *arch, const ac_block_dims *b)
{
    return arch->hidden + ac_block(b)->params(arch, b, 0);
}

int64_t ac_block_active_param_count(const ac_arch *arch, const ac_block_dims *b)
{
    return arch->hidden + ac_block(b)->params(arch, b, 1);
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
    int kinds[AC_BLOCK_KINDS] = {0};
    for (int i = 0; i < arch->n_layers; i++)
        if (ac_block_ops_of(arch->layers[i].kind))
            kinds[arch->layers[i].kind]++;
    fprintf(out, " (%d layers: %d mamba, %d attention, %d mlp, %d moe%s)\n", arch->n_layers, kinds[0], kinds[1],
            kinds[2], kinds[3], ac_arch_is_homogeneous(arch) ? "" : "; heterogeneous");
    fprintf(out, "vocab %d, hidden %d, norm_eps %g, tie_embeddings %s, conv_bias %s, chunk_size %d, time_step_min %g\n",
            arch->vocab, arch->hidden, (double)arch->norm_eps, arch->tie_embeddings ? "yes" : "no",
            arch->use_conv_bias ? "yes" : "no", arch->chunk_size, (double)arch->time_step_min);
    for (int i = 0; i < arch->n_layers; i++) {
        const ac_block_dims *b = &arch->layers[i];
        fprintf(out, "  layer %3d %c %-9s ", i, ac_block_letter(b->kind), ac_block_name(b->kind));
        ac_block(b)->print(b, out);
        int64_t total = ac_block_param_count(arch, b), active = ac_block_active_param_count(arch, b);
        if (active != total)
            fprintf(out, "; params %s (active %s)\n", grouped(total, g1, sizeof g1), grouped(active, g2, sizeof g2));
        else
            fprintf(out, "; params %s\n", grouped(total, g1, sizeof g1));
    }
}
