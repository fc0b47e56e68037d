/* Attribution of CUPTI activity to probe sites (attribute.h): index the log's ids in
 * small open-addressing maps, lay the site occurrences out in end order, add every
 * record to its occurrence, then fold nested occurrences into the ones around them. */
#include "probes/cupti/attribute.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the log ---- */

/* items with room for one more (growing by doubling), or NULL when out of memory */
static void *with_room(void *items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return items;
    size_t want = *cap ? 2 * *cap : 256;
    void *grown = realloc(items, want * size);
    if (grown)
        *cap = want;
    return grown;
}

/* The body of each append below: grow log->array if full, copy the item in, return. */
#define LOG_APPEND(log, array, count, capacity, item, what)                                            \
    do {                                                                                               \
        void *room_ = with_room((log)->array, &(log)->capacity, (log)->count, sizeof *(log)->array);    \
        if (!room_)                                                                                    \
            return ac_fail(AC_ERR_NOMEM, "cupti log: cannot grow the %s past %zu", what, (log)->count); \
        (log)->array = room_;                                                                          \
        (log)->array[(log)->count++] = *(item);                                                        \
        return AC_OK;                                                                                  \
    } while (0)

ac_status ac_cupti_log_mark(ac_cupti_log *log, const ac_cupti_mark *mark)
{
    LOG_APPEND(log, marks, n_marks, cap_marks, mark, "site marks");
}

ac_status ac_cupti_log_link(ac_cupti_log *log, const ac_cupti_link *link)
{
    LOG_APPEND(log, links, n_links, cap_links, link, "external correlation records");
}

ac_status ac_cupti_log_record(ac_cupti_log *log, const ac_cupti_record *record)
{
    LOG_APPEND(log, records, n_records, cap_records, record, "device records");
}

ac_status ac_cupti_log_node(ac_cupti_log *log, const ac_cupti_node *node)
{
    LOG_APPEND(log, nodes, n_nodes, cap_nodes, node, "graph nodes");
}

ac_status ac_cupti_log_launch(ac_cupti_log *log, const ac_cupti_launch *launch)
{
    LOG_APPEND(log, launches, n_launches, cap_launches, launch, "graph launches");
}

void ac_cupti_log_clear_activity(ac_cupti_log *log)
{
    log->n_marks = log->n_links = log->n_records = log->n_launches = 0;
}

void ac_cupti_log_free(ac_cupti_log *log)
{
    free(log->marks);
    free(log->links);
    free(log->records);
    free(log->nodes);
    free(log->launches);
    memset(log, 0, sizeof *log);
}

/* ---- id maps: a 64-bit id to a 32-bit index, insert-only ---- */

#define NONE UINT32_MAX /* no index: an empty slot, a captured mark, an unattributed record */

typedef struct {
    uint64_t *keys;
    uint32_t *values; /* NONE marks an empty slot */
    size_t mask;
} id_map;

static void map_free(id_map *m)
{
    free(m->keys);
    free(m->values);
}

/* room for n ids at a load of at most one half */
static ac_status map_init(id_map *m, size_t n, const char *what)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->values = malloc(cap * sizeof *m->values);
    m->mask = cap - 1;
    if (!m->keys || !m->values)
        return ac_fail(AC_ERR_NOMEM, "cupti attribution: cannot index %zu %s", n, what);
    memset(m->values, 0xff, cap * sizeof *m->values);
    return AC_OK;
}

