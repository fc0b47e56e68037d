/* Training checkpoints: the model in the Hugging Face layout plus the optimizer's moments
 * and the loop's position, in one directory replaced atomically (write DIR.tmp, rename). */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/safetensors.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "util/path.h"

static const char *const checkpoint_files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"};

static int dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Removes a checkpoint directory: only the files a checkpoint holds, then the folder. */
static void remove_checkpoint_dir(const char *dir)
{
    char path[AC_PATH_MAX];
    for (size_t i = 0; i < sizeof checkpoint_files / sizeof *checkpoint_files; i++)
        if (ac_path_join(path, sizeof path, dir, checkpoint_files[i]) == AC_OK)
            unlink(path);
    rmdir(dir);
}

/* The moments in host memory: themselves on the CPU, a copy from a device (*staged, for
 * the caller to free). */
static float *moments_on_host(const ac_model *model, ac_adamw *opt, size_t *n, float **staged)
{
    float *m = ac_adamw_moments(opt, n);
    *staged = NULL;
    if (!model->backend)
        return m;
    *staged = malloc(2 * *n * sizeof(float) + 1);
    if (*staged)
        model->backend->copy(*staged, m, 2 * *n * sizeof(float), AC_COPY_DEVICE_TO_HOST);
    return *staged;
}

static ac_status write_optimizer(const char *path, const ac_model *model, ac_adamw *opt)
{
    size_t n;
    float *staged, *m = moments_on_host(model, opt, &n, &staged);
    ac_safetensors_writer *w;
    ac_status st = ac_safetensors_writer_init(&w);
    char (*names)[112] = calloc(2 * model->n_params, sizeof *names);
    if (!names || !m)
        st = ac_fail(AC_ERR_NOMEM, "checkpoint: out of memory");
    for (size_t i = 0; st == AC_OK && i < model->n_params; i++) {
        const ac_param *p = &model->params[i];
        size_t offset = (size_t)(p->data - model->arena);
        snprintf(names[2 * i], sizeof names[0], "m.%s", p->name);
        snprintf(names[2 * i + 1], sizeof names[0], "v.%s", p->name);
        st = ac_safetensors_writer_add(w, names[2 * i], AC_DTYPE_F32, p->ndim, p->shape, m + offset);
        if (st == AC_OK)
            st = ac_safetensors_writer_add(w, names[2 * i + 1], AC_DTYPE_F32, p->ndim, p->shape, m + n + offset);
    }
    if (st == AC_OK)
        st = ac_safetensors_writer_write(w, path);
    ac_safetensors_writer_free(w);
    free(names);
    free(staged);
    return st;
}

static ac_status write_state(const char *path, const ac_train_state *state)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_fail(AC_ERR_NOMEM, "checkpoint: out of memory");
    cJSON_AddNumberToObject(root, "step", state->step);
    cJSON_AddNumberToObject(root, "tokens", (double)state->tokens);
    cJSON_AddStringToObject(root, "run", state->run);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return ac_fail(AC_ERR_NOMEM, "checkpoint: out of memory");
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    ok = (f && fclose(f) == 0) && ok;
    free(text);
    return ok ? AC_OK : ac_fail(AC_ERR_IO, "%s: cannot write", path);
}

