#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer committed as examples/data/tokenizer.json.

    scripts/corpus.sh build/corpus
    /work/venv/bin/python scripts/train_tokenizer.py [--corpus build/corpus]
        [--out examples/data/tokenizer.json] [--vocab-size 4096]

Reads DIR/prose.txt (fortune format: entries separated by "%" lines) and the files named
in DIR/code.list, one document each, and trains a GPT-2-style byte-level BPE with the
Hugging Face `tokenizers` library: ByteLevel pre-tokenizer (GPT-2 split regex, no prefix
space), ByteLevel decoder, no normalizer, the 256 byte symbols as the initial alphabet,
special tokens <|endoftext|> (id 0) and <|pad|> (id 1). Training runs on one thread and
the documents are fed in a fixed order, so two runs on the same corpus write the same
bytes (the script checks this by training twice unless --once is given).
"""
import argparse
import hashlib
import json
import os
import sys

# One rayon thread: the trainer's merge choice is deterministic anyway (ties break on
# the pair's ids), but word counting order then cannot matter at all.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]


def fortune_entries(path):
    """The "%"-separated entries of a fortune file, without their final newline."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    entries, current = [], []
    for line in text.split("\n"):
        if line.rstrip("\r") == "%":
            doc = "\n".join(current)
            if doc.strip():
                entries.append(doc)
            current = []
        else:
            current.append(line)
    doc = "\n".join(current)
    if doc.strip():
        entries.append(doc)
    return entries


def code_files(corpus):
    with open(os.path.join(corpus, "code.list"), encoding="utf-8") as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    docs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            docs.append(f.read())
    return docs


def build(documents, vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tok.to_str(pretty=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--out", default="examples/data/tokenizer.json")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--once", action="store_true", help="train once (skip the determinism check)")
    args = ap.parse_args()

    prose = fortune_entries(os.path.join(args.corpus, "prose.txt"))
    code = code_files(args.corpus)
    documents = prose + code
    text = build(documents, args.vocab_size)
    if not args.once and build(documents, args.vocab_size) != text:
        sys.exit("train_tokenizer: two trainings on the same corpus differ")

    tok = Tokenizer.from_str(text)
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            sys.exit(f"train_tokenizer: {t} has id {tok.token_to_id(t)}, want {i}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
        f.write("\n")

    stats = {
        "prose_documents": len(prose),
        "prose_bytes": sum(len(d.encode("utf-8")) for d in prose),
        "code_documents": len(code),
        "code_bytes": sum(len(d.encode("utf-8")) for d in code),
        "vocab_size": tok.get_vocab_size(),
        "merges": len(json.loads(text)["model"]["merges"]),
        "sha256": hashlib.sha256((text + "\n").encode("utf-8")).hexdigest(),
    }
    for part, docs in (("prose", prose), ("code", code)):
        stats[part + "_tokens"] = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
