#!/usr/bin/env bash
# bench_vs_torch.sh — our kernels and trainer against PyTorch on this GPU (`make bench`).
#   attention  our bf16 flash attention (build/dev_attention … time: the trainer's defaults, at head
#              size 64 --flash-rows auto's per-pass choice of 16 or 32 rows a warp, on compute
#              capability 9.0 --flash-wgmma auto's of wgmma or mma.sync) against causal
#              scaled_dot_product_attention (dev/bench/torch_baselines.py), 16384 tokens per
#              call, T = 1024…8192, head size 64 (C = 768) and 128 (C = 768, 6 heads);
#              ratio = SDPA's fwd+bwd time / ours (≥ 1: ours faster), and the same against SDPA
#              with its cuDNN backend pinned (forward, backward, both) and with its flash (FA2) one
#   step       one GPT-2 124M training step (B = 16, T = 1024, bf16) of ./train_gpt against a
#              compiled PyTorch GPT-2 of the same shape; ratio = its step time / ours
# BENCH_TORCH_STEP=0: the attention tables alone.
# Needs a python3 with PyTorch ≥ 2.0 and CUDA (the GPU image's). Each program is cut off after
# RUN_LIMIT seconds (default 300). Prints markdown tables.
set -u
cd "$(dirname "$0")/../.."
PY=python3
if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and hasattr(torch.nn.functional, 'scaled_dot_product_attention') else 1)" 2>/dev/null; then
    echo "bench_vs_torch: skipped (no python3 with PyTorch >= 2.0 and CUDA)"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "# bench_vs_torch on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F), $($PY -c 'import torch; print("torch", torch.__version__)')"
echo
echo "| attention (bf16, causal) | ours fwd / bwd ms | ours TFLOP/s fwd / bwd | SDPA fwd / bwd ms | SDPA TFLOP/s fwd / bwd | SDPA time / ours | cuDNN fwd / bwd ms | cuDNN time / ours (fwd, bwd, both) | FA2 time / ours |"
echo "|---|---|---|---|---|---|---|---|---|"
for hs in 64 128; do
    for T in 1024 2048 4096 8192; do
        B=$((16384 / T)); NH=$((768 / hs)); C=768
        timeout -k 10 "${RUN_LIMIT:-300}" ./build/dev_attention $B $T $C $NH time >"$tmp/ours.txt" 2>&1
        grep "backward split" "$tmp/ours.txt" | head -1 | sed "s/^ *backward split: /- B=$B T=$T hs=$hs: /" >>"$tmp/splits.txt"
        grep "with --flash-backward split" "$tmp/ours.txt" | sed "s/^ *with --flash-backward split[^:]*: /- B=$B T=$T hs=$hs: /" >>"$tmp/fused.txt"
        grep "with --flash-backward fused128" "$tmp/ours.txt" | sed "s/^ *with --flash-backward fused128[^:]*: /- B=$B T=$T hs=$hs: /" >>"$tmp/fused128.txt"
        grep "with --flash-backward chain" "$tmp/ours.txt" | sed "s/^ *with --flash-backward chain[^:]*: /- B=$B T=$T hs=$hs: /" >>"$tmp/chain.txt"
        grep "the fused backward by its splits" "$tmp/ours.txt" | sed "s/^ *the fused backward by its splits /- B=$B T=$T hs=$hs /" >>"$tmp/splits_fused.txt"
        # what --flash-rows auto (head size 64) and --flash-wgmma auto kept for each pass, with both times
        grep "^flash attention: " "$tmp/ours.txt" | sed "s/^flash attention: /- B=$B T=$T hs=$hs: /" >>"$tmp/auto.txt"
        # head size 64: the 32-rows-per-warp variant (v6: kernels.flash_forward_rows = flash_dq_rows = flash_dkv_keys = 32)
        grep -A1 "with 32 rows per warp" "$tmp/ours.txt" | tr -d '\n' | sed "s/^ *with 32 rows per warp (v6): /- B=$B T=$T hs=$hs: /; s/ *backward split: /; split: /" \
            | grep . >>"$tmp/v6.txt"
        # compute capability 9.0: the wgmma kernels (v7 two warpgroups a block, v8 one, v9 two without the software pipeline)
        grep -A1 "with wgmma" "$tmp/ours.txt" | grep -v '^--$' | paste -d ' ' - - | sed "s/^ *with wgmma, /- B=$B T=$T hs=$hs: /; s/ *backward split: /; split: /" \
            | grep . >>"$tmp/wgmma.txt"
        timeout -k 10 "${RUN_LIMIT:-300}" $PY dev/bench/torch_baselines.py sdpa $B $T $NH $hs >"$tmp/torch.json" 2>"$tmp/torch.err"
        $PY - "$tmp/ours.txt" "$tmp/torch.json" "$B" "$T" "$hs" "$tmp/backends.txt" <<'PY'
