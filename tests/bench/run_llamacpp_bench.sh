#!/usr/bin/env bash
# Prefill and decode tokens/s of autocompress and llama.cpp on the prose parent
# (examples/parent/prose, f32, batch 1, 2 threads), in one run: prompts of 128, 512 and
# 2048 tokens, then 32 and 128 generated tokens decoded at that depth (llama-bench -d),
# llama.cpp with flash attention on and off. The engines alternate round by round;
# medians of ROUNDS. Both sides get token ids, not text, and run the workload once untimed
# before the timed run (llama-bench's warm-up run; bench_runtime --warmup).
#
# llama.cpp is the copy vendored in the llama-cpp-python sdist from PyPI, built here
# (build/llamacpp, outside the library; llama-bench only, minutes on 2 cores); the parent
# is converted with its convert_hf_to_gguf.py, run by PYTHON (torch, transformers, numpy,
# safetensors), with the pre-tokenizer patch of scripts/llamacpp-sources.sh.
#   tests/bench/run_llamacpp_bench.sh [PYTHON] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${1:-${AC_BENCH_PYTHON:-/work/venv/bin/python}}
rounds=${2:-3}
threads=2
"$root/scripts/setup.sh" >/dev/null
work=$root/build/llamacpp
mkdir -p "$work"
log() { printf '== %s\n' "$*" >&2; }

source "$root/scripts/llamacpp-sources.sh"
llamacpp_sources "$work" "$python"
bench=$work/bench-build/bin/llama-bench
if [ ! -x "$bench" ]; then
  log "building llama-bench from $llama (minutes)"
  cmake -S "$llama" -B "$work/bench-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DBUILD_SHARED_LIBS=OFF >"$work/bench-cmake.log" 2>&1
  cmake --build "$work/bench-build" --target llama-bench -j"$(nproc)" >"$work/bench-build.log" 2>&1
fi

gguf=$work/prose-f32.gguf
if [ ! -s "$gguf" ] || [ "$root/examples/parent/prose/model.safetensors" -nt "$gguf" ]; then
  log "converting examples/parent/prose to GGUF f32"
  "$python" "$llama/convert_hf_to_gguf.py" "$root/examples/parent/prose" --outtype f32 --outfile "$gguf" \
    >"$work/convert.log" 2>&1 || { tail -5 "$work/convert.log"; exit 2; }
fi

ours() { # prompt gen -> "prefill_tok_s decode_tok_s"
  OMP_NUM_THREADS=$threads "$root/build/tests/bench_runtime" --model "$root/examples/parent/prose" --batch 1 \
    --prompt "$1" --gen "$2" --repeats 1 --warmup |
    sed -E 's/.*"prefill_tok_s": ([0-9.]+).*"decode_tok_s": ([0-9.]+).*/\1 \2/'
}
theirs() { # prompt gen fa -> "prefill_tok_s decode_tok_s" (llama-bench's mean of its runs)
  local pp tg
  pp=$("$bench" -m "$gguf" -t $threads -p "$1" -n 0 -fa "$3" -r 1 -o csv 2>/dev/null | tail -1)
  tg=$("$bench" -m "$gguf" -t $threads -p 0 -n "$2" -d "$1" -fa "$3" -r 1 -o csv 2>/dev/null | tail -1)
  echo "$(echo "$pp" | awk -F, '{ gsub(/"/, ""); print $(NF - 1) }') $(echo "$tg" | awk -F, '{ gsub(/"/, ""); print $(NF - 1) }')"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-8s %-4s %10s %10s %10s %10s %10s %10s %7s %7s\n' prompt gen ours_pp llama_pp llama_pp_fa ours_tg llama_tg \
  llama_tg_fa pp_x tg_x
worst_pp=1e9 worst_tg=1e9
for prompt in 128 512 2048; do
  for gen in 32 128; do
    declare -a a_pp=() a_tg=() b_pp=() b_tg=() c_pp=() c_tg=()
    for ((r = 0; r < rounds; r++)); do
      read -r p t <<<"$(ours "$prompt" "$gen")"; a_pp+=("$p"); a_tg+=("$t")
      read -r p t <<<"$(theirs "$prompt" "$gen" off)"; b_pp+=("$p"); b_tg+=("$t")
      read -r p t <<<"$(theirs "$prompt" "$gen" on)"; c_pp+=("$p"); c_tg+=("$t")
    done
    m() { printf '%s\n' "$@" | median; }
    opp=$(m "${a_pp[@]}") otg=$(m "${a_tg[@]}") lpp=$(m "${b_pp[@]}") ltg=$(m "${b_tg[@]}")
    fpp=$(m "${c_pp[@]}") ftg=$(m "${c_tg[@]}")
    # against llama.cpp's better setting
    ppx=$(awk -v o="$opp" -v a="$lpp" -v b="$fpp" 'BEGIN { printf "%.2f", o / (a > b ? a : b) }')
    tgx=$(awk -v o="$otg" -v a="$ltg" -v b="$ftg" 'BEGIN { printf "%.2f", o / (a > b ? a : b) }')
    printf '%-8s %-4s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %7s %7s\n' "$prompt" "$gen" "$opp" "$lpp" "$fpp" "$otg" \
      "$ltg" "$ftg" "$ppx" "$tgx"
    worst_pp=$(awk -v a="$worst_pp" -v b="$ppx" 'BEGIN { print (b < a) ? b : a }')
    worst_tg=$(awk -v a="$worst_tg" -v b="$tgx" 'BEGIN { print (b < a) ? b : a }')
  done
done
echo "against llama.cpp's better of flash attention on/off: prefill at least ${worst_pp}x, decode at least ${worst_tg}x" \
     "(goal 1.5x each)"
