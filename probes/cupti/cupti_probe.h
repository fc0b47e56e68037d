/* The CUPTI probe: device time per site, for the CUDA backend (built only with AC_CUDA;
 * ac_cupti_probe_create is public, in autocompress/probe.h, for the backend's
 * probe_create). How it tags work with sites, eagerly and under CUDA graphs, is told at
 * the top of cupti_probe.c; the attribution itself is plain C in attribute.h. */
#ifndef AUTOCOMPRESS_CUPTI_PROBE_H
#define AUTOCOMPRESS_CUPTI_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/probe.h"
#include "probes/cupti/attribute.h"

/* The detail behind the spans of the last successful collect: per occurrence the sum of
 * its records' durations (what a span's end - start is), its first start and last end,
 * its record count; and the work no site took (unattributed) or CUPTI could not time.
 * Valid until the next collect or reset. */
const ac_cupti_attribution *ac_cupti_probe_attribution(const ac_probe *probe);

/* Appends a buffer of CUPTI activity records to the log: external-correlation records of
 * the probe's own kind as links; kernels, memcpys and memsets as records; other kinds
 * (API records) are skipped. Calls cuptiActivityGetNextRecord, which needs libcupti but
 * no GPU. AC_ERR_INVALID when bytes after the last whole record show a truncated one. */
ac_status ac_cupti_parse_buffer(const uint8_t *buf, size_t valid, ac_cupti_log *log);

/* The external correlation kind the probe pushes its ids under (a
 * CUpti_ExternalCorrelationKind): CUSTOM2, clear of the CUSTOM0 and CUSTOM1 that other
 * in-process profilers (PyTorch's Kineto) use. */
#define AC_CUPTI_EXTERNAL_KIND 5

#endif
