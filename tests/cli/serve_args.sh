#!/usr/bin/env bash
# `autocompress serve` refuses bad arguments, configs and models with a message that
# names what is wrong: usage errors exit 2, a model that cannot be served exits 1.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect RC WORD ARGS...: runs serve ARGS, wants exit RC and WORD in its stderr
expect() {
  local want=$1 word=$2 rc=0
  shift 2
  timeout 60 "$ac" serve "$@" 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" -eq "$want" ] || fail "serve $*: exit $rc, wanted $want: $(cat "$tmp/err")"
  grep -q -- "$word" "$tmp/err" || fail "serve $*: no '$word' in: $(cat "$tmp/err")"
}
model="$src/examples/parent/prose"
printf 'slots = 4;\nport = 70000;\n' >"$tmp/range.cfg"
printf 'slots = 4;\nspeed = 1;\n' >"$tmp/unknown.cfg"
printf 'host = 5;\n' >"$tmp/type.cfg"
expect 2 "--model is required" --port 0
expect 2 "unknown option '--bogus'" --model "$model" --bogus
expect 2 "--port" --model "$model" --port 99999
expect 2 "'--config' needs a value" --model "$model" --config
expect 2 "range.cfg:2: port must be in" --model "$model" --config "$tmp/range.cfg"
expect 2 "unknown.cfg:2: speed is not a server setting" --model "$model" --config "$tmp/unknown.cfg"
expect 2 "type.cfg:1: host must be a string" --model "$model" --config "$tmp/type.cfg"
expect 2 "none.cfg" --model "$model" --config "$tmp/none.cfg"
printf 'weights = "f16";\n' >"$tmp/weights.cfg"
expect 2 "weights.cfg:1: weights must be" --model "$model" --config "$tmp/weights.cfg"
expect 2 "--weights: 'f16' is neither f32 nor bf16" --model "$model" --port 0 --weights f16
expect 1 "is not an IPv4 or IPv6 address" --model "$model" --host example.org --port 0
expect 1 "$tmp/missing/config.json" --model "$tmp/missing" --port 0
printf 'profile_tables = "%s/none.json";\n' "$tmp" >"$tmp/tables.cfg"
expect 1 "$tmp/none.json" --model "$model" --port 0 --config "$tmp/tables.cfg"
expect 1 '"tpu": not in this build' --model "$model" --port 0 --device tpu
printf 'device = "tpu";\n' >"$tmp/device.cfg"
expect 1 '"tpu": not in this build' --model "$model" --port 0 --config "$tmp/device.cfg"
expect 2 "--device is too long" --model "$model" --port 0 --device cuda-cuda-cuda-cuda
expect 1 "cannot write the port file" --model "$model" --port 0 --port-file "$tmp/no/such/dir/port"
echo "serve_args: ok"
