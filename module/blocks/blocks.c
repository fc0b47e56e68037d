/* The block-kind table (blocks/block.h) and the helpers its entries share. */
#include "blocks/block.h"

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
