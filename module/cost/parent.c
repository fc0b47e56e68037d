/* The parent a profiling starts from: its checkpoint, or its config.json alone with
 * random weights. */
#include "cost/cost_internal.h"

#include "autocompress/config_json.h"
#include "util/path.h"

#include <sys/stat.h>

/* *yes = whether dir/name exists; an error only when that path is too long. */
static ac_status exists(const char *dir, const char *name, int *yes)
{
    char path[AC_PATH_MAX];
    struct stat sb;
    ac_status st = ac_path_join(path, sizeof path, dir, name);
    *yes = st == AC_OK && stat(path, &sb) == 0;
    return st;
}

ac_status ac_load_parent_arch(const char *dir, ac_arch *arch)
{
    char path[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, dir, "config.json");
    return st == AC_OK ? ac_config_json_read(path, arch) : st;
}

ac_status ac_load_parent(const char *dir, uint64_t seed, ac_model **model)
{
    *model = NULL;
    int single = 0, sharded = 0;
    ac_status st = exists(dir, "model.safetensors", &single);
    if (st == AC_OK)
        st = exists(dir, "model.safetensors.index.json", &sharded);
    if (st != AC_OK)
        return st;
    if (single || sharded)
        return ac_model_load(dir, model);
    ac_arch arch;
    st = ac_load_parent_arch(dir, &arch);
    if (st != AC_OK)
        return st;
    st = ac_model_create(&arch, model);
    ac_arch_free(&arch);
    if (st == AC_OK)
        ac_model_init_random(*model, seed, 0.02f);
    return st;
}
