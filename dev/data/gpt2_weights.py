"""
gpt2_weights.py — OpenAI's GPT-2 (124M, 350M, 774M, 1558M) as llm.c model files, from the
Hugging Face hub's model.safetensors, with nothing but numpy (no torch, transformers or
safetensors package): data/gpt2_124M.bin etc., the files llm.c's train_gpt2.py writes.

usage: python3 dev/data/gpt2_weights.py [124M|350M|774M|1558M] [--out-dir data] [--bf16]
       python3 dev/data/gpt2_weights.py --safetensors FILE --n-head N --out OUT.bin   (a local copy)
then:  ./train_gpt --model data/gpt2_124M.bin --steps 0 --hellaswag data/hellaswag_val.bin
       ./train_gpt --model data/gpt2_124M.bin ...        (fine-tune)

safetensors: an 8-byte little-endian header length n, n bytes of JSON {name: {dtype, shape,
data_offsets: [begin, end]}} (offsets into the data that follows), then the data.
Hugging Face's GPT-2 keeps its linear layers as Conv1D, y = x·W + b with W of shape (in, out);
the model file holds (out, in) like torch.nn.Linear, so those four weights are transposed. The
token embedding (V = 50257 rows) is padded with zero rows to Vp = 50304, and lm_head (the tied
wte) and the attention's causal-mask buffers are not stored.
Model file: 256 int32 [20240326, 3 (fp32) or 5 (bf16), maxT, V, L, NH, C, Vp], then the 16
tensors in llm.c's order (llmc/model.h, README "File formats").

Test: test/test_cli.sh converts a small safetensors file written from a random model in Hugging
Face's layout (names with and without "transformer.", the mask buffers, lm_head) and checks the
result is that model's file byte for byte, in fp32 and bf16. The download itself and the hub's
real files have not been tried here (no internet where the tests run).
"""
import argparse
import json
import os
import struct
import urllib.request

import numpy as np

HUB = {"124M": ("gpt2", 12), "350M": ("gpt2-medium", 16), "774M": ("gpt2-large", 20), "1558M": ("gpt2-xl", 25)}
URL = "https://huggingface.co/{}/resolve/main/model.safetensors"
DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_safetensors(path):
    """{name: float32 array}."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in DTYPES:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']} (expected F32, F16 or BF16)")
        begin, end = t["data_offsets"]
        a = np.frombuffer(data[begin:end], dtype=DTYPES[t["dtype"]])
        if t["dtype"] == "BF16":
            a = (a.astype("<u4") << 16).view("<f4")
        out[name] = a.astype(np.float32).reshape(t["shape"])
    return out


def to_model_file(sd, n_head, path, bf16=False):
    sd = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in sd.items()}
    for k in ("wte.weight", "wpe.weight", "h.0.ln_1.weight", "ln_f.weight"):
        if k not in sd:
            raise SystemExit(f"no tensor '{k}': not a GPT-2 checkpoint (its tensors: {', '.join(list(sd)[:6])}, ...)")
    L = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))
    V, C = sd["wte.weight"].shape
    maxT = sd["wpe.weight"].shape[0]
    Vp = -(-V // 128) * 128  # V rounded up to a multiple of 128, as llm.c pads it (50257 -> 50304)
    if C % n_head:
        raise SystemExit(f"--n-head {n_head} does not divide the model's width C = {C}")
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = sd["wte.weight"]

    def layers(name, transpose=False):
        return np.stack([sd[f"h.{l}.{name}"].T if transpose else sd[f"h.{l}.{name}"] for l in range(L)])

    tensors = [wte, sd["wpe.weight"],
               layers("ln_1.weight"), layers("ln_1.bias"),
               layers("attn.c_attn.weight", True), layers("attn.c_attn.bias"),
               layers("attn.c_proj.weight", True), layers("attn.c_proj.bias"),
               layers("ln_2.weight"), layers("ln_2.bias"),
               layers("mlp.c_fc.weight", True), layers("mlp.c_fc.bias"),
               layers("mlp.c_proj.weight", True), layers("mlp.c_proj.bias"),
               sd["ln_f.weight"], sd["ln_f.bias"]]
    header = np.zeros(256, "<i4")
    header[:8] = [20240326, 5 if bf16 else 3, maxT, V, L, n_head, C, Vp]
    with open(path + ".tmp", "wb") as f:
        f.write(header.tobytes())
        for t in tensors:
            t = np.ascontiguousarray(t, dtype="<f4")
            if bf16:  # round to nearest even, as the trainer's --save-precision bf16 does
                u = t.view("<u4").astype(np.uint64)
                t = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            f.write(t.tobytes())
    os.replace(path + ".tmp", path)
    print(f"wrote {path}: L={L} C={C} NH={n_head} V={V} (padded {Vp}) maxT={maxT}, {'bf16' if bf16 else 'fp32'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", nargs="?", default="124M", choices=sorted(HUB))
    ap.add_argument("--out-dir", default="data")
    ap.add_argument("--bf16", action="store_true", help="write bf16 weights (version 5) instead of fp32")
    ap.add_argument("--safetensors", help="convert this local file instead of downloading (needs --n-head and --out)")
    ap.add_argument("--n-head", type=int)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.safetensors:
        if not args.n_head or not args.out:
            ap.error("--safetensors needs --n-head and --out")
        to_model_file(read_safetensors(args.safetensors), args.n_head, args.out, args.bf16)
        return
    repo, n_head = HUB[args.size]
    os.makedirs(args.out_dir, exist_ok=True)
    local = os.path.join(args.out_dir, f"{repo}.safetensors")
    if not os.path.exists(local):
        print(f"downloading {URL.format(repo)}")
        urllib.request.urlretrieve(URL.format(repo), local + ".tmp")
        os.replace(local + ".tmp", local)
    out = os.path.join(args.out_dir, f"gpt2_{args.size}{'_bf16' if args.bf16 else ''}.bin")
    to_model_file(read_safetensors(local), n_head, out, args.bf16)


if __name__ == "__main__":
    main()
