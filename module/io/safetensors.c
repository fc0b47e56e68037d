/* Safetensors reader: maps the file read-only, validates the JSON header and exposes
 * one view per tensor, sorted by name for binary search. */
#include "autocompress/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Integers in the header are JSON numbers, which cJSON holds as doubles: exact only
 * up to 2^53, far beyond any real file. */
#define AC_JSON_MAX_INT 9007199254740992.0

typedef struct {
    ac_tensor_view view; /* first, so a view pointer is also an entry pointer */
    uint64_t begin, end; /* data_offsets, relative to the data section */
} st_entry;

typedef struct {
    char *key;
    char *value;
} st_meta;

struct ac_safetensors {
    char *path;
    void *map;
    size_t map_size;
    size_t count;
    st_entry *entries; /* sorted by name */
    size_t meta_count;
    st_meta *meta; /* sorted by key */
};

int64_t ac_tensor_view_numel(const ac_tensor_view *view)
{
    if (!view)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < view->ndim; i++)
        n *= view->shape[i];
    return n;
}

/* AC_ERR_INVALID with "PATH: " in front of the formatted message. */
static ac_status bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ac_status bad(const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    return ac_fail(AC_ERR_INVALID, "%s: %s", path, msg);
}

static void format_shape(char *buf, size_t cap, const int64_t *shape, int ndim)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

static int compare_entry_name(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return strcmp(x->view.name, y->view.name);
}

