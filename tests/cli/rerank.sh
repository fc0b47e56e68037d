#!/usr/bin/env bash
# compress --rerank on a tiny parent. The search's candidates are written into its
# search.json as the candidate search lists them (the search's own pick, the same at
# hidden 16, the whole parent claimed feasible, and one more that --rerank 3 leaves out),
# and the run resumes at the rank stage. Checked against the truth, not the ranking's own
# verdicts: a candidate is a survivor exactly when its measure.json latency is within the
# target; the model is the chosen candidate, a survivor; with several survivors the chosen
# one has the lowest held-out KD loss, each recomputed by `autocompress eval`; search tokens
# (router steps plus the ranking's KDs and scores, counted from their files) are within
# the budget; with no survivor the run stops at the rank stage (exit 2) and makes no model.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fail() { echo "FAIL: $*"; exit 1; }

source "$src/tests/cli/data/tiny_parent.sh"
tiny_parent "$ac" "$src" "$tmp"
cat >"$tmp/tiny.cfg" <<'CFG'
name = "tiny";
hardware = { device = "cpu"; threads = 1; };
workload = { batch = 1; input_tokens = 16; output_tokens = 4; };
targets = { latency_ratio = 0.9; };
search_space = {
  hidden_sizes = [32, 24, 16];
  mamba_heads = { values = [4]; scope = "per_layer"; remove = true; };
  routed_experts = [8, 4];
  routed_ffn = [16, 8, 0];
  shared_ffn = [32, 16, 0];
  removable = ["mamba", "moe"];
};
budgets = { search_tokens = 8192; kd_tokens = 2048; };
CFG
out=$tmp/r
run() { # compress's exit status in $rc: 0 or 3 (measured), 2 (no candidate met the contract)
  set +e
  "$ac" compress --model "$tmp/parent" --contract "$tmp/tiny.cfg" --data "$tmp/data" --out "$out" --batch 4 \
    --seq-len 32 --profile-repeats 1 --measure-sweeps 1 --eval-batches 2 --progress off --rerank 3 "$@" \
    >"$out.log" 2>"$out.err"
  rc=$?
  set -e
  case $rc in 0 | 2 | 3) ;; *) fail "compress exited $rc: $(cat "$out.err")" ;; esac
}

# the search's own candidates: the first three it lists are ranked, in its order, and
# the short KDs fit in the search tokens
run
[ -s "$out/search/rank/rank.json" ] && [ -s "$out/search/rank/rank.md" ] || fail "no ranking table: $(cat "$out.err")"
python3 - "$out" <<'EOF'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/search/search.json"))
r = json.load(open(d + "/search/rank/rank.json"))
listed = s["candidates"][:3]
assert len(r["candidates"]) == max(1, len(listed)), (len(listed), r)
for c, l in zip(r["candidates"], listed):
    assert c["parent_layers"] == l["parent_layers"] and c["hidden"] == l["config"]["hidden_size"], (c, l)
assert (r["tokens"] == 0) == (len(listed) < 2 or r["survivors"] < 2), r
assert s["search_tokens"] + r["tokens"] <= 8192, (s["search_tokens"], r["tokens"])
EOF

# four candidates listed; --rerank 3 ranks the first three
python3 - "$out" "$tmp/parent/config.json" <<'EOF'
import json, sys
d, parent_cfg = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/search/search.json"))
pick = {"config": json.load(open(d + "/search/arch.json")), "parent_layers": s["parent_layers"],
        "predicted": s["chosen_predicted"], "log_prob": -1.0}
