#!/usr/bin/env bash
# The quickstart: builds everything (through setup.sh), then runs the whole pipeline,
# `autocompress compress`, on the built-in CPU engine with the small prose parent: the
# quickstart contract (cpu-latency over a smaller search space) profiled on this machine,
# its architecture searched, pruned, distilled, measured and evaluated, on a tiny token
# budget (the contract's own budgets take hours). The cost tables are kept in
# build/tables-cache, keyed by this machine's fingerprint, the parent and the space, so a
# rerun (or another --out) reuses them. It ends by printing the report.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
ac="$root/build/autocompress"
out=${AC_QUICKSTART_OUT:-$root/build/quickstart}

echo "== contracts"
for c in "$root"/examples/contracts/*.cfg; do
  "$ac" contract check "$c" >/dev/null && echo "ok  $c"
done
echo "== token shards (Debian's fortunes, the parent's training corpus)"
[ -f "$root/build/corpus/SUMMARY" ] || "$root/scripts/corpus.sh" "$root/build/corpus"
[ -f "$out/data/val.bin" ] || "$ac" tokenize --tokenizer "$root/examples/data/tokenizer.json" --out "$out/data" \
  --format fortune --progress off "$root/build/corpus/prose.txt"
echo "== compress (a rerun resumes in $out/run; remove it to start over)"
set +e
"$ac" compress --model "$root/examples/parent/prose" --contract "$root/examples/contracts/quickstart.cfg" \
  --data "$out/data" --tables-cache "$root/build/tables-cache" --profile-repeats 2 --search-tokens 30000 \
  --kd-tokens 40960 --measure-sweeps 2 --eval-batches 4 --out "$out/run"
rc=$?
set -e
[ "$rc" = 0 ] || [ "$rc" = 3 ] || exit "$rc"
echo "== $out/run/report.md"
cat "$out/run/report.md"
