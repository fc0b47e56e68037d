/* Recompression jobs: one at a time, each a compress child watched by a monitor thread
 * that keeps the job's record (job.json) current and, at the end, asks the server to swap
 * the result in. */
#define _GNU_SOURCE
#include "control/control_internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/fs_util.h"
#include "util/json_util.h"
#include "util/path.h"
#include "autocompress/clock.h"
#include "autocompress/log.h"

struct ac_jobs {
    char dir[AC_JOB_PATH_MAX];
    char exe[AC_JOB_PATH_MAX];
    ac_jobs_config config;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int running;            /* current is the running job */
    int cancel, closing;    /* why the running child is being stopped */
    ac_job_info current;
    pthread_t monitor;
    int monitor_joinable;
};

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A record that cannot be written is logged, not fatal: the job runs on, and its state in
 * memory is what the API shows. */
static void save(const ac_job_info *info)
{
    if (ac_job_write(info) != AC_OK)
        ac_warn("job %s: %s", info->id, ac_error_message());
}

/* ---- the monitor thread ---- */

/* Reads the child's stderr to its end, line by line, into the log and the job's progress. */
static void follow_child(ac_jobs *jobs, int fd, FILE *log)
{
    FILE *in = fdopen(fd, "r");
    if (!in) {
        close(fd);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    double last_save = ac_monotonic_s();
    while ((n = getline(&line, &cap, in)) > 0) {
        if (log) {
            fwrite(line, 1, (size_t)n, log);
            fflush(log);
        }
        if (line[n - 1] == '\n')
            line[n - 1] = '\0';
        pthread_mutex_lock(&jobs->mu);
        int changed = ac_job_parse_line(line, &jobs->current);
        ac_job_info snapshot = jobs->current;
        pthread_mutex_unlock(&jobs->mu);
        if (changed || ac_monotonic_s() - last_save > 5) {
            save(&snapshot);
            last_save = ac_monotonic_s();
        }
    }
    free(line);
    fclose(in);
}

/* out = DIR/NAME for a file in a job's directory. It cannot fail: job directories are
 * shorter than AC_JOB_PATH_MAX (the size of ac_job_info.dir; ac_jobs_open bounds the jobs
 * directory) and the callers' buffers leave 16 bytes past that for the name. */
static void job_file(char *out, size_t size, const char *dir, const char *name)
{
    (void)ac_path_join(out, size, dir, name);
}

/* The last line the child wrote that is not progress: its error, when it failed. */
static void last_error_line(const char *dir, char *out, size_t size)
{
    char path[AC_JOB_PATH_MAX + 16];
    job_file(path, sizeof path, dir, "log");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (line[0] != '{' && line[0] != '\n') {
            line[strcspn(line, "\n")] = '\0';
            ac_copy_text(out, size, line);
        }
    fclose(f);
}

/* The job's state from how the child ended. */
static void conclude(ac_jobs *jobs, ac_job_info *job, int status)
{
    job->pid = 0;
    job->ended_at = unix_now();
    job->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    job->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (jobs->cancel) {
        job->state = AC_JOB_CANCELLED;
        snprintf(job->message, sizeof job->message, "cancelled in stage %s; resume continues it", job->stage);
    } else if (jobs->closing) {
        job->state = AC_JOB_INTERRUPTED;
        snprintf(job->message, sizeof job->message, "the server stopped in stage %s; resume continues it", job->stage);
    } else if (job->exit_code == 0) {
        job->state = AC_JOB_SUCCEEDED;
        snprintf(job->message, sizeof job->message, "measured to meet its contract");
    } else if (job->exit_code == 3) {
        job->state = AC_JOB_MISSED;
        ac_job_missed_reason(job, job->message, sizeof job->message);
    } else {
        job->state = AC_JOB_FAILED;
        char why[400] = "";
        last_error_line(job->dir, why, sizeof why);
        if (job->signal)
            snprintf(job->message, sizeof job->message, "killed by signal %d in stage %s; resume continues it",
                     job->signal, job->stage);
        else
            snprintf(job->message, sizeof job->message, "exit %d in stage %s: %s", job->exit_code, job->stage, why);
    }
}

static void swap_result(ac_jobs *jobs, ac_job_info *job)
{
    char model[AC_JOB_PATH_MAX + 16], why[256] = "";
    job_file(model, sizeof model, job->dir, "out/model");
    if (!job->spec.swap_auto || !jobs->config.swap)
        return;
    job->swapped = jobs->config.swap(jobs->config.swap_ctx, job, model, why, sizeof why);
    size_t used = strlen(job->message);
    snprintf(job->message + used, sizeof job->message - used, job->swapped ? "; swapped in" : "; not swapped: %s",
             why);
}

static void *monitor_main(void *arg)
{
    ac_jobs *jobs = arg;
    pthread_mutex_lock(&jobs->mu);
    ac_job_info job = jobs->current;
    pthread_mutex_unlock(&jobs->mu);

    ac_job_child child;
    int status = 0;
    if (ac_job_child_start(&job, &jobs->config, &child) != AC_OK) {
        job.state = AC_JOB_FAILED;
        snprintf(job.message, sizeof job.message, "%s", ac_error_message());
    } else {
        pthread_mutex_lock(&jobs->mu);
        jobs->current.pid = (int)child.pid;
        if (jobs->cancel) /* cancelled before the child had a pid */
            kill(-child.pid, SIGKILL);
        job = jobs->current;
        pthread_mutex_unlock(&jobs->mu);
        save(&job);
        char log_path[AC_JOB_PATH_MAX + 16];
        job_file(log_path, sizeof log_path, job.dir, "log");
        FILE *log = fopen(log_path, "a");
        follow_child(jobs, child.stderr_fd, log);
        if (log)
            fclose(log);
        while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&jobs->mu);
        job = jobs->current;
        conclude(jobs, &job, status);
        pthread_mutex_unlock(&jobs->mu);
        if (job.state == AC_JOB_SUCCEEDED)
            swap_result(jobs, &job);
    }
    job.pid = 0;
    if (!job.ended_at)
        job.ended_at = unix_now();
    save(&job);
    ac_info("job %s: %s: %s", job.id, ac_job_state_name(job.state), job.message);
    pthread_mutex_lock(&jobs->mu);
    jobs->current = job;
    jobs->running = 0;
    pthread_cond_broadcast(&jobs->idle);
    pthread_mutex_unlock(&jobs->mu);
    return NULL;
}

