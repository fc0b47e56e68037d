"""Load test of `autocompress serve` with hot swaps under traffic (standard library only).

    load.py --port N --ac BUILD/autocompress --prose DIR --code DIR --token TOKEN
            [--seconds 60] [--clients 16] [--swap-every 8] [--max-tokens 24]

Run by tests/cli/serve_load.sh against a server on 127.0.0.1:N that serves the prose
checkpoint and has admin enabled with TOKEN.

1. Offline references: `autocompress generate` (greedy) on both checkpoints for every
   prompt. The two tokenizers differ, so each prompt has one reference per model.
2. For --seconds, --clients threads each loop: pick a prompt, stream a greedy completion
   (SSE parsed by hand), and classify the text as the prose reference, the code reference
   or neither. A stream must end with a chunk that has a finish_reason and then
   `data: [DONE]` (with include_usage, asked by half of the clients, the usage chunk comes
   between), or it counts as truncated. The `model` field of the chunks must name the
   model whose reference the text equals.
3. Meanwhile one thread swaps to the code checkpoint, back to prose, and so on every
   --swap-every seconds (every third swap drains first); every swap must answer 200.
4. Afterwards /metrics must count exactly the swaps done (and the completions and tokens
   the clients saw), and /admin/status must list them.

Passes with no failed request (a status other than 200, a connection error, an error
event), no truncated stream, every text equal to exactly one model's reference for its
prompt, at least 5 swaps, and texts from both models. Prints a summary either way.
"""
import argparse
import http.client
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time

PROMPTS = [
    "Once upon a time, there was a little",
    "The old man walked slowly down the",
    "She opened the door and saw",
    "In the morning the birds",
    "def fibonacci(n):\n    ",
    "for i in range(10):\n",
    "import os\nimport sys\n\n",
    "The capital of France is",
    "It was a dark and stormy night;",
    "#include <stdio.h>\n\nint main(void)\n{\n",
    "A journey of a thousand miles begins",
    "class Stack:\n    def __init__(self):\n",
]
SWAP_HISTORY = 32  # swaps /admin/status keeps (SRV_SWAP_HISTORY in adapters/server/srv.h)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.by_model = {}
        self.failures = []     # (what, detail)
        self.truncated = []
        self.mismatches = []
        self.latencies = []
        self.ttfts = []
        self.usage_tokens = {}  # (model, prompt index) -> completion_tokens seen in usage
        self.usage_conflicts = []
        self.unknown_tokens = {}  # (model, prompt index) -> requests without usage
        self.tokens = 0

    def add(self, field, item):
        with self.lock:
            getattr(self, field).append(item)


