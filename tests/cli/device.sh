#!/usr/bin/env bash
# --device on logits and generate: "cpu" is the default's output to the bit; a device not
# in the build, or not on the machine, fails with exit 1 and a message naming it; on a
# machine with a GPU, greedy generation on "cuda" equals the CPU's.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$src/tests/fixtures/nemotron_h/moe_grouped_bf16"
ids=3,1,4,1,5,9,2,6

"$ac" logits --model "$model" --ids $ids --out "$tmp/default.npy" >/dev/null
"$ac" logits --model "$model" --ids $ids --device cpu --out "$tmp/cpu.npy" >/dev/null
cmp "$tmp/default.npy" "$tmp/cpu.npy" || { echo "FAIL: --device cpu changed the logits"; exit 1; }

set +e
"$ac" logits --model "$model" --ids $ids --device tpu >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || { echo "FAIL: --device tpu exited $rc, not 1"; exit 1; }
grep -q '"tpu": not in this build' "$tmp/err" || { echo "FAIL: unclear error: $(cat "$tmp/err")"; exit 1; }

set +e
"$ac" generate --model "$model" --ids $ids --max-tokens 12 --device cuda >"$tmp/cuda.txt" 2>"$tmp/err"
rc=$?
set -e
if [ "$rc" = 0 ]; then
  "$ac" generate --model "$model" --ids $ids --max-tokens 12 >"$tmp/cpu.txt"
  cmp "$tmp/cpu.txt" "$tmp/cuda.txt" || { echo "FAIL: greedy generation on cuda differs from the CPU's"; exit 1; }
  echo "device: ok (cuda generation equals the CPU's)"
  exit 0
fi
[ "$rc" = 1 ] || { echo "FAIL: --device cuda exited $rc, not 1"; exit 1; }
grep -Eq '"cuda": (no CUDA device|not in this build)' "$tmp/err" || { echo "FAIL: unclear error: $(cat "$tmp/err")"; exit 1; }
echo "device: ok (no GPU here: $(cat "$tmp/err"))"
