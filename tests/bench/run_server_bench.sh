#!/usr/bin/env bash
# Throughput of the inference server (`autocompress serve`) against the offline engine on
# the same checkpoint, same machine, same run:
#   tests/bench/run_server_bench.sh [THREADS] [SECONDS]   (defaults: all cores, 20)
#
# Method.
# - Model: examples/parent/prose. Both sides use THREADS engine threads (the server's
#   --threads; OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for the offline bench).
# - Offline first, with nothing else running: build/tests/bench_runtime at batch 1, 4 and
#   16, prompt 64, 64 generated tokens, best of 3. It reports prefill and decode tokens/s;
#   the offline figure is the end-to-end rate of the work the requests do: batch x 64
#   generated tokens over the time of the prefill and the decode,
#   B*64 / (B*64 / prefill_tok_s + B*64 / decode_tok_s) (the decode-only rate is shown too). Its prompt ids are synthetic; the cost per token
#   does not depend on which ids they are.
# - Then the server, --slots 16 (so 16 clients batch fully), and tests/bench/server_bench.py:
#   1, 4 and 16 client threads, each with one keep-alive connection, looping non-streaming
#   greedy completions (max_tokens 64) of one prompt of about 64 tokens for SECONDS each.
#   req/s and tok/s (usage.completion_tokens) divide by the time until the last request
#   of the level ended. ratio = server tok/s / offline tok/s at the same count: what HTTP,
#   JSON, tokenization, scheduling and continuous batching cost or give back.
# - The client runs on the same cores as the server: on a small machine its share of the
#   CPU counts against the server. A greedy completion that meets <|endoftext|> early
#   generates fewer tokens (tok/req shows it); tok/s counts what was generated.
# AC_BENCH_NO_BUILD=1 skips building the two binaries.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
threads=${1:-$(nproc)}
seconds=${2:-20}
build="$root/build"
if [ -z "${AC_BENCH_NO_BUILD:-}" ]; then
  if [ -f "$build/CMakeCache.txt" ]; then
    cmake --build "$build" -j "$(nproc)" --target autocompress bench_runtime >/dev/null
  else
    "$root/scripts/setup.sh" >/dev/null
  fi
fi
ac="$build/autocompress"
bench="$build/tests/bench_runtime"
model="$root/examples/parent/prose"
source "$root/tests/server/serve_lib.sh"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (anything else running skews both sides)"
offline=""
for batch in 1 4 16; do
  out=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bench" --model "$model" --batch $batch \
        --prompt 64 --gen 64 --repeats 3)
  prefill=$(echo "$out" | sed -E 's/.*"prefill_tok_s": ([0-9.]+).*/\1/')
  decode=$(echo "$out" | sed -E 's/.*"decode_tok_s": ([0-9.]+).*/\1/')
  e2e=$(awk "BEGIN { printf \"%.1f\", $batch * 64 / ($batch * 64 / $prefill + $batch * 64 / $decode) }")
  echo "offline batch $batch: prefill $prefill tok/s, decode $decode tok/s, end to end $e2e generated tok/s"
  offline="$offline${offline:+,}$batch:$e2e:$decode"
done

serve_start "$ac" --model "$model" --slots 16 --threads "$threads"
echo "server: $threads threads, 16 slots, port $port"
python3 "$root/tests/bench/server_bench.py" --port "$port" --clients 1,4,16 --seconds "$seconds" --max-tokens 64 \
  --prompt-tokens 64 --offline "$offline"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
