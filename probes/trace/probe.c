/* The probe interface's calls that every implementation shares: optional callbacks are
 * skipped when absent, names of phases and sites. */
#include "autocompress/probe.h"

#include <stdlib.h>

void ac_probe_memory(ac_probe *probe, const ac_memory_sample *sample)
{
    if (!probe->ops->memory)
        return;
    ac_probe_site s = {probe->phase, probe->step, -1, AC_SITE_STEP};
    probe->ops->memory(probe->state, &s, sample);
}

ac_status ac_probe_collect(ac_probe *probe, const ac_span **spans, size_t *count)
{
    if (!probe->ops->collect) {
        *spans = NULL;
        *count = 0;
        return ac_fail(AC_ERR_UNSUPPORTED, "probe: this probe keeps no spans");
    }
    return probe->ops->collect(probe->state, spans, count);
}

void ac_probe_reset(ac_probe *probe)
{
    if (probe->ops->reset)
        probe->ops->reset(probe->state);
}

void ac_probe_free(ac_probe *probe)
{
    if (!probe)
        return;
    if (probe->ops && probe->ops->destroy)
        probe->ops->destroy(probe->state);
    free(probe);
}

const char *ac_phase_name(ac_phase phase)
{
    switch (phase) {
    case AC_PHASE_PREFILL: return "prefill";
    case AC_PHASE_DECODE: return "decode";
    case AC_PHASE_CONTEXT: return "context";
    case AC_PHASE_COUNT: break;
    }
    return "?";
}

const char *ac_site_name(ac_site_kind kind)
{
    switch (kind) {
    case AC_SITE_MAMBA:
    case AC_SITE_ATTENTION:
    case AC_SITE_MLP:
    case AC_SITE_MOE: return ac_block_name((ac_block_kind)kind);
    case AC_SITE_EMBEDDING: return "embedding";
    case AC_SITE_LM_HEAD: return "lm_head";
    case AC_SITE_SAMPLE: return "sample";
    case AC_SITE_STEP: return "step";
    case AC_SITE_COUNT: break;
    }
    return "?";
}
