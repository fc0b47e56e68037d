/* Loading a Hugging Face tokenizer.json into an ac_tokenizer (see tokenizer.h). Field
 * names, defaults and the meaning of each option follow the `tokenizers` library's
 * serialization of BPE, ByteLevel, Split, Sequence and AddedToken. */
#include "tokenizer/tokenizer_internal.h"
#include "util/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    TOKENIZER_MAX_BYTES = 1 << 30,
    TOKENIZER_MAX_IDS = 1 << 26 /* ids beyond this are taken for corruption */
};

typedef struct {
    const char *name; /* the file, for messages */
    ac_tokenizer *tok;
} loader;

static ac_status lfail(const loader *l, ac_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static ac_status lfail(const loader *l, ac_status code, const char *fmt, ...)
{
    char message[900];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return ac_fail(code, "%s: %s", l->name, message);
}

/* A member, with JSON null read as absent. */
static const cJSON *member(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

static ac_status get_bool(const loader *l, const cJSON *obj, const char *key, const char *where, int def, int *out)
{
    const cJSON *v = member(obj, key);
    if (!v) {
        *out = def;
        return AC_OK;
    }
    if (!cJSON_IsBool(v))
        return lfail(l, AC_ERR_INVALID, "%s.%s: expected a boolean, got %s", where, key, ac_json_type_name(v));
    *out = cJSON_IsTrue(v);
    return AC_OK;
}

/* A string member, or NULL when absent. */
static ac_status get_string(const loader *l, const cJSON *obj, const char *key, const char *where, const char **out)
{
    const cJSON *v = member(obj, key);
    *out = NULL;
    if (!v)
        return AC_OK;
    if (!cJSON_IsString(v))
        return lfail(l, AC_ERR_INVALID, "%s.%s: expected a string, got %s", where, key, ac_json_type_name(v));
    *out = v->valuestring;
    return AC_OK;
}

/* An id: a whole number in [0, TOKENIZER_MAX_IDS). */
static ac_status get_id(const loader *l, const cJSON *v, const char *where, int32_t *out)
{
    if (!cJSON_IsNumber(v))
        return lfail(l, AC_ERR_INVALID, "%s: expected an id (a whole number), got %s", where, ac_json_type_name(v));
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d >= TOKENIZER_MAX_IDS)
        return lfail(l, AC_ERR_INVALID, "%s: %g is not an id (a whole number in [0, %d))", where, d,
                     (int)TOKENIZER_MAX_IDS);
    *out = (int32_t)d;
    return AC_OK;
}

/* ---- model ---- */

static ac_status vocab_lookup(const ac_tokenizer *tok, const char *s, size_t len, int32_t *id)
{
    uint64_t v;
    if (!tok_bmap_get(&tok->vocab, s, len, &v))
        return AC_ERR_INVALID;
    *id = (int32_t)v;
    return AC_OK;
}

static ac_status parse_merges(const loader *l, const cJSON *merges)
{
    ac_tokenizer *tok = l->tok;
    if (!merges)
        return lfail(l, AC_ERR_INVALID, "model.merges: missing");
    if (!cJSON_IsArray(merges))
        return lfail(l, AC_ERR_INVALID, "model.merges: expected an array, got %s", ac_json_type_name(merges));
    char *joined = NULL;
    size_t joined_cap = 0;
    ac_status st = AC_OK;
    size_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t alen, blen;
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *space = strchr(s, ' ');
            if (!space || space == s || !space[1]) {
                st = lfail(l, AC_ERR_INVALID, "model.merges[%zu]: \"%.80s\" is not two tokens separated by a space",
                           rank, s);
                break;
            }
            a = s, alen = (size_t)(space - s);
            b = space + 1, blen = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, alen = strlen(a);
            b = m->child->next->valuestring, blen = strlen(b);
        } else {
            st = lfail(l, AC_ERR_INVALID, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"], got %s", rank,
                       ac_json_type_name(m));
            break;
        }
        int32_t ia, ib, merged;
        if (vocab_lookup(tok, a, alen, &ia) != AC_OK) {
            st = lfail(l, AC_ERR_INVALID, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", rank,
                       (int)(alen > 80 ? 80 : alen), a);
            break;
        }
        if (vocab_lookup(tok, b, blen, &ib) != AC_OK) {
            st = lfail(l, AC_ERR_INVALID, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", rank,
                       (int)(blen > 80 ? 80 : blen), b);
            break;
        }
        if (alen + blen > joined_cap) {
            joined_cap = (alen + blen) * 2;
            char *p = realloc(joined, joined_cap);
            if (!p) {
                st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
                break;
            }
            joined = p;
        }
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        if (vocab_lookup(tok, joined, alen + blen, &merged) != AC_OK) {
            st = lfail(l, AC_ERR_INVALID, "model.merges[%zu]: the merged token \"%.*s\" is not in model.vocab", rank,
                       (int)(alen + blen > 80 ? 80 : alen + blen), joined);
            break;
        }
        if (rank >= UINT32_MAX) {
            st = lfail(l, AC_ERR_INVALID, "model.merges: too many merges");
            break;
        }
        /* a repeated pair takes its last rank, as the library's map does */
        st = tok_umap_put(&tok->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib,
                          (uint64_t)rank << 32 | (uint32_t)merged);
        if (st != AC_OK)
            break;
    }
    free(joined);
    return st;
}

