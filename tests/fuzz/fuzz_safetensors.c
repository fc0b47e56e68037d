/* .safetensors files: the header, the offsets, the metadata; every tensor visited. */
#include "fuzz_input.h"

#include "autocompress/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = ac_fuzz_file(data, size, path);
    if (fd < 0)
        return 0;
    ac_safetensors *st = NULL;
    if (ac_safetensors_open(path, &st) == AC_OK) {
        for (size_t i = 0; i < ac_safetensors_count(st); i++) {
            const ac_tensor_view *v = ac_safetensors_at(st, i);
            ac_safetensors_find(st, v->name);
            ac_tensor_view_numel(v);
        }
        for (size_t i = 0; i < ac_safetensors_metadata_count(st); i++) {
            const char *key, *value;
            ac_safetensors_metadata_at(st, i, &key, &value);
        }
        ac_safetensors_close(st);
    }
    close(fd);
    return 0;
}
