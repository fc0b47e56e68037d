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
source "$src/tests/server/serve_lib.sh"
token="load-test-$$-$RANDOM"
export AUTOCOMPRESS_ADMIN_TOKEN="$token"
serve_start "$ac" --model "$prose" --slots 8

python3 "$src/tests/server/load.py" --port "$port" --ac "$ac" --prose "$prose" --code "$code" --token "$token" \
  --seconds "$seconds" --clients 16 --swap-every 8 --min-swaps "$min_swaps" --max-tokens 24 ||
  fail "the load test failed"

serve_stop
echo "serve_load: ok"
