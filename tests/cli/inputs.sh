#!/usr/bin/env bash
# Every long command checks its inputs before its long work: each case below gives one
# input that the work would reach only late (an output under a regular file, missing
# shards, a missing parent...) and asserts the exit status, that stderr names the flag
# and the path, and that nothing started: no progress line (with AC_PROGRESS_INTERVAL=0
# and stderr not a terminal, a started stage prints "TASK: started"), no stage, no
# output directory. Then plain progress lines: a real profile and a tiny training print
# them to a non-terminal stderr, throttled by the interval, and --progress off prints none.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

source "$src/tests/cli/data/tiny_parent.sh"
tiny_parent "$ac" "$src" "$tmp"
cat >"$tmp/tiny.cfg" <<'CFG'
name = "tiny";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; input_tokens = 16; output_tokens = 4; };
targets = { latency_ratio = 0.7; };
search_space = {
  hidden_sizes = [32, 24, 16];
  mamba_heads = { values = [4, 2]; };
  routed_experts = [8, 4];
  routed_ffn = [16, 8];
  shared_ffn = [32, 16];
};
budgets = { search_tokens = 8192; kd_tokens = 4096; };
CFG
parent=$tmp/parent data=$tmp/data contract=$tmp/tiny.cfg
touch "$tmp/file" # a regular file: nothing can be created under it

# ---- plain progress lines from a real profiling (also the tables of the cases below) ----
AC_PROGRESS_INTERVAL=0 "$ac" profile --model "$parent" --contract "$contract" --out "$tmp/tables.json" --repeats 1 \
  >"$tmp/prof.out" 2>"$tmp/prof.err" || fail "profile exited $?: $(cat "$tmp/prof.err")"
# an existing output file is replaced, not refused
AC_PROGRESS_INTERVAL=0 "$ac" profile --model "$parent" --contract "$contract" --out "$tmp/tables.json" --repeats 1 \
  >"$tmp/prof.out" 2>"$tmp/prof.err" || fail "profile over its old tables exited $?: $(cat "$tmp/prof.err")"
# the summary on stdout says how many runs there were; the lines must count to it
runs=$(sed -n 's/^\([0-9]*\) runs of .*/\1/p' "$tmp/prof.out")
[ -n "$runs" ] && [ "$runs" -gt 1 ] || fail "no run count in the summary: $(cat "$tmp/prof.out")"
grep -qx "profile: started, $runs runs to do" "$tmp/prof.err" || fail "no start line: $(head -3 "$tmp/prof.err")"
grep -q "^profile: done, $runs/$runs runs (100%), [0-9]*s in all" "$tmp/prof.err" || fail "no final line"
steps=$(grep -c "^profile: [0-9]*/$runs runs ([0-9]*%), [0-9]*s elapsed" "$tmp/prof.err" || true)
[ "$steps" = "$runs" ] || fail "interval 0: want a line per run ($runs), got $steps: $(cat "$tmp/prof.err")"
grep -q "^profile: 1/$runs runs .*, about [0-9]*s left" "$tmp/prof.err" || fail "no time left in the lines"
grep -q $'\r' "$tmp/prof.err" && fail "a bar's carriage return in a non-terminal stderr"

# ---- the same from a tiny training: the default interval, --progress lines, off ----
train=(train --config "$tmp/config.json" --data "$data" --steps 6 --batch 2 --seq-len 16 --eval-every 0)
tokens=$((6 * 2 * 16))
"$ac" "${train[@]}" --out "$tmp/t1" >/dev/null 2>"$tmp/t1.err" || fail "train: $(cat "$tmp/t1.err")"
# a run far shorter than the 10 s interval: the start and the end, nothing between
[ "$(grep -c '^train: ' "$tmp/t1.err")" = 2 ] || fail "default interval: $(cat "$tmp/t1.err")"
grep -qx "train: started, $tokens tok to do" "$tmp/t1.err" || fail "train start line: $(cat "$tmp/t1.err")"
grep -q "^train: done, $tokens/$tokens tok (100%)" "$tmp/t1.err" || fail "train end line: $(cat "$tmp/t1.err")"
AC_PROGRESS_INTERVAL=0 "$ac" "${train[@]}" --progress lines --out "$tmp/t2" >/dev/null 2>"$tmp/t2.err" ||
  fail "train --progress lines: $(cat "$tmp/t2.err")"
