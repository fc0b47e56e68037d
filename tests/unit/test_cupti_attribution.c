/* The CUPTI probe's attribution (probes/cupti/attribute.h), without a GPU: logs made up
 * the way the probe would fill them (site marks, external-correlation links, device
 * records, graph nodes and launches, in scrambled arrival order) must give each site
 * occurrence the sum of the records the test made for it, computed here on the side, in
 * the CPU probe's order; contradictory logs must fail with a message naming the culprit.
 * With CUDA, hand-made CUPTI activity buffers go through ac_cupti_parse_buffer too
 * (cuptiActivityGetNextRecord needs libcupti but no device). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "autocompress/probe.h"
#include "probes/cupti/attribute.h"

#ifdef AC_HAVE_CUDA
#include <cupti.h>

#include "probes/cupti/cupti_probe.h"
#endif

enum { LAYERS = 3, MAX_EXPECTED = 64, ORIGIN = 1000000 };

static const ac_site_kind layer_kind[LAYERS] = {AC_SITE_MAMBA, AC_SITE_ATTENTION, AC_SITE_MLP};

/* What the test expects of one site occurrence, kept apart from the attribution. */
typedef struct {
    ac_probe_site site;
    int64_t busy, first, last;
    size_t records;
} expected;

/* A made-up run: the log plus the probe's id stack and the expected occurrences. */
typedef struct {
    ac_cupti_log log;
    uint64_t next_id, stack[8];
    int open[8]; /* expected occurrence of each open site */
    int depth;
    uint32_t next_corr;
    int64_t clock;
    uint64_t rng;
    expected want[MAX_EXPECTED];
    int n_want;
    int order[MAX_EXPECTED]; /* expected occurrences by site end */
    int n_order;
} scene;

static void scene_init(scene *s)
{
    memset(s, 0, sizeof *s);
    s->clock = ORIGIN + 500;
    s->rng = 88172645463325252ull;
}

