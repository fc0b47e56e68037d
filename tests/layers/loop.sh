#!/usr/bin/env bash
# check.sh on made-up trees: a loop between two folders is found and named, the same
# tree without the back arrow passes, and a public header draws no arrow.
set -euo pipefail
check="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/check.sh"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/module/{low,high,include/autocompress} "$tree"/kernels "$tree"/probes "$tree"/adapters
printf '#include "low/low.h"\n' >"$tree/module/high/high.c"
printf '#include "autocompress/high.h"\n' >"$tree/module/low/low.c"
: >"$tree/module/low/low.h"
: >"$tree/module/include/autocompress/high.h"
out=$(bash "$check" "$tree")
echo "$out" | grep -q "no loop" || { echo "FAIL: a tree without a loop was refused: $out"; exit 1; }
printf '#include "high/high.h"\n' >>"$tree/module/low/low.c"
: >"$tree/module/high/high.h"
if out=$(bash "$check" "$tree" 2>&1); then
  echo "FAIL: the loop low <-> high was not found: $out"
  exit 1
fi
echo "$out" | grep -q low && echo "$out" | grep -q high || { echo "FAIL: the loop is not named: $out"; exit 1; }
echo "layers: the loop was found and named"
