#!/usr/bin/env bash
# What in-situ profiling costs the server's tokens/s:
#   tests/bench/run_profile_bench.sh [THREADS] [SECONDS] [ROUNDS]   (defaults: all cores, 6, 5)
#
# Method. One server (examples/parent/prose, 4 slots, THREADS engine threads) and
# tests/bench/profile_bench.py: 4 client threads loop non-streaming greedy completions
# (a prompt of about 64 tokens, 64 generated) for SECONDS per level; the levels are the
# profile paused, at the default rate (one step in 16 timed layer by layer) and at every
# step, switched with POST /admin/profile in the same process, in an order that turns
# each round; each mode's figure is the median over ROUNDS rounds, and the ratio is
# against paused. The default rate must cost under 3%. Run it on a quiet machine: the
# clients share its cores with the server, and anything else running moves every level.
# AC_BENCH_NO_BUILD=1 skips the build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
threads=${1:-$(nproc)}
seconds=${2:-6}
rounds=${3:-5}
build="$root/build"
if [ -z "${AC_BENCH_NO_BUILD:-}" ]; then
  if [ -f "$build/CMakeCache.txt" ]; then
    cmake --build "$build" -j "$(nproc)" --target autocompress >/dev/null
  else
    "$root/scripts/setup.sh" >/dev/null
  fi
fi
source "$root/tests/server/serve_lib.sh"
token=profile-bench-token
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'slots = 4;\nthreads = %d;\nprofile_every = 0;\nadmin_token = "%s";\n' "$threads" "$token" >"$serve_tmp/server.cfg"
serve_start "$build/autocompress" --model "$root/examples/parent/prose" --config "$serve_tmp/server.cfg"
rc=0
python3 "$root/tests/bench/profile_bench.py" --port "$port" --token "$token" --seconds "$seconds" --rounds "$rounds" || rc=$?
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
serve_stop
exit $rc