static ac_status parse_model(const loader *l, const cJSON *root)
{
    ac_tokenizer *tok = l->tok;
    const cJSON *model = member(root, "model");
    if (!model)
        return lfail(l, AC_ERR_INVALID, "model: missing");
    if (!cJSON_IsObject(model))
        return lfail(l, AC_ERR_INVALID, "model: expected an object, got %s", ac_json_type_name(model));
    const char *type;
    ac_status st = get_string(l, model, "type", "model", &type);
    if (st != AC_OK)
        return st;
    if (type && strcmp(type, "BPE"))
        return lfail(l, AC_ERR_UNSUPPORTED, "model.type: \"%.60s\" is not supported (only \"BPE\")", type);
    if (!type && !member(model, "merges"))
        return lfail(l, AC_ERR_UNSUPPORTED, "model.type: missing, and no merges (only BPE models are supported)");

    const cJSON *dropout = member(model, "dropout");
    if (dropout && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return lfail(l, AC_ERR_UNSUPPORTED, "model.dropout: BPE dropout is random (only null or 0 is supported)");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s;
        if ((st = get_string(l, model, affixes[i], "model", &s)) != AC_OK)
            return st;
        if (s && s[0])
            return lfail(l, AC_ERR_UNSUPPORTED, "model.%s: \"%.40s\" is not supported (only null)", affixes[i], s);
    }
    int byte_fallback = 0;
    if ((st = get_bool(l, model, "byte_fallback", "model", 0, &byte_fallback)) != AC_OK ||
        (st = get_bool(l, model, "fuse_unk", "model", 0, &tok->fuse_unk)) != AC_OK ||
        (st = get_bool(l, model, "ignore_merges", "model", 0, &tok->ignore_merges)) != AC_OK)
        return st;
    if (byte_fallback)
        return lfail(l, AC_ERR_UNSUPPORTED, "model.byte_fallback: true is not supported (byte-level BPE only)");

    const cJSON *vocab = member(model, "vocab");
    if (!vocab)
        return lfail(l, AC_ERR_INVALID, "model.vocab: missing");
    if (!cJSON_IsObject(vocab))
        return lfail(l, AC_ERR_INVALID, "model.vocab: expected an object, got %s", ac_json_type_name(vocab));
    for (const cJSON *e = vocab->child; e; e = e->next) {
        char where[160];
        snprintf(where, sizeof where, "model.vocab[\"%.60s\"]", e->string);
        int32_t id = 0;
        if ((st = get_id(l, e, where, &id)) != AC_OK)
            return st;
        int existed;
        if ((st = tok_bmap_put(&tok->vocab, e->string, strlen(e->string), (uint64_t)id, 0, &existed)) != AC_OK)
            return st;
        if (existed)
            return lfail(l, AC_ERR_INVALID, "model.vocab: token \"%.60s\" appears twice", e->string);
    }
    if (!tok->vocab.count)
        return lfail(l, AC_ERR_INVALID, "model.vocab: empty");

    const char *unk;
    if ((st = get_string(l, model, "unk_token", "model", &unk)) != AC_OK)
        return st;
    tok->unk_id = -1;
    if (unk && vocab_lookup(tok, unk, strlen(unk), &tok->unk_id) != AC_OK)
        return lfail(l, AC_ERR_INVALID, "model.unk_token: \"%.60s\" is not in model.vocab", unk);
    return parse_merges(l, member(model, "merges"));
}

