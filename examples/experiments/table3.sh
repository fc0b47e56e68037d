#!/usr/bin/env bash
# The paper's Table 3 on this machine: AutoCompress against Minitron++ on the three CPU
# contracts with the large prose parent, and on the latency contract with the large code
# parent (examples/parent/{prose,code}-large), several seeds, both methods paired by seed
# (the same seed: the same KD batches), at equal KD tokens; every chosen architecture
# measured against its contract and scored on all of val.bin.
#
#   examples/experiments/table3.sh [RUNS_DIR] [PARENT:CONTRACT...]
#
# RUNS_DIR (default build/experiments) holds one compress run per (parent, contract,
# method, seed), RUNS_DIR/PARENT-CONTRACT-METHOD-sSEED; each is resumable, so the script
# can be stopped and rerun (also one pair at a time, naming it) and picks up where it
# was. The table is written from whatever runs are complete, to RUNS_DIR/table3.md, with
# the command that made it at its top; examples/experiments/table3.md is the copy
# committed with the numbers this machine gave.
#
# Settings (environment):
#   AC_SEEDS          seeds, each a compress --seed (default "1 2 3")
#   AC_SEARCH_TOKENS  AutoCompress's search tokens S (default 200000); Minitron++ spends
#                     2 S on its four short KDs (the paper's baseline spent 2-3x)
#   AC_KD_TOKENS      KD tokens for both methods (default 5 S)
#   AC_EVAL_BATCHES   held-out batches of 8 x 128 (default: all of each parent's val.bin)
#   AC_REMEASURE=1    measure (and evaluate and report) every finished run again
#                     (compress --from measure), for when other jobs shared the machine
#   AC_TABLE_ONLY=1   run nothing: write the table from the runs in RUNS_DIR
#   AC_BIN            the autocompress binary (default build/autocompress)
#
# The held-out data is the large parents' (build/parents-large/data-{prose,code}, made
# here as scripts/train_parents.sh --large makes it when missing: the corpora of
# scripts/corpus_large.sh, tokenized). The cost tables are profiled on this machine by
# the first run of each (parent, contract) and kept in RUNS_DIR/tables-cache, keyed by
# the machine's fingerprint, the parent and the contract's space, so every method and
# seed uses the same tables.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs_arg=${1:-build/experiments}
runs=${1:-$root/build/experiments}
shift || true
contracts=("$@")
[ ${#contracts[@]} -gt 0 ] || contracts=(prose:cpu-latency prose:cpu-throughput prose:cpu-long-context code:cpu-latency)
seeds=${AC_SEEDS:-1 2 3}
search_tokens=${AC_SEARCH_TOKENS:-200000}
kd_tokens=${AC_KD_TOKENS:-$((5 * search_tokens))}
batch=8 seq_len=128
ac=${AC_BIN:-$root/build/autocompress}
data="$root/build/parents-large"
mkdir -p "$runs"

# The held-out batches that cover all of DIR/val.bin: its windows of seq_len + 1 ids
# (autocompress/tokens.h: the token count is the uint64 at byte 16), batch at a time.
all_batches() {
  python3 - "$1/val.bin" "$seq_len" "$batch" <<'EOF'
import struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(24)
assert head[:8] == b"ACTOKENS", sys.argv[1]
count = struct.unpack_from("<Q", head, 16)[0]
seq_len, batch = int(sys.argv[2]), int(sys.argv[3])
windows = (count - 1) // seq_len
print(max(1, -(-windows // batch)))
EOF
}

# The large parents' token shards, made as scripts/train_parents.sh --large makes them.
make_data() {
  local corpus="$root/build/corpus-large" tok="$root/examples/data/tokenizer.json"
  [ -f "$corpus/MANIFEST" ] || "$root/scripts/corpus_large.sh" "$corpus"
  [ -f "$data/data-prose/train.bin" ] ||
    "$ac" tokenize --tokenizer "$tok" --out "$data/data-prose" --format fortune --progress off "$corpus/prose.txt"
  [ -f "$data/data-code/train.bin" ] ||
    "$ac" tokenize --tokenizer "$tok" --out "$data/data-code" --format files --progress off \
      --inputs-from "$corpus/code.list"
}

run_one() { # parent contract method seed
  local parent=$1 contract=$2 method=$3 seed=$4
  local out="$runs/$parent-$contract-$method-s$seed" from=() eval_batches=${AC_EVAL_BATCHES:-}
  [ -n "$eval_batches" ] || eval_batches=$(all_batches "$data/data-$parent")
  [ "${AC_REMEASURE:-0}" = 1 ] && [ -f "$out/report.json" ] && from=(--from measure)
  echo "== $parent $contract $method seed $seed -> $out"
  local rc=0
  "$ac" compress "${from[@]}" --model "$root/examples/parent/$parent-large" \
    --contract "$root/examples/contracts/$contract.cfg" --data "$data/data-$parent" \
    --tables-cache "$runs/tables-cache" --method "$method" --seed "$seed" --batch $batch --seq-len $seq_len \
    --search-tokens "$search_tokens" --kd-tokens "$kd_tokens" --eval-batches "$eval_batches" \
    --progress off --out "$out" 2>"$out.log" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "compress failed ($rc), see $out.log"; tail -3 "$out.log"; }
}

if [ "${AC_TABLE_ONLY:-0}" != 1 ]; then
  [ -x "$ac" ] || "$root/scripts/setup.sh"
  make_data
  for pc in "${contracts[@]}"; do
    for seed in $seeds; do
      for method in autocompress minitron++; do
        run_one "${pc%%:*}" "${pc#*:}" "$method" "$seed"
      done
    done
  done
fi

command="AC_SEEDS=\"$seeds\" AC_SEARCH_TOKENS=$search_tokens AC_KD_TOKENS=$kd_tokens"
[ -z "${AC_EVAL_BATCHES:-}" ] || command+=" AC_EVAL_BATCHES=$AC_EVAL_BATCHES"
command+=" examples/experiments/table3.sh $runs_arg ${contracts[*]}"
python3 "$root/examples/experiments/table3_table.py" --runs "$runs" --ac "$ac" --seeds "$seeds" \
  --command "$command" "${contracts[@]}"
