/* Helpers shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): an input as text, or as a
 * file for the parsers that read one. Each harness defines LLVMFuzzerTestOneInput;
 * libFuzzer drives it under scripts/fuzz.sh, and replay.c runs its corpus and
 * regressions in the normal test suite. */
#ifndef AC_FUZZ_INPUT_H
#define AC_FUZZ_INPUT_H

#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (malloc'd; stops at an embedded NUL, as a C
 * string does). */
static inline char *ac_fuzz_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = 0;
    }
    return text;
}

/* The input as an in-memory file: its descriptor (close it), its path in path[64]; -1
 * when it cannot be made. */
static inline int ac_fuzz_file(const uint8_t *data, size_t size, char path[64])
{
    int fd = memfd_create("ac-fuzz", 0);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
