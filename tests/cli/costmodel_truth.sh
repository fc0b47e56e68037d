#!/usr/bin/env bash
# The cost model is right, not just running: profile a tiny space, validate it on
# held-out architectures (measured end to end here), and bound the errors: latency
# (speed-normalised) MAPE under LAT_BOUND and memory MAPE under MEM_BOUND, loose enough
# for a shared machine. The same validation with broken tables must fail those bounds:
# tables whose decode rows are zero (a model that ignores decoding) miss on latency, and
# tables without the memory residual eps miss on memory. Under AddressSanitizer the
# process's memory holds shadow memory, so there only latency is bounded.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
LAT_BOUND=30
MEM_BOUND=20
model="$src/tests/fixtures/nemotron_h/hybrid_f32"
cat >"$tmp/tiny.cfg" <<'CFG'
name = "tiny";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; cached_tokens = 0; input_tokens = 32; output_tokens = 16; };
targets = { latency_ms = 10.0; };
search_space = {
  hidden_sizes = [64, 32];
  mamba_heads = { values = [8, 4]; };
  routed_experts = [8, 4];
  routed_ffn = [32, 16];
  shared_ffn = [48, 24];
  removable = ["mamba", "moe"];
};
CFG
sanitized=0
grep -qa __asan_init "$ac" && sanitized=1

"$ac" profile --model "$model" --contract "$tmp/tiny.cfg" --out "$tmp/tables.json" --repeats 3 --progress off \
  >/dev/null || fail "profile exited $?"
python3 - "$tmp/tables.json" "$tmp/no-decode.json" "$tmp/no-eps.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for row in t["rows"]:
    row["decode"]["a_us"] = row["decode"]["b_us"] = 0.0
json.dump(t, open(sys.argv[2], "w"))
t = json.load(open(sys.argv[1]))
t["memory"]["eps_bytes"] = 0.0
for run in t["memory"]["runs"]:  # the residual per hidden size comes from these
    run["measured"] = run["weights"] + run["kv"] + run["state"] + run["activations"]
json.dump(t, open(sys.argv[3], "w"))
PY

validate() { # validate TABLES: prints "LATENCY_MAPE MEMORY_MAPE" (percent)
  # held out: 8 drawn architectures and one given (the parent itself, as a search's pick is given)
  "$ac" costmodel validate --model "$model" --contract "$tmp/tiny.cfg" --tables "$1" --n 8 --repeats 3 --seed 7 \
    --arch "$model/config.json" --progress off >"$tmp/out" || fail "validate exited $? on $1"
  grep -q "^given architectures (0-0): latency MAPE" "$tmp/out" || fail "the given architecture is not scored apart"
  local lat mem
  lat=$(sed -nE 's/^speed-normalised: latency MAPE ([0-9.]+)%.*/\1/p' "$tmp/out")
  mem=$(sed -nE 's/^memory MAPE ([0-9.]+)%.*/\1/p' "$tmp/out")
  [ -n "$lat" ] && [ -n "$mem" ] || fail "no MAPE lines: $(cat "$tmp/out")"
  echo "$lat $mem"
}
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

read -r lat mem < <(validate "$tmp/tables.json")
echo "tables: latency MAPE $lat%, memory MAPE $mem%"
below "$lat" $LAT_BOUND || fail "latency MAPE $lat% over $LAT_BOUND%: $(cat "$tmp/out")"
[ $sanitized = 1 ] || below "$mem" $MEM_BOUND || fail "memory MAPE $mem% over $MEM_BOUND%: $(cat "$tmp/out")"

read -r lat_broken _ < <(validate "$tmp/no-decode.json")
echo "no decode rows: latency MAPE $lat_broken%"
below "$lat_broken" $LAT_BOUND && fail "a model without decode rows passes the latency bound ($lat_broken%)"
if [ $sanitized = 0 ]; then
  read -r _ mem_broken < <(validate "$tmp/no-eps.json")
  echo "no memory residual: memory MAPE $mem_broken%"
  below "$mem_broken" $MEM_BOUND && fail "a model without the memory residual passes the memory bound ($mem_broken%)"
fi
echo "costmodel_truth: ok"
