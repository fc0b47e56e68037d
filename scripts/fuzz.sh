#!/usr/bin/env bash
# Builds the fuzz harnesses (tests/fuzz/fuzz_*.c) with clang's libFuzzer, ASan and UBSan
# and runs each for SECONDS (default 60), one after the other.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]
#
# Each harness starts from its committed seeds (tests/fuzz/corpus/NAME) and keeps what
# it finds in build-fuzz/corpus/NAME, so a second run goes on from there. An input that
# crashes, leaks or trips a sanitizer is copied to tests/fuzz/regressions/NAME/, where
# the normal test suite replays it (ctest -R fuzz_replay) once the bug is fixed: commit
# it with the fix. Prints executions and findings per harness; exit 1 when any found one.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
build="$root/build-fuzz"

packages=(clang libomp-dev build-essential cmake pkg-config libopenblas-openmp-dev libconfig-dev libcjson-dev
          libpcre2-dev libmicrohttpd-dev libcurl4-openssl-dev libcmocka-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DAC_FUZZ=ON -DAC_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi
cmake --build "$build" -j "$(nproc)" --target "${harnesses[@]/#/fuzz_}"

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
found=0
printf '%-14s %12s %10s %8s  %s\n' harness executions exec/s corpus findings
for name in "${harnesses[@]}"; do
  corpus="$build/corpus/$name" crashes="$build/crashes/$name"
  rm -rf "$crashes"
  mkdir -p "$corpus" "$crashes"
  log="$build/fuzz_$name.log"
  set +e
  "$build/tests/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$corpus" "$root/tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  n_corpus=$(find "$corpus" -type f | wc -l)
  findings=$(find "$crashes" -type f | wc -l)
  if [ "$findings" -gt 0 ] || [ "$rc" -ne 0 ]; then
    found=1
    mkdir -p "$root/tests/fuzz/regressions/$name"
    cp "$crashes"/* "$root/tests/fuzz/regressions/$name/" 2>/dev/null || true
    what="$findings inputs (exit $rc), copied to tests/fuzz/regressions/$name; see $log"
  else
    what="none"
  fi
  printf '%-14s %12s %10s %8s  %s\n' "$name" "${runs:-?}" "${rate:-?}" "$n_corpus" "$what"
done
exit $found
