#!/usr/bin/env bash
# Trains the two parents the compression experiments start from: a Nemotron-3-Nano-like
# miniature (examples/parent/config.json: 12 layers MEMEM*EMEM*E, 16 routed experts top-2
# plus a shared expert, GQA, 9.6M parameters) on English prose (Debian's fortunes) and on
# Python source (the standard library); docs/results.md says how long each took.
# Deterministic: fixed corpora, tokenizer, initialisation seed and batch seed.
#
#   scripts/train_parents.sh [OUT]        (default build/parents; resumable: rerun to continue)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build/parents}
"$root/scripts/setup.sh" >/dev/null
ac="$root/build/autocompress"
corpus="$root/build/corpus"
[ -f "$corpus/SUMMARY" ] || "$root/scripts/corpus.sh" "$corpus"
tok="$root/examples/data/tokenizer.json"
mkdir -p "$out"
[ -f "$out/data-prose/train.bin" ] || "$ac" tokenize --tokenizer "$tok" --out "$out/data-prose" --format fortune "$corpus/prose.txt"
mapfile -t code_files < "$corpus/code.list"
[ -f "$out/data-code/train.bin" ] || "$ac" tokenize --tokenizer "$tok" --out "$out/data-code" --format files "${code_files[@]}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
for kind in prose code; do
  "$ac" train --config "$root/examples/parent/config.json" --init-seed 1 --init-std 0.02 \
    --data "$out/data-$kind" --out "$out/$kind" --steps 1000 --batch 8 --seq-len 256 \
    --lr 3e-3 --warmup 100 --min-lr-ratio 0.1 --weight-decay 0.1 --clip 1.0 --seed 1 \
    --checkpoint-every 50 --eval-every 100 --eval-batches 16
  cp "$tok" "$out/$kind/tokenizer.json"
done
# The committed copies in examples/parent/{prose,code} are these, in bf16:
#   autocompress convert --model "$out/prose" --out examples/parent/prose --dtype bf16
