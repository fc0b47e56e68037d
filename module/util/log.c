#include "autocompress/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static ac_log_level current_level = AC_LOG_INFO;
static FILE *log_stream;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int ac_log_level_from_name(const char *name)
{
    for (int i = 0; i <= AC_LOG_OFF; i++)
        if (!strcmp(name, level_names[i]))
            return i;
    return -1;
}

static void read_env_level(void)
{
    const char *env = getenv("AC_LOG_LEVEL");
    int level = env ? ac_log_level_from_name(env) : -1;
    if (level >= 0)
        current_level = (ac_log_level)level;
}

void ac_log_set_level(ac_log_level level)
{
    pthread_once(&env_once, read_env_level);
    current_level = level;
}

ac_log_level ac_log_get_level(void)
{
    pthread_once(&env_once, read_env_level);
    return current_level;
}

void ac_log_set_stream(FILE *stream) { log_stream = stream; }

void ac_log(ac_log_level level, const char *fmt, ...)
{
    if (level < ac_log_get_level() || level >= AC_LOG_OFF)
        return;
    FILE *out = log_stream ? log_stream : stderr;
    struct timespec now;
    struct tm local;
    clock_gettime(CLOCK_REALTIME, &now);
    localtime_r(&now.tv_sec, &local);

    va_list args;
    va_start(args, fmt);
    /* One lock so lines from different threads never interleave. */
    pthread_mutex_lock(&log_lock);
    fprintf(out, "%02d:%02d:%02d.%03ld %-5s ", local.tm_hour, local.tm_min, local.tm_sec,
            now.tv_nsec / 1000000, level_names[level]);
    vfprintf(out, fmt, args);
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&log_lock);
    va_end(args);
}
