#!/usr/bin/env bash
# Distillation tokens/s at 1 and 2 MPI ranks on this machine: the parent's architecture
# (examples/parent/config.json, random weights) distilled into itself, batch 8 x 256, on
# the prose shards, with the machine's cores split between the ranks (2 ranks of 1 thread
# against 1 rank of 2 threads, and 1 rank of 1 thread for the per-core rate). Runs
# alternate; prints each setting's median and the ratios. Run it alone on the machine.
#   tests/bench/run_ranks_bench.sh [STEPS] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
steps=${1:-4}
rounds=${2:-3}
"$root/scripts/setup.sh" >/dev/null
ac="$root/build/autocompress"
"$ac" --version | grep -q "^built with:.* mpi" || { echo "this build has no MPI (install libopenmpi-dev)"; exit 1; }
cores=$(nproc)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -f "$root/build/corpus/SUMMARY" ] || "$root/scripts/corpus.sh" "$root/build/corpus" >/dev/null
"$ac" tokenize --tokenizer "$root/examples/data/tokenizer.json" --out "$dir/data" --format fortune --progress off \
  "$root/build/corpus/prose.txt" >/dev/null
"$ac" train --config "$root/examples/parent/config.json" --data "$dir/data" --steps 1 --batch 1 --seq-len 16 \
  --eval-every 0 --progress off --out "$dir/parent" >/dev/null
distill=(distill --teacher "$dir/parent" --student "$dir/parent" --data "$dir/data" --batch 8 --seq-len 256
         --steps "$steps" --eval-every 0 --checkpoint-every 0 --progress off)
# tokens/s of one run: ranks, threads per rank
run() {
  rm -rf "$dir/out"
  if [ "$1" -eq 1 ]; then
    OMP_NUM_THREADS=$2 "$ac" "${distill[@]}" --out "$dir/out"
  else
    OMP_NUM_THREADS=$2 mpirun --oversubscribe --bind-to none -np "$1" "$ac" "${distill[@]}" --out "$dir/out"
  fi | sed -E 's/.* ([0-9.]+) tokens\/s.*/\1/'
}
settings=("1 $cores" "$cores 1" "1 1")
declare -A results
for ((r = 0; r < rounds; r++)); do
  for s in "${settings[@]}"; do results[$s]+="$(run $s) "; done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "distill, parent architecture, batch 8 x 256, $steps steps, $rounds rounds, $cores cores"
for s in "${settings[@]}"; do
  read -r ranks threads <<<"$s"
  printf '  %d rank(s) x %d thread(s): %8.0f tokens/s   (runs: %s)\n' "$ranks" "$threads" \
    "$(echo "${results[$s]}" | median)" "${results[$s]}"
done
one=$(echo "${results["1 $cores"]}" | median)
many=$(echo "${results["$cores 1"]}" | median)
single=$(echo "${results["1 1"]}" | median)
echo "$cores ranks / 1 rank of $cores threads: $(awk "BEGIN { printf \"%.2f\", $many / $one }")x;" \
     "scaling over 1 thread: 1 rank $(awk "BEGIN { printf \"%.2f\", $one / $single }")x," \
     "$cores ranks $(awk "BEGIN { printf \"%.2f\", $many / $single }")x"
