/* Up-front checks of the inputs a command will need (autocompress/inputs.h). */
#include "autocompress/inputs.h"

#include "autocompress/config_json.h"
#include "autocompress/cost.h"
#include "autocompress/safetensors.h"
#include "autocompress/tokens.h"
#include "kernels/kernels.h"
#include "util/path.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Prefixes the current message with "FLAG PATH: ", or with "FLAG " alone when the
 * message starts with a path under PATH already. */
static ac_status named(ac_status st, const char *flag, const char *path)
{
    if (st == AC_OK)
        return st;
    if (!strncmp(ac_error_message(), path, strlen(path))) {
        char message[1024];
        snprintf(message, sizeof message, "%s", ac_error_message());
        return ac_fail(st, "%s %s", flag, message);
    }
    return ac_fail_context(st, "%s %s", flag, path);
}

ac_status ac_input_file(const char *flag, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: %s", flag, path, errno == ENOENT ? "no such file" : strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s %s: is a directory, not a file", flag, path);
    if (access(path, R_OK) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: cannot be read: %s", flag, path, strerror(errno));
    return AC_OK;
}

static ac_status input_dir(const char *flag, const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: %s", flag, dir, errno == ENOENT ? "no such directory" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s %s: not a directory", flag, dir);
    return AC_OK;
}

/* Cuts `probe` at its last '/': its directory ("." for a relative name, "/" for the
 * root's entries). */
static void cut_last_name(char *probe, size_t size)
{
    char *slash = strrchr(probe, '/');
    while (slash && slash > probe && slash[-1] == '/')
        slash--;
    if (!slash)
        snprintf(probe, size, ".");
    else if (slash == probe)
        probe[1] = '\0';
    else
        *slash = '\0';
}

/* `dir` (the path itself, or an ancestor of it) must be a directory that takes new
 * entries. */
static ac_status writable(const char *flag, const char *path, const char *dir, const struct stat *sb)
{
    if (!S_ISDIR(sb->st_mode))
        return ac_fail(AC_ERR_IO, "%s %s: cannot be created: %s is not a directory", flag, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: cannot be written: %s: %s", flag, path, dir, strerror(errno));
    return AC_OK;
}

ac_status ac_input_out_dir(const char *flag, const char *dir)
{
    if (!*dir)
        return ac_fail(AC_ERR_INVALID, "%s: an empty path", flag);
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s %s: exists and is not a directory", flag, dir);
    /* created with its missing parents (mkdir -p): the longest existing prefix decides */
    char probe[AC_PATH_MAX];
    ac_status st = ac_path_suffixed(probe, sizeof probe, dir, "");
    if (st != AC_OK)
        return named(st, flag, dir);
    while (stat(probe, &sb) != 0)
        cut_last_name(probe, sizeof probe);
    return writable(flag, dir, probe, &sb);
}

ac_status ac_input_out_file(const char *flag, const char *path)
{
    if (!*path)
        return ac_fail(AC_ERR_INVALID, "%s: an empty path", flag);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s %s: is a directory, not a file", flag, path);
    /* written as PATH.tmp and renamed, into a directory that must be there */
    char dir[AC_PATH_MAX];
    ac_status st = ac_path_suffixed(dir, sizeof dir, path, "");
    if (st != AC_OK)
        return named(st, flag, path);
    cut_last_name(dir, sizeof dir);
    if (stat(dir, &sb) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: cannot be created: %s: %s", flag, path, dir,
                       errno == ENOENT ? "no such directory" : strerror(errno));
    return writable(flag, path, dir, &sb);
}

ac_status ac_input_model(const char *flag, const char *dir, int weights, ac_arch *arch)
{
    ac_status st = input_dir(flag, dir);
    char path[AC_PATH_MAX];
    if (st == AC_OK)
        st = named(ac_path_join(path, sizeof path, dir, "config.json"), flag, dir);
    ac_arch parsed = {0};
    if (st == AC_OK)
        st = named(ac_config_json_read(path, &parsed), flag, dir);
    if (st == AC_OK && weights) {
        ac_safetensors_set *set = NULL;
        st = named(ac_safetensors_index_open(dir, &set), flag, dir);
        ac_safetensors_set_close(set);
    }
    if (st == AC_OK && arch)
        *arch = parsed;
    else
        ac_arch_free(&parsed);
    return st;
}

ac_status ac_input_contract(const char *flag, const char *path, ac_contract *contract)
{
    ac_status st = ac_input_file(flag, path);
    ac_contract parsed;
    if (st == AC_OK)
        st = named(ac_contract_load(path, &parsed), flag, path);
    if (st == AC_OK && contract)
        *contract = parsed;
    return st;
}

ac_status ac_input_tables(const char *flag, const char *path, const ac_arch *parent, const ac_contract *contract,
                          int allow_foreign)
{
    ac_cost_tables *tables = NULL;
    ac_status st = ac_input_file(flag, path);
    if (st == AC_OK)
        st = named(ac_cost_tables_read(path, &tables), flag, path);
    if (st == AC_OK && parent && contract) {
        ac_cost_model *model = NULL;
        st = named(ac_cost_model_create(tables, parent, contract, &model), flag, path);
        ac_cost_model_free(model);
    }
    char differs[1024];
    if (st == AC_OK && contract)
        st = named(ac_cost_tables_check_machine(tables, path, contract, allow_foreign, differs, sizeof differs), flag,
                   path);
    ac_cost_tables_free(tables);
    return st;
}

ac_status ac_input_device(const char *flag, const char *device)
{
    char why[256];
    if (device && !ac_backend_select(device, why, sizeof why))
        return ac_fail(AC_ERR_UNSUPPORTED, "%s: %s", flag, why);
    return AC_OK;
}

static ac_status input_shard(const char *flag, const char *dir, const char *name, int vocab)
{
    char path[AC_PATH_MAX];
    ac_status st = named(ac_path_join(path, sizeof path, dir, name), flag, dir);
    struct stat sb;
    if (st == AC_OK && stat(path, &sb) != 0)
        return ac_fail(AC_ERR_IO, "%s %s: no %s (token shards come from autocompress tokenize)", flag, dir, name);
    ac_tokens *tokens = NULL;
    if (st == AC_OK)
        st = named(ac_tokens_open(path, &tokens), flag, dir);
    if (st == AC_OK && vocab > 0 && ac_tokens_vocab_size(tokens) > (uint32_t)vocab)
        st = ac_fail(AC_ERR_INVALID, "%s %s: %s has a token vocabulary of %u, larger than the model's %d", flag, dir,
                     name, ac_tokens_vocab_size(tokens), vocab);
    ac_tokens_close(tokens);
    return st;
}

ac_status ac_input_shards(const char *flag, const char *dir, int shards, int vocab)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 && errno == ENOENT) {
        const char *sep = dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/";
        if (shards == AC_SHARD_VAL)
            return ac_fail(AC_ERR_IO, "%s %s: no such directory (for %s%sval.bin from autocompress tokenize)", flag,
                           dir, dir, sep);
        return ac_fail(AC_ERR_IO, "%s %s: no such directory (for %s%strain.bin%s from autocompress tokenize)", flag,
                       dir, dir, sep, shards & AC_SHARD_VAL ? " and val.bin" : "");
    }
    ac_status st = input_dir(flag, dir);
    if (st == AC_OK && (shards & AC_SHARD_TRAIN))
        st = input_shard(flag, dir, "train.bin", vocab);
    if (st == AC_OK && (shards & AC_SHARD_VAL))
        st = input_shard(flag, dir, "val.bin", vocab);
    return st;
}
