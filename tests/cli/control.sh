#!/usr/bin/env bash
# The controller end to end, on the prose parent served under 4 concurrent clients:
#   - every admin endpoint refuses a missing or wrong token (401) and bad bodies (400
#     naming the field); unknown jobs are 404, actions in the wrong state 409;
#   - an operator recompression (`autocompress admin recompress --follow`) runs to its end
#     and its model is swapped in (/admin/status shows it);
#   - a second job, from the live workload, is refused company (409), its child is killed
#     with kill -9: the job reads failed, the server keeps serving, resume finishes it;
#   - not one client request fails or comes back truncated through all of it;
#   - a job running when the server stops reads interrupted after a restart, and resume
#     finishes it.
# Budgets are tiny: a one-thread contract of short requests over a small search space
# with a memory target only (which a loaded machine measures as reliably as an idle
# one), its tables profiled here in a second.
set -euo pipefail
ac=$1
src=$2
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
source "$src/tests/server/serve_lib.sh"
tmp=$serve_tmp
export AUTOCOMPRESS_ADMIN_TOKEN=control-test-token
model="$src/examples/parent/prose"
# Under AddressSanitizer a job's measured memory peak depended on the sanitizer's
# quarantine, which keeps freed blocks from reuse so that later allocations take fresh
# pages: the same model under the same contract measured 41.5 and 47.8 MB in one run
# (41.3 predicted), and jobs missed targets the plain build meets within 0.2% of the
# prediction. Without the quarantine here (use-after-free is still caught by the other
# tests' full quarantine), freed memory is reused as in the plain build.
ratio=0.8 live_ratio=0.85
if grep -qa __asan_init "$ac"; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
fi

"$ac" tokenize --tokenizer "$src/examples/data/tokenizer.json" --out "$tmp/data" --format lines --val-percent 10 \
  --progress off "$src/tests/fixtures/tokenizer/lines.txt" >/dev/null
cat >"$tmp/mem.cfg" <<EOF
name = "control-test";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; cached_tokens = 0; input_tokens = 64; output_tokens = 8; };
targets = { memory_ratio = $ratio; };
search_space = {
  hidden_sizes = [256, 128];
  mamba_heads = { values = [8]; scope = "per_layer"; remove = true; };
  routed_experts = [16, 8];
  routed_ffn = [128, 0];
  shared_ffn = [256, 0];
  removable = ["mamba", "moe"];
};
EOF
"$ac" profile --model "$model" --contract "$tmp/mem.cfg" --out "$tmp/tables.json" --repeats 1 --progress off \
  >"$tmp/profile.log" || fail "profile: $(tail -3 "$tmp/profile.log")"
cat >"$tmp/server.cfg" <<EOF
slots = 4;
threads = 1;
control = {
  jobs_dir = "$tmp/jobs"; data = "$tmp/data"; tables = "$tmp/tables.json";
  contract = "$tmp/mem.cfg"; threads = 1; nice = 0; # at nice 10 a busy CI machine leaves a job a tenth of a core
  search_tokens = 16384; kd_tokens = 4096; measure_sweeps = 1; eval_batches = 2;
};
EOF
serve_start "$ac" --model "$model" --config "$tmp/server.cfg"
base="http://127.0.0.1:$port"

# api METHOD PATH [BODY [TOKEN]]: prints the status; the body lands in $tmp/resp
api() {
  local token=${4-$AUTOCOMPRESS_ADMIN_TOKEN} args=(-s -o "$tmp/resp" -w '%{http_code}' -X "$1")
  [ -n "$token" ] && args+=(-H "Authorization: Bearer $token")
  [ -n "${3:-}" ] && args+=(--data-binary "$3")
  curl "${args[@]}" "$base$2"
}
# field KEY [FILE]: a top-level value of the JSON in $tmp/resp
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[2]))[sys.argv[1]]; print(v)' "$1" "${2:-$tmp/resp}"; }
job_field() { [ "$(api GET "/admin/jobs/$1")" = 200 ] || fail "GET /admin/jobs/$1: $(cat "$tmp/resp")"; field "$2"; }
# wait_job ID PREDICATE: polls until python's PREDICATE(job) holds, for up to 5 minutes
wait_job() {
  for _ in $(seq 1 600); do
    api GET "/admin/jobs/$1" >/dev/null
    python3 -c "import json,sys; j=json.load(open('$tmp/resp')); sys.exit(0 if ($2) else 1)" && return 0
    sleep 0.5
  done
  fail "job $1 never reached: $2 ($(cat "$tmp/resp"))"
}

