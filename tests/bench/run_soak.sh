#!/usr/bin/env bash
# Soak: `autocompress serve` for SECONDS (default 600) under 8 streaming clients while the
# model swaps between the prose and the code parents every 30 s (tests/server/load.py:
# every answer checked against the offline greedy reference, none may fail). The
# server's resident memory is sampled every 5 s; after the warm-up (the first 2
# minutes, or a fifth of a shorter run: caches and slots reach their size) it must stay
# within 2% of its warm-up level. Loopback only. Run alone on the machine.
#
#   tests/bench/run_soak.sh [SECONDS]        (AC_BIN: another autocompress binary)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-600}
ac="${AC_BIN:-$root/build/autocompress}"
[ -x "$ac" ] || "$root/scripts/setup.sh"
source "$root/tests/server/serve_lib.sh"
tmp=$serve_tmp
token="soak-$$-$RANDOM"
export AUTOCOMPRESS_ADMIN_TOKEN="$token"
serve_start "$ac" --model "$root/examples/parent/prose" --slots 8

# resident memory (KiB) every 5 s from the first completion (load.py computes its
# references first) until the load ends
(until curl -s "http://127.0.0.1:$port/metrics" | grep -q 'endpoint="/v1/completions",status="200"' ||
       [ -f "$tmp/done" ]; do sleep 1; done
 while kill -0 "$server_pid" 2>/dev/null && [ ! -f "$tmp/done" ]; do
   echo "$(date +%s.%N) $(awk '/^VmRSS/ {print $2}' /proc/"$server_pid"/status)"
   sleep 5
 done) >"$tmp/rss.txt" &
sampler=$!
rc=0
python3 "$root/tests/server/load.py" --port "$port" --ac "$ac" --prose "$root/examples/parent/prose" \
  --code "$root/examples/parent/code" --token "$token" --seconds "$seconds" --clients 8 --swap-every 30 \
  --min-swaps $(( seconds / 30 - 1 )) --max-tokens 24 | tee "$tmp/load.txt" || rc=$?
touch "$tmp/done"
wait "$sampler"
serve_stop

python3 - "$tmp/rss.txt" "$seconds" "$rc" <<'EOF'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 2]
seconds, rc = float(sys.argv[2]), int(sys.argv[3])
t0 = rows[0][0]
warm = min(120.0, seconds / 5)
base = [kib for t, kib in rows if t - t0 <= warm]
after = [kib for t, kib in rows if t - t0 > warm]
level = max(base)
drift = (max(after) - level) / level if after else float("nan")
print(f"soak: {seconds:.0f} s, {len(rows)} samples; resident {min(base)/1024:.1f}-{level/1024:.1f} MiB over the "
      f"warm-up ({warm:.0f} s), {min(after)/1024:.1f}-{max(after)/1024:.1f} MiB after: {100*drift:+.2f}% of the "
      f"warm-up peak (limit +2%)")
ok = rc == 0 and after and drift <= 0.02
print("soak: PASS" if ok else f"soak: FAIL (load test exit {rc})")
sys.exit(0 if ok else 1)
EOF
