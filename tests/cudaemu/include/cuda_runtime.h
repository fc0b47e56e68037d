/* The CUDA runtime as the emulator gives it (tests/cudaemu): what kernels/cuda uses of
 * the runtime API and of the device language, for kernels compiled as host C++.
 *
 * A launch runs its grid one block at a time on the calling thread; a block's threads are
 * coroutines (emu.cpp), switched at __syncthreads and at warp shuffles, so barriers and
 * shuffles mean what they mean on a GPU, and a barrier that not every thread reaches is
 * reported instead of hanging. "Device" memory is host memory from cudaMalloc, recorded,
 * so that a launch argument, a copy or a cuBLAS operand pointing outside it is reported
 * as the GPU would fail it (illegal address), and an AddressSanitizer build sees a kernel
 * reading past its buffers. Block-shared arrays are function statics (one block runs at
 * a time). */
#ifndef AC_CUDAEMU_CUDA_RUNTIME_H
#define AC_CUDAEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The running thread's coordinates (plain globals: one launch runs at a time). */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef struct ac_emu_stream *cudaStream_t;

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
};
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaMalloc(void **p, size_t bytes);
/* the runtime's typed overload */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t err);

/* ---- the device language ---- */

void __syncthreads(void);

/* The lane's value after every live lane of its warp has offered one, and the partner
 * lane's (lane ^ mask) value read back; the two waits keep a fast lane from overwriting
 * its slot before a slow one has read it. */
uint64_t ac_emu_shuffle_xor(uint64_t bits, int lane_mask, int width);

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value, "shuffle of a scalar");
    (void)mask;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = ac_emu_shuffle_xor(bits, lane_mask, width);
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* One block runs at a time, on one host thread: an add is atomic. */
template <typename T> static inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}

/* Round-to-nearest operations, never fused (the emulated sources build with
 * -ffp-contract=off). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline int __float_as_int(float f)
{
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* ---- launches: `k<<<grid, block, shared, stream>>>(args)` is rewritten (launch.sed) to
 * `ac_emu_launch(#k, k, ac_emu_config(grid, block, shared, stream))(args)` ---- */

struct ac_emu_config {
    dim3 grid, block;
    size_t shared;
    ac_emu_config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), shared(s)
    {
        (void)st;
    }
};

/* Validates the configuration as the runtime does, then runs every block (any failure
 * becomes the last error, naming the kernel). */
void ac_emu_run(const char *kernel, const ac_emu_config &config, const std::function<void()> &thread_body);
/* Records an invalid-address error unless p is null or inside a cudaMalloc allocation. */
bool ac_emu_check_device_pointer(const char *kernel, int arg, const void *p);
/* The launch's dynamic shared memory (`extern __shared__ T name[]` is rewritten to it),
 * all bytes 0xff (NaN) at the start of each block. */
void *ac_emu_dynamic_shared(void);
/* A block-shared array's declaration (`__shared__ T name[...]` is rewritten to a static
 * and this call): the first thread of each block to pass it fills it with 0xff bytes. */
void ac_emu_fresh_shared(void *array, size_t bytes);

template <typename... P> struct ac_emu_launcher {
    const char *name;
    void (*kernel)(P...);
    ac_emu_config config;

    /* the kernel's own parameter types: arguments convert at the call, as in a launch */
    void operator()(P... a) const
    {
        std::tuple<P...> args(a...);
        if (!pointers_on_device(args, std::index_sequence_for<P...>{}))
            return;
        ac_emu_run(name, config, [&] { std::apply(kernel, args); });
    }

  private:
    template <std::size_t... I> bool pointers_on_device(const std::tuple<P...> &args, std::index_sequence<I...>) const
    {
        bool ok = true;
        ((ok = ok && pointer_ok(std::get<I>(args), (int)I)), ...);
        return ok;
    }
    template <typename T> bool pointer_ok(const T &v, int i) const
    {
        if constexpr (std::is_pointer<T>::value)
            return ac_emu_check_device_pointer(name, i, (const void *)v);
        else
            return true;
    }
};

template <typename... P> static inline ac_emu_launcher<P...> ac_emu_launch(const char *name, void (*kernel)(P...),
                                                                          ac_emu_config config)
{
    return ac_emu_launcher<P...>{name, kernel, config};
}

#endif
