"""The server through the official OpenAI Python client (legacy completions API).

    openai_client.py --port N --ac BUILD/autocompress --model DIR

Run by tests/cli/serve_openai.sh against a server already listening on 127.0.0.1:N and
serving DIR. The offline references come from `autocompress generate` on the same
checkpoint: greedy decoding in the server must give exactly the same text. Exits 1 on the
first failed check, naming it; prints one line per group of checks that passed.
"""
import argparse
import math
import os
import subprocess
import sys

import openai

PROMPT = "Once upon a time, there was a little"
MAX_TOKENS = 24


class CheckFailed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


def offline(ac, model, prompt, max_tokens, extra=()):
    """The CLI's continuation: its stdout less the one newline it ends with, decoded as
    the server decodes (invalid UTF-8 replaced)."""
    cmd = [ac, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(max_tokens), *extra]
    run = subprocess.run(cmd, capture_output=True, timeout=300)
    check(run.returncode == 0, f"{' '.join(cmd)} exited {run.returncode}: {run.stderr.decode(errors='replace')}")
    out = run.stdout
    check(out.endswith(b"\n"), f"generate's output does not end with a newline: {out!r}")
    return out[:-1].decode("utf-8", errors="replace")


def test_greedy(client, name, prompt, ref):
    r = client.completions.create(model=name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
    check(r.object == "text_completion", f"object is {r.object!r}, not 'text_completion'")
    check(r.id and r.id.startswith("cmpl-"), f"id {r.id!r} does not start with 'cmpl-'")
    check(r.model == name, f"response model {r.model!r}, expected {name!r}")
    check(len(r.choices) == 1, f"{len(r.choices)} choices, expected 1")
    c = r.choices[0]
    check(c.text == ref, f"greedy completion differs from `autocompress generate`:\n  server:  {c.text!r}\n"
                         f"  offline: {ref!r}")
    check(c.index == 0, f"choice index {c.index}")
    check(c.finish_reason in ("length", "stop"), f"finish_reason {c.finish_reason!r}")
    check(c.logprobs is None, f"logprobs not asked for, got {c.logprobs!r}")
    u = r.usage
    check(u is not None, "no usage in a non-streaming response")
    check(u.prompt_tokens > 0, f"usage.prompt_tokens {u.prompt_tokens}")
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage does not add up: {u}")
    if c.finish_reason == "length":
        check(u.completion_tokens == MAX_TOKENS, f"finish 'length' after {u.completion_tokens} of {MAX_TOKENS} tokens")
    else:
        check(u.completion_tokens <= MAX_TOKENS, f"{u.completion_tokens} tokens for max_tokens {MAX_TOKENS}")
    print(f"greedy: ok ({u.prompt_tokens} prompt tokens, {u.completion_tokens} generated, "
          f"finish {c.finish_reason}): {c.text!r}")
    return r


def test_stream(client, name, prompt, ref, whole):
    chunks = list(client.completions.create(model=name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True))
    check(len(chunks) >= 2, f"the stream came as {len(chunks)} chunk(s); {MAX_TOKENS} tokens should take several")
    for i, ch in enumerate(chunks):
        check(ch.object == "text_completion", f"chunk {i}: object {ch.object!r}")
        check(ch.id == chunks[0].id, f"chunk {i}: id {ch.id!r} differs from the first chunk's {chunks[0].id!r}")
        check(ch.model == name, f"chunk {i}: model {ch.model!r}, expected {name!r}")
        check(len(ch.choices) == 1, f"chunk {i}: {len(ch.choices)} choices")
    text = "".join(ch.choices[0].text for ch in chunks)
    check(text == ref, f"streamed text differs from `autocompress generate`:\n  stream:  {text!r}\n  offline: {ref!r}")
    reasons = [ch.choices[0].finish_reason for ch in chunks]
    check(reasons[-1] in ("length", "stop"), f"the last chunk's finish_reason is {reasons[-1]!r}")
    check(all(r is None for r in reasons[:-1]), f"finish_reason set before the last chunk: {reasons}")
    check(reasons[-1] == whole.choices[0].finish_reason,
          f"stream finished with {reasons[-1]!r}, the same request without stream with "
          f"{whole.choices[0].finish_reason!r}")

    # stream_options.include_usage: one more chunk, no choices, the usage
    chunks = list(client.completions.create(model=name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None,
          f"with include_usage the last chunk should have no choices and a usage: {last}")
    check(last.usage.completion_tokens == whole.usage.completion_tokens,
          f"streamed usage {last.usage}, non-streamed {whole.usage}")
    text = "".join(ch.choices[0].text for ch in chunks[:-1])
    check(text == ref, f"streamed text with include_usage differs: {text!r}, offline {ref!r}")
    check(chunks[-2].choices[0].finish_reason in ("length", "stop"), "no finish_reason before the usage chunk")
    print(f"stream: ok ({len(chunks) - 1} chunks)")


def check_top(top, chosen_lp, k, where):
    check(isinstance(top, dict), f"{where}: top_logprobs entry is {top!r}, not an object")
    # alternatives that decode to the same text are merged, so there may be fewer than k
    check(1 <= len(top) <= k, f"{where}: {len(top)} alternatives, expected 1..{k}: {top}")
    for tok, lp in top.items():
        check(math.isfinite(lp) and lp <= 1e-6, f"{where}: alternative {tok!r} has logprob {lp}")
    # greedy: the chosen token is the most likely one
    check(abs(max(top.values()) - chosen_lp) < 1e-4,
          f"{where}: greedy chose a token of logprob {chosen_lp}, but the best alternative has "
          f"{max(top.values())}: {top}")


def test_logprobs(client, name, prompt, ref, whole):
    r = client.completions.create(model=name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, logprobs=2)
    c = r.choices[0]
    check(c.text == ref, f"with logprobs the text differs: {c.text!r}, offline {ref!r}")
    lp = c.logprobs
    check(lp is not None, "logprobs=2 returned no logprobs")
    n = whole.usage.completion_tokens - (1 if c.finish_reason == "stop" else 0)  # the end token is not shown
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        got = getattr(lp, field)
        check(got is not None and len(got) == n, f"logprobs.{field} has {None if got is None else len(got)} "
                                                  f"entries, expected {n} (one per generated token)")
    for i, (tok, val, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        check(isinstance(tok, str), f"token {i} is {tok!r}")
        check(math.isfinite(val) and val <= 1e-6, f"token {i} ({tok!r}) has logprob {val}")
        check_top(top, val, 2, f"token {i} ({tok!r})")
    offs = lp.text_offset
    check(offs[0] == 0, f"the first text_offset is {offs[0]}, expected 0")
    check(all(a <= b for a, b in zip(offs, offs[1:])), f"text_offset decreases: {offs}")
    if "\ufffd" not in "".join(lp.tokens):
        check("".join(lp.tokens) == c.text, f"the tokens do not spell the text: {lp.tokens} vs {c.text!r}")
        raw = c.text.encode()
        for i, (tok, off) in enumerate(zip(lp.tokens, offs)):
            check(raw[off:off + len(tok.encode())] == tok.encode(),
                  f"token {i} {tok!r} is not at byte {off} of the text")
    print(f"logprobs: ok ({n} tokens, first {lp.tokens[0]!r} {lp.token_logprobs[0]:.3f} top {lp.top_logprobs[0]})")


def test_echo(client, name, prompt, ref4):
    r = client.completions.create(model=name, prompt=prompt, max_tokens=4, temperature=0, echo=True, logprobs=1)
    c = r.choices[0]
    check(c.text == prompt + ref4, f"echo: text should be the prompt and then the greedy continuation:\n"
                                   f"  got      {c.text!r}\n  expected {prompt + ref4!r}")
    lp = c.logprobs
    n_prompt = r.usage.prompt_tokens
    n_gen = r.usage.completion_tokens - (1 if c.finish_reason == "stop" else 0)
    n = n_prompt + n_gen
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        got = getattr(lp, field)
        check(got is not None and len(got) == n, f"echo: logprobs.{field} has {None if got is None else len(got)} "
                                                  f"entries, expected {n_prompt} prompt + {n_gen} generated")
    check(lp.token_logprobs[0] is None, f"echo: the first prompt token has logprob {lp.token_logprobs[0]}, "
                                        "expected null (nothing precedes it)")
    check(lp.top_logprobs[0] is None, f"echo: the first prompt token has alternatives {lp.top_logprobs[0]}")
    for i in range(1, n):
        val = lp.token_logprobs[i]
        check(val is not None and math.isfinite(val) and val <= 1e-6, f"echo: token {i} has logprob {val}")
        top = lp.top_logprobs[i]
        check(isinstance(top, dict) and len(top) == 1, f"echo: token {i} alternatives {top}, expected one")
        if i >= n_prompt:  # generated greedily: the top alternative is the token itself
            check_top(top, val, 1, f"echo: generated token {i - n_prompt}")
    check("".join(lp.tokens[:n_prompt]) == prompt,
          f"echo: the prompt tokens {lp.tokens[:n_prompt]} do not spell the prompt {prompt!r}")
    check(lp.text_offset[0] == 0, f"echo: first offset {lp.text_offset[0]}")
    check(lp.text_offset[n_prompt] == len(prompt.encode()),
          f"echo: the first generated token is at byte {lp.text_offset[n_prompt]}, the prompt has "
          f"{len(prompt.encode())} bytes")
    print(f"echo: ok ({n_prompt} prompt tokens with logprobs, {n_gen} generated)")


def test_sampling(client, name, prompt, ac, model):
    """temperature 0.8 with a seed: repeatable, and the same draw as the CLI's sampler."""
    kw = dict(model=name, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.8, top_p=0.95, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    check(a == b, f"the same seed gave different completions:\n  {a!r}\n  {b!r}")
    ref = offline(ac, model, prompt, MAX_TOKENS, ("--temperature", "0.8", "--top-p", "0.95", "--seed", "1234"))
    check(a == ref, f"seeded sampling differs from `autocompress generate --seed 1234`:\n  server:  {a!r}\n"
                    f"  offline: {ref!r}")
    print("seed: ok")


def test_models(client, name):
    ids = [m.id for m in client.models.list()]
    check(name in ids, f"models.list() gives {ids}, expected {name!r} in it")
    print(f"models: ok ({ids})")


def test_errors(client, name, prompt):
    cases = [
        ("temperature=5", dict(temperature=5), "temperature"),
        ("max_tokens=0 without echo", dict(max_tokens=0), "max_tokens"),
        ("logprobs=21", dict(logprobs=21), "logprobs"),
        ("n=2", dict(n=2), "'n'"),
        ("an unknown field", dict(extra_body={"frobnicate": 1}), "frobnicate"),
    ]
    for what, kw, named in cases:
        args = dict(model=name, prompt=prompt, max_tokens=4)
        args.update(kw)
        try:
            client.completions.create(**args)
        except openai.BadRequestError as e:
            check(e.status_code == 400, f"{what}: status {e.status_code}")
            body = e.body if isinstance(e.body, dict) else {}
            body = body.get("error", body) if isinstance(body.get("error"), dict) else body
            message = body.get("message", "")
            check(named in message, f"{what}: the error message {message!r} does not name {named}")
            check(body.get("type") == "invalid_request_error", f"{what}: error type {body.get('type')!r}")
        except openai.APIError as e:
            raise CheckFailed(f"{what}: expected openai.BadRequestError, got {type(e).__name__}: {e}")
        else:
            raise CheckFailed(f"{what}: the request succeeded, expected openai.BadRequestError")
    try:
        client.completions.create(model=name, prompt="", max_tokens=4)
    except openai.BadRequestError:
        pass
    else:
        raise CheckFailed("an empty prompt succeeded, expected openai.BadRequestError")
    print(f"errors: ok ({len(cases) + 1} bad requests refused with 400)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ac", required=True, help="the autocompress binary (offline references)")
    ap.add_argument("--model", required=True, help="the checkpoint the server serves")
    ap.add_argument("--name", help="the served model's name (default: the directory's name)")
    a = ap.parse_args()
    name = a.name or os.path.basename(os.path.normpath(a.model))
    # no retries: a failure must show, not be papered over
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{a.port}/v1", api_key="unused", max_retries=0, timeout=120)
    try:
        ref = offline(a.ac, a.model, PROMPT, MAX_TOKENS)
        check(ref != "", "the offline reference is empty: pick a prompt the model continues")
        ref4 = offline(a.ac, a.model, PROMPT, 4)
        whole = test_greedy(client, name, PROMPT, ref)
        test_stream(client, name, PROMPT, ref, whole)
        test_logprobs(client, name, PROMPT, ref, whole)
        test_echo(client, name, PROMPT, ref4)
        test_sampling(client, name, PROMPT, a.ac, a.model)
        test_models(client, name)
        test_errors(client, name, PROMPT)
    except CheckFailed as e:
        print(f"FAIL: {e}")
        return 1
    except openai.APIError as e:
        print(f"FAIL: the client raised {type(e).__name__}: {e}")
        return 1
    print("openai client: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
