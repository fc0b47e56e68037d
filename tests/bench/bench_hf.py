"""Prefill and decode throughput of Hugging Face transformers on PyTorch's CPU backend,
on the same checkpoint and workload as bench_runtime. Prints one JSON line."""
import argparse
import json
import time

import torch
from transformers import AutoConfig, NemotronHForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    config = AutoConfig.from_pretrained(a.model)
    config.use_mamba_kernels = False
    model = NemotronHForCausalLM.from_pretrained(a.model, config=config, torch_dtype=torch.float32).eval()
    vocab = config.vocab_size
    ids = (torch.arange(a.batch * a.prompt) * 7919 % vocab).reshape(a.batch, a.prompt)
    best_prefill = best_decode = float("inf")
    with torch.no_grad():
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            out = model(input_ids=ids, use_cache=True)
            t1 = time.perf_counter()
            past = out.past_key_values
            for _ in range(a.gen):
                nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
            t2 = time.perf_counter()
            best_prefill = min(best_prefill, t1 - t0)
            best_decode = min(best_decode, t2 - t1)
    print(json.dumps({"engine": "transformers", "batch": a.batch, "prompt": a.prompt, "gen": a.gen,
                      "prefill_tok_s": round(a.batch * a.prompt / best_prefill, 1),
                      "decode_tok_s": round(a.batch * a.gen / best_decode, 1)}))


if __name__ == "__main__":
    main()
