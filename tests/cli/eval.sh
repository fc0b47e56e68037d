#!/usr/bin/env bash
# `autocompress eval`: the prose parent against itself on a small shard has zero KD loss,
# full top-1 agreement and equal cross-entropies, in the summary and in --json; next-line
# matching runs on shards made from files; usage errors exit 2, a missing val.bin exits 1
# naming it.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
parent="$src/examples/parent/prose"

fail() { echo "FAIL: $*"; exit 1; }
# the value of a top-level field of the (indented) JSON report
field() { sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\([^,]*\),\{0,1\}\$/\1/p" "$tmp/eval.json"; }

"$ac" eval --help > "$tmp/help"
grep -q "usage: autocompress eval --model DIR --teacher DIR --data DIR" "$tmp/help" || fail "--help prints no usage"
grep -q -- "--json FILE" "$tmp/help" || fail "--help does not list --json"

head -200 "$src/tests/fixtures/tokenizer/lines.txt" | sed 's/^"//; s/"$//' > "$tmp/text.txt"
"$ac" tokenize --tokenizer "$parent/tokenizer.json" --out "$tmp/data" --format files --val-percent 100 --progress off \
  "$tmp/text.txt" > /dev/null

"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 32 --lines 4 \
  --line-context 32 --json "$tmp/eval.json" --progress off > "$tmp/out"
grep -Eq "^  student +[0-9.]+ +[0-9.]+ +0\.000000 +1\.0000$" "$tmp/out" || fail "student row: $(cat "$tmp/out")"
grep -Eq "^  teacher +[0-9.]+ +[0-9.]+ +- +-$" "$tmp/out" || fail "teacher row: $(cat "$tmp/out")"
grep -q "next-line exact match: .* (4 lines)" "$tmp/out" || fail "no next-line line: $(cat "$tmp/out")"
[ -f "$tmp/eval.json" ] && [ ! -e "$tmp/eval.json.tmp" ] || fail "no eval.json (or a leftover .tmp)"
[ "$(field tokens)" = 128 ] || fail "tokens $(field tokens), want 2 x 2 x 32 = 128"
[ "$(field kd_loss)" = 0 ] || fail "kd_loss $(field kd_loss) of a model against itself"
[ "$(field top1_agreement)" = 1 ] || fail "top1_agreement $(field top1_agreement)"
[ "$(field ce)" = "$(field teacher_ce)" ] || fail "ce $(field ce) and teacher_ce $(field teacher_ce) differ"
[ "$(field lines)" = 4 ] || fail "lines $(field lines)"
awk -v c="$(field ce)" -v p="$(field ppl)" -v m="$(field line_exact_match)" \
  'BEGIN { exit !(c > 1 && c < 9 && (exp(c) - p)^2 < 1e-12 * p * p && m >= 0 && m <= 1) }' \
  || fail "ce $(field ce), ppl $(field ppl), line match $(field line_exact_match)"

# the parent served as a bf16 copy against itself in f32: a small KD loss, not zero
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 32 --lines 2 \
  --line-context 32 --weights bf16 --json "$tmp/eval.json" --progress off > "$tmp/out" || fail "eval --weights bf16"
awk -v k="$(field kd_loss)" -v a="$(field top1_agreement)" 'BEGIN { exit !(k > 0 && k < 0.01 && a > 0.9) }' \
  || fail "bf16 against f32: kd_loss $(field kd_loss), top-1 agreement $(field top1_agreement)"

rc=0
"$ac" eval --model "$parent" --data "$tmp/data" 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "a missing --teacher exits $rc, want 2"
rc=0
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --tau 0 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--tau 0 exits $rc, want 2"
rc=0
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/none" --progress off 2> "$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "a missing val.bin exits $rc, want 1"
grep -q "none/val.bin" "$tmp/err" || fail "the error does not name val.bin: $(cat "$tmp/err")"
echo "eval: ok ($(sed -n 3p "$tmp/out" | tr -s ' '))"
