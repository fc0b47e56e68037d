/* The emulator's runtime (tests/cudaemu/include/cuda_runtime.h says what it is for):
 * device memory as recorded host memory, launches as blocks of coroutines, cuBLAS on the
 * host BLAS. Every failure is kept as the host thread's last error, as CUDA keeps it, and
 * printed with its details (the kernel, the block, the argument) on stderr. */
#include "cuda_runtime.h"
#include "cublas_v2.h"

#include <cblas.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <map>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define AC_EMU_ASAN 1
#else
#define AC_EMU_ASAN 0
#endif

dim3 threadIdx, blockIdx, blockDim, gridDim;

static thread_local cudaError_t last_error = cudaSuccess;

static void fail(cudaError_t err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudaemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (last_error == cudaSuccess)
        last_error = err;
}

/* ---- device memory: host allocations, recorded ---- */

enum : size_t { DEVICE_BYTES = (size_t)80 << 30 };

static std::mutex memory_lock;
static std::map<uintptr_t, size_t> allocations; /* start -> bytes */
static size_t bytes_in_use;

/* True when [p, p + bytes) lies inside one allocation (a pointer one past its end, with
 * nothing to access, counts as inside). */
static bool on_device(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin())
        return false;
    --it;
    return a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

/* An emulated device: the host's memory stands for its own. */
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return cudaErrorInvalidValue;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "cudaemu");
    prop->totalGlobalMem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    prop->major = 9;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    *version = 12000;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    /* the exact size (cudaMalloc rounds up): AddressSanitizer sees a read past the end */
    if (bytes > DEVICE_BYTES - bytes_in_use || posix_memalign(p, 256, bytes ? bytes : 1) != 0) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    allocations[(uintptr_t)*p] = bytes;
    bytes_in_use += bytes;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    std::lock_guard<std::mutex> hold(memory_lock);
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end()) {
        fprintf(stderr, "cudaemu: cudaFree(%p): not an allocation's start\n", p);
        return cudaErrorInvalidValue;
    }
    bytes_in_use -= it->second;
    allocations.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    *total = DEVICE_BYTES;
    *free_bytes = DEVICE_BYTES - bytes_in_use;
    return cudaSuccess;
}

