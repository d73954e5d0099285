#!/usr/bin/env python3
"""
llama3_meta_to_model.py — Meta's Llama 3 checkpoint (its original/ folder: params.json and
consolidated.00.pth) to this trainer's Llama model file (llmc/checkpoint.h), for --model.

  python3 dev/data/llama3_meta_to_model.py Llama-3.2-1B/original llama3.2-1b.bin --rope-scale 32
  ./train_gpt --model llama3.2-1b.bin --tokenizer Llama-3.2-1B/original/tokenizer.model ...

Tensors (Meta's name -> ours; both keep weights (out, in) as torch.nn.Linear does):
  tok_embeddings.weight                     -> wte, V x C, zero rows after it up to Vp (V rounded up to 128)
  layers.l.attention_norm.weight            -> ln1w[l]
  layers.l.attention.wq, wk, wv .weight     -> qkvw[l], rows [q; k; v] (Meta's RoPE pair layout is ours:
                                               channels 2i, 2i+1 of a head are a pair, rope.cuh)
  layers.l.attention.wo.weight              -> attprojw[l]
  layers.l.ffn_norm.weight                  -> ln2w[l]
  layers.l.feed_forward.w1 (gate), w3 (up)  -> fcw[l], rows [gate; up];  w2 -> fcprojw[l]
  norm.weight                               -> lnfw
  output.weight                             -> lm_head (untied), or nothing where it is
                                               tok_embeddings (tied, as Llama 3.2 1B and 3B)
The file is tensor-major (each tensor for every layer in turn), header
[20261124, 5 (bf16) or 3 (fp32), maxT, V, L, NH, C, Vp, NKV, H, θ, untied, s, l, h, N₀].
Meta's weights are bf16, so the bf16 file (the default) holds them exactly; --fp32 writes the
same values in fp32. RMSNorm's ε is this trainer's 1e-5 (Llama 3's norm_eps; another is refused).
RoPE: params.json's rope_theta; with use_scaled_rope (Llama 3.1, 3.2) the slow pairs are stretched
(rope.cuh) by the factor --rope-scale (8 for Llama 3.1, 32 for Llama 3.2: Hugging Face's
config.json names it rope_scaling.factor), low 1, high 4, original context 8192
(--rope-original-context). The tokenizer is original/tokenizer.model itself (a tiktoken rank
file, llmc/tokenizer.h); Llama 3's 128256 ids need uint32 shards, which ./tokenize writes.

Test: test/test_llama_convert.py (a small random checkpoint in Meta's layout, converted, and
train_gpt's loss on it against a PyTorch forward written as Meta's reference model computes).
"""
import argparse
import json
import os
import struct
import sys

