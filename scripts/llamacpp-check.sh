#!/usr/bin/env bash
# Cross-check against llama.cpp (outside CI; needs the network once, for the sdist):
# prunes examples/parent/prose (--ordered) to a few architectures, converts each pruned
# checkpoint to GGUF f32 with llama.cpp's convert_hf_to_gguf.py, runs llama.cpp greedy on
# a few prompts given as token ids (so both sides see the same input), and compares the
# new ids with `autocompress generate --ids`, and llama.cpp's last-position logits at
# every step with `autocompress logits` on the same tokens.
#
# Cases:
#   cpu-latency   examples/search/cpu-latency/arch.json ("MMM*M-*E", 8 of 12 layers).
#                 Every kind has one shape there, so it is written as nemotron_h. It mixes
#                 a dense MLP layer ("-", a MoE layer cut to its shared expert) with a MoE
#                 layer, which llama.cpp cannot express: its converter gives the MLP layer
#                 feed_forward_length 0 and its loader then takes that layer for Mamba.
#   moe-slice     all 12 layers, hidden 192, 6 Mamba heads, 12 experts of width 96
#                 (nemotron_h: NemotronHForCausalLM in the converter).
#   puzzle-width  the same with another expert width in every MoE layer
#                 (nemotron_h_puzzle: NemotronHPuzzleForCausalLM in the converter).
# A case that llama.cpp cannot convert or load is reported as UNSUPPORTED with the reason.
#
# llama.cpp comes from the llama-cpp-python sdist on PyPI (its vendored vendor/llama.cpp);
# only the llama library and a small greedy driver written here are built. The converter
# runs with $PYTHON (torch, transformers, numpy, safetensors, tokenizers) and the vendored
# gguf-py, which it puts on sys.path itself, so nothing is installed.
#
#   scripts/llamacpp-check.sh [AUTOCOMPRESS_BINARY]
#
# Environment: AC (the binary, default build/autocompress), LLAMACPP_DIR (work folder,
# default build/llamacpp), PYTHON (default /work/venv/bin/python), JOBS (default 2),
# N_TOKENS (default 32), CASES (default "cpu-latency moe-slice puzzle-width").
# Exit status: 0 when every case llama.cpp runs matches and at least one ran, 1 on a
# mismatch or when none ran, 2 when the setup fails.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
ac=$(realpath "${1:-${AC:-$src/build/autocompress}}")
work=$(realpath -m "${LLAMACPP_DIR:-$src/build/llamacpp}")
python=${PYTHON:-/work/venv/bin/python}
jobs=${JOBS:-2}
n_tokens=${N_TOKENS:-32}
cases=${CASES:-cpu-latency moe-slice puzzle-width}
parent=$src/examples/parent/prose

log() { printf '== %s\n' "$*"; }
[ -x "$ac" ] || { echo "no autocompress binary at $ac (build it, or pass its path)"; exit 2; }
[ "$n_tokens" -ge 2 ] || { echo "N_TOKENS must be at least 2"; exit 2; }
mkdir -p "$work"

# ---- llama.cpp sources ----------------------------------------------------------------------
source "$src/scripts/llamacpp-sources.sh"
llamacpp_sources "$work" "$python" || exit 2
log "llama.cpp vendored in $(basename "$(dirname "$(dirname "$llama")")")"

# ---- the greedy driver: token ids in, new token ids and each step's logits out ----------------
driver_src=$work/driver
mkdir -p "$driver_src"
cat >"$driver_src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.14)
project(ac_llamacpp_check C CXX)
set(LLAMA_BUILD_TESTS OFF)
set(LLAMA_BUILD_TOOLS OFF)
set(LLAMA_BUILD_EXAMPLES OFF)
set(LLAMA_BUILD_SERVER OFF)
set(LLAMA_BUILD_APP OFF)
set(LLAMA_CURL OFF)
set(BUILD_SHARED_LIBS OFF)
add_subdirectory("$llama" llama.cpp)
add_executable(ac-llama-greedy greedy.cpp)
target_link_libraries(ac-llama-greedy PRIVATE llama)
CMAKE
cat >"$driver_src/greedy.cpp.new" <<'CPP'
// ac-llama-greedy MODEL.gguf N_NEW IDS LOGITS_OUT: prefills the comma-separated IDS, then
// decodes N_NEW tokens greedily (argmax of the last position's logits, the lowest id on a
// tie) with an f32 KV cache, printing the new ids comma-separated on stdout and writing each step's logits
// (N_NEW x vocab float32; step 0 is the prompt's last position) to LOGITS_OUT.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static bool parse_ids(const char *text, std::vector<llama_token> &ids)
{
    for (const char *p = text;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0)
            return false;
        ids.push_back((llama_token)v);
        if (*end == '\0')
            return true;
        if (*end != ',')
            return false;
        p = end + 1;
    }
}

