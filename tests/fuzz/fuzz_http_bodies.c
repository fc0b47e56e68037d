/* Request bodies of the server's endpoints, through the API layer without sockets: a
 * /v1/completions body parsed and tokenized against the prose parent's tokenizer, and
 * the JSON reader every admin body goes through. */
#include "fuzz_input.h"

#include <cjson/cJSON.h>

#include "server/srv.h"

static srv_model *model;
static srv_config config;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    srv_config_defaults(&config);
    config.context_tokens = 512;
    if (srv_model_load(AC_SOURCE_DIR "/examples/parent/prose", NULL, "cpu", AC_DTYPE_F32, &model) != AC_OK) {
        fprintf(stderr, "fuzz_http_bodies: cannot load the prose parent: %s\n", ac_error_message());
        abort(); /* a harness without its model fuzzes nothing */
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_error err;
    memset(&err, 0, sizeof err);
    srv_request *req = srv_api_parse_completion((const char *)data, size, model, &config, &err);
    if (req)
        srv_request_free(req);
    else
        free(srv_api_error_json(&err));
    cJSON_Delete(srv_json_parse_whole((const char *)data, size, NULL));
    return 0;
}
