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

# warnings: a file that yields one document under fortune or lines (a wrong --format,
# likely), a split left empty though its share is > 0; none for a normal corpus
printf 'line one\nline two\nline three\n' >"$tmp/lines.txt" # lines, read as one fortune entry
run 0 tokenize --tokenizer "$tok" --out "$tmp/w1" --val-percent 0 "$tmp/lines.txt"
grep -qF "$tmp/lines.txt (29 bytes) yields one document with --format fortune" "$tmp/err" ||
    fail "no warning for one document from a whole file: $(cat "$tmp/err")"
grep -q "split is empty" "$tmp/err" && fail "val-percent 0: an empty val is no surprise: $(cat "$tmp/err")"
run 0 tokenize --tokenizer "$tok" --out "$tmp/w2" --format lines --val-percent 0 "$tmp/lines.txt"
grep -q "yields one document" "$tmp/err" && fail "three lines warned as one document: $(cat "$tmp/err")"
# one document and a 50% share: one split gets it, the other is empty whichever it is
printf 'just this\n' >"$tmp/one.txt"
run 0 tokenize --tokenizer "$tok" --out "$tmp/w3" --format files --val-percent 50 "$tmp/one.txt"
grep -q "yields one document" "$tmp/err" && fail "--format files warned about one document a file: $(cat "$tmp/err")"
[ "$(grep -c "split is empty: 0 of 1 documents went there (--val-percent 50)" "$tmp/err")" -eq 1 ] ||
    fail "want one empty-split warning: $(cat "$tmp/err")"
empty=$(grep -Eo "the (train|val) split is empty" "$tmp/err" | awk '{print $2}')
grep -Eq "^  $empty +0 documents" "$tmp/out" || fail "the warning names $empty, which is not the empty split: $(cat "$tmp/out")"
# 200 distinct lines at 50%: both splits get documents, nothing to warn about
for i in $(seq 1 200); do echo "document number $i"; done >"$tmp/many.txt"
run 0 tokenize --tokenizer "$tok" --out "$tmp/w4" --format lines --val-percent 50 --progress off "$tmp/many.txt"
grep -Eq "yields one document|split is empty" "$tmp/err" && fail "a normal corpus warned: $(cat "$tmp/err")"
grep -Eq "train +[1-9][0-9]* documents" "$tmp/out" && grep -Eq "val +[1-9][0-9]* documents" "$tmp/out" ||
    fail "200 documents at 50%: a split is empty: $(cat "$tmp/out")"
exit 0