/* Starts the monitor (which starts the child) for jobs->current; under jobs->mu. */
static ac_jobs_result start_monitor(ac_jobs *jobs)
{
    if (jobs->monitor_joinable) { /* the previous job's monitor has finished (running == 0) */
        pthread_join(jobs->monitor, NULL);
        jobs->monitor_joinable = 0;
    }
    jobs->cancel = 0;
    jobs->running = 1;
    jobs->current.state = AC_JOB_RUNNING;
    jobs->current.started_at = unix_now();
    jobs->current.ended_at = 0;
    jobs->current.exit_code = -1;
    jobs->current.signal = 0;
    jobs->current.swapped = 0;
    jobs->current.message[0] = '\0';
    save(&jobs->current);
    int rc = pthread_create(&jobs->monitor, NULL, monitor_main, jobs);
    if (rc != 0) {
        jobs->running = 0;
        jobs->current.state = AC_JOB_FAILED;
        snprintf(jobs->current.message, sizeof jobs->current.message, "cannot start a thread: %s", strerror(rc));
        save(&jobs->current);
        ac_fail(AC_ERR_INTERNAL, "job %s: cannot start a thread: %s", jobs->current.id, strerror(rc));
        return AC_JOBS_ERROR;
    }
    jobs->monitor_joinable = 1;
    return AC_JOBS_DONE;
}

/* ---- the directory ---- */

typedef struct {
    char (*ids)[AC_JOB_ID_MAX];
    size_t count;
} id_list;

static int newer_first(const void *a, const void *b)
{
    long x = atol((const char *)a + 4), y = atol((const char *)b + 4);
    return (x < y) - (x > y);
}

