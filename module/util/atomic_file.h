/* Files written whole or not at all: the bytes go to PATH.tmp, which is synced and renamed
 * over PATH, so a reader never sees half a file and a failed write leaves the old one in
 * place. Used for checkpoints, config.json, cost tables and manifests. */
#ifndef AC_UTIL_ATOMIC_FILE_H
#define AC_UTIL_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/status.h"

typedef struct {
    const void *data;
    uint64_t nbytes;
} ac_file_piece;

/* Writes the pieces, in order, as the new content of path. */
ac_status ac_write_file_atomically(const char *path, const ac_file_piece *pieces, size_t n);

#endif