static uint64_t next_random(scene *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

static int new_expected(scene *s, ac_phase phase, int step, int layer, ac_site_kind kind)
{
    assert_true(s->n_want < MAX_EXPECTED);
    expected *e = &s->want[s->n_want];
    memset(e, 0, sizeof *e);
    e->site = (ac_probe_site){phase, step, layer, kind};
    return s->n_want++;
}

static void add_expected(expected *e, int64_t start, int64_t end)
{
    e->first = e->records && e->first < start ? e->first : start;
    e->last = e->records && e->last > end ? e->last : end;
    e->busy += end - start;
    e->records++;
}

/* Work for occurrence occ counts for it and for every site open around it. */
static void expect_work(scene *s, int occ, int64_t start, int64_t end)
{
    add_expected(&s->want[occ], start, end);
    for (int d = 0; d < s->depth; d++)
        if (s->open[d] >= 0 && s->open[d] != occ)
            add_expected(&s->want[s->open[d]], start, end);
}

static void begin(scene *s, int occ)
{
    s->stack[s->depth] = ++s->next_id;
    s->open[s->depth++] = occ;
}

/* Ends the innermost site; occ < 0 marks one captured (no occurrence expected). */
static void end(scene *s, ac_phase phase, int step, int layer, ac_site_kind kind)
{
    s->depth--;
    ac_cupti_mark m = {{phase, step, layer, kind}, s->stack[s->depth], s->depth ? s->stack[s->depth - 1] : 0,
                       s->open[s->depth] < 0};
    assert_int_equal(ac_cupti_log_mark(&s->log, &m), AC_OK);
    if (s->open[s->depth] >= 0)
        s->order[s->n_order++] = s->open[s->depth];
}

/* An API call made now: CUPTI links its correlation id to the id on top. */
static uint32_t call(scene *s)
{
    uint32_t corr = ++s->next_corr * 7 + 3;
    ac_cupti_link link = {s->stack[s->depth - 1], corr};
    assert_int_equal(ac_cupti_log_link(&s->log, &link), AC_OK);
    return corr;
}

/* Device work the call `corr` started, counted for expected occurrence occ. */
static void work(scene *s, ac_cupti_op op, uint32_t corr, uint64_t node, uint32_t graph, int occ)
{
    int64_t start = s->clock + (int64_t)(next_random(s) % 300);
    int64_t end = start + 1000 + (int64_t)(next_random(s) % 9000);
    s->clock = end;
    ac_cupti_record r = {op, corr, (uint64_t)start, (uint64_t)end, node, graph};
    assert_int_equal(ac_cupti_log_record(&s->log, &r), AC_OK);
    if (occ >= 0)
        expect_work(s, occ, start, end);
}

/* One site with `kernels` kernels and optionally a memcpy, eagerly. */
static void eager_site(scene *s, ac_phase phase, int step, int layer, ac_site_kind kind, int kernels, int memcpy_too)
{
    int occ = new_expected(s, phase, step, layer, kind);
    begin(s, occ);
    for (int k = 0; k < kernels; k++)
        work(s, AC_CUPTI_KERNEL, call(s), 0, 0, occ);
    if (memcpy_too)
        work(s, AC_CUPTI_MEMCPY, call(s), 0, 0, occ);
    end(s, phase, step, layer, kind);
}

/* Records arrive in buffers later and in any order: scramble them. */
static void scramble_records(scene *s)
{
    for (size_t i = s->log.n_records; i > 1; i--) {
        size_t j = (size_t)(next_random(s) % i);
        ac_cupti_record t = s->log.records[i - 1];
        s->log.records[i - 1] = s->log.records[j];
        s->log.records[j] = t;
    }
}

static void check_against_expected(const scene *s, const ac_cupti_attribution *a)
{
    assert_int_equal(a->count, s->n_order);
    for (int i = 0; i < s->n_order; i++) {
        const expected *e = &s->want[s->order[i]];
        const ac_cupti_occurrence *o = &a->items[i];
        assert_int_equal(o->site.phase, e->site.phase);
        assert_int_equal(o->site.step, e->site.step);
        assert_int_equal(o->site.layer, e->site.layer);
        assert_int_equal(o->site.kind, e->site.kind);
        assert_int_equal(o->busy_ns, e->busy);
        assert_int_equal(o->records, e->records);
        /* times are from the origin; an occurrence without records has none */
        assert_int_equal(o->first_start_ns, e->records ? e->first - ORIGIN : 0);
        assert_int_equal(o->last_end_ns, e->records ? e->last - ORIGIN : 0);
    }
}

/* A serving step done eagerly: embedding, the blocks, LM head and sampling in a step;
 * a decode step samples on the host (a site without device work). */
static void eager_step(scene *s, ac_phase phase, int step)
{
    int occ = new_expected(s, phase, step, -1, AC_SITE_STEP);
    begin(s, occ);
    eager_site(s, phase, step, -1, AC_SITE_EMBEDDING, 1, 0);
    for (int l = 0; l < LAYERS; l++)
        eager_site(s, phase, step, l, layer_kind[l], 2 + l, 1);
    eager_site(s, phase, step, -1, AC_SITE_LM_HEAD, 1, 0);
    eager_site(s, phase, step, -1, AC_SITE_SAMPLE, 0, phase == AC_PHASE_PREFILL);
    end(s, phase, step, -1, AC_SITE_STEP);
}

static void test_eager_sums_per_layer_and_phase(void **state)
{
    (void)state;
    scene s;
    scene_init(&s);
    eager_step(&s, AC_PHASE_PREFILL, 0);
    eager_step(&s, AC_PHASE_DECODE, 1);
    eager_step(&s, AC_PHASE_DECODE, 2);
    /* a copy no site made (say, the weights' upload): counted, not dropped */
    ac_cupti_record stray = {AC_CUPTI_MEMCPY, 999999, ORIGIN + 10, ORIGIN + 4321, 0, 0};
    assert_int_equal(ac_cupti_log_record(&s.log, &stray), AC_OK);
    /* a kernel CUPTI could not time: counted apart, in no sum */
    ac_cupti_record untimed = {AC_CUPTI_KERNEL, s.log.links[0].correlation_id, 0, 0, 0, 0};
    assert_int_equal(ac_cupti_log_record(&s.log, &untimed), AC_OK);
    scramble_records(&s);

    ac_cupti_attribution a;
    assert_int_equal(ac_cupti_attribute(&s.log, ORIGIN, &a), AC_OK);
    assert_int_equal(a.count, 3 * (LAYERS + 4));
    check_against_expected(&s, &a);
    assert_int_equal(a.unattributed_records, 1);
    assert_int_equal(a.unattributed_ns, 4311);
    assert_int_equal(a.untimed_records, 1);
    /* a step is its sites and nothing else here: its sum is theirs */
    int64_t sites = 0;
    for (size_t i = 0; i < LAYERS + 3; i++)
        sites += a.items[i].busy_ns;
    assert_int_equal(a.items[LAYERS + 3].site.kind, AC_SITE_STEP);
    assert_int_equal(a.items[LAYERS + 3].busy_ns, sites);
    assert_int_equal(a.items[2 * LAYERS + 6].site.kind, AC_SITE_SAMPLE);
    assert_int_equal(a.items[2 * LAYERS + 6].records, 0);
    ac_cupti_attribution_free(&a);
    ac_cupti_log_free(&s.log);
}

enum { GRAPH = 7, OTHER_GRAPH = 8, NODES_PER_SITE = 2 };

/* The node ids of the executable graph's copies of site `slot` (0 embedding, 1..LAYERS
 * blocks, LAYERS + 1 LM head). */
static uint64_t node_id(uint32_t graph, int slot, int k) { return (uint64_t)graph * 1000 + (uint64_t)slot * 10 + (uint64_t)k; }

static void slot_site(int slot, int *layer, ac_site_kind *kind)
{
    *layer = slot >= 1 && slot <= LAYERS ? slot - 1 : -1;
    *kind = slot == 0 ? AC_SITE_EMBEDDING : slot <= LAYERS ? layer_kind[slot - 1] : AC_SITE_LM_HEAD;
}

/* A decode forward captured: its sites are marked captured and their calls linked, but
 * nothing runs; the instantiation gives the executable graph's nodes their sites. */
static void capture_forward(scene *s)
{
    for (int slot = 0; slot <= LAYERS + 1; slot++) {
        int layer;
        ac_site_kind kind;
        slot_site(slot, &layer, &kind);
        begin(s, -1);
        call(s);
        end(s, AC_PHASE_DECODE, 1, layer, kind);
        for (int k = 0; k < NODES_PER_SITE; k++) {
            ac_cupti_node n = {node_id(GRAPH, slot, k), GRAPH, layer, kind};
            assert_int_equal(ac_cupti_log_node(&s->log, &n), AC_OK);
        }
    }
    /* another graph, never launched: its site must not show */
    ac_cupti_node other = {node_id(OTHER_GRAPH, 1, 0), OTHER_GRAPH, 0, layer_kind[0]};
    assert_int_equal(ac_cupti_log_node(&s->log, &other), AC_OK);
}

/* A serving step that replays the graph, then samples. */
static void replay_step(scene *s, int step, int stray_node)
{
    int occ = new_expected(s, AC_PHASE_DECODE, step, -1, AC_SITE_STEP);
    begin(s, occ);
    uint32_t corr = call(s);
    ac_cupti_launch launch = {corr, GRAPH, AC_PHASE_DECODE, step, s->log.n_marks};
    assert_int_equal(ac_cupti_log_launch(&s->log, &launch), AC_OK);
    for (int slot = 0; slot <= LAYERS + 1; slot++) {
        int layer;
        ac_site_kind kind;
        slot_site(slot, &layer, &kind);
        int site = new_expected(s, AC_PHASE_DECODE, step, layer, kind);
        s->order[s->n_order++] = site;
        for (int k = 0; k < NODES_PER_SITE; k++)
            work(s, k == 1 && slot == 2 ? AC_CUPTI_MEMCPY : AC_CUPTI_KERNEL, corr, node_id(GRAPH, slot, k), GRAPH, site);
    }
    /* a node the probe never saw captured: the launch call's site (the step) takes it */
    if (stray_node)
        work(s, AC_CUPTI_KERNEL, corr, 424242, GRAPH, occ);
    eager_site(s, AC_PHASE_DECODE, step, -1, AC_SITE_SAMPLE, 0, 1);
    end(s, AC_PHASE_DECODE, step, -1, AC_SITE_STEP);
}

static void test_graph_replays_split_by_launch(void **state)
{
    (void)state;
    scene s;
    scene_init(&s);
    capture_forward(&s);
    replay_step(&s, 1, 0);
    replay_step(&s, 2, 1);
    scramble_records(&s);

    ac_cupti_attribution a;
    assert_int_equal(ac_cupti_attribute(&s.log, ORIGIN, &a), AC_OK);
    /* per replay: embedding, 3 blocks, LM head, sample, step; nothing of the capture */
    assert_int_equal(a.count, 2 * (LAYERS + 4));
    check_against_expected(&s, &a);
    assert_int_equal(a.unattributed_records, 0);
    /* step 2's own time is the stray node's kernel: more than its sites add up to */
    int64_t sites = 0;
    for (size_t i = LAYERS + 4; i < 2 * LAYERS + 7; i++)
        sites += a.items[i].busy_ns;
    assert_true(a.items[2 * LAYERS + 7].busy_ns > sites);
    ac_cupti_attribution_free(&a);
    ac_cupti_log_free(&s.log);
}

static void expect_failure(const ac_cupti_log *log, const char *needle)
{
    ac_cupti_attribution a;
    ac_clear_error();
    assert_int_equal(ac_cupti_attribute(log, ORIGIN, &a), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), needle));
    assert_null(a.items);
    assert_int_equal(a.count, 0);
}