/* ---- added tokens ---- */

static ac_status parse_added(const loader *l, const cJSON *root)
{
    ac_tokenizer *tok = l->tok;
    const cJSON *list = member(root, "added_tokens");
    if (!list)
        return AC_OK;
    if (!cJSON_IsArray(list))
        return lfail(l, AC_ERR_INVALID, "added_tokens: expected an array, got %s", ac_json_type_name(list));
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (!n)
        return AC_OK;
    tok->added = tok_arena_alloc(&tok->arena, n * sizeof *tok->added);
    if (!tok->added)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
    size_t i = 0;
    for (const cJSON *t = list->child; t; t = t->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(t))
            return lfail(l, AC_ERR_INVALID, "%s: expected an object, got %s", where, ac_json_type_name(t));
        tok_added *a = &tok->added[i];
        char id_where[64];
        snprintf(id_where, sizeof id_where, "%s.id", where);
        const cJSON *idv = member(t, "id");
        if (!idv)
            return lfail(l, AC_ERR_INVALID, "%s.id: missing", where);
        ac_status st = get_id(l, idv, id_where, &a->id);
        if (st != AC_OK)
            return st;
        const char *content;
        if ((st = get_string(l, t, "content", where, &content)) != AC_OK)
            return st;
        if (!content || !content[0])
            return lfail(l, AC_ERR_INVALID, "%s.content: missing or empty", where);
        int special = 0, lstrip = 0, rstrip = 0, single_word = 0, normalized = 0;
        if ((st = get_bool(l, t, "special", where, 0, &special)) != AC_OK ||
            (st = get_bool(l, t, "lstrip", where, 0, &lstrip)) != AC_OK ||
            (st = get_bool(l, t, "rstrip", where, 0, &rstrip)) != AC_OK ||
            (st = get_bool(l, t, "single_word", where, 0, &single_word)) != AC_OK ||
            (st = get_bool(l, t, "normalized", where, !special, &normalized)) != AC_OK)
            return st;
        a->len = strlen(content);
        a->content = tok_arena_strndup(&tok->arena, content, a->len);
        if (!a->content)
            return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
        a->special = (unsigned char)special;
        a->lstrip = (unsigned char)lstrip;
        a->rstrip = (unsigned char)rstrip;
        a->single_word = (unsigned char)single_word;
        a->normalized = (unsigned char)normalized;
        int existed;
        if ((st = tok_bmap_put(&tok->added_map, a->content, a->len, i, 0, &existed)) != AC_OK)
            return st;
        if (existed)
            return lfail(l, AC_ERR_INVALID, "%s.content: \"%.60s\" appears twice in added_tokens", where, content);
        int32_t vid;
        if (vocab_lookup(tok, a->content, a->len, &vid) == AC_OK && vid != a->id)
            return lfail(l, AC_ERR_INVALID, "%s: id %d, but model.vocab has \"%.60s\" as %d", where, (int)a->id,
                         content, (int)vid);
        if (a->single_word)
            tok->need_word_regex = 1;
    }
    tok->added_count = n;
    return AC_OK;
}

