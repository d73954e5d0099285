#!/usr/bin/env python3
"""
test_llama_convert.py — dev/data/llama3_to_model.py against forwards written the way Meta's
reference Llama 3 model computes (llama-models' model.py: complex RoPE over channel pairs with
Llama 3.1's frequency scaling, grouped-query attention by repeating k and v, RMSNorm, SwiGLU)
and the way Hugging Face's LlamaForCausalLM does (rotate_half: pair i is channels i and
i + hd/2, so its q and k rows are in another order, which the converter puts back).

Small random checkpoints in Meta's layout (params.json, consolidated.00.pth, bf16 weights as
Meta ships them) are converted and given to train_gpt --model with --steps 0; its validation
loss (fp32) must be the float64 reference's over the same sequences within 1e-5 (a mean of fp32
losses through two small layers: ~1e-6 off). Cases: untied with scaled RoPE (factor 4, original
context 32, so that at T = 64 the scaling moves most pairs: a file without it is checked to be
off by more than 1e-3), tied (output.weight = tok_embeddings: no lm_head in the file) without
scaling; the bf16 and --fp32 files of one checkpoint give the same loss bit for bit (Meta's
weights are bf16, so both hold them exactly); a model train_gpt saves keeps the scaling. Bad input: use_scaled_rope without --rope-scale,
another norm_eps, a missing tensor are refused in one line (exit 2). Hugging Face's layout: a
random checkpoint in two safetensors files with config.json's rope_scaling (llama3, factor 4,
original context 32), untied, against its own forward within 1e-5; the same with the config.json
transformers 5 writes (θ and the scaling in rope_parameters) gives the same file.

usage: python3 test/test_llama_convert.py TRAIN_GPT   (prints ok / not ok lines)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402  (write_shard)

CONVERT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dev", "data", "llama3_to_model.py")
results = []


def check(ok, name, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + f" - llama convert: {name}" + (f" ({detail})" if detail else ""))
    return ok


META_NAMES = {"emb": "tok_embeddings", "norm": "norm", "out": "output", "ln1": "attention_norm", "ln2": "ffn_norm",
              "wq": "attention.wq", "wk": "attention.wk", "wv": "attention.wv", "wo": "attention.wo",
              "gate": "feed_forward.w1", "up": "feed_forward.w3", "down": "feed_forward.w2"}
HF_NAMES = {"emb": "model.embed_tokens", "norm": "model.norm", "out": "lm_head", "ln1": "input_layernorm",
            "ln2": "post_attention_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
            "wo": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def random_llama(params, seed, names, layer_prefix, tied=False):
    """A random Llama's bf16 tensors under a layout's names (layer tensors: layer_prefix.format(l) + name)."""
    g = torch.Generator().manual_seed(seed)
    C, L, NH, V = params["dim"], params["n_layers"], params["n_heads"], params["vocab_size"]
    NKV, hd, H = params["n_kv_heads"], params["dim"] // params["n_heads"], params["hidden"]
    r = lambda *s, std=0.08: (torch.randn(*s, generator=g) * std).to(torch.bfloat16)
    one = lambda: (1 + r(C, std=0.1).float()).to(torch.bfloat16)
    sd = {names["emb"] + ".weight": r(V, C, std=0.5), names["norm"] + ".weight": one()}
    shapes = {"ln1": None, "ln2": None, "wq": ((NH * hd, C), 0.3), "wk": ((NKV * hd, C), 0.3), "wv": ((NKV * hd, C), 0.08),
              "wo": ((C, NH * hd), 0.08), "gate": ((H, C), 0.08), "up": ((H, C), 0.08), "down": ((C, H), 0.08)}
    for l in range(L):
        for role, shape in shapes.items():
            sd[layer_prefix.format(l) + names[role] + ".weight"] = one() if shape is None else r(*shape[0], std=shape[1])
    sd[names["out"] + ".weight"] = sd[names["emb"] + ".weight"].clone() if tied else r(V, C)
    return sd


def make_checkpoint(folder, params, tied, seed):
    """A random Llama in Meta's layout: bf16 tensors named as consolidated.00.pth names them."""
    os.makedirs(folder, exist_ok=True)
    sd = random_llama(params, seed, META_NAMES, "layers.{}.", tied)
    torch.save(sd, os.path.join(folder, "consolidated.00.pth"))
    meta = {k: v for k, v in params.items() if k != "hidden"}
    json.dump(meta, open(os.path.join(folder, "params.json"), "w"))
    return {k: v.double() for k, v in sd.items()}


# ---- the reference: Meta's model.py computations, in float64

def apply_scaling(freqs, factor, low, high, original):
    low_wavelen, high_wavelen = original / low, original / high
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=freqs.dtype)


