"""
gpt2_torch.py — an independent GPT-2 and Llama in PyTorch, and llm.c model/shard/eval file helpers,
for the reference checks. It shares no code with the C++ model: if both agree, both are right.

The models are written with plain torch ops (F.layer_norm, matmuls, an explicit causal softmax,
GELU tanh; Llama: RMSNorm written out, RoPE as a complex multiplication, SwiGLU, each key/value
head repeated for its query heads) over a dict of tensors named like the model file's, in its
tensor-major order. A config with arch="llama" (and NKV, H, theta; tied=False: a classifier of
its own, lm_head) is a Llama (llmc/checkpoint.h).
"""
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

GPT2_MAGIC, LLAMA_MAGIC = 20240326, 20261124


def is_llama(cfg):
    return cfg.get("arch") == "llama"


def shapes(cfg):
    """The model file's tensors in order, with their shapes."""
    maxT, Vp, L, NH, C = cfg["maxT"], cfg["Vp"], cfg["L"], cfg["NH"], cfg["C"]
    if is_llama(cfg):
        hd, NKV, H = C // NH, cfg["NKV"], cfg["H"]
        s = {"wte": (Vp, C), "ln1w": (L, C), "qkvw": (L, (NH + 2 * NKV) * hd, C), "attprojw": (L, C, C),
             "ln2w": (L, C), "fcw": (L, 2 * H, C), "fcprojw": (L, C, H), "lnfw": (C,)}
        if not cfg.get("tied", True):
            s["lm_head"] = (Vp, C)
        return s
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}


def random_params(cfg, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    p = {}
    for name, shp in shapes(cfg).items():
        if name.endswith("w") and name.startswith("ln"):
            p[name] = 1.0 + 0.1 * torch.randn(shp, generator=g, dtype=dtype)
        else:
            p[name] = 0.05 * torch.randn(shp, generator=g, dtype=dtype)
    p["wte"][cfg["V"]:] = 0.0  # padding rows
    if "lm_head" in p:
        p["lm_head"][cfg["V"]:] = 0.0
    return p


def write_model(path, cfg, params, version=3):
    header = [LLAMA_MAGIC if is_llama(cfg) else GPT2_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    if is_llama(cfg):
        header += [cfg["NKV"], cfg["H"], cfg["theta"], 0 if cfg.get("tied", True) else 1]
    header += [0] * (256 - len(header))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name in shapes(cfg):
            a = params[name].detach().to(torch.float32).contiguous()
            if version == 5:
                a = a.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2")
            else:
                a = a.numpy().astype("<f4")
            f.write(a.tobytes())


def read_model(path):
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        assert h[0] in (GPT2_MAGIC, LLAMA_MAGIC) and h[1] == 3, h[:2]
        cfg = dict(maxT=h[2], V=h[3], L=h[4], NH=h[5], C=h[6], Vp=h[7])
        if h[0] == LLAMA_MAGIC:
            cfg.update(arch="llama", NKV=h[8], H=h[9], theta=h[10], tied=h[11] == 0)
        p = {}
        for name, shp in shapes(cfg).items():
            n = int(np.prod(shp))
            p[name] = torch.from_numpy(np.frombuffer(f.read(4 * n), dtype="<f4").copy()).reshape(shp)
        assert f.read() == b""
    return cfg, p


def read_shard(path):
    """llm.c's token shard: a header of 256 int32 (magic 20240520, version 1, token count), uint16 tokens."""
    header = np.fromfile(path, dtype="<i4", count=256)
    if len(header) < 3 or header[0] != 20240520 or header[1] != 1:
        raise ValueError(f"{path} is not a token shard (its header begins {header[:2].tolist()})")
    return np.fromfile(path, dtype="<u2", offset=256 * 4, count=int(header[2]))


def write_shard(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def write_eval(path, examples):
    """llm.c's multiple-choice eval file (hellaswag_val.bin): examples are (label, context, endings)."""
    stream, longest = [], 0
    for i, (label, ctx, endings) in enumerate(examples):
        ex = [65535, 0, i, label, len(endings), len(ctx)] + list(ctx)
        for e in endings:
            ex += [len(e)] + list(e)
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        stream += ex
    header = [20240522, 1, len(examples), longest] + [0] * 252
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(stream, dtype="<u2").tobytes())


def llama_logits(p, cfg, idx):
    """Llama's logits for idx (B, T): pre-RMSNorm blocks, RoPE on q and k (Meta's layout: pairs
    (x[2i], x[2i+1]) are complex numbers turned by t·theta^(-2i/hd)), grouped-query attention,
    SwiGLU (fcw's rows: the gate's H, then the up projection's), no biases, the classifier wte
    (tied) or lm_head."""
    B, T = idx.shape
    C, NH, L, V, NKV, H = cfg["C"], cfg["NH"], cfg["L"], cfg["V"], cfg["NKV"], cfg["H"]
    hd = C // NH

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    freqs = cfg["theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    turns = torch.polar(torch.ones(T, hd // 2, dtype=torch.float64), torch.outer(torch.arange(T, dtype=torch.float64), freqs))

    def rope(x):  # (B, T, heads, hd)
        z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], hd // 2, 2).contiguous())
        return torch.view_as_real(z * turns[None, :, None, :]).reshape(x.shape).to(x.dtype)

    x = p["wte"][idx]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(L):
        h = rmsnorm(x, p["ln1w"][l])
        q, k, v = (h @ p["qkvw"][l].T).split([NH * hd, NKV * hd, NKV * hd], dim=-1)
        q, k = rope(q.view(B, T, NH, hd)), rope(k.view(B, T, NKV, hd))
        v = v.view(B, T, NKV, hd)
        k, v = (t.repeat_interleave(NH // NKV, dim=2) for t in (k, v))  # kv head j serves query heads j·G … j·G+G-1
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T
        gate, up = (rmsnorm(x, p["ln2w"][l]) @ p["fcw"][l].T).split(H, dim=-1)
        x = x + (F.silu(gate) * up) @ p["fcprojw"][l].T
    return rmsnorm(x, p["lnfw"]) @ p["lm_head" if "lm_head" in p else "wte"][:V].T


def forward(p, cfg, idx, targets, reduction="mean"):
    """Cross-entropy of GPT-2 (or Llama) on idx (B, T) against targets (B, T): the mean, or with
    reduction="none" each position's, (B, T)."""
    B, T = idx.shape
    if is_llama(cfg):
        V = cfg["V"]
        losses = F.cross_entropy(llama_logits(p, cfg, idx).reshape(-1, V), targets.reshape(-1), reduction=reduction)
        return losses if reduction == "mean" else losses.view(B, T)
    C, NH, L, V = cfg["C"], cfg["NH"], cfg["L"], cfg["V"]
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"][:V].T
    losses = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction=reduction)
    return losses if reduction == "mean" else losses.view(B, T)


def lr_at(step, lr, warmup, total, kind, final_frac, cooldown=0.2):
    """The schedule of llmc/schedulers.h, written again from its formula."""
    if step < warmup:
        return lr * (step + 1) / warmup
    lo = lr * final_frac
    p = (step - warmup) / (total - warmup) if total > warmup else 0.0
    if kind == "cosine":
        return lo + 0.5 * (1 + math.cos(math.pi * p)) * (lr - lo)
    if kind == "linear":
        return lr - p * (lr - lo)
    if kind == "wsd":
        return lr if p < 1 - cooldown else lr - (p - (1 - cooldown)) / cooldown * (lr - lo)
    return lr
