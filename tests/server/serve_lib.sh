# Starting and stopping `autocompress serve` from a test or bench script (sourced).
#   serve_start AC LOG ARGS...   starts AC serve ARGS with --port 0 in the background, waits
#                                for /health 200 (a 503 while loading is fine); sets
#                                server_pid and port; a cleanup trap stops it and removes
#                                $serve_tmp on exit
#   serve_stop                   SIGTERM; the server must exit 0 within 30 s
# Both call fail MESSAGE (defined here unless the caller has one) on a problem.
serve_tmp=$(mktemp -d)
server_pid=""
port=""
serve_log="$serve_tmp/server.log"

serve_cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$serve_tmp"
}
trap serve_cleanup EXIT

if ! declare -F fail >/dev/null; then
  fail() { echo "FAIL: $*"; echo "--- server log:"; tail -n 40 "$serve_log" 2>/dev/null || true; exit 1; }
fi

serve_start() {
  local ac=$1 status=""
  shift
  port=""
  rm -f "$serve_tmp/port" # a restart must not read the previous server's port
  "$ac" serve --port 0 --port-file "$serve_tmp/port" "$@" 2>"$serve_log" &
  server_pid=$!
  # the port file appears once it listens; /health turns 200 once the model is loaded (a
  # wall-clock deadline: on a loaded machine each round of the loop takes longer)
  local deadline=$((SECONDS + 180))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited before it was ready"
    [ -z "$port" ] && [ -s "$serve_tmp/port" ] && port=$(cat "$serve_tmp/port")
    if [ -n "$port" ]; then
      status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
      [ "$status" = 200 ] && return 0
      [ "$status" = 503 ] || [ "$status" = 000 ] || fail "/health answered $status while loading"
    fi
    sleep 0.2
  done
  [ -n "$port" ] || fail "no port in $serve_tmp/port after 180 s"
  fail "/health is $status, not 200, after 180 s"
}

serve_stop() {
  kill -0 "$server_pid" 2>/dev/null || fail "the server is gone"
  kill -TERM "$server_pid"
  for _ in $(seq 1 150); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -0 "$server_pid" 2>/dev/null && fail "the server still runs 30 s after SIGTERM"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  [ $rc -eq 0 ] || fail "the server exited $rc after SIGTERM"
}
