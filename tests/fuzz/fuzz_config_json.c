/* config.json (nemotron_h and nemotron_h_puzzle, also arch.json): parse, count. */
#include "fuzz_input.h"

#include "autocompress/arch.h"
#include "autocompress/config_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = ac_fuzz_text(data, size);
    ac_arch arch;
    if (text && ac_config_json_parse(text, "fuzz.json", &arch) == AC_OK) {
        ac_arch_param_counts(&arch);
        ac_arch_free(&arch);
    }
    free(text);
    return 0;
}
