#!/usr/bin/env python3
"""
llama3_to_model.py — a Llama 3 checkpoint to this trainer's Llama model file (llmc/checkpoint.h),
for --model. Either layout a Hugging Face repository holds:
  Meta's (its original/ folder): params.json and consolidated.00.pth
  Hugging Face's (the repository itself): config.json and model*.safetensors

  python3 dev/data/llama3_to_model.py Llama-3.2-1B/original llama3.2-1b.bin --rope-scale 32
  python3 dev/data/llama3_to_model.py Llama-3.2-1B llama3.2-1b.bin      (config.json has the scaling)
  ./train_gpt --model llama3.2-1b.bin --tokenizer Llama-3.2-1B/original/tokenizer.model ...

Each tensor gets our name and layout; Hugging Face's q and k rows are put back into Meta's RoPE
pair order. The file is bf16 by default (Llama's weights exactly; --fp32: the same values in
fp32). Meta's params.json does not hold Llama 3.1's RoPE scaling: give --rope-scale (8 for Llama
3.1, 32 for Llama 3.2). Hugging Face's safetensors are read whole into fp32 (an 8B model needs
~32 GB of memory here); Meta's file is mapped. The tensor table and the rules:
docs/formats.md ("Converting").

Test: test/test_llama_convert.py (small random checkpoints in both layouts, converted, and
train_gpt's loss on them against forwards written as Meta's reference model and as Hugging
Face's LlamaForCausalLM compute).
"""
import argparse
import glob
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_weights import read_safetensors  # noqa: E402  (numpy only: {name: fp32 array})


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def scaling_args(a, where):
    """(factor, low, high, original context) from the flags, checked."""
    if a.rope_scale < 1:
        fail(f"{where} says use_scaled_rope: give its factor with --rope-scale (8 for Llama 3.1, 32 for Llama 3.2)")
    if not (1 <= a.rope_low < a.rope_high) or a.rope_original_context < 1:
        fail("--rope-low, --rope-high, --rope-original-context: need 1 <= low < high and a context >= 1")
    return (a.rope_scale, a.rope_low, a.rope_high, a.rope_original_context)


def load_meta(folder, a):
    """Meta's original/: (config, {Meta's tensor name: tensor})."""
    pj, ck = os.path.join(folder, "params.json"), os.path.join(folder, "consolidated.00.pth")
    if os.path.exists(os.path.join(folder, "consolidated.01.pth")):
        fail(f"'{folder}' holds a checkpoint split over several files (model parallel); only one file is read")
    p = json.load(open(pj))
    for k in ("dim", "n_layers", "n_heads", "vocab_size"):
        if k not in p:
            fail(f"{pj}: no '{k}'")
    cfg = dict(C=p["dim"], L=p["n_layers"], NH=p["n_heads"], V=p["vocab_size"], NKV=p.get("n_kv_heads") or p["n_heads"],
               theta=p.get("rope_theta", 10000.0), eps=p.get("norm_eps", 1e-5), where=pj, scaling=None)
    if p.get("use_scaled_rope", False):
        cfg["scaling"] = scaling_args(a, pj)
    try:  # mapped, not read whole (an 8B checkpoint is 16 GB); torch before 2.1 has no mmap
        sd = torch.load(ck, map_location="cpu", weights_only=True, mmap=True)
    except TypeError:
        sd = torch.load(ck, map_location="cpu", weights_only=True)
    return cfg, sd, ck


