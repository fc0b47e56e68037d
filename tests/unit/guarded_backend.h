/* A test backend whose "device" memory the host cannot touch: its allocations are carved
 * from one reserved range kept PROT_NONE except while one of the backend's own functions
 * runs (an op of kernels/cpu, a copy, a memset). Code that reads or writes backend memory
 * from the host, as it may not on a GPU, stops with SIGSEGV here, on a machine without
 * one; the ops themselves are the CPU's, so results equal the CPU backend's bit for bit.
 * One range in transparent huge pages makes opening and closing one mprotect each over a
 * few page-table entries (4 KiB pages made a server test many times slower than the
 * CPU's: see docs/results.md);
 * freed blocks are reused (first fit). Calls from several threads (a server's scheduler
 * and a model loading beside it) take one lock. Include in one test file; guarded_backend is
 * the table. */
#ifndef AC_TESTS_GUARDED_BACKEND_H
#define AC_TESTS_GUARDED_BACKEND_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "autocompress/probe.h"
#include "kernels/cpu/cpu_ops.h"

#define GUARDED_RESERVE ((size_t)64 << 30) /* address space, not memory (MAP_NORESERVE) */
#define GUARDED_HUGE ((size_t)2 << 20)      /* the range opens and closes in whole huge pages */
enum { GUARDED_MAX_REGIONS = 4096 };

typedef struct {
    char *p;
    size_t len;
} guarded_block;

static char *guarded_base;            /* the reserved range */
static size_t guarded_top;            /* bytes of it ever handed out */
static guarded_block guarded_regions[GUARDED_MAX_REGIONS]; /* live blocks */
static int guarded_count;
static guarded_block guarded_free_list[GUARDED_MAX_REGIONS];
static int guarded_n_free;
static int guarded_open_depth; /* nested opens keep memory open */
static pthread_mutex_t guarded_lock;
static pthread_once_t guarded_once = PTHREAD_ONCE_INIT;

static void guarded_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&guarded_lock, &a);
    pthread_mutexattr_destroy(&a);
    void *p = mmap(NULL, GUARDED_RESERVE + GUARDED_HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return;
    guarded_base = (char *)(((uintptr_t)p + GUARDED_HUGE - 1) / GUARDED_HUGE * GUARDED_HUGE);
    madvise(guarded_base, GUARDED_RESERVE, MADV_HUGEPAGE);
}

/* The bytes of the range that open and close: what was handed out, in whole huge pages. */
static size_t guarded_span(void) { return (guarded_top + GUARDED_HUGE - 1) / GUARDED_HUGE * GUARDED_HUGE; }

static void guarded_enter(void)
{
    pthread_once(&guarded_once, guarded_init);
    pthread_mutex_lock(&guarded_lock);
}

static void guarded_leave(void) { pthread_mutex_unlock(&guarded_lock); }

static void guarded_protect(char *p, size_t len, int prot)
{
    if (len && mprotect(p, len, prot) != 0)
        abort();
}

static void guarded_open(void)
{
    guarded_enter();
    if (guarded_open_depth++ == 0)
        guarded_protect(guarded_base, guarded_span(), PROT_READ | PROT_WRITE);
}

static void guarded_close(void)
{
    if (--guarded_open_depth == 0)
        guarded_protect(guarded_base, guarded_span(), PROT_NONE);
    guarded_leave();
}

/* A block of len bytes: the first free one that fits (its rest stays free), else new. */
static char *guarded_carve(size_t len)
{
    for (int i = 0; i < guarded_n_free; i++) {
        guarded_block *f = &guarded_free_list[i];
        if (f->len < len)
            continue;
        char *p = f->p;
        f->p += len;
        f->len -= len;
        if (f->len == 0)
            *f = guarded_free_list[--guarded_n_free];
        return p;
    }
    if (!guarded_base || guarded_top + len > GUARDED_RESERVE)
        return NULL;
    char *p = guarded_base + guarded_top;
    guarded_top += len;
    return p;
}

static void *guarded_alloc(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = ((bytes ? bytes : 1) + page - 1) / page * page;
    char *p = NULL;
    guarded_enter();
    if (guarded_count < GUARDED_MAX_REGIONS && (p = guarded_carve(len))) {
        if (guarded_open_depth) /* allocated inside an open call: open like the rest */
            guarded_protect(guarded_base, guarded_span(), PROT_READ | PROT_WRITE);
        guarded_regions[guarded_count++] = (guarded_block){p, len};
    }
    guarded_leave();
    return p;
}

static void guarded_free(void *p)
{
    guarded_enter();
    for (int i = 0; p && i < guarded_count; i++)
        if (guarded_regions[i].p == p) {
            guarded_block b = guarded_regions[i];
            guarded_regions[i] = guarded_regions[--guarded_count];
            if (guarded_n_free < GUARDED_MAX_REGIONS)
                guarded_free_list[guarded_n_free++] = b;
            break;
        }
    guarded_leave();
}

static void guarded_copy(void *dst, const void *src, size_t bytes, ac_copy_kind kind)
{
    guarded_open();
    ac_cpu_backend.copy(dst, src, bytes, kind);
    guarded_close();
}

static void guarded_memset_zero(void *p, size_t bytes)
{
    guarded_open();
    ac_cpu_backend.memset_zero(p, bytes);
    guarded_close();
}

static void guarded_sync(ac_kctx *ctx) { (void)ctx; }
static const char *guarded_unavailable(void) { return NULL; }
static const char *guarded_take_error(void) { return NULL; }

/* The bytes of the blocks handed out and not yet freed. */
static size_t guarded_bytes_in_use(void)
{
    size_t bytes = 0;
    guarded_enter();
    for (int i = 0; i < guarded_count; i++)
        bytes += guarded_regions[i].len;
    guarded_leave();
    return bytes;
}

#define AC_OP(name, params, args)     \
    static void guarded_##name params \
    {                                 \
        guarded_open();               \
        ac_cpu_##name args;           \
        guarded_close();              \
    }
#define AC_OP_VALUE(type, name, params, args) \
    static type guarded_##name params         \
    {                                         \
        guarded_open();                       \
        type value = ac_cpu_##name args;      \
        guarded_close();                      \
        return value;                         \
    }
#include "kernels/ops.def"

/* The CPU's ops run on the host, so the CPU probe times them. */
static const ac_backend guarded_backend = {
    .name = "guarded",
    .ssd_state_interval = AC_CPU_SSD_STATE_INTERVAL,
    .moe_token_batch = 1,
    .alloc = guarded_alloc,
    .alloc_dense = guarded_alloc,
    .free = guarded_free,
    .copy = guarded_copy,
    .memset_zero = guarded_memset_zero,
    .sync = guarded_sync,
    .unavailable = guarded_unavailable,
    .take_error = guarded_take_error,
    .bytes_in_use = guarded_bytes_in_use,
    .probe_create = ac_cpu_probe_create,
    .attention_workspace = ac_cpu_attention_workspace,
#define AC_OP(name, params, args) .name = guarded_##name,
#define AC_OP_VALUE(type, name, params, args) .name = guarded_##name,
#include "kernels/ops.def"
};

#endif