static size_t map_slot(const id_map *m, uint64_t key)
{
    size_t i = (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & m->mask;
    while (m->values[i] != NONE && m->keys[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

static uint32_t map_get(const id_map *m, uint64_t key) { return m->values[map_slot(m, key)]; }

/* The value stored for key, after storing `value` there if key was absent. */
static uint32_t *map_at(id_map *m, uint64_t key, uint32_t value)
{
    size_t i = map_slot(m, key);
    if (m->values[i] == NONE) {
        m->keys[i] = key;
        m->values[i] = value;
    }
    return &m->values[i];
}

/* ---- attribution ---- */

typedef struct {
    const ac_cupti_log *log;
    id_map mark_of_id;     /* external id -> mark */
    id_map mark_of_corr;   /* correlation id -> mark, through the links */
    id_map node_of_id;     /* graph node id -> node */
    id_map launch_of_corr; /* graph launch correlation id -> launch */
    id_map rank_of_site;   /* (graph, layer, kind) -> rank of that site in its graph */
    id_map sites_of_graph; /* executable graph id -> number of sites its nodes cover */
    uint32_t *node_rank;   /* per node: the rank of its site in its graph */
    uint32_t *mark_occ;    /* per mark: its occurrence, NONE when captured */
    uint32_t *launch_occ;  /* per launch: the occurrence of its first site */
    ac_cupti_occurrence *occ;
    size_t n_occ;
} attribution;

static void attribution_release(attribution *a)
{
    map_free(&a->mark_of_id);
    map_free(&a->mark_of_corr);
    map_free(&a->node_of_id);
    map_free(&a->launch_of_corr);
    map_free(&a->rank_of_site);
    map_free(&a->sites_of_graph);
    free(a->node_rank);
    free(a->mark_occ);
    free(a->launch_occ);
    free(a->occ);
}

/* "layer 2 mlp, decode step 1" */
static const char *site_text(char *buf, size_t size, const ac_probe_site *s)
{
    snprintf(buf, size, "layer %d %s, %s step %d", s->layer, ac_site_name(s->kind), ac_phase_name(s->phase),
             s->step);
    return buf;
}

static const char *op_name(ac_cupti_op op)
{
    switch (op) {
    case AC_CUPTI_KERNEL: return "kernel";
    case AC_CUPTI_MEMCPY: return "memcpy";
    case AC_CUPTI_MEMSET: return "memset";
    }
    return "?";
}

/* Every mark pushed its own id, and a mark ends before the mark around it. */
static ac_status index_marks(attribution *a)
{
    const ac_cupti_log *log = a->log;
    char text[128];
    ac_status st = map_init(&a->mark_of_id, log->n_marks, "site marks");
    for (size_t i = 0; st == AC_OK && i < log->n_marks; i++) {
        const ac_cupti_mark *m = &log->marks[i];
        uint32_t first = *map_at(&a->mark_of_id, m->external_id, (uint32_t)i);
        if (first != i)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: marks %" PRIu32 " and %zu (%s) both pushed external id %" PRIu64,
                           first, i, site_text(text, sizeof text, &m->site), m->external_id);
    }
    for (size_t i = 0; st == AC_OK && i < log->n_marks; i++) {
        const ac_cupti_mark *m = &log->marks[i];
        if (m->parent_id == 0)
            continue;
        uint32_t parent = map_get(&a->mark_of_id, m->parent_id);
        if (parent == NONE)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: mark %zu (%s) is nested in external id %" PRIu64 ", which no mark pushed",
                           i, site_text(text, sizeof text, &m->site), m->parent_id);
        if (parent <= i)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: mark %zu (%s) ends after mark %" PRIu32 " around it", i,
                           site_text(text, sizeof text, &m->site), parent);
    }
    return st;
}

/* Every external-correlation record names a mark, and a call belongs to one mark. */
static ac_status index_links(attribution *a)
{
    const ac_cupti_log *log = a->log;
    ac_status st = map_init(&a->mark_of_corr, log->n_links, "external correlation records");
    for (size_t i = 0; st == AC_OK && i < log->n_links; i++) {
        const ac_cupti_link *l = &log->links[i];
        uint32_t mark = map_get(&a->mark_of_id, l->external_id);
        if (mark == NONE)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: external correlation record %zu names external id %" PRIu64 ", which no site mark pushed",
                           i, l->external_id);
        uint32_t first = *map_at(&a->mark_of_corr, l->correlation_id, mark);
        if (first != mark)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: correlation id %" PRIu32 " is linked to external ids %" PRIu64 " and %" PRIu64,
                           l->correlation_id, log->marks[first].external_id, l->external_id);
    }
    return st;
}

