/* The child that runs a job: `autocompress compress` on the job's directory, started by
 * fork and exec from the job's monitor thread, and what its stderr says. */
#define _GNU_SOURCE
#include "control/control_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/json_util.h"
#include "util/path.h"

extern char **environ;

enum { MAX_ARGS = 40, MAX_EXTRA_ENV = 4, ARG_TEXT = 64 };

typedef struct {
    char *argv[MAX_ARGS];
    int argc;
    char numbers[MAX_ARGS][ARG_TEXT];
    int n_numbers;
    char contract[AC_JOB_PATH_MAX + 16], out[AC_JOB_PATH_MAX + 16];
} job_args;

static void add(job_args *a, const char *arg) { a->argv[a->argc++] = (char *)arg; }

static void add_number(job_args *a, const char *option, int64_t value)
{
    if (value <= 0)
        return;
    char *text = a->numbers[a->n_numbers++];
    snprintf(text, ARG_TEXT, "%lld", (long long)value);
    add(a, option);
    add(a, text);
}

static void build_args(const ac_job_info *info, const char *exe, job_args *a)
{
    const ac_job_spec *s = &info->spec;
    memset(a, 0, sizeof *a);
    /* cannot fail: info->dir is shorter than AC_JOB_PATH_MAX (its array's size) and the
     * buffers leave 16 bytes past that for the name */
    (void)ac_path_join(a->contract, sizeof a->contract, info->dir, "contract.cfg");
    (void)ac_path_join(a->out, sizeof a->out, info->dir, "out");
    add(a, exe);
    add(a, "compress");
    add(a, "--model");
    add(a, s->parent);
    add(a, "--contract");
    add(a, a->contract);
    add(a, "--data");
    add(a, s->data);
    add(a, "--out");
    add(a, a->out);
    add(a, "--method");
    add(a, s->method);
    if (s->tables[0]) {
        add(a, "--tables");
        add(a, s->tables);
    }
    add_number(a, "--search-tokens", s->search_tokens);
    add_number(a, "--kd-tokens", s->kd_tokens);
    add_number(a, "--batch", s->batch);
    add_number(a, "--seq-len", s->seq_len);
    add_number(a, "--measure-sweeps", s->measure_sweeps);
    add_number(a, "--eval-batches", s->eval_batches);
    add_number(a, "--profile-repeats", s->profile_repeats);
    add(a, "--progress");
    add(a, "json");
    a->argv[a->argc] = NULL;
}

/* The server's environment with the training threads set (built before fork: nothing
 * that allocates may run between fork and exec in a threaded process). */
static char **build_env(int threads, char extra[MAX_EXTRA_ENV][64])
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + MAX_EXTRA_ENV + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (threads <= 0 || (strncmp(environ[i], "OMP_NUM_THREADS=", 16) && strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21)))
            env[k++] = environ[i];
    if (threads > 0) {
        snprintf(extra[0], 64, "OMP_NUM_THREADS=%d", threads);
        snprintf(extra[1], 64, "OPENBLAS_NUM_THREADS=%d", threads);
        env[k++] = extra[0];
        env[k++] = extra[1];
    }
    env[k] = NULL;
    return env;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_child(const job_args *a, char **env, int log_fd, int err_fd, pid_t parent, int nice_level)
{
    setpgid(0, 0); /* cancel kills the group: compress and its stage processes */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the server blocks SIGINT and SIGTERM */
    signal(SIGPIPE, SIG_DFL);
    if (nice_level > 0)
        setpriority(PRIO_PROCESS, 0, nice_level);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(126);
    close_range(3, ~0U, 0); /* the server's sockets and files stay the server's */
    execve(a->argv[0], a->argv, env);
    _exit(127);
}

