#!/usr/bin/env bash
# Training tokens/s (forward + backward + AdamW) of the CPU engine against transformers on
# PyTorch's CPU backend: the parent's architecture (examples/parent/config.json), same
# weights, batch and sequence length, in one run; prints the ratio, the KD step's cost
# against the training step's (bench_train), and the search step's (the routers' masked
# pass and the teacher's forward) against a plain forward + backward (bench_search, with
# the cpu-latency contract and its committed tables). The two engines alternate for ROUNDS
# rounds (a shared machine's speed drifts by tens of percent over a minute); medians.
#   tests/bench/run_train_bench.sh [PYTHON] [BATCH] [SEQ_LEN] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${1:-${AC_BENCH_PYTHON:-python3}}
batch=${2:-8}
seq=${3:-256}
rounds=${4:-5}
"$root/scripts/setup.sh" >/dev/null
bench="$root/build/tests/bench_train"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bench" --config "$root/examples/parent/config.json" --save "$dir/model"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
a=() b=() kd=() teacher=()
for ((r = 0; r < rounds; r++)); do
  ours=$(OMP_NUM_THREADS=2 "$bench" --model "$dir/model" --batch "$batch" --seq-len "$seq" --steps 3)
  theirs=$("$python" "$root/tests/bench/bench_train_hf.py" --model "$dir/model" --batch "$batch" --seq-len "$seq" --steps 3 --threads 2 2>/dev/null)
  echo "$ours"
  echo "$theirs"
  a+=("$(field "$ours" train_tok_s)") b+=("$(field "$theirs" train_tok_s)")
  kd+=("$(field "$ours" kd_over_train)") teacher+=("$(field "$ours" teacher_over_forward)")
done
ma=$(printf '%s\n' "${a[@]}" | median) mb=$(printf '%s\n' "${b[@]}" | median)
echo "training tokens/s (medians of $rounds): autocompress $ma, transformers $mb, ratio $(awk "BEGIN { printf \"%.2f\", $ma / $mb }")"
echo "KD step / training step: $(printf '%s\n' "${kd[@]}" | median);" \
     "the teacher's forward / a forward alone: $(printf '%s\n' "${teacher[@]}" | median)"
search=$(OMP_NUM_THREADS=2 "$root/build/tests/bench_search" --model "$dir/model" --batch "$batch" --seq-len "$seq" \
  --contract "$root/examples/contracts/cpu-latency.cfg" --tables "$root/examples/search/cpu-latency/tables.json")
echo "$search"
echo "search step / plain forward + backward: $(echo "$search" | sed -E 's/.*"search_step_over_plain": ([0-9.]+).*/\1/')" \
     "(masked pass alone: $(echo "$search" | sed -E 's/.*"masked_over_plain": ([0-9.]+).*/\1/'))"