static uint64_t site_key(uint32_t graph, int layer, ac_site_kind kind)
{
    return (uint64_t)graph << 32 | (uint64_t)(uint32_t)(layer + 1) << 8 | (uint64_t)kind;
}

/* Node ids are unique; each graph's sites are ranked in the order their first node comes. */
static ac_status index_nodes(attribution *a)
{
    const ac_cupti_log *log = a->log;
    ac_status st = map_init(&a->node_of_id, log->n_nodes, "graph nodes");
    if (st == AC_OK)
        st = map_init(&a->rank_of_site, log->n_nodes, "graph sites");
    if (st == AC_OK)
        st = map_init(&a->sites_of_graph, log->n_nodes, "graphs");
    a->node_rank = malloc((log->n_nodes ? log->n_nodes : 1) * sizeof *a->node_rank);
    if (st == AC_OK && !a->node_rank)
        st = ac_fail(AC_ERR_NOMEM, "cupti attribution: cannot rank %zu graph nodes", log->n_nodes);
    for (size_t i = 0; st == AC_OK && i < log->n_nodes; i++) {
        const ac_cupti_node *n = &log->nodes[i];
        uint32_t first = *map_at(&a->node_of_id, n->node_id, (uint32_t)i);
        if (first != i)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: graph node %" PRIu64 " is listed twice (graphs %" PRIu32 " and %" PRIu32 ")",
                           n->node_id, log->nodes[first].graph_exec_id, n->graph_exec_id);
        uint32_t *sites = map_at(&a->sites_of_graph, n->graph_exec_id, 0);
        uint32_t *rank = map_at(&a->rank_of_site, site_key(n->graph_exec_id, n->layer, n->kind), *sites);
        if (*rank == *sites)
            (*sites)++;
        a->node_rank[i] = *rank;
    }
    return st;
}

/* Launch correlation ids are unique, and launches come in the order of the marks. */
static ac_status index_launches(attribution *a)
{
    const ac_cupti_log *log = a->log;
    ac_status st = map_init(&a->launch_of_corr, log->n_launches, "graph launches");
    for (size_t i = 0; st == AC_OK && i < log->n_launches; i++) {
        const ac_cupti_launch *l = &log->launches[i];
        uint32_t first = *map_at(&a->launch_of_corr, l->correlation_id, (uint32_t)i);
        if (first != i)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: graph launches %" PRIu32 " and %zu share correlation id %" PRIu32,
                           first, i, l->correlation_id);
        size_t before = i ? log->launches[i - 1].marks_before : 0;
        if (l->marks_before < before || l->marks_before > log->n_marks)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: graph launch %zu comes after %zu marks, out of order (%zu before it, %zu in all)",
                           i, l->marks_before, before, log->n_marks);
    }
    return st;
}

static uint32_t sites_of_launch(const attribution *a, const ac_cupti_launch *l)
{
    uint32_t sites = map_get(&a->sites_of_graph, l->graph_exec_id);
    return sites == NONE ? 0 : sites;
}

/* One occurrence per launch site (phase and step of the launch, layer and kind of the
 * node) at the rank of the site in its graph. */
static void lay_out_launch(attribution *a, size_t launch, uint32_t first)
{
    const ac_cupti_log *log = a->log;
    const ac_cupti_launch *l = &log->launches[launch];
    a->launch_occ[launch] = first;
    for (size_t i = 0; i < log->n_nodes; i++) {
        const ac_cupti_node *n = &log->nodes[i];
        if (n->graph_exec_id != l->graph_exec_id)
            continue;
        ac_probe_site *s = &a->occ[first + a->node_rank[i]].site;
        s->phase = l->phase;
        s->step = l->step;
        s->layer = n->layer;
        s->kind = n->kind;
    }
}