for s in 1 2 3 4 5 6; do
  grep -q "^train: $((s * 32))/$tokens tok .*loss=" "$tmp/t2.err" || fail "no line after step $s: $(cat "$tmp/t2.err")"
done
AC_PROGRESS_INTERVAL=0 "$ac" "${train[@]}" --progress off --out "$tmp/t3" >/dev/null 2>"$tmp/t3.err" ||
  fail "train --progress off: $(cat "$tmp/t3.err")"
grep -q '^train' "$tmp/t3.err" && fail "--progress off printed: $(cat "$tmp/t3.err")"
for cmd in compress search profile train distill eval measure tokenize "costmodel validate"; do
  # shellcheck disable=SC2086
  "$ac" $cmd --help | grep -- "--progress auto|bar|lines|json|off" >/dev/null || fail "$cmd --help lists no lines mode"
done

# ---- inputs checked first ----
# expect RC WANT_IN_STDERR CMD...: the exit status, the named input, nothing started
expect() {
  local want=$1 named=$2
  shift 2
  local cmd="$1 ($named)"
  set +e
  AC_PROGRESS_INTERVAL=0 "$ac" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  set -e
  [ "$rc" = "$want" ] || fail "$cmd: exit $rc, want $want: $(cat "$tmp/err")"
  grep -qF -- "$named" "$tmp/err" || fail "$cmd: stderr does not name '$named': $(cat "$tmp/err")"
  grep -E '^[a-z ]+: (started|stage [0-9])' "$tmp/err" && fail "$cmd: long work started: $(cat "$tmp/err")"
  return 0
}

# compress --data /missing with a real parent and contract: refused before profiling
expect 1 "--data $tmp/missing: no such directory" compress --model "$parent" --contract "$contract" \
  --data "$tmp/missing" --out "$tmp/c1"
[ ! -e "$tmp/c1" ] || fail "compress made its output directory before finding the data missing"
mkdir "$tmp/noval" && cp "$data/train.bin" "$tmp/noval/"
expect 1 "--data $tmp/noval: no val.bin" compress --model "$parent" --contract "$contract" --data "$tmp/noval" \
  --out "$tmp/c2"
[ ! -e "$tmp/c2" ] || fail "compress made its output directory before finding val.bin missing"
# a shard that is not one: malformed, so compress's usage-or-input status 2
mkdir "$tmp/bad" && cp "$data/val.bin" "$tmp/bad/" && printf 'not a token shard at all, 40 bytes long' >"$tmp/bad/train.bin"
expect 2 "--data $tmp/bad/train.bin: bad magic" compress --model "$parent" --contract "$contract" --data "$tmp/bad" \
  --out "$tmp/c3"
[ ! -e "$tmp/c3" ] || fail "compress made its output directory before reading train.bin"
mkdir "$tmp/noweights" && cp "$parent/config.json" "$tmp/noweights/"
expect 2 "--model $tmp/noweights: no model.safetensors" compress --model "$tmp/noweights" --contract "$contract" \
  --data "$data" --out "$tmp/c4"
expect 1 "--tables $tmp/none.json: no such file" compress --model "$parent" --contract "$contract" --data "$data" \
  --tables "$tmp/none.json" --out "$tmp/c5"
[ ! -e "$tmp/c5" ] || fail "compress made its output directory before finding the tables missing"
expect 1 "--out $tmp/file/c: cannot be created: $tmp/file is not a directory" compress --model "$parent" \
  --contract "$contract" --data "$data" --out "$tmp/file/c"

