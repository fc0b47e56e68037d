#!/usr/bin/env bash
# `autocompress serve` under load with hot swaps (tests/server/load.py): 16 streaming
# clients for 60 s on 8 slots while the model swaps between the prose and the code
# checkpoints every 8 s; every completion must equal one model's offline greedy
# reference, no request may fail or be cut short, and /metrics and /admin/status must
# account for every swap. Standard-library Python only. AC_LOAD_SECONDS shortens the run
# (fewer swaps are then required: one per 8 s, at least 1).
set -euo pipefail
ac=$1
src=$2
command -v python3 >/dev/null || { echo "skip: python3 is not installed"; exit 77; }
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
seconds=${AC_LOAD_SECONDS:-60}
min_swaps=5
if [ "$seconds" -lt 60 ]; then min_swaps=$(( seconds / 8 - 1 > 0 ? seconds / 8 - 1 : 1 )); fi
prose="$src/examples/parent/prose"
code="$src/examples/parent/code"
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; tail -n 40 "$tmp/server.log" 2>/dev/null || true; exit 1; }

token="load-test-$$-$RANDOM"
AUTOCOMPRESS_ADMIN_TOKEN="$token" "$ac" serve --model "$prose" --port 0 --port-file "$tmp/port" --slots 8 \
  2>"$tmp/server.log" &
server_pid=$!

port=""
status=""
for _ in $(seq 1 300); do
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited before it was ready"
  [ -z "$port" ] && [ -s "$tmp/port" ] && port=$(cat "$tmp/port")
  if [ -n "$port" ]; then
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$status" = 200 ] && break
  fi
  sleep 0.2
done
[ -n "$port" ] || fail "no port in $tmp/port after 60 s"
[ "$status" = 200 ] || fail "/health is $status, not 200, after 60 s"

python3 "$src/tests/server/load.py" --port "$port" --ac "$ac" --prose "$prose" --code "$code" --token "$token" \
  --seconds "$seconds" --clients 16 --swap-every 8 --min-swaps "$min_swaps" --max-tokens 24 ||
  fail "the load test failed"

kill -0 "$server_pid" 2>/dev/null || fail "the server is gone after the load"
kill -TERM "$server_pid"
for _ in $(seq 1 150); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.2
done
kill -0 "$server_pid" 2>/dev/null && fail "the server still runs 30 s after SIGTERM"
set +e
wait "$server_pid"
rc=$?
set -e
server_pid=""
[ $rc -eq 0 ] || fail "the server exited $rc after SIGTERM"
echo "serve_load: ok"
