/* Contracts (libconfig text): parse, print, resolve the targets against a parent. */
#include "fuzz_input.h"

#include "autocompress/contract.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = ac_fuzz_text(data, size);
    ac_contract c;
    if (text && ac_contract_parse_string(text, "fuzz.cfg", &c) == AC_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            ac_contract_print(&c, null);
            fclose(null);
        }
        ac_contract_costs parent = {true, 100.0, true, 1000.0, true, 1.0}, out;
        ac_contract_resolve_targets(&c, &parent, &out);
    }
    free(text);
    return 0;
}
