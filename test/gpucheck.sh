#!/usr/bin/env bash
# gpucheck — the GPU suite (`make gpucheck`, needs a GPU): the CUDA backend against the CPU
# reference, op by op and whole runs, plus the data-parallel matrix with several ranks sharing
# the GPU (MPI, host-staged). Prints "ok"/"not ok" lines and "N passed, N failed".
#   gpucheck_ops     every CUDA op vs its CPU op, poisoned outputs, several shapes
#   fp32 training    10 steps on the GPU vs the CPU run: per-step loss within 1e-4
#                    (fp32 both sides; the GPU sums in other orders: ~1e-6 observed on CPU
#                    layouts, and 1e-4 is the bound the project sets for fp32)
#   bf16 training    the same in bf16 (GPU kernels vs the CPU's bf16 emulation): within 2e-2,
#                    the loss keeps falling, and two GPU runs are bit-identical
#   test_train       resume bit-exactness, determinism (two GPU runs identical), learning
#   test_vs_pytorch  the GPU trainer vs PyTorch on the same weights and batches
#   test_dp          DDP / ZeRO-1/2/3 with 2 and 4 ranks on one GPU vs one process
set -u
cd "$(dirname "$0")/.."
BIN=./train_gpt
pass=0; fail=0
part() {
    local name=$1; shift
    echo "== $name"
    local out rc p f
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    p=$(echo "$out" | grep -c '^ok - '); f=$(echo "$out" | grep -c '^not ok - ')
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then echo "not ok - $name exited with status $rc"; f=1; fi
    pass=$((pass + p)); fail=$((fail + f))
}
echo "# gpucheck on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"

part gpucheck_ops build/gpucheck_ops

gpu_vs_cpu() {  # gpu_vs_cpu PRECISION BOUND
    local prec=$1 bound=$2 tmp; tmp=$(mktemp -d)
    local flags=(--model d2 --batch-size 4 --seq-len 64 --steps 10 --lr 1e-3 --warmup-steps 2 --val-data "" --seed 3 --precision "$prec")
    "$BIN" --device cpu "${flags[@]}" --log-file "$tmp/cpu.jsonl" >/dev/null 2>&1
    "$BIN" --device cuda "${flags[@]}" --log-file "$tmp/gpu.jsonl" >"$tmp/gpu.out" 2>&1 || tail -3 "$tmp/gpu.out"
    "$BIN" --device cuda "${flags[@]}" --log-file "$tmp/gpu2.jsonl" >/dev/null 2>&1
    /usr/bin/python3 - "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" "$tmp/gpu2.jsonl" "$prec" "$bound" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
c = [json.loads(l) for l in open(sys.argv[3])]
prec, bound = sys.argv[4], float(sys.argv[5])
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)) if len(a) == len(b) == 10 else float("inf")
print(("ok" if worst <= bound else "not ok") + f" - {prec} GPU training matches the CPU run over 10 steps (max loss diff {worst:.1e} <= {bound:g})")
falling = len(b) == 10 and b[-1]["loss"] < b[0]["loss"] - 0.5
print(("ok" if falling else "not ok") + f" - {prec}: the GPU loss falls ({b[0]['loss']:.3f} -> {b[-1]['loss']:.3f})" if b else f"not ok - {prec}: no GPU log")
same = len(b) == 10 and [(x["loss"], x["grad_norm"]) for x in b] == [(x["loss"], x["grad_norm"]) for x in c]
print(("ok" if same else "not ok") + f" - {prec}: two GPU runs are bit-identical (losses and norms)")
PY
    rm -rf "$tmp"
}
part "fp32 GPU vs CPU" gpu_vs_cpu fp32 1e-4
part "bf16 GPU vs CPU" gpu_vs_cpu bf16 2e-2
part "test_train (cuda)" env DEVICE=cuda bash test/test_train.sh "$BIN"
part "test_vs_pytorch (cuda)" env DEVICE=cuda /usr/bin/python3 test/test_vs_pytorch.py "$BIN"
if command -v mpirun >/dev/null; then part "test_dp (cuda, ranks share the GPU)" env DEVICE=cuda bash test/test_dp.sh "$BIN"; fi
# kernel playgrounds: correctness and timings for the log (informational, not counted)
for p in build/dev_attention build/dev_layernorm build/dev_classifier build/dev_adamw; do
    [ -x "$p" ] && { echo "== $p"; "$p" 2>&1; }
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
