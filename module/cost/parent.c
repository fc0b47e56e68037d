/* The parent a profiling starts from: its checkpoint, or its config.json alone with
 * random weights. */
#include "cost/cost_internal.h"

#include "autocompress/config_json.h"

#include <stdio.h>
#include <sys/stat.h>

static int exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

ac_status ac_load_parent_arch(const char *dir, ac_arch *arch)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return ac_config_json_read(path, arch);
}

ac_status ac_load_parent(const char *dir, uint64_t seed, ac_model **model)
{
    *model = NULL;
    if (exists(dir, "model.safetensors") || exists(dir, "model.safetensors.index.json"))
        return ac_model_load(dir, model);
    ac_arch arch;
    ac_status st = ac_load_parent_arch(dir, &arch);
    if (st != AC_OK)
        return st;
    st = ac_model_create(&arch, model);
    ac_arch_free(&arch);
    if (st == AC_OK)
        ac_model_init_random(*model, seed, 0.02f);
    return st;
}
