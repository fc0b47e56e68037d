/* A served model: checkpoint, tokenizer and the scheduler's runtime, loaded and checked
 * before it may take requests. */
#include "server/srv.h"
#include "util/path.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A forward on a fixed probe prompt must give finite logits: a checkpoint with NaN or
 * overflowing weights loads fine and is caught here, before it takes a request. */
static ac_status validate(srv_model *m)
{
    static const char probe[] = "The quick brown fox jumps over the lazy dog.\n";
    int32_t *ids = NULL;
    size_t n = 0;
    ac_cache *cache = NULL;
    float *logits = NULL;
    ac_status st = ac_tokenizer_encode(m->tokenizer, probe, sizeof probe - 1, &ids, &n);
    if (st == AC_OK && n == 0)
        st = ac_fail(AC_ERR_INVALID, "%s: the tokenizer encodes the probe prompt to no tokens", m->path);
    for (size_t i = 0; st == AC_OK && i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->vocab)
            st = ac_fail(AC_ERR_INVALID, "%s: tokenizer id %d is outside the model's vocabulary (%d)", m->path,
                         ids[i], m->vocab);
    if (st == AC_OK)
        st = ac_cache_create(m->model, &cache);
    if (st == AC_OK) {
        logits = malloc((size_t)n * m->vocab * sizeof *logits);
        st = logits ? AC_OK : ac_fail(AC_ERR_NOMEM, "%s: out of memory for the probe's logits", m->path);
    }
    if (st == AC_OK) {
        const int32_t *tokens[1] = {ids};
        int n_tokens = (int)n;
        ac_batch batch = {.n_seqs = 1, .tokens = tokens, .n_tokens = &n_tokens, .caches = &cache};
        st = ac_runtime_forward(m->runtime, &batch, AC_LOGITS_ALL, logits);
    }
    for (size_t i = 0; st == AC_OK && i < n * (size_t)m->vocab; i++)
        if (!isfinite(logits[i]))
            st = ac_fail(AC_ERR_INVALID, "%s: the probe prompt gives a non-finite logit (%g at position %zu, token %zu)",
                         m->path, (double)logits[i], i / (size_t)m->vocab, i % (size_t)m->vocab);
    free(logits);
    ac_cache_free(cache);
    free(ids);
    return st;
}

static void summarise(srv_model *m)
{
    const ac_arch *a = ac_model_arch(m->model);
    char pattern[128];
    int n = a->n_layers < (int)sizeof pattern - 1 ? a->n_layers : (int)sizeof pattern - 1;
    for (int i = 0; i < n; i++)
        pattern[i] = ac_block_letter(a->layers[i].kind);
    pattern[n] = 0;
    m->params = ac_arch_param_counts(a).total;
    snprintf(m->summary, sizeof m->summary, "%d layers %s, hidden %d, vocab %d, %.2fM parameters", a->n_layers,
             pattern, a->hidden, a->vocab, (double)m->params / 1e6);
}

static ac_status load_here(const char *path, const char *name, const char *device, ac_dtype weights,
                           srv_model **out)
{
    *out = NULL;
    if (strlen(path) >= SRV_PATH_MAX)
        return ac_fail(AC_ERR_INVALID, "model path is longer than %d bytes", SRV_PATH_MAX - 1);
    srv_model *m = calloc(1, sizeof *m);
    if (!m)
        return ac_fail(AC_ERR_NOMEM, "out of memory for a model");
    snprintf(m->path, sizeof m->path, "%s", path);
    if (name && name[0]) {
        snprintf(m->name, sizeof m->name, "%s", name);
    } else {
        size_t len = strlen(path);
        while (len > 1 && path[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && path[start - 1] != '/')
            start--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(len - start), path + start);
    }
    char tok_path[SRV_PATH_MAX + 32];
    ac_status st = ac_path_join(tok_path, sizeof tok_path, path, "tokenizer.json");
    if (st == AC_OK)
        st = ac_model_load(path, &m->model);
    if (st == AC_OK)
        st = ac_model_move_to_device_as(&m->model, device, weights);
    if (st == AC_OK)
        st = ac_tokenizer_load(tok_path, &m->tokenizer);
    if (st == AC_OK) {
        m->vocab = ac_model_arch(m->model)->vocab;
        if (ac_tokenizer_vocab_size(m->tokenizer) > m->vocab)
            st = ac_fail(AC_ERR_INVALID, "%s: the tokenizer has %d ids, the model's vocabulary only %d", path,
                         ac_tokenizer_vocab_size(m->tokenizer), m->vocab);
    }
    if (st == AC_OK)
        st = ac_runtime_create(m->model, &m->runtime);
    if (st == AC_OK) {
        m->eos = ac_tokenizer_token_to_id(m->tokenizer, "<|endoftext|>");
        summarise(m);
        st = validate(m);
    }
    if (st != AC_OK) {
        srv_model_free(m);
        return st;
    }
    m->loaded_at = (double)time(NULL);
    *out = m;
    return AC_OK;
}

void srv_model_free(srv_model *m)
{
    if (!m)
        return;
    ac_live_profile_free(m->live);
    ac_runtime_free(m->runtime);
    ac_tokenizer_free(m->tokenizer);
    ac_model_free(m->model);
    free(m);
}

/* Loading runs OpenMP regions (conversion, the probe forward). libgomp keeps a thread
 * pool for every thread that started one, for as long as that thread lives, and once
 * its threads outnumber the cores it stops spinning at barriers: every parallel region
 * of the scheduler's forwards would then sleep and wake (serving far below the offline
 * speed: see docs/results.md). A short-lived thread takes its pool with it. */
typedef struct {
    const char *path, *name, *device;
    ac_dtype weights;
    srv_model *model;
    ac_status status;
    char message[512];
} load_job;

static void *load_main(void *arg)
{
    load_job *job = arg;
    job->status = load_here(job->path, job->name, job->device, job->weights, &job->model);
    if (job->status != AC_OK)
        snprintf(job->message, sizeof job->message, "%s", ac_error_message());
    return NULL;
}

ac_status srv_model_load(const char *path, const char *name, const char *device, ac_dtype weights,
                         srv_model **out)
{
    *out = NULL;
    load_job job = {.path = path, .name = name, .device = device, .weights = weights};
    pthread_t thread;
    if (pthread_create(&thread, NULL, load_main, &job) != 0)
        return ac_fail(AC_ERR_INTERNAL, "%s: cannot start a thread to load it", path);
    pthread_join(thread, NULL);
    if (job.status != AC_OK)
        return ac_fail(job.status, "%s", job.message); /* the message lived in that thread */
    *out = job.model;
    return AC_OK;
}
