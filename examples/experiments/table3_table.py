#!/usr/bin/env python3
"""Writes RUNS/table3.md from the compress runs of examples/experiments/table3.sh:
RUNS/PARENT-CONTRACT-METHOD-sSEED/report.json (a finished run) and its eval.json.

Per (parent, contract, method): the mean over seeds and the 95% t-interval (n - 1 degrees
of freedom) of the held-out KD loss and CE, search and KD tokens, the measured cost as a
fraction of each target, and how many seeds passed. Per (parent, contract): the mean over
seeds of the paired difference AutoCompress - Minitron++ of the held-out KD loss (and CE)
with its t-interval, and whether it excludes 0. Per seed: the difference over the windows
of val.bin with its paired bootstrap interval (`autocompress eval compare`), and each
method's pick (parameters, hidden size, layers kept).

    table3_table.py --runs DIR --ac BIN --seeds "1 2 3" --command TEXT PARENT:CONTRACT...
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

METHODS = ("autocompress", "minitron++")
NAMES = {"autocompress": "AutoCompress", "minitron++": "Minitron++"}
# Student's t 0.975 quantiles by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042}
# cost keys of measure.json: (label, ceiling: True for latency and memory, False for the throughput floor)
COSTS = (("latency_ms", "latency", True), ("throughput_tok_s", "throughput", False), ("memory_bytes", "memory", True))


def t_quantile(df):
    if df in T975:
        return T975[df]
    below = [d for d in T975 if d < df]
    return T975[max(below)] if df < 30 else 1.96 + 2.4 / df  # within 0.01 of the quantile beyond 30


def t_interval(values):
    """(mean, lo, hi); lo and hi None for fewer than two values."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def fmt_interval(values, digits):
    mean, lo, hi = t_interval(values)
    if lo is None:
        return f"{mean:.{digits}f} (n=1)"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def used(report, key, ceiling):
    """The measured cost as a fraction of the target, so that 1 is the whole budget and
    more than 1 misses it; None when the contract sets no such target."""
    q = report.get("measured", {}).get(key, {})
    if "target" not in q or not q.get("measured"):
        return None
    return q["measured"] / q["target"] if ceiling else q["target"] / q["measured"]


def load_runs(runs, pairs, seeds):
    found = {}
    for parent, contract in pairs:
        for method in METHODS:
            for seed in seeds:
                out = os.path.join(runs, f"{parent}-{contract}-{method}-s{seed}")
                path = os.path.join(out, "report.json")
                if os.path.exists(path):
                    with open(path) as f:
                        found[parent, contract, method, seed] = (out, json.load(f))
    return found


def method_row(parent, contract, method, reports):
    kd = [r["eval"]["kd_loss"] for r in reports]
    ce = [r["eval"]["ce"] for r in reports]
    last = [r["kd_loss_final"] for r in reports]
    cells = [parent, contract, NAMES[method], str(len(reports)), fmt_interval(kd, 4), fmt_interval(ce, 4),
             f"{sum(last) / len(last):.4f}", f"{sum(r['search_tokens'] for r in reports) / len(reports):,.0f}",
             f"{sum(r['kd_tokens'] for r in reports) / len(reports):,.0f}"]
    for key, _, ceiling in COSTS:
        u = [x for x in (used(r, key, ceiling) for r in reports) if x is not None]
        cells.append(f"{sum(u) / len(u):.3f} ({min(u):.3f}-{max(u):.3f})" if u else "-")
    passed = sum(1 for r in reports if r["pass"])
    cells.append(f"{passed}/{len(reports)}" if passed == len(reports) else f"**{passed}/{len(reports)}**")
    return "| " + " | ".join(cells) + " |"


def verdict(lo, hi):
    if lo is None:
        return "n=1"
    if hi < 0:
        return "yes: AutoCompress lower"
    if lo > 0:
        return "yes: Minitron++ lower"
    return "no"


def pair_row(parent, contract, both):
    dkd = [a["eval"]["kd_loss"] - m["eval"]["kd_loss"] for a, m in both]
    dce = [a["eval"]["ce"] - m["eval"]["ce"] for a, m in both]
    _, lo, hi = t_interval(dkd)
    return (f"| {parent} | {contract} | {len(both)} | {fmt_interval(dkd, 4)} | {verdict(lo, hi)} | "
            f"{fmt_interval(dce, 4)} |")


def window_compare(ac, minitron_out, autocompress_out):
    """`autocompress eval compare` of the two eval.json files (B - A: AutoCompress -
    Minitron++), or the reason it could not be made."""
    if not os.access(ac, os.X_OK):
        return None, f"{ac} is not built"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "compare.json")
        done = subprocess.run([ac, "eval", "compare", "--json", out, os.path.join(minitron_out, "eval.json"),
                               os.path.join(autocompress_out, "eval.json")], capture_output=True, text=True)
        if done.returncode != 0:
            return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        with open(out) as f:
            return json.load(f), None


