#!/usr/bin/env bash
# SIGTERM drains the server: a stream in flight when the signal comes is answered to its
# end (every token asked for, then [DONE]) before the server exits 0; meanwhile /health
# says "stopping" (503) and a new completion is refused with 503 shutting_down. With
# drain_timeout_s = 0 what is in flight is cut at once, and the server still exits 0.
set -euo pipefail
ac=$1
src=$2
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
source "$src/tests/server/serve_lib.sh"
tmp=$serve_tmp
model="$src/examples/parent/prose"
tokens=1500
body="{\"prompt\": \"Once upon a time\", \"max_tokens\": $tokens, \"temperature\": 0, \"stream\": true,
       \"stop\": [\"never-in-the-text\"], \"stream_options\": {\"include_usage\": true}}"

# start_stream OUT: a long stream in the background (its pid in $stream); returns once
# its first chunk has come, so it is in flight
start_stream() {
  curl -s -N "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$1" &
  stream=$!
  for _ in $(seq 1 500); do
    grep -q '^data: ' "$1" 2>/dev/null && return 0
    sleep 0.02
  done
  fail "no first chunk in 10 s"
}

# ---- a drain that lets the stream finish ----
printf 'threads = 1;\ndrain_timeout_s = 60.0;\n' >"$tmp/drain.cfg"
serve_start "$ac" --model "$model" --config "$tmp/drain.cfg"
start_stream "$tmp/full.sse"
kill -TERM "$server_pid"
health=$(curl -s -o "$tmp/health" -w '%{http_code}' "http://127.0.0.1:$port/health")
[ "$health" = 503 ] && grep -q '"stopping"' "$tmp/health" || fail "/health while draining: $health $(cat "$tmp/health")"
refused=$(curl -s -o "$tmp/refused" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" -d '{"prompt": "a"}')
[ "$refused" = 503 ] && grep -q shutting_down "$tmp/refused" || fail "a new completion while draining: $refused $(cat "$tmp/refused")"
wait "$stream" || fail "the stream's curl exited $?"
serve_stop_waited() { # the server was signalled already: it must exit 0 by itself
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  [ $rc -eq 0 ] || fail "the server exited $rc after SIGTERM"
}
serve_stop_waited
python3 - "$tmp/full.sse" "$tokens" <<'EOF'
import json, sys
lines = [l[6:] for l in open(sys.argv[1]).read().splitlines() if l.startswith("data: ")]
assert lines[-1] == "[DONE]", lines[-3:]
usage = [json.loads(l)["usage"] for l in lines[:-1] if json.loads(l).get("usage")]
assert usage and usage[-1]["completion_tokens"] == int(sys.argv[2]), usage[-1:]
EOF
grep -q "finishing the requests in flight" "$serve_log" || fail "the log does not say it drained"

# ---- a drain of no time: the stream is cut, the server exits 0 at once ----
printf 'threads = 1;\ndrain_timeout_s = 0.0;\n' >"$tmp/cut.cfg"
serve_start "$ac" --model "$model" --config "$tmp/cut.cfg"
start_stream "$tmp/cut.sse"
t0=$(date +%s.%N)
kill -TERM "$server_pid"
serve_stop_waited
wait "$stream" || true
python3 - "$tmp/cut.sse" "$t0" "$tokens" <<'EOF'
import json, sys, time
lines = [l[6:] for l in open(sys.argv[1]).read().splitlines() if l.startswith("data: ")]
events = [json.loads(l) for l in lines if l != "[DONE]"]
assert not any((e.get("usage") or {}).get("completion_tokens") == int(sys.argv[3]) for e in events), "not cut"
# cut: the stream just ends, or says why before [DONE]
assert lines[-1:] != ["[DONE]"] or "shutting down" in events[-1]["error"]["message"], lines[-2:]
assert time.time() - float(sys.argv[2]) < 20, "the server took too long to stop"
EOF
grep -q "still in flight at the deadline are cut" "$serve_log" || fail "the log does not say what was cut: $(tail -3 "$serve_log")"
echo "serve_drain: ok"