/* The occurrences in end order: a launch's sites right after the marks that ended
 * before it (they end before the sites that end after the launch), then every mark not
 * captured. */
static ac_status lay_out_occurrences(attribution *a)
{
    const ac_cupti_log *log = a->log;
    size_t total = 0;
    for (size_t i = 0; i < log->n_marks; i++)
        total += !log->marks[i].captured;
    for (size_t i = 0; i < log->n_launches; i++)
        total += sites_of_launch(a, &log->launches[i]);
    if (total >= NONE)
        return ac_fail(AC_ERR_INVALID, "cupti attribution: %zu site occurrences are more than it can count", total);
    a->occ = calloc(total ? total : 1, sizeof *a->occ);
    a->mark_occ = malloc((log->n_marks ? log->n_marks : 1) * sizeof *a->mark_occ);
    a->launch_occ = malloc((log->n_launches ? log->n_launches : 1) * sizeof *a->launch_occ);
    if (!a->occ || !a->mark_occ || !a->launch_occ)
        return ac_fail(AC_ERR_NOMEM, "cupti attribution: cannot allocate %zu site occurrences", total);
    uint32_t n = 0;
    size_t launch = 0;
    for (size_t k = 0; k <= log->n_marks; k++) {
        for (; launch < log->n_launches && log->launches[launch].marks_before == k; launch++) {
            lay_out_launch(a, launch, n);
            n += sites_of_launch(a, &log->launches[launch]);
        }
        if (k == log->n_marks)
            break;
        a->mark_occ[k] = log->marks[k].captured ? NONE : n;
        if (!log->marks[k].captured)
            a->occ[n++].site = log->marks[k].site;
    }
    a->n_occ = n;
    return AC_OK;
}

static void add_work(ac_cupti_occurrence *o, int64_t busy, int64_t first_start, int64_t last_end, size_t records)
{
    if (records == 0)
        return;
    if (o->records == 0 || first_start < o->first_start_ns)
        o->first_start_ns = first_start;
    if (o->records == 0 || last_end > o->last_end_ns)
        o->last_end_ns = last_end;
    o->busy_ns += busy;
    o->records += records;
}

/* The occurrence a record belongs to (NONE: unattributed): its graph node's site in its
 * launch when both are known, else the mark its launching call was made in. */
static ac_status occurrence_of(const attribution *a, size_t index, uint32_t *occ)
{
    const ac_cupti_log *log = a->log;
    const ac_cupti_record *r = &log->records[index];
    uint32_t node = r->graph_node_id ? map_get(&a->node_of_id, r->graph_node_id) : NONE;
    uint32_t launch = node != NONE ? map_get(&a->launch_of_corr, r->correlation_id) : NONE;
    if (launch != NONE) {
        uint32_t graph = log->nodes[node].graph_exec_id, launched = log->launches[launch].graph_exec_id;
        if (graph != launched)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: record %zu (%s) ran graph node %" PRIu64 " of graph %" PRIu32 ", but its launch (correlation %" PRIu32 ") ran graph %" PRIu32,
                           index, op_name(r->op), r->graph_node_id, graph, r->correlation_id, launched);
        *occ = a->launch_occ[launch] + a->node_rank[node];
        return AC_OK;
    }
    uint32_t mark = map_get(&a->mark_of_corr, r->correlation_id);
    *occ = mark == NONE ? NONE : a->mark_occ[mark];
    return AC_OK;
}

