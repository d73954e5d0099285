#!/usr/bin/env python3
"""
model_to_hf.py — a model file of this trainer (--save-model, llm.c's GPT-2 format or ours for
Llama) as a Hugging Face model folder: config.json and model.safetensors, which transformers'
AutoModelForCausalLM.from_pretrained(OUTDIR) loads (GPT2LMHeadModel or LlamaForCausalLM), so a
trained model can be sampled, fine-tuned or scored by tools built on it (lm-evaluation-harness).
The reverse of dev/data/gpt2_weights.py and dev/data/llama3_to_model.py. numpy only.

  python3 dev/data/model_to_hf.py mine.bin hf/mine         (train_gpt --save-model mine.bin)
  python3 dev/data/model_to_hf.py runs/mine hf/mine        (--output-dir: its newest checkpoint's model.bin)
  python3 -c "from transformers import AutoModelForCausalLM as M; M.from_pretrained('hf/mine')"

The tensors keep the file's precision (fp32 -> F32, bf16 -> BF16, bit for bit). The padding rows
go; GPT-2's linear layers are transposed into Conv1D's (in, out); a Llama's q and k rows are
permuted into rotate_half's pair order. A model of GPT-2's 50257 tokens also gets GPT-2's BPE
files (vocab.json, merges.txt) from data/gpt2_tokenizer.bin (--tokenizer another file; none:
no tokenizer files). What changes, name by name: docs/formats.md ("Converting").

Test: test/test_hf_export.py (random GPT-2 and Llama files, fp32 and bf16, tied and untied:
the names and shapes transformers expects, a forward written as Hugging Face's models compute
over the exported tensors against train_gpt's loss, and back through gpt2_weights.py and
llama3_to_model.py to the same bytes; the tokenizer files against OpenAI's files).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer import bytes_to_unicode  # noqa: E402  (GPT-2's character -> byte table)

GPT2_MAGIC, LLAMA_MAGIC = 20240326, 20261124


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_model(path):
    """(header as a dict, {our tensor name: array of '<f4' or '<u2' (bf16 bits)}, dtype name) of a model file."""
    if not os.path.isfile(path):
        fail(f"'{path}': no such model file")
    size = os.path.getsize(path)
    h = np.fromfile(path, dtype="<i4", count=256)
    if len(h) < 256 or h[0] not in (GPT2_MAGIC, LLAMA_MAGIC):
        fail(f"'{path}' is not a model file (its first int32 is {h[0] if len(h) else 'missing'}, "
             f"expected {GPT2_MAGIC} for GPT-2 or {LLAMA_MAGIC} for Llama)")
    if h[1] not in (3, 5):
        fail(f"'{path}': model file version {h[1]} is not supported (3 = fp32, 5 = bf16)")
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    cfg = dict(llama=h[0] == LLAMA_MAGIC, maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    if cfg["llama"]:
        NKV, H, theta, untied = (int(v) for v in h[8:12])
        cfg.update(NKV=NKV, H=H, theta=theta, untied=untied == 1, scaling=tuple(int(v) for v in h[12:16]) if h[12] else None)
        hd = C // NH
        shapes = {"wte": (Vp, C), "ln1w": (L, C), "qkvw": (L, (NH + 2 * NKV) * hd, C), "attprojw": (L, C, NH * hd),
                  "ln2w": (L, C), "fcw": (L, 2 * H, C), "fcprojw": (L, C, H), "lnfw": (C,)}
        if cfg["untied"]:
            shapes["lm_head"] = (Vp, C)
    else:
        shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
                  "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
                  "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
                  "lnfw": (C,), "lnfb": (C,)}
    dtype = "<f4" if h[1] == 3 else "<u2"
    width = np.dtype(dtype).itemsize
    want = 1024 + width * sum(int(np.prod(s)) for s in shapes.values())
    if size != want:
        fail(f"'{path}': {size} bytes, but its header ({'Llama' if cfg['llama'] else 'GPT-2'} L={L} C={C} NH={NH} "
             f"Vp={Vp}, {'fp32' if h[1] == 3 else 'bf16'}) needs {want}")
    data = np.memmap(path, dtype=dtype, mode="r", offset=1024)
    tensors, at = {}, 0
    for name, s in shapes.items():
        n = int(np.prod(s))
        tensors[name] = np.asarray(data[at:at + n]).reshape(s)
        at += n
    return cfg, tensors, "F32" if h[1] == 3 else "BF16"


def gpt2_tensors(cfg, t):
    """{Hugging Face GPT2LMHeadModel name: array}."""
    V, L = cfg["V"], cfg["L"]
    out = {"transformer.wte.weight": t["wte"][:V], "transformer.wpe.weight": t["wpe"]}
    conv1d = {"qkvw": "attn.c_attn.weight", "attprojw": "attn.c_proj.weight", "fcw": "mlp.c_fc.weight", "fcprojw": "mlp.c_proj.weight"}
    plain = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvb": "attn.c_attn.bias", "attprojb": "attn.c_proj.bias",
             "ln2w": "ln_2.weight", "ln2b": "ln_2.bias", "fcb": "mlp.c_fc.bias", "fcprojb": "mlp.c_proj.bias"}
    for l in range(L):
        for ours, theirs in plain.items():
            out[f"transformer.h.{l}.{theirs}"] = t[ours][l]
        for ours, theirs in conv1d.items():
            out[f"transformer.h.{l}.{theirs}"] = t[ours][l].T  # (out, in) -> Conv1D's (in, out)
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = t["lnfw"], t["lnfb"]
    return out


def gpt2_config(cfg, dtype):
    V = cfg["V"]
    eos = 50256 if V > 50256 else None  # GPT-2's <|endoftext|>, where the vocabulary is GPT-2's
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": cfg["maxT"],
            "n_ctx": cfg["maxT"], "n_embd": cfg["C"], "n_layer": cfg["L"], "n_head": cfg["NH"], "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0, "initializer_range": 0.02, "scale_attn_weights": True, "tie_word_embeddings": True,
            "bos_token_id": eos, "eos_token_id": eos, "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}


def rotate_half_order(w, heads, hd):
    """q or k rows from Meta's pairs (2i, 2i+1) to Hugging Face's (i, i + hd/2): its row h·hd + j·hd/2 + i is our h·hd + 2i + j."""
    return w.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(heads * hd, -1)


def llama_tensors(cfg, t):
    """{Hugging Face LlamaForCausalLM name: array}."""
    V, L, NH, NKV, H, C = cfg["V"], cfg["L"], cfg["NH"], cfg["NKV"], cfg["H"], cfg["C"]
    hd = C // NH
    out = {"model.embed_tokens.weight": t["wte"][:V]}
    for l in range(L):
        p = f"model.layers.{l}."
        qkv = t["qkvw"][l]
        q, k, v = qkv[:NH * hd], qkv[NH * hd:(NH + NKV) * hd], qkv[(NH + NKV) * hd:]
        out[p + "input_layernorm.weight"] = t["ln1w"][l]
        out[p + "self_attn.q_proj.weight"] = rotate_half_order(q, NH, hd)
        out[p + "self_attn.k_proj.weight"] = rotate_half_order(k, NKV, hd)
        out[p + "self_attn.v_proj.weight"] = v
        out[p + "self_attn.o_proj.weight"] = t["attprojw"][l]
        out[p + "post_attention_layernorm.weight"] = t["ln2w"][l]
        out[p + "mlp.gate_proj.weight"] = t["fcw"][l][:H]
        out[p + "mlp.up_proj.weight"] = t["fcw"][l][H:]
        out[p + "mlp.down_proj.weight"] = t["fcprojw"][l]
    out["model.norm.weight"] = t["lnfw"]
    if cfg["untied"]:
        out["lm_head.weight"] = t["lm_head"][:V]
    return out


def llama_config(cfg, dtype):
    V = cfg["V"]
    if V >= 128256:     # Llama 3's vocabulary: <|begin_of_text|>, <|end_of_text|>
        bos, eos = 128000, 128001
    elif V > 50256:     # GPT-2's (llama:dN's default)
        bos = eos = 50256
    else:
        bos = eos = None
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": cfg["C"],
         "intermediate_size": cfg["H"], "num_hidden_layers": cfg["L"], "num_attention_heads": cfg["NH"],
         "num_key_value_heads": cfg["NKV"], "head_dim": cfg["C"] // cfg["NH"], "hidden_act": "silu",
         "max_position_embeddings": cfg["maxT"], "rms_norm_eps": 1e-5, "rope_theta": float(cfg["theta"]),
         "rope_scaling": None, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": not cfg["untied"],
         "initializer_range": 0.02, "bos_token_id": bos, "eos_token_id": eos,
         "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}
    if cfg["scaling"]:
        s, lo, hi, n0 = cfg["scaling"]
        c["rope_scaling"] = {"rope_type": "llama3", "factor": float(s), "low_freq_factor": float(lo),
                             "high_freq_factor": float(hi), "original_max_position_embeddings": n0}
    return c


def write_gpt2_tokenizer(path, out_dir, V, maxT):
    """vocab.json, merges.txt, tokenizer_config.json from a tokenizer file with merges (header [20240328, 2, V, eot, merges])."""
    with open(path, "rb") as f:
        data = f.read()
    h = np.frombuffer(data[:1024], dtype="<i4") if len(data) >= 1024 else None
    if h is None or h[0] != 20240328:
        fail(f"--tokenizer '{path}' is not a tokenizer file (llmc/tokenizer.h: magic 20240328)")
    if h[2] != V:
        fail(f"--tokenizer '{path}' has {h[2]} tokens, the model {V} (--tokenizer none writes no tokenizer files)")
    if h[1] != 2 or h[4] <= 0:
        fail(f"--tokenizer '{path}' has no merges (a decode-only file); make one with dev/data/make_tokenizer.py")
    tokens, at = [], 1024
    for _ in range(V):
        n = data[at]
        tokens.append(data[at + 1:at + 1 + n])
        at += 1 + n
    pairs = np.frombuffer(data[at:at + 8 * int(h[4])], dtype="<i4").reshape(-1, 2)
    u = {b: ch for ch, b in bytes_to_unicode().items()}  # (GPT-2's byte -> printable character: vocab.json's alphabet)
    text = ["".join(u[b] for b in t) for t in tokens]
    eot = text[int(h[3])]
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(text)}, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{text[a]} {text[b]}\n" for a, b in pairs))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": maxT, "bos_token": eot, "eos_token": eot,
                   "unk_token": eot, "add_prefix_space": False}, f, indent=2)
        f.write("\n")
    return len(pairs)


def write_safetensors(path, tensors, dtype):
    """safetensors: an 8-byte little-endian header length n, n bytes of JSON {name: {dtype, shape,
    data_offsets}} (padded with spaces to a multiple of 8, so the data is aligned), then the data."""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors.items():
        n = a.size * a.itemsize
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description="A model file (GPT-2 or Llama) as a Hugging Face model folder: config.json, model.safetensors")
    ap.add_argument("model", help="a model file (train_gpt --save-model's, llm.c's GPT-2, a Llama model file), a checkpoint "
                                  "folder, or an --output-dir (its newest checkpoint)")
    ap.add_argument("out_dir", help="the folder to write config.json and model.safetensors into (made if missing)")
    ap.add_argument("--tokenizer", default=None,
                    help="GPT-2's BPE files from this tokenizer file (default: data/gpt2_tokenizer.bin where the model has "
                         "GPT-2's 50257 tokens); none: no tokenizer files")
    a = ap.parse_args()
    if os.path.isdir(a.model):  # a checkpoint (step_N/), or an --output-dir: its newest checkpoint's model
        steps = sorted(d for d in os.listdir(a.model) if d.startswith("step_") and not d.endswith(".tmp"))
        inner = os.path.join(a.model, "model.bin") if os.path.isfile(os.path.join(a.model, "model.bin")) else \
            os.path.join(a.model, steps[-1], "model.bin") if steps else None
        if inner is None:
            fail(f"'{a.model}' is a folder with neither model.bin nor checkpoints (step_*/)")
        print(f"exporting {inner}")
        a.model = inner
    cfg, t, dtype = read_model(a.model)
    tok = a.tokenizer
    if tok is None:
        shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "gpt2_tokenizer.bin")
        tok = shipped if cfg["V"] == 50257 and os.path.isfile(shipped) else "none"
    elif tok != "none" and not os.path.isfile(tok):
        fail(f"--tokenizer '{tok}': no such file")
    if os.path.exists(a.out_dir) and not os.path.isdir(a.out_dir):
        fail(f"'{a.out_dir}' exists and is not a folder")
    os.makedirs(a.out_dir, exist_ok=True)
    if tok != "none":
        merges = write_gpt2_tokenizer(tok, a.out_dir, cfg["V"], cfg["maxT"])
        print(f"wrote {a.out_dir}/vocab.json, merges.txt, tokenizer_config.json: GPT-2's BPE, {merges} merges (from {os.path.normpath(tok)})")
    tensors = llama_tensors(cfg, t) if cfg["llama"] else gpt2_tensors(cfg, t)
    config = llama_config(cfg, dtype) if cfg["llama"] else gpt2_config(cfg, dtype)
    write_safetensors(os.path.join(a.out_dir, "model.safetensors"), tensors, dtype)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    n = sum(v.size for v in tensors.values())
    kind = "LlamaForCausalLM" if cfg["llama"] else "GPT2LMHeadModel"
    print(f"wrote {a.out_dir}/config.json and model.safetensors: {kind} L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']}, "
          f"{n / 1e6:.2f}M parameters in {'fp32' if dtype == 'F32' else 'bf16'}")


if __name__ == "__main__":
    main()
