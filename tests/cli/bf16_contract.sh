#!/usr/bin/env bash
# A contract serving bf16 weights (hardware.weights = "bf16") end to end on a tiny model:
# profile records it in the tables; the cost model refuses tables of the other dtype and
# predicts a W of about half the f32 one; measure serves the bf16 copy, whose resident
# memory is below the f32 model's (but under AddressSanitizer); compress runs under it to
# its end; a dtype other than f32 or bf16 is refused where the contract is read.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }

source "$src/tests/cli/data/tiny_parent.sh"
tiny_parent "$ac" "$src" "$tmp"
sed 's/^targets = .*/targets = { latency_ms = 10000.0; memory_gib = 1.0; };/' "$src/tests/cli/data/tiny_search.cfg" \
  >"$tmp/f32.cfg"
sed 's/^hardware = { device = "cpu";/hardware = { device = "cpu"; weights = "bf16";/' "$tmp/f32.cfg" >"$tmp/bf16.cfg"
grep -q 'weights = "bf16"' "$tmp/bf16.cfg" || fail "the bf16 contract was not made"

for w in f32 bf16; do
  "$ac" profile --model "$tmp/parent" --contract "$tmp/$w.cfg" --out "$tmp/$w.json" --repeats 1 --no-reference \
    --progress off >/dev/null || fail "profile ($w) exited $?"
  grep -q "\"weights\":[[:space:]]*\"$w\"" "$tmp/$w.json" || fail "the $w tables do not say $w"
done

rc=0
"$ac" costmodel predict --model "$tmp/parent" --arch "$tmp/parent/config.json" --contract "$tmp/bf16.cfg" \
  --tables "$tmp/f32.json" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" != 0 ] && grep -q "weights: tables f32, here bf16" "$tmp/err" || fail "f32 tables for a bf16 contract: $(cat "$tmp/err")"
weights() { # weights DTYPE: the predicted W in MiB
  "$ac" costmodel predict --model "$tmp/parent" --arch "$tmp/parent/config.json" --contract "$tmp/$1.cfg" \
    --tables "$tmp/$1.json" | sed -nE 's/^memory .* = W ([0-9.]+) .*/\1/p'
}
w32=$(weights f32) w16=$(weights bf16)
[ -n "$w32" ] && [ -n "$w16" ] || fail "no weights in the predictions"
awk "BEGIN { exit !($w16 < 0.6 * $w32) }" || fail "predicted W: bf16 $w16 MiB, f32 $w32 MiB"

measured() { # measured DTYPE: the measured memory in bytes
  "$ac" measure --model "$tmp/parent" --contract "$tmp/$1.cfg" --sweeps 1 --requests 2 --progress off --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["memory_bytes"]["measured"])'
}
m32=$(measured f32) m16=$(measured bf16)
# under AddressSanitizer freed memory stays in its quarantine, so the f32 slice the copy
# is made from still counts: only the measurement's running is checked there
if ! grep -qa __asan_init "$ac"; then
  awk "BEGIN { exit !($m16 < $m32) }" || fail "measured memory: bf16 $m16 bytes, f32 $m32"
fi

# compress under it: its measure and eval stages take the bf16 copy
"$ac" compress --model "$tmp/parent" --contract "$tmp/bf16.cfg" --tables "$tmp/bf16.json" --data "$tmp/data" \
  --batch 2 --seq-len 16 --search-tokens 2048 --kd-tokens 512 --measure-sweeps 1 --eval-batches 1 --progress off \
  --out "$tmp/c" >"$tmp/c.log" 2>&1 || fail "compress under the bf16 contract exited $?: $(tail -3 "$tmp/c.log")"
[ -s "$tmp/c/eval.json" ] || fail "compress wrote no eval.json"

sed 's/weights = "bf16"/weights = "f16"/' "$tmp/bf16.cfg" >"$tmp/f16.cfg"
rc=0
"$ac" contract check "$tmp/f16.cfg" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" != 0 ] && grep -q "hardware.weights: 'f16' is neither" "$tmp/err" || fail "f16 contract: $(cat "$tmp/err")"
echo "bf16 contract: ok (W predicted $w16 against $w32 MiB; measured $m16 against $m32 bytes)"