def pick(report):
    kept = sum(1 for layer in report.get("architecture", []) if layer.get("kept") is not None)
    return f"{report['parameters']:,.0f} / {report.get('hidden', '-')} / {kept}"


def seed_rows(ac, parent, contract, seeds, found, notes):
    rows = []
    for seed in seeds:
        a, m = found.get((parent, contract, "autocompress", seed)), found.get((parent, contract, "minitron++", seed))
        if not a or not m:
            continue
        cmp, why = window_compare(ac, m[0], a[0])
        if cmp:
            k, c = cmp["kd_loss"], cmp["ce"]
            dkd = f"{k['diff']:+.4f} [{k['diff_95'][0]:+.4f}, {k['diff_95'][1]:+.4f}]"
            dce = f"{c['diff']:+.4f} [{c['diff_95'][0]:+.4f}, {c['diff_95'][1]:+.4f}]"
        else:
            dkd = dce = "-"
            notes.append(f"{parent} {contract} seed {seed}: no window comparison: {why}")
        rows.append(f"| {parent} | {contract} | {seed} | {a[1]['eval']['kd_loss']:.4f} | {m[1]['eval']['kd_loss']:.4f} | "
                    f"{dkd} | {dce} | {pick(a[1])} | {pick(m[1])} | {'yes' if a[1]['pass'] else '**no**'} | "
                    f"{'yes' if m[1]['pass'] else '**no**'} |")
    return rows


def held_out_note(found):
    seen = {}
    for (parent, _, _, _), (_, r) in found.items():
        seen.setdefault(parent, set()).add((r["eval"]["windows"], r["eval"]["seq_len"], r["eval"]["tokens"]))
    parts = []
    for parent, shapes in sorted(seen.items()):
        text = " or ".join(f"{w:,.0f} windows of {t:.0f} tokens ({n:,.0f})" for w, t, n in sorted(shapes))
        parts.append(f"{parent} {text}")
    return "; ".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--ac", required=True)
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("pairs", nargs="+")
    args = ap.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in args.pairs]
    seeds = args.seeds.split()
    found = load_runs(args.runs, pairs, seeds)
    methods, pair_lines, seed_lines, notes = [], [], [], []
    for parent, contract in pairs:
        for method in METHODS:
            reports = [found[parent, contract, method, s][1] for s in seeds if (parent, contract, method, s) in found]
            if reports:
                methods.append(method_row(parent, contract, method, reports))
        both = [(found[parent, contract, "autocompress", s][1], found[parent, contract, "minitron++", s][1])
                for s in seeds if (parent, contract, "autocompress", s) in found
                and (parent, contract, "minitron++", s) in found]
        if both:
            pair_lines.append(pair_row(parent, contract, both))
        seed_lines += seed_rows(args.ac, parent, contract, seeds, found, notes)
    text = f"""# Table 3 on this machine

Made by

    {args.command}

- Parents examples/parent/{{prose,code}}-large; seeds {' '.join(seeds)} (compress --seed; both
  methods get the same seed, so the same KD batches); batch 8 x 128.
- Held-out, from each parent's val.bin: {held_out_note(found) or 'no run yet'}.
- Held-out KD and CE: the mean over seeds with a 95% t-interval over seeds. KD (last 25,
  train): the distillation's loss on its final 25 batches (the paper's number), mean over seeds.
- Used: the measured cost as a fraction of each target (latency and memory: measured /
  target; throughput, a floor: target / measured), so 1 is the whole budget and above 1
  misses it; mean over seeds (min-max).
- Pass: seeds whose result met every target when measured.

| parent | contract | method | seeds | held-out KD | held-out CE | KD (last 25, train) | search tokens | KD tokens | used: latency | used: throughput | used: memory | pass |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(methods) + """

AutoCompress - Minitron++ by seed (negative: AutoCompress lower), the mean over the seeds
both finished with a 95% t-interval; a pair is won when the interval excludes 0.

| parent | contract | seeds | KD difference | excludes 0 | CE difference |
|---|---|---|---|---|---|
""" + "\n".join(pair_lines) + """

Per seed: the difference over the held-out windows with its paired bootstrap 95% interval
(`autocompress eval compare MINITRON/eval.json AUTOCOMPRESS/eval.json`), and each pick as
parameters / hidden / layers kept.

| parent | contract | seed | AutoCompress KD | Minitron++ KD | KD difference (windows) | CE difference (windows) | AutoCompress pick | Minitron++ pick | AutoCompress pass | Minitron++ pass |
|---|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(seed_lines) + "\n"
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    with open(os.path.join(args.runs, "table3.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
