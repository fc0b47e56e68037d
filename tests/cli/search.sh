#!/usr/bin/env bash
# `autocompress search` end to end on a tiny trained model: profile it under a contract
# with a latency ratio, search, and check the outputs (arch.json that reads back, the
# summary, the diagnostics CSV, the plot script) and, with `costmodel predict`, that the
# pick meets the target; a rerun on the same directory resumes and ends with the same
# architecture, and discretises again without the fill with --fill off; another budget on
# it is refused; the old router optimisation (fixed hinge, per-logit AdamW, constant lr,
# warm-up from the parent) stays selectable; bad arguments name what is wrong (exit 2); a
# target out of reach ends with exit 3 and a pick predicted over it.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }

source "$src/tests/cli/data/tiny_parent.sh"
tiny_parent "$ac" "$src" "$tmp"
cp "$src/tests/cli/data/tiny_search.cfg" "$tmp/tiny.cfg" # latency_ratio 0.7 over a small space
"$ac" profile --model "$tmp/parent" --contract "$tmp/tiny.cfg" --out "$tmp/tables.json" --repeats 1 \
  --no-reference --progress off >/dev/null || fail "profile exited $?"

args=(search --model "$tmp/parent" --contract "$tmp/tiny.cfg" --tables "$tmp/tables.json" --data "$tmp/data"
      --calib-seqs 4 --batch 2 --seq-len 32 --tokens $((4 * 32 + 40 * 64)) --checkpoint-every 5 --progress off)
"$ac" "${args[@]}" --out "$tmp/s" >"$tmp/out" || fail "search exited $?: $(cat "$tmp/out")"
grep -q "^search: 40 router steps, 2688 search tokens (128 calibration)" "$tmp/out" || fail "summary: $(cat "$tmp/out")"
grep -q "meets every target" "$tmp/out" || fail "no verdict: $(cat "$tmp/out")"
for f in arch.json search.json search.csv search.gp importance.safetensors search_state.bin; do
  [ -s "$tmp/s/$f" ] || fail "no $f"
done
[ "$(wc -l <"$tmp/s/search.csv")" -eq 41 ] || fail "search.csv: want a header and 40 rows"
grep -q '"block_configs"\|"hybrid_override_pattern"' "$tmp/s/arch.json" || fail "arch.json is not a config"
grep -q '"meets_targets":[[:space:]]*true' "$tmp/s/search.json" || fail "search.json: $(cat "$tmp/s/search.json")"
# the truth of the verdict, from the cost model's own command rather than the search's
# flag: the written architecture's predicted latency is within latency_ratio (0.7) of the
# parent's, both predicted by `costmodel predict` from the same tables
predicted_ms() { # predicted_ms CONTRACT CONFIG: the predicted latency in ms
  "$ac" costmodel predict --model "$tmp/parent" --contract "$1" --tables "$tmp/tables.json" --arch "$2" |
    sed -nE 's/^latency ([0-9.]+) ms .*/\1/p'
}
parent_ms=$(predicted_ms "$tmp/tiny.cfg" "$tmp/parent/config.json")
chosen_ms=$(predicted_ms "$tmp/tiny.cfg" "$tmp/s/arch.json")
[ -n "$parent_ms" ] && [ -n "$chosen_ms" ] || fail "no predicted latency: parent '$parent_ms', chosen '$chosen_ms'"
awk -v c="$chosen_ms" -v p="$parent_ms" 'BEGIN { exit !(c > 0 && c <= 0.7 * p) }' ||
  fail "the chosen architecture is predicted at $chosen_ms ms, over 0.7 x the parent's $parent_ms ms"

# a rerun of a finished search resumes from its state and chooses the same
cp "$tmp/s/arch.json" "$tmp/first.json"
rm "$tmp/s/arch.json"
"$ac" "${args[@]}" --out "$tmp/s" >"$tmp/again" || fail "rerun exited $?"
grep -q "(resumed)" "$tmp/again" || fail "rerun did not resume: $(cat "$tmp/again")"
cmp -s "$tmp/first.json" "$tmp/s/arch.json" || fail "rerun chose another architecture"
# the fill and the candidates are discretisation settings: the finished search takes
# --fill off on the same directory and discretises its saved routers again without the
# fill; the default brings the first pick back
for key in '"fill":[[:space:]]*true' '"before_fill"' '"binding_use"' '"candidates"' '"config"' '"log_prob"'; do
  grep -q "$key" "$tmp/s/search.json" || fail "search.json has no $key: $(cat "$tmp/s/search.json")"