import json, re, sys
ours = open(sys.argv[1]).read()
# ours: what the trainer runs by default (its defaults' line; else the first)
auto = re.search(r"with --flash-rows auto [^:]*?\): forward ([\d.]+) ms \(([\d.]+) TFLOP/s\), backward ([\d.]+) ms \(([\d.]+) TFLOP/s\)", ours)
f = re.search(r"forward\s+.*?([\d.]+) ms\s+([\d.]+) TFLOP/s", ours)
b = re.search(r"backward\s+.*?([\d.]+) ms\s+([\d.]+) TFLOP/s", ours)
mine = [float(x) for x in auto.groups()] if auto else [float(x) for x in f.groups() + b.groups()] if f and b else None
try:
    t = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
except Exception:
    t = None
shape = f"B={sys.argv[3]} T={sys.argv[4]} hs={sys.argv[5]}"
if not (mine and t):
    print(f"| {shape} | {'failed' if not mine else ''} | | {'failed' if not t else ''} | | | | | |")
else:
    fms, ftf, bms, btf = mine
    ratio = (t["fwd_ms"] + t["bwd_ms"]) / (fms + bms)
    be = t.get("backends") or {}
    cu, fa = be.get("cudnn"), be.get("flash")
    cu_cells = (f"{cu[0]:.3f} / {cu[1]:.3f} | {cu[0] / fms:.2f}×, {cu[1] / bms:.2f}×, **{(cu[0] + cu[1]) / (fms + bms):.2f}×**"
                if cu else "refused | ")
    fa_cell = f"{(fa[0] + fa[1]) / (fms + bms):.2f}×" if fa else "refused"
    print(f"| {shape} | {fms:.3f} / {bms:.3f} | {ftf:.0f} / {btf:.0f} | "
          f"{t['fwd_ms']:.3f} / {t['bwd_ms']:.3f} | {t['fwd_tflops']:.0f} / {t['bwd_tflops']:.0f} | {ratio:.2f}× | {cu_cells} | {fa_cell} |")
if t and t.get("backends"):
    with open(sys.argv[6], "a") as out:
        out.write(f"- {shape}: " + ", ".join(f"{k} " + (f"{v[0]:.3f} / {v[1]:.3f}" if v else "refused")
                                            for k, v in t["backends"].items()) + "\n")
PY
    done
done
echo
echo "Ours: what the trainer runs by default (--flash-rows auto: at head size 64 each pass the faster of 16 and 32 rows a warp; --flash-wgmma auto: on compute capability 9.0 each pass wgmma where faster and of mma.sync's bits; both decided at its first launches; below)."
if [ -s "$tmp/auto.txt" ]; then
    echo
    echo "What --flash-rows auto and --flash-wgmma auto kept (llmc/flash_launch.cuh: flash_tune_rows, flash_run_pass):"
    echo
    cat "$tmp/auto.txt"
fi
if [ -s "$tmp/fused.txt" ]; then
    echo
    echo "The fused backward (the default on compute capability 9.0 at head size 64) against the two passes (--flash-backward split) in the same run:"
    echo
    cat "$tmp/fused.txt"
fi
if [ -s "$tmp/splits_fused.txt" ]; then
    echo
    echo "The fused backward by its number of splits (a fixed rule, flash_fused_splits, picks it: the splits set dQ's order of sums):"
    echo
    cat "$tmp/splits_fused.txt"
