"""small_vocab — the shipped Bible folded to a small vocabulary, for the tests whose runs a
50257-wide classifier would otherwise dominate (a d2 model's wte holds 16x its blocks' weights,
and its logits cost 16x their matmuls): with V = 250 a test model is its blocks.

The fold keeps the V - 1 most frequent GPT-2 tokens of the training shard, renumbered by rank
(0 the most frequent; ties by token id), and maps every other token to V - 1, so the text keeps its
structure (a model's loss still falls on it). The default V = 250 pads to Vp = 256 (a multiple of
128), so the padding rows past V stay exercised, and 256 splits over tp = 2 and 4.

Writes OUT/kjv{V}_train_000000.bin and OUT/kjv{V}_val_000000.bin (llm.c's token shard format)
unless they are there; each is written under a temporary name and renamed, so tests that start
together never read half a file. Used by test_pp.sh, test_dp.sh, test_tp.sh, test_cp.sh,
test_gpu_train.sh, test_train.sh with the trainer's --vocab-size V.
usage: test/small_vocab.py OUT_DIR [V]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: test/small_vocab.py OUT_DIR [V]")
    out, V = sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 250
    if not 2 <= V <= 65536:
        sys.exit(f"small_vocab.py: V = {V}: expected 2..65536")
    paths = {split: os.path.join(out, f"kjv{V}_{split}_000000.bin") for split in ("train", "val")}
    if all(os.path.exists(p) for p in paths.values()):
        return
    import gpt2_torch as ref  # (only when there is work: it imports torch)
    os.makedirs(out, exist_ok=True)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    try:
        shards = {split: ref.read_shard(os.path.join(root, f"kjv_{split}_000000.bin")) for split in paths}
    except (OSError, ValueError) as e:
        sys.exit(f"small_vocab.py: {e}")
    counts = np.bincount(shards["train"], minlength=65536)
    by_rank = sorted(range(65536), key=lambda t: (-counts[t], t))[: V - 1]
    fold = np.full(65536, V - 1, dtype=np.int64)
    fold[by_rank] = np.arange(V - 1)
    for split, path in paths.items():
        part = f"{path}.{os.getpid()}.part"
        ref.write_shard(part, fold[shards[split]])
        os.replace(part, path)


if __name__ == "__main__":
    main()
