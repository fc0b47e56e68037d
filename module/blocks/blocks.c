/* The block-kind table (blocks/block.h) and the helpers its entries share. */
#include "blocks/block.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static const ac_block_ops *const table[] = {
    [AC_BLOCK_MAMBA] = &ac_mamba2_ops,
    [AC_BLOCK_ATTENTION] = &ac_attention_ops,
    [AC_BLOCK_MLP] = &ac_mlp_ops,
    [AC_BLOCK_MOE] = &ac_moe_ops,
};

const ac_block_ops *ac_block_ops_of(ac_block_kind kind)
{
    return (unsigned)kind < sizeof table / sizeof table[0] ? table[kind] : NULL;
}

ac_cost_row ac_block_row_key(const ac_block_dims *b, int hidden)
{
    ac_cost_row key;
    memset(&key, 0, sizeof key);
    key.kind = (ac_row_kind)b->kind;
    key.hidden = hidden;
    ac_block(b)->row_key(b, &key);
    return key;
}

ac_status ac_layer_fail(int i, const ac_block_dims *b, const char *fmt, ...)
{
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(AC_ERR_INVALID, "arch: layer %d (%s): %s", i, ac_block_name(b->kind), message);
}

int ac_block_no_kv(const ac_block_dims *b)
{
    (void)b;
    return 0;
}

size_t ac_block_no_state(const ac_block_dims *b)
{
    (void)b;
    return 0;
}

int ac_block_no_axis(const ac_block_dims *b, ac_layer_axis axis)
{
    (void)b, (void)axis;
    return 0;
}

int ac_block_no_cost_axis(const ac_block_dims *b, ac_axis_kind kind, int *groups)
{
    (void)b, (void)kind;
    *groups = 1;
    return -1;
}

void ac_copy_rows(float *dst, int dcols, int d0, const float *src, int scols, int s0, int n)
{
    int c = dcols < scols ? dcols : scols;
    for (int r = 0; r < n; r++)
        memcpy(dst + (size_t)(d0 + r) * dcols, src + (size_t)(s0 + r) * scols, (size_t)c * sizeof *dst);
}

void ac_copy_prefix(float *dst, int dn, const float *src, int sn)
{
    if (dst && src)
        memcpy(dst, src, (size_t)(dn < sn ? dn : sn) * sizeof *dst);
}

void ac_slice_ffn(float *cup, float *cdown, int Fc, int Dc, const float *pup, const float *pdown, int Fp, int Dp)
{
    if (!cup || !pup || Fc <= 0 || Fp <= 0)
        return;
    ac_copy_rows(cup, Dc, 0, pup, Dp, 0, Fc < Fp ? Fc : Fp);
    ac_copy_rows(cdown, Fc, 0, pdown, Fp, 0, Dc < Dp ? Dc : Dp);
}

/* ---- the search facet's helpers ---- */

const char *ac_layer_axis_name(ac_layer_axis axis)
{
    static const char *const names[AC_LAYER_AXES] = {"mamba_heads", "experts", "ffn", "shared_ffn"};
    return (unsigned)axis < AC_LAYER_AXES ? names[axis] : "?";
}

void ac_importance_add_mean(const float *a, int lda, int rows, int C, double *acc, double *colsum)
{
    if (rows <= 0)
        return;
    for (int c = 0; c < C; c++)
        colsum[c] = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *ar = a + (size_t)r * lda;
        for (int c = 0; c < C; c++)
            colsum[c] += fabs((double)ar[c]);
    }
    for (int c = 0; c < C; c++) {
        double m = colsum[c] / rows;
        acc[c] += m * m;
    }
}

void ac_importance_add_means(const ac_importance_chunk *ch, const float *a, int lda, int C, double *acc)
{
    for (int s = 0; s < ch->n_seqs; s++)
        ac_importance_add_mean(a + (size_t)s * ch->seq_len * lda, lda, ch->seq_len, C, acc, ch->colsum);
}

void ac_permute_blocks(float *data, int n, size_t block, const int *perm, float *tmp)
{
    for (int j = 0; j < n; j++)
        memcpy(tmp + (size_t)j * block, data + (size_t)perm[j] * block, block * sizeof *data);
    memcpy(data, tmp, (size_t)n * block * sizeof *data);
}

void ac_permute_in_rows(float *data, size_t rows, size_t ld, size_t c0, int n, size_t block, const int *perm,
                        float *tmp)
{
    for (size_t r = 0; r < rows; r++)
        ac_permute_blocks(data + r * ld + c0, n, block, perm, tmp);
}

void ac_permute_cols(float *m, size_t rows, int cols, const int *perm, float *tmp)
{
    ac_permute_in_rows(m, rows, (size_t)cols, 0, cols, 1, perm, tmp);
}

void ac_permute_ffn(float *up, float *down, int F, int D, const int *perm, float *tmp)
{
    ac_permute_blocks(up, F, (size_t)D, perm, tmp);
    ac_permute_cols(down, (size_t)D, F, perm, tmp);
}

ac_status ac_check_dims(int i, int p, const ac_dim_pair *pairs, int n, int fixed)
{
    for (int k = 0; k < n; k++) {
        const ac_dim_pair *d = &pairs[k];
        if (fixed ? d->child != d->parent : d->child > d->parent)
            return ac_fail(AC_ERR_INVALID, "prune: layer %d (parent layer %d): %s %d %s the parent's %d", i, p,
                           d->field, d->child, fixed ? "differs from" : "exceeds", d->parent);
    }
    return AC_OK;
}

ac_status ac_check_same_kind(int i, int p, const ac_block_dims *c, const ac_block_dims *pb)
{
    if (c->kind == pb->kind)
        return AC_OK;
    return ac_fail(AC_ERR_INVALID, "prune: layer %d is %s but parent layer %d is %s", i, ac_block_name(c->kind), p,
                   ac_block_name(pb->kind));
}