narrow = json.loads(json.dumps(pick))
narrow["config"]["hidden_size"] = 16
parent = json.load(open(parent_cfg))
whole = {"config": parent, "parent_layers": list(range(6)), "predicted": s["chosen_predicted"], "log_prob": -2.0}
s["candidates"] = [pick, narrow, whole, narrow]
json.dump(s, open(d + "/search/search.json", "w"))
EOF
rm -rf "$out/search/rank" "$out/pruned" "$out/distill" "$out/model"
run --from rank
python3 - "$out" "$rc" <<'EOF'
import json, os, sys
d, rc = sys.argv[1], int(sys.argv[2])
rank = json.load(open(d + "/search/rank/rank.json"))
cands = rank["candidates"]
assert len(cands) == 3, len(cands)
survivors = []
kd_files = 0
per_batch = 4 * 32
# half the tokens beyond the search's calibration (64 windows), in three
assert rank["kd_tokens_per_candidate"] + rank["score_tokens_per_candidate"] == (8192 - 64 * 32) // 2 // 3
for i, c in enumerate(cands):
    m = json.load(open(f"{d}/search/rank/candidates/c{i}/measure.json"))
    meets = m["latency_ms"]["measured"] <= m["latency_ms"]["target"]
    assert c["verdict"] == ("meets" if meets else "misses"), (i, c["verdict"], m["latency_ms"])
    if meets:
        survivors.append(i)
    loss = f"{d}/search/rank/candidates/c{i}/loss.csv"
    if os.path.exists(loss):
        steps = len([x for x in open(loss).read().split("\n")[1:] if x])
        kd_files += steps * per_batch + json.load(open(f"{d}/search/rank/candidates/c{i}/score.json"))["tokens"]
s = json.load(open(d + "/search/search.json"))
if not survivors:
    assert rc == 2 and rank["chosen"] is None and not os.path.exists(d + "/model"), (rc, rank["chosen"])
    print("none met the target when measured")
    sys.exit(0)
assert rc in (0, 3), rc
chosen = rank["chosen"]
assert chosen in survivors, (chosen, survivors)
if len(survivors) == 1:
    assert kd_files == 0, kd_files  # a lone survivor needs no KD
r = json.load(open(d + "/report.json"))
assert r["selection"]["ranked"] and r["selection"]["chosen"] == chosen, r["selection"]
router = s["search_tokens"]
assert r["search_tokens"] == router + kd_files <= 8192, (r["search_tokens"], router, kd_files)
assert router <= 8192 - 3 * ((8192 - 64 * 32) // 2 // 3), router  # the routers' share
model = json.load(open(d + "/model/config.json"))
pruned = json.load(open(f"{d}/search/rank/candidates/c{chosen}/pruned/config.json"))
assert model["hidden_size"] == pruned["hidden_size"] and model.get("num_hidden_layers") == pruned.get("num_hidden_layers")
open(d + "/survivors", "w").write(" ".join(map(str, survivors)))
EOF
grep -q "## Selection" "$out/report.md" || [ "$rc" = 2 ] || fail "report.md says nothing of the selection"

# with several survivors: the chosen one's held-out KD loss is the lowest, recomputed by eval
survivors=$(cat "$out/survivors" 2>/dev/null || true)
if [ "$(echo "$survivors" | wc -w)" -ge 2 ]; then
  batches=$(python3 -c "import json; print(int(json.load(open('$out/search/rank/rank.json'))['score_tokens_per_candidate']) // 128)")
  for i in $survivors; do
    "$ac" eval --model "$out/search/rank/candidates/c$i" --teacher "$tmp/parent" --data "$tmp/data" \
      --batches "$batches" --batch 4 --seq-len 32 --lines 0 --progress off --json "$tmp/e$i.json" >/dev/null ||
      fail "eval c$i"
  done
  python3 - "$out" "$tmp" $survivors <<'EOF'
import json, sys
d, t, survivors = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
rank = json.load(open(d + "/search/rank/rank.json"))
kd = {i: json.load(open(f"{t}/e{i}.json"))["kd_loss"] for i in survivors}
for i in survivors:
    assert abs(rank["candidates"][i]["held_out_kd_loss"] - kd[i]) <= 1e-5 * max(1, kd[i]), (i, rank, kd)
assert rank["chosen"] == min(survivors, key=lambda i: (kd[i], i)), (rank["chosen"], kd)
EOF
fi
echo "rerank: ok"
