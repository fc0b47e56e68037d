/* Checkpoint directories: one model.safetensors, or shards listed by
 * model.safetensors.index.json, behind a single name lookup. */
#include "autocompress/safetensors.h"

#include "util/json_util.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AC_INDEX_NAME "model.safetensors.index.json"
#define AC_SINGLE_NAME "model.safetensors"

struct ac_safetensors_set {
    char *dir;
    size_t nshards;
    ac_safetensors **shards; /* in file name order */
    size_t count;
    const ac_tensor_view **views; /* in tensor name order */
};

/* One weight_map entry. */
typedef struct {
    const char *tensor;
    const char *shard;
    size_t shard_index;
} set_mapping;

static bool is_regular_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int compare_cstr_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int compare_mapping_tensor(const void *a, const void *b)
{
    return strcmp(((const set_mapping *)a)->tensor, ((const set_mapping *)b)->tensor);
}

static int compare_tensor_mapping(const void *key, const void *elem)
{
    return strcmp(key, ((const set_mapping *)elem)->tensor);
}

static int compare_name_view_ptr(const void *key, const void *elem)
{
    return strcmp(key, (*(const ac_tensor_view *const *)elem)->name);
}

void ac_safetensors_set_close(ac_safetensors_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->nshards; i++)
        ac_safetensors_close(set->shards[i]);
    free(set->shards);
    free(set->views);
    free(set->dir);
    free(set);
}

static ac_status open_single(ac_safetensors_set *set, const char *path)
{
    set->shards = calloc(1, sizeof *set->shards);
    if (!set->shards)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    ac_status rc = ac_safetensors_open(path, &set->shards[0]);
    if (rc != AC_OK)
        return rc;
    set->nshards = 1;
    size_t n = ac_safetensors_count(set->shards[0]);
    set->views = calloc(n ? n : 1, sizeof *set->views);
    if (!set->views)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        set->views[i] = ac_safetensors_at(set->shards[0], i); /* already in name order */
    set->count = n;
    return AC_OK;
}

/* A shard name must stay inside the checkpoint directory. */
static bool safe_shard_name(const char *name)
{
    if (!name[0] || name[0] == '/')
        return false;
    for (const char *p = name; *p;) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return true;
}

static ac_status open_index(ac_safetensors_set *set, const char *index_path)
{
    char *text = NULL;
    size_t len = 0;
    ac_status rc = ac_read_text_file(index_path, AC_SAFETENSORS_MAX_HEADER, &text, &len);
    if (rc != AC_OK)
        return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    set_mapping *maps = NULL;
    const char **names = NULL;
    size_t nmaps = 0;
    if (!root) {
        rc = ac_fail(AC_ERR_INVALID, "%s: not valid JSON", index_path);
        goto done;
    }
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(map)) {
        rc = ac_fail(AC_ERR_INVALID, "%s: missing the \"weight_map\" object", index_path);
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(map);
    maps = calloc(n ? n : 1, sizeof *maps);
    names = calloc(n ? n : 1, sizeof *names);
    if (!maps || !names) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, map)
    {
        if (!cJSON_IsString(item)) {
            rc = ac_fail(AC_ERR_INVALID, "%s: \"weight_map\" entry for tensor '%s' is not a string",
                         index_path, item->string);
            goto done;
        }
        if (!safe_shard_name(item->valuestring)) {
            rc = ac_fail(AC_ERR_INVALID,
                         "%s: tensor '%s': shard name '%s' is not a file inside the directory",
                         index_path, item->string, item->valuestring);
            goto done;
        }
        maps[nmaps].tensor = item->string;
        maps[nmaps].shard = item->valuestring;
        names[nmaps] = item->valuestring;
        nmaps++;
    }
    if (nmaps == 0) {
        rc = ac_fail(AC_ERR_INVALID, "%s: \"weight_map\" is empty", index_path);
        goto done;
    }
    qsort(maps, nmaps, sizeof *maps, compare_mapping_tensor);
    for (size_t i = 1; i < nmaps; i++) {
        if (strcmp(maps[i - 1].tensor, maps[i].tensor) == 0) {
            rc = ac_fail(AC_ERR_INVALID, "%s: tensor '%s' appears twice in \"weight_map\"",
                         index_path, maps[i].tensor);
            goto done;
        }
    }

    /* Unique shard names, each opened once. */
    qsort(names, nmaps, sizeof *names, compare_cstr_ptr);
    size_t nshards = 0;
    for (size_t i = 0; i < nmaps; i++)
        if (nshards == 0 || strcmp(names[nshards - 1], names[i]) != 0)
            names[nshards++] = names[i];
    set->shards = calloc(nshards, sizeof *set->shards);
    if (!set->shards) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    for (size_t k = 0; k < nshards; k++) {
        char path[AC_PATH_MAX];
        rc = ac_path_join(path, sizeof path, set->dir, names[k]);
        if (rc == AC_OK)
            rc = ac_safetensors_open(path, &set->shards[k]);
        if (rc != AC_OK) {
            rc = ac_fail_context(rc, "%s: shard '%s'", index_path, names[k]);
            goto done;
        }
        set->nshards++;
    }

    /* Every mapping is found in its shard, and every shard tensor is mapped there. */
    set->views = calloc(nmaps, sizeof *set->views);
    if (!set->views) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    for (size_t i = 0; i < nmaps; i++) {
        const char **hit = bsearch(&maps[i].shard, names, nshards, sizeof *names, compare_cstr_ptr);
        size_t k = (size_t)(hit - names);
        maps[i].shard_index = k;
        const ac_tensor_view *v = ac_safetensors_find(set->shards[k], maps[i].tensor);
        if (!v) {
            rc = ac_fail(AC_ERR_INVALID,
                         "%s: tensor '%s' is mapped to shard '%s', which does not contain it",
                         index_path, maps[i].tensor, maps[i].shard);
            goto done;
        }
        set->views[i] = v;
    }
    for (size_t k = 0; k < nshards; k++) {
        size_t count = ac_safetensors_count(set->shards[k]);
        for (size_t j = 0; j < count; j++) {
            const char *tname = ac_safetensors_at(set->shards[k], j)->name;
            const set_mapping *m =
                bsearch(tname, maps, nmaps, sizeof *maps, compare_tensor_mapping);
            if (!m) {
                rc = ac_fail(AC_ERR_INVALID,
                             "%s: shard '%s' holds tensor '%s', which \"weight_map\" does not list",
                             index_path, names[k], tname);
                goto done;
            }
            if (m->shard_index != k) {
                rc = ac_fail(AC_ERR_INVALID,
                             "%s: tensor '%s' is in shard '%s' as well as in its mapped shard '%s'",
                             index_path, tname, names[k], m->shard);
                goto done;
            }
        }
    }
    set->count = nmaps; /* views[] follows maps[], which is in tensor name order */

