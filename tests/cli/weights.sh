#!/usr/bin/env bash
# --weights on logits and generate: bf16 runs a serving copy (the product weights rounded
# to bf16; the numerics are test_runtime_bf16's): its logits have the f32 run's shape and
# differ from them, generation runs; a dtype other than f32 or bf16 is a usage error (2)
# that names the option. (serve's --weights and `weights` setting: serve_args.sh.)
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model="$src/examples/parent/prose"
ids=3,1,4,1,5,9,2,6

"$ac" logits --model "$model" --ids $ids --out "$tmp/f32.npy" >/dev/null
"$ac" logits --model "$model" --ids $ids --weights f32 --out "$tmp/f32_again.npy" >/dev/null
"$ac" logits --model "$model" --ids $ids --weights bf16 --out "$tmp/bf16.npy" >/dev/null
cmp -s "$tmp/f32.npy" "$tmp/f32_again.npy" || fail "--weights f32 changed the logits"
[ "$(stat -c %s "$tmp/f32.npy")" = "$(stat -c %s "$tmp/bf16.npy")" ] || fail "bf16 logits have another shape"
cmp -s "$tmp/f32.npy" "$tmp/bf16.npy" && fail "--weights bf16 gave the f32 logits bit for bit"

out=$("$ac" generate --model "$model" --ids $ids --max-tokens 12 --weights bf16)
[ "$(echo "$out" | tr ',' '\n' | grep -c '^[0-9][0-9]*$')" = 12 ] || fail "bf16 generation printed: $out"

rc=0
"$ac" generate --model "$model" --ids $ids --max-tokens 2 --weights f16 >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "--weights f16 exited $rc, not 2"
grep -q -- "--weights: 'f16' is neither f32 nor bf16" "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
echo "weights: ok"
