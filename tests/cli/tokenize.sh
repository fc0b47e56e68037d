#!/usr/bin/env bash
# `autocompress tokenize`: exit codes, the shards and manifest it writes, JSON progress.
# Usage: tokenize.sh AUTOCOMPRESS_BINARY SOURCE_DIR
set -u
cli=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# run EXPECTED_RC ARGS...: runs the binary, stdout to $tmp/out, stderr to $tmp/err
run() {
    local want=$1
    shift
    "$cli" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "autocompress $*: exit $rc, want $want; stderr: $(cat "$tmp/err")"
}

[ -x "$cli" ] || fail "no autocompress binary at $cli (did the build link it?)"
tok=$src/examples/data/tokenizer.json

printf 'first entry\n%%\nsecond entry\nwith two lines\n%%\n\n%%\nthird\n' >"$tmp/f.txt"
printf 'a line\nanother line\n\nlast line' >"$tmp/l.txt"

run 0 tokenize --help
grep -q "usage: autocompress tokenize" "$tmp/out" || fail "--help prints no usage"
run 2 tokenize --tokenizer "$tok" "$tmp/f.txt"
grep -q "required" "$tmp/err" || fail "no message for a missing --out"
run 2 tokenize --tokenizer "$tok" --out "$tmp/o" --format paragraphs "$tmp/f.txt"
run 2 tokenize --tokenizer "$tok" --out "$tmp/o" --val-percent 101 "$tmp/f.txt"
run 2 tokenize --tokenizer "$tok" --out "$tmp/o" --bogus "$tmp/f.txt"
run 1 tokenize --tokenizer "$tmp/nope.json" --out "$tmp/o" "$tmp/f.txt"
grep -q "nope.json" "$tmp/err" || fail "the missing tokenizer is not named"
run 1 tokenize --tokenizer "$tok" --out "$tmp/o" "$tmp/missing.txt"

run 0 tokenize --tokenizer "$tok" --out "$tmp/o" --val-percent 0 "$tmp/f.txt"
grep -Eq "train +3 documents" "$tmp/out" || fail "fortune format: want 3 train documents: $(cat "$tmp/out")"
for f in train.bin val.bin manifest.json; do
    [ -s "$tmp/o/$f" ] || fail "no $f"
done
[ "$(head -c 8 "$tmp/o/train.bin")" = ACTOKENS ] || fail "train.bin has no ACTOKENS magic"
[ "$(stat -c %s "$tmp/o/val.bin")" -eq 32 ] || fail "val.bin is not an empty shard"
grep -q '"fnv1a64"' "$tmp/o/manifest.json" || fail "manifest lacks the tokenizer checksum"
grep -q '"document_format":[[:space:]]*"fortune"' "$tmp/o/manifest.json" || fail "manifest lacks the format"

printf '%s\n' "$tmp/l.txt" "$tmp/f.txt" >"$tmp/list"
run 0 tokenize --tokenizer "$tok" --out "$tmp/o2" --format lines --inputs-from "$tmp/list" --progress=json
grep -q '"final":true' "$tmp/err" || fail "--progress=json wrote no final record"
grep -q "tokenized 2 files" "$tmp/out" || fail "--inputs-from did not read two inputs: $(cat "$tmp/out")"
run 0 tokenize --tokenizer "$tok" --out "$tmp/o3" --format files "$tmp/l.txt" "$tmp/f.txt"
grep -Eq "train +[0-9]+ documents" "$tmp/out" || fail "files format printout"
exit 0
