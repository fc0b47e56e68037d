#!/usr/bin/env bash
# Where the cost model's error on chosen architectures comes from. For each compress run
# (a search's or Minitron++'s pick), four latencies at the profiling's machine speed:
#   predicted  the cost model's, for the pick's shape
#   slice      the same shape sliced from the parent's first channels, heads and experts
#              (what `costmodel validate` measures: --arch)
#   pruned     the pick before KD: the importance-ordered parent slice (RUN/pruned)
#   final      the distilled checkpoint (RUN/model), measured ROUNDS times a few minutes
#              apart: the run-to-run spread of one model's measurement
# predicted vs slice is the model's error on the shape; slice vs pruned what the choice of
# channels and experts does (routing, data-dependent kernels); pruned vs final what
# distillation does to the weights; the rounds' spread how far one measurement can be
# trusted. Every measurement runs alone: run this on a quiet machine.
#
#   examples/experiments/chosen_costs.sh PARENT CONTRACT TABLES OUT.md RUN_DIR...
#
# Environment: AC_ROUNDS (default 3) measurements of each final model, AC_SWEEPS
# (default 5) fresh processes per measurement.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 5 ] || { sed -n '2,17p' "$0"; exit 2; }
parent=$1 contract=$2 tables=$3 out=$4
shift 4
ac="$root/build/autocompress"
rounds=${AC_ROUNDS:-3}
sweeps=${AC_SWEEPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() { # measure CHECKPOINT -> the corrected latency (ms)
  local rc=0
  "$ac" measure --model "$1" --contract "$contract" --parent "$parent" --tables "$tables" --sweeps "$sweeps" \
    --progress off --json >"$tmp/m.json" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "measure $1 failed ($rc)" >&2; exit 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["latency_ms"]["measured"])' "$tmp/m.json"
}

{
  echo "| run | predicted ms | slice | pruned | final (median of $rounds) | final min-max | pred/final - 1 |"
  echo "|---|---|---|---|---|---|---|"
} >"$out"
for run in "$@"; do
  pred=$("$ac" costmodel predict --model "$parent" --contract "$contract" --tables "$tables" \
    --arch "$run/model/config.json" | sed -nE 's/^latency ([0-9.]+) ms.*/\1/p')
  pruned=$(measure "$run/pruned")
  # the row of the given architecture: the speed-normalised measurement is 7th from the end
  "$ac" costmodel validate --model "$parent" --contract "$contract" --tables "$tables" --n 0 \
    --arch "$run/model/config.json" --repeats "$sweeps" --progress off >"$tmp/v.txt"
  slice=$(awk '$1 == "0" { print $(NF-6) }' "$tmp/v.txt")
  # validate shows tok/s for a throughput contract (one without a latency target)
  if grep -Eq '^[[:space:]]*throughput_(ratio|tok_s)' "$contract" && ! grep -Eq '^[[:space:]]*latency_(ratio|ms)' "$contract"; then
    slice=$(python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["workload"]
print(1000.0 * w["batch"] * w["output_tokens"] / float(sys.argv[2]))' "$tmp/m.json" "$slice")
  fi
  finals=()
  for ((r = 0; r < rounds; r++)); do finals+=("$(measure "$run/model")"); done
  python3 - "$run" "$pred" "$slice" "$pruned" "${finals[@]}" >>"$out" <<'EOF'
import statistics, sys
run, pred, slice_, pruned = sys.argv[1], *map(float, sys.argv[2:5])
finals = list(map(float, sys.argv[5:]))
f = statistics.median(finals)
print(f"| {run} | {pred:.2f} | {slice_:.2f} | {pruned:.2f} | {f:.2f} | {min(finals):.2f}-{max(finals):.2f} | "
      f"{100 * (pred / f - 1):+.1f}% |")
EOF
done
echo "commit $(git -C "$root" rev-parse --short HEAD), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
  "$(date -u +%Y-%m-%d)" >>"$out"
cat "$out"