def offline_reference(ac, model, prompt, max_tokens):
    cmd = [ac, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(max_tokens)]
    run = subprocess.run(cmd, capture_output=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: {cmd} exited {run.returncode}: {run.stderr.decode(errors='replace')}")
    if not run.stdout.endswith(b"\n"):
        raise SystemExit(f"FAIL: generate's output does not end with a newline: {run.stdout!r}")
    return run.stdout[:-1].decode("utf-8", errors="replace")


class StreamError(Exception):
    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind  # "failed" or "truncated"


def stream_completion(conn, prompt, max_tokens, include_usage):
    """One streamed greedy completion: (text, model name, usage tokens or None, seconds to
    the first text). Raises StreamError."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise StreamError("failed", f"status {resp.status}: {resp.read()[:300]!r}")
    ctype = resp.getheader("Content-Type", "")
    if not ctype.startswith("text/event-stream"):
        resp.read()
        raise StreamError("failed", f"Content-Type {ctype!r}, expected text/event-stream")
    events = []  # the data of each event, in order
    arrived = []  # when each event's end came in
    data = []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode("utf-8")
        if line in ("\n", "\r\n"):
            if data:
                events.append("\n".join(data))
                arrived.append(time.monotonic())
                data = []
            continue
        line = line.rstrip("\r\n")
        if line.startswith(":"):
            continue  # an SSE comment
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        else:
            raise StreamError("failed", f"unexpected SSE line {line!r}")
    if data:
        raise StreamError("truncated", f"the stream ended inside an event: {data!r}")
    if not events or events[-1] != "[DONE]":
        raise StreamError("truncated", f"the stream does not end with [DONE] ({len(events)} events, last "
                                       f"{events[-1][:200] if events else None!r})")
    if events.count("[DONE]") != 1:
        raise StreamError("failed", "more than one [DONE]")
    chunks = []
    for e in events[:-1]:
        try:
            chunks.append(json.loads(e))
        except ValueError:
            raise StreamError("failed", f"an event is not JSON: {e[:200]!r}")
    for ch in chunks:
        if "error" in ch:
            raise StreamError("failed", f"error event: {ch['error']}")
    usage = None
    if include_usage:
        if not chunks or chunks[-1].get("choices") != [] or not isinstance(chunks[-1].get("usage"), dict):
            raise StreamError("truncated", f"include_usage: no usage chunk before [DONE]: {chunks[-1:]}")
        usage = chunks[-1]["usage"].get("completion_tokens")
        chunks = chunks[:-1]
    if not chunks:
        raise StreamError("truncated", "no completion chunk")
    text, first_text = [], None
    models = set()
    for i, ch in enumerate(chunks):
        choices = ch.get("choices")
        if not isinstance(choices, list) or len(choices) != 1:
            raise StreamError("failed", f"chunk {i} has choices {choices!r}")
        c = choices[0]
        reason = c.get("finish_reason")
        if reason is not None and i != len(chunks) - 1:
            raise StreamError("failed", f"finish_reason {reason!r} in chunk {i} of {len(chunks)}")
        if i == len(chunks) - 1 and reason not in ("length", "stop"):
            raise StreamError("truncated", f"the last chunk before [DONE] has finish_reason {reason!r}")
        if c.get("text") and first_text is None:
            first_text = arrived[i] - t0
        text.append(c.get("text", ""))
        models.add(ch.get("model"))
    if len(models) != 1:
        raise StreamError("failed", f"the chunks name several models: {models}")
    return "".join(text), models.pop(), usage, first_text


def client_thread(idx, args, refs, names, stats, deadline, seed):
    rng = random.Random(seed)
    include_usage = idx % 2 == 0
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
    while time.monotonic() < deadline:
        p = rng.randrange(len(PROMPTS))
        t0 = time.monotonic()
        try:
            text, model_name, usage, ttft = stream_completion(conn, PROMPTS[p], args.max_tokens, include_usage)
        except StreamError as e:
            stats.add("failures" if e.kind == "failed" else "truncated", (PROMPTS[p], str(e)))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
            with stats.lock:
                stats.requests += 1
            continue
        except (OSError, http.client.HTTPException) as e:
            # a chunked body cut short is a truncated stream; anything else a failure
            kind = "truncated" if isinstance(e, http.client.IncompleteRead) else "failures"
            stats.add(kind, (PROMPTS[p], f"{type(e).__name__}: {e}"))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=120)
            with stats.lock:
                stats.requests += 1
            continue
        latency = time.monotonic() - t0
        matches = [m for m in ("prose", "code") if text == refs[m][p]]
        with stats.lock:
            stats.requests += 1
            stats.latencies.append(latency)
            if ttft is not None:
                stats.ttfts.append(ttft)
            if len(matches) != 1:
                stats.mismatches.append((PROMPTS[p], model_name, text))
                continue
            m = matches[0]
            if names["prose"] != names["code"] and model_name != names[m]:
                stats.mismatches.append((PROMPTS[p], model_name, f"the text is {m}'s reference but the chunks "
                                                                 f"name the model {model_name!r}"))
                continue
            stats.by_model[m] = stats.by_model.get(m, 0) + 1
            key = (m, p)
            if usage is not None:
                seen = stats.usage_tokens.setdefault(key, usage)
                if seen != usage:
                    stats.usage_conflicts.append((m, PROMPTS[p], seen, usage))
                stats.tokens += usage
            else:
                stats.unknown_tokens[key] = stats.unknown_tokens.get(key, 0) + 1
    conn.close()


def admin(args, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=300)
    headers = {"Authorization": f"Bearer {args.token}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def swapper_thread(args, deadline, swaps, problems):
    order = [args.code, args.prose]
    i = 0
    next_at = time.monotonic() + args.swap_every
    while True:
        wait = next_at - time.monotonic()
        if next_at >= deadline:
            break
        if wait > 0:
            time.sleep(wait)
        path = order[i % 2]
        drain = (i + 1) % 3 == 0
        t0 = time.monotonic()
        try:
            status, data = admin(args, "POST", "/admin/swap", {"model_path": path, "drain_first": drain})
        except (OSError, http.client.HTTPException) as e:
            problems.append(f"swap {i + 1} to {path}: {type(e).__name__}: {e}")
            break
        if status != 200:
            problems.append(f"swap {i + 1} to {path} (drain_first {drain}): status {status}: {data[:300]!r}")
            break
        swaps.append((path, drain, time.monotonic() - t0))
        i += 1
        next_at += args.swap_every


def metric(text, name, labels=None):
    """The value of one sample of a Prometheus text exposition, or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if (labels or {}) == got:
            return float(m.group(3))
    return None


def get(args, path):
    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
    conn.request("GET", path)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data.decode()


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100.0 * len(xs)) - 1)]  # nearest rank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ac", required=True)
    ap.add_argument("--prose", required=True)
    ap.add_argument("--code", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--swap-every", type=float, default=8)
    ap.add_argument("--min-swaps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.prose = os.path.abspath(args.prose)
    args.code = os.path.abspath(args.code)
    names = {"prose": os.path.basename(args.prose), "code": os.path.basename(args.code)}

    t_ref = time.monotonic()
    refs = {m: [offline_reference(args.ac, d, p, args.max_tokens) for p in PROMPTS]
            for m, d in (("prose", args.prose), ("code", args.code))}
    same = [PROMPTS[i] for i in range(len(PROMPTS)) if refs["prose"][i] == refs["code"][i]]
    if same:
        print(f"FAIL: the two models give the same reference for {same}: the test cannot tell them apart")
        return 1
    print(f"references: {len(PROMPTS)} prompts x 2 models in {time.monotonic() - t_ref:.1f} s")

    status, before = get(args, "/metrics")
    if status != 200:
        print(f"FAIL: /metrics answered {status}")
        return 1
    swaps_before = metric(before, "autocompress_swaps_total", {"result": "ok"}) or 0
    tokens_before = metric(before, "autocompress_generation_tokens_total") or 0
    ok_before = metric(before, "autocompress_requests_total", {"endpoint": "/v1/completions", "status": "200"}) or 0
    status, st = admin(args, "GET", "/admin/status")
    history_before = len(json.loads(st)["swaps"]) if status == 200 else 0

    stats = Stats()
    swaps, swap_problems = [], []
    start = time.monotonic()
    deadline = start + args.seconds
    threads = [threading.Thread(target=client_thread, args=(i, args, refs, names, stats, deadline, args.seed * 1000 + i))
               for i in range(args.clients)]
    threads.append(threading.Thread(target=swapper_thread, args=(args, deadline, swaps, swap_problems)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start

    # plain streams carry no usage: the same greedy completion always has the same count
    unknown = 0
    for key, n in stats.unknown_tokens.items():
        if key in stats.usage_tokens:
            stats.tokens += n * stats.usage_tokens[key]
        else:
            unknown += n

    problems = []
    # the last completion is published a moment before the scheduler counts it
    for _ in range(20):
        status, after = get(args, "/metrics")
        ok_after = metric(after, "autocompress_requests_total", {"endpoint": "/v1/completions", "status": "200"})
        tokens_after = metric(after, "autocompress_generation_tokens_total")
        if status == 200 and tokens_after is not None and not unknown and \
                tokens_after - tokens_before >= stats.tokens:
            break
        time.sleep(0.1)
    swaps_ok = metric(after, "autocompress_swaps_total", {"result": "ok"})
    swaps_failed = metric(after, "autocompress_swaps_total", {"result": "failed"})
    status, st = admin(args, "GET", "/admin/status")
    if status != 200:
        problems.append(f"/admin/status answered {status}: {st[:300]!r}")
        history = []
    else:
        listed = json.loads(st)["swaps"]
        if len(listed) < SWAP_HISTORY:
            history = listed[history_before:]
        else:  # the server keeps the last SWAP_HISTORY: compare what is left of this run's
            history = listed[-min(len(swaps), SWAP_HISTORY):] if swaps else []

    n_ok = sum(stats.by_model.values())
    lat = stats.latencies
    print(f"load: {args.clients} clients for {elapsed:.1f} s: {stats.requests} requests "
          f"({stats.requests / elapsed:.1f}/s), {stats.tokens} tokens generated ({stats.tokens / elapsed:.1f}/s)"
          + (f", {unknown} requests of unknown length" if unknown else ""))
    print(f"  prose {stats.by_model.get('prose', 0)}, code {stats.by_model.get('code', 0)}, "
          f"mismatched {len(stats.mismatches)}, failed {len(stats.failures)}, truncated {len(stats.truncated)}")
    print(f"  latency p50 {1e3 * percentile(lat, 50):.0f} ms, p99 {1e3 * percentile(lat, 99):.0f} ms, "
          f"max {1e3 * max(lat) if lat else float('nan'):.0f} ms; first text p50 {1e3 * percentile(stats.ttfts, 50):.0f} ms, "
          f"p99 {1e3 * percentile(stats.ttfts, 99):.0f} ms")
    print(f"  swaps {len(swaps)} ({sum(1 for s in swaps if s[1])} draining first), "
          f"seconds each: {', '.join(f'{s[2]:.2f}' for s in swaps)}")

    for what, detail in stats.failures[:5]:
        problems.append(f"failed request (prompt {what!r}): {detail}")
    if len(stats.failures) > 5:
        problems.append(f"... {len(stats.failures) - 5} more failed requests")
    for what, detail in stats.truncated[:5]:
        problems.append(f"truncated stream (prompt {what!r}): {detail}")
    for prompt, model_name, text in stats.mismatches[:5]:
        i = PROMPTS.index(prompt)
        problems.append(f"prompt {prompt!r} (model {model_name!r}) gave {text!r}; references: prose "
                        f"{refs['prose'][i]!r}, code {refs['code'][i]!r}")
    if len(stats.mismatches) > 5:
        problems.append(f"... {len(stats.mismatches) - 5} more mismatched texts")
    for m, prompt, a, b in stats.usage_conflicts[:3]:
        problems.append(f"{m}, prompt {prompt!r}: usage.completion_tokens {a} once, {b} another time")
    problems.extend(swap_problems)
    if len(swaps) < args.min_swaps:
        problems.append(f"only {len(swaps)} swaps, at least {args.min_swaps} needed")
    for m in ("prose", "code"):
        if not stats.by_model.get(m):
            problems.append(f"no response from the {m} model")
    done = swaps_ok - swaps_before if swaps_ok is not None else None
    if done != len(swaps):
        problems.append(f"/metrics counts {done} ok swaps during the run, the swapper made {len(swaps)}")
    if swaps_failed:
        problems.append(f"/metrics counts {swaps_failed:.0f} failed swaps")
    listed_swaps = swaps if len(swaps) <= SWAP_HISTORY else swaps[-SWAP_HISTORY:]
    if len(history) != len(listed_swaps):
        problems.append(f"/admin/status lists {len(history)} new swaps, the swapper made {len(swaps)}")
    for k, (rec, (path, drain, _)) in enumerate(zip(history, listed_swaps)):
        if rec.get("model_path") != path or rec.get("ok") is not True or rec.get("drain_first") != drain:
            problems.append(f"/admin/status swap {k + 1} is {rec}, expected ok to {path} drain_first {drain}")
    def delta(after_value, before_value):
        return "none" if after_value is None else f"{after_value - before_value:.0f}"

    if not stats.failures and (ok_after is None or ok_after - ok_before != stats.requests):
        problems.append(f"/metrics counts {delta(ok_after, ok_before)} completions with status 200, "
                        f"the clients made {stats.requests}")
    if not stats.failures and not stats.truncated and not unknown and \
            (tokens_after is None or tokens_after - tokens_before != stats.tokens):
        problems.append(f"/metrics counts {delta(tokens_after, tokens_before)} generated tokens, "
                        f"the clients saw {stats.tokens}")

    if problems:
        for p in problems:
            print(f"FAIL: {p}")
        return 1
    print("load: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