static void test_unknown_external_id_fails(void **state)
{
    (void)state;
    scene s;
    scene_init(&s);
    eager_step(&s, AC_PHASE_PREFILL, 0);
    ac_cupti_link stale = {4242, 77777};
    assert_int_equal(ac_cupti_log_link(&s.log, &stale), AC_OK);
    expect_failure(&s.log, "external id 4242, which no site mark pushed");
    ac_cupti_log_free(&s.log);
}

static void test_record_before_any_mark_fails(void **state)
{
    (void)state;
    ac_cupti_log log;
    memset(&log, 0, sizeof log);
    ac_cupti_record r = {AC_CUPTI_KERNEL, 31, ORIGIN + 1, ORIGIN + 2, 0, 0};
    assert_int_equal(ac_cupti_log_record(&log, &r), AC_OK);
    expect_failure(&log, "device record 0 (kernel, correlation 31) came before any site mark");
    ac_cupti_log_free(&log);
}

static void test_contradictions_name_their_item(void **state)
{
    (void)state;
    scene s;
    scene_init(&s);
    capture_forward(&s);
    replay_step(&s, 1, 0);
    /* a replayed kernel of one graph under a launch of another */
    ac_cupti_record wrong = {AC_CUPTI_KERNEL, s.log.launches[0].correlation_id, ORIGIN + 5, ORIGIN + 9,
                             node_id(OTHER_GRAPH, 1, 0), OTHER_GRAPH};
    assert_int_equal(ac_cupti_log_record(&s.log, &wrong), AC_OK);
    expect_failure(&s.log, "graph node 8010 of graph 8, but its launch");
    s.log.n_records--;
    /* one correlation id linked to two sites */
    ac_cupti_link twice = {s.log.marks[0].external_id, s.log.links[s.log.n_links - 1].correlation_id};
    assert_int_equal(ac_cupti_log_link(&s.log, &twice), AC_OK);
    expect_failure(&s.log, "is linked to external ids");
    s.log.n_links--;
    /* a record that ends before it starts */
    ac_cupti_record backwards = {AC_CUPTI_MEMSET, 12, ORIGIN + 9, ORIGIN + 5, 0, 0};
    assert_int_equal(ac_cupti_log_record(&s.log, &backwards), AC_OK);
    expect_failure(&s.log, "(memset, correlation 12) ends at");
    s.log.n_records--;
    /* and once whole again, it attributes */
    ac_cupti_attribution a;
    assert_int_equal(ac_cupti_attribute(&s.log, ORIGIN, &a), AC_OK);
    check_against_expected(&s, &a);
    ac_cupti_attribution_free(&a);
    ac_cupti_log_free(&s.log);
}