/* Where a copy of `kind` must find its ends (a wrong kind faults on a GPU). */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && bytes &&
        (on_device(dst, bytes) != dst_device || on_device(src, bytes) != src_device)) {
        fprintf(stderr, "cudaemu: cudaMemcpy of %zu bytes, kind %d: %p -> %p is not %s -> %s memory\n", bytes,
                (int)kind, src, dst, src_device ? "device" : "host", dst_device ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    if (bytes && !on_device(p, bytes)) {
        fprintf(stderr, "cudaemu: cudaMemset of %zu bytes at %p: not device memory\n", bytes, p);
        return cudaErrorInvalidValue;
    }
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream)
{
    (void)stream;
    return cudaMemset(p, value, bytes);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    return cudaPeekAtLastError();
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

const char *cudaGetErrorString(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

bool ac_emu_check_device_pointer(const char *kernel, int arg, const void *p)
{
    if (!p || on_device(p, 0))
        return true;
    fail(cudaErrorIllegalAddress, "kernel %s: argument %d (%p) is not device memory", kernel, arg, p);
    return false;
}

/* ---- coroutines: a saved stack pointer on x86-64, ucontext elsewhere ----
 * glibc's swapcontext saves and restores the signal mask with a system call each switch:
 * 90% of the emulator's time in a profile of the server's tests. The x86-64 switch keeps
 * the callee-saved registers on the stack it leaves and stores the stack pointer; the
 * floating-point control state is the thread's and the same in every coroutine. */
#if defined(__x86_64__)
struct coroutine {
    void *sp;
};

extern "C" void ac_emu_switch(void **save_sp, void *load_sp);
asm(".text\n"
    ".globl ac_emu_switch\n"
    ".hidden ac_emu_switch\n"
    ".type ac_emu_switch, @function\n"
    "ac_emu_switch:\n"
    "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n    popq %rbp\n"
    "    ret\n"
    ".size ac_emu_switch, .-ac_emu_switch\n");

/* A coroutine whose first switch-in "returns" into entry, on a stack aligned as after a
 * call (entry must never return). */
static void coroutine_start(coroutine *c, char *stack, size_t bytes, void (*entry)(void))
{
    uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
    void **sp = (void **)(top - 16);
    sp[0] = (void *)entry; /* ac_emu_switch's ret; then rsp = top - 8, as after a call */
    sp[1] = nullptr;
    sp -= 6; /* rbp, rbx, r12-r15: popped as zeros */
    memset(sp, 0, 6 * sizeof *sp);
    c->sp = sp;
}

static void coroutine_switch(coroutine *from, coroutine *to)
{
    ac_emu_switch(&from->sp, to->sp);
}
#else
struct coroutine {
    ucontext_t context;
};

/* getcontext returns twice: no loop around it */
static void coroutine_start(coroutine *c, char *stack, size_t bytes, void (*entry)(void))
{
    getcontext(&c->context);
    c->context.uc_stack.ss_sp = stack;
    c->context.uc_stack.ss_size = bytes;
    c->context.uc_link = nullptr;
    makecontext(&c->context, entry, 0);
}

static void coroutine_switch(coroutine *from, coroutine *to)
{
    swapcontext(&from->context, &to->context);
}
#endif

/* ---- blocks of coroutines ---- */

enum { MAX_THREADS = 1024, WARP = 32, STACK_BYTES = 256 * 1024, SHARED_LIMIT = 48 * 1024, MAX_SHARED_ARRAYS = 16 };

enum fiber_state { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct fiber {
    coroutine context;
    fiber_state state;
    dim3 index;
#if AC_EMU_ASAN
    void *fake_stack;
#endif
};

/* The block being run (by the launch holding launch_lock). */
struct block_run {
    const char *kernel;
    const std::function<void()> *body;
    int threads, current;
    /* threads between two waits run last to first (AC_CUDAEMU_ORDER=reverse): a read
     * that a missing barrier leaves before its write shows in one order or the other */
    bool reverse;
    bool broken; /* a fault was reported: the block's remaining threads are abandoned */
    fiber fibers[MAX_THREADS];
    uint64_t slots[MAX_THREADS];
    coroutine scheduler;
    char *stacks;
    void *shared;
    size_t shared_bytes;
    void *fresh[MAX_SHARED_ARRAYS]; /* block-shared arrays filled for this block */
    int n_fresh;
#if AC_EMU_ASAN
    void *scheduler_fake_stack;
    const void *scheduler_bottom;
    size_t scheduler_size;
#endif
};

static block_run *run;

static void switch_to_fiber(block_run *b, int i)
{
    b->current = i;
    threadIdx = b->fibers[i].index;
#if AC_EMU_ASAN
    __sanitizer_start_switch_fiber(&b->scheduler_fake_stack, b->stacks + (size_t)i * STACK_BYTES, STACK_BYTES);
#endif
    coroutine_switch(&b->scheduler, &b->fibers[i].context);
#if AC_EMU_ASAN
    __sanitizer_finish_switch_fiber(b->scheduler_fake_stack, nullptr, nullptr);
#endif
}

/* Back to the scheduler in `state`; returns when the scheduler resumes this fiber. */
static void yield(fiber_state state)
{
    block_run *b = run;
    fiber *f = &b->fibers[b->current];
    f->state = state;
#if AC_EMU_ASAN
    __sanitizer_start_switch_fiber(state == DONE ? nullptr : &f->fake_stack, b->scheduler_bottom,
                                   b->scheduler_size);
#endif
    coroutine_switch(&f->context, &b->scheduler);
#if AC_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

static void fiber_main(void)
{
    block_run *b = run;
#if AC_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->scheduler_bottom, &b->scheduler_size);
#endif
    (*b->body)();
    yield(DONE);
}

void __syncthreads(void)
{
    yield(AT_BARRIER);
}

uint64_t ac_emu_shuffle_xor(uint64_t bits, int lane_mask, int width)
{
    block_run *b = run;
    int me = b->current, lane = me % WARP, partner = (lane ^ lane_mask);
    if (width <= 0 || width > WARP || (width & (width - 1)) || (partner / width) != (lane / width))
        partner = lane; /* outside the lane's segment: its own value, as on a GPU */
    int from = me - lane + partner;
    b->slots[me] = bits;
    yield(AT_WARP);
    uint64_t got = bits;
    if (from >= b->threads || b->fibers[from].state == DONE) {
        if (!b->broken)
            fail(cudaErrorLaunchFailure, "kernel %s: block (%u,%u,%u) thread %d: a shuffle reads lane %d, which %s",
                 b->kernel, blockIdx.x, blockIdx.y, blockIdx.z, me, partner,
                 from >= b->threads ? "the block does not have" : "has exited");
        b->broken = true;
    } else {
        got = b->slots[from];
    }
    yield(AT_WARP);
    return got;
}

/* Lets waiting threads go: all of the block at a barrier, or all of a warp at a shuffle
 * (threads that have exited count as arrived, as on a GPU since Volta). False when
 * threads wait and none can go: they wait at different places. */
static bool release(block_run *b)
{
    int live = 0, at_barrier = 0;
    for (int i = 0; i < b->threads; i++) {
        live += b->fibers[i].state != DONE;
        at_barrier += b->fibers[i].state == AT_BARRIER;
    }
    if (live == 0)
        return true;
    bool any = false;
    if (at_barrier == live) {
        for (int i = 0; i < b->threads; i++)
            if (b->fibers[i].state == AT_BARRIER)
                b->fibers[i].state = RUNNABLE;
        return true;
    }
    for (int w = 0; w < b->threads; w += WARP) {
        int end = w + WARP < b->threads ? w + WARP : b->threads, waiting = 0, alive = 0;
        for (int i = w; i < end; i++) {
            alive += b->fibers[i].state != DONE;
            waiting += b->fibers[i].state == AT_WARP;
        }
        if (alive > 0 && waiting == alive) {
            for (int i = w; i < end; i++)
                if (b->fibers[i].state == AT_WARP)
                    b->fibers[i].state = RUNNABLE;
            any = true;
        }
    }
    return any;
}

static void prepare_fiber(fiber *f, char *stack, dim3 index)
{
    f->state = RUNNABLE;
    f->index = index;
    coroutine_start(&f->context, stack, STACK_BYTES, fiber_main);
}

static void run_block(block_run *b, dim3 block)
{
    memset(b->shared, 0xff, b->shared_bytes);
    b->n_fresh = 0;
    for (int i = 0; i < b->threads; i++)
        prepare_fiber(&b->fibers[i], b->stacks + (size_t)i * STACK_BYTES,
                      dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y)));
    for (;;) {
        bool all_done = true;
        for (int k = 0; k < b->threads && !b->broken; k++) {
            int i = b->reverse ? b->threads - 1 - k : k;
            if (b->fibers[i].state == RUNNABLE)
                switch_to_fiber(b, i);
        }
        for (int i = 0; i < b->threads; i++)
            all_done = all_done && b->fibers[i].state == DONE;
        if (all_done || b->broken)
            return;
        if (!release(b)) {
            fail(cudaErrorLaunchFailure,
                 "kernel %s: block (%u,%u,%u): threads wait at different barriers or shuffles (a deadlock on a GPU)",
                 b->kernel, blockIdx.x, blockIdx.y, blockIdx.z);
            b->broken = true;
            return;
        }
    }
}

static bool valid_config(const char *kernel, const ac_emu_config &c)
{
    const dim3 &g = c.grid, &t = c.block;
    unsigned long threads = (unsigned long)t.x * t.y * t.z;
    if (t.x == 0 || t.y == 0 || t.z == 0 || t.x > 1024 || t.y > 1024 || t.z > 64 || threads > MAX_THREADS) {
        fail(cudaErrorInvalidConfiguration, "kernel %s: block (%u,%u,%u) is not a valid block", kernel, t.x, t.y,
             t.z);
        return false;
    }
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > INT_MAX || g.y > 65535 || g.z > 65535) {
        fail(cudaErrorInvalidConfiguration, "kernel %s: grid (%u,%u,%u) is not a valid grid", kernel, g.x, g.y, g.z);
        return false;
    }
    if (c.shared > SHARED_LIMIT) {
        fail(cudaErrorInvalidValue, "kernel %s: %zu bytes of dynamic shared memory, over the %d a block may have",
             kernel, c.shared, (int)SHARED_LIMIT);
        return false;
    }
    return true;
}

static std::mutex launch_lock; /* block-shared arrays are statics: one launch at a time */

void ac_emu_run(const char *kernel, const ac_emu_config &config, const std::function<void()> &thread_body)
{
    if (!valid_config(kernel, config))
        return;
    std::lock_guard<std::mutex> hold(launch_lock);
    static block_run *b = nullptr;
    if (!b) {
        b = new block_run();
        b->stacks = (char *)mmap(nullptr, (size_t)MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (b->stacks == MAP_FAILED) {
            delete b;
            b = nullptr;
            fail(cudaErrorMemoryAllocation, "kernel %s: no memory for the block's stacks", kernel);
            return;
        }
    }
    const char *order = getenv("AC_CUDAEMU_ORDER");
    b->reverse = order && strcmp(order, "reverse") == 0;
    b->kernel = kernel;
    b->body = &thread_body;
    b->threads = (int)(config.block.x * config.block.y * config.block.z);
    b->broken = false;
    b->shared_bytes = config.shared;
    b->shared = malloc(config.shared ? config.shared : 1);
    run = b;
    blockDim = config.block;
    gridDim = config.grid;
    for (unsigned z = 0; z < config.grid.z && !b->broken; z++)
        for (unsigned y = 0; y < config.grid.y && !b->broken; y++)
            for (unsigned x = 0; x < config.grid.x && !b->broken; x++) {
                blockIdx = dim3(x, y, z);
                run_block(b, config.block);
            }
    free(b->shared);
    run = nullptr;
}

void *ac_emu_dynamic_shared(void)
{
    return run->shared;
}

void ac_emu_fresh_shared(void *array, size_t bytes)
{
    block_run *b = run;
    for (int i = 0; i < b->n_fresh; i++)
        if (b->fresh[i] == array)
            return;
    if (b->n_fresh == MAX_SHARED_ARRAYS) { /* unrecorded, it would be refilled under its writers */
        fail(cudaErrorLaunchFailure, "kernel %s: more than %d block-shared arrays", b->kernel, (int)MAX_SHARED_ARRAYS);
        b->broken = true;
        return;
    }
    b->fresh[b->n_fresh++] = array;
    memset(array, 0xff, bytes);
}

/* ---- cuBLAS on the host BLAS, column-major as cuBLAS is ---- */

/* A handle holds no settings here (one stream, one math mode). */
struct ac_emu_blas {};

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    *handle = new ac_emu_blas;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    (void)stream;
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    (void)mode;
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "unknown cuBLAS status";
}

/* A column-major rows x cols operand with leading dimension ld: inside one device
 * allocation (an empty one is not read). */
static bool operand_ok(const char *call, const char *name, const void *p, int rows, int cols, int ld,
                       size_t elem = sizeof(float))
{
    if (rows == 0 || cols == 0)
        return true;
    size_t bytes = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * elem;
    if (on_device(p, bytes))
        return true;
    fprintf(stderr, "cudaemu: %s: %s (%p, %d x %d, ld %d) is not inside one device allocation\n", call, name,
            (const void *)p, rows, cols, ld);
    return false;
}

static bool scalars_on_host(const char *call, const float *alpha, const float *beta)
{
    if (alpha && beta && !on_device(alpha, 0) && !on_device(beta, 0))
        return true;
    fprintf(stderr, "cudaemu: %s: alpha and beta must be host pointers (CUBLAS_POINTER_MODE_HOST)\n", call);
    return false;
}

static CBLAS_TRANSPOSE host_op(cublasOperation_t op)
{
    return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* A GEMM's operands as column-major rows x cols (op(A) m x k, op(B) k x n), and whether
 * the sizes and leading dimensions pass cuBLAS's checks (else a message naming call). */
struct gemm_shape {
    int a_rows, a_cols, b_rows, b_cols;
};

static bool gemm_sizes_ok(const char *call, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                          int lda, int ldb, int ldc, gemm_shape *s)
{
    s->a_rows = transa == CUBLAS_OP_N ? m : k, s->a_cols = transa == CUBLAS_OP_N ? k : m;
    s->b_rows = transb == CUBLAS_OP_N ? k : n, s->b_cols = transb == CUBLAS_OP_N ? n : k;
    if (m >= 0 && n >= 0 && k >= 0 && lda >= (s->a_rows > 1 ? s->a_rows : 1) &&
        ldb >= (s->b_rows > 1 ? s->b_rows : 1) && ldc >= (m > 1 ? m : 1))
        return true;
    fprintf(stderr, "cudaemu: %s: invalid sizes m %d n %d k %d lda %d ldb %d ldc %d\n", call, m, n, k, lda, ldb, ldc);
    return false;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    gemm_shape s;
    if (!gemm_sizes_ok("cublasSgemm", transa, transb, m, n, k, lda, ldb, ldc, &s))
        return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = s.a_rows, a_cols = s.a_cols, b_rows = s.b_rows, b_cols = s.b_cols;
    if (!scalars_on_host("cublasSgemm", alpha, beta))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if ((k > 0 && (!operand_ok("cublasSgemm", "A", A, a_rows, a_cols, lda) ||
                   !operand_ok("cublasSgemm", "B", B, b_rows, b_cols, ldb))) ||
        !operand_ok("cublasSgemm", "C", C, m, n, ldc))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cblas_sgemm(CblasColMajor, host_op(transa), host_op(transb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

/* A column-major bf16 operand widened to floats with the same leading dimension. */
static std::vector<float> widened_bf16(const void *p, int rows, int cols, int ld)
{
    std::vector<float> out(rows && cols ? (size_t)(cols - 1) * ld + rows : 0);
    const uint16_t *h = (const uint16_t *)p;
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            uint32_t bits = (uint32_t)h[(size_t)c * ld + r] << 16;
            memcpy(&out[(size_t)c * ld + r], &bits, sizeof bits);
        }
    return out;
}

/* A bf16 times bf16 product is exact in a float, so the host's sgemm on widened copies
 * is cuBLAS's result up to the order of the sums. */
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (Atype != CUDA_R_16BF || Btype != CUDA_R_16BF || Ctype != CUDA_R_32F || computeType != CUBLAS_COMPUTE_32F ||
        algo != CUBLAS_GEMM_DEFAULT) {
        fprintf(stderr, "cudaemu: cublasGemmEx: only bf16 x bf16 -> f32 with CUBLAS_COMPUTE_32F is emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    gemm_shape s;
    if (!gemm_sizes_ok("cublasGemmEx", transa, transb, m, n, k, lda, ldb, ldc, &s))
        return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = s.a_rows, a_cols = s.a_cols, b_rows = s.b_rows, b_cols = s.b_cols;
    const float *a = (const float *)alpha, *b = (const float *)beta;
    if (!scalars_on_host("cublasGemmEx", a, b))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if ((k > 0 && (!operand_ok("cublasGemmEx", "A", A, a_rows, a_cols, lda, sizeof(uint16_t)) ||
                   !operand_ok("cublasGemmEx", "B", B, b_rows, b_cols, ldb, sizeof(uint16_t)))) ||
        !operand_ok("cublasGemmEx", "C", C, m, n, ldc))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    std::vector<float> wa = widened_bf16(k > 0 ? A : nullptr, k > 0 ? a_rows : 0, a_cols, lda);
    std::vector<float> wb = widened_bf16(k > 0 ? B : nullptr, k > 0 ? b_rows : 0, b_cols, ldb);
    wa.resize(wa.size() + 1); /* never empty: sgemm takes the pointers even when k is 0 */
    wb.resize(wb.size() + 1);
    cblas_sgemm(CblasColMajor, host_op(transa), host_op(transb), m, n, k, *a, wa.data(), lda, wb.data(), ldb, *b,
                (float *)C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float *alpha,
                           const float *A, int lda, const float *x, int incx, const float *beta, float *y, int incy)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || incx == 0 || incy == 0) {
        fprintf(stderr, "cudaemu: cublasSgemv: invalid sizes m %d n %d lda %d incx %d incy %d\n", m, n, lda, incx,
                incy);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!scalars_on_host("cublasSgemv", alpha, beta))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    int x_len = trans == CUBLAS_OP_N ? n : m, y_len = trans == CUBLAS_OP_N ? m : n;
    if (!operand_ok("cublasSgemv", "A", A, m, n, lda) || !operand_ok("cublasSgemv", "x", x, 1, x_len, abs(incx)) ||
        !operand_ok("cublasSgemv", "y", y, 1, y_len, abs(incy)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cblas_sgemv(CblasColMajor, host_op(trans), m, n, *alpha, A, lda, x, incx, *beta, y, incy);
    return CUBLAS_STATUS_SUCCESS;
}
