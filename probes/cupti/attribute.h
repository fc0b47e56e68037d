/* Attribution of CUPTI activity to probe sites, in plain C (no CUDA, no CUPTI), so that
 * all of it runs and is tested on a machine without a GPU.
 *
 * The CUPTI probe (cupti_probe.c) fills an ac_cupti_log while the work runs:
 *   - marks: one per site occurrence (a begin/end pair), appended at its end, with the
 *     fresh external correlation id the probe pushed at its begin and popped at its end;
 *   - links: CUPTI's external-correlation records (external id -> the CUPTI correlation
 *     id of each driver or runtime API call made while that id was on top of the stack);
 *   - records: kernels, memcpys and memsets as the device ran them;
 *   - nodes: for CUDA graphs, the node id of every node of an executable graph whose
 *     original node was captured inside a site, with that site;
 *   - launches: every graph launch, in order, with the phase and step set on the probe.
 * ac_cupti_attribute then turns the log into one occurrence per site occurrence, in the
 * order a CPU probe would record its spans (by the end of the site). */
#ifndef AUTOCOMPRESS_CUPTI_ATTRIBUTE_H
#define AUTOCOMPRESS_CUPTI_ATTRIBUTE_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/probe.h"
#include "autocompress/status.h"

typedef struct {
    ac_probe_site site;
    uint64_t external_id; /* pushed at the site's begin, popped at its end */
    uint64_t parent_id;   /* the enclosing site's external id; 0 at the top level */
    int captured;         /* begun and ended during stream capture: its work never ran here */
} ac_cupti_mark;

typedef struct {
    uint64_t external_id;
    uint32_t correlation_id;
} ac_cupti_link;

typedef enum { AC_CUPTI_KERNEL, AC_CUPTI_MEMCPY, AC_CUPTI_MEMSET } ac_cupti_op;

/* One piece of device work. Times are CUPTI timestamps (ns); both 0 when CUPTI could not
 * time it. */
typedef struct {
    ac_cupti_op op;
    uint32_t correlation_id; /* of the API call that launched it (for a graph: the launch) */
    uint64_t start_ns, end_ns;
    uint64_t graph_node_id; /* 0 unless it ran as a node of a graph launch */
    uint32_t graph_id;
} ac_cupti_record;

typedef struct {
    uint64_t node_id;        /* a node of an executable graph */
    uint32_t graph_exec_id;  /* the executable graph it belongs to */
    int layer;               /* the site it was captured in (its phase and step come from */
    ac_site_kind kind;       /* each launch) */
} ac_cupti_node;

typedef struct {
    uint32_t correlation_id; /* of the graph launch call: the replay's records carry it */
    uint32_t graph_exec_id;
    ac_phase phase;
    int step;
    size_t marks_before; /* marks ended before the launch: where its sites go in the order */
} ac_cupti_launch;

typedef struct {
    ac_cupti_mark *marks;
    ac_cupti_link *links;
    ac_cupti_record *records;
    ac_cupti_node *nodes;
    ac_cupti_launch *launches;
    size_t n_marks, n_links, n_records, n_nodes, n_launches;
    size_t cap_marks, cap_links, cap_records, cap_nodes, cap_launches;
} ac_cupti_log;

/* Appends one item (AC_ERR_NOMEM when the array cannot grow). */
ac_status ac_cupti_log_mark(ac_cupti_log *log, const ac_cupti_mark *mark);
ac_status ac_cupti_log_link(ac_cupti_log *log, const ac_cupti_link *link);
ac_status ac_cupti_log_record(ac_cupti_log *log, const ac_cupti_record *record);
ac_status ac_cupti_log_node(ac_cupti_log *log, const ac_cupti_node *node);
ac_status ac_cupti_log_launch(ac_cupti_log *log, const ac_cupti_launch *launch);
/* Forgets the marks, links, records and launches; keeps the graph nodes, which stay
 * valid as long as their executable graphs live. */
void ac_cupti_log_clear_activity(ac_cupti_log *log);
void ac_cupti_log_free(ac_cupti_log *log);

/* One site occurrence: the device work of the site and of every site nested in it. */
typedef struct {
    ac_probe_site site;
    int64_t busy_ns;        /* sum of the records' durations */
    int64_t first_start_ns; /* the earliest record's start, from the origin; 0 when none */
    int64_t last_end_ns;    /* the latest record's end, from the origin; 0 when none */
    size_t records;
} ac_cupti_occurrence;

typedef struct {
    ac_cupti_occurrence *items; /* in the order a CPU probe records spans: by site end */
    size_t count;
    int64_t unattributed_ns;     /* work whose correlation leads to no site occurrence */
    size_t unattributed_records;
    size_t untimed_records;      /* records CUPTI could not time (left out of every sum) */
} ac_cupti_attribution;

/* Attributes the log's records to site occurrences; origin_ns (a CUPTI timestamp) is
 * subtracted from the times. A record goes, in this order of preference:
 *   - to the occurrence (launch phase and step, node layer and kind) when it ran as a
 *     known node of a known graph launch;
 *   - else to the mark its correlation id is linked to, unless that mark was captured;
 *   - else to the unattributed total.
 * Then every occurrence is added into the one around it: a launch's sites into the mark
 * the launch call was made in, a mark into its parent. Fails with AC_ERR_INVALID and a
 * message naming the item when the log contradicts itself (an unknown external id, a
 * repeated id, records without any mark), AC_ERR_NOMEM when out of memory. On success
 * *out owns its items: free them with ac_cupti_attribution_free. */
ac_status ac_cupti_attribute(const ac_cupti_log *log, int64_t origin_ns, ac_cupti_attribution *out);
void ac_cupti_attribution_free(ac_cupti_attribution *attribution);

#endif
