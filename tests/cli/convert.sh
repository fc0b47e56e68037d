#!/usr/bin/env bash
# `autocompress convert`: bf16 -> f32 -> bf16 keeps every weight (bf16 values are exact
# in f32), so the logits stay bit-identical; the default dtype is f32 (lossless); the
# source's tokenizer files are copied byte for byte, and none appear when it has none;
# bad arguments are usage errors.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$src/tests/fixtures/nemotron_h/moe_grouped_bf16"
# the fixture with a tokenizer beside it
cp -r "$model" "$tmp/src"
cp "$src/examples/data/tokenizer.json" "$tmp/src/tokenizer.json"

"$ac" convert --model "$tmp/src" --out "$tmp/f32" >/dev/null
"$ac" info --model "$tmp/f32" >"$tmp/info"
grep -Eq "^ +F32 +137 tensors" "$tmp/info" && ! grep -q "BF16" "$tmp/info" ||
  { echo "FAIL: the default dtype is not f32 for all 137 tensors: $(cat "$tmp/info")"; exit 1; }
cmp "$tmp/src/tokenizer.json" "$tmp/f32/tokenizer.json" || { echo "FAIL: tokenizer.json not copied"; exit 1; }
"$ac" convert --model "$tmp/f32" --out "$tmp/bf16" --dtype bf16 >/dev/null
"$ac" info --model "$tmp/bf16" | grep -q "BF16" || { echo "FAIL: converted checkpoint is not bf16"; exit 1; }
cmp "$tmp/src/tokenizer.json" "$tmp/bf16/tokenizer.json" || { echo "FAIL: tokenizer.json not copied on"; exit 1; }
"$ac" convert --model "$model" --out "$tmp/plain" --dtype f32 >/dev/null
[ ! -e "$tmp/plain/tokenizer.json" ] || { echo "FAIL: a tokenizer.json appeared from a source without one"; exit 1; }
for m in "$model" "$tmp/f32" "$tmp/bf16"; do
  "$ac" logits --model "$m" --ids 3,1,4,1,5,9,2,6 --out "$tmp/$(basename "$m").npy" >/dev/null
done
cmp "$tmp/moe_grouped_bf16.npy" "$tmp/f32.npy" || { echo "FAIL: f32 copy changed the logits"; exit 1; }
cmp "$tmp/moe_grouped_bf16.npy" "$tmp/bf16.npy" || { echo "FAIL: bf16 round trip changed the logits"; exit 1; }
if "$ac" convert --model "$model" --out "$tmp/x" --dtype int4 2>/dev/null; then echo "FAIL: int4 accepted"; exit 1; fi
if "$ac" convert --model /nonexistent --out "$tmp/y" 2>"$tmp/err"; then echo "FAIL: missing model accepted"; exit 1; fi
grep -q "/nonexistent" "$tmp/err" || { echo "FAIL: error does not name the path"; exit 1; }
echo "convert: ok"