# ---- tokens and bodies ----
for ep in "GET /admin/status" "GET /admin/workload" "GET /admin/jobs" "GET /admin/jobs/job-0001" \
          "DELETE /admin/jobs/job-0001" "POST /admin/jobs/job-0001/resume" "POST /admin/recompress" \
          "GET /admin/policy" "POST /admin/swap"; do
  set -- $ep
  [ "$(api "$1" "$2" '{}' '')" = 401 ] || fail "$ep without a token: $(cat "$tmp/resp")"
  [ "$(api "$1" "$2" '{}' wrong-token)" = 401 ] || fail "$ep with a wrong token: $(cat "$tmp/resp")"
done
bad_body() { # BODY WORD: 400 and the message names WORD
  local status
  status=$(api POST /admin/recompress "$1")
  [ "$status" = 400 ] && grep -q "$2" "$tmp/resp" || fail "recompress $1: $status $(cat "$tmp/resp")"
}
bad_body 'not json' 'JSON object'
bad_body '{"kd_tokens": -5}' kd_tokens
bad_body '{"search_tokens": 1.5}' search_tokens
bad_body '{"bogus": 1}' bogus
bad_body '{"method": "magic"}' method
bad_body '{"swap": "sometimes"}' swap
bad_body '{"contract": "name = 1;"}' name
bad_body '{"targets": {"latency_ratio": 0.7}}' from_live
bad_body '{"from_live": true, "targets": {"latency_ratio": "fast"}}' latency_ratio
bad_body '{"data": "/nonexistent"}' data
bad_body "{\"contract_path\": \"$tmp/none.cfg\"}" contract_path
# a contract serving bf16 weights on a server that serves f32
sed 's/^hardware = {/hardware = { weights = "bf16";/' "$tmp/mem.cfg" >"$tmp/bf16.cfg"
grep -q 'weights = "bf16"' "$tmp/bf16.cfg" || fail "no bf16 contract made"
bad_body "{\"contract_path\": \"$tmp/bf16.cfg\"}" "this server serves f32 weights"
[ "$(api POST /admin/recompress '{"from_live": true}')" = 409 ] && grep -q "no requests" "$tmp/resp" ||
  fail "from_live before any request: $(cat "$tmp/resp")"
[ "$(api GET /admin/jobs/job-9999)" = 404 ] || fail "an unknown job: $(cat "$tmp/resp")"
[ "$(api GET /admin/jobs/..%2F..%2Fetc)" = 404 ] || fail "a path as a job id: $(cat "$tmp/resp")"
[ "$(api PUT /admin/jobs)" = 405 ] || fail "PUT /admin/jobs: $(cat "$tmp/resp")"
[ "$(api GET /admin/policy)" = 200 ] && [ "$(field enabled)" = False ] || fail "policy: $(cat "$tmp/resp")"
[ "$(api GET /admin/jobs)" = 200 ] && [ "$(python3 -c "import json; print(len(json.load(open('$tmp/resp'))['jobs']))")" = 0 ] ||
  fail "jobs before any: $(cat "$tmp/resp")"

# ---- clients from here to the restart ----
python3 "$src/tests/server/control_clients.py" --port "$port" --stop "$tmp/stop" --out "$tmp/clients.json" &
clients=$!
trap 'kill "$clients" 2>/dev/null || true; serve_cleanup' EXIT
sleep 2

# ---- an operator recompression, followed to its end ----
"$ac" admin recompress --server "$base" --contract "$tmp/mem.cfg" --follow >"$tmp/follow.log" ||
  fail "admin recompress --follow exited $?: $(tail -3 "$tmp/follow.log")"
grep -q "job-0001 succeeded: measured to meet its contract; swapped in" "$tmp/follow.log" ||
  fail "the follow did not end in a swap: $(tail -3 "$tmp/follow.log")"
[ "$(api GET /admin/status)" = 200 ] || fail "status"
python3 - "$tmp/resp" "$tmp/jobs/job-0001/out/model" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["model"]["path"] == sys.argv[2] and s["model"]["generation"] == 2, s["model"]
assert s["swaps"][-1]["ok"] and s["swaps"][-1]["model_path"] == sys.argv[2], s["swaps"]
EOF
[ "$(api DELETE /admin/jobs/job-0001)" = 409 ] || fail "cancelling a finished job: $(cat "$tmp/resp")"
[ "$(api POST /admin/jobs/job-0001/resume)" = 409 ] || fail "resuming a succeeded job: $(cat "$tmp/resp")"

