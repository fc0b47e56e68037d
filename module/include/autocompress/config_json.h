/* Hugging Face config.json for Nemotron-H: reading it into an ac_arch and writing one.
 *
 * Reading accepts model_type "nemotron_h" (the layer pattern from hybrid_override_pattern,
 * letters M * - E, or from layers_block_type, spelled mamba/attention/mlp/moe or
 * linear_attention/full_attention/mlp/moe, as transformers maps them) and
 * "nemotron_h_puzzle" (block_configs: one dict per layer with block_type and per-layer
 * overrides of the global keys; a global pattern is then ignored). Settings the engine
 * cannot run (biases, moe_latent_size, activations other than relu2 / silu) are refused
 * with AC_ERR_UNSUPPORTED. Every message starts with the file (or source) name and names
 * the key, e.g. "x/config.json: block_configs[3].num_experts_per_tok 9 exceeds
 * n_routed_experts 8". The result passes ac_arch_validate.
 *
 * Writing emits "nemotron_h" with hybrid_override_pattern when ac_arch_is_homogeneous
 * (and every MoE layer has a shared expert), else "nemotron_h_puzzle" with one full
 * block_configs entry per layer; reading the output back gives the same ac_arch. */
#ifndef AUTOCOMPRESS_CONFIG_JSON_H
#define AUTOCOMPRESS_CONFIG_JSON_H

#include "autocompress/arch.h"
#include "autocompress/dtype.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `path` into *arch (overwritten; free it with ac_arch_free). On failure *arch is
 * left empty (no layers). */
ac_status ac_config_json_read(const char *path, ac_arch *arch);

/* The same from JSON text; `source` stands for the file name in messages (NULL:
 * "config.json"). */
ac_status ac_config_json_parse(const char *text, const char *source, ac_arch *arch);

/* The config.json text for `arch` (malloc'd, NUL-terminated; the caller frees it) with
 * torch_dtype naming `dtype` ("float32", "bfloat16" or "float16"). */
ac_status ac_config_json_format(const ac_arch *arch, ac_dtype dtype, char **text);

/* Writes `path` through "PATH.tmp" and a rename, so a crash leaves the old file or the
 * new one. ac_config_json_write records torch_dtype "float32". */
ac_status ac_config_json_write(const char *path, const ac_arch *arch);
ac_status ac_config_json_write_dtype(const char *path, const ac_arch *arch, ac_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
