#!/usr/bin/env bash
# bench_kernels.sh — our memory-bound kernels against PyTorch's on this GPU (`make bench`, part
# `kernels`), at GPT-2 124M's shapes (B=16, T=1024: N = 16384 rows of C = 768).
#   ours     the trainer's version in each playground (dev/cuda/*.cu, which also checks it
#            against the CPU op): layernorm.cu's v4, classifier.cu's v2, adamw.cu's v1
#   PyTorch  dev/bench/torch_baselines.py kernels: the same op eagerly and under torch.compile
#            (Inductor's generated kernels fuse what the eager ops leave apart)
# ratio = the faster PyTorch time / ours (≥ 1: ours faster). These ops move bytes, so the
# table also gives ours in GB/s over the bytes that must move (each playground's header says
# which); against the device-to-device copy rate (~3 TB/s on an H100 SXM) it says how much is
# left. A second table does the same for the linear layers (dev/cuda/matmul.cu; cuBLASLt with
# the GELU in its epilogues here, cuBLAS through F.linear there), forward + backward in TFLOP/s.
# Attention has its own table (bench_vs_torch.sh).
# Needs a python3 with PyTorch ≥ 2.0 and CUDA. Prints a markdown table.
set -u
cd "$(dirname "$0")/../.."
PY=python3
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and hasattr(torch, 'compile') else 1)" 2>/dev/null; then
    echo "bench_kernels: skipped (no python3 with PyTorch >= 2.0 and CUDA)"; exit 0
fi
N=16384 C=768 NC=8192 V=50257 Vp=50304 P=124475904  # NC: the classifier playground's default rows
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
limit=${RUN_LIMIT:-300}
timeout -k 10 "$limit" ./build/dev_layernorm $N $C >"$tmp/layernorm.txt" 2>&1
timeout -k 10 "$limit" ./build/dev_classifier $NC $V $Vp >"$tmp/classifier.txt" 2>&1
timeout -k 10 "$limit" ./build/dev_adamw $P >"$tmp/adamw.txt" 2>&1
timeout -k 10 "$limit" ./build/dev_matmul $N $C $Vp >"$tmp/matmul.txt" 2>&1
timeout -k 10 "$limit" $PY dev/bench/torch_baselines.py kernels $N $C $NC $V $Vp $P >"$tmp/torch.json" 2>"$tmp/torch.err"
timeout -k 10 "$limit" $PY dev/bench/torch_baselines.py matmul $N $C $Vp >"$tmp/torch_matmul.json" 2>"$tmp/torch_matmul.err"
echo "# bench_kernels on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F), $($PY -c 'import torch; print("torch", torch.__version__)')"
echo
$PY - "$tmp" $N $C $NC $Vp $P <<'PY'
import json, re, sys
tmp, N, C, NC, Vp, P = sys.argv[1], *(int(a) for a in sys.argv[2:])
def ours(name, pattern):  # the first number after `pattern` in a playground's output, or None
    try:
        m = re.search(pattern, open(f"{tmp}/{name}.txt").read(), re.M)
        return float(m.group(1)) if m else None
    except OSError:
        return None
def torch_times(name):  # torch_baselines.py's JSON line from {name}.json, or {} and its last error line
    try:
        return json.loads(open(f"{tmp}/{name}.json").read().strip().splitlines()[-1])
    except Exception:
        err = open(f"{tmp}/{name}.err").read().strip().splitlines()
        print(f"PyTorch ({name}) failed: {err[-1] if err else 'no output'}\n")
        return {}
t = torch_times("torch")
ln_f = ours("layernorm", r"^bf16 v4 .*? forward\s+rel err \S+\s+([\d.]+) ms")
ln_b = ours("layernorm", r"^bf16 v4 .*? backward rel err .*?\s([\d.]+) ms")
# (name, ours ms, PyTorch key, bytes that must move)
rows = [
    (f"LayerNorm forward, bf16 {N}×{C}", ln_f, "layernorm_fwd", 2 * N * C * 2),
    (f"LayerNorm forward + backward (dx, dw, db)", ln_f + ln_b if ln_f and ln_b else None, "layernorm_fwdbwd", 6 * N * C * 2),
    (f"residual add + LayerNorm forward", ours("layernorm", r"^bf16 v4 .*? res\+fwd\s+rel err \S+\s+([\d.]+) ms"),
     "residual_layernorm_fwd", 4 * N * C * 2),
    (f"cross-entropy loss + dlogits, bf16 {NC}×{Vp}", ours("classifier", r"^bf16 v2 .*?\s([\d.]+) ms"), "classifier", 2 * NC * Vp * 2),
    (f"AdamW, fp32, {P / 1e6:.1f}M parameters", ours("adamw", r"^v1\s+([\d.]+) ms"), "adamw_fused", 28 * P),
]
print("| op (GPT-2 124M shapes) | ours ms | ours GB/s | PyTorch eager ms | PyTorch compiled ms | PyTorch best / ours |")
print("|---|---|---|---|---|---|")
fmt = lambda x: f"{x:.3f}" if x is not None else "failed"
for name, ms, key, nbytes in rows:
    if key == "adamw_fused":  # fused=True is PyTorch's fastest AdamW; nothing to compile
        eager, comp = t.get("adamw_fused_ms"), None
    else:
        eager, comp = t.get(f"{key}_eager_ms"), t.get(f"{key}_compiled_ms")
    best = min((x for x in (eager, comp) if x is not None), default=None)
    print(f"| {name} | {fmt(ms)} | {nbytes / ms / 1e6:.0f} |" if ms else f"| {name} | failed | |", end="")
    print(f" {fmt(eager)} | {'n/a (fused=True)' if key == 'adamw_fused' else fmt(comp)} |", end="")
    print(f" {best / ms:.2f}× |" if ms and best else " |")

# the linear layers: forward + backward, TFLOP/s over 2·N·C·OC per product (three per layer)
print()
tm = torch_times("torch_matmul")
print("| linear layer, forward + backward (bf16, GPT-2 124M shapes) | ours ms | ours TFLOP/s | PyTorch eager ms | PyTorch compiled ms | PyTorch best / ours |")
print("|---|---|---|---|---|---|")
layers = [("qkv", f"qkv {N}×{C} → {3 * C}", C * 3 * C), ("attproj", f"attproj {N}×{C} → {C}", C * C),
          ("mlp", f"MLP {N}×{C} → {4 * C}, GELU, → {C}", 2 * C * 4 * C), ("classifier", f"classifier {N}×{C} → {Vp}", C * Vp)]
for key, name, products in layers:
    ms = ours("matmul", rf"^v1 {key}\s.*?both\s+([\d.]+) ms")
    eager, comp = tm.get(f"matmul_{key}_eager_ms"), tm.get(f"matmul_{key}_compiled_ms")
    best = min((x for x in (eager, comp) if x is not None), default=None)
    tflops = f"{6 * N * products / ms / 1e9:.0f}" if ms else ""
    print(f"| {name} | {fmt(ms)} | {tflops} | {fmt(eager)} | {fmt(comp)} |" + (f" {best / ms:.2f}× |" if ms and best else " |"))
v2 = ours("matmul", r"^v2 mlp\s.*?both\s+([\d.]+) ms")
if v2:
    print(f"\n(MLP with the GELU apart, dev/cuda/matmul.cu v2: {v2:.3f} ms.)")
PY
for p in layernorm classifier adamw matmul; do
    grep -q "over the bound\|error" "$tmp/$p.txt" && { echo; echo "dev_$p reported:"; grep "error" "$tmp/$p.txt"; }
done
exit 0
