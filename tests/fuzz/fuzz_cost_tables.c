/* Cost tables JSON (autocompress profile's output). */
#include "fuzz_input.h"

#include "autocompress/cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = ac_fuzz_file(data, size, path);
    if (fd < 0)
        return 0;
    ac_cost_tables *tables = NULL;
    if (ac_cost_tables_read(path, &tables) == AC_OK)
        ac_cost_tables_free(tables);
    close(fd);
    return 0;
}
