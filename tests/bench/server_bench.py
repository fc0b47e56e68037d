"""Throughput of `autocompress serve` at several client counts (standard library only).

    server_bench.py --port N [--clients 1,4,16] [--seconds 20] [--max-tokens 64]
                    [--prompt-tokens 64] [--offline 1:E:D,4:E:D,16:E:D]

Run by tests/bench/run_server_bench.sh, which documents the method. Each client is a
thread with its own keep-alive connection that loops non-streaming greedy completions
(temperature 0, max_tokens --max-tokens) of one prompt of about --prompt-tokens tokens
(the longest prefix of a fixed passage that the served tokenizer encodes to at most that
many, found with max_tokens 1 requests). A level runs for --seconds; requests started
before then are waited for and counted, and the rates divide by the time until the last
of them ended. Generated tokens are the responses' usage.completion_tokens. --offline
gives, per client count, the offline engine's end-to-end (E) and decode-only (D)
generated tokens/s; the ratio column is server tok/s over E.
"""
import argparse
import http.client
import json
import math
import sys
import threading
import time

PASSAGE = (
    "Once upon a time, in a small village at the edge of a great forest, there lived a girl "
    "named Lily who loved to explore. Every morning she walked along the river with her dog, "
    "looking for shiny stones and listening to the birds sing in the tall trees. One day she "
    "found a little wooden box hidden under a rock. It was old and dusty, and when she opened "
    "it she saw a tiny golden key and a note that said: find the door that this key will open. "
    "Lily was very curious, so she ran home to tell her mother about the box and the key, and "
    "together they started to look for the door in every corner of the old house."
)


def complete(conn, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {data[:300]!r}")
    return json.loads(data)


def calibrate(port, target):
    """The longest word prefix of PASSAGE that encodes to at most `target` tokens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    words = PASSAGE.split(" ")
    lo, hi, best = 1, len(words), (words[0], None)
    while lo <= hi:
        mid = (lo + hi) // 2
        prompt = " ".join(words[:mid])
        n = complete(conn, prompt, 1)["usage"]["prompt_tokens"]
        if n <= target:
            best = (prompt, n)
            lo = mid + 1
        else:
            hi = mid - 1
    conn.close()
    return best


def run_level(port, clients, seconds, prompt, max_tokens):
    lock = threading.Lock()
    results = []  # (latency, completion_tokens)
    errors = []
    start = time.monotonic()
    deadline = start + seconds

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                r = complete(conn, prompt, max_tokens)
            except Exception as e:  # noqa: BLE001 - any failure is reported, not hidden
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                continue
            with lock:
                results.append((time.monotonic() - t0, r["usage"]["completion_tokens"]))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    return results, errors, elapsed


def percentile(xs, p):
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100.0 * len(xs)) - 1)] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--offline", default="", help="C:E:D,... offline end-to-end and decode tok/s per client count")
    a = ap.parse_args()
    offline = {}
    for item in filter(None, a.offline.split(",")):
        c, e, d = item.split(":")
        offline[int(c)] = (float(e), float(d))

    prompt, n_prompt = calibrate(a.port, a.prompt_tokens)
    warm = complete(http.client.HTTPConnection("127.0.0.1", a.port, timeout=120), prompt, a.max_tokens)
    print(f"prompt: {n_prompt} tokens; greedy completion: {warm['usage']['completion_tokens']} tokens "
          f"(finish {warm['choices'][0]['finish_reason']})")
    print(f"{'clients':>7} {'requests':>8} {'req/s':>8} {'tok/s':>9} {'tok/req':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'offline tok/s':>13} {'ratio':>6} {'decode tok/s':>12}")
    failed = 0
    for clients in [int(c) for c in a.clients.split(",")]:
        results, errors, elapsed = run_level(a.port, clients, a.seconds, prompt, a.max_tokens)
        failed += len(errors)
        n = len(results)
        tokens = sum(t for _, t in results)
        lat = [x for x, _ in results]
        tok_s = tokens / elapsed
        e, d = offline.get(clients, (float("nan"), float("nan")))
        ratio = tok_s / e if e == e and e > 0 else float("nan")
        print(f"{clients:>7} {n:>8} {n / elapsed:>8.2f} {tok_s:>9.1f} {tokens / max(n, 1):>7.1f} "
              f"{1e3 * percentile(lat, 50):>8.0f} {1e3 * percentile(lat, 99):>8.0f} {e:>13.1f} {ratio:>6.2f} "
              f"{d:>12.1f}", flush=True)
        for err in errors[:3]:
            print(f"  error: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
