#!/usr/bin/env bash
# Prefill and decode tokens/s of the CPU engine against transformers on PyTorch's CPU
# backend, same ~10M-parameter model, same workload, same run; prints the ratios.
#   tests/bench/run_runtime_bench.sh [PYTHON]   (PYTHON: a virtualenv with torch + transformers)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${1:-${AC_BENCH_PYTHON:-python3}}
"$root/scripts/setup.sh" >/dev/null
bench="$root/build/tests/bench_runtime"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bench" --make-model "$dir/model"
printf "%-6s %-7s %-12s %14s %14s %8s\n" batch phase engine "tok/s" "transformers" ratio
for batch in 1 16; do
  ours=$(OMP_NUM_THREADS=2 "$bench" --model "$dir/model" --batch $batch --prompt 128 --gen 32)
  theirs=$("$python" "$root/tests/bench/bench_hf.py" --model "$dir/model" --batch $batch --prompt 128 --gen 32 --threads 2)
  for phase in prefill decode; do
    a=$(echo "$ours" | sed -E "s/.*\"${phase}_tok_s\": ([0-9.]+).*/\1/")
    b=$(echo "$theirs" | sed -E "s/.*\"${phase}_tok_s\": ([0-9.]+).*/\1/")
    printf "%-6s %-7s %-12s %14s %14s %8s\n" $batch $phase autocompress "$a" "$b" "$(awk "BEGIN { printf \"%.2f\", $a / $b }")"
  done
done
