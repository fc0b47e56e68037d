#!/usr/bin/env bash
# The method's ablation (issue 37 item 8): each change to the search on and off, on two
# contracts, with the experiment parent (examples/parent/prose-large), paired seeds, a
# search and then a fixed short KD of its pick, scored on held-out windows.
#
#   examples/experiments/ablation.sh [RUNS_DIR] [ARM...]
#
# An arm is the search with one change turned back to what it was before issue 37 (the
# flags below), or one option tried ("scores", "train-weights"); "base" is the search as
# shipped without the ranking, "rerank" compress with it, "before" every change off. Each
# (contract, arm, seed) is a directory RUNS_DIR/CONTRACT/ARM/seedS holding search/, pruned/,
# kd/ and eval.json; every step is skipped when its output exists and the search and the
# KD resume from their checkpoints, so the script can be stopped and rerun (one arm or a
# few at a time, naming them) and picks up where it was. RUNS_DIR/ablation.md is written
# from whatever runs are complete; examples/experiments/ablation.md is the copy committed.
#
# Environment: AC_CONTRACTS (default "cpu-latency cpu-throughput"), AC_SEEDS ("1 2"),
# AC_PARENT (prose-large), AC_SEARCH_TOKENS (200000), AC_KD_STEPS (195 steps of 8 x 128
# tokens: 200k), AC_EVAL_BATCHES (64 batches of 8 x 128 from the start of val.bin).
# The cost tables are profiled once per contract into RUNS_DIR/tables (run it on a quiet
# machine: every arm of a contract uses the same tables).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=${1:-$root/build/ablation}
shift || true