/* Buckets the added tokens per matching pass and first byte, longest first. */
static ac_status index_added(const loader *l)
{
    ac_tokenizer *tok = l->tok;
    for (size_t i = 0; i < tok->added_count; i++) {
        const tok_added *a = &tok->added[i];
        tok->added_by_byte_count[a->normalized][(unsigned char)a->content[0]]++;
        tok->added_pass_count[a->normalized]++;
    }
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++) {
            uint32_t n = tok->added_by_byte_count[p][b];
            if (!n)
                continue;
            uint32_t *list = tok_arena_alloc(&tok->arena, n * sizeof *list);
            if (!list)
                return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
            uint32_t k = 0;
            for (size_t i = 0; i < tok->added_count; i++) {
                const tok_added *a = &tok->added[i];
                if (a->normalized != p || (unsigned char)a->content[0] != b)
                    continue;
                uint32_t j = k++;
                while (j > 0 && tok->added[list[j - 1]].len < a->len) { /* insertion sort, longest first */
                    list[j] = list[j - 1];
                    j--;
                }
                list[j] = (uint32_t)i;
            }
            tok->added_by_byte[p][b] = list;
        }
    if (tok->need_word_regex) {
        /* Rust's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners */
        static const char word[] = "^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
        ac_status st = tok_regex_compile(&tok->word_regex, word, sizeof word - 1, TOK_RE_PCRE2, l->name,
                                         "added_tokens (single_word)");
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

/* ---- the id table ---- */

/* What the ByteLevel decoder makes of a token: its symbols' bytes when every character
 * is a byte symbol, else the token's own UTF-8. */
static ac_status decoded_bytes(ac_tokenizer *tok, const char *token, tok_id_info *info, int *byte_level)
{
    size_t n = strlen(token);
    unsigned char *out = tok_arena_alloc(&tok->arena, n ? n : 1);
    if (!out)
        return AC_ERR_NOMEM;
    size_t o = 0;
    *byte_level = 1;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_decode((const unsigned char *)token + i, n - i, &cp);
        int b = l ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            *byte_level = 0;
            break;
        }
        out[o++] = (unsigned char)b;
        i += (size_t)l;
    }
    if (!*byte_level) {
        memcpy(out, token, n);
        o = n;
    }
    info->bytes = out;
    info->bytes_len = (uint32_t)o;
    return AC_OK;
}

static ac_status build_ids(const loader *l)
{
    ac_tokenizer *tok = l->tok;
    int32_t max_id = -1;
    for (size_t e = 0; e < tok->vocab.count; e++)
        if ((int32_t)tok->vocab.entries[e].value > max_id)
            max_id = (int32_t)tok->vocab.entries[e].value;
    for (size_t i = 0; i < tok->added_count; i++)
        if (tok->added[i].id > max_id)
            max_id = tok->added[i].id;
    tok->vocab_size = max_id + 1;
    tok->ids = tok_arena_alloc(&tok->arena, (size_t)tok->vocab_size * sizeof *tok->ids);
    if (!tok->ids)
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory (%d ids)", l->name, (int)tok->vocab_size);
    memset(tok->ids, 0, (size_t)tok->vocab_size * sizeof *tok->ids);
    for (int b = 0; b < 256; b++)
        tok->byte_id[b] = -1;

    for (size_t e = 0; e < tok->vocab.count; e++) {
        const tok_bmap_entry *en = &tok->vocab.entries[e];
        int32_t id = (int32_t)en->value;
        tok_id_info *info = &tok->ids[id];
        const char *key = (const char *)tok->vocab.keys + en->off;
        if (info->token)
            return lfail(l, AC_ERR_INVALID, "model.vocab: id %d is used by \"%.60s\" and \"%.*s\"", (int)id,
                         info->token, (int)(en->len > 60 ? 60 : en->len), key);
        info->token = tok_arena_strndup(&tok->arena, key, en->len);
        if (!info->token)
            return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
        int byte_level;
        if (decoded_bytes(tok, info->token, info, &byte_level) != AC_OK)
            return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
        if (byte_level && info->bytes_len) {
            ac_status st = tok_bmap_put(&tok->vocab_bytes, info->bytes, info->bytes_len, (uint64_t)id, 0, NULL);
            if (st != AC_OK)
                return st;
            if (info->bytes_len == 1)
                tok->byte_id[info->bytes[0]] = id;
        }
    }
    for (size_t i = 0; i < tok->added_count; i++) {
        const tok_added *a = &tok->added[i];
        tok_id_info *info = &tok->ids[a->id];
        if (info->added)
            return lfail(l, AC_ERR_INVALID, "added_tokens[%zu]: id %d is also added_tokens' \"%.60s\"", i,
                         (int)a->id, info->token);
        if (info->token && strcmp(info->token, a->content))
            return lfail(l, AC_ERR_INVALID, "added_tokens[%zu]: id %d is model.vocab's \"%.60s\", not \"%.60s\"", i,
                         (int)a->id, info->token, a->content);
        if (!info->token) {
            info->token = a->content;
            int byte_level;
            if (decoded_bytes(tok, info->token, info, &byte_level) != AC_OK)
                return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
        }
        info->added = 1;
        info->special = a->special;
    }
    return AC_OK;
}

