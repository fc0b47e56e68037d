#!/usr/bin/env bash
# The CPU engine of two builds side by side, for a change that must not move speed (a
# refactor): bench_runtime (prefill and decode, batch 1 and 16) and bench_train (training,
# KD and forward steps) of OLD and NEW in alternating rounds, in one sitting, on the same
# models; prints each figure's medians, and the median and range of NEW / OLD by round.
#   tests/bench/run_ab_bench.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS]
# (build directories of two checkouts, e.g. a `git worktree` of the older commit.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
old=$1 new=$2 rounds=${3:-5}
for b in "$old" "$new"; do
  [ -x "$b/tests/bench_runtime" ] && [ -x "$b/tests/bench_train" ] ||
    { echo "run_ab_bench: $b has no tests/bench_runtime and tests/bench_train" >&2; exit 2; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$new/tests/bench_runtime" --make-model "$dir/runtime" >/dev/null
"$new/tests/bench_train" --config "$root/examples/parent/config.json" --save "$dir/train" >/dev/null

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.eE+-]+).*/\1/"; }
declare -A got
run_build() { # side build
  local side=$1 build=$2 out
  for batch in 1 16; do
    out=$(OMP_NUM_THREADS=2 "$build/tests/bench_runtime" --model "$dir/runtime" --batch $batch --prompt 128 --gen 32 --warmup)
    got[$side,prefill_b$batch]+="$(field "$out" prefill_tok_s) "
    got[$side,decode_b$batch]+="$(field "$out" decode_tok_s) "
  done
  out=$(OMP_NUM_THREADS=2 "$build/tests/bench_train" --model "$dir/train" --batch 8 --seq-len 256 --steps 3)
  for f in train_tok_s kd_tok_s forward_tok_s; do
    got[$side,$f]+="$(field "$out" $f) "
  done
}
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then run_build old "$old"; run_build new "$new"; else run_build new "$new"; run_build old "$old"; fi
done
# per round, new / old of the same round: their median and their range
ratios() { paste -d' ' <(echo "${got[new,$1]}" | tr ' ' '\n' | grep .) <(echo "${got[old,$1]}" | tr ' ' '\n' | grep .) |
           awk '{ print $1 / $2 }'; }
printf "%-16s %12s %12s %8s %17s   (medians of %d alternating rounds, tokens/s)\n" figure old new new/old \
  "rounds' range" "$rounds"
for f in prefill_b1 decode_b1 prefill_b16 decode_b16 train_tok_s kd_tok_s forward_tok_s; do
  a=$(echo "${got[old,$f]}" | tr ' ' '\n' | grep . | median)
  b=$(echo "${got[new,$f]}" | tr ' ' '\n' | grep . | median)
  r=$(ratios "$f" | median) lo=$(ratios "$f" | sort -g | head -1) hi=$(ratios "$f" | sort -g | tail -1)
  printf "%-16s %12.1f %12.1f %8.3f %8.3f-%-8.3f\n" "$f" "$a" "$b" "$r" "$lo" "$hi"
done
