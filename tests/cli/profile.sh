#!/usr/bin/env bash
# `autocompress profile` and `autocompress costmodel`: profile a tiny checkpoint under a
# tiny contract (tables JSON and a Chrome trace), validate the cost model on held-out
# architectures (table, MAPE lines, a PNG when gnuplot is present), predict one
# architecture; bad arguments are usage errors that name what is wrong. Nothing checks
# how accurate the timings are (that needs a quiet machine: see the issue's validation).
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$src/tests/fixtures/nemotron_h/hybrid_f32"
cat >"$tmp/tiny.cfg" <<'EOF'
name = "tiny";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; cached_tokens = 4; input_tokens = 5; output_tokens = 3; };
targets = { latency_ms = 10.0; };
search_space = {
  hidden_sizes = [64, 32];
  mamba_heads = { values = [8, 4]; };
  routed_experts = [8, 4];
  routed_ffn = [32, 16];
  shared_ffn = [48, 24];
};
EOF
fail() { echo "FAIL: $*"; exit 1; }

"$ac" profile --model "$model" --contract "$tmp/tiny.cfg" --out "$tmp/tables.json" --repeats 1 \
  --trace "$tmp/trace.json" --progress off >"$tmp/out" || fail "profile exited $?"
grep -q "table rows" "$tmp/out" || fail "no summary: $(cat "$tmp/out")"
grep -q '"format":[[:space:]]*"autocompress-cost-tables"' "$tmp/tables.json" || fail "tables lack their format"
grep -q '"kind":[[:space:]]*"moe"' "$tmp/tables.json" || fail "no MoE rows"
grep -q '"eps_bytes"' "$tmp/tables.json" || fail "no memory residual"
[ ! -e "$tmp/tables.json.tmp" ] || fail "temporary file left behind"
grep -q '"ph":"X"' "$tmp/trace.json" || fail "trace has no slices"
grep -q '"name":"thread_name"' "$tmp/trace.json" || fail "trace has no named tracks"

"$ac" costmodel validate --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/tables.json" --n 2 \
  --repeats 1 --requests 3 --samples "$tmp/samples.tsv" --progress off --plot "$tmp/v.png" >"$tmp/val" \
  2>"$tmp/val.err" || {
  # only a missing gnuplot may fail the plot
  grep -q "gnuplot" "$tmp/val.err" || fail "validate exited: $(cat "$tmp/val.err")"
}
grep -q "latency MAPE" "$tmp/val" || fail "no latency MAPE: $(cat "$tmp/val")"
grep -q "conventional W+C+P MAPE" "$tmp/val" || fail "no conventional memory error"
grep -q "1 sweeps of 3.0 timed requests" "$tmp/val" || fail "not 3 requests per process: $(cat "$tmp/val")"
# a header and 2 architectures x 3 requests, each with the reference timed after it
[ "$(head -1 "$tmp/samples.tsv")" = "$(printf 'arch\tsweep\tms\treference_ms')" ] || fail "samples header"
[ "$(awk 'NR > 1 && $3 > 0 && $4 > 0' "$tmp/samples.tsv" | wc -l)" -eq 6 ] || fail "samples: $(cat "$tmp/samples.tsv")"
[ "$(grep -c '^[0-9]* *d[0-9]' "$tmp/val")" -eq 2 ] || fail "expected 2 architectures: $(cat "$tmp/val")"
if command -v gnuplot >/dev/null; then
  [ "$(head -c 4 "$tmp/v.png" | tail -c 3)" = "PNG" ] || fail "the plot is not a PNG"
fi

"$ac" costmodel predict --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/tables.json" \
  --arch "$model/config.json" >"$tmp/pred" || fail "predict exited $?"
grep -q "^latency .* ms" "$tmp/pred" || fail "no predicted latency: $(cat "$tmp/pred")"
grep -q "eps" "$tmp/pred" || fail "no memory breakdown"

# the tables carry what measured them: this CPU (as /proc/cpuinfo names it) and 1 thread;
# another machine's tables (here: the same with another CPU name and 3 threads) are
# refused naming both fields, and used with --foreign-tables and a warning naming them
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
python3 - "$tmp/tables.json" "$cpu" "$tmp/foreign.json" <<'PY' || fail "the tables' fingerprint"
import json, sys
t = json.load(open(sys.argv[1]))
fp = t["fingerprint"]
assert fp["cpu_model"] == (sys.argv[2] or "unknown"), fp
assert fp["threads"] == 1 and fp["device"] == "cpu" and fp["weights"] == "f32", fp
fp["cpu_model"], fp["threads"] = "Another CPU", 3
json.dump(t, open(sys.argv[3], "w"))
PY
set +e
"$ac" costmodel predict --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/foreign.json" \
  --arch "$model/config.json" >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ $rc -ne 0 ] && grep -q 'cpu_model: tables "Another CPU"' "$tmp/err" && grep -q "threads: tables 3, here 1" "$tmp/err" ||
  fail "foreign tables: rc $rc, $(cat "$tmp/err")"
"$ac" costmodel predict --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/foreign.json" --foreign-tables \
  --arch "$model/config.json" >"$tmp/pred2" 2>"$tmp/err" || fail "--foreign-tables exited $?"
grep -q "warning: .*threads: tables 3, here 1" "$tmp/err" || fail "no warning naming the fields: $(cat "$tmp/err")"
cmp -s "$tmp/pred" "$tmp/pred2" || fail "the foreign tables predicted otherwise"

set +e
"$ac" profile --model "$model" --contract "$tmp/tiny.cfg" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--out" "$tmp/err" || fail "missing --out: rc $rc, $(cat "$tmp/err")"
"$ac" profile --model "$model" --contract "$tmp/none.cfg" --out "$tmp/x.json" 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "none.cfg" "$tmp/err" || fail "missing contract: rc $rc, $(cat "$tmp/err")"
"$ac" profile --model "$model" --contract "$tmp/tiny.cfg" --out "$tmp/x.json" --repeats 0 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--repeats" "$tmp/err" || fail "--repeats 0: rc $rc, $(cat "$tmp/err")"
"$ac" costmodel validate --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/tables.json" --requests 9 \
  2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--requests" "$tmp/err" || fail "--requests 9: rc $rc, $(cat "$tmp/err")"
"$ac" costmodel validate --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/tables.json" --n 1 --repeats 1 \
  --progress off --samples "$tmp/missing/s.tsv" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "missing/s.tsv" "$tmp/err" || fail "unwritable --samples: rc $rc, $(cat "$tmp/err")"
"$ac" costmodel frobnicate 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "frobnicate" "$tmp/err" || fail "unknown subcommand: rc $rc"
echo '{"format": "something else"}' >"$tmp/bad.json"
"$ac" costmodel validate --model "$model" --contract "$tmp/tiny.cfg" --tables "$tmp/bad.json" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json" "$tmp/err" || fail "bad tables: rc $rc, $(cat "$tmp/err")"
set -e
echo "profile: ok"
