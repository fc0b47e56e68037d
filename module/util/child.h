/* Work in a forked child process, its result streamed back to the parent over a pipe:
 * the child gets its own memory peak and a fresh OpenMP thread pool, and a crash or a
 * hang stays in the child. Measurements and compress stages run this way. */
#ifndef AC_UTIL_CHILD_H
#define AC_UTIL_CHILD_H

#include <stddef.h>

#include "autocompress/status.h"

/* Work for a child: writes its result with ac_child_write; a failure's message goes
 * back to the parent. */
typedef ac_status (*ac_child_fn)(void *arg, int fd);
ac_status ac_child_write(int fd, const void *data, size_t bytes);
/* Tells the parent the child runs (send it once the child has run an OpenMP region). */
ac_status ac_child_heartbeat(int fd);
/* Starts the child's OpenMP thread pool (one empty region), then sends the heartbeat: the
 * start of a child that does OpenMP work (it hangs there when the parent ran OpenMP). */
ac_status ac_child_start_team(int fd);
/* How long a child may take to send its first frame (default 30 s; tests shorten it). */
void ac_child_set_start_timeout(int seconds);
/* Runs fn in a forked child; *out (malloc'd, *bytes long) is what it wrote. */
ac_status ac_run_in_child(ac_child_fn fn, void *arg, void **out, size_t *bytes);

#endif
