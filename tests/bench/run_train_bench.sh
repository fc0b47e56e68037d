#!/usr/bin/env bash
# Training tokens/s (forward + backward + AdamW) of the CPU engine against transformers on
# PyTorch's CPU backend: the parent's architecture (examples/parent/config.json), same
# weights, batch and sequence length, in one run; prints the ratio, and the KD step's
# cost against the training step's (bench_train).
#   tests/bench/run_train_bench.sh [PYTHON] [BATCH] [SEQ_LEN]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${1:-${AC_BENCH_PYTHON:-python3}}
batch=${2:-8}
seq=${3:-256}
"$root/scripts/setup.sh" >/dev/null
bench="$root/build/tests/bench_train"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bench" --config "$root/examples/parent/config.json" --save "$dir/model"
ours=$(OMP_NUM_THREADS=2 "$bench" --model "$dir/model" --batch "$batch" --seq-len "$seq" --steps 3)
theirs=$("$python" "$root/tests/bench/bench_train_hf.py" --model "$dir/model" --batch "$batch" --seq-len "$seq" --steps 3 --threads 2 2>/dev/null)
echo "$ours"
echo "$theirs"
a=$(echo "$ours" | sed -E 's/.*"train_tok_s": ([0-9.]+).*/\1/')
b=$(echo "$theirs" | sed -E 's/.*"train_tok_s": ([0-9.]+).*/\1/')
echo "training tokens/s: autocompress $a, transformers $b, ratio $(awk "BEGIN { printf \"%.2f\", $a / $b }")"
field() { echo "$ours" | sed -E "s/.*\"$1\": ([0-9.]+).*/\1/"; }
echo "KD step / training step: $(field kd_over_train); the teacher's forward / a forward alone: $(field teacher_over_forward)"