#ifdef AC_HAVE_CUDA
/* CUPTI buffers: 8-byte aligned records, one after another. */
typedef struct {
    _Alignas(8) uint8_t bytes[4096];
    size_t used;
} buffer;

static void put(buffer *b, const void *record, size_t size)
{
    assert_true(b->used + size <= sizeof b->bytes);
    memcpy(b->bytes + b->used, record, size);
    b->used += size;
}

static void put_link(buffer *b, CUpti_ExternalCorrelationKind kind, uint64_t id, uint32_t corr)
{
    CUpti_ActivityExternalCorrelation e;
    memset(&e, 0, sizeof e);
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = kind;
    e.externalId = id;
    e.correlationId = corr;
    put(b, &e, sizeof e);
}

static void fill_buffer(buffer *b)
{
    memset(b, 0, sizeof *b);
    put_link(b, (CUpti_ExternalCorrelationKind)AC_CUPTI_EXTERNAL_KIND, 5, 40);
    put_link(b, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 6, 41); /* another tool's */
    CUpti_ActivityAPI api;
    memset(&api, 0, sizeof api);
    api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    api.correlationId = 40;
    put(b, &api, sizeof api);
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.correlationId = 40;
    k.start = 2000;
    k.end = 2600;
    k.graphNodeId = 90;
    k.graphId = 3;
    put(b, &k, sizeof k);
    CUpti_ActivityMemcpy6 c;
    memset(&c, 0, sizeof c);
    c.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    c.correlationId = 40;
    c.start = 2700;
    c.end = 2750;
    put(b, &c, sizeof c);
    CUpti_ActivityMemset4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.correlationId = 43;
    m.start = 2800;
    m.end = 2810;
    put(b, &m, sizeof m);
}

