#!/usr/bin/env bash
# Cost tables belong to the machine that measured them, in `compress`: with --tables-cache
# the first run profiles and keeps its tables there, a second run (another --out, another
# target) copies them instead of profiling (the same bytes, no profiling stage time worth
# the name); tables from another machine are refused before any work, naming the fields,
# and with --foreign-tables the run goes on and its report says they came from elsewhere.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

source "$src/tests/cli/data/tiny_parent.sh"
tiny_parent "$ac" "$src" "$tmp"
contract() { # contract LATENCY_RATIO
  cat <<CFG
name = "tiny";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; input_tokens = 16; output_tokens = 4; };
targets = { latency_ratio = $1; };
search_space = {
  hidden_sizes = [32, 16];
  mamba_heads = { values = [4]; scope = "per_layer"; remove = true; };
  routed_experts = [8, 4];
  routed_ffn = [16, 0];
  shared_ffn = [32, 0];
  removable = ["mamba", "moe"];
};
budgets = { search_tokens = 8192; kd_tokens = 2048; };
CFG
}
contract 0.7 >"$tmp/a.cfg"
contract 0.8 >"$tmp/b.cfg"
args=(compress --model "$tmp/parent" --data "$tmp/data" --batch 2 --seq-len 32 --profile-repeats 1
      --measure-sweeps 1 --eval-batches 1 --progress off --tables-cache "$tmp/cache")
run() { # run OUT CONTRACT [extra args]: done (0) or done with a target missed (3)
  local out=$1 cfg=$2; shift 2
  set +e
  "$ac" "${args[@]}" --contract "$cfg" --out "$out" "$@" >"$out.log" 2>"$out.err"
  local rc=$?
  set -e
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || fail "compress exited $rc: $(tail -5 "$out.err")"
}
stage_seconds() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stage_seconds"]["tables"])' "$1"; }

run "$tmp/a" "$tmp/a.cfg"
cached=("$tmp"/cache/tiny-*.json)
[ ${#cached[@]} = 1 ] && [ -f "${cached[0]}" ] || fail "no tables kept in the cache: $(ls "$tmp/cache" 2>&1)"
cmp -s "${cached[0]}" "$tmp/a/tables.json" || fail "the cached tables are not the run's"
grep -q '"fingerprint"' "${cached[0]}" || fail "the tables carry no fingerprint"

run "$tmp/b" "$tmp/b.cfg"
grep -q "reusing the tables profiled here before" "$tmp/b.err" || fail "the second run did not reuse: $(cat "$tmp/b.err")"
cmp -s "${cached[0]}" "$tmp/b/tables.json" || fail "the second run's tables are not the cached ones"
[ "$(ls "$tmp/cache" | wc -l)" = 1 ] || fail "a second cache entry for the same space: $(ls "$tmp/cache")"
python3 - "$tmp/a/report.json" "$tmp/b/report.json" <<'PY' || fail "the reports' tables"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["tables"]["measured_here"] is True and a["tables"]["differences"] == "", a["tables"]
assert b["tables"]["measured_here"] is True, b["tables"]
# profiling ran in a, not in b: its tables stage took longer than b's copy
assert a["stage_seconds"]["tables"] > 3 * b["stage_seconds"]["tables"], (a["stage_seconds"], b["stage_seconds"])
PY

# another machine's tables: refused before any stage, naming the fields
python3 - "$tmp/a/tables.json" "$tmp/foreign.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["fingerprint"]["cpu_model"], t["fingerprint"]["blas_core"] = "Another CPU", "Nehalem"
json.dump(t, open(sys.argv[2], "w"))
PY
set +e
"$ac" "${args[@]}" --contract "$tmp/a.cfg" --out "$tmp/c" --tables "$tmp/foreign.json" >/dev/null 2>"$tmp/c.err"
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 3 ] || fail "foreign tables were used: exit $rc"
grep -q 'cpu_model: tables "Another CPU"' "$tmp/c.err" && grep -q 'blas_core: tables "Nehalem"' "$tmp/c.err" ||
  fail "the refusal does not name the fields: $(cat "$tmp/c.err")"
[ ! -e "$tmp/c/search" ] || fail "the search ran on foreign tables"

run "$tmp/d" "$tmp/a.cfg" --tables "$tmp/foreign.json" --foreign-tables
grep -q "measured elsewhere" "$tmp/d.err" || fail "no warning: $(cat "$tmp/d.err")"
python3 - "$tmp/d/report.json" <<'PY' || fail "the report does not say the tables came from elsewhere"
import json, sys
t = json.load(open(sys.argv[1]))["tables"]
assert t["measured_here"] is False and "Another CPU" in t["differences"], t
PY
grep -q "were measured elsewhere" "$tmp/d/report.md" || fail "report.md does not say so"
echo "tables_cache: ok"