# search-level arms: search, prune, distill and eval as compress runs them, with the
# search's options; "rerank" is compress itself (its rank stage short-KDs the search's
# top candidates inside the same search tokens), the others have no ranking
declare -A arm_flags=(
  [base]=""
  [old-optim]="--budget hinge --router-optim adamw --lr-schedule constant --warmup-from parent"
  [mamba-heads]="--mamba-removal heads"
  [no-fill]="--fill off"
  [scores]="--expert-masking scores"
  [train-weights]="--train-weights"
  [before]="--budget hinge --router-optim adamw --lr-schedule constant --warmup-from parent --mamba-removal heads --fill off"
  [rerank]="compress"
)
arm_order=(base rerank old-optim mamba-heads no-fill scores train-weights before)
arms=("$@")
[ ${#arms[@]} -gt 0 ] || arms=("${arm_order[@]}")
for a in "${arms[@]}"; do
  [ -n "${arm_flags[$a]+x}" ] || { echo "ablation.sh: no arm '$a' (arms: ${arm_order[*]})" >&2; exit 2; }
done
read -r -a contracts <<<"${AC_CONTRACTS:-cpu-latency cpu-throughput}"
read -r -a seeds <<<"${AC_SEEDS:-1 2}"
parent_name=${AC_PARENT:-prose-large}
search_tokens=${AC_SEARCH_TOKENS:-200000}
kd_steps=${AC_KD_STEPS:-195}
eval_batches=${AC_EVAL_BATCHES:-64}

ac="$root/build/autocompress"
[ -x "$ac" ] || "$root/scripts/setup.sh"
parent="$root/examples/parent/$parent_name"
kind=${parent_name%%-*}
data="$root/build/parents-large/data-$kind"
[ -f "$data/val.bin" ] || { echo "ablation.sh: no $data (scripts/train_parents.sh --large makes it)" >&2; exit 2; }
mkdir -p "$runs/tables"

step() { # step NAME LOG COMMAND... : runs it, its output in LOG; exit 0 and 3 are done
  local name=$1 log=$2 rc=0
  shift 2
  "$@" >"$log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "$name failed ($rc), see $log" >&2; tail -3 "$log" >&2; return 1; }
}

kd_options=(--batch 8 --seq-len 128 --lr 1e-3 --seed) # compress's KD settings; the seed follows

compress_run() { # compress_run CONTRACT DIR SEED: the whole pipeline with its ranking
  local cfg="$root/examples/contracts/$1.cfg" dir=$2 seed=$3
  [ -f "$dir/compress/report.json" ] ||
    step compress "$dir/compress.log" "$ac" compress --model "$parent" --contract "$cfg" --data "$data" \
      --tables "$runs/tables/$1.json" --out "$dir/compress" --search-tokens "$search_tokens" \
      --kd-tokens $((kd_steps * 8 * 128)) --eval-batches "$eval_batches" "${kd_options[@]}" "$seed" --progress off ||
    return 0
  mkdir -p "$dir/search" "$dir/pruned"
  cp "$dir/compress/model/config.json" "$dir/pruned/" && cp "$dir/compress/eval.json" "$dir/eval.json"
  # the search's summary as the table reads it, with the ranked pick's prediction and
  # every selection token (router steps, short KDs, scores)
  python3 - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/compress/search/search.json"))
r = json.load(open(d + "/compress/report.json"))
s["chosen_predicted"] = r["predicted"]
s["search_tokens"] = r["search_tokens"]
json.dump(s, open(d + "/search/search.json", "w"), indent=1)
EOF
}

one_run() { # one_run CONTRACT ARM SEED
  local contract=$1 arm=$2 seed=$3
  local cfg="$root/examples/contracts/$contract.cfg" tables="$runs/tables/$contract.json"
  local dir="$runs/$contract/$arm/seed$seed"
  mkdir -p "$dir"
  if [ "$arm" = rerank ]; then compress_run "$contract" "$dir" "$seed"; return 0; fi
  # shellcheck disable=SC2086 # the arm's flags are words
  [ -f "$dir/search/search.json" ] ||
    step search "$dir/search.log" "$ac" search --model "$parent" --contract "$cfg" --tables "$tables" --data "$data" \
      --out "$dir/search" --tokens "$search_tokens" --seed "$seed" --progress off ${arm_flags[$arm]} || return 0
  local from=("$parent") ordered=()
  [ -d "$dir/search/weights" ] && from=("$dir/search/weights") ordered=(--ordered)
  [ -f "$dir/pruned/config.json" ] ||
    step prune "$dir/prune.log" "$ac" prune --model "${from[0]}" "${ordered[@]}" --arch "$dir/search/arch.json" \
      --importance "$dir/search/importance.safetensors" --search "$dir/search/search.json" --out "$dir/pruned" || return 0
  [ -f "$dir/kd/model.safetensors" ] ||
    step distill "$dir/kd.log" "$ac" distill --teacher "$parent" --student "$dir/pruned" --data "$data" --out "$dir/kd" \
      --steps "$kd_steps" --warmup $((kd_steps / 20)) --weight-decay 0 "${kd_options[@]}" "$seed" \
      --eval-every 0 --progress off || return 0
  [ -f "$dir/eval.json" ] ||
    step eval "$dir/eval.log" "$ac" eval --model "$dir/kd" --teacher "$parent" --data "$data" \
      --batches "$eval_batches" --batch 8 --seq-len 128 --lines 0 --json "$dir/eval.json" --progress off || return 0
}

for contract in "${contracts[@]}"; do
  tables="$runs/tables/$contract.json"
  [ -f "$tables" ] ||
    step profile "$runs/tables/$contract.log" "$ac" profile --model "$parent" \
      --contract "$root/examples/contracts/$contract.cfg" --out "$tables" --progress off
  for seed in "${seeds[@]}"; do
    for arm in "${arms[@]}"; do
      echo "== $contract $arm seed $seed"
      one_run "$contract" "$arm" "$seed"
    done
  done
done

python3 "$root/examples/experiments/ablation_table.py" "$runs" "${arm_order[@]}" >"$runs/ablation.md"
cat "$runs/ablation.md"