def load_hf(folder, a):
    """Hugging Face's layout: (config, {Meta's tensor name: tensor}), q and k rows put back in Meta's pair order."""
    cj = os.path.join(folder, "config.json")
    c = json.load(open(cj))
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if k not in c:
            fail(f"{cj}: no '{k}'")
    cfg = dict(C=c["hidden_size"], L=c["num_hidden_layers"], NH=c["num_attention_heads"], V=c["vocab_size"],
               NKV=c.get("num_key_value_heads") or c["num_attention_heads"], theta=c.get("rope_theta", 10000.0),
               eps=c.get("rms_norm_eps", 1e-5), where=cj, scaling=None)
    rs = c.get("rope_scaling")
    rp = c.get("rope_parameters")  # transformers 5 writes RoPE's θ and scaling here, not as rope_theta, rope_scaling
    if isinstance(rp, dict) and rp:
        cfg["theta"] = rp.get("rope_theta", cfg["theta"])
        rs = rp if rp.get("rope_type", rp.get("type", "default")) != "default" else None
    if rs:
        if rs.get("rope_type", rs.get("type")) != "llama3":
            fail(f"{cj}: rope_scaling of type {rs.get('rope_type', rs.get('type'))!r}; only Llama 3's ('llama3') is supported")
        vals = [rs.get("factor"), rs.get("low_freq_factor"), rs.get("high_freq_factor"), rs.get("original_max_position_embeddings")]
        if any(v is None or v != int(v) for v in vals):
            fail(f"{cj}: rope_scaling {rs}: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings "
                 "must be whole numbers (the header holds integers)")
        cfg["scaling"] = tuple(int(v) for v in vals)
    files = sorted(glob.glob(os.path.join(folder, "model*.safetensors")))
    if not files:
        fail(f"'{folder}' has config.json but no model*.safetensors")
    hf = {}
    for f in files:
        hf.update({k: torch.from_numpy(v.copy()) for k, v in read_safetensors(f).items()})
    hd = cfg["C"] // cfg["NH"]

    def unpermute(w, heads):  # HF row h·hd + j·hd/2 + i (i < hd/2, j ∈ {0, 1}) holds Meta's row h·hd + 2i + j
        return w.reshape(heads, 2, hd // 2, -1).transpose(1, 2).reshape(heads * hd, -1)

    sd = {}
    names = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    per_layer = {"attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attention.wq": "self_attn.q_proj",
                 "attention.wk": "self_attn.k_proj", "attention.wv": "self_attn.v_proj", "attention.wo": "self_attn.o_proj",
                 "feed_forward.w1": "mlp.gate_proj", "feed_forward.w3": "mlp.up_proj", "feed_forward.w2": "mlp.down_proj"}
    for l in range(cfg["L"]):
        for meta, theirs in per_layer.items():
            names[f"layers.{l}.{meta}.weight"] = f"model.layers.{l}.{theirs}.weight"
    for meta, theirs in names.items():
        if theirs in hf:
            t = hf[theirs]
            if meta.endswith("attention.wq.weight") and t.dim() == 2 and t.shape[0] == cfg["NH"] * hd:
                t = unpermute(t, cfg["NH"])
            elif meta.endswith("attention.wk.weight") and t.dim() == 2 and t.shape[0] == cfg["NKV"] * hd:
                t = unpermute(t, cfg["NKV"])
            sd[meta] = t
    if c.get("tie_word_embeddings", False):
        sd.pop("output.weight", None)
    return cfg, sd, files[0] if len(files) == 1 else os.path.join(folder, "model*.safetensors")


def main():
    ap = argparse.ArgumentParser(description="A Llama 3 checkpoint (Meta's original/ or Hugging Face's) to a Llama model file for --model")
    ap.add_argument("checkpoint", help="a folder with params.json and consolidated.00.pth (Meta's), or config.json and model*.safetensors")
    ap.add_argument("out", help="the model file to write")
    ap.add_argument("--fp32", action="store_true", help="write fp32 (version 3) instead of bf16 (version 5)")
    ap.add_argument("--rope-scale", type=int, default=0,
                    help="Meta's layout: RoPE scaling factor where params.json says use_scaled_rope (8: Llama 3.1, 32: Llama 3.2)")
    ap.add_argument("--rope-low", type=int, default=1, help="Meta's layout: the scaling's low-frequency factor (default 1)")
    ap.add_argument("--rope-high", type=int, default=4, help="Meta's layout: the scaling's high-frequency factor (default 4)")
    ap.add_argument("--rope-original-context", type=int, default=8192, help="Meta's layout: the scaling's original context (default 8192)")
    ap.add_argument("--max-seq-len", type=int, default=8192, help="the header's maxT: the longest T to train at (default 8192)")
    a = ap.parse_args()

    d = a.checkpoint
    if os.path.exists(os.path.join(d, "params.json")) and os.path.exists(os.path.join(d, "consolidated.00.pth")):
        cfg, sd, src = load_meta(d, a)
    elif os.path.exists(os.path.join(d, "config.json")):
        if a.rope_scale:
            fail(f"--rope-scale: '{d}' is in Hugging Face's layout, whose config.json gives the scaling")
        cfg, sd, src = load_hf(d, a)
    else:
        fail(f"'{d}' has neither params.json and consolidated.00.pth (Meta's layout) nor config.json (Hugging Face's)")
    if not cfg["scaling"] and a.rope_scale:
        fail(f"--rope-scale {a.rope_scale}: {cfg['where']} does not say use_scaled_rope")
    C, L, NH, NKV, V, theta = cfg["C"], cfg["L"], cfg["NH"], cfg["NKV"], cfg["V"], cfg["theta"]
    if abs(cfg["eps"] - 1e-5) > 1e-12:
        fail(f"{cfg['where']}: norm_eps {cfg['eps']}, but this trainer's RMSNorm uses 1e-5")
    if theta != int(theta):
        fail(f"{cfg['where']}: rope_theta {theta} is not a whole number (the header holds an integer)")
    hd = C // NH
    if C % NH or NH % NKV or hd % 2:
        fail(f"{cfg['where']}: dim {C}, {NH} heads, {NKV} key/value heads: need NH | C, NKV | NH and an even head size")

    def get(name, shape):
        if name not in sd:
            fail(f"{src}: no tensor '{name}' (Meta's name)")
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            fail(f"{src}: '{name}' (Meta's name) is {tuple(t.shape)}, expected {tuple(shape)}")
        return t

    if "layers.0.feed_forward.w1.weight" not in sd:
        fail(f"{src}: no tensor 'layers.0.feed_forward.w1.weight' (Meta's name)")
    H = sd["layers.0.feed_forward.w1.weight"].shape[0]
    Vp = (V + 127) // 128 * 128
    wte = get("tok_embeddings.weight", (V, C))
    out_w = sd.get("output.weight")
    tied = out_w is None or torch.equal(out_w, wte)
    if not tied:
        get("output.weight", (V, C))
    scale = cfg["scaling"]

    dtype = torch.float32 if a.fp32 else torch.bfloat16
    header = [20261124, 3 if a.fp32 else 5, a.max_seq_len, V, L, NH, C, Vp, NKV, H, int(theta), 0 if tied else 1]
    if scale:
        header += list(scale)
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
          f"{f' rope scaled x{scale[0]}' if scale else ''}, {'tied' if tied else 'lm_head apart'}, "
          f"{n / 1e6:.2f}M parameters in {'fp32' if a.fp32 else 'bf16'}")


if __name__ == "__main__":
    main()
