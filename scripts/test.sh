#!/usr/bin/env bash
# Builds (through setup.sh) and runs the whole test suite with ctest.
#   scripts/test.sh [--sanitize]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" "$@"
if [ "${1:-}" = "--sanitize" ]; then build_dir="$root/build-sanitize"; else build_dir="$root/build"; fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
