/* ac_model_slice on a Mamba layer of 8 heads in 2 groups cut to 4 heads in 2 groups: the
 * child's head j of group g is the parent's head j of group g (heads are ranked and kept
 * within their group), every tensor checked element by element against the index
 * arithmetic of the Mamba2 layout written out here; B and C keep their groups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "autocompress/model.h"
#include "model/model_internal.h"

enum { D = 12, P = 3, N = 2, K = 4, HP = 8, HC = 4, G = 2 };

static ac_model *mamba_model(int heads)
{
    ac_arch a = {.vocab = 10, .hidden = D, .norm_eps = 1e-5f, .use_conv_bias = 1, .chunk_size = 8,
                 .time_step_min = 1e-3f};
    assert_int_equal(ac_arch_alloc_layers(&a, 1), AC_OK);
    a.layers[0] = (ac_block_dims){.kind = AC_BLOCK_MAMBA, .mamba_heads = heads, .mamba_head_dim = P,
                                  .mamba_groups = G, .ssm_state = N, .conv_kernel = K};
    ac_model *m;
    assert_int_equal(ac_model_create(&a, &m), AC_OK);
    ac_arch_free(&a);
    return m;
}

/* Rows r of a [rows, cols] matrix: child row rc equals parent row rp. */
static void assert_row(const float *child, const float *parent, int cols, int rc, int rp)
{
    assert_memory_equal(child + (size_t)rc * cols, parent + (size_t)rp * cols, (size_t)cols * sizeof(float));
}

static void test_mamba_heads_are_sliced_within_groups(void **state)
{
    (void)state;
    ac_model *parent = mamba_model(HP);
    ac_model_init_random(parent, 3, 0.5f);
    ac_model *shape = mamba_model(HC), *child;
    assert_int_equal(ac_model_slice(parent, &shape->arch, NULL, 7, &child), AC_OK);
    ac_model_free(shape);
    const ac_layer_weights *p = &parent->layers[0], *c = &child->layers[0];
    int dIp = HP * P, dIc = HC * P, hp = HP / G, hc = HC / G;
    for (int g = 0; g < G; g++) {
        for (int j = 0; j < hc; j++) {
            int ch = g * hc + j, ph = g * hp + j;
            for (int q = 0; q < P; q++) {
                assert_row(c->in_proj, p->in_proj, D, ch * P + q, ph * P + q);             /* z */
                assert_row(c->in_proj, p->in_proj, D, dIc + ch * P + q, dIp + ph * P + q); /* x */
                assert_row(c->conv_w, p->conv_w, K, ch * P + q, ph * P + q);
                assert_true(c->conv_b[ch * P + q] == p->conv_b[ph * P + q]);
                assert_true(c->gate_norm[ch * P + q] == p->gate_norm[ph * P + q]);
                for (int d = 0; d < D; d++)
                    assert_true(c->out_proj[d * dIc + ch * P + q] == p->out_proj[d * dIp + ph * P + q]);
            }
            assert_row(c->in_proj, p->in_proj, D, 2 * dIc + 2 * G * N + ch, 2 * dIp + 2 * G * N + ph); /* dt */
            assert_true(c->dt_bias[ch] == p->dt_bias[ph]);
            assert_true(c->A_log[ch] == p->A_log[ph]);
            assert_true(c->D[ch] == p->D[ph]);
        }
        for (int n = 0; n < N; n++) {
            int bc = 2 * dIc + g * N + n, bp = 2 * dIp + g * N + n; /* B, then C a block of G N further */
            assert_row(c->in_proj, p->in_proj, D, bc, bp);
            assert_row(c->in_proj, p->in_proj, D, bc + G * N, bp + G * N);
            assert_row(c->conv_w, p->conv_w, K, dIc + g * N + n, dIp + g * N + n);
            assert_row(c->conv_w, p->conv_w, K, dIc + (G + g) * N + n, dIp + (G + g) * N + n);
        }
    }
    /* the second group's first head is not the parent's third head (leading heads) */
    assert_true(memcmp(c->in_proj + (size_t)hc * P * D, p->in_proj + (size_t)hc * P * D, (size_t)P * D * sizeof(float)));
    ac_model_free(child);
    ac_model_free(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mamba_heads_are_sliced_within_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
