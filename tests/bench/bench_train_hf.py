"""Training throughput of Hugging Face transformers on PyTorch's CPU backend: forward,
backward and an AdamW step on the same checkpoint, batch and sequence length as
bench_train. Prints one JSON line."""
import argparse
import json
import time

import torch
from transformers import NemotronHForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = NemotronHForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    n = a.batch * a.seq_len
    tokens = (torch.arange(n) * 7919 % vocab).reshape(a.batch, a.seq_len)
    targets = ((torch.arange(n) * 104729 + 1) % vocab).reshape(a.batch, a.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    t0 = None
    for s in range(a.steps + 1):
        if s == 1:
            t0 = time.perf_counter()  # the first step is warm-up
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"engine": "transformers", "batch": a.batch, "seq_len": a.seq_len, "steps": a.steps,
                      "train_tok_s": round(n * a.steps / seconds, 1), "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
