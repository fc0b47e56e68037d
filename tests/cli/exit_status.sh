#!/usr/bin/env bash
# One set of exit statuses for every command (README): 0 done and every target met, 3 done
# and a target missed, 1 a failure, 2 bad usage. Each command's --help states them in the
# same words (with targets: search, measure, compress and the admin commands that follow a
# job); each command fails with 1 on an input it cannot read, and exits 2 on a missing
# option or an input that is not valid; measure exits 3 on a target no model meets.
# (search.sh, compress.sh, measure.sh and bf16_contract.sh check 0 and 3 against the
# numbers; control.sh the admin commands that follow a job.)
set -uo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }
parent="$src/examples/parent/prose"
contract="$src/examples/contracts/cpu-latency.cfg"
tables="$src/examples/search/cpu-latency/tables.json"

# ---- the help texts ----
tail_text='1 on a failure, 2 on bad usage
(an option, or an input that is not valid).'
plain="Exit status: 0 when done, $tail_text"
# exit_paragraph CMD...: the help's lines from "Exit status:" to the blank line
exit_paragraph() { "$ac" "$@" --help | sed -n '/^Exit status:/,/^$/p' | sed '/^$/d'; }
for cmd in info logits generate convert train distill tokenize profile "costmodel validate" "costmodel predict" prune \
           eval serve "admin status" "admin swap" "admin policy" "admin profile"; do
  # shellcheck disable=SC2086
  [ "$(exit_paragraph $cmd)" = "$plain" ] || fail "autocompress $cmd --help: '$(exit_paragraph $cmd)'"
done
for cmd in search measure compress "admin recompress" "admin jobs" "admin cancel" "admin resume"; do
  # shellcheck disable=SC2086
  text=$(exit_paragraph $cmd)
  grep -q "^Exit status: 0 when done and .*,$" <<<"$text" &&
    [ "$(sed 1d <<<"$text")" = "3 when done and a target is missed, $tail_text" ] ||
    fail "autocompress $cmd --help: '$text'"
done
[ "$(exit_paragraph contract check)" = "Exit status: 0 when every file is valid, 1 when any is not, 2 on bad usage." ] ||
  fail "contract check --help: '$(exit_paragraph contract check)'"

# ---- the statuses ----
# expect WANT ARGS...: autocompress ARGS exits WANT; a failure or bad usage says why on stderr
expect() {
  local want=$1 rc
  shift
  timeout 120 "$ac" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" = "$want" ] || fail "autocompress $*: exit $rc, want $want: $(head -c 400 "$tmp/err")"
  [ "$want" != 1 ] && [ "$want" != 2 ] || [ -s "$tmp/err" ] || fail "autocompress $*: exit $rc and nothing on stderr"
}
none=$tmp/nonexistent
mkdir -p "$tmp/data"
printf 'name = "broken";\nhardware = { device = "cpu"; ;\n' >"$tmp/broken.cfg"
sed -e 's/latency_ratio = 0.65;/latency_ms = 0.001;/' -e 's/memory_ratio = 0.46;//' "$contract" >"$tmp/tight.cfg"
grep -q "latency_ms = 0.001;" "$tmp/tight.cfg" || fail "the tight contract was not made"

# 1: an input that cannot be read
expect 1 info --model "$none"
expect 1 logits --model "$none" --ids 1
expect 1 generate --model "$none" --ids 1 --max-tokens 1
expect 1 convert --model "$none" --out "$tmp/converted"
expect 1 train --config "$none/config.json" --data "$tmp/data" --out "$tmp/trained" --progress off
expect 1 distill --teacher "$none" --student "$none" --data "$tmp/data" --out "$tmp/distilled" --progress off
expect 1 tokenize --tokenizer "$none/tokenizer.json" --out "$tmp/tokens" --progress off "$none.txt"
expect 1 profile --model "$parent" --contract "$none.cfg" --out "$tmp/tables.json" --progress off
expect 1 costmodel validate --model "$parent" --contract "$none.cfg" --tables "$tables" --progress off
expect 1 costmodel predict --model "$parent" --contract "$none.cfg" --tables "$tables" --arch "$parent/config.json"
expect 1 search --model "$parent" --contract "$none.cfg" --tables "$tables" --data "$tmp/data" --out "$tmp/s" \
  --progress off
expect 1 prune --model "$none" --arch "$parent/config.json" --ordered --out "$tmp/pruned"
expect 1 eval --model "$parent" --teacher "$parent" --data "$none" --progress off
expect 1 measure --model "$none" --contract "$tmp/tight.cfg" --progress off
expect 1 compress --model "$parent" --contract "$none.cfg" --data "$tmp/data" --out "$tmp/c" --progress off
expect 1 contract check "$none.cfg"
expect 1 serve --model "$none" --port 0
AUTOCOMPRESS_ADMIN_TOKEN=t expect 1 admin status --server http://127.0.0.1:1

# 2: a missing option, a combination, an input that is not valid
expect 2 info
expect 2 contract check
expect 2 train --config "$parent/config.json" --model "$parent" --data "$tmp/data" --out "$tmp/trained"
expect 2 measure --model "$parent" --contract "$contract" --parent "$parent"
expect 2 logits --model "$parent" --ids 999999999
expect 2 costmodel predict --model "$parent" --contract "$tmp/broken.cfg" --tables "$tables" --arch "$parent/config.json"
expect 2 search --model "$parent" --contract "$tmp/broken.cfg" --tables "$tables" --data "$tmp/data" --out "$tmp/s" \
  --progress off
expect 2 compress --model "$parent" --contract "$tmp/broken.cfg" --data "$tmp/data" --out "$tmp/c" --progress off
printf 'slots = "many";\n' >"$tmp/server.cfg"
expect 2 serve --model "$parent" --config "$tmp/server.cfg" --port 0
expect 2 admin jobs --server http://127.0.0.1:1 --follow

# 3: done, a target missed; 0: done, every target met
expect 3 measure --model "$parent" --contract "$tmp/tight.cfg" --sweeps 1 --requests 1 --progress off
grep -q "^FAIL: a target is missed" "$tmp/out" || fail "measure exited 3 but printed: $(cat "$tmp/out")"
sed -e 's/latency_ratio = 0.65;/latency_ms = 100000;/' -e 's/memory_ratio = 0.46;//' "$contract" >"$tmp/loose.cfg"
expect 0 measure --model "$parent" --contract "$tmp/loose.cfg" --sweeps 1 --requests 1 --progress off
grep -q "^PASS: every target met" "$tmp/out" || fail "measure exited 0 but printed: $(cat "$tmp/out")"
echo "exit status: ok"