static void test_parse_hand_made_buffer(void **state)
{
    (void)state;
    buffer b;
    fill_buffer(&b);
    ac_cupti_log log;
    memset(&log, 0, sizeof log);
    assert_int_equal(ac_cupti_parse_buffer(b.bytes, b.used, &log), AC_OK);
    assert_int_equal(log.n_links, 1);
    assert_int_equal(log.links[0].external_id, 5);
    assert_int_equal(log.links[0].correlation_id, 40);
    assert_int_equal(log.n_records, 3);
    const ac_cupti_record *k = &log.records[0], *c = &log.records[1], *m = &log.records[2];
    assert_int_equal(k->op, AC_CUPTI_KERNEL);
    assert_int_equal(k->correlation_id, 40);
    assert_int_equal(k->start_ns, 2000);
    assert_int_equal(k->end_ns, 2600);
    assert_int_equal(k->graph_node_id, 90);
    assert_int_equal(k->graph_id, 3);
    assert_int_equal(c->op, AC_CUPTI_MEMCPY);
    assert_int_equal(c->end_ns - c->start_ns, 50);
    assert_int_equal(m->op, AC_CUPTI_MEMSET);
    assert_int_equal(m->correlation_id, 43);
    assert_int_equal(m->end_ns - m->start_ns, 10);
    ac_cupti_log_free(&log);
}

static void test_truncated_buffer_fails(void **state)
{
    (void)state;
    buffer b;
    fill_buffer(&b);
    ac_cupti_log log;
    memset(&log, 0, sizeof log);
    ac_clear_error();
    assert_int_equal(ac_cupti_parse_buffer(b.bytes, b.used - 8, &log), AC_ERR_INVALID);
    assert_non_null(strstr(ac_error_message(), "a truncated record"));
    /* the whole records before the cut were read */
    assert_int_equal(log.n_records, 2);
    ac_cupti_log_free(&log);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_sums_per_layer_and_phase),
        cmocka_unit_test(test_graph_replays_split_by_launch),
        cmocka_unit_test(test_unknown_external_id_fails),
        cmocka_unit_test(test_record_before_any_mark_fails),
        cmocka_unit_test(test_contradictions_name_their_item),
#ifdef AC_HAVE_CUDA
        cmocka_unit_test(test_parse_hand_made_buffer),
        cmocka_unit_test(test_truncated_buffer_fails),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
