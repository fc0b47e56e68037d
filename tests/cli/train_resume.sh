#!/usr/bin/env bash
# `autocompress train` killed with SIGKILL mid-run (checked: it died of the kill, before
# its weights and last steps) and rerun with the same command ends with the same weights
# and loss log as an uninterrupted run; `distill` runs on the result; a resume with other
# settings is refused (exit 2).
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2

"$ac" tokenize --tokenizer "$src/examples/data/tokenizer.json" --out "$tmp/data" --format lines --val-percent 10 \
  --progress off "$src/tests/fixtures/tokenizer/lines.txt" >/dev/null
cat > "$tmp/config.json" <<'JSON'
{"model_type": "nemotron_h", "vocab_size": 4096, "hidden_size": 32, "hybrid_override_pattern": "M*-E",
 "layer_norm_epsilon": 1e-5, "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 8,
 "conv_kernel": 4, "chunk_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
 "intermediate_size": 64, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
 "moe_shared_expert_intermediate_size": 32, "routed_scaling_factor": 2.5}
JSON
args=(train --config "$tmp/config.json" --data "$tmp/data" --steps 120 --batch 4 --seq-len 64 --lr 3e-3 --warmup 10
      --checkpoint-every 10 --eval-every 50 --eval-batches 2 --seed 5 --progress off)

"$ac" "${args[@]}" --out "$tmp/straight" > "$tmp/straight.log"

# started directly (no shell function or subshell in between), so $! is the training process
"$ac" "${args[@]}" --out "$tmp/killed" > /dev/null 2>&1 &
pid=$!
rows() { if [ -f "$tmp/killed/loss.csv" ]; then wc -l < "$tmp/killed/loss.csv"; else echo 0; fi; }
while [ "$(rows)" -lt 35 ]; do
  kill -0 $pid 2>/dev/null || { echo "FAIL: the run ended before it could be killed"; exit 1; }
  sleep 0.02
done
kill -9 $pid
status=0
wait $pid 2>/dev/null || status=$?
# the kill came before the end (else the rerun below would test nothing): the run died of
# SIGKILL (128 + 9) with its weights unwritten and its loss log short of the 120 steps
[ "$status" -eq 137 ] || { echo "FAIL: the killed run exited $status, not of SIGKILL: it had ended"; exit 1; }
[ ! -e "$tmp/killed/model.safetensors" ] || { echo "FAIL: the killed run had written its weights"; exit 1; }
[ "$(rows)" -lt 121 ] || { echo "FAIL: the killed run had logged every step"; exit 1; }
[ -f "$tmp/killed/checkpoint/state.json" ] || { echo "FAIL: no checkpoint after the kill"; exit 1; }
"$ac" "${args[@]}" --out "$tmp/killed" > "$tmp/resumed.log"
grep -q "(resumed)" "$tmp/resumed.log" || { echo "FAIL: the rerun did not resume"; cat "$tmp/resumed.log"; exit 1; }

cmp "$tmp/straight/model.safetensors" "$tmp/killed/model.safetensors" || { echo "FAIL: weights differ after resume"; exit 1; }
diff <(cut -d, -f1-6 "$tmp/straight/loss.csv") <(cut -d, -f1-6 "$tmp/killed/loss.csv") \
  || { echo "FAIL: loss logs differ after resume"; exit 1; }
[ "$(wc -l < "$tmp/straight/loss.csv")" -eq 121 ] || { echo "FAIL: loss.csv should have 120 rows"; exit 1; }

# training lowered the loss
first=$(sed -n 2p "$tmp/straight/loss.csv" | cut -d, -f4)
last=$(tail -1 "$tmp/straight/loss.csv" | cut -d, -f4)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || { echo "FAIL: loss $first -> $last"; exit 1; }

# other settings on the same output directory are refused, naming the difference
rc=0
"$ac" train --config "$tmp/config.json" --data "$tmp/data" --out "$tmp/killed" --steps 120 --batch 4 --seq-len 64 \
  --lr 1e-3 --warmup 10 --checkpoint-every 10 --eval-every 50 --eval-batches 2 --seed 5 --progress off 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: a resume with another learning rate exited $rc, not 2"; exit 1; }
grep -q "other settings" "$tmp/err" || { echo "FAIL: unclear error: $(cat "$tmp/err")"; exit 1; }

# distillation of a fresh student from the trained model runs and learns
"$ac" distill --teacher "$tmp/straight" --student "$tmp/straight" --data "$tmp/data" --out "$tmp/distilled" --steps 20 \
  --batch 4 --seq-len 64 --lr 1e-3 --warmup 2 --eval-every 0 --tau 2 --progress off > "$tmp/distill.log"
first=$(sed -n 2p "$tmp/distilled/loss.csv" | cut -d, -f4)
awk -v a="$first" 'BEGIN { exit !(a < 1e-3) }' || { echo "FAIL: a student equal to its teacher starts at KD loss $first"; exit 1; }
echo "train resume: ok ($(tail -1 "$tmp/straight.log"))"
