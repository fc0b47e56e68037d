/* What the controller's files share: a job's record on disk (job_store.c) and the child
 * process that runs compress (job_child.c). */
#ifndef AC_CONTROL_INTERNAL_H
#define AC_CONTROL_INTERNAL_H

#include <string.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "autocompress/control.h"

/* Copies src into dst[size], cut to fit (messages and names that may be long). */
static inline void ac_copy_text(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- job.json (job_store.c) ---- */

cJSON *ac_job_to_cjson(const ac_job_info *info);
/* Reads DIR/job.json into info; a message naming the file and field on failure. */
ac_status ac_job_read(const char *dir, ac_job_info *info);
/* Writes DIR/job.json whole or not at all. */
ac_status ac_job_write(const ac_job_info *info);
/* 1 when id is a job id this controller makes ("job-" and digits): ids name directories,
 * so nothing else may reach the file system. */
int ac_job_id_valid(const char *id);

/* ---- the child (job_child.c) ---- */

typedef struct {
    pid_t pid;
    int stderr_fd; /* the child's stderr, read by the monitor */
} ac_job_child;

/* Starts `exe compress ...` for the job in its own process group, nice and with the
 * thread count set, stdout appended to DIR/log, stderr into a pipe. Call it from a thread
 * that outlives the child: the child is killed when that thread ends (PR_SET_PDEATHSIG),
 * so a server that dies takes its job with it, and the job can be resumed. */
ac_status ac_job_child_start(const ac_job_info *info, const ac_jobs_config *config, ac_job_child *child);

/* Folds one line of the child's stderr into info: a JSON progress line (task, done,
 * total, unit, rate, eta_s) or compress's "compress: stage N/M NAME: ..." line. Returns 1
 * when the stage changed. */
int ac_job_parse_line(const char *line, ac_job_info *info);

/* The reason a finished compress run missed its contract, from OUT/measure.json. */
void ac_job_missed_reason(const ac_job_info *info, char *message, size_t size);

#endif
