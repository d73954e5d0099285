"""
torch_baselines.py — the PyTorch numbers `make bench` compares ours against, on the same GPU.

  sdpa B T NH HS   causal F.scaled_dot_product_attention in bf16, forward and backward timed
                   apart with CUDA events (FLOPs counted as dev/cuda/attention.cu counts them);
                   PyTorch's own pick, then each backend pinned alone (flash, cuDNN, efficient;
                   PyTorch ≥ 2.3)
  gpt2 MODEL B T   one training step of GPT-2 (124M-1558M: llm.c's shapes, vocab padded to
                   50304, tied embeddings, GELU tanh) in plain PyTorch with SDPA attention, bf16
                   autocast over fp32 weights, fused AdamW, torch.compile: the usual fast
                   PyTorch baseline. Median step time after warm-up.
  kernels N C NC V Vp P
                   the memory-bound ops of a step, eager and under torch.compile: LayerNorm
                   forward, and forward + backward, on N×C bf16; the residual add with the
                   LayerNorm after it; cross-entropy over NC rows of V bf16 logits (padded to Vp)
                   with its gradient, as under autocast; AdamW fused over P fp32 parameters
  matmul N C Vp    the linear layers of dev/cuda/matmul.cu on N×C bf16 rows, forward and
                   backward together, eager and under torch.compile: qkv, attproj, the MLP and
                   the classifier
Each prints one JSON line (median times in ms). Needs PyTorch ≥ 2.0 with CUDA (the GPU image's
python3). On a CPU machine `--cpu` runs tiny shapes uncompiled, to check that the script works.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

def attend(q, k, v):
    """causal attention: SDPA; the explicit softmax only for --cpu checks on PyTorch < 2.0"""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


GPT2 = {"124M": (12, 12, 768), "350M": (24, 16, 1024), "774M": (36, 20, 1280), "1558M": (48, 25, 1600)}


def timer(device):
    """returns a function timing fn() in ms (CUDA events on the GPU)"""
    def run(fn, reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(reps):
                start.record(); fn(); end.record(); torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            return statistics.median(times)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter(); fn(); times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return run


def sdpa_ms(q, k, v, do, t):
    """(forward ms, backward ms) of causal attention on q, k, v with the SDPA backend in force"""
    fwd = lambda: attend(q, k, v)
    out = fwd()
    def bwd():
        q.grad = k.grad = v.grad = None
        out.backward(do, retain_graph=True)
    for _ in range(3): fwd(); bwd()
    return t(fwd, 20), t(bwd, 20)


def sdpa(B, T, NH, HS, device):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (torch.randn(B, NH, T, HS, device=device, dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(B, NH, T, HS, device=device, dtype=dt)
    t = timer(device)
    ms_f, ms_b = sdpa_ms(q, k, v, do, t)
    flops = 2.0 * B * NH * T * T * HS
    # each backend alone, where this PyTorch can pin one (≥ 2.3): which one the default picked,
    # and how far apart they are ({name: [fwd ms, bwd ms]}, null where it refuses the shape)
    backends = {}
    try:
        from torch.nn.attention import sdpa_kernel, SDPBackend
    except ImportError:
        sdpa_kernel = None
    names = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION") if device == "cuda" else ("MATH",)
    for name in names if sdpa_kernel else ():
        if not hasattr(SDPBackend, name): continue
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                backends[name.split("_")[0].lower()] = list(sdpa_ms(q, k, v, do, t))
        except RuntimeError:
            backends[name.split("_")[0].lower()] = None
    return {"kind": "sdpa", "B": B, "T": T, "NH": NH, "HS": HS, "fwd_ms": ms_f, "bwd_ms": ms_b,
            "fwd_tflops": flops / ms_f / 1e9, "bwd_tflops": 2.5 * flops / ms_b / 1e9, "backends": backends}


def eager_and_compiled(device):
    """returns (r, both): both(name, fn, *args) times fn(*args) eagerly and under torch.compile
    (uncompiled on the CPU), 3 warm-ups (compilation) then timed, into r[f"{name}_{mode}_ms"]"""
    t, r = timer(device), {}
    compile_ = torch.compile if device == "cuda" else (lambda f: f)
    def both(name, fn, *args):
        for mode, f in (("eager", fn), ("compiled", compile_(fn))):
            for _ in range(3): f(*args)
            r[f"{name}_{mode}_ms"] = t(lambda: f(*args), 20)
    return r, both


def kernels(N, C, NC, V, Vp, P, device):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    r, both = eager_and_compiled(device)
    x, y, dout = (torch.randn(N, C, device=device, dtype=dt) for _ in range(3))
    w, b = (torch.randn(C, device=device, dtype=dt) for _ in range(2))
    xg, wg, bg = (v.clone().requires_grad_() for v in (x, w, b))
    with torch.no_grad():
        both("layernorm_fwd", lambda x, w, b: F.layer_norm(x, (C,), w, b), x, w, b)
        def res_ln(x, y, w, b):
            res = x + y
            return res, F.layer_norm(res, (C,), w, b)
        both("residual_layernorm_fwd", res_ln, x, y, w, b)
    both("layernorm_fwdbwd", lambda x, w, b: F.layer_norm(x, (C,), w, b).backward(dout), xg, wg, bg)  # grads accumulate, as ours
    logits = torch.randn(NC, Vp, device=device, dtype=dt).mul_(3.0).requires_grad_()
    tgt = torch.randint(0, V, (NC,), device=device)
    both("classifier", lambda lg: F.cross_entropy(lg[:, :V].float(), tgt).backward(), logits)
    p = torch.randn(P, device=device, requires_grad=True)
    p.grad = torch.randn(P, device=device)
    opt = torch.optim.AdamW([p], lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            **({"fused": True} if device == "cuda" else {}))  # (fused needs PyTorch >= 2.0 and CUDA)
    for _ in range(3): opt.step()
    r["adamw_fused_ms"] = timer(device)(opt.step, 20)
    r.update({"kind": "kernels", "N": N, "C": C, "NC": NC, "V": V, "Vp": Vp, "P": P})
    return r


def matmul(N, C, Vp, device):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    r, both = eager_and_compiled(device)
    rand = lambda *shape, scale=1.0: (scale * torch.randn(*shape, device=device, dtype=dt)).requires_grad_()
    x = rand(N, C)
    for name, OC, bias in (("qkv", 3 * C, True), ("attproj", C, True), ("classifier", Vp, False)):
        W, b, dout = rand(OC, C, scale=0.05), rand(OC) if bias else None, torch.randn(N, OC, device=device, dtype=dt)
        both(f"matmul_{name}", lambda x, W, b: F.linear(x, W, b).backward(dout), x, W, b)
    W1, b1, W2, b2 = rand(4 * C, C, scale=0.05), rand(4 * C), rand(C, 4 * C, scale=0.05), rand(C)
    dout = torch.randn(N, C, device=device, dtype=dt)
    mlp = lambda x, W1, b1, W2, b2: F.linear(F.gelu(F.linear(x, W1, b1), approximate="tanh"), W2, b2).backward(dout)
    both("matmul_mlp", mlp, x, W1, b1, W2, b2)
    r.update({"kind": "matmul", "N": N, "C": C, "Vp": Vp})
    return r


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = attend(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T  # tied embeddings, as in GPT-2
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def gpt2_step(model_name, B, T, device):
    L, NH, C = GPT2[model_name] if device == "cuda" else (2, 2, 64)
    torch.manual_seed(0)
    model = GPT(L, NH, C, V=50304 if device == "cuda" else 512, maxT=T).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    fused = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, **fused)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        model = torch.compile(model)
    V = 50304 if device == "cuda" else 512
    idx = torch.randint(0, V, (B, T), device=device)
    tgt = torch.randint(0, V, (B, T), device=device)

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    t = timer(device)
    for _ in range(5 if device == "cuda" else 1): step()  # compile and warm up
    ms = t(step, 20 if device == "cuda" else 2)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return {"kind": "gpt2", "model": model_name, "B": B, "T": T, "params": nparams, "step_ms": ms,
            "tokens_per_s": B * T / ms * 1e3, "peak_gib": peak}


def main():
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    device = "cpu" if "--cpu" in sys.argv or not torch.cuda.is_available() else "cuda"
    if device == "cpu" and "--cpu" not in sys.argv:
        sys.exit("torch_baselines.py: no CUDA device (use --cpu to check the script on tiny shapes)")
    if device == "cuda" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"torch_baselines.py: PyTorch {torch.__version__} has no scaled_dot_product_attention (needs >= 2.0)")
    if args and args[0] == "sdpa" and len(args) == 5:
        r = sdpa(*(int(a) for a in args[1:]), device)
    elif args and args[0] == "gpt2" and len(args) == 4 and args[1] in GPT2:
        r = gpt2_step(args[1], int(args[2]), int(args[3]), device)
    elif args and args[0] == "kernels" and len(args) == 7:
        r = kernels(*(int(a) for a in args[1:]), device)
    elif args and args[0] == "matmul" and len(args) == 4:
        r = matmul(*(int(a) for a in args[1:]), device)
    else:
        sys.exit("usage: torch_baselines.py sdpa B T NH HS | gpt2 {124M,350M,774M,1558M} B T | kernels N C NC V Vp P"
                 " | matmul N C Vp   [--cpu]")
    r["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    r["torch"] = torch.__version__
    print(json.dumps(r))


if __name__ == "__main__":
    main()