/* ---- normalizer, pre-tokenizer, decoder ---- */

static ac_status parse_normalizer(const loader *l, const cJSON *root)
{
    const cJSON *n = member(root, "normalizer");
    if (!n)
        return AC_OK;
    const cJSON *type = member(n, "type");
    const cJSON *list = member(n, "normalizers");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence") && cJSON_IsArray(list) &&
        cJSON_GetArraySize(list) == 0)
        return AC_OK;
    return lfail(l, AC_ERR_UNSUPPORTED, "normalizer: %s%.40s%s is not supported (only null)",
                 cJSON_IsString(type) ? "type \"" : "", cJSON_IsString(type) ? type->valuestring : ac_json_type_name(n),
                 cJSON_IsString(type) ? "\"" : "");
}

static ac_status add_step(const loader *l, tok_step *step)
{
    ac_tokenizer *tok = l->tok;
    tok_step *steps = realloc(tok->steps, (tok->step_count + 1) * sizeof *steps);
    if (!steps) {
        if (step->has_regex)
            tok_regex_free(&step->regex);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", l->name);
    }
    steps[tok->step_count++] = *step;
    tok->steps = steps;
    return AC_OK;
}

static ac_status parse_byte_level(const loader *l, const cJSON *p, const char *where)
{
    tok_step step = {.kind = TOK_STEP_BYTE_LEVEL};
    ac_status st;
    if ((st = get_bool(l, p, "add_prefix_space", where, 1, &step.add_prefix_space)) != AC_OK ||
        (st = get_bool(l, p, "use_regex", where, 1, &step.has_regex)) != AC_OK)
        return st;
    if (step.has_regex &&
        (st = tok_regex_compile(&step.regex, TOK_GPT2_PATTERN, strlen(TOK_GPT2_PATTERN), TOK_RE_ONIGURUMA, l->name,
                                where)) != AC_OK)
        return st;
    return add_step(l, &step);
}

