#!/usr/bin/env bash
# Trains the parents the compression experiments start from: a Nemotron-3-Nano-like
# miniature (examples/parent/config.json: 12 layers MEMEM*EMEM*E, 16 routed experts top-2
# plus a shared expert, GQA, 9.6M parameters) on English prose and on source code.
# Deterministic: fixed corpora, tokenizer, initialisation seed and batch seed.
#
#   scripts/train_parents.sh [OUT]          the small parents of examples/parent (fortunes;
#                                           the Python standard library), default build/parents
#   scripts/train_parents.sh --large [OUT]  the experiment parents (scripts/corpus_large.sh:
#                                           fortunes, GCIDE and WordNet; the standard library
#                                           and Linux's core C sources), default build/parents-large
#
# Resumable: rerun the same command to continue. AC_PARENTS (default "prose code") picks
# which to train. examples/parent/README.md and docs/results.md say how long each took.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
large=0
if [ "${1:-}" = --large ]; then large=1; shift; fi
"$root/scripts/setup.sh" >/dev/null
ac="$root/build/autocompress"
tok="$root/examples/data/tokenizer.json"
if [ $large = 1 ]; then
  out=${1:-$root/build/parents-large}
  corpus="$root/build/corpus-large"
  [ -f "$corpus/MANIFEST" ] || "$root/scripts/corpus_large.sh" "$corpus"
  steps=6000 warmup=200
else
  out=${1:-$root/build/parents}
  corpus="$root/build/corpus"
  [ -f "$corpus/SUMMARY" ] || "$root/scripts/corpus.sh" "$corpus"
  steps=1000 warmup=100
fi
mkdir -p "$out"
[ -f "$out/data-prose/train.bin" ] ||
  "$ac" tokenize --tokenizer "$tok" --out "$out/data-prose" --format fortune --progress off "$corpus/prose.txt"
[ -f "$out/data-code/train.bin" ] ||
  "$ac" tokenize --tokenizer "$tok" --out "$out/data-code" --format files --progress off --inputs-from "$corpus/code.list"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
for kind in ${AC_PARENTS:-prose code}; do
  "$ac" train --config "$root/examples/parent/config.json" --init-seed 1 --init-std 0.02 \
    --data "$out/data-$kind" --out "$out/$kind" --steps $steps --batch 8 --seq-len 256 \
    --lr 3e-3 --warmup $warmup --min-lr-ratio 0.1 --weight-decay 0.1 --clip 1.0 --seed 1 \
    --checkpoint-every 50 --eval-every 100 --eval-batches 16 --progress off
  cp "$tok" "$out/$kind/tokenizer.json"
done
# The committed copies in examples/parent/{prose,code} are these, in bf16:
#   autocompress convert --model "$out/prose" --out examples/parent/prose --dtype bf16