import torch


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Meta's Llama 3 checkpoint (original/) to a Llama model file for --model")
    ap.add_argument("original", help="the folder holding params.json and consolidated.00.pth")
    ap.add_argument("out", help="the model file to write")
    ap.add_argument("--fp32", action="store_true", help="write fp32 (version 3) instead of bf16 (version 5)")
    ap.add_argument("--rope-scale", type=int, default=0,
                    help="RoPE scaling factor where params.json says use_scaled_rope (8: Llama 3.1, 32: Llama 3.2)")
    ap.add_argument("--rope-low", type=int, default=1, help="the scaling's low-frequency factor (default 1)")
    ap.add_argument("--rope-high", type=int, default=4, help="the scaling's high-frequency factor (default 4)")
    ap.add_argument("--rope-original-context", type=int, default=8192, help="the scaling's original context (default 8192)")
    ap.add_argument("--max-seq-len", type=int, default=8192, help="the header's maxT: the longest T to train at (default 8192)")
    a = ap.parse_args()

    pj = os.path.join(a.original, "params.json")
    ck = os.path.join(a.original, "consolidated.00.pth")
    if not os.path.exists(pj) or not os.path.exists(ck):
        fail(f"'{a.original}' needs params.json and consolidated.00.pth (Meta's original/ folder)")
    if os.path.exists(os.path.join(a.original, "consolidated.01.pth")):
        fail(f"'{a.original}' holds a checkpoint split over several files (model parallel); only one file is read")
    p = json.load(open(pj))
    for k in ("dim", "n_layers", "n_heads", "vocab_size"):
        if k not in p:
            fail(f"{pj}: no '{k}'")
    C, L, NH, V = p["dim"], p["n_layers"], p["n_heads"], p["vocab_size"]
    NKV = p.get("n_kv_heads") or NH
    theta = p.get("rope_theta", 10000.0)
    if abs(p.get("norm_eps", 1e-5) - 1e-5) > 1e-12:
        fail(f"{pj}: norm_eps {p['norm_eps']}, but this trainer's RMSNorm uses 1e-5")
    if theta != int(theta):
        fail(f"{pj}: rope_theta {theta} is not a whole number (the header holds an integer)")
    scale = 0
    if p.get("use_scaled_rope", False):
        scale = a.rope_scale  # (params.json does not give it)
        if scale < 1:
            fail(f"{pj} says use_scaled_rope: give its factor with --rope-scale (8 for Llama 3.1, 32 for Llama 3.2)")
        if not (1 <= a.rope_low < a.rope_high) or a.rope_original_context < 1:
            fail("--rope-low, --rope-high, --rope-original-context: need 1 <= low < high and a context >= 1")
    elif a.rope_scale:
        fail(f"--rope-scale {a.rope_scale}: {pj} does not say use_scaled_rope")
    hd = C // NH
    if C % NH or NH % NKV or hd % 2:
        fail(f"{pj}: dim {C}, n_heads {NH}, n_kv_heads {NKV}: need NH | C, NKV | NH and an even head size")

    try:  # mapped, not read whole (an 8B checkpoint is 16 GB); torch before 2.1 has no mmap
        sd = torch.load(ck, map_location="cpu", weights_only=True, mmap=True)
    except TypeError:
        sd = torch.load(ck, map_location="cpu", weights_only=True)

    def get(name, shape):
        if name not in sd:
            fail(f"{ck}: no tensor '{name}'")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"{ck}: '{name}' is {tuple(t.shape)}, expected {tuple(shape)}")
        return t

    H = sd["layers.0.feed_forward.w1.weight"].shape[0] if "layers.0.feed_forward.w1.weight" in sd else fail(f"{ck}: no layers.0.feed_forward.w1.weight")
    Vp = (V + 127) // 128 * 128
    wte = get("tok_embeddings.weight", (V, C))
    out_w = sd.get("output.weight")
    tied = out_w is None or torch.equal(out_w, wte)
    if not tied:
        get("output.weight", (V, C))

    dtype = torch.float32 if a.fp32 else torch.bfloat16
    header = [20261124, 3 if a.fp32 else 5, a.max_seq_len, V, L, NH, C, Vp, NKV, H, int(theta), 0 if tied else 1]
    if scale:
        header += [scale, a.rope_low, a.rope_high, a.rope_original_context]
    header += [0] * (256 - len(header))

    def padded(t):  # V x C -> Vp x C, zero rows after
        z = torch.zeros(Vp - V, C, dtype=t.dtype)
        return torch.cat([t, z])

    def layers(f):  # one tensor for every layer, in order
        return [f(l) for l in range(L)]

    tensors = [
        [padded(wte)],
        layers(lambda l: get(f"layers.{l}.attention_norm.weight", (C,))),
        layers(lambda l: torch.cat([get(f"layers.{l}.attention.wq.weight", (NH * hd, C)),
                                    get(f"layers.{l}.attention.wk.weight", (NKV * hd, C)),
                                    get(f"layers.{l}.attention.wv.weight", (NKV * hd, C))])),
        layers(lambda l: get(f"layers.{l}.attention.wo.weight", (C, NH * hd))),
        layers(lambda l: get(f"layers.{l}.ffn_norm.weight", (C,))),
        layers(lambda l: torch.cat([get(f"layers.{l}.feed_forward.w1.weight", (H, C)),
                                    get(f"layers.{l}.feed_forward.w3.weight", (H, C))])),
        layers(lambda l: get(f"layers.{l}.feed_forward.w2.weight", (C, H))),
        [get("norm.weight", (C,))],
    ]
    if not tied:
        tensors.append([padded(out_w)])
    tmp = a.out + ".tmp"
    n = 0
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for group in tensors:
            for t in group:
                t = t.to(dtype).contiguous()
                f.write((t.view(torch.int16) if dtype == torch.bfloat16 else t).numpy().tobytes())
                n += t.numel()
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: Llama L={L} C={C} NH={NH} NKV={NKV} H={H} V={V} (Vp {Vp}) theta={int(theta)}"
          f"{f' rope scaled x{scale}' if scale else ''}, {'tied' if tied else 'lm_head apart'}, "
          f"{n / 1e6:.2f}M parameters in {'fp32' if a.fp32 else 'bf16'}")


if __name__ == "__main__":
    main()
