/* Token shards: the memory-mapped reader and the writer (format in tokens.h). */
#include "autocompress/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t bytes_per_id(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

/* ---- reader ---- */

struct ac_tokens {
    char *path;
    void *map;
    size_t map_size;
    const unsigned char *ids;
    uint64_t count;
    uint32_t vocab_size;
    uint32_t width;
};

static int32_t id_at(const ac_tokens *t, uint64_t i)
{
    const unsigned char *p = t->ids + i * t->width;
    return t->width == 2 ? (int32_t)(p[0] | p[1] << 8) : (int32_t)le32(p);
}

static ac_status check_header(ac_tokens *t, const unsigned char *h, uint64_t size)
{
    const char *path = t->path;
    if (size < AC_TOKENS_HEADER_BYTES)
        return ac_fail(AC_ERR_INVALID, "%s: truncated: %llu bytes, shorter than the %d-byte header", path,
                       (unsigned long long)size, (int)AC_TOKENS_HEADER_BYTES);
    if (memcmp(h, AC_TOKENS_MAGIC, 8))
        return ac_fail(AC_ERR_INVALID, "%s: bad magic (not an autocompress token file, which starts with \"%s\")",
                       path, AC_TOKENS_MAGIC);
    uint32_t version = le32(h + 8);
    if (version != AC_TOKENS_VERSION)
        return ac_fail(AC_ERR_INVALID, "%s: unsupported version %u (this build reads version %d)", path, version,
                       (int)AC_TOKENS_VERSION);
    t->vocab_size = le32(h + 12);
    t->count = le64(h + 16);
    t->width = le32(h + 24);
    if (t->vocab_size == 0 || t->vocab_size > (uint32_t)INT32_MAX)
        return ac_fail(AC_ERR_INVALID, "%s: vocab size %u is out of range", path, t->vocab_size);
    if (t->width != bytes_per_id(t->vocab_size))
        return ac_fail(AC_ERR_INVALID, "%s: %u bytes per id, but vocab size %u needs %u", path, t->width,
                       t->vocab_size, bytes_per_id(t->vocab_size));
    if (le32(h + 28) != 0)
        return ac_fail(AC_ERR_INVALID, "%s: reserved header field is %u, not 0", path, le32(h + 28));
    uint64_t have = (size - AC_TOKENS_HEADER_BYTES) / t->width;
    if (t->count > have)
        return ac_fail(AC_ERR_INVALID, "%s: truncated: the header says %llu tokens, the file holds %llu", path,
                       (unsigned long long)t->count, (unsigned long long)have);
    if (AC_TOKENS_HEADER_BYTES + t->count * t->width != size)
        return ac_fail(AC_ERR_INVALID,
                       "%s: count mismatch: the header says %llu tokens (%llu bytes), the file has %llu bytes", path,
                       (unsigned long long)t->count,
                       (unsigned long long)(AC_TOKENS_HEADER_BYTES + t->count * t->width), (unsigned long long)size);
    return AC_OK;
}

