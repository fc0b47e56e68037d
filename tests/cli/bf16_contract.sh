#!/usr/bin/env bash
# A contract serving bf16 weights (hardware.weights = "bf16") end to end on a tiny model:
# profile records it in the tables; the cost model refuses tables of the other dtype and
# predicts a W of about half the f32 one; measure serves the bf16 copy, whose resident
# memory is below the f32 model's (but under AddressSanitizer); targets near the measured
# memory pass half above it (exit 0) and miss half below it (exit 3), each verdict
# checked against the numbers here (the measured memory of this 2 MB process moves by up
# to 300 KB from run to run, the bf16 weights are 0.6 MB); compress runs under it to its
# end and meets the target half above the parent's memory (exit 0, the measured memory
# within it); a dtype other than f32 or bf16 is refused where the contract is read.
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

# near_target FACTOR: a bf16 contract whose memory target is FACTOR x the measured $m16
near_target() {
  local gib
  gib=$(awk -v m="$m16" -v f="$1" 'BEGIN { printf "%.9f", m * f / 1073741824 }')
  sed "s/memory_gib = 1.0;/memory_gib = $gib;/" "$tmp/bf16.cfg" >"$tmp/near$1.cfg"
  grep -q "memory_gib = $gib;" "$tmp/near$1.cfg" || fail "no memory target in $tmp/near$1.cfg"
}
# measured_verdict FACTOR WANT: measure under near_target FACTOR exits WANT, and the
# measured memory is within the target exactly when WANT is 0
measured_verdict() {
  near_target "$1"
  local rc=0
  "$ac" measure --model "$tmp/parent" --contract "$tmp/near$1.cfg" --sweeps 1 --requests 2 --progress off --json \
    >"$tmp/near$1.json" || rc=$?
  [ "$rc" = "$2" ] || fail "memory target $1 x $m16 bytes: exit $rc, want $2: $(cat "$tmp/near$1.json")"
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["memory_bytes"]
assert (m["measured"] <= m["target"]) == (sys.argv[2] == "0"), m
assert abs(m["target"] - float(sys.argv[3]) * float(sys.argv[4])) <= 2, m' \
    "$tmp/near$1.json" "$2" "$1" "$m16" || fail "memory target $1 x $m16 bytes: $(cat "$tmp/near$1.json")"
}
measured_verdict 1.5 0
measured_verdict 0.5 3

# compress under it: its measure and eval stages take the bf16 copy, and the pruned and
# distilled model meets a memory target half above its parent's measured memory
near_target 1.5
rc=0
"$ac" compress --model "$tmp/parent" --contract "$tmp/near1.5.cfg" --tables "$tmp/bf16.json" --data "$tmp/data" \
  --batch 2 --seq-len 16 --search-tokens 2048 --kd-tokens 512 --measure-sweeps 1 --eval-batches 1 --progress off \
  --out "$tmp/c" >"$tmp/c.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "compress under the bf16 contract exited $rc: $(tail -3 "$tmp/c.log")"
[ -s "$tmp/c/eval.json" ] || fail "compress wrote no eval.json"
python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["measured"]
assert m["memory_bytes"]["measured"] <= m["memory_bytes"]["target"] <= 1.5 * float(sys.argv[2]) + 2, m
assert m["latency_ms"]["measured"] <= m["latency_ms"]["target"] == 10000, m' "$tmp/c/report.json" "$m16" ||
  fail "compress exited 0 with $(cat "$tmp/c/report.json")"

sed 's/weights = "bf16"/weights = "f16"/' "$tmp/bf16.cfg" >"$tmp/f16.cfg"
rc=0
"$ac" contract check "$tmp/f16.cfg" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" != 0 ] && grep -q "hardware.weights: 'f16' is neither" "$tmp/err" || fail "f16 contract: $(cat "$tmp/err")"
echo "bf16 contract: ok (W predicted $w16 against $w32 MiB; measured $m16 against $m32 bytes)"