static int compare_entry_ptr_begin(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int compare_meta_key(const void *a, const void *b)
{
    const st_meta *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* A non-negative integer that a double holds exactly. */
static bool json_uint(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double d = item->valuedouble;
    if (!isfinite(d) || d < 0 || d > AC_JSON_MAX_INT || floor(d) != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static ac_status parse_metadata(ac_safetensors *st, const cJSON *meta)
{
    const char *path = st->path;
    if (!cJSON_IsObject(meta))
        return bad(path, "\"__metadata__\" is not a JSON object");
    size_t n = (size_t)cJSON_GetArraySize(meta);
    if (n == 0)
        return AC_OK;
    st->meta = calloc(n, sizeof *st->meta);
    if (!st->meta)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for metadata", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, meta)
    {
        if (!cJSON_IsString(item))
            return bad(path, "\"__metadata__\" key '%s': value is not a string", item->string);
        st_meta *m = &st->meta[st->meta_count];
        m->key = strdup(item->string);
        m->value = strdup(item->valuestring);
        st->meta_count++;
        if (!m->key || !m->value)
            return ac_fail(AC_ERR_NOMEM, "%s: out of memory for metadata", path);
    }
    qsort(st->meta, st->meta_count, sizeof *st->meta, compare_meta_key);
    for (size_t i = 1; i < st->meta_count; i++)
        if (strcmp(st->meta[i - 1].key, st->meta[i].key) == 0)
            return bad(path, "\"__metadata__\" key '%s' appears twice", st->meta[i].key);
    return AC_OK;
}

static ac_status parse_tensor(const char *path, const cJSON *item, uint64_t data_size,
                              st_entry *e)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return bad(path, "tensor '%s': entry is not a JSON object", name);

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!dtype)
        return bad(path, "tensor '%s': missing \"dtype\"", name);
    if (!cJSON_IsString(dtype))
        return bad(path, "tensor '%s': \"dtype\" is not a string", name);
    if (ac_dtype_parse(dtype->valuestring, &e->view.dtype) != AC_OK)
        return bad(path, "tensor '%s': unknown dtype '%s'", name, dtype->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!shape)
        return bad(path, "tensor '%s': missing \"shape\"", name);
    if (!cJSON_IsArray(shape))
        return bad(path, "tensor '%s': \"shape\" is not an array", name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > AC_TENSOR_MAX_DIMS)
        return bad(path, "tensor '%s': \"shape\" has %d dimensions, more than the %d supported",
                   name, ndim, AC_TENSOR_MAX_DIMS);
    e->view.ndim = ndim;
    uint64_t numel = 1;
    bool overflow = false, empty = false;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape)
    {
        if (!cJSON_IsNumber(dim))
            return bad(path, "tensor '%s': \"shape\"[%d] is not a number", name, d);
        if (dim->valuedouble < 0)
            return bad(path, "tensor '%s': \"shape\"[%d] is negative (%g)", name, d,
                       dim->valuedouble);
        uint64_t v;
        if (!json_uint(dim, &v))
            return bad(path, "tensor '%s': \"shape\"[%d] = %g is not a valid dimension", name, d,
                       dim->valuedouble);
        e->view.shape[d++] = (int64_t)v;
        if (v == 0)
            empty = true;
        else if (numel > UINT64_MAX / v)
            overflow = true;
        else
            numel *= v;
    }

    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!offsets)
        return bad(path, "tensor '%s': missing \"data_offsets\"", name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return bad(path, "tensor '%s': \"data_offsets\" is not an array [begin, end]", name);
    if (!json_uint(cJSON_GetArrayItem(offsets, 0), &e->begin) ||
        !json_uint(cJSON_GetArrayItem(offsets, 1), &e->end))
        return bad(path, "tensor '%s': \"data_offsets\" entries are not non-negative integers",
                   name);
    if (e->begin > e->end)
        return bad(path, "tensor '%s': \"data_offsets\" [%llu, %llu] has begin > end", name,
                   (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_size)
        return bad(path,
                   "tensor '%s': \"data_offsets\" [%llu, %llu] lie outside the data section "
                   "(%llu bytes; is the file truncated?)",
                   name, (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)data_size);

    char shape_text[256];
    format_shape(shape_text, sizeof shape_text, e->view.shape, ndim);
    size_t elsize = ac_dtype_size(e->view.dtype);
    uint64_t span = e->end - e->begin;
    if (empty) {
        numel = 0;
        overflow = false;
    }
    if (overflow || numel > UINT64_MAX / elsize)
        return bad(path, "tensor '%s': shape %s is too large", name, shape_text);
    uint64_t need = numel * elsize;
    if (need != span)
        return bad(path, "tensor '%s': shape %s needs %llu bytes but data_offsets span %llu",
                   name, shape_text, (unsigned long long)need, (unsigned long long)span);
    e->view.nbytes = (size_t)need;
    return AC_OK;
}

/* Everything after the file is mapped: header bounds, JSON, entries, then the checks
 * across entries (duplicates, overlap). */
static ac_status parse_header(ac_safetensors *st)
{
    const char *path = st->path;
    const unsigned char *bytes = st->map;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = (header_len << 8) | bytes[i];
    if (header_len > AC_SAFETENSORS_MAX_HEADER)
        return bad(path, "header length %llu exceeds the %llu-byte limit (corrupt file?)",
                   (unsigned long long)header_len, (unsigned long long)AC_SAFETENSORS_MAX_HEADER);
    if (header_len > st->map_size - 8)
        return bad(path, "header length %llu exceeds the %zu bytes after the length field "
                   "(truncated file?)",
                   (unsigned long long)header_len, st->map_size - 8);
    uint64_t data_size = st->map_size - 8 - header_len;
    const unsigned char *data = bytes + 8 + header_len;

    /* cJSON gets its own NUL-terminated copy, so nothing reads past the header. */
    char *text = malloc((size_t)header_len + 1);
    if (!text)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)header_len);
    memcpy(text, bytes + 8, (size_t)header_len);
    text[header_len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)header_len, &end, 0);
    ac_status rc = AC_OK;
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        rc = bad(path, "header is not valid JSON (error near byte %zu of %llu)", at,
                 (unsigned long long)header_len);
        goto done;
    }
    for (const char *p = end; p < text + header_len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = bad(path, "header has non-space bytes after the JSON object (at byte %zu)",
                     (size_t)(p - text));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        rc = bad(path, "header is not a JSON object");
        goto done;
    }

    size_t n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) n += strcmp(item->string, "__metadata__") != 0;
    st->entries = calloc(n ? n : 1, sizeof *st->entries);
    if (!st->entries) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory for %zu tensors", path, n);
        goto done;
    }
    bool seen_meta = false;
    cJSON_ArrayForEach(item, root)
    {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (seen_meta) {
                rc = bad(path, "\"__metadata__\" appears twice");
                goto done;
            }
            seen_meta = true;
            if ((rc = parse_metadata(st, item)) != AC_OK)
                goto done;
            continue;
        }
        st_entry *e = &st->entries[st->count];
        if ((rc = parse_tensor(path, item, data_size, e)) != AC_OK)
            goto done;
        e->view.name = strdup(item->string);
        if (!e->view.name) {
            rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory for tensor names", path);
            goto done;
        }
        e->view.data = data + e->begin;
        st->count++;
    }

    qsort(st->entries, st->count, sizeof *st->entries, compare_entry_name);
    for (size_t i = 1; i < st->count; i++) {
        if (strcmp(st->entries[i - 1].view.name, st->entries[i].view.name) == 0) {
            rc = bad(path, "tensor '%s' appears twice in the header", st->entries[i].view.name);
            goto done;
        }
    }

    /* Overlap: sort non-empty tensors by begin; each must start at or after the
     * furthest end so far. Empty tensors occupy no bytes and cannot overlap. */
    const st_entry **by_begin = malloc((st->count ? st->count : 1) * sizeof *by_begin);
    if (!by_begin) {
        rc = ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    size_t nonempty = 0;
    for (size_t i = 0; i < st->count; i++)
        if (st->entries[i].end > st->entries[i].begin)
            by_begin[nonempty++] = &st->entries[i];
    qsort(by_begin, nonempty, sizeof *by_begin, compare_entry_ptr_begin);
    const st_entry *furthest = NULL;
    for (size_t i = 0; i < nonempty; i++) {
        const st_entry *e = by_begin[i];
        if (furthest && e->begin < furthest->end) {
            rc = bad(path, "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                     e->view.name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     furthest->view.name, (unsigned long long)furthest->begin,
                     (unsigned long long)furthest->end);
            break;
        }
        if (!furthest || e->end > furthest->end)
            furthest = e;
    }
    free(by_begin);

done:
    cJSON_Delete(root);
    free(text);
    return rc;
}