static ac_status list_ids(const char *dir, id_list *list)
{
    list->ids = NULL;
    list->count = 0;
    DIR *d = opendir(dir);
    if (!d && errno == ENOENT)
        return AC_OK; /* made with the first job */
    if (!d)
        return ac_fail(AC_ERR_IO, "jobs: cannot read %s: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    ac_status st = AC_OK;
    while (st == AC_OK && (e = readdir(d)) != NULL) {
        if (!ac_job_id_valid(e->d_name))
            continue;
        if (list->count == cap) {
            cap = cap ? 2 * cap : 16;
            void *grown = realloc(list->ids, cap * sizeof *list->ids);
            if (!grown) {
                st = ac_fail(AC_ERR_NOMEM, "jobs: out of memory");
                break;
            }
            list->ids = grown;
        }
        ac_copy_text(list->ids[list->count++], AC_JOB_ID_MAX, e->d_name);
    }
    closedir(d);
    if (st == AC_OK && list->count > 1)
        qsort(list->ids, list->count, sizeof *list->ids, newer_first);
    return st;
}

static ac_status job_dir(const ac_jobs *jobs, const char *id, char *out, size_t size)
{
    return ac_path_join(out, size, jobs->dir, id);
}

/* Jobs a previous server left running: nothing runs them now. */
static void mark_interrupted(ac_jobs *jobs, const id_list *list)
{
    for (size_t i = 0; i < list->count; i++) {
        char dir[AC_JOB_PATH_MAX];
        ac_job_info info;
        if (job_dir(jobs, list->ids[i], dir, sizeof dir) != AC_OK || ac_job_read(dir, &info) != AC_OK) {
            ac_warn("jobs: %s", ac_error_message());
            continue;
        }
        if (info.state != AC_JOB_RUNNING)
            continue;
        info.state = AC_JOB_INTERRUPTED;
        info.pid = 0;
        info.ended_at = unix_now();
        snprintf(info.message, sizeof info.message, "the server stopped in stage %s; resume continues it",
                 info.stage[0] ? info.stage : "(none)");
        save(&info);
    }
}

ac_status ac_jobs_open(const ac_jobs_config *config, ac_jobs **out)
{
    *out = NULL;
    if (!config->jobs_dir || !config->exe)
        return ac_fail(AC_ERR_INVALID, "jobs: a jobs directory and the autocompress binary are needed");
    if (strlen(config->jobs_dir) >= AC_JOB_PATH_MAX - 64 || strlen(config->exe) >= AC_JOB_PATH_MAX)
        return ac_fail(AC_ERR_INVALID, "jobs: the path %s is too long", config->jobs_dir);
    if (config->nice < 0 || config->nice > 19 || config->threads < 0)
        return ac_fail(AC_ERR_INVALID, "jobs: nice must be 0..19 and threads >= 0 (got %d, %d)", config->nice,
                       config->threads);
    ac_jobs *jobs = calloc(1, sizeof *jobs);
    if (!jobs)
        return ac_fail(AC_ERR_NOMEM, "jobs: out of memory");
    snprintf(jobs->dir, sizeof jobs->dir, "%s", config->jobs_dir);
    snprintf(jobs->exe, sizeof jobs->exe, "%s", config->exe);
    jobs->config = *config;
    jobs->config.jobs_dir = jobs->dir;
    jobs->config.exe = jobs->exe;
    pthread_mutex_init(&jobs->mu, NULL);
    pthread_cond_init(&jobs->idle, NULL);
    id_list list;
    ac_status st = list_ids(jobs->dir, &list);
    if (st == AC_OK)
        mark_interrupted(jobs, &list);
    free(list.ids);
    if (st != AC_OK) {
        ac_jobs_close(jobs);
        return st;
    }
    *out = jobs;
    return AC_OK;
}

void ac_jobs_close(ac_jobs *jobs)
{
    if (!jobs)
        return;
    pthread_mutex_lock(&jobs->mu);
    if (jobs->running && jobs->current.pid > 0) {
        jobs->closing = 1;
        kill(-jobs->current.pid, SIGTERM);
    }
    pthread_mutex_unlock(&jobs->mu);
    if (jobs->monitor_joinable)
        pthread_join(jobs->monitor, NULL);
    pthread_mutex_destroy(&jobs->mu);
    pthread_cond_destroy(&jobs->idle);
    free(jobs);
}

/* The next id: one past the highest in the directory. */
static ac_status next_id(ac_jobs *jobs, char id[AC_JOB_ID_MAX])
{
    id_list list;
    ac_status st = list_ids(jobs->dir, &list);
    long next = st == AC_OK && list.count ? atol(list.ids[0] + 4) + 1 : 1;
    free(list.ids);
    snprintf(id, AC_JOB_ID_MAX, "job-%04ld", next);
    return st;
}

ac_jobs_result ac_jobs_submit(ac_jobs *jobs, const ac_job_spec *spec, const char *contract_text,
                              char id[AC_JOB_ID_MAX])
{
    pthread_mutex_lock(&jobs->mu);
    ac_jobs_result r = AC_JOBS_ERROR;
    ac_job_info job;
    memset(&job, 0, sizeof job);
    char contract[AC_JOB_PATH_MAX + 16];
    if (jobs->running) {
        r = AC_JOBS_BUSY;
        ac_fail(AC_ERR_INVALID, "job %s is running; one job runs at a time", jobs->current.id);
    } else if (next_id(jobs, job.id) == AC_OK && job_dir(jobs, job.id, job.dir, sizeof job.dir) == AC_OK) {
        job_file(contract, sizeof contract, job.dir, "contract.cfg");
        ac_status st = ac_make_dirs(jobs->dir); /* the jobs directory comes with the first job */
        if (st == AC_OK && mkdir(job.dir, 0755) != 0)
            st = ac_fail(AC_ERR_IO, "jobs: cannot create %s: %s", job.dir, strerror(errno));
        if (st == AC_OK && ac_write_text_file(contract, contract_text) == AC_OK) {
            job.spec = *spec;
            job.created_at = unix_now();
            job.eta_s = -1;
            jobs->current = job;
            r = start_monitor(jobs);
        }
    }
    if (r == AC_JOBS_DONE)
        snprintf(id, AC_JOB_ID_MAX, "%s", job.id);
    pthread_mutex_unlock(&jobs->mu);
    return r;
}

ac_jobs_result ac_jobs_cancel(ac_jobs *jobs, const char *id)
{
    ac_job_info info;
    ac_jobs_result r = ac_jobs_get(jobs, id, &info);
    if (r != AC_JOBS_DONE)
        return r;
    pthread_mutex_lock(&jobs->mu);
    if (jobs->running && !strcmp(jobs->current.id, id)) {
        jobs->cancel = 1;
        if (jobs->current.pid > 0)
            kill(-jobs->current.pid, SIGKILL);
    } else {
        r = AC_JOBS_WRONG_STATE;
        ac_fail(AC_ERR_INVALID, "job %s is %s, not running", id, ac_job_state_name(info.state));
    }
    pthread_mutex_unlock(&jobs->mu);
    return r;
}

ac_jobs_result ac_jobs_resume(ac_jobs *jobs, const char *id)
{
    ac_job_info info;
    ac_jobs_result r = ac_jobs_get(jobs, id, &info);
    if (r != AC_JOBS_DONE)
        return r;
    pthread_mutex_lock(&jobs->mu);
    if (jobs->running) {
        r = AC_JOBS_BUSY;
        ac_fail(AC_ERR_INVALID, "job %s is running; one job runs at a time", jobs->current.id);
    } else if (info.state != AC_JOB_FAILED && info.state != AC_JOB_CANCELLED && info.state != AC_JOB_INTERRUPTED) {
        r = AC_JOBS_WRONG_STATE;
        ac_fail(AC_ERR_INVALID, "job %s is %s: only a failed, cancelled or interrupted job resumes", id,
                ac_job_state_name(info.state));
    } else {
        jobs->current = info;
        r = start_monitor(jobs);
    }
    pthread_mutex_unlock(&jobs->mu);
    return r;
}

ac_jobs_result ac_jobs_get(ac_jobs *jobs, const char *id, ac_job_info *info)
{
    if (!ac_job_id_valid(id)) {
        ac_fail(AC_ERR_INVALID, "'%s' is not a job id", id);
        return AC_JOBS_NOT_FOUND;
    }
    pthread_mutex_lock(&jobs->mu);
    int current = !strcmp(jobs->current.id, id);
    if (current)
        *info = jobs->current;
    pthread_mutex_unlock(&jobs->mu);
    if (current)
        return AC_JOBS_DONE;
    char dir[AC_JOB_PATH_MAX];
    if (job_dir(jobs, id, dir, sizeof dir) != AC_OK)
        return AC_JOBS_ERROR;
    if (!ac_path_exists(dir)) {
        ac_fail(AC_ERR_INVALID, "no job %s", id);
        return AC_JOBS_NOT_FOUND;
    }
    return ac_job_read(dir, info) == AC_OK ? AC_JOBS_DONE : AC_JOBS_ERROR;
}

int ac_jobs_running(ac_jobs *jobs, ac_job_info *info)
{
    pthread_mutex_lock(&jobs->mu);
    int running = jobs->running;
    if (running && info)
        *info = jobs->current;
    pthread_mutex_unlock(&jobs->mu);
    return running;
}

int ac_jobs_wait_idle(ac_jobs *jobs, double timeout_s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + timeout_s;
    until.tv_sec = (time_t)t;
    until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&jobs->mu);
    int rc = 0;
    while (jobs->running && rc == 0)
        rc = pthread_cond_timedwait(&jobs->idle, &jobs->mu, &until);
    int idle = !jobs->running;
    pthread_mutex_unlock(&jobs->mu);
    return idle;
}

char *ac_jobs_list_json(ac_jobs *jobs)
{
    id_list list;
    if (list_ids(jobs->dir, &list) != AC_OK)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "jobs") : NULL;
    for (size_t i = 0; arr && i < list.count; i++) {
        ac_job_info info;
        if (ac_jobs_get(jobs, list.ids[i], &info) != AC_JOBS_DONE)
            continue; /* a damaged record is skipped here; GET /admin/jobs/ID says what is wrong */
        cJSON *o = ac_job_to_cjson(&info);
        if (o)
            cJSON_AddItemToArray(arr, o);
    }
    free(list.ids);
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}