static ac_status parse_split(const loader *l, const cJSON *p, const char *where)
{
    static const char *const behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
    tok_step step = {.kind = TOK_STEP_SPLIT, .has_regex = 1};
    const cJSON *pattern = member(p, "pattern");
    if (!cJSON_IsObject(pattern))
        return lfail(l, AC_ERR_INVALID, "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}, got %s", where,
                     ac_json_type_name(pattern));
    const cJSON *re = member(pattern, "Regex"), *lit = member(pattern, "String");
    const cJSON *text = re ? re : lit;
    if (!cJSON_IsString(text) || (re && lit))
        return lfail(l, AC_ERR_INVALID, "%s.pattern: expected one string, \"Regex\" or \"String\"", where);
    const char *behavior;
    ac_status st = get_string(l, p, "behavior", where, &behavior);
    if (st != AC_OK)
        return st;
    if (!behavior)
        return lfail(l, AC_ERR_INVALID, "%s.behavior: missing", where);
    int found = 0;
    for (int i = 0; i < 5; i++)
        if (!strcmp(behavior, behaviors[i])) {
            step.behavior = (tok_split_behavior)i;
            found = 1;
        }
    if (!found)
        return lfail(l, AC_ERR_INVALID,
                     "%s.behavior: unknown \"%.40s\" (Isolated, Removed, MergedWithPrevious, MergedWithNext or "
                     "Contiguous)",
                     where, behavior);
    if ((st = get_bool(l, p, "invert", where, 0, &step.invert)) != AC_OK)
        return st;
    char pwhere[200];
    snprintf(pwhere, sizeof pwhere, "%s.pattern.%s", where, re ? "Regex" : "String");
    if ((st = tok_regex_compile(&step.regex, text->valuestring, strlen(text->valuestring),
                                re ? TOK_RE_ONIGURUMA : TOK_RE_LITERAL, l->name, pwhere)) != AC_OK)
        return st;
    return add_step(l, &step);
}

static ac_status parse_pre_step(const loader *l, const cJSON *p, const char *where, int depth)
{
    if (!cJSON_IsObject(p))
        return lfail(l, AC_ERR_INVALID, "%s: expected an object, got %s", where, ac_json_type_name(p));
    const char *type;
    ac_status st = get_string(l, p, "type", where, &type);
    if (st != AC_OK)
        return st;
    if (!type)
        return lfail(l, AC_ERR_INVALID, "%s.type: missing", where);
    for (size_t i = 0; i < l->tok->step_count; i++)
        if (l->tok->steps[i].kind == TOK_STEP_BYTE_LEVEL)
            return lfail(l, AC_ERR_UNSUPPORTED, "%s: a %.40s after ByteLevel is not supported (ByteLevel must come last)",
                         where, type);
    if (!strcmp(type, "ByteLevel"))
        return parse_byte_level(l, p, where);
    if (!strcmp(type, "Split"))
        return parse_split(l, p, where);
    if (!strcmp(type, "Sequence") && depth < 8) {
        const cJSON *list = member(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return lfail(l, AC_ERR_INVALID, "%s.pretokenizers: expected an array, got %s", where, ac_json_type_name(list));
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            char cw[256];
            snprintf(cw, sizeof cw, "%s.pretokenizers[%d]", where, i);
            if ((st = parse_pre_step(l, c, cw, depth + 1)) != AC_OK)
                return st;
        }
        return AC_OK;
    }
    return lfail(l, AC_ERR_UNSUPPORTED, "%s.type: \"%.40s\" is not supported (only ByteLevel, Split and Sequence)",
                 where, type);
}

static ac_status parse_pre_tokenizer(const loader *l, const cJSON *root)
{
    const cJSON *p = member(root, "pre_tokenizer");
    if (!p)
        return lfail(l, AC_ERR_UNSUPPORTED, "pre_tokenizer: null is not supported (a byte-level BPE needs ByteLevel)");
    ac_status st = parse_pre_step(l, p, "pre_tokenizer", 0);
    if (st != AC_OK)
        return st;
    const ac_tokenizer *tok = l->tok;
    if (!tok->step_count || tok->steps[tok->step_count - 1].kind != TOK_STEP_BYTE_LEVEL)
        return lfail(l, AC_ERR_UNSUPPORTED, "pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)");
    return AC_OK;
}

static ac_status parse_decoder(const loader *l, const cJSON *root)
{
    const cJSON *d = member(root, "decoder");
    if (!d)
        return lfail(l, AC_ERR_UNSUPPORTED, "decoder: null is not supported (only ByteLevel)");
    const char *type;
    ac_status st = get_string(l, d, "type", "decoder", &type);
    if (st != AC_OK)
        return st;
    if (type && !strcmp(type, "ByteLevel"))
        return AC_OK;
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = member(d, "decoders");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) {
            const cJSON *t = member(list->child, "type");
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "ByteLevel"))
                return AC_OK;
        }
        return lfail(l, AC_ERR_UNSUPPORTED, "decoder.decoders: only a Sequence of one ByteLevel is supported");
    }
    return lfail(l, AC_ERR_UNSUPPORTED, "decoder.type: \"%.40s\" is not supported (only ByteLevel)",
                 type ? type : "(missing)");
}

