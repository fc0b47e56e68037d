/* File-system helpers the writers share. */
#ifndef AC_UTIL_FS_UTIL_H
#define AC_UTIL_FS_UTIL_H

#include "autocompress/status.h"

/* mkdir -p: dir and every missing parent; an existing non-directory is an error naming it. */
ac_status ac_make_dirs(const char *dir);
/* 1 when path names something that exists. */
int ac_path_exists(const char *path);

#endif