ac_status ac_safetensors_open(const char *path, ac_safetensors **out)
{
    if (!path || !out)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_open: NULL argument");
    *out = NULL;
    ac_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    }

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ac_status rc = ac_fail(AC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        ac_safetensors_close(st);
        return rc;
    }
    struct stat sb;
    ac_status rc = AC_OK;
    if (fstat(fd, &sb) != 0)
        rc = ac_fail(AC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = ac_fail(AC_ERR_IO, "%s: not a regular file", path);
    else if (sb.st_size < 8)
        rc = bad(path, "file is %lld bytes, shorter than the 8-byte header length field",
                 (long long)sb.st_size);
    if (rc == AC_OK) {
        st->map_size = (size_t)sb.st_size;
        void *map = mmap(NULL, st->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            rc = ac_fail(AC_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, st->map_size,
                         strerror(errno));
        else
            st->map = map;
    }
    close(fd);
    if (rc == AC_OK)
        rc = parse_header(st);
    if (rc != AC_OK) {
        ac_safetensors_close(st);
        return rc;
    }
    *out = st;
    return AC_OK;
}

void ac_safetensors_close(ac_safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->count; i++)
        free((char *)st->entries[i].view.name);
    free(st->entries);
    for (size_t i = 0; i < st->meta_count; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    if (st->map)
        munmap(st->map, st->map_size);
    free(st->path);
    free(st);
}

const char *ac_safetensors_path(const ac_safetensors *st) { return st ? st->path : NULL; }

size_t ac_safetensors_count(const ac_safetensors *st) { return st ? st->count : 0; }

const ac_tensor_view *ac_safetensors_at(const ac_safetensors *st, size_t i)
{
    return st && i < st->count ? &st->entries[i].view : NULL;
}

static int compare_name_entry(const void *key, const void *elem)
{
    return strcmp(key, ((const st_entry *)elem)->view.name);
}

const ac_tensor_view *ac_safetensors_find(const ac_safetensors *st, const char *name)
{
    if (!st || !name || st->count == 0)
        return NULL;
    const st_entry *e = bsearch(name, st->entries, st->count, sizeof *st->entries,
                                compare_name_entry);
    return e ? &e->view : NULL;
}

static int compare_key_meta(const void *key, const void *elem)
{
    return strcmp(key, ((const st_meta *)elem)->key);
}

const char *ac_safetensors_metadata(const ac_safetensors *st, const char *key)
{
    if (!st || !key || st->meta_count == 0)
        return NULL;
    const st_meta *m = bsearch(key, st->meta, st->meta_count, sizeof *st->meta, compare_key_meta);
    return m ? m->value : NULL;
}

size_t ac_safetensors_metadata_count(const ac_safetensors *st) { return st ? st->meta_count : 0; }

ac_status ac_safetensors_metadata_at(const ac_safetensors *st, size_t i, const char **key,
                                     const char **value)
{
    if (!st || i >= st->meta_count)
        return ac_fail(AC_ERR_INVALID, "ac_safetensors_metadata_at: index %zu out of range", i);
    if (key)
        *key = st->meta[i].key;
    if (value)
        *value = st->meta[i].value;
    return AC_OK;
}
