#!/usr/bin/env bash
# --device on logits and generate: "cpu" is the default's output to the bit; a device not
# in the build, or not on the machine, fails with exit 1 and a message naming it; on a
# machine with a GPU, greedy generation on "cuda" equals the CPU's. A contract on cuda:1
# is refused by profile (the backend uses the first visible device), and without a GPU a
# cuda:0 contract's profile and measure fail naming the device and saying that the
# contract cannot be measured here ("no GPU" in a CUDA build without the NVIDIA driver).
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$src/tests/fixtures/nemotron_h/moe_grouped_bf16"
hybrid="$src/tests/fixtures/nemotron_h/hybrid_f32"
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

# train, distill and eval name the device they cannot use, before any work (search: test_search)
for cmd in "train --config $hybrid/config.json --data $tmp --out $tmp/o" \
           "distill --student $hybrid --teacher $hybrid --data $tmp --out $tmp/o" \
           "eval --model $hybrid --teacher $hybrid --data $tmp"; do
  set +e
  # shellcheck disable=SC2086
  $ac $cmd --device tpu >/dev/null 2>"$tmp/err"
  rc=$?
  set -e
  [ "$rc" = 1 ] && grep -q '"tpu": not in this build' "$tmp/err" || { echo "FAIL: $cmd --device tpu: exit $rc: $(cat "$tmp/err")"; exit 1; }
done

contract() { # contract DEVICE: a tiny contract on DEVICE
  printf 'name = "tiny";\nhardware = { device = "%s"; };\n' "$1"
  printf 'workload = { batch = 1; cached_tokens = 2; input_tokens = 3; output_tokens = 2; };\n'
  printf 'targets = { latency_ms = 10.0; };\n'
  printf 'search_space = { hidden_sizes = [64, 32]; mamba_heads = { values = [8, 4]; }; routed_experts = [8, 4];\n'
  printf '  routed_ffn = [32, 16]; shared_ffn = [48, 24]; };\n'
}
contract cuda:1 >"$tmp/cuda1.cfg"
set +e
"$ac" profile --model "$hybrid" --contract "$tmp/cuda1.cfg" --out "$tmp/t.json" --progress off 2>"$tmp/err" >/dev/null
rc=$?
set -e
[ "$rc" != 0 ] && grep -q "CUDA_VISIBLE_DEVICES=1" "$tmp/err" || { echo "FAIL: cuda:1 profile: $(cat "$tmp/err")"; exit 1; }

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
contract cuda:0 >"$tmp/cuda0.cfg"
set +e
"$ac" profile --model "$hybrid" --contract "$tmp/cuda0.cfg" --out "$tmp/t.json" --progress off 2>"$tmp/perr" >/dev/null
rc=$?
set -e
[ "$rc" != 0 ] && grep -Eq '"cuda": (no CUDA device|not in this build)' "$tmp/perr" ||
  { echo "FAIL: cuda:0 profile without a GPU: $(cat "$tmp/perr")"; exit 1; }
grep -q 'hardware.device = "cuda:0" cannot be measured here' "$tmp/perr" ||
  { echo "FAIL: profile does not say the contract cannot be measured here: $(cat "$tmp/perr")"; exit 1; }
set +e
"$ac" measure --model "$hybrid" --contract "$tmp/cuda0.cfg" --progress off 2>"$tmp/merr" >/dev/null
rc=$?
set -e
[ "$rc" = 1 ] && grep -q 'hardware.device = "cuda:0" cannot be measured here' "$tmp/merr" ||
  { echo "FAIL: cuda:0 measure without a GPU: exit $rc: $(cat "$tmp/merr")"; exit 1; }
# a CUDA build on a machine without the NVIDIA driver says "no GPU", not a driver version
if ! grep -q "not in this build" "$tmp/err" && [ ! -e /proc/driver/nvidia/version ]; then
  grep -q "no GPU" "$tmp/err" && ! grep -qi "driver version" "$tmp/err" ||
    { echo "FAIL: no \"no GPU\" without a driver: $(cat "$tmp/err")"; exit 1; }
fi
echo "device: ok (no GPU here: $(cat "$tmp/err"))"