expect 1 "--out $tmp/file/s: cannot be created" search --model "$parent" --contract "$contract" \
  --tables "$tmp/tables.json" --data "$data" --out "$tmp/file/s" --tokens 512
expect 1 "--data $tmp/missing: no such directory" search --model "$parent" --contract "$contract" \
  --tables "$tmp/tables.json" --data "$tmp/missing" --out "$tmp/s2" --tokens 512
[ ! -e "$tmp/s2" ] || fail "search made its output directory before finding the data missing"
expect 1 "--out $tmp/file/tables.json: cannot be created" profile --model "$parent" --contract "$contract" \
  --out "$tmp/file/tables.json" --repeats 1
expect 1 "--trace $tmp/file/trace.json: cannot be created" profile --model "$parent" --contract "$contract" \
  --out "$tmp/t.json" --trace "$tmp/file/trace.json" --repeats 1
[ ! -e "$tmp/t.json" ] || fail "profile wrote tables though its trace cannot be written"
expect 1 "--samples $tmp/none/s.tsv: cannot be created: $tmp/none: no such directory" costmodel validate \
  --model "$parent" --contract "$contract" --tables "$tmp/tables.json" --n 1 --repeats 1 --samples "$tmp/none/s.tsv"
expect 1 "--samples $tmp/file/s.tsv: cannot be created" costmodel validate --model "$parent" --contract "$contract" \
  --tables "$tmp/tables.json" --n 1 --repeats 1 --requests 2 --samples "$tmp/file/s.tsv"
expect 1 "--out $tmp/file/t: cannot be created" "${train[@]}" --out "$tmp/file/t"
expect 1 "--data $tmp/noval: no val.bin" train --config "$tmp/config.json" --data "$tmp/noval" --steps 6 --batch 2 \
  --seq-len 16 --eval-every 3 --out "$tmp/t4"
[ ! -e "$tmp/t4" ] || fail "train made its output before finding val.bin missing"
expect 1 "--out $tmp/file/d: cannot be created" distill --teacher "$parent" --student "$parent" --data "$data" \
  --steps 2 --batch 2 --seq-len 16 --out "$tmp/file/d"
expect 1 "--teacher $tmp/missing: no such directory" distill --teacher "$tmp/missing" --student "$parent" \
  --data "$data" --steps 2 --batch 2 --seq-len 16 --out "$tmp/d2"
expect 1 "--json $tmp/file/e.json: cannot be created" eval --model "$parent" --teacher "$parent" --data "$data" \
  --batches 1 --json "$tmp/file/e.json"
expect 1 "--data $tmp/missing: no such directory" eval --model "$parent" --teacher "$parent" --data "$tmp/missing" \
  --batches 1
expect 1 "--parent $tmp/missing: no such directory" measure --model "$parent" --contract "$contract" \
  --parent "$tmp/missing" --tables "$tmp/tables.json" --sweeps 1
expect 1 "--contract $tmp/none.cfg: no such file" measure --model "$parent" --contract "$tmp/none.cfg" --sweeps 1
expect 1 "--out $tmp/file/p: cannot be created" prune --model "$parent" --arch "$tmp/config.json" --ordered \
  --out "$tmp/file/p"
expect 1 "--arch $tmp/none.json: no such file" prune --model "$parent" --arch "$tmp/none.json" --ordered \
  --out "$tmp/p2"
[ ! -e "$tmp/p2" ] || fail "prune wrote its output without an architecture"
# a missing second input: nothing tokenized, no output directory
expect 1 "INPUT $tmp/missing.txt: no such file" tokenize --tokenizer "$src/examples/data/tokenizer.json" \
  --out "$tmp/tok" "$src/tests/fixtures/tokenizer/lines.txt" "$tmp/missing.txt"
[ ! -e "$tmp/tok" ] || fail "tokenize made its output directory before finding an input missing"
exit 0
