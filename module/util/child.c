/* Work in child processes (measurements, compress stages): each gets its own memory peak
 * and a fresh OpenMP thread pool. The child streams frames to the parent over a pipe: 'D'
 * frames carry the result, one 'E' frame a failure (its status and message), 'H' frames
 * say it is alive.
 *
 * libgomp's thread pool does not survive fork: a child whose parent has run an OpenMP
 * region hangs at its first one. The child therefore sends a heartbeat right after its
 * first parallel region; without one within 30 s (by default) the parent kills it and
 * says why, instead of waiting forever. */
#include "util/child.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

static int write_frame(int fd, char type, const void *data, size_t bytes)
{
    uint64_t len = bytes;
    return write_all(fd, &type, 1) && write_all(fd, &len, sizeof len) && write_all(fd, data, bytes);
}

static int start_timeout_s = 30;

void ac_child_set_start_timeout(int seconds) { start_timeout_s = seconds > 0 ? seconds : 30; }

ac_status ac_child_heartbeat(int fd)
{
    if (!write_frame(fd, 'H', NULL, 0))
        return ac_fail(AC_ERR_IO, "child: cannot reach the parent: %s", strerror(errno));
    return AC_OK;
}

ac_status ac_child_start_team(int fd)
{
    int team = 0;
#pragma omp parallel
    {
#pragma omp atomic
        team++;
    }
    return team > 0 ? ac_child_heartbeat(fd) : AC_OK;
}

ac_status ac_child_write(int fd, const void *data, size_t bytes)
{
    if (!write_frame(fd, 'D', data, bytes))
        return ac_fail(AC_ERR_IO, "child: cannot send %zu bytes to the parent: %s", bytes, strerror(errno));
    return AC_OK;
}

/* Reads exactly n bytes; 0 at a clean end of stream before the first byte, -1 on error. */
static int read_all(int fd, void *data, size_t n)
{
    char *p = data;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return got == 0 && r == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

ac_status ac_run_in_child(ac_child_fn fn, void *arg, void **out, size_t *bytes)
{
    *out = NULL;
    *bytes = 0;
    int fds[2];
    if (pipe(fds) != 0)
        return ac_fail(AC_ERR_IO, "child: cannot create a pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return ac_fail(AC_ERR_IO, "child: cannot fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* a child outlives no parent: one killed (a job cancelled, kill -9) takes its
         * stage with it instead of leaving it writing into a run that is resumed */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(fds[0]);
        signal(SIGPIPE, SIG_IGN);
        ac_status st = fn(arg, fds[1]);
        if (st != AC_OK) {
            const char *msg = ac_error_message();
            int32_t code = (int32_t)st;
            size_t n = strlen(msg);
            char *frame = malloc(sizeof code + n);
            if (frame) {
                memcpy(frame, &code, sizeof code);
                memcpy(frame + sizeof code, msg, n);
                write_frame(fds[1], 'E', frame, sizeof code + n);
            }
            free(frame);
        }
        close(fds[1]);
        _exit(st == AC_OK ? 0 : 1);
    }
    close(fds[1]);
    char *buf = NULL, *err = NULL;
    size_t len = 0, cap = 0, err_len = 0;
    ac_status st = AC_OK;
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int ready;
    while ((ready = poll(&pfd, 1, start_timeout_s * 1000)) < 0 && errno == EINTR) {
    }
    if (ready == 0) {
        kill(pid, SIGKILL);
        st = ac_fail(AC_ERR_INTERNAL, "child: no sign of life within %d s; a process that has run OpenMP cannot fork "
                                      "measurements (libgomp's threads do not survive fork)", start_timeout_s);
    }
    while (st == AC_OK) {
        char type;
        uint64_t n;
        int r = read_all(fds[0], &type, 1);
        if (r == 0)
            break;
        if (r < 0 || read_all(fds[0], &n, sizeof n) != 1 || (type != 'D' && type != 'E' && type != 'H')) {
            st = ac_fail(AC_ERR_INTERNAL, "child: broken result stream");
            break;
        }
        if (type == 'H')
            continue;
        char **dst = type == 'D' ? &buf : &err;
        size_t *dlen = type == 'D' ? &len : &err_len;
        size_t need = *dlen + (size_t)n;
        if (type == 'D' && need > cap) {
            cap = need > 2 * cap ? need : 2 * cap;
            char *grown = realloc(buf, cap ? cap : 1);
            if (!grown) {
                st = ac_fail(AC_ERR_NOMEM, "child: out of memory for its result");
                break;
            }
            buf = grown;
        } else if (type == 'E') {
            char *grown = realloc(err, need + 1);
            if (!grown) {
                st = ac_fail(AC_ERR_NOMEM, "child: out of memory");
                break;
            }
            err = grown;
        }
        if (n > 0 && read_all(fds[0], *dst + *dlen, (size_t)n) != 1) {
            st = ac_fail(AC_ERR_INTERNAL, "child: truncated result");
            break;
        }
        *dlen = need;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (st == AC_OK && err && err_len >= sizeof(int32_t)) {
        int32_t code;
        memcpy(&code, err, sizeof code);
        err[err_len] = '\0';
        st = ac_fail(code > 0 ? (ac_status)code : AC_ERR_INTERNAL, "%s", err + sizeof code);
    } else if (st == AC_OK && WIFSIGNALED(status)) {
        st = ac_fail(AC_ERR_INTERNAL, "child: killed by signal %d", WTERMSIG(status));
    } else if (st == AC_OK && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        st = ac_fail(AC_ERR_INTERNAL, "child: exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    free(err);
    if (st != AC_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *bytes = len;
    return AC_OK;
}
