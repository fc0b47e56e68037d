/* tokenizer.json: load, then encode a text and decode what it gives. */
#include "fuzz_input.h"

#include "autocompress/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ac_tokenizer *tok = NULL;
    if (ac_tokenizer_load_buffer((const char *)data, size, "fuzz.json", &tok) != AC_OK)
        return 0;
    static const char text[] = "Hello, world! \xc3\xa9t\xc3\xa9 <|endoftext|> 12345\n\tdef f(x): return x";
    int32_t *ids = NULL;
    size_t n = 0;
    if (ac_tokenizer_encode(tok, text, sizeof text - 1, &ids, &n) == AC_OK) {
        char *back = NULL;
        if (ac_tokenizer_decode(tok, ids, n, &back, NULL) == AC_OK)
            free(back);
    }
    free(ids);
    ac_tokenizer_free(tok);
    return 0;
}