done:
    free(names);
    free(maps);
    cJSON_Delete(root);
    free(text);
    return rc;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* No index and no model.safetensors: the only *.safetensors file, if there is one. */
static ac_status open_only_file(ac_safetensors_set *set)
{
    const char *dir = set->dir;
    DIR *d = opendir(dir);
    if (!d)
        return ac_fail(AC_ERR_IO, "%s: cannot read the checkpoint directory: %s", dir,
                       strerror(errno));
    char found[AC_PATH_MAX], path[AC_PATH_MAX];
    size_t n = 0;
    char listed[256] = "";
    ac_status rc = AC_OK;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (!has_suffix(ent->d_name, ".safetensors"))
            continue;
        if ((rc = ac_path_join(path, sizeof path, dir, ent->d_name)) != AC_OK)
            break;
        if (!is_regular_file(path))
            continue;
        size_t used = strlen(listed);
        if (used + strlen(ent->d_name) + 8 < sizeof listed)
            snprintf(listed + used, sizeof listed - used, "%s%s", n ? ", " : "", ent->d_name);
        n++;
        memcpy(found, path, strlen(path) + 1);
    }
    closedir(d);
    if (rc == AC_OK && n == 0)
        rc = ac_fail(AC_ERR_INVALID,
                     "%s: no " AC_INDEX_NAME ", " AC_SINGLE_NAME " or other *.safetensors file",
                     dir);
    else if (rc == AC_OK && n > 1)
        rc = ac_fail(AC_ERR_INVALID,
                     "%s: no " AC_INDEX_NAME " and %zu *.safetensors files (%s); cannot tell "
                     "which to load",
                     dir, n, listed);
    return rc == AC_OK ? open_single(set, found) : rc;
}

ac_status ac_safetensors_index_open(const char *dir, ac_safetensors_set **out)
{
    if (!dir || !out)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_index_open: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return ac_fail(AC_ERR_IO, "%s: cannot open the checkpoint directory: %s", dir,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return ac_fail(AC_ERR_IO, "%s: not a directory", dir);

    ac_safetensors_set *set = calloc(1, sizeof *set);
    if (!set || !(set->dir = strdup(dir))) {
        free(set);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
    }
    char index[AC_PATH_MAX], single[AC_PATH_MAX];
    ac_status rc = ac_path_join(index, sizeof index, dir, AC_INDEX_NAME);
    if (rc == AC_OK)
        rc = ac_path_join(single, sizeof single, dir, AC_SINGLE_NAME);
    if (rc == AC_OK && is_regular_file(index))
        rc = open_index(set, index);
    else if (rc == AC_OK && is_regular_file(single))
        rc = open_single(set, single);
    else if (rc == AC_OK)
        rc = open_only_file(set);
    if (rc != AC_OK) {
        ac_safetensors_set_close(set);
        return rc;
    }
    *out = set;
    return AC_OK;
}

size_t ac_safetensors_set_count(const ac_safetensors_set *set) { return set ? set->count : 0; }

const ac_tensor_view *ac_safetensors_set_at(const ac_safetensors_set *set, size_t i)
{
    return set && i < set->count ? set->views[i] : NULL;
}

const ac_tensor_view *ac_safetensors_set_find(const ac_safetensors_set *set, const char *name)
{
    if (!set || !name || set->count == 0)
        return NULL;
    const ac_tensor_view *const *v =
        bsearch(name, set->views, set->count, sizeof *set->views, compare_name_view_ptr);
    return v ? *v : NULL;
}

size_t ac_safetensors_set_shard_count(const ac_safetensors_set *set)
{
    return set ? set->nshards : 0;
}

const ac_safetensors *ac_safetensors_set_shard(const ac_safetensors_set *set, size_t i)
{
    return set && i < set->nshards ? set->shards[i] : NULL;
}

const char *ac_safetensors_set_metadata(const ac_safetensors_set *set, const char *key)
{
    if (!set)
        return NULL;
    for (size_t i = 0; i < set->nshards; i++) {
        const char *v = ac_safetensors_metadata(set->shards[i], key);
        if (v)
            return v;
    }
    return NULL;
}
