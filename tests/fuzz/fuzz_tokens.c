/* Token shards (.bin): the header, the count, every id against the vocab. */
#include "fuzz_input.h"

#include "autocompress/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = ac_fuzz_file(data, size, path);
    if (fd < 0)
        return 0;
    ac_tokens *t = NULL;
    if (ac_tokens_open(path, &t) == AC_OK) {
        uint64_t n = ac_tokens_count(t);
        int32_t ids[16];
        ac_tokens_copy(t, 0, n < 16 ? (size_t)n : 16, ids);
        ac_tokens_get(t, n);
        ac_tokens_close(t);
    }
    close(fd);
    return 0;
}