ac_status ac_checkpoint_save(const char *dir, const ac_model *model, ac_adamw *opt, const ac_train_state *state)
{
    char tmp[4096], old[4096], path[4096];
    ac_status st = ac_path_suffixed(tmp, sizeof tmp, dir, ".tmp");
    if (st == AC_OK)
        st = ac_path_suffixed(old, sizeof old, dir, ".old");
    if (st != AC_OK)
        return st;
    remove_checkpoint_dir(tmp);
    st = ac_model_save(model, tmp, AC_DTYPE_F32);
    if (st == AC_OK && (st = ac_path_join(path, sizeof path, tmp, "optimizer.safetensors")) == AC_OK)
        st = write_optimizer(path, model, opt);
    if (st == AC_OK && (st = ac_path_join(path, sizeof path, tmp, "state.json")) == AC_OK)
        st = write_state(path, state);
    if (st != AC_OK) {
        remove_checkpoint_dir(tmp); /* a full disk leaves no half-written checkpoint behind */
        return ac_fail_context(st, "checkpoint %s", dir);
    }
    /* DIR -> DIR.old, DIR.tmp -> DIR: at every moment one complete checkpoint exists */
    remove_checkpoint_dir(old);
    if (dir_exists(dir) && rename(dir, old) != 0)
        return ac_fail(AC_ERR_IO, "checkpoint: cannot move %s aside: %s", dir, strerror(errno));
    if (rename(tmp, dir) != 0)
        return ac_fail(AC_ERR_IO, "checkpoint: cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    remove_checkpoint_dir(old);
    return AC_OK;
}

static ac_status read_state(const char *path, ac_train_state *state)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open", path);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(root, "run");
    ac_status st = AC_OK;
    if (!cJSON_IsNumber(step) || step->valuedouble < 0 || !cJSON_IsNumber(tokens) || !cJSON_IsString(run))
        st = ac_fail(AC_ERR_INVALID, "%s: needs a non-negative \"step\", \"tokens\" and a \"run\" string", path);
    else {
        state->step = step->valueint;
        state->tokens = (int64_t)tokens->valuedouble;
        snprintf(state->run, sizeof state->run, "%s", run->valuestring);
    }
    cJSON_Delete(root);
    return st;
}

static ac_status read_optimizer(const char *path, const ac_model *model, ac_adamw *opt)
{
    ac_safetensors *file;
    ac_status st = ac_safetensors_open(path, &file);
    if (st != AC_OK)
        return st;
    size_t n;
    float *staged, *m = moments_on_host(model, opt, &n, &staged);
    if (!m)
        st = ac_fail(AC_ERR_NOMEM, "checkpoint: out of memory");
    for (size_t i = 0; st == AC_OK && i < model->n_params; i++) {
        const ac_param *p = &model->params[i];
        size_t offset = (size_t)(p->data - model->arena);
        for (int which = 0; st == AC_OK && which < 2; which++) {
            char name[112];
            snprintf(name, sizeof name, "%c.%s", which ? 'v' : 'm', p->name);
            const ac_tensor_view *t = ac_safetensors_find(file, name);
            if (!t || t->dtype != AC_DTYPE_F32 || (size_t)ac_tensor_view_numel(t) != p->count)
                st = ac_fail(AC_ERR_INVALID, "%s: tensor '%s' is missing or not F32 of %zu values", path, name, p->count);
            else
                memcpy(m + (which ? n : 0) + offset, t->data, p->count * sizeof(float));
        }
    }
    if (st == AC_OK && staged)
        model->backend->copy(ac_adamw_moments(opt, &n), staged, 2 * n * sizeof(float), AC_COPY_HOST_TO_DEVICE);
    free(staged);
    ac_safetensors_close(file);
    return st;
}

ac_status ac_checkpoint_find(const char *dir, char *found, size_t size)
{
    char old[4096], state[4096];
    ac_status st = ac_path_suffixed(old, sizeof old, dir, ".old");
    if (st != AC_OK)
        return st;
    const char *candidates[2] = {dir, old};
    for (int i = 0; i < 2; i++) {
        if (ac_path_join(state, sizeof state, candidates[i], "state.json") == AC_OK && access(state, R_OK) == 0) {
            snprintf(found, size, "%s", candidates[i]);
            return AC_OK;
        }
    }
    return ac_fail(AC_ERR_IO, "%s: no checkpoint", dir);
}

ac_status ac_checkpoint_load(const char *dir, ac_model **model, ac_train_state *state)
{
    char path[4096];
    ac_status st = ac_path_join(path, sizeof path, dir, "state.json");
    if (st == AC_OK)
        st = read_state(path, state);
    return st == AC_OK ? ac_model_load(dir, model) : st;
}

ac_status ac_checkpoint_load_optimizer(const char *dir, const ac_model *model, ac_adamw *opt)
{
    char path[4096];
    ac_status st = ac_path_join(path, sizeof path, dir, "optimizer.safetensors");
    return st == AC_OK ? read_optimizer(path, model, opt) : st;
}
