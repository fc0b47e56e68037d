#!/usr/bin/env bash
# The cost model on the architectures the methods pick (the costs-measured-here issue's
# item 3): for each contract, the space profiled on this machine (through a tables
# cache), a short compress by AutoCompress and by Minitron++ (their picks), then
# chosen_costs.sh on both picks (predicted, slice, prune, final measured AC_ROUNDS times)
# and `costmodel validate` on 12 random architectures of the space beside the picks.
# Run it alone on a quiet machine; resumable (compress resumes, the cache keeps tables).
#
#   examples/experiments/prediction.sh [RUNS_DIR] [CONTRACT...]     (default build/prediction)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${1:-$root/build/prediction}
shift || true
contracts=("$@")
[ ${#contracts[@]} -gt 0 ] || contracts=(cpu-latency cpu-long-context cpu-throughput)
ac="$root/build/autocompress"
parent="$root/examples/parent/prose"
mkdir -p "$runs"
[ -f "$root/build/corpus/SUMMARY" ] || "$root/scripts/corpus.sh" "$root/build/corpus"
[ -f "$runs/data/val.bin" ] || "$ac" tokenize --tokenizer "$root/examples/data/tokenizer.json" --out "$runs/data" \
  --format fortune --progress off "$root/build/corpus/prose.txt"
for contract in "${contracts[@]}"; do
  cfg="$root/examples/contracts/$contract.cfg"
  picks=()
  for method in autocompress minitron++; do
    out="$runs/$contract-$method"
    rc=0
    "$ac" compress --model "$parent" --contract "$cfg" --data "$runs/data" --tables-cache "$runs/tables-cache" \
      --method "$method" --search-tokens 60000 --kd-tokens 40960 --measure-sweeps 3 --eval-batches 4 \
      --progress off --out "$out" >"$out.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "compress $contract $method failed ($rc): $out.log"; exit 1; }
    picks+=("$out")
  done
  "$root/examples/experiments/chosen_costs.sh" "$parent" "$cfg" "${picks[0]}/tables.json" "$runs/$contract-chosen.md" \
    "${picks[@]}"
  "$ac" costmodel validate --model "$parent" --contract "$cfg" --tables "${picks[0]}/tables.json" --n 12 --repeats 3 \
    --arch "${picks[0]}/model/config.json" --arch "${picks[1]}/model/config.json" --progress off \
    >"$runs/$contract-validate.txt"
  tail -n 8 "$runs/$contract-validate.txt"
done
