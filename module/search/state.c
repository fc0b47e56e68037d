/* The search's resumable state: one file, written through the atomic writer, holding a
 * small header, the router logits and their AdamW moments. */
#include "search/search_loop.h"

#include "io/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC "ACSEARCH"

typedef struct {
    char magic[8];
    int32_t version, n;
    int32_t step, pad;
    int64_t tokens;
    char fingerprint[AC_SEARCH_FINGERPRINT];
} state_header;

static void state_path(const char *dir, char *buf, size_t size) { snprintf(buf, size, "%s/search_state.bin", dir); }

ac_status ac_search_state_save(const char *dir, const ac_search_state *state, const float *logits, const float *m,
                               const float *v, int n)
{
    state_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.version = 1;
    h.n = n;
    h.step = state->step;
    h.tokens = state->tokens;
    memcpy(h.fingerprint, state->fingerprint, sizeof h.fingerprint);
    h.fingerprint[sizeof h.fingerprint - 1] = '\0';
    uint64_t bytes = (uint64_t)n * sizeof(float);
    ac_file_piece pieces[4] = {{&h, sizeof h}, {logits, bytes}, {m, bytes}, {v, bytes}};
    char path[4096];
    state_path(dir, path, sizeof path);
    return ac_write_file_atomically(path, pieces, 4);
}

ac_status ac_search_state_load(const char *dir, ac_search_state *state, float *logits, float *m, float *v, int n,
                               int *found)
{
    char path[4096];
    state_path(dir, path, sizeof path);
    *found = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? AC_OK : ac_fail(AC_ERR_IO, "search: cannot read %s: %s", path, strerror(errno));
    state_header h;
    size_t bytes = (size_t)n * sizeof(float);
    ac_status st = AC_OK;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, STATE_MAGIC, 8) || h.version != 1)
        st = ac_fail(AC_ERR_INVALID, "search: %s is not a search state", path);
    else if (h.n != n)
        st = ac_fail(AC_ERR_INVALID, "search: %s holds %d router logits, this search has %d", path, h.n, n);
    else if (fread(logits, 1, bytes, f) != bytes || fread(m, 1, bytes, f) != bytes || fread(v, 1, bytes, f) != bytes)
        st = ac_fail(AC_ERR_INVALID, "search: %s is truncated", path);
    fclose(f);
    if (st != AC_OK)
        return st;
    h.fingerprint[sizeof h.fingerprint - 1] = '\0';
    state->step = h.step;
    state->tokens = h.tokens;
    memcpy(state->fingerprint, h.fingerprint, sizeof state->fingerprint);
    *found = 1;
    return AC_OK;
}
