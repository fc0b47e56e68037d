#!/usr/bin/env bash
# The quickstart: builds everything (through setup.sh), then runs the most complete part
# of the pipeline that exists today on the built-in CPU engine with a small model.
#
# Not yet: `autocompress compress` (probe -> search -> prune -> distill -> measure) lands
# with later issues; until then this checks the example contracts and serves a tiny
# Nemotron-H checkpoint (info, logits, greedy generation) with the CPU engine.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
ac="$root/build/autocompress"
model="$root/tests/fixtures/nemotron_h/hybrid_f32"

echo "== contracts"
for c in "$root"/examples/contracts/*.cfg; do
  "$ac" contract check "$c" >/dev/null && echo "ok  $c"
done
echo "== model"
"$ac" info --model "$model"
echo "== logits"
"$ac" logits --model "$model" --ids 1,2,3,4 --out /tmp/autocompress-quickstart-logits.npy
echo "== greedy generation"
"$ac" generate --model "$model" --ids 1,2,3,4 --max-tokens 16
