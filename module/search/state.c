/* The search's resumable state: one file, written through the atomic writer, holding a
 * small header (with the budget's multipliers), the router logits and their optimiser's
 * moments. */
#include "search/search_loop.h"

#include "util/atomic_file.h"
#include "util/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC "ACSEARCH"
/* 3: the multipliers joined the header */
#define STATE_VERSION 3

typedef struct {
    char magic[8];
    int32_t version, n;
    int32_t step, pad;
    int64_t tokens;
    double last_kd, last_budget;
    double lambda[AC_BUDGET_TARGETS];
    char fingerprint[AC_SEARCH_FINGERPRINT];
} state_header;

ac_status ac_search_state_save(const char *dir, const ac_search_state *state, const float *logits, const float *m,
                               const float *v, int n)
{
    state_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.version = STATE_VERSION;
    h.n = n;
    h.step = state->step;
    h.tokens = state->tokens;
    h.last_kd = state->last_kd;
    h.last_budget = state->last_budget;
    memcpy(h.lambda, state->lambda, sizeof h.lambda);
    memcpy(h.fingerprint, state->fingerprint, sizeof h.fingerprint);
    h.fingerprint[sizeof h.fingerprint - 1] = '\0';
    uint64_t bytes = (uint64_t)n * sizeof(float);
    ac_file_piece pieces[4] = {{&h, sizeof h}, {logits, bytes}, {m, bytes}, {v, bytes}};
    char path[AC_PATH_MAX], prev[AC_PATH_MAX];
    ac_status st = ac_path_join(path, sizeof path, dir, "search_state.bin");
    if (st == AC_OK)
        st = ac_path_join(prev, sizeof prev, dir, "search_state.prev.bin");
    if (st != AC_OK)
        return st;
    /* the previous state stays until the next one is whole (the weights' checkpoint,
     * written after this, may still be at that step when a kill comes in between) */
    if (rename(path, prev) != 0 && errno != ENOENT)
        return ac_fail(AC_ERR_IO, "search: cannot move %s aside: %s", path, strerror(errno));
    return ac_write_file_atomically(path, pieces, 4);
}

/* One state file; *found = 0 when it is not there. */
static ac_status load_file(const char *path, ac_search_state *state, float *logits, float *m, float *v, int n,
                           int *found)
{
    *found = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? AC_OK : ac_fail(AC_ERR_IO, "search: cannot read %s: %s", path, strerror(errno));
    state_header h;
    size_t bytes = (size_t)n * sizeof(float);
    ac_status st = AC_OK;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, STATE_MAGIC, 8))
        st = ac_fail(AC_ERR_INVALID, "search: %s is not a search state", path);
    else if (h.version != STATE_VERSION)
        st = ac_fail(AC_ERR_INVALID, "search: %s is a search state of version %d, this build reads %d; use another "
                                     "--out", path, (int)h.version, STATE_VERSION);
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
    state->last_kd = h.last_kd;
    state->last_budget = h.last_budget;
    memcpy(state->lambda, h.lambda, sizeof state->lambda);
    memcpy(state->fingerprint, h.fingerprint, sizeof state->fingerprint);
    *found = 1;
    return AC_OK;
}

ac_status ac_search_state_load(const char *dir, int want_step, ac_search_state *state, float *logits, float *m,
                               float *v, int n, int *found)
{
    const char *names[2] = {"search_state.bin", "search_state.prev.bin"};
    char path[AC_PATH_MAX];
    for (int i = 0; i < 2; i++) {
        ac_status st = ac_path_join(path, sizeof path, dir, names[i]);
        if (st == AC_OK)
            st = load_file(path, state, logits, m, v, n, found);
        if (st != AC_OK)
            return st;
        if (*found && (want_step < 0 || state->step == want_step))
            return AC_OK;
    }
    if (want_step >= 0 && *found)
        return ac_fail(AC_ERR_INVALID, "search: %s has no router state at step %d, where its weights are", dir,
                       want_step);
    *found = 0;
    return AC_OK;
}