# ---- from the live workload; one job at a time; kill -9 of its child; resume ----
# (the tables are for the contract's workload, so this job profiles the live one)
[ "$(api POST /admin/recompress "{\"from_live\": true, \"targets\": {\"memory_ratio\": $live_ratio}, \"profile_repeats\": 1}")" = 202 ] ||
  fail "from_live: $(cat "$tmp/resp")"
id=$(field id)
[ "$id" = job-0002 ] || fail "the second job is $id"
grep -q "memory_ratio = $live_ratio" "$tmp/jobs/$id/contract.cfg" && ! grep -q "input_tokens = 64" "$tmp/jobs/$id/contract.cfg" ||
  fail "the live contract: $(cat "$tmp/jobs/$id/contract.cfg")"
[ "$(api POST /admin/recompress "{\"contract_path\": \"$tmp/mem.cfg\"}")" = 409 ] || fail "a second job at once: $(cat "$tmp/resp")"
wait_job "$id" "j['stage'] in ('search', 'prune', 'distill') and j['pid'] > 0"
kill -9 "$(field pid)"
wait_job "$id" "j['state'] == 'failed'"
grep -q "killed by signal 9" "$tmp/resp" || fail "the failure does not say why: $(cat "$tmp/resp")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health")" = 200 ] || fail "the server does not serve after the kill"
"$ac" admin resume --server "$base" "$id" --follow >"$tmp/resume.log" || fail "resume exited $?: $(tail -3 "$tmp/resume.log")"
[ "$(job_field "$id" swapped)" = True ] || fail "the resumed job was not swapped in: $(cat "$tmp/resp")"

touch "$tmp/stop"
wait "$clients"
python3 - "$tmp/clients.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] >= 20 and r["failures"] == 0, r
print(f"clients: {r['requests']} requests in {r['seconds']:.0f} s, none failed")
EOF

# ---- a job running when the server stops ----
[ "$(api POST /admin/recompress "{\"contract_path\": \"$tmp/mem.cfg\", \"swap\": \"manual\"}")" = 202 ] ||
  fail "third job: $(cat "$tmp/resp")"
id=$(field id)
wait_job "$id" "j['stage'] in ('search', 'prune', 'distill')"
child=$(field pid)
serve_stop
kill -0 "$child" 2>/dev/null && fail "the job's child outlived the server"
serve_start "$ac" --model "$model" --config "$tmp/server.cfg"
base="http://127.0.0.1:$port"
[ "$(job_field "$id" state)" = interrupted ] || fail "after a restart: $(cat "$tmp/resp")"
"$ac" admin resume --server "$base" "$id" --follow >"$tmp/resume2.log" || fail "resume after restart: $(tail -3 "$tmp/resume2.log")"
[ "$(job_field "$id" swapped)" = False ] || fail "swap manual was swapped in"
[ -f "$tmp/jobs/$id/out/model/model.safetensors" ] || fail "no model in the job's directory"
serve_stop

# ---- the SLA policy in the server: a p95 target no request can meet fires a live job ----
cp "$tmp/server.cfg" "$tmp/sla.cfg"
echo 'sla = { p95_latency_ms = 0.001; window_s = 1.0; interval_s = 0.25; cooldown_s = 3600.0; };' >>"$tmp/sla.cfg"
serve_start "$ac" --model "$model" --config "$tmp/sla.cfg"
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  curl -s -o /dev/null "$base/v1/completions" -d '{"prompt": "Hello", "max_tokens": 2}'
  [ "$(api GET /admin/policy)" = 200 ] || fail "policy: $(cat "$tmp/resp")"
  python3 -c "import json,sys; d=json.load(open('$tmp/resp'))['decisions']; sys.exit(0 if d else 1)" && break
  sleep 0.1
done
python3 - "$tmp/resp" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["enabled"] and p["limits"][0]["name"] == "p95_latency_ms" and p["limits"][0]["breached"], p
d = p["decisions"][0]
assert d["started"] and "p95_latency_ms" in d["reason"] and "job-0004" in d["reason"], d
assert p["cooldown_left_s"] > 3000, p
EOF
[ "$(job_field job-0004 state)" = running ] || fail "the policy's job: $(cat "$tmp/resp")"
python3 -c "import json; s=json.load(open('$tmp/resp'))['spec']; assert s['origin'] == 'policy' and 'p95' in s['reason'], s"
[ "$(api DELETE /admin/jobs/job-0004)" = 200 ] && [ "$(field state)" = cancelled ] || fail "cancel: $(cat "$tmp/resp")"
serve_stop
echo "control: ok"
