/* The CUDA backend: device memory, the context's stream, and the ops of kernels/cuda.
 * It is listed by the registry whenever it is compiled in; `unavailable` says when this
 * machine has no device to run it on, and callers (the runtime, the tests) ask first. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cpu/cpu_ops.h"

#include "autocompress/probe.h"

#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* On a machine without a GPU the runtime finds no driver and reports "CUDA driver version
 * is insufficient for CUDA runtime version", which sends the user after a driver update;
 * without the NVIDIA kernel driver (/proc/driver/nvidia) there is no GPU to update it for. */
static void probe_devices(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0))
        snprintf(no_device, sizeof no_device, "no CUDA device: no GPU (the driver sees none)");
    else if (err == cudaErrorInsufficientDriver && access("/proc/driver/nvidia/version", F_OK) != 0)
        snprintf(no_device, sizeof no_device, "no CUDA device: no GPU (no NVIDIA driver is loaded)");
    else if (err != cudaSuccess)
        snprintf(no_device, sizeof no_device, "no CUDA device: %s", cudaGetErrorString(err));
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

/* Device memory in use, by the device's own accounting (total - free); 0 when it cannot
 * say (the failure goes to take_error). */
static size_t cuda_bytes_in_use(void)
{
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        ac_cuda_check("bytes_in_use");
        return 0;
    }
    return total - free_bytes;
}

/* The CUPTI probe (probes/cupti, declared in autocompress/probe.h): it keeps every
 * record, so no capacity. */
static ac_status cuda_probe_create(size_t capacity, ac_probe **probe)
{
    (void)capacity;
    return ac_cupti_probe_create(probe);
}

/* CUDA's attention takes no workspace, but the runtime reserves this and the memory model
 * plans it (runtime/plan.c, which knows no backend, sizes the CPU's), so the CPU's size
 * keeps a device's measured memory where the model puts it. */
static size_t cuda_attention_workspace(int threads, int queries, int keys)
{
    return ac_cpu_attention_workspace(threads, queries, keys);
}

static void cuda_identify(ac_device_identity *id)
{
    memset(id, 0, sizeof *id);
    int device = 0, driver = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
        cudaDriverGetVersion(&driver) != cudaSuccess) {
        ac_cuda_check("identify");
        return;
    }
    snprintf(id->name, sizeof id->name, "%.95s", prop.name); /* as much as the name holds */
    id->memory_bytes = (double)prop.totalGlobalMem;
    snprintf(id->driver, sizeof id->driver, "%d.%d", driver / 1000, driver % 1000 / 10);
    snprintf(id->capability, sizeof id->capability, "%d.%d", prop.major, prop.minor);
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
    .bytes_in_use = cuda_bytes_in_use,
    .probe_create = cuda_probe_create,
    .attention_workspace = cuda_attention_workspace,
    .identify = cuda_identify,
#define AC_OP(name, params, args) .name = ac_cuda_##name,
#define AC_OP_VALUE(type, name, params, args) .name = ac_cuda_##name,
#include "kernels/ops.def"
};
