#!/usr/bin/env bash
# `autocompress eval`: the prose parent against itself on a small shard has zero KD loss,
# full top-1 agreement and equal cross-entropies, in the summary and in --json; a pruned
# student's KD loss, cross-entropies and agreement equal sums done here from both models'
# logits; next-line matching runs on shards made from files; eval compare's paired
# difference equals the one of the files' window scores, and other windows are refused;
# usage errors exit 2, a missing val.bin exits 1 naming it.
set -euo pipefail
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
parent="$src/examples/parent/prose"

fail() { echo "FAIL: $*"; exit 1; }
# the value of a top-level field of the (indented) JSON report
field() { sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\([^,]*\),\{0,1\}\$/\1/p" "$tmp/eval.json"; }

"$ac" eval --help > "$tmp/help"
grep -q "usage: autocompress eval --model DIR --teacher DIR --data DIR" "$tmp/help" || fail "--help prints no usage"
grep -q -- "--json FILE" "$tmp/help" || fail "--help does not list --json"

head -200 "$src/tests/fixtures/tokenizer/lines.txt" | sed 's/^"//; s/"$//' > "$tmp/text.txt"
"$ac" tokenize --tokenizer "$parent/tokenizer.json" --out "$tmp/data" --format files --val-percent 100 --progress off \
  "$tmp/text.txt" > /dev/null

"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 32 --lines 4 \
  --line-context 32 --json "$tmp/eval.json" --progress off > "$tmp/out"
grep -Eq "^  student +[0-9.]+ +[0-9.]+ +0\.000000 +1\.0000$" "$tmp/out" || fail "student row: $(cat "$tmp/out")"
grep -Eq "^  teacher +[0-9.]+ +[0-9.]+ +- +-$" "$tmp/out" || fail "teacher row: $(cat "$tmp/out")"
grep -q "next-line exact match: .* (4 lines)" "$tmp/out" || fail "no next-line line: $(cat "$tmp/out")"
[ -f "$tmp/eval.json" ] && [ ! -e "$tmp/eval.json.tmp" ] || fail "no eval.json (or a leftover .tmp)"
[ "$(field tokens)" = 128 ] || fail "tokens $(field tokens), want 2 x 2 x 32 = 128"
[ "$(field kd_loss)" = 0 ] || fail "kd_loss $(field kd_loss) of a model against itself"
[ "$(field top1_agreement)" = 1 ] || fail "top1_agreement $(field top1_agreement)"
[ "$(field ce)" = "$(field teacher_ce)" ] || fail "ce $(field ce) and teacher_ce $(field teacher_ce) differ"
[ "$(field lines)" = 4 ] || fail "lines $(field lines)"
awk -v c="$(field ce)" -v p="$(field ppl)" -v m="$(field line_exact_match)" \
  'BEGIN { exit !(c > 1 && c < 9 && (exp(c) - p)^2 < 1e-12 * p * p && m >= 0 && m <= 1) }' \
  || fail "ce $(field ce), ppl $(field ppl), line match $(field line_exact_match)"

# the parent served as a bf16 copy against itself in f32: a small KD loss, not zero
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 32 --lines 2 \
  --line-context 32 --weights bf16 --json "$tmp/eval.json" --progress off > "$tmp/out" || fail "eval --weights bf16"
awk -v k="$(field kd_loss)" -v a="$(field top1_agreement)" 'BEGIN { exit !(k > 0 && k < 0.01 && a > 0.9) }' \
  || fail "bf16 against f32: kd_loss $(field kd_loss), top-1 agreement $(field top1_agreement)"

# a student that differs from its teacher (the parent pruned to the committed cpu-latency
# choice) against sums done here in double from each model's logits (`autocompress logits`,
# one window at a time, no batching): the KD loss (tau^2 KL(teacher || student) at tau 2),
# both cross-entropies and the top-1 agreement over the same 4 windows of val.bin
"$ac" prune --model "$parent" --arch "$src/examples/search/cpu-latency/arch.json" --ordered --out "$tmp/student" \
  >/dev/null || fail "prune the student exited $?"
"$ac" eval --model "$tmp/student" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 32 --tau 2 \
  --json "$tmp/eval.json" --progress off >"$tmp/out" || fail "eval of the pruned student exited $?"
# the ids of window k: val.bin's ids k*32 .. k*32+32 (inputs, then each one's next as target)
python3 - "$tmp/data/val.bin" 4 32 >"$tmp/windows" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"ACTOKENS", data[:8]
count, width = struct.unpack_from("<QI", data, 16)
ids = struct.unpack_from("<%d%s" % (count, "H" if width == 2 else "I"), data, 32)
windows, T = int(sys.argv[2]), int(sys.argv[3])
assert count > windows * T, count
for k in range(windows):
    print(",".join(str(i) for i in ids[k * T:k * T + T + 1]))
EOF
k=0
while read -r window; do
  "$ac" logits --model "$tmp/student" --ids "${window%,*}" --out "$tmp/s$k.npy" >/dev/null || fail "student logits $k"
  "$ac" logits --model "$parent" --ids "${window%,*}" --out "$tmp/t$k.npy" >/dev/null || fail "teacher logits $k"
  k=$((k + 1))
done <"$tmp/windows"
python3 - "$tmp/eval.json" "$tmp/windows" "$tmp" <<'EOF' || fail "the pruned student's eval: $(cat "$tmp/out")"
import array, ast, json, math, sys
def npy(path):  # a float32 .npy of shape [T, V]
    raw = open(path, "rb").read()
    assert raw[:6] == b"\x93NUMPY", path
    n = int.from_bytes(raw[8:10], "little")
    head = ast.literal_eval(raw[10:10 + n].decode())
    assert head["descr"] == "<f4" and not head["fortran_order"], head
    rows, cols = head["shape"]
    a = array.array("f")
    a.frombytes(raw[10 + n:])
    assert len(a) == rows * cols, (path, len(a), head["shape"])
    return [a[r * cols:(r + 1) * cols] for r in range(rows)]
def log_softmax(x, inv_tau):
    m = max(x) * inv_tau
    lse = m + math.log(sum(math.exp(v * inv_tau - m) for v in x))
    return [v * inv_tau - lse for v in x]
r = json.load(open(sys.argv[1]))
windows = [[int(i) for i in line.split(",")] for line in open(sys.argv[2])]
tau, kd, ce, tce, agree, n = 2.0, 0.0, 0.0, 0.0, 0, 0
for k, ids in enumerate(windows):
    S, Tl = npy(f"{sys.argv[3]}/s{k}.npy"), npy(f"{sys.argv[3]}/t{k}.npy")
    for pos, (s, t) in enumerate(zip(S, Tl)):
        target = ids[pos + 1]
        ce -= log_softmax(s, 1.0)[target]
        tce -= log_softmax(t, 1.0)[target]
        ls, lt = log_softmax(s, 1 / tau), log_softmax(t, 1 / tau)
        kd += tau * tau * sum(math.exp(b) * (b - a) for a, b in zip(ls, lt))
        agree += max(range(len(s)), key=s.__getitem__) == max(range(len(t)), key=t.__getitem__)
        n += 1
def close(got, want, rtol):
    return abs(got - want) <= rtol * abs(want)
print(f"eval: pruned student kd {r['kd_loss']:.6f} (here {kd / n:.6f}), ce {r['ce']:.5f} (here {ce / n:.5f}), "
      f"teacher ce {r['teacher_ce']:.5f} (here {tce / n:.5f}), top-1 {r['top1_agreement']:.4f} (here {agree}/{n})")
assert r["tokens"] == n == 128, (r["tokens"], n)
assert kd / n > 0.01, kd / n  # the student does differ
assert close(r["kd_loss"], kd / n, 1e-3), (r["kd_loss"], kd / n)
assert close(r["ce"], ce / n, 1e-4) and close(r["teacher_ce"], tce / n, 1e-4), (r["ce"], ce / n, r["teacher_ce"], tce / n)
assert r["ce"] != r["teacher_ce"]
# a near tie of two logits may break the other way between the batched and the one-window run
assert abs(r["top1_agreement"] * n - agree) <= 2, (r["top1_agreement"], agree)
EOF

# eval compare: the parent against itself (A) and the pruned student (B) on the same
# windows; the mean paired difference and its interval from --json, against the
# window scores of both files read here; swapped, the negation; other windows, refused
cp "$tmp/eval.json" "$tmp/b.json"
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 1 --batch 4 --seq-len 32 --tau 2 \
  --json "$tmp/a.json" --progress off >/dev/null || fail "eval of the parent exited $?"
"$ac" eval compare --json "$tmp/ab.json" "$tmp/a.json" "$tmp/b.json" >"$tmp/out" || fail "eval compare exited $?"
grep -Eq "^  kd_loss +[0-9.]+ +[0-9.]+ +\+[0-9.]+  \[\+[0-9.]+, \+[0-9.]+\]  excludes 0$" "$tmp/out" \
  || fail "compare's kd_loss row: $(cat "$tmp/out")"
"$ac" eval compare --json "$tmp/ba.json" "$tmp/b.json" "$tmp/a.json" >/dev/null || fail "eval compare B A exited $?"
python3 - "$tmp" <<'EOF' || fail "eval compare: $(cat "$tmp/out")"
import json, sys
d = sys.argv[1]
a, b = json.load(open(f"{d}/a.json")), json.load(open(f"{d}/b.json"))
ab, ba = json.load(open(f"{d}/ab.json")), json.load(open(f"{d}/ba.json"))
assert ab["windows"] == a["windows"] == b["windows"] == 4, (ab["windows"], a["windows"])
assert ab["a"] == f"{d}/a.json" and ab["b"] == f"{d}/b.json", (ab["a"], ab["b"])
for name, key in (("kd_loss", "window_kd"), ("ce", "window_ce")):
    diffs = [y - x for x, y in zip(a[key], b[key])]
    mean = sum(diffs) / len(diffs)
    got = ab[name]
    print(f"compare {name}: {got['diff']:.6f} {got['diff_95']} (here {mean:.6f}; means {b[name] - a[name]:.6f})")
    assert abs(got["diff"] - mean) < 1e-9 * max(1.0, abs(mean)), (got["diff"], mean)
    assert abs(got["diff"] - (b[name] - a[name])) < 1e-5, (got["diff"], b[name] - a[name])
    lo, hi = got["diff_95"]
    assert min(diffs) <= lo <= got["diff"] <= hi <= max(diffs), (diffs, lo, hi)
    assert got["excludes_0"] == (lo > 0 or hi < 0)
    assert ba[name]["diff"] == -got["diff"] and abs(ba[name]["diff_95"][0] + hi) < 1e-12, (ba[name], got)
assert max(a["window_kd"]) == 0 and ab["kd_loss"]["diff_95"][0] > 0
EOF
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --batches 2 --batch 2 --seq-len 16 --tau 2 \
  --json "$tmp/c.json" --progress off >/dev/null || fail "eval at seq-len 16 exited $?"
rc=0
"$ac" eval compare "$tmp/a.json" "$tmp/c.json" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "compare over other windows exits $rc, want 2"
grep -q "$tmp/a.json and $tmp/c.json were scored on different windows: seq_len 32 against 16" "$tmp/err" \
  || fail "the refusal: $(cat "$tmp/err")"

rc=0
"$ac" eval --model "$parent" --data "$tmp/data" 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "a missing --teacher exits $rc, want 2"
rc=0
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/data" --tau 0 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--tau 0 exits $rc, want 2"
rc=0
"$ac" eval --model "$parent" --teacher "$parent" --data "$tmp/none" --progress off 2> "$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "a missing val.bin exits $rc, want 1"
grep -q "none/val.bin" "$tmp/err" || fail "the error does not name val.bin: $(cat "$tmp/err")"
echo "eval: ok"
