/* Fingerprints: what measured a set of cost tables, against this machine and a contract. */
#include "cost/cost_internal.h"
#include "kernels/kernels.h"

#include "autocompress/host.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ac_status ac_cost_fingerprint_here(const ac_contract *contract, ac_cost_fingerprint *fp)
{
    memset(fp, 0, sizeof *fp);
    snprintf(fp->version, sizeof fp->version, "%s", AC_VERSION);
    fp->method = AC_PROFILE_METHOD;
    snprintf(fp->device, sizeof fp->device, "%s", ac_device_kind_name(contract->hardware.kind));
    ac_cpu_model_name(fp->cpu_model, sizeof fp->cpu_model);
    ac_cpu_isa(fp->cpu_isa, sizeof fp->cpu_isa);
    snprintf(fp->blas_core, sizeof fp->blas_core, "%s", ac_cpu_blas_core());
    fp->threads = ac_cpu_threads_for(contract->hardware.threads, NULL);
    fp->weights = contract->hardware.weights;
    if (contract->hardware.kind != AC_DEVICE_CUDA)
        return AC_OK;
    char why[256];
    const ac_backend *be = ac_backend_select("cuda", why, sizeof why);
    if (!be) { /* tables from a GPU can still predict here, as foreign ones */
        snprintf(fp->gpu_name, sizeof fp->gpu_name, "no GPU");
        return AC_OK;
    }
    ac_device_identity id;
    memset(&id, 0, sizeof id);
    if (be->identify)
        be->identify(&id);
    snprintf(fp->gpu_name, sizeof fp->gpu_name, "%s", id.name);
    fp->gpu_memory_bytes = id.memory_bytes;
    snprintf(fp->gpu_driver, sizeof fp->gpu_driver, "%s", id.driver);
    snprintf(fp->gpu_capability, sizeof fp->gpu_capability, "%s", id.capability);
    return AC_OK;
}

typedef struct {
    char *text;
    size_t cap, used;
    int count;
} differences;

static void note(differences *d, const char *fmt, ...)
{
    if (d->used >= d->cap)
        return;
    if (d->count++ > 0)
        d->used += (size_t)snprintf(d->text + d->used, d->cap - d->used, "; ");
    if (d->used >= d->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->text + d->used, d->cap - d->used, fmt, ap);
    va_end(ap);
    d->used += n > 0 ? (size_t)n : 0;
}

static void compare_string(differences *d, const char *field, const char *tables, const char *here)
{
    if (strcmp(tables, here))
        note(d, "%s: tables \"%s\", here \"%s\"", field, tables, here);
}

static void compare_fingerprints(differences *d, const ac_cost_fingerprint *t, const ac_cost_fingerprint *h)
{
    compare_string(d, "device", t->device, h->device);
    if (t->threads != h->threads)
        note(d, "threads: tables %d, here %d", t->threads, h->threads);
    if (t->weights != h->weights)
        note(d, "weights: tables %s, here %s", ac_weights_dtype_name(t->weights), ac_weights_dtype_name(h->weights));
    compare_string(d, "cpu_model", t->cpu_model, h->cpu_model);
    compare_string(d, "cpu_isa", t->cpu_isa, h->cpu_isa);
    compare_string(d, "blas_core", t->blas_core, h->blas_core);
    compare_string(d, "version", t->version, h->version);
    if (t->method != h->method)
        note(d, "method: tables %d, here %d (how profiling reduces its samples)", t->method, h->method);
    compare_string(d, "gpu_name", t->gpu_name, h->gpu_name);
    /* the same model of card may report a few MiB less memory on another driver */
    if (t->gpu_memory_bytes != h->gpu_memory_bytes)
        note(d, "gpu_memory: tables %.0f MiB, here %.0f MiB", t->gpu_memory_bytes / 1048576.0,
             h->gpu_memory_bytes / 1048576.0);
    compare_string(d, "gpu_driver", t->gpu_driver, h->gpu_driver);
    compare_string(d, "gpu_capability", t->gpu_capability, h->gpu_capability);
}

ac_status ac_cost_tables_check_machine(const ac_cost_tables *tables, const char *tables_path,
                                       const ac_contract *contract, int allow_foreign, char *differs, size_t cap)
{
    differences d = {differs, cap, 0, 0};
    if (cap)
        differs[0] = '\0';
    ac_cost_fingerprint here;
    ac_status st = ac_cost_fingerprint_here(contract, &here);
    if (st != AC_OK)
        return st;
    const ac_cost_tables_info *in = ac_cost_tables_get_info(tables);
    if (in->has_fingerprint)
        compare_fingerprints(&d, &in->fingerprint, &here);
    else
        note(&d, "fingerprint: tables have none (written before fingerprints), here %s on %s, %d threads",
             here.device, here.cpu_model, here.threads);
    if (d.count == 0 || allow_foreign)
        return AC_OK;
    return ac_fail(AC_ERR_INVALID,
                   "%s: these cost tables were not measured here for contract %s (%s); profile on this machine "
                   "(autocompress profile), or pass --foreign-tables to use them anyway",
                   tables_path ? tables_path : "cost tables", contract->name, differs);
}