def freqs_cis(hd, T, theta, scaling):
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64)[: hd // 2] / hd))
    if scaling:
        freqs = apply_scaling(freqs, *scaling)
    t = torch.arange(T, dtype=torch.float64)
    return torch.polar(torch.ones(T, hd // 2, dtype=torch.float64), torch.outer(t, freqs))


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotary(x, fc):  # x: (B, T, heads, hd); channel pairs (2i, 2i+1) as complex numbers
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * fc[None, :, None, :]).flatten(3)


def meta_forward(sd, params, tokens, scaling):
    C, L, NH, NKV = params["dim"], params["n_layers"], params["n_heads"], params["n_kv_heads"]
    hd = C // NH
    B, T = tokens.shape
    fc = freqs_cis(hd, T, params["rope_theta"], scaling)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    h = sd["tok_embeddings.weight"][tokens]
    for l in range(L):
        p = lambda n: sd[f"layers.{l}.{n}.weight"]
        x = rms_norm(h, p("attention_norm"))
        q = (x @ p("attention.wq").T).view(B, T, NH, hd)
        k = (x @ p("attention.wk").T).view(B, T, NKV, hd)
        v = (x @ p("attention.wv").T).view(B, T, NKV, hd)
        q, k = rotary(q, fc), rotary(k, fc)
        k, v = (t.repeat_interleave(NH // NKV, dim=2) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1)
        h = h + (att @ v).transpose(1, 2).reshape(B, T, C) @ p("attention.wo").T
        x = rms_norm(h, p("ffn_norm"))
        h = h + (torch.nn.functional.silu(x @ p("feed_forward.w1").T) * (x @ p("feed_forward.w3").T)) @ p("feed_forward.w2").T
    return rms_norm(h, sd["norm.weight"]) @ sd["output.weight"].T


def make_hf_checkpoint(folder, params, scaling, seed):
    """A random Llama in Hugging Face's layout: config.json and two safetensors files of BF16 tensors."""
    os.makedirs(folder, exist_ok=True)
    C, L, NH, V = params["dim"], params["n_layers"], params["n_heads"], params["vocab_size"]
    NKV, H = params["n_kv_heads"], params["hidden"]
    sd = random_llama(params, seed, HF_NAMES, "model.layers.{}.")
    names = list(sd)
    for k, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        header, blob = {"__metadata__": {"format": "pt"}}, b""
        for n in part:
            data = sd[n].contiguous().view(torch.int16).numpy().tobytes()
            header[n] = {"dtype": "BF16", "shape": list(sd[n].shape), "data_offsets": [len(blob), len(blob) + len(data)]}
            blob += data
        h = json.dumps(header).encode()
        with open(os.path.join(folder, f"model-0000{k + 1}-of-00002.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + blob)
    config = {"hidden_size": C, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
              "vocab_size": V, "intermediate_size": H, "rms_norm_eps": 1e-5, "rope_theta": params["rope_theta"],
              "tie_word_embeddings": False, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": float(scaling[0]), "low_freq_factor": float(scaling[1]),
                               "high_freq_factor": float(scaling[2]), "original_max_position_embeddings": scaling[3]}}
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    return {k: v.double() for k, v in sd.items()}


def hf_forward(sd, params, tokens, scaling):
    """Hugging Face's LlamaForCausalLM computations, in float64: RoPE by rotate_half (pair i is channels i, i + hd/2)."""
    C, L, NH, NKV = params["dim"], params["n_layers"], params["n_heads"], params["n_kv_heads"]
    hd = C // NH
    B, T = tokens.shape
    inv_freq = 1.0 / (params["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    inv_freq = apply_scaling(inv_freq, *scaling)
    emb = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq).repeat(1, 2)  # [freqs, freqs]
    cos, sin = emb.cos(), emb.sin()
    rotate_half = lambda x: torch.cat([-x[..., hd // 2:], x[..., : hd // 2]], dim=-1)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    h = sd["model.embed_tokens.weight"][tokens]
    for l in range(L):
        p = lambda n: sd[f"model.layers.{l}.{n}.weight"]
        x = rms_norm(h, p("input_layernorm"))
        q = (x @ p("self_attn.q_proj").T).view(B, T, NH, hd).transpose(1, 2)
        k = (x @ p("self_attn.k_proj").T).view(B, T, NKV, hd).transpose(1, 2)
        v = (x @ p("self_attn.v_proj").T).view(B, T, NKV, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(NH // NKV, dim=1) for t in (k, v))
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1)
        h = h + (att @ v).transpose(1, 2).reshape(B, T, C) @ p("self_attn.o_proj").T
        x = rms_norm(h, p("post_attention_layernorm"))
        h = h + (torch.nn.functional.silu(x @ p("mlp.gate_proj").T) * (x @ p("mlp.up_proj").T)) @ p("mlp.down_proj").T
    return rms_norm(h, sd["model.norm.weight"]) @ sd["lm_head.weight"].T


def convert(folder, out, *extra):
    return subprocess.run([sys.executable, CONVERT, folder, out, *extra], capture_output=True, text=True)


def our_loss(binary, model, shard, tmp, T, nseq):
    log = os.path.join(tmp, "val.jsonl")
    if os.path.exists(log):
        os.remove(log)
    r = subprocess.run([binary, "--device", os.environ.get("DEVICE", "cpu"), "--precision", "fp32", "--model", model,
                        "--train-data", shard, "--val-data", shard, "--val-tokens", str(T * nseq), "--batch-size", "2",
                        "--seq-len", str(T), "--steps", "0", "--log-file", log], capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip() or r.stdout.strip())[-300:]
    return json.loads(open(log).read()).get("val_loss"), r.stdout


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp()
    T, nseq = 64, 4
    base = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300, multiple_of=32, norm_eps=1e-5,
                rope_theta=500000.0, hidden=96)
    g = torch.Generator().manual_seed(11)
    toks = torch.randint(0, base["vocab_size"], (T * nseq + 1,), generator=g)
    shard = os.path.join(tmp, "toks.bin")
    ref.write_shard(shard, toks.tolist())
    x = torch.stack([toks[T * q:T * q + T] for q in range(nseq)])
    y = torch.stack([toks[T * q + 1:T * q + T + 1] for q in range(nseq)])

    def exact(sd, params, scaling):
        logits = meta_forward(sd, params, x, scaling)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()

    # untied, Llama 3.1-style scaled RoPE (factor 4, low 1, high 4, original context 32)
    scaled = dict(base, use_scaled_rope=True)
    sd = make_checkpoint(os.path.join(tmp, "scaled"), scaled, tied=False, seed=1)
    r = convert(os.path.join(tmp, "scaled"), os.path.join(tmp, "scaled.bin"), "--rope-scale", "4", "--rope-original-context", "32")
    if check(r.returncode == 0, "converts an untied checkpoint with use_scaled_rope", r.stderr.strip()):
        h = struct.unpack("<16i", open(os.path.join(tmp, "scaled.bin"), "rb").read(64))
        check(list(h[:16]) == [20261124, 5, 8192, 300, 2, 4, 64, 384, 2, 96, 500000, 1, 4, 1, 4, 32],
              "header [magic, bf16, maxT, V, L, NH, C, Vp, NKV, H, theta, untied, scale, low, high, context]", str(list(h)))
        ours, out = our_loss(binary, os.path.join(tmp, "scaled.bin"), shard, tmp, T, nseq)
        want = exact(sd, scaled, (4, 1, 4, 32))
        unscaled = exact(sd, scaled, None)
        check(ours is not None and abs(ours - want) <= 1e-5,
              "untied, RoPE scaled x4: train_gpt's loss within 1e-5 of Meta's forward (float64)", f"{ours} vs {want:.7f}; {out if ours is None else ''}")
        check(abs(unscaled - want) > 1e-3, "the scaling matters here: without it Meta's forward is more than 1e-3 off",
              f"{unscaled:.6f} vs {want:.6f}")
        saved = os.path.join(tmp, "saved.bin")  # the trainer's own file of it keeps the scaling
        r = subprocess.run([binary, "--model", os.path.join(tmp, "scaled.bin"), "--train-data", shard, "--val-data", "",
                            "--batch-size", "2", "--seq-len", "32", "--steps", "1", "--save-model", saved], capture_output=True, text=True)
        hs = struct.unpack("<16i", open(saved, "rb").read(64)) if r.returncode == 0 and os.path.exists(saved) else None
        check(hs is not None and hs[8:16] == h[8:16], "train_gpt --save-model after a step writes the same Llama header (the scaling kept)",
              str(hs[8:16] if hs else r.stderr.strip()[-200:]))
        r = convert(os.path.join(tmp, "scaled"), os.path.join(tmp, "scaled32.bin"), "--rope-scale", "4", "--rope-original-context", "32", "--fp32")
        ours32, _ = our_loss(binary, os.path.join(tmp, "scaled32.bin"), shard, tmp, T, nseq)
        check(r.returncode == 0 and ours32 is not None and ours32 == ours, "--fp32 file: the same loss bit for bit as the bf16 one",
              f"{ours32} vs {ours}")

    # tied (output.weight is tok_embeddings), no scaling (Llama 3.0)
    sd = make_checkpoint(os.path.join(tmp, "tied"), base, tied=True, seed=2)
    r = convert(os.path.join(tmp, "tied"), os.path.join(tmp, "tied.bin"))
    if check(r.returncode == 0, "converts a tied checkpoint", r.stderr.strip()):
        size = os.path.getsize(os.path.join(tmp, "tied.bin"))
        C, L, H, Vp, Q = 64, 2, 96, 384, (4 + 2 * 2) * 16
        psi = Vp * C + L * (C + Q * C + C * C + C + 2 * H * C + C * H) + C
        h = struct.unpack("<16i", open(os.path.join(tmp, "tied.bin"), "rb").read(64))
        check(h[11] == 0 and h[12] == 0 and size == 1024 + 2 * psi, "tied: untied flag 0, no scaling, no lm_head in the file",
              f"header {list(h[8:16])}, {size} bytes vs {1024 + 2 * psi}")
        ours, out = our_loss(binary, os.path.join(tmp, "tied.bin"), shard, tmp, T, nseq)
        want = exact(sd, base, None)
        check(ours is not None and abs(ours - want) <= 1e-5, "tied, no scaling: train_gpt's loss within 1e-5 of Meta's forward (float64)",
              f"{ours} vs {want:.7f}; {out if ours is None else ''}")

    # Hugging Face's layout (config.json's rope_scaling; two safetensors files)
    sd = make_hf_checkpoint(os.path.join(tmp, "hf"), base, (4, 1, 4, 32), seed=4)
    r = convert(os.path.join(tmp, "hf"), os.path.join(tmp, "hf.bin"))
    if check(r.returncode == 0, "converts Hugging Face's layout (two safetensors files)", r.stderr.strip()):
        h = struct.unpack("<16i", open(os.path.join(tmp, "hf.bin"), "rb").read(64))
        check(list(h[8:16]) == [2, 96, 500000, 1, 4, 1, 4, 32], "its header: NKV, H, theta, untied and config.json's scaling",
              str(list(h[8:16])))
        ours, out = our_loss(binary, os.path.join(tmp, "hf.bin"), shard, tmp, T, nseq)
        logits = hf_forward(sd, base, x, (4, 1, 4, 32))
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        check(ours is not None and abs(ours - want) <= 1e-5,
              "Hugging Face's layout: train_gpt's loss within 1e-5 of LlamaForCausalLM's forward (float64, rotate_half)",
              f"{ours} vs {want:.7f}; {out if ours is None else ''}")

        # the same checkpoint with the config.json transformers 5 writes: θ and the scaling in rope_parameters
        os.makedirs(os.path.join(tmp, "hf5"), exist_ok=True)
        for f in os.listdir(os.path.join(tmp, "hf")):
            if f.endswith(".safetensors"):
                os.link(os.path.join(tmp, "hf", f), os.path.join(tmp, "hf5", f))
        c = json.load(open(os.path.join(tmp, "hf", "config.json")))
        c["rope_parameters"] = dict(c.pop("rope_scaling"), rope_theta=c.pop("rope_theta"))
        json.dump(c, open(os.path.join(tmp, "hf5", "config.json"), "w"))
        r = convert(os.path.join(tmp, "hf5"), os.path.join(tmp, "hf5.bin"))
        check(r.returncode == 0 and open(os.path.join(tmp, "hf5.bin"), "rb").read() == open(os.path.join(tmp, "hf.bin"), "rb").read(),
              "transformers 5's config.json (rope_parameters: theta and the scaling): the same model file", r.stderr.strip())

    # bad input: one line, exit 2, saying what to do
    r = convert(os.path.join(tmp, "scaled"), os.path.join(tmp, "x.bin"))
    check(r.returncode == 2 and "--rope-scale" in r.stderr and r.stderr.count("\n") == 1,
          "use_scaled_rope without --rope-scale is refused in one line", r.stderr.strip())
    bad = dict(base, norm_eps=1e-6)
    make_checkpoint(os.path.join(tmp, "eps"), bad, tied=True, seed=3)
    r = convert(os.path.join(tmp, "eps"), os.path.join(tmp, "x.bin"))
    check(r.returncode == 2 and "norm_eps" in r.stderr, "another norm_eps is refused", r.stderr.strip())
    sd = torch.load(os.path.join(tmp, "tied", "consolidated.00.pth"), weights_only=True)
    del sd["layers.1.feed_forward.w3.weight"]
    os.makedirs(os.path.join(tmp, "missing"), exist_ok=True)
    torch.save(sd, os.path.join(tmp, "missing", "consolidated.00.pth"))
    json.dump({k: v for k, v in base.items() if k != "hidden"}, open(os.path.join(tmp, "missing", "params.json"), "w"))
    r = convert(os.path.join(tmp, "missing"), os.path.join(tmp, "x.bin"))
    check(r.returncode == 2 and "layers.1.feed_forward.w3.weight" in r.stderr and not os.path.exists(os.path.join(tmp, "x.bin")),
          "a missing tensor is named, no file written", r.stderr.strip())
    print(f"# test_llama_convert: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
