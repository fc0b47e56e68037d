# Sourced by the CLI tests that need a tiny trained parent (search.sh, compress.sh,
# bf16_contract.sh): tiny_parent AC SRC DIR tokenizes tests/fixtures/tokenizer/lines.txt
# into DIR/data (10% held out) and trains tests/cli/data/tiny_hybrid.json (M*-EME, hidden
# 32) on it for 20 steps into DIR/parent, with the examples' tokenizer beside it.
tiny_parent() {
  local ac=$1 src=$2 dir=$3
  "$ac" tokenize --tokenizer "$src/examples/data/tokenizer.json" --out "$dir/data" --format lines --val-percent 10 \
    --progress off "$src/tests/fixtures/tokenizer/lines.txt" >/dev/null
  cp "$src/tests/cli/data/tiny_hybrid.json" "$dir/config.json"
  "$ac" train --config "$dir/config.json" --data "$dir/data" --steps 20 --batch 4 --seq-len 32 --lr 3e-3 --warmup 2 \
    --seed 5 --progress off --out "$dir/parent" >/dev/null 2>&1
  cp "$src/examples/data/tokenizer.json" "$dir/parent/"
}