fi
if [ -s "$tmp/chain.txt" ]; then
    echo
    echo "The chained backward (--flash-backward chain, v31: a block per key block, each adding to one dQ sum in its turn; other bits) in the same run: at head size 64 against the fused backward above, at 128 against the two passes and fused128:"
    echo
    cat "$tmp/chain.txt"
fi
if [ -s "$tmp/fused128.txt" ]; then
    echo
    echo "The fused backward at head size 128 (--flash-backward fused128, opt-in) against the default above (the two passes) in the same run:"
    echo
    cat "$tmp/fused128.txt"
fi
if [ -s "$tmp/backends.txt" ]; then
    echo
    echo "SDPA with each backend pinned (fwd / bwd ms; the default above is the one it picks):"
    echo
    cat "$tmp/backends.txt"
fi
if [ -s "$tmp/splits.txt" ]; then
    echo
    echo "Our backward's two deterministic passes (the dQ pass, which also computes D = rowsum(dO∘O), run alone; the dK/dV pass the rest of the backward), TFLOP/s over each pass's own products, and the D kernel the dQ pass replaces:"
    echo
    cat "$tmp/splits.txt"
fi
if [ -s "$tmp/v6.txt" ]; then
    echo
    echo "Head size 64 with 32 rows per warp: query rows in the forward and the dQ pass, keys in the dK/dV pass (v6, the options flash_forward_rows, flash_dq_rows and flash_dkv_keys of KernelOptions; the splits above are 16's):"
    echo
    cat "$tmp/v6.txt"
fi
if [ -s "$tmp/wgmma.txt" ]; then
    echo
    echo "Compute capability 9.0, the wgmma kernels (--flash-wgmma 1; v7 two warpgroups a block, v8 one, v9 two with each product waited for at once, flash_wgmma_overlap = false):"
    echo
    cat "$tmp/wgmma.txt"
fi
[ "${BENCH_TORCH_STEP:-1}" = 0 ] && exit 0  # (the attention tables alone)
echo
echo "| training step, GPT-2 124M, B=16 T=1024 bf16 | step ms | tokens/s | peak GPU memory |"
echo "|---|---|---|---|"
timeout -k 10 "${RUN_LIMIT:-300}" ./train_gpt --device cuda --precision bf16 --model gpt2:124M --batch-size 16 --seq-len 1024 --steps 8 --val-data "" \
    --log-file "$tmp/ours.jsonl" >"$tmp/ours_train.txt" 2>&1
timeout -k 10 "${RUN_LIMIT:-300}" $PY dev/bench/torch_baselines.py gpt2 124M 16 1024 >"$tmp/torch_gpt2.json" 2>"$tmp/torch_gpt2.err"
$PY - "$tmp/ours.jsonl" "$tmp/ours_train.txt" "$tmp/torch_gpt2.json" "$tmp/torch_gpt2.err" <<'PY'
import json, re, statistics, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1])][2:]
    ours_ms = statistics.median(r["ms"] for r in rows)
    mem = re.search(r"peak GPU memory.*?: ([\d.]+) MiB", open(sys.argv[2]).read())
    print(f"| ./train_gpt (llm.cu) | {ours_ms:.1f} | {16 * 1024 / ours_ms * 1e3:,.0f} | {float(mem.group(1)) / 1024:.1f} GiB |" if mem else f"| ./train_gpt | {ours_ms:.1f} | | |")
except Exception as e:
    ours_ms = None
    print(f"| ./train_gpt | failed: {open(sys.argv[2]).read().strip().splitlines()[-1:]} | | |")
try:
    t = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
    print(f"| PyTorch {t['torch']}, torch.compile, SDPA, fused AdamW | {t['step_ms']:.1f} | {t['tokens_per_s']:,.0f} | {t['peak_gib']:.1f} GiB |")
    if ours_ms:
        print(f"\nPyTorch step time / ours: {t['step_ms'] / ours_ms:.2f}× (≥ 1: ours faster)")
except Exception:
    print(f"| PyTorch | failed: {open(sys.argv[4]).read().strip().splitlines()[-1:]} | | |")
PY
