/* Safetensors writer: collects tensors (by pointer) and metadata, then writes a file
 * through PATH.tmp + rename, or a sharded checkpoint directory with an index. */
#include "autocompress/safetensors.h"
#include "util/atomic_file.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AC_WRITER_MAX_DIM ((int64_t)1 << 53) /* what a JSON number holds exactly */

typedef struct {
    char *name;
    ac_dtype dtype;
    int ndim;
    int64_t shape[AC_TENSOR_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} wr_tensor;

struct ac_safetensors_writer {
    wr_tensor *tensors;
    size_t count, cap;
    size_t *slots; /* open-addressing name index: tensor index + 1, 0 when empty */
    size_t slot_cap;
    char **meta_keys, **meta_values;
    size_t meta_count, meta_cap;
};

/* One tensor's place in a file being written. */
typedef struct {
    const wr_tensor *t;
    uint64_t begin, end;
} wr_slot;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot holding `name`, or the empty slot where it would go. */
static size_t *find_slot(const ac_safetensors_writer *w, const char *name)
{
    size_t mask = w->slot_cap - 1;
    for (size_t i = (size_t)hash_name(name) & mask;; i = (i + 1) & mask) {
        size_t *s = &w->slots[i];
        if (*s == 0 || strcmp(w->tensors[*s - 1].name, name) == 0)
            return s;
    }
}

static ac_status grow_slots(ac_safetensors_writer *w)
{
    size_t cap = w->slot_cap ? w->slot_cap * 2 : 64;
    size_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
    free(w->slots);
    w->slots = slots;
    w->slot_cap = cap;
    for (size_t i = 0; i < w->count; i++)
        *find_slot(w, w->tensors[i].name) = i + 1;
    return AC_OK;
}

ac_status ac_safetensors_writer_init(ac_safetensors_writer **out)
{
    if (!out)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_init: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
    ac_status rc = grow_slots(*out);
    if (rc != AC_OK) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

void ac_safetensors_writer_free(ac_safetensors_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->count; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->slots);
    for (size_t i = 0; i < w->meta_count; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->meta_keys);
    free(w->meta_values);
    free(w);
}

size_t ac_safetensors_writer_count(const ac_safetensors_writer *w) { return w ? w->count : 0; }

ac_status ac_safetensors_writer_add(ac_safetensors_writer *w, const char *name, ac_dtype dtype,
                                    int ndim, const int64_t *shape, const void *data)
{
    if (!w || !name)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: NULL argument");
    if (!name[0])
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return ac_fail(AC_ERR_INVALID,
                       "ac_safetensors_writer_add: '__metadata__' is reserved, not a tensor name");
    if (!ac_dtype_valid(dtype))
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: tensor '%s': invalid dtype %d",
                       name, (int)dtype);
    if (ndim < 0 || ndim > AC_TENSOR_MAX_DIMS)
        return ac_fail(AC_ERR_INVALID,
                       "ac_safetensors_writer_add: tensor '%s': ndim %d outside [0, %d]", name,
                       ndim, AC_TENSOR_MAX_DIMS);
    if (ndim > 0 && !shape)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: tensor '%s': NULL shape",
                       name);
    uint64_t numel = 1;
    bool empty = false, overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || shape[i] > AC_WRITER_MAX_DIM)
            return ac_fail(AC_ERR_INVALID,
                           "ac_safetensors_writer_add: tensor '%s': dimension %d is %" PRId64,
                           name, i, shape[i]);
        uint64_t v = (uint64_t)shape[i];
        if (v == 0)
            empty = true;
        else if (numel > UINT64_MAX / v)
            overflow = true;
        else
            numel *= v;
    }
    size_t elsize = ac_dtype_size(dtype);
    if (empty)
        numel = 0;
    else if (overflow || numel > (uint64_t)AC_WRITER_MAX_DIM / elsize)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: tensor '%s': shape too large",
                       name);
    uint64_t nbytes = numel * elsize;
    if (nbytes > 0 && !data)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: tensor '%s': NULL data", name);

    if (*find_slot(w, name))
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add: duplicate tensor name '%s'",
                       name);
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        wr_tensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t)
            return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
        w->tensors = t;
        w->cap = cap;
    }
    if ((w->count + 1) * 2 > w->slot_cap) {
        ac_status rc = grow_slots(w);
        if (rc != AC_OK)
            return rc;
    }
    wr_tensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    *find_slot(w, name) = ++w->count;
    return AC_OK;
}

ac_status ac_safetensors_writer_add_view(ac_safetensors_writer *w, const ac_tensor_view *view)
{
    if (!view)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_add_view: NULL view");
    return ac_safetensors_writer_add(w, view->name, view->dtype, view->ndim, view->shape,
                                     view->data);
}

