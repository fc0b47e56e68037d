"""Clients that keep a server busy while the controller works: N threads send greedy
completions (each a short pause after the last, so the jobs get a share of a small
machine) until a stop file appears, and every answer is checked whole (HTTP 200, a
finish reason, as many tokens as asked unless a stop ended it). Writes a JSON summary:
requests, failures and the first few failures' reasons. Standard library only."""
import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request

PROMPTS = ["The quick brown fox", "Once upon a time", "A fortune: ", "Never trust a", "In the beginning"]


def one_request(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200]!r}"
    except Exception as e:  # a dropped connection, a timeout
        return f"{type(e).__name__}: {e}"
    if status != 200:
        return f"HTTP {status}"
    try:
        answer = json.loads(text)
        choice = answer["choices"][0]
        used = answer["usage"]["completion_tokens"]
    except (ValueError, KeyError, IndexError) as e:
        return f"malformed answer ({e}): {text[:200]!r}"
    if choice.get("finish_reason") == "length" and used != max_tokens:
        return f"truncated: {used} of {max_tokens} tokens"
    if choice.get("finish_reason") not in ("length", "stop"):
        return f"finish_reason {choice.get('finish_reason')!r}"
    return None


def client(index, args, results, lock):
    n = 0
    while not os.path.exists(args.stop):
        problem = one_request(args.port, PROMPTS[(index + n) % len(PROMPTS)], args.max_tokens)
        n += 1
        with lock:
            results["requests"] += 1
            if problem:
                results["failures"] += 1
                if len(results["reasons"]) < 10:
                    results["reasons"].append(problem)
        # a server that is gone is not asked again at full speed
        time.sleep(0.5 if problem else args.pause)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stop", required=True, help="the clients end once this file exists")
    p.add_argument("--out", required=True)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--pause", type=float, default=0.05, help="seconds between one client's requests")
    args = p.parse_args()
    results = {"requests": 0, "failures": 0, "reasons": []}
    lock = threading.Lock()
    start = time.time()
    threads = [threading.Thread(target=client, args=(i, args, results, lock)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results["seconds"] = time.time() - start
    with open(args.out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
