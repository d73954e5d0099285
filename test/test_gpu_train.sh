#!/usr/bin/env bash
# test_gpu_train — whole trainings on --device cuda against the CPU run of the same flags.
#   fp32  10 steps, per-step loss within 1e-4 of the CPU (fp32 both sides; the GPU sums in other
#         orders: ~1e-6 observed), the loss falls, two GPU runs are bit-identical
#   bf16  the same in bf16 (GPU kernels vs the CPU's bf16 emulation): within 2e-2 (the CUDA
#         issue's bf16 bound; the flash kernel's bf16 P·V and different rounding points move a
#         2-layer model's loss by ~1e-4), falling, bit-identical runs
#   flash-rows  bf16 with --flash-rows 32 (two m-tiles per warp in flash attention) bit-identical
#         to 16
#   wgmma bf16 with --flash-wgmma 1 (the wgmma flash attention, on compute capability 9.0 and the
#         emulator; elsewhere it runs the default kernels): the bf16 checks again
#   no epilogues (emulator only) bf16 again with a cuBLASLt that has no algorithm for the bias
#         and GELU epilogues (SIMT_LT_NO_EPILOGUES=1): matmul.cuh's fallback kernels
#   waits (emulator only) the host waits for all queued GPU work at most once per optimizer step
#         (the gradient norm, which it needs to clip), however many micro-steps the step has:
#         inside a step nothing drains the GPU's queue (model.h's gpt_forward / gpt_mean_loss)
# usage: test/test_gpu_train.sh TRAIN_GPT     (a CUDA build on a GPU, or build/train_gpt_simt,
# the trainer on the CPU SIMT emulator). Prints "ok"/"not ok" lines.
set -u
BIN=${1:?usage: test/test_gpu_train.sh TRAIN_GPT}
gpu_vs_cpu() {  # gpu_vs_cpu PRECISION BOUND [ENV=VALUE...]: the GPU runs with those variables set (and GPU_FLAGS)
    local prec=$1 bound=$2 tmp; tmp=$(mktemp -d); shift 2
    local gflags=(${GPU_FLAGS:-})
    local flags=(--model d2 --batch-size 4 --seq-len 64 --steps 10 --lr 1e-3 --warmup-steps 2 --val-data "" --seed 3 --precision "$prec")
    "$BIN" --device cpu "${flags[@]}" --log-file "$tmp/cpu.jsonl" >/dev/null 2>&1
    env "$@" "$BIN" --device cuda "${flags[@]}" "${gflags[@]}" --log-file "$tmp/gpu.jsonl" >"$tmp/gpu.out" 2>&1 || tail -3 "$tmp/gpu.out" | sed 's/^/# /'
    env "$@" "$BIN" --device cuda "${flags[@]}" "${gflags[@]}" --log-file "$tmp/gpu2.jsonl" >/dev/null 2>&1
    local what="$prec${GPU_FLAGS:+ $GPU_FLAGS}"
    ${PYTHON:-/usr/bin/python3} - "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" "$tmp/gpu2.jsonl" "$what${1:+ ($*)}" "$bound" <<'PY'
import json, sys
def load(p):
    try: return [json.loads(l) for l in open(p)]
    except OSError: return []
a, b, c = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
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
gpu_vs_cpu fp32 1e-4
gpu_vs_cpu bf16 2e-2
# --flash-rows 32 (two m-tiles per warp in every flash attention pass, head size 64 here: d2 has
# C=128, NH=2) runs the same mma sequences on the same values: the whole training bit-identical
flash_rows() {
    local tmp; tmp=$(mktemp -d)
    local flags=(--device cuda --model d2 --batch-size 4 --seq-len 64 --steps 4 --lr 1e-3 --val-data "" --seed 3 --precision bf16)
    "$BIN" "${flags[@]}" --flash-rows 16 --log-file "$tmp/16.jsonl" >/dev/null 2>&1
    "$BIN" "${flags[@]}" --flash-rows 32 --log-file "$tmp/32.jsonl" >"$tmp/32.out" 2>&1 || tail -3 "$tmp/32.out" | sed 's/^/# /'
    ${PYTHON:-/usr/bin/python3} - "$tmp/16.jsonl" "$tmp/32.jsonl" <<'PY'
import json, sys
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
a, b = load(sys.argv[1]), load(sys.argv[2])
print(("ok" if len(a) == 4 and a == b else "not ok") + " - bf16: --flash-rows 32 trains bit-identically to 16 (4 steps, losses and norms)")
PY
    rm -rf "$tmp"
}
flash_rows
GPU_FLAGS="--flash-wgmma 1" gpu_vs_cpu bf16 2e-2
host_waits() {  # host_waits STEPS TOTAL_BATCH_TOKENS: the emulator's count of full waits (empty on a GPU; "failed")
    local out
    out=$(SIMT_COUNT_WAITS=1 "$BIN" --device cuda --model d2 --batch-size 4 --seq-len 64 --steps "$1" --val-data "" \
        --total-batch-tokens "$2" 2>&1 >/dev/null) || { echo failed; return; }
    sed -n 's/^simt: the host waited for all queued GPU work \([0-9]*\) times$/\1/p' <<<"$out"
}
w31=$(host_waits 3 256)
if [ -n "$w31" ]; then
    w34=$(host_waits 3 1024) w61=$(host_waits 6 256)
    if [[ "$w31 $w34 $w61" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
        [ "$w34" = "$w31" ] && r=ok || r="not ok"
        echo "$r - host waits for the whole GPU queue do not grow with micro-steps (3 steps: $w31 with 1 micro-step each, $w34 with 4)"
        [ $((w61 - w31)) -le 3 ] && r=ok || r="not ok"
        echo "$r - at most one host wait for the whole GPU queue per optimizer step (3 more steps: $((w61 - w31)) more)"
    else
        echo "not ok - counting the host's waits: a run failed or printed no count ($w31, $w34, $w61)"
    fi
    # where cuBLASLt has no algorithm with the bias/GELU epilogues, they run as our kernels
    # (matmul.cuh): the same training, within the same bound of the CPU run
    gpu_vs_cpu bf16 2e-2 SIMT_LT_NO_EPILOGUES=1
fi
