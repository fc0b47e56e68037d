#!/usr/bin/env bash
# The checks that need a GPU, in one command (issue 14): builds with CUDA (through
# setup.sh, unless --build-dir names a build made elsewhere, as on a lent machine that
# reaches no package mirror), runs the device tests (every CUDA op against the CPU's,
# the CUPTI probe, greedy generation against the CPU's) and the decode and prefill
# benchmark of a ~1B model made in place (bench_cuda), f32 then bf16 weights, and writes
# everything under $OUT (default build-cuda/device-check).
#
#   scripts/device-check.sh [--build-dir DIR]
#
# Exit status: 0 when every device test passed, 1 otherwise, 77 when there is no GPU.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift ;;
    *) echo "device-check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$root/build-cuda/device-check}
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"

{ nvidia-smi || echo "nvidia-smi: not found"; } >"$out/nvidia-smi.txt" 2>&1
if [ -z "$build" ]; then
  build="$root/build-cuda"
  if ! timeout 300 "$root/scripts/setup.sh" --build-dir "$build" >"$out/build.log" 2>&1; then
    echo "device-check.sh: the build failed; see $out/build.log" >&2
    tail -20 "$out/build.log" >&2
    exit 1
  fi
fi

# The device tests report 77 (skipped) without a GPU; ctest counts them apart.
timeout 300 ctest --test-dir "$build" -R "cuda|cupti|device" --output-on-failure >"$out/ctest.txt" 2>&1
tests=$?
cat "$out/ctest.txt"
timeout 240 "$build/tests/bench_cuda" >"$out/bench_cuda.json" 2>"$out/bench_cuda.err"
bench=$?
cat "$out/bench_cuda.json" "$out/bench_cuda.err"
if [ "$bench" = 77 ]; then
  exit 77
fi
# the same model served in bf16 (a serving copy: half the bytes a decode step reads)
timeout 150 "$build/tests/bench_cuda" --weights bf16 >"$out/bench_cuda_bf16.json" 2>"$out/bench_cuda_bf16.err"
bench_bf16=$?
cat "$out/bench_cuda_bf16.json" "$out/bench_cuda_bf16.err"
[ "$tests" = 0 ] && [ "$bench" = 0 ] && [ "$bench_bf16" = 0 ]
