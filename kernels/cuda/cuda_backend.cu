/* The CUDA backend: device memory, the context's stream, and the ops of kernels/cuda.
 * It is listed by the registry whenever it is compiled in; `unavailable` says when this
 * machine has no device to run it on, and callers (the runtime, the tests) ask first. */
#include "kernels/cuda/cuda_common.cuh"

#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- errors: the first failure since the last take_error ---- */

static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char first_error[256];
static char taken_error[256];

static void keep_error(const char *what, const char *why)
{
    pthread_mutex_lock(&error_lock);
    if (!first_error[0])
        snprintf(first_error, sizeof first_error, "cuda: %s: %s", what, why);
    pthread_mutex_unlock(&error_lock);
}

void ac_cuda_check(const char *op)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        keep_error(op, cudaGetErrorString(err));
}

void ac_cuda_check_cublas(const char *op, int cublas_status)
{
    if (cublas_status != CUBLAS_STATUS_SUCCESS)
        keep_error(op, cublasGetStatusString((cublasStatus_t)cublas_status));
}

/* The returned text stays valid until the next call. */
static const char *cuda_take_error(void)
{
    const char *out = NULL;
    pthread_mutex_lock(&error_lock);
    if (first_error[0]) {
        memcpy(taken_error, first_error, sizeof taken_error);
        first_error[0] = '\0';
        out = taken_error;
    }
    pthread_mutex_unlock(&error_lock);
    return out;
}

/* ---- is there a device? asked once ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static char no_device[256];

static void probe_devices(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess)
        snprintf(no_device, sizeof no_device, "no CUDA device: %s", cudaGetErrorString(err));
    else if (count == 0)
        snprintf(no_device, sizeof no_device, "no CUDA device: the driver sees none");
}

static const char *cuda_unavailable(void)
{
    pthread_once(&probe_once, probe_devices);
    return no_device[0] ? no_device : NULL;
}

/* ---- memory ---- */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        char what[64];
        snprintf(what, sizeof what, "alloc of %zu bytes", bytes);
        keep_error(what, cudaGetErrorString(err));
        return NULL;
    }
    return p;
}

static void cuda_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess)
        ac_cuda_check("free");
}

static cudaMemcpyKind copy_kind(ac_copy_kind kind)
{
    switch (kind) {
    case AC_COPY_HOST_TO_DEVICE: return cudaMemcpyHostToDevice;
    case AC_COPY_DEVICE_TO_HOST: return cudaMemcpyDeviceToHost;
    case AC_COPY_DEVICE_TO_DEVICE: return cudaMemcpyDeviceToDevice;
    }
    return cudaMemcpyDefault;
}

/* Synchronous (the legacy default stream waits for the other blocking streams), as the
 * CPU's memcpy is: a copy to the host is complete when it returns. */
static void cuda_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    if (bytes && cudaMemcpy(dst, src, bytes, copy_kind(kind)) != cudaSuccess)
        ac_cuda_check("copy");
}

static void cuda_memset_zero(void *p, size_t bytes)
{
    if (bytes && cudaMemset(p, 0, bytes) != cudaSuccess)
        ac_cuda_check("memset_zero");
}

extern "C" size_t ac_cuda_bytes_in_use(void)
{
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        ac_cuda_check("bytes_in_use");
        return 0;
    }
    return total - free_bytes;
}

static void cuda_sync(ac_kctx *ctx)
{
    if (cudaStreamSynchronize(ac_cuda_stream(ctx)) != cudaSuccess)
        ac_cuda_check("sync");
}

const ac_backend ac_cuda_backend = {
    .name = "cuda",
    .ssd_state_interval = 1,
    .moe_token_batch = 16,
    .alloc = cuda_alloc,
    .alloc_dense = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memset_zero = cuda_memset_zero,
    .sync = cuda_sync,
    .unavailable = cuda_unavailable,
    .take_error = cuda_take_error,
    .linear = ac_cuda_linear,
    .gemv_batch = ac_cuda_gemv_batch,
    .gemv_sum = ac_cuda_gemv_sum,
    .linear_batch = ac_cuda_linear_batch,
    .rmsnorm = ac_cuda_rmsnorm,
    .gated_rmsnorm = ac_cuda_gated_rmsnorm,
    .conv1d_silu = ac_cuda_conv1d_silu,
    .softplus_dt = ac_cuda_softplus_dt,
    .ssd_scan = ac_cuda_ssd_scan,
    .attention = ac_cuda_attention,
    .moe_route = ac_cuda_moe_route,
    .moe_token = ac_cuda_moe_token,
    .moe_mask_scores = ac_cuda_moe_mask_scores,
    .gather_rows = ac_cuda_gather_rows,
    .linear_bf16 = ac_cuda_linear_bf16,
    .gather_rows_bf16 = ac_cuda_gather_rows_bf16,
    .scatter_add_rows = ac_cuda_scatter_add_rows,
    .relu2 = ac_cuda_relu2,
    .add = ac_cuda_add,
    .mul_columns = ac_cuda_mul_columns,
    .column_dot = ac_cuda_column_dot,
    .neg_exp = ac_cuda_neg_exp,
    .linear_backward = ac_cuda_linear_backward,
    .linear_batch_backward = ac_cuda_linear_batch_backward,
    .rmsnorm_backward = ac_cuda_rmsnorm_backward,
    .rmsnorm_width_backward = ac_cuda_rmsnorm_width_backward,
    .relu2_backward = ac_cuda_relu2_backward,
    .cross_entropy = ac_cuda_cross_entropy,
    .kd_loss = ac_cuda_kd_loss,
    .adamw = ac_cuda_adamw,
    .sum_squares = ac_cuda_sum_squares,
    .scale = ac_cuda_scale,
    .ssd_scan_save = ac_cuda_ssd_scan_save,
    .ssd_scan_backward = ac_cuda_ssd_scan_backward,
    .mul_heads = ac_cuda_mul_heads,
    .mul_heads_backward = ac_cuda_mul_heads_backward,
    .softplus_dt_backward = ac_cuda_softplus_dt_backward,
    .conv1d_silu_backward = ac_cuda_conv1d_silu_backward,
    .gated_rmsnorm_backward = ac_cuda_gated_rmsnorm_backward,
    .gated_rmsnorm_width_backward = ac_cuda_gated_rmsnorm_width_backward,
    .attention_backward = ac_cuda_attention_backward,
    .moe_route_backward = ac_cuda_moe_route_backward,
    .moe_mask_scores_backward = ac_cuda_moe_mask_scores_backward,
    .moe_combine_backward = ac_cuda_moe_combine_backward,
    .gather_rows_backward = ac_cuda_gather_rows_backward,
    .embedding_backward = ac_cuda_embedding_backward,
};
