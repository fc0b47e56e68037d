#!/usr/bin/env python3
"""The ablation table from the runs of ablation.sh: per contract and arm, over the seeds
that finished, the held-out KD loss and CE after the fixed short KD (mean and 95%
t-interval), the predicted cost as a fraction of each planned target, and the shape
picked (hidden, kept layers, Mamba heads x layers, distinct architectures over seeds).

    ablation_table.py RUNS_DIR ARM...
"""
import glob
import json
import math
import os
import statistics
import sys

# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_interval(values):
    """'m' for one value, 'm (lo-hi)' with the t-interval for more."""
    m = statistics.mean(values)
    if len(values) < 2:
        return f"{m:.4f}"
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{m:.4f} ({m - half:.4f}-{m + half:.4f})"


def shape(config):
    """hidden, layers, Mamba layers, Mamba heads summed over them: from block_configs
    (nemotron_h_puzzle) or the pattern and the global head count (nemotron_h)."""
    if "block_configs" in config:
        blocks = config["block_configs"]
        mamba = [b for b in blocks if b["block_type"] == "mamba"]
        return config["hidden_size"], len(blocks), len(mamba), sum(b["mamba_num_heads"] for b in mamba)
    pattern = config["hybrid_override_pattern"]
    mambas = pattern.count("M")
    return config["hidden_size"], len(pattern), mambas, mambas * config["mamba_num_heads"]


def budget_use(search):
    """predicted / planned for each planned target (throughput: planned / predicted)."""
    out = []
    plan, pred = search["planned_targets"], search["chosen_predicted"]
    for key, name in (("latency_ms", "lat"), ("memory_mib", "mem")):
        if key in plan:
            out.append(f"{name} {pred[key] / plan[key]:.2f}")
    if "throughput_tok_s" in plan:
        out.append(f"thr {plan['throughput_tok_s'] / pred['throughput_tok_s']:.2f}")
    return ", ".join(out)


def row(runs, contract, arm):
    seeds = []
    for d in sorted(glob.glob(os.path.join(runs, contract, arm, "seed*"))):
        paths = [os.path.join(d, p) for p in ("eval.json", "search/search.json", "pruned/config.json")]
        if all(os.path.exists(p) for p in paths):
            seeds.append((os.path.basename(d), *(json.load(open(p)) for p in paths)))
    if not seeds:
        return None
    kd = [e["kd_loss"] for _, e, _, _ in seeds]
    ce = [e["ce"] for _, e, _, _ in seeds]
    shapes = [shape(c) for _, _, _, c in seeds]
    picks = {json.dumps(c, sort_keys=True) for _, _, _, c in seeds}
    shape_text = "; ".join(f"h{h} {n}L {m}M x{hd // max(m, 1)}h" for h, n, m, hd in shapes)
    use = "; ".join(budget_use(s) for _, _, s, _ in seeds)
    tokens = max(s["search_tokens"] for _, _, s, _ in seeds)
    return (f"| {contract} | {arm} | {len(seeds)} | {mean_interval(kd)} | {mean_interval(ce)} | {use} | "
            f"{shape_text} | {len(picks)} | {tokens} |")


def main():
    runs, arms = sys.argv[1], sys.argv[2:]
    contracts = sorted(d for d in os.listdir(runs) if os.path.isdir(os.path.join(runs, d)) and d != "tables")
    print("| contract | arm | seeds | held-out KD | held-out CE | predicted / planned | shapes (hidden, "
          "layers, Mamba layers x heads) | distinct picks | search tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for contract in contracts:
        for arm in arms:
            r = row(runs, contract, arm)
            if r:
                print(r)


if __name__ == "__main__":
    main()
