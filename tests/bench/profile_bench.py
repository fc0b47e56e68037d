"""Serving tokens/s with in-situ profiling paused, at the default rate and at every step,
in one server (standard library only).

    profile_bench.py --port N --token T [--clients 4] [--seconds 6] [--rounds 5] [--every 16]

Run by tests/bench/run_profile_bench.sh, which documents the method. The rate is switched
with POST /admin/profile between levels, so every mode runs in the same process (process
to process, this machine's speed differs by more than the 3% being measured); the order
of the modes turns each round, and each mode's figure is its median over the rounds.
"""
import argparse
import http.client
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_bench import calibrate, complete, run_level  # noqa: E402


def set_rate(port, token, every):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/admin/profile", body=json.dumps({"sample_every": every}),
                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"POST /admin/profile: {resp.status} {data[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--every", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    a = ap.parse_args()
    prompt, n_prompt = calibrate(a.port, a.prompt_tokens)
    complete(http.client.HTTPConnection("127.0.0.1", a.port, timeout=120), prompt, a.max_tokens)
    modes = [0, a.every, 1]
    rates = {m: [] for m in modes}
    failed = 0
    print(f"prompt {n_prompt} tokens, {a.max_tokens} generated, {a.clients} clients, {a.seconds:g} s a level")
    for r in range(a.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        line = []
        for m in order:
            set_rate(a.port, a.token, m)
            results, errors, elapsed = run_level(a.port, a.clients, a.seconds, prompt, a.max_tokens)
            failed += len(errors)
            rates[m].append(sum(t for _, t in results) / elapsed)
            line.append(f"every {m}: {rates[m][-1]:.1f}")
        print(f"round {r + 1}: " + ", ".join(line) + " tok/s", flush=True)
    base = statistics.median(rates[0])
    print(f"{'sampling':>14} {'tok/s (median)':>15} {'ratio':>7} {'overhead':>9}")
    for m in modes:
        med = statistics.median(rates[m])
        name = "paused" if m == 0 else f"1 step in {m}"
        print(f"{name:>14} {med:>15.1f} {med / base:>7.3f} {100 * (1 - med / base):>8.2f}%")
    overhead = 1 - statistics.median(rates[a.every]) / base
    print(f"default rate (1 in {a.every}): overhead {100 * overhead:.2f}% -> {'PASS' if overhead < 0.03 else 'FAIL'} (< 3%)")
    if failed:
        print(f"{failed} requests failed")
    return 1 if failed or overhead >= 0.03 else 0


if __name__ == "__main__":
    sys.exit(main())
