/* Paths built from parts into the caller's buffer. A path that does not fit is an error
 * naming it, never a silent truncation. */
#ifndef AC_UTIL_PATH_H
#define AC_UTIL_PATH_H

#include <stddef.h>

#include "autocompress/status.h"

/* A buffer for any path the system opens (Linux's PATH_MAX), and the longest name a
 * checked directory takes under it (Linux's NAME_MAX; a short relative path such as
 * "search/search.json" counts as one name). */
enum { AC_PATH_MAX = 4096, AC_PATH_NAME_MAX = 255 };

/* out = dir/name: no second '/' when dir ends in one, and name alone when dir is "".
 * Fails with AC_ERR_INVALID ("DIR/NAME: path too long") when it needs more than size
 * bytes. */
ac_status ac_path_join(char *out, size_t size, const char *dir, const char *name);
/* out = path followed by suffix, as "DIR.tmp" (a sibling named after path); fails the
 * same way. */
ac_status ac_path_suffixed(char *out, size_t size, const char *path, const char *suffix);
/* AC_OK when dir/NAME fits an AC_PATH_MAX buffer for every NAME of at most
 * AC_PATH_NAME_MAX bytes, so that a run can check its directory once, before its work,
 * and join names onto it after; else AC_ERR_INVALID naming dir. */
ac_status ac_path_check_dir(const char *dir);

#endif
