"""
fineweb.py — FineWeb (sample-10BT or sample-100BT) as GPT-2 token shards, like llm.c's.

Each document is preceded by <|endoftext|> (50256). Shards hold 100M uint16 tokens; shard 0
is the validation split (data/fineweb_val_000000.bin), the rest training
(data/fineweb_train_000001.bin, ...). Format: 256 int32 header [20240520, 1, ntok], then the
tokens (llmc/dataloader.h).

Needs internet and `pip install datasets tiktoken numpy` (tiktoken's "gpt2" encoding is the
same BPE as data/gpt2_tokenizer.bin). A corpus you already have as JSON lines, one document a
line, needs none of these: `./tokenize --jsonl --output-prefix data/mine FILE.jsonl...` (the last
5% of its documents for validation).

usage: python3 dev/data/fineweb.py [--version 10B|100B] [--out-dir data] [--shard-tokens N]
"""
import argparse
import multiprocessing as mp
import os

import numpy as np


def tokenize(doc):
    import tiktoken
    enc = tiktoken.get_encoding("gpt2")
    toks = [enc.eot_token] + enc.encode_ordinary(doc["text"])
    a = np.array(toks)
    assert (0 <= a).all() and (a < 2 ** 16).all()
    return a.astype("<u2")


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    os.replace(path + ".tmp", path)
    print(f"wrote {path} ({len(tokens)} tokens)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="10B", choices=["10B", "100B"])
    ap.add_argument("--out-dir", default="data")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    args = ap.parse_args()
    from datasets import load_dataset
    ds = load_dataset("HuggingFaceFW/fineweb", name=f"sample-{args.version}T", split="train")
    os.makedirs(args.out_dir, exist_ok=True)
    buf = np.empty(args.shard_tokens, dtype="<u2")
    n, index = 0, 0
    with mp.Pool(max(1, os.cpu_count() - 2)) as pool:
        for toks in pool.imap(tokenize, ds, chunksize=16):
            while len(toks):
                take = min(len(toks), args.shard_tokens - n)
                buf[n:n + take] = toks[:take]
                n, toks = n + take, toks[take:]
                if n == args.shard_tokens:
                    split = "val" if index == 0 else "train"
                    write_shard(os.path.join(args.out_dir, f"fineweb_{split}_{index:06d}.bin"), buf[:n])
                    n, index = 0, index + 1
    if n:
        split = "val" if index == 0 else "train"
        write_shard(os.path.join(args.out_dir, f"fineweb_{split}_{index:06d}.bin"), buf[:n])


if __name__ == "__main__":
    main()
