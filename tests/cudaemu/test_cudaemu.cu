/* The emulator itself (built as the kernels are, through launch.sed): what a launch
 * computes (indices, barriers over shared memory, xor shuffles, atomics, cuBLAS's
 * column-major products) against plain host loops, and that what fails on a GPU fails
 * here: a barrier not every thread reaches, a shuffle reading an exited lane, a block too
 * large, too much shared memory, a host pointer as a kernel argument, a copy of the wrong
 * kind, an operand or leading dimension cuBLAS rejects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" { /* cmocka.h declares C functions without saying so */
#include <cmocka.h>
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdlib.h>

static float *device_floats(size_t n)
{
    float *p = nullptr;
    assert_int_equal(cudaMalloc(&p, n * sizeof *p), cudaSuccess);
    return p;
}

/* ---- what launches compute ---- */

static __global__ void index_kernel(int *out)
{
    int block = blockIdx.x + gridDim.x * blockIdx.y;
    int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[block * blockDim.x * blockDim.y * blockDim.z + thread] = block * 1000 + thread;
}

static void test_indices(void **state)
{
    (void)state;
    dim3 grid(3, 2), block(4, 3, 2);
    int n = 6 * 24, *dev = nullptr, host[6 * 24];
    assert_int_equal(cudaMalloc(&dev, n * sizeof *dev), cudaSuccess);
    index_kernel<<<grid, block>>>(dev);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < n; i++)
        assert_int_equal(host[i], i / 24 * 1000 + i % 24);
    cudaFree(dev);
}

/* Each block reverses its 256 values through shared memory (a barrier between the
 * writes and the reads), and sums them with xor shuffles and one atomic per warp. */
static __global__ void reverse_and_sum_kernel(const float *in, float *out, float *total)
{
    __shared__ float tile[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[255 - threadIdx.x];
    float v = in[i];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0)
        atomicAdd(total, v);
}

static void test_barriers_shuffles_atomics(void **state)
{
    (void)state;
    enum { BLOCKS = 3, N = BLOCKS * 256 };
    float host[N], back[N], sum = 0.0f, got = 0.0f;
    for (int i = 0; i < N; i++) {
        host[i] = (float)(i % 7); /* small integers: every order of adding is exact */
        sum += host[i];
    }
    float *in = device_floats(N), *out = device_floats(N), *total = device_floats(1);
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemset(total, 0, sizeof(float));
    reverse_and_sum_kernel<<<BLOCKS, 256>>>(in, out, total);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(back, out, sizeof back, cudaMemcpyDeviceToHost);
    cudaMemcpy(&got, total, sizeof got, cudaMemcpyDeviceToHost);
    for (int i = 0; i < N; i++)
        assert_true(back[i] == host[i / 256 * 256 + 255 - i % 256]);
    assert_true(got == sum);
    cudaFree(in);
    cudaFree(out);
    cudaFree(total);
}

/* Reads shared memory no thread of the block wrote: the emulator's fill (NaN). */
static __global__ void unwritten_shared_kernel(float *out)
{
    __shared__ float tile[32];
    if (threadIdx.x == 0)
        out[blockIdx.x] = tile[5];
}

static void test_shared_memory_starts_unset(void **state)
{
    (void)state;
    float *out = device_floats(2), back[2];
    unwritten_shared_kernel<<<2, 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(back, out, sizeof back, cudaMemcpyDeviceToHost);
    assert_true(back[0] != back[0] && back[1] != back[1]); /* NaN in every block */
    cudaFree(out);
}

/* ---- what fails on a GPU fails here ---- */

/* Half a warp at a barrier, the other half in a full-warp shuffle: each waits for the
 * other. (Threads that exit count as arrived at a barrier, as on a GPU since Volta.) */
static __global__ void divergent_barrier_kernel(float *out)
{
    if (threadIdx.x % 32 < 16)
        __syncthreads();
    else
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

static __global__ void exited_lane_kernel(float *out)
{
    if (threadIdx.x >= 16)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 16);
}

static __global__ void plain_kernel(float *out)
{
    out[threadIdx.x] = 1.0f;
}

static void test_launch_faults(void **state)
{
    (void)state;
    float *out = device_floats(1024), host[4];
    divergent_barrier_kernel<<<1, 64>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorLaunchFailure);
    exited_lane_kernel<<<1, 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorLaunchFailure);
    plain_kernel<<<1, 2048>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    plain_kernel<<<dim3(1, 70000), 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    plain_kernel<<<1, 32, 64 * 1024>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    plain_kernel<<<1, 4>>>(host);
    assert_int_equal(cudaGetLastError(), cudaErrorIllegalAddress);
    assert_int_equal(cudaGetLastError(), cudaSuccess); /* taken: cleared */
    plain_kernel<<<1, 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    cudaFree(out);
}

static void test_copy_kinds(void **state)
{
    (void)state;
    float host[8] = {0}, *dev = device_floats(8);
    assert_int_equal(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, dev, sizeof host, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(dev, host, sizeof host, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(dev, dev + 4, 4 * sizeof(float), cudaMemcpyDeviceToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(dev + 4, host, sizeof host, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemset(host, 0, sizeof host), cudaErrorInvalidValue);
    size_t free_before, free_after, total;
    cudaMemGetInfo(&free_before, &total);
    cudaFree(dev);
    cudaMemGetInfo(&free_after, &total);
    assert_int_equal(free_after - free_before, sizeof host);
}

/* C = A B (column-major, 3x2 = 3x4 4x2) against the loops, and cuBLAS's refusals. */
static void test_blas(void **state)
{
    (void)state;
    enum { M = 3, N = 2, K = 4, LDA = 5 };
    float a[LDA * K], b[K * N], c[M * N], want[M * N], one = 1.0f, zero = 0.0f;
    for (int i = 0; i < LDA * K; i++)
        a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 3) + 0.5f;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            want[j * M + i] = 0.0f;
            for (int k = 0; k < K; k++)
                want[j * M + i] += a[k * LDA + i] * b[j * K + k];
        }
    float *da = device_floats(LDA * K), *db = device_floats(K * N), *dc = device_floats(M * N);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, LDA, db, K, &zero, dc, M),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    for (int i = 0; i < M * N; i++)
        assert_true(c[i] == want[i]);
    /* lda under the rows; B read past its allocation; alpha in device memory */
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M - 1, db, K, &zero, dc, M),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K + 1, &one, da, LDA, db, K + 1, &zero, dc, M),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, da, da, LDA, db, K, &zero, dc, M),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    cublasDestroy(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indices),
        cmocka_unit_test(test_barriers_shuffles_atomics),
        cmocka_unit_test(test_shared_memory_starts_unset),
        cmocka_unit_test(test_launch_faults),
        cmocka_unit_test(test_copy_kinds),
        cmocka_unit_test(test_blas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
