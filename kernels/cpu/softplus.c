#include "kernels/cpu/cpu_ops.h"

#include <math.h>

void ac_cpu_softplus_dt(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                        float dt_min, float *dt)
{
    (void)ctx;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            float v = raw[(size_t)t * ldraw + h] + bias[h];
            /* torch's softplus switches to the identity above 20 */
            float sp = v > 20.0f ? v : log1pf(expf(v));
            dt[(size_t)t * H + h] = sp < dt_min ? dt_min : sp;
        }
}

/* d softplus(v) / dv = sigmoid(v); the identity branch above 20 has slope 1, and a value
 * held at dt_min passes no gradient. Tokens run in order, so dbias gets one sum per head. */
void ac_cpu_softplus_dt_backward(ac_kctx *ctx, int T, int H, const float *raw, int ldraw, const float *bias,
                                 float dt_min, const float *ddt, float *draw, int lddraw, float *dbias)
{
    (void)ctx;
    for (int h = 0; h < H; h++) {
        float sum = 0.0f;
        for (int t = 0; t < T; t++) {
            float v = raw[(size_t)t * ldraw + h] + bias[h];
            float sp = v > 20.0f ? v : log1pf(expf(v));
            float slope = sp < dt_min ? 0.0f : v > 20.0f ? 1.0f : 1.0f / (1.0f + expf(-v));
            float g = ddt[(size_t)t * H + h] * slope;
            draw[(size_t)t * lddraw + h] = g;
            sum += g;
        }
        if (dbias)
            dbias[h] += sum;
    }
}