done
"$ac" "${args[@]}" --out "$tmp/s" --fill off --candidates 1 >"$tmp/nofill" || fail "--fill off exited $?"
grep -q "(resumed)" "$tmp/nofill" && grep -q " 0 fill steps" "$tmp/nofill" || fail "--fill off: $(cat "$tmp/nofill")"
grep -q '"fill":[[:space:]]*false' "$tmp/s/search.json" || fail "search.json after --fill off"
[ "$(grep -c '"log_prob"' "$tmp/s/search.json")" -eq 1 ] || fail "--candidates 1: $(cat "$tmp/s/search.json")"
"$ac" "${args[@]}" --out "$tmp/s" >/dev/null || fail "rerun with the fill exited $?"
cmp -s "$tmp/first.json" "$tmp/s/arch.json" || fail "the fill chose another architecture on a rerun"
# score masking is a setting of its own: the same directory refuses it
set +e
# a damaged state is an error naming the file, not a fresh start over it
cp -r "$tmp/s" "$tmp/damaged"
truncate -s 600 "$tmp/damaged/search_state.bin"
"$ac" "${args[@]}" --out "$tmp/damaged" 2>"$tmp/err" >/dev/null; rc=$?
[ $rc -ne 0 ] && grep -q "damaged/search_state.bin is truncated" "$tmp/err" || fail "damaged state: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/s" --expert-masking scores 2>"$tmp/err" >/dev/null; rc=$?
[ $rc -eq 2 ] && grep -q "other settings" "$tmp/err" || fail "changed settings: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/s" --budget hinge 2>"$tmp/err" >/dev/null; rc=$?
[ $rc -eq 2 ] && grep -q "other settings" "$tmp/err" || fail "changed budget: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/t" --router-optim momentum 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--router-optim: 'momentum'" "$tmp/err" || fail "bad --router-optim: rc $rc, $(cat "$tmp/err")"
for bad in "--fill maybe" "--mamba-removal drop"; do
  # shellcheck disable=SC2086
  "$ac" "${args[@]}" --out "$tmp/t" $bad 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] && grep -q -- "${bad% *}: '${bad#* }' is not one of" "$tmp/err" || fail "bad $bad: rc $rc, $(cat "$tmp/err")"
done
"$ac" "${args[@]}" --out "$tmp/t" --expert-masking sideways 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "sideways" "$tmp/err" || fail "bad --expert-masking: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/t" --fill sideways 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "sideways" "$tmp/err" || fail "bad --fill: rc $rc, $(cat "$tmp/err")"
"$ac" search --model "$tmp/parent" --contract "$tmp/tiny.cfg" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--tables" "$tmp/err" || fail "missing --tables: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/u" --tokens 100 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "no router step" "$tmp/err" || fail "tiny budget: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/u" --tokens 100001 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "budgets.search_tokens (100000)" "$tmp/err" || fail "over budget: rc $rc, $(cat "$tmp/err")"
"$ac" "${args[@]}" --out "$tmp/v" --data "$tmp/nowhere" 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] && grep -q "nowhere" "$tmp/err" || fail "missing data: rc $rc, $(cat "$tmp/err")"
set -e
"$ac" "${args[@]}" --out "$tmp/w" --expert-masking scores >"$tmp/scores" || fail "score masking exited $?"
grep -q "meets every target" "$tmp/scores" || fail "score masking: $(cat "$tmp/scores")"
# the diagnostics name the multipliers; the old optimisation stays selectable
head -1 "$tmp/s/search.csv" | grep -q ",lr,ratio:all,lambda:latency,lambda:memory,lambda:throughput$" ||
  fail "search.csv header: $(head -1 "$tmp/s/search.csv")"
"$ac" "${args[@]}" --out "$tmp/old" --budget hinge --router-optim adamw --lr-schedule constant \
  --warmup-from parent >"$tmp/old.out" || fail "the old optimisation exited $?"
grep -q "meets every target" "$tmp/old.out" || fail "the old optimisation: $(cat "$tmp/old.out")"

# a target no architecture of the space can meet (the layers no axis removes cost about
# 0.6 of the parent): the search ends, writes its pick, says it misses and exits 3; the
# pick's prediction is indeed over the target
sed 's/latency_ratio = 0.7;/latency_ratio = 0.2;/' "$tmp/tiny.cfg" >"$tmp/tight.cfg"
grep -q "latency_ratio = 0.2;" "$tmp/tight.cfg" || fail "the tight contract was not made"
set +e
"$ac" search --model "$tmp/parent" --contract "$tmp/tight.cfg" --tables "$tmp/tables.json" --data "$tmp/data" \
  --calib-seqs 4 --batch 2 --seq-len 32 --tokens $((4 * 32 + 10 * 64)) --progress off --out "$tmp/miss" \
  >"$tmp/miss.out" 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 3 ] && grep -q "MISSES every target" "$tmp/miss.out" || fail "an unreachable target: rc $rc, $(cat "$tmp/err")"
missed_ms=$(predicted_ms "$tmp/tight.cfg" "$tmp/miss/arch.json")
awk -v c="$missed_ms" -v p="$parent_ms" 'BEGIN { exit !(c > 0.2 * p) }' ||
  fail "exit 3, yet the pick is predicted at $missed_ms ms, within 0.2 x $parent_ms ms"
echo "search: ok"
