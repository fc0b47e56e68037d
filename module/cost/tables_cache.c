/* A folder of cost tables profiled here, keyed by what they depend on, so that a rerun on
 * the same machine (a quickstart, a second contract of the same space) reuses them. */
#include "cost/cost_internal.h"
#include "util/path.h"

#include "autocompress/tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a-64 of a file's bytes, read in blocks; 0 with *found 0 when it cannot be read. */
static uint64_t file_hash(const char *path, int *found)
{
    FILE *f = fopen(path, "rb");
    *found = f != NULL;
    if (!f)
        return 0;
    uint64_t h = 0;
    unsigned char block[1 << 16];
    size_t n;
    while ((n = fread(block, 1, sizeof block, f)) > 0)
        h = h * 1099511628211ULL ^ ac_fnv1a64(block, n);
    fclose(f);
    return h;
}

/* The contract as far as profiling reads it: hardware, workload and search space (not
 * its name, targets or budgets). */
static void print_profiled_part(const ac_contract *contract, FILE *out)
{
    ac_contract c = *contract;
    memset(c.name, 0, sizeof c.name);
    memset(c.source, 0, sizeof c.source);
    memset(&c.targets, 0, sizeof c.targets);
    memset(&c.ratios, 0, sizeof c.ratios);
    memset(&c.parent, 0, sizeof c.parent);
    memset(&c.budgets, 0, sizeof c.budgets);
    c.margin = 0;
    ac_contract_print(&c, out);
}

static void print_fingerprint(const ac_cost_fingerprint *f, FILE *out)
{
    fprintf(out, "%s|%d|%s|%s|%s|%s|%d|%s|%s|%.0f|%s|%s\n", f->version, f->method, f->device, f->cpu_model, f->cpu_isa,
            f->blas_core, f->threads, ac_weights_dtype_name(f->weights), f->gpu_name, f->gpu_memory_bytes,
            f->gpu_driver, f->gpu_capability);
}

ac_status ac_cost_tables_cache_path(const char *dir, const char *model_dir, const ac_contract *contract, int repeats,
                                    uint64_t seed, char *path, size_t cap)
{
    ac_cost_fingerprint here;
    ac_status st = ac_cost_fingerprint_here(contract, &here);
    if (st != AC_OK)
        return st;
    char *text = NULL;
    size_t len = 0;
    FILE *key = open_memstream(&text, &len);
    if (!key)
        return ac_fail(AC_ERR_NOMEM, "cost tables cache: out of memory");
    print_fingerprint(&here, key);
    print_profiled_part(contract, key);
    const char *parent_files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; st == AC_OK && i < sizeof parent_files / sizeof parent_files[0]; i++) {
        char file[AC_PATH_MAX];
        int found = 0;
        st = ac_path_join(file, sizeof file, model_dir, parent_files[i]);
        if (st == AC_OK) {
            uint64_t h = file_hash(file, &found);
            fprintf(key, "%s %d %016llx\n", parent_files[i], found, (unsigned long long)h);
        }
    }
    fprintf(key, "repeats %d seed %llu\n", repeats, (unsigned long long)seed);
    fclose(key);
    uint64_t h = ac_fnv1a64(text, len);
    free(text);
    if (st != AC_OK)
        return st;
    char name[AC_CONTRACT_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s-%016llx.json", contract->name[0] ? contract->name : "tables", (unsigned long long)h);
    return ac_path_join(path, cap, dir, name);
}
