#!/usr/bin/env bash
# `autocompress prune`: the prose parent pruned to its own architecture keeps its logits
# bit for bit; pruned to the committed cpu-latency search result (already in importance
# order with --ordered, the kept layers from search.json) it gives a loadable checkpoint
# of that architecture with the tokenizer; missing importance and an architecture larger
# than the parent are bad usage (exit 2) naming what is wrong, a missing --arch file a
# failure (exit 1).
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
parent="$src/examples/parent/prose"
search="$src/examples/search/cpu-latency"

mkdir "$tmp/self"
cp "$parent/config.json" "$tmp/self/arch.json"
"$ac" prune --model "$parent" --arch "$tmp/self/arch.json" --ordered --out "$tmp/same" >/dev/null
"$ac" logits --model "$parent" --ids 3,1,4,1,5,9,2,6 --out "$tmp/parent.npy" >/dev/null
"$ac" logits --model "$tmp/same" --ids 3,1,4,1,5,9,2,6 --out "$tmp/same.npy" >/dev/null
cmp "$tmp/parent.npy" "$tmp/same.npy" || { echo "FAIL: self-prune changed the logits"; exit 1; }

"$ac" prune --model "$parent" --arch "$search/arch.json" --ordered --out "$tmp/child" >"$tmp/out"
grep -q "8 of 12 layers" "$tmp/out" || { echo "FAIL: the pruned model does not keep 8 of 12 layers"; cat "$tmp/out"; exit 1; }
[ -f "$tmp/child/tokenizer.json" ] || { echo "FAIL: no tokenizer beside the pruned checkpoint"; exit 1; }
"$ac" info --model "$tmp/child" | grep -q "MMM\*M-\*E" || { echo "FAIL: the pruned checkpoint has another pattern"; exit 1; }
"$ac" generate --model "$tmp/child" --prompt "The" --max-tokens 4 >/dev/null

# bad usage (2): no importance to order by, an architecture that does not fit
rc=0
"$ac" prune --model "$parent" --arch "$tmp/self/arch.json" --out "$tmp/x" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: pruning without importance exited $rc, not 2"; exit 1; }
grep -q "importance.safetensors" "$tmp/err" || { echo "FAIL: the error does not say what is missing"; exit 1; }
sed 's/"hidden_size":[[:space:]]*[0-9]*/"hidden_size": 4096/' "$parent/config.json" >"$tmp/self/big.json"
rc=0
"$ac" prune --model "$parent" --arch "$tmp/self/big.json" --ordered --out "$tmp/y" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: a larger architecture exited $rc, not 2"; exit 1; }
grep -q "hidden_size 4096 exceeds" "$tmp/err" || { echo "FAIL: the error does not name hidden_size"; cat "$tmp/err"; exit 1; }
# a failure (1): an architecture file that is not there
rc=0
"$ac" prune --model "$parent" --arch "$tmp/none.json" --ordered --out "$tmp/z" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "none.json" "$tmp/err" || { echo "FAIL: a missing --arch exited $rc: $(cat "$tmp/err")"; exit 1; }
echo "prune: ok"