/* ---- entry points ---- */

static void where_in_text(const char *json, size_t len, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    if (!at || at < json || at > json + len)
        return;
    for (const char *p = json; p < at; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

ac_status ac_tokenizer_load_buffer(const char *json, size_t len, const char *name, ac_tokenizer **out)
{
    *out = NULL;
    if (!name)
        name = "tokenizer.json";
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        int line, col;
        where_in_text(json, len, end, &line, &col);
        return ac_fail(AC_ERR_INVALID, "%s:%d:%d: malformed JSON", name, line, col);
    }
    ac_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        cJSON_Delete(root);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", name);
    }
    pthread_mutex_init(&tok->cache_lock, NULL);
    tok->unk_id = -1;
    tok->name = strdup(name);
    loader l = {.name = name, .tok = tok};
    ac_status st = AC_OK;
    if (!tok->name)
        st = ac_fail(AC_ERR_NOMEM, "%s: out of memory", name);
    else if (!cJSON_IsObject(root))
        st = lfail(&l, AC_ERR_INVALID, "expected a JSON object at the top, got %s", ac_json_type_name(root));
    if (st == AC_OK)
        st = parse_model(&l, root);
    if (st == AC_OK)
        st = parse_added(&l, root);
    if (st == AC_OK)
        st = build_ids(&l);
    if (st == AC_OK)
        st = index_added(&l);
    if (st == AC_OK)
        st = parse_normalizer(&l, root);
    if (st == AC_OK)
        st = parse_pre_tokenizer(&l, root);
    if (st == AC_OK)
        st = parse_decoder(&l, root);
    cJSON_Delete(root);
    if (st != AC_OK) {
        ac_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return AC_OK;
}

ac_status ac_tokenizer_load(const char *path, ac_tokenizer **out)
{
    *out = NULL;
    char *buf;
    size_t len;
    ac_status st = ac_read_text_file(path, TOKENIZER_MAX_BYTES, &buf, &len);
    if (st == AC_OK)
        st = ac_tokenizer_load_buffer(buf, len, path, out);
    free(buf);
    return st;
}

void ac_tokenizer_free(ac_tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t i = 0; i < tok->step_count; i++)
        if (tok->steps[i].has_regex)
            tok_regex_free(&tok->steps[i].regex);
    free(tok->steps);
    if (tok->need_word_regex)
        tok_regex_free(&tok->word_regex);
    tok_bmap_free(&tok->vocab);
    tok_bmap_free(&tok->vocab_bytes);
    tok_bmap_free(&tok->added_map);
    tok_bmap_free(&tok->cache);
    tok_umap_free(&tok->merges);
    free(tok->cache_ids);
    pthread_mutex_destroy(&tok->cache_lock);
    tok_arena_free(&tok->arena);
    free(tok->name);
    free(tok);
}

int32_t ac_tokenizer_vocab_size(const ac_tokenizer *tok) { return tok->vocab_size; }

int32_t ac_tokenizer_token_to_id(const ac_tokenizer *tok, const char *token)
{
    size_t len = strlen(token);
    uint64_t v;
    if (tok_bmap_get(&tok->added_map, token, len, &v))
        return tok->added[v].id;
    if (tok_bmap_get(&tok->vocab, token, len, &v))
        return (int32_t)v;
    return -1;
}

const char *ac_tokenizer_id_to_token(const ac_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->vocab_size)
        return NULL;
    return tok->ids[id].token;
}

int ac_tokenizer_is_special(const ac_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->vocab_size && tok->ids[id].special;
}
