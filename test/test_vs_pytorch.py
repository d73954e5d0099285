"""
test_vs_pytorch — the CPU trainer against PyTorch (Debian's python3-torch), end to end.

Same weights (written as an llm.c model file), same batches (a token shard read in the order of
DESIGN §3.4), same AdamW (torch.optim.AdamW with decay on 2-D weights only), same clipping and
LR schedule, 8 optimizer steps with 2 accumulation micro-steps each. PyTorch runs in float64,
so it is the exact answer; our fp32 run must match it:
  per-step loss      |ours − torch| ≤ 1e-4   (the bound the project sets; fp32 round-off over a
                                              few thousand-term reductions is ~1e-6 here)
  final parameters   max |ours − torch| ≤ 1e-4 · … see below.
Adam normalizes each gradient element, so a parameter moves by about lr per step whatever its
gradient's size; fp32 noise in a near-zero gradient can change the direction of that move. We
therefore bound the final parameters relative to the total movement: max|Δ| ≤ 2e-3·lr·steps.

usage: [DEVICE=cuda] /usr/bin/python3 test/test_vs_pytorch.py TRAIN_GPT_BINARY
Prints "ok"/"not ok" lines.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402


def check(ok, name, detail=""):
    print(f"{'ok' if ok else 'not ok'} - {name}" + (f" ({detail})" if detail else ""))
    return ok


def run_case(binary, tmp, name, cfg, B, T, accum, steps, opt, version=3):
    torch.manual_seed(0)
    params = ref.random_params(cfg, seed=1)
    model_path = os.path.join(tmp, f"{name}.bin")
    ref.write_model(model_path, cfg, params, version)
    if version == 5:  # the reference starts from the bf16-rounded weights too
        params = {k: v.to(torch.float32).to(torch.bfloat16).to(torch.float64) for k, v in params.items()}
    g = torch.Generator().manual_seed(2)
    ntok = steps * accum * B * T + 1
    tokens = torch.randint(0, cfg["V"], (ntok,), generator=g)
    shard = os.path.join(tmp, f"{name}_train.bin")
    ref.write_shard(shard, tokens.tolist())
    log = os.path.join(tmp, f"{name}.jsonl")
    final = os.path.join(tmp, f"{name}_final.bin")
    cmd = [binary, "--device", os.environ.get("DEVICE", "cpu"), "--precision", "fp32", "--model", model_path, "--train-data", shard, "--val-data", "",
           "--batch-size", str(B), "--seq-len", str(T), "--total-batch-tokens", str(B * T * accum),
           "--steps", str(steps), "--lr", str(opt["lr"]), "--warmup-steps", str(opt["warmup"]),
           "--lr-schedule", opt["kind"], "--final-lr-frac", str(opt["final"]),
           "--weight-decay", str(opt["wd"]), "--grad-clip", str(opt["clip"]),
           "--log-file", log, "--save-model", final]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return check(False, f"{name}: train_gpt ran", r.stderr.strip())
    ours = [json.loads(line) for line in open(log)]

    # the reference run
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    # 2-D weights decay; the per-layer stacks (L, …) hold one 2-D weight or vector per layer
    is_matrix = {k: v.dim() - (0 if k in ("wte", "wpe", "lnfw", "lnfb") else 1) >= 2 for k, v in p.items()}
    decay = [v for k, v in p.items() if is_matrix[k]]
    no_decay = [v for k, v in p.items() if not is_matrix[k]]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": opt["wd"]},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=opt["lr"], betas=(0.9, 0.95), eps=1e-8)
    losses = []
    pos = 0
    for step in range(steps):
        for v in p.values():
            v.grad = None
        total = 0.0
        for _ in range(accum):
            buf = tokens[pos:pos + B * T + 1]
            pos += B * T
            x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
            loss = ref.forward(p, cfg, x, y)
            (loss / accum).backward()
            total += loss.item() / accum
        losses.append(total)
        norm = torch.sqrt(sum((v.grad ** 2).sum() for v in p.values())).item()
        if opt["clip"] > 0 and norm > opt["clip"]:
            for v in p.values():
                v.grad *= opt["clip"] / norm
        for group in optim.param_groups:
            group["lr"] = ref.lr_at(step, opt["lr"], opt["warmup"], steps, opt["kind"], opt["final"])
        optim.step()

    ok = check(len(ours) == steps, f"{name}: {steps} steps logged")
    worst = max(abs(o["loss"] - t) for o, t in zip(ours, losses))
    ok &= check(worst <= 1e-4, f"{name}: per-step loss within 1e-4 of PyTorch",
                f"max diff {worst:.2e}; first {ours[0]['loss']:.6f} vs {losses[0]:.6f}, last {ours[-1]['loss']:.6f} vs {losses[-1]:.6f}")
    worst_lr = max(abs(o["lr"] - ref.lr_at(i, opt["lr"], opt["warmup"], steps, opt["kind"], opt["final"])) for i, o in enumerate(ours))
    ok &= check(worst_lr <= 1e-6 * opt["lr"] + 1e-12, f"{name}: learning rate schedule", f"max diff {worst_lr:.2e}")
    _, fin = ref.read_model(final)
    # The key bias (qkvb[:, C:2C]) has an exactly zero gradient: it adds q·b to every score of a
    # softmax row, which the softmax ignores. Both runs therefore move it by Adam-normalized
    # round-off noise (up to lr per step, in either direction); it is compared loosely, apart.
    C = cfg["C"]
    diff = {k: (fin[k].double() - p[k].detach()).abs() for k in p}
    key_bias = diff["qkvb"][:, C:2 * C].max().item()
    diff["qkvb"][:, C:2 * C] = 0.0
    pdiff = max(d.max().item() for d in diff.values())
    bound = 2e-3 * opt["lr"] * steps
    ok &= check(pdiff <= bound, f"{name}: final parameters match PyTorch", f"max |diff| {pdiff:.2e} <= {bound:.1e}")
    ok &= check(key_bias <= 2 * opt["lr"] * steps, f"{name}: key bias moved only by noise", f"max |diff| {key_bias:.2e}")
    return ok


def main():
    binary = sys.argv[1]
    torch.set_default_dtype(torch.float64)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dict(maxT=32, V=97, Vp=128, L=2, NH=4, C=32)
        run_case(binary, tmp, "cosine+clip+decay", cfg, B=4, T=16, accum=2, steps=8,
                 opt=dict(lr=3e-3, warmup=2, kind="cosine", final=0.1, wd=0.1, clip=1.0))
        run_case(binary, tmp, "wsd+noclip+bf16file", cfg, B=2, T=32, accum=1, steps=6,
                 opt=dict(lr=1e-3, warmup=0, kind="wsd", final=0.0, wd=0.0, clip=0.0), version=5)
        cfg3 = dict(maxT=24, V=61, Vp=64, L=3, NH=2, C=24)
        run_case(binary, tmp, "linear+3layers", cfg3, B=3, T=24, accum=3, steps=5,
                 opt=dict(lr=2e-3, warmup=1, kind="linear", final=0.0, wd=0.05, clip=0.5))


if __name__ == "__main__":
    main()