ac_status ac_tokens_open(const char *path, ac_tokens **out)
{
    *out = NULL;
    ac_tokens *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    }
    ac_status st = AC_OK;
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0) {
        st = ac_fail(AC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    } else if (fstat(fd, &sb) != 0) {
        st = ac_fail(AC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (sb.st_size < AC_TOKENS_HEADER_BYTES) {
        st = check_header(t, NULL, (uint64_t)sb.st_size);
    } else {
        t->map_size = (size_t)sb.st_size;
        t->map = mmap(NULL, t->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (t->map == MAP_FAILED) {
            t->map = NULL;
            st = ac_fail(AC_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, t->map_size, strerror(errno));
        } else {
            st = check_header(t, t->map, (uint64_t)sb.st_size);
            t->ids = (const unsigned char *)t->map + AC_TOKENS_HEADER_BYTES;
        }
    }
    if (fd >= 0)
        close(fd);
    for (uint64_t i = 0; st == AC_OK && i < t->count; i++) {
        int32_t id = id_at(t, i);
        if ((uint32_t)id >= t->vocab_size)
            st = ac_fail(AC_ERR_INVALID, "%s: token %llu is id %d, not below the vocab size %u", path,
                         (unsigned long long)i, (int)id, t->vocab_size);
    }
    if (st != AC_OK) {
        ac_tokens_close(t);
        return st;
    }
    *out = t;
    return AC_OK;
}

void ac_tokens_close(ac_tokens *t)
{
    if (!t)
        return;
    if (t->map)
        munmap(t->map, t->map_size);
    free(t->path);
    free(t);
}

const char *ac_tokens_path(const ac_tokens *t) { return t->path; }
uint64_t ac_tokens_count(const ac_tokens *t) { return t->count; }
uint32_t ac_tokens_vocab_size(const ac_tokens *t) { return t->vocab_size; }

int32_t ac_tokens_get(const ac_tokens *t, uint64_t i) { return i < t->count ? id_at(t, i) : -1; }

ac_status ac_tokens_copy(const ac_tokens *t, uint64_t start, size_t n, int32_t *out)
{
    if (start > t->count || n > t->count - start)
        return ac_fail(AC_ERR_INVALID, "%s: ids [%llu, %llu) run past the end (%llu tokens)", t->path,
                       (unsigned long long)start, (unsigned long long)(start + n), (unsigned long long)t->count);
    const unsigned char *p = t->ids + start * t->width;
    if (t->width == 2)
        for (size_t i = 0; i < n; i++, p += 2)
            out[i] = (int32_t)(p[0] | p[1] << 8);
    else
        for (size_t i = 0; i < n; i++, p += 4)
            out[i] = (int32_t)le32(p);
    return AC_OK;
}

/* ---- writer ---- */

enum { WRITER_BUFFER = 1 << 16 };

struct ac_tokens_writer {
    char *path, *tmp;
    FILE *f;
    uint32_t vocab_size, width;
    uint64_t count;
    unsigned char buf[WRITER_BUFFER];
    size_t used;
};

ac_status ac_tokens_writer_open(const char *path, uint32_t vocab_size, ac_tokens_writer **out)
{
    *out = NULL;
    if (vocab_size == 0 || vocab_size > (uint32_t)INT32_MAX)
        return ac_fail(AC_ERR_INVALID, "%s: vocab size %u is out of range", path, vocab_size);
    ac_tokens_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path) + 5;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(n))) {
        if (w)
            free(w->path);
        free(w);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, n, "%s.tmp", path);
    w->vocab_size = vocab_size;
    w->width = bytes_per_id(vocab_size);
    w->f = fopen(w->tmp, "wb");
    unsigned char header[AC_TOKENS_HEADER_BYTES] = {0};
    if (!w->f || fwrite(header, 1, sizeof header, w->f) != sizeof header) {
        ac_status st = ac_fail(AC_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
        ac_tokens_writer_abort(w);
        return st;
    }
    *out = w;
    return AC_OK;
}

static ac_status flush_buffer(ac_tokens_writer *w)
{
    if (w->used && fwrite(w->buf, 1, w->used, w->f) != w->used)
        return ac_fail(AC_ERR_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    w->used = 0;
    return AC_OK;
}

ac_status ac_tokens_writer_append(ac_tokens_writer *w, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= w->vocab_size)
            return ac_fail(AC_ERR_INVALID, "%s: id %d (token %llu) is outside the vocab size %u", w->path,
                           (int)ids[i], (unsigned long long)(w->count + i), w->vocab_size);
    }
    for (size_t i = 0; i < n; i++) {
        if (w->used + 4 > sizeof w->buf) {
            ac_status st = flush_buffer(w);
            if (st != AC_OK)
                return st;
        }
        uint32_t v = (uint32_t)ids[i];
        w->buf[w->used++] = (unsigned char)v;
        w->buf[w->used++] = (unsigned char)(v >> 8);
        if (w->width == 4) {
            w->buf[w->used++] = (unsigned char)(v >> 16);
            w->buf[w->used++] = (unsigned char)(v >> 24);
        }
    }
    w->count += n;
    return AC_OK;
}

uint64_t ac_tokens_writer_count(const ac_tokens_writer *w) { return w->count; }

ac_status ac_tokens_writer_close(ac_tokens_writer *w)
{
    ac_status st = flush_buffer(w);
    unsigned char h[AC_TOKENS_HEADER_BYTES] = {0};
    memcpy(h, AC_TOKENS_MAGIC, 8);
    put32(h + 8, AC_TOKENS_VERSION);
    put32(h + 12, w->vocab_size);
    put64(h + 16, w->count);
    put32(h + 24, w->width);
    if (st == AC_OK && (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->f) != sizeof h ||
                        fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        st = ac_fail(AC_ERR_IO, "%s: cannot finish: %s", w->tmp, strerror(errno));
    if (fclose(w->f) != 0 && st == AC_OK)
        st = ac_fail(AC_ERR_IO, "%s: cannot close: %s", w->tmp, strerror(errno));
    w->f = NULL;
    if (st == AC_OK && rename(w->tmp, w->path) != 0)
        st = ac_fail(AC_ERR_IO, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(errno));
    if (st != AC_OK) {
        ac_tokens_writer_abort(w);
        return st;
    }
    free(w->path);
    free(w->tmp);
    free(w);
    return AC_OK;
}

void ac_tokens_writer_abort(ac_tokens_writer *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w);
}