static ac_status attribute_records(attribution *a, ac_cupti_attribution *out)
{
    const ac_cupti_log *log = a->log;
    for (size_t i = 0; i < log->n_records; i++) {
        const ac_cupti_record *r = &log->records[i];
        if (r->start_ns == 0 && r->end_ns == 0) {
            out->untimed_records++;
            continue;
        }
        if (r->end_ns < r->start_ns)
            return ac_fail(AC_ERR_INVALID, "cupti attribution: record %zu (%s, correlation %" PRIu32 ") ends at %" PRIu64 " ns, before its start at %" PRIu64 " ns",
                           i, op_name(r->op), r->correlation_id, r->end_ns, r->start_ns);
        uint32_t occ = NONE;
        ac_status st = occurrence_of(a, i, &occ);
        if (st != AC_OK)
            return st;
        int64_t start = (int64_t)r->start_ns, end = (int64_t)r->end_ns;
        if (occ == NONE) {
            out->unattributed_ns += end - start;
            out->unattributed_records++;
        } else {
            add_work(&a->occ[occ], end - start, start, end, 1);
        }
    }
    return AC_OK;
}

static void add_occurrence(ac_cupti_occurrence *into, const ac_cupti_occurrence *o)
{
    add_work(into, o->busy_ns, o->first_start_ns, o->last_end_ns, o->records);
}

/* A launch's sites go into the mark its launch call was made in, then each mark into
 * its parent; a mark comes before its parent, so it is complete when it is added. */
static void nest(attribution *a)
{
    const ac_cupti_log *log = a->log;
    for (size_t i = 0; i < log->n_launches; i++) {
        const ac_cupti_launch *l = &log->launches[i];
        uint32_t mark = map_get(&a->mark_of_corr, l->correlation_id);
        if (mark == NONE || a->mark_occ[mark] == NONE)
            continue;
        for (uint32_t s = 0; s < sites_of_launch(a, l); s++)
            add_occurrence(&a->occ[a->mark_occ[mark]], &a->occ[a->launch_occ[i] + s]);
    }
    for (size_t i = 0; i < log->n_marks; i++) {
        const ac_cupti_mark *m = &log->marks[i];
        if (m->parent_id == 0 || a->mark_occ[i] == NONE)
            continue;
        uint32_t parent = map_get(&a->mark_of_id, m->parent_id);
        if (a->mark_occ[parent] != NONE)
            add_occurrence(&a->occ[a->mark_occ[parent]], &a->occ[a->mark_occ[i]]);
    }
}

ac_status ac_cupti_attribute(const ac_cupti_log *log, int64_t origin_ns, ac_cupti_attribution *out)
{
    memset(out, 0, sizeof *out);
    if (log->n_marks >= NONE || log->n_links >= NONE || log->n_nodes >= NONE || log->n_launches >= NONE)
        return ac_fail(AC_ERR_INVALID, "cupti attribution: more than %" PRIu32 " marks, links, nodes or launches", (uint32_t)(NONE - 1));
    if (log->n_records > 0 && log->n_marks == 0 && log->n_launches == 0)
        return ac_fail(AC_ERR_INVALID, "cupti attribution: device record 0 (%s, correlation %" PRIu32 ") came before any site mark (is the probe attached to the runtime?)",
                       op_name(log->records[0].op), log->records[0].correlation_id);
    attribution a;
    memset(&a, 0, sizeof a);
    a.log = log;
    ac_status st = index_marks(&a);
    if (st == AC_OK)
        st = index_links(&a);
    if (st == AC_OK)
        st = index_nodes(&a);
    if (st == AC_OK)
        st = index_launches(&a);
    if (st == AC_OK)
        st = lay_out_occurrences(&a);
    if (st == AC_OK)
        st = attribute_records(&a, out);
    if (st != AC_OK) {
        attribution_release(&a);
        memset(out, 0, sizeof *out);
        return st;
    }
    nest(&a);
    for (size_t i = 0; i < a.n_occ; i++) {
        if (a.occ[i].records) {
            a.occ[i].first_start_ns -= origin_ns;
            a.occ[i].last_end_ns -= origin_ns;
        }
    }
    out->items = a.occ;
    out->count = a.n_occ;
    a.occ = NULL;
    attribution_release(&a);
    return AC_OK;
}

void ac_cupti_attribution_free(ac_cupti_attribution *attribution)
{
    free(attribution->items);
    memset(attribution, 0, sizeof *attribution);
}