int main(int argc, char **argv)
{
    std::vector<llama_token> ids;
    int n_new = argc == 5 ? atoi(argv[2]) : 0;
    if (argc != 5 || n_new < 1 || !parse_ids(argv[3], ids)) {
        fprintf(stderr, "usage: %s MODEL.gguf N_NEW IDS LOGITS_OUT (IDS: 1,2,3)\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(ids.size() + n_new + 8);
    cp.n_batch = cp.n_ubatch = (uint32_t)ids.size();
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32; // the default f16 cache alone costs ~2e-3 in the logits
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    FILE *out = fopen(argv[4], "wb");
    if (!out) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 1;
    }
    std::vector<llama_token> step = ids;
    std::string printed;
    for (int i = 0; i < n_new; i++) {
        if (llama_decode(ctx, llama_batch_get_one(step.data(), (int32_t)step.size())) != 0) {
            fprintf(stderr, "llama_decode failed at step %d\n", i);
            return 1;
        }
        const float *logits = llama_get_logits_ith(ctx, -1);
        if (fwrite(logits, sizeof(float), (size_t)vocab, out) != (size_t)vocab) {
            fprintf(stderr, "cannot write %s\n", argv[4]);
            return 1;
        }
        llama_token best = 0;
        for (llama_token v = 1; v < vocab; v++)
            if (logits[v] > logits[best])
                best = v;
        printed += (i ? "," : "") + std::to_string(best);
        step.assign(1, best);
    }
    if (fclose(out) != 0)
        return 1;
    printf("%s\n", printed.c_str());
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
CPP
cmp -s "$driver_src/greedy.cpp.new" "$driver_src/greedy.cpp" || mv "$driver_src/greedy.cpp.new" "$driver_src/greedy.cpp"
rm -f "$driver_src/greedy.cpp.new"
driver=$work/driver-build/ac-llama-greedy
if [ ! -x "$driver" ] || [ "$driver_src/greedy.cpp" -nt "$driver" ]; then
  log "building llama.cpp (the library and the driver, -j$jobs; minutes)"
  cmake -S "$driver_src" -B "$work/driver-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON >"$work/cmake.log" 2>&1 ||
    { tail -30 "$work/cmake.log"; exit 2; }
  cmake --build "$work/driver-build" --target ac-llama-greedy -j"$jobs" >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log"; exit 2; }
fi

# ---- architectures ----------------------------------------------------------------------------
# Writes $2/arch.json for case $1 from the parent's config.
write_arch() {
  "$python" - "$parent/config.json" "$1" "$2" <<'PY'
import json, os, sys
cfg = json.load(open(sys.argv[1]))
case, out = sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
cfg.update(torch_dtype="float32", hidden_size=192, mamba_num_heads=6, n_routed_experts=12,
           moe_intermediate_size=96, moe_shared_expert_intermediate_size=192)
if case == "puzzle-width":
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    widths = iter([96, 64, 128, 80, 112, 72, 120])
    blocks = []
    for c in cfg.pop("hybrid_override_pattern"):
        blocks.append({"block_type": kinds[c]})
        if c == "E":
            blocks[-1]["moe_intermediate_size"] = next(widths)
    cfg.update(model_type="nemotron_h_puzzle", architectures=["NemotronHPuzzleForCausalLM"],
               block_configs=blocks)
elif case != "moe-slice":
    sys.exit(f"unknown case {case}")
json.dump(cfg, open(os.path.join(out, "arch.json"), "w"), indent=2)
PY
}

# The converter's copy of a checkpoint. For nemotron_h_puzzle it reads n_shared_experts
# and an integer moe_latent_size (the official Puzzle config.json has both); ours has
# neither, and our loader wants moe_latent_size null, not 0. So they are added here only.
converter_input() {
  local child=$1 copy=$2 f
  rm -rf "$copy" && mkdir -p "$copy"
  for f in "$child"/*; do ln -s "$f" "$copy/$(basename "$f")"; done
  rm "$copy/config.json"
  "$python" - "$child/config.json" "$copy/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
if cfg.get("model_type") == "nemotron_h_puzzle":
    added = [k for k in ("n_shared_experts", "moe_latent_size") if cfg.get(k) is None]
    cfg.setdefault("n_shared_experts", 1 if cfg.get("moe_shared_expert_intermediate_size") else 0)
    if cfg.get("moe_latent_size") is None:
        cfg["moe_latent_size"] = 0
    if added:
        print(f"  the converter's copy of config.json gets {', '.join(added)}")
json.dump(cfg, open(sys.argv[2], "w"), indent=2)
PY
}

# ---- one case: prune, convert, greedy on both sides, compare ------------------------------------
prompts=("Once upon a time" "The old man looked at the sea and" "She opened the door, and")
ran=0
failed=0
unsupported=()
run_case() {
  local name=$1 dir=$work/$1 arch i ids ours theirs seq
  rm -rf "$dir" && mkdir -p "$dir"
  if [ "$name" = cpu-latency ]; then
    arch=$src/examples/search/cpu-latency/arch.json # search.json beside it names the kept layers
  else
    write_arch "$name" "$dir/arch"
    arch=$dir/arch/arch.json
  fi
  log "case $name: pruning to ${arch#"$src"/}"
  "$ac" prune --model "$parent" --arch "$arch" --ordered --out "$dir/child" | sed -n '1,2p'
  echo "  written as $(grep -o '"model_type":[^,]*' "$dir/child/config.json" | tr -d '\t ')"
  converter_input "$dir/child" "$dir/convert-input"
  if ! "$python" "$llama/convert_hf_to_gguf.py" "$dir/convert-input" --outtype f32 --outfile "$dir/child.gguf" \
      >"$dir/convert.log" 2>&1; then
    unsupported+=("$name: convert_hf_to_gguf.py: $(grep -v '^INFO\|^WARNING\|^ *[~^]*$' "$dir/convert.log" | tail -1)")
    echo "  UNSUPPORTED: the conversion failed ($dir/convert.log)"
    return 0
  fi
  for i in "${!prompts[@]}"; do
    ids=$("$python" -c "import sys; from tokenizers import Tokenizer; print(','.join(map(str, Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids)))" \
      "$dir/child/tokenizer.json" "${prompts[$i]}")
    if ! theirs=$("$driver" "$dir/child.gguf" "$n_tokens" "$ids" "$dir/llama.$i.f32" 2>"$dir/llama.$i.log"); then
      unsupported+=("$name: llama.cpp: $(grep -m1 'error loading model' "$dir/llama.$i.log" || tail -1 "$dir/llama.$i.log")")
      echo "  UNSUPPORTED: llama.cpp failed ($dir/llama.$i.log)"
      return 0
    fi
    ours=$("$ac" generate --model "$dir/child" --ids "$ids" --max-tokens "$n_tokens" | tail -1 | tr -d ' ')
    # our logits on the prompt plus llama.cpp's continuation: rows T-1 .. T+n-2 are llama.cpp's steps
    seq="$ids,$(echo "$theirs" | cut -d, -f1-$((n_tokens - 1)))"
    "$ac" logits --model "$dir/child" --ids "$seq" --out "$dir/ours.$i.npy" >/dev/null
    "$python" - "$ids" "$ours" "$theirs" "$dir/ours.$i.npy" "$dir/llama.$i.f32" "${prompts[$i]}" \
      "$dir/child/tokenizer.json" <<'PY' || failed=$((failed + 1))
import sys
import numpy as np
from tokenizers import Tokenizer
ids, ours, theirs = ([int(x) for x in s.split(",")] for s in sys.argv[1:4])
T, n = len(ids), len(theirs)
mine = np.load(sys.argv[4])[T - 1:T - 1 + n]
llama = np.fromfile(sys.argv[5], dtype=np.float32).reshape(n, -1)
diff = np.abs(mine - llama).max(axis=1)
top2 = np.sort(llama, axis=1)[:, -2:]
tok = Tokenizer.from_file(sys.argv[7])
same = next((k for k in range(n) if ours[k] != theirs[k]), n)
print(f"  {sys.argv[6]!r} ({T} ids): {same} of {n} greedy tokens agree; max |logit diff| "
      f"{diff.max():.3g} (at the prompt's last position {diff[0]:.3g}); smallest llama.cpp "
      f"top-1/top-2 margin {(top2[:, 1] - top2[:, 0]).min():.3g}")
print(f"    autocompress: {tok.decode(ours)!r}")
if same < n:
    print(f"    llama.cpp:    {tok.decode(theirs)!r} (first difference at step {same})")
sys.exit(0 if same == n else 1)
PY
  done
  ran=$((ran + 1))
}

for c in $cases; do run_case "$c"; done
log "summary: $ran case(s) ran in llama.cpp, $failed prompt(s) mismatched, ${#unsupported[@]} unsupported"
for u in "${unsupported[@]}"; do echo "  UNSUPPORTED $u"; done
[ "$failed" -eq 0 ] && [ "$ran" -gt 0 ]
