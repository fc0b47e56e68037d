#!/usr/bin/env bash
# `autocompress serve` through the official OpenAI Python client: greedy completions equal
# `autocompress generate`, streamed and not; logprobs and echo; seeded sampling; the model
# list; bad requests raise openai.BadRequestError (tests/server/openai_client.py). The
# client lives in the virtualenv scripts/setup.sh makes beside the binary (BUILD/pyenv);
# without it the test is skipped. The server stops on SIGTERM and must exit 0.
set -euo pipefail
ac=$1
src=$2
py="$(dirname "$ac")/pyenv/bin/python"
if [ ! -x "$py" ]; then
  echo "skip: no virtualenv at $(dirname "$ac")/pyenv (scripts/setup.sh makes it)"
  exit 77
fi
if ! "$py" -c "import openai" 2>/dev/null; then
  echo "skip: $py cannot import openai (scripts/setup.sh installs it)"
  exit 77
fi
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
model="$src/examples/parent/prose"
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

"$ac" serve --model "$model" --port 0 --port-file "$tmp/port" --slots 4 2>"$tmp/server.log" &
server_pid=$!

# the port file appears once it listens; /health turns 200 once the model is loaded
port=""
status=""
for _ in $(seq 1 300); do
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited before it was ready"
  [ -z "$port" ] && [ -s "$tmp/port" ] && port=$(cat "$tmp/port")
  if [ -n "$port" ]; then
    status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
    [ "$status" = 200 ] && break
    [ "$status" = 503 ] || [ "$status" = 000 ] || fail "/health answered $status while loading"
  fi
  sleep 0.2
done
[ -n "$port" ] || fail "no port in $tmp/port after 60 s"
[ "$status" = 200 ] || fail "/health is $status, not 200, after 60 s"

"$py" "$src/tests/server/openai_client.py" --port "$port" --ac "$ac" --model "$model" || fail "the OpenAI client checks failed"

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
echo "serve_openai: ok"