ac_status ac_safetensors_writer_set_metadata(ac_safetensors_writer *w, const char *key,
                                             const char *value)
{
    if (!w || !key || !value)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_set_metadata: NULL argument");
    char *v = strdup(value);
    if (!v)
        return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
    for (size_t i = 0; i < w->meta_count; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = v;
            return AC_OK;
        }
    }
    if (w->meta_count == w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap * 2 : 8;
        char **k = realloc(w->meta_keys, cap * sizeof *k);
        if (k)
            w->meta_keys = k;
        char **vs = k ? realloc(w->meta_values, cap * sizeof *vs) : NULL;
        if (!vs) {
            free(v);
            return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
        }
        w->meta_values = vs;
        w->meta_cap = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return ac_fail(AC_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->meta_keys[w->meta_count] = k;
    w->meta_values[w->meta_count] = v;
    w->meta_count++;
    return AC_OK;
}

/* ---- file output ---- */

static int compare_slot_data_order(const void *a, const void *b)
{
    const wr_slot *x = a, *y = b;
    size_t sx = ac_dtype_size(x->t->dtype), sy = ac_dtype_size(y->t->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int compare_slot_ptr_name(const void *a, const void *b)
{
    const wr_slot *x = *(const wr_slot *const *)a, *y = *(const wr_slot *const *)b;
    return strcmp(x->t->name, y->t->name);
}

static int compare_tensor_ptr_name(const void *a, const void *b)
{
    const wr_tensor *x = *(const wr_tensor *const *)a, *y = *(const wr_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static cJSON *raw_u64(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateRaw(buf);
}

/* The metadata object with keys in sorted order, or NULL on allocation failure. */
static cJSON *metadata_json(const ac_safetensors_writer *w)
{
    cJSON *meta = cJSON_CreateObject();
    size_t *order = malloc((w->meta_count ? w->meta_count : 1) * sizeof *order);
    if (!meta || !order) {
        cJSON_Delete(meta);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < w->meta_count; i++)
        order[i] = i;
    /* insertion sort: metadata maps are a handful of entries */
    for (size_t i = 1; i < w->meta_count; i++) {
        size_t v = order[i], j = i;
        while (j > 0 && strcmp(w->meta_keys[order[j - 1]], w->meta_keys[v]) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (size_t i = 0; i < w->meta_count; i++) {
        cJSON *s = cJSON_CreateString(w->meta_values[order[i]]);
        if (!s || !cJSON_AddItemToObject(meta, w->meta_keys[order[i]], s)) {
            cJSON_Delete(s);
            cJSON_Delete(meta);
            meta = NULL;
            break;
        }
    }
    free(order);
    return meta;
}

/* Lays out `list` (data order, offsets), builds the header and writes the file. */
static ac_status write_file(const ac_safetensors_writer *w, const wr_tensor *const *list,
                            size_t n, const char *path)
{
    ac_status rc = AC_OK;
    wr_slot *slots = calloc(n ? n : 1, sizeof *slots);
    const wr_slot **by_name = calloc(n ? n : 1, sizeof *by_name);
    ac_file_piece *pieces = calloc(n + 2, sizeof *pieces);
    cJSON *root = cJSON_CreateObject();
    char *json = NULL, *header = NULL;
    if (!slots || !by_name || !pieces || !root) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }

    /* Data order: largest element size first, so with no holes and a data section that
     * starts at a multiple of 8 every tensor lands on a multiple of its element size. */
    for (size_t i = 0; i < n; i++)
        slots[i].t = list[i];
    qsort(slots, n, sizeof *slots, compare_slot_data_order);
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        slots[i].begin = offset;
        offset += slots[i].t->nbytes;
        slots[i].end = offset;
        by_name[i] = &slots[i];
    }
    qsort(by_name, n, sizeof *by_name, compare_slot_ptr_name);

    if (w->meta_count) {
        cJSON *meta = metadata_json(w);
        if (!meta || !cJSON_AddItemToObject(root, "__metadata__", meta)) {
            cJSON_Delete(meta);
            rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const wr_slot *s = by_name[i];
        cJSON *obj = cJSON_CreateObject();
        cJSON *shape = cJSON_CreateArray();
        cJSON *offs = cJSON_CreateArray();
        bool ok = obj && shape && offs;
        ok = ok && cJSON_AddStringToObject(obj, "dtype", ac_dtype_name(s->t->dtype));
        for (int d = 0; ok && d < s->t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, raw_u64((uint64_t)s->t->shape[d]));
        ok = ok && cJSON_AddItemToObject(obj, "shape", shape);
        if (ok)
            shape = NULL;
        ok = ok && cJSON_AddItemToArray(offs, raw_u64(s->begin)) &&
             cJSON_AddItemToArray(offs, raw_u64(s->end));
        ok = ok && cJSON_AddItemToObject(obj, "data_offsets", offs);
        if (ok)
            offs = NULL;
        ok = ok && cJSON_AddItemToObject(root, s->t->name, obj);
        if (!ok) {
            cJSON_Delete(shape);
            cJSON_Delete(offs);
            cJSON_Delete(obj);
            rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory building the header", path);
            goto done;
        }
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory printing the header", path);
        goto done;
    }
    uint64_t json_len = strlen(json);
    uint64_t header_len = (json_len + 7) / 8 * 8; /* 8 + header_len stays a multiple of 8 */
    header = malloc(8 + (size_t)header_len);
    if (!header) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < 8; i++)
        header[i] = (char)((header_len >> (8 * i)) & 0xff);
    memcpy(header + 8, json, (size_t)json_len);
    memset(header + 8 + json_len, ' ', (size_t)(header_len - json_len));

    pieces[0].data = header;
    pieces[0].nbytes = 8 + header_len;
    for (size_t i = 0; i < n; i++) {
        pieces[i + 1].data = slots[i].t->data;
        pieces[i + 1].nbytes = slots[i].t->nbytes;
    }
    rc = ac_write_file_atomically(path, pieces, n + 1);

done:
    cJSON_Delete(root);
    free(json);
    free(header);
    free(pieces);
    free(by_name);
    free(slots);
    return rc;
}

static const wr_tensor **sorted_tensors(const ac_safetensors_writer *w)
{
    const wr_tensor **list = malloc((w->count ? w->count : 1) * sizeof *list);
    if (!list)
        return NULL;
    for (size_t i = 0; i < w->count; i++)
        list[i] = &w->tensors[i];
    qsort(list, w->count, sizeof *list, compare_tensor_ptr_name);
    return list;
}

ac_status ac_safetensors_writer_write(const ac_safetensors_writer *w, const char *path)
{
    if (!w || !path)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_write: NULL argument");
    const wr_tensor **list = sorted_tensors(w);
    if (!list)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    ac_status rc = write_file(w, list, w->count, path);
    free(list);
    return rc;
}

/* Removes `name` in `dir` if present. */
static ac_status remove_stale(const char *dir, const char *name)
{
    char p[AC_PATH_MAX];
    ac_status rc = ac_path_join(p, sizeof p, dir, name);
    if (rc == AC_OK && unlink(p) != 0 && errno != ENOENT)
        rc = ac_fail(AC_ERR_IO, "%s: cannot remove the stale file: %s", p, strerror(errno));
    return rc;
}

ac_status ac_safetensors_writer_write_dir(const ac_safetensors_writer *w, const char *dir,
                                          uint64_t max_shard_bytes)
{
    if (!w || !dir)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_writer_write_dir: NULL argument");
    const wr_tensor **list = sorted_tensors(w);
    if (!list)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
    uint64_t total = 0;
    for (size_t i = 0; i < w->count; i++)
        total += list[i]->nbytes;

    ac_status rc = AC_OK;
    char path[AC_PATH_MAX], *json = NULL;
    size_t *first = NULL;
    cJSON *index = NULL;
    if (max_shard_bytes == 0 || total <= max_shard_bytes) {
        if ((rc = ac_path_join(path, sizeof path, dir, "model.safetensors")) != AC_OK)
            goto done;
        rc = write_file(w, list, w->count, path);
        if (rc == AC_OK)
            rc = remove_stale(dir, "model.safetensors.index.json");
        goto done;
    }

    /* Greedy split in name order: first[k] is the first tensor of shard k. */
    first = malloc((w->count + 1) * sizeof *first);
    if (!first) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    size_t nshards = 0;
    uint64_t fill = 0;
    for (size_t i = 0; i < w->count; i++) {
        if (nshards == 0 || (fill > 0 && fill + list[i]->nbytes > max_shard_bytes)) {
            first[nshards++] = i;
            fill = 0;
        }
        fill += list[i]->nbytes;
    }
    first[nshards] = w->count;

    index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    if (!meta || !map || !cJSON_AddItemToObject(meta, "total_size", raw_u64(total))) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (size_t k = 0; k < nshards && rc == AC_OK; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, nshards);
        if ((rc = ac_path_join(path, sizeof path, dir, name)) != AC_OK)
            break;
        rc = write_file(w, list + first[k], first[k + 1] - first[k], path);
        for (size_t i = first[k]; i < first[k + 1] && rc == AC_OK; i++)
            if (!cJSON_AddStringToObject(map, list[i]->name, name))
                rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
    }
    if (rc != AC_OK)
        goto done;
    if ((rc = ac_path_join(path, sizeof path, dir, "model.safetensors.index.json")) != AC_OK)
        goto done;
    json = cJSON_Print(index);
    if (!json) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    ac_file_piece piece = {json, strlen(json)};
    rc = ac_write_file_atomically(path, &piece, 1);
    if (rc == AC_OK)
        rc = remove_stale(dir, "model.safetensors");

done:
    cJSON_Delete(index);
    free(json);
    free(first);
    free(list);
    return rc;
}