ac_status ac_job_child_start(const ac_job_info *info, const ac_jobs_config *config, ac_job_child *child)
{
    job_args a;
    build_args(info, config->exe, &a);
    char extra[MAX_EXTRA_ENV][64];
    char **env = build_env(config->threads, extra);
    if (!env)
        return ac_fail(AC_ERR_NOMEM, "job %s: out of memory", info->id);
    char log_path[AC_JOB_PATH_MAX + 16];
    ac_status st = ac_path_join(log_path, sizeof log_path, info->dir, "log");
    int log_fd = st == AC_OK ? open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    int fds[2] = {-1, -1};
    if (st == AC_OK && log_fd < 0)
        st = ac_fail(AC_ERR_IO, "job %s: cannot open %s: %s", info->id, log_path, strerror(errno));
    else if (st == AC_OK && pipe2(fds, O_CLOEXEC) != 0)
        st = ac_fail(AC_ERR_IO, "job %s: cannot create a pipe: %s", info->id, strerror(errno));
    pid_t parent = getpid();
    pid_t pid = st == AC_OK ? fork() : -1;
    if (st == AC_OK && pid < 0)
        st = ac_fail(AC_ERR_IO, "job %s: cannot fork: %s", info->id, strerror(errno));
    if (pid == 0)
        exec_child(&a, env, log_fd, fds[1], parent, config->nice);
    if (pid > 0)
        setpgid(pid, pid); /* as the child does: a cancel right away finds the group */
    free(env);
    if (log_fd >= 0)
        close(log_fd);
    if (fds[1] >= 0)
        close(fds[1]);
    if (st != AC_OK) {
        if (fds[0] >= 0)
            close(fds[0]);
        return st;
    }
    child->pid = pid;
    child->stderr_fd = fds[0];
    return AC_OK;
}

/* ---- what the child says ---- */

static int parse_stage(const char *line, ac_job_info *info)
{
    int index = 0, count = 0;
    char name[16] = "";
    if (sscanf(line, "compress: stage %d/%d %15[a-z]:", &index, &count, name) != 3)
        return 0;
    snprintf(info->stage, sizeof info->stage, "%s", name);
    info->stage_index = index;
    info->stage_count = count;
    info->task[0] = info->unit[0] = '\0';
    info->done = info->total = info->rate = 0;
    info->eta_s = -1;
    return 1;
}

static double number_or(const cJSON *o, const char *key, double fallback)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

int ac_job_parse_line(const char *line, ac_job_info *info)
{
    if (line[0] != '{')
        return parse_stage(line, info);
    cJSON *o = cJSON_Parse(line);
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(o, "task");
    const cJSON *unit = cJSON_GetObjectItemCaseSensitive(o, "unit");
    if (cJSON_IsString(task) && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "done"))) {
        snprintf(info->task, sizeof info->task, "%s", task->valuestring);
        snprintf(info->unit, sizeof info->unit, "%s", cJSON_IsString(unit) ? unit->valuestring : "");
        info->done = number_or(o, "done", 0);
        info->total = number_or(o, "total", 0);
        info->rate = number_or(o, "rate", 0);
        info->eta_s = number_or(o, "eta_s", -1);
    }
    cJSON_Delete(o);
    return 0;
}

void ac_job_missed_reason(const ac_job_info *info, char *message, size_t size)
{
    static const char *const keys[] = {"latency_ms", "throughput_tok_s", "memory_bytes"};
    char path[AC_JOB_PATH_MAX + 32];
    /* cannot fail: info->dir is shorter than AC_JOB_PATH_MAX and the name is under 32 bytes */
    (void)ac_path_join(path, sizeof path, info->dir, "out/measure.json");
    cJSON *m = NULL;
    snprintf(message, size, "measured to miss its contract");
    if (ac_read_json_file(path, 1 << 20, &m) != AC_OK)
        return;
    size_t used = strlen(message);
    const char *sep = ": ";
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(m, keys[k]);
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(q, "target")) ||
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "pass")) || used >= size)
            continue;
        used += (size_t)snprintf(message + used, size - used, "%s%s %.4g against a target of %.4g", sep, keys[k],
                                 number_or(q, "measured", 0), number_or(q, "target", 0));
        sep = "; ";
    }
    cJSON_Delete(m);
}
