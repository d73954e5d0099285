#!/usr/bin/env bash
# bench_ncu.sh — what limits each hand-written kernel (`make bench`, part `ncu`; not in the
# default parts). Nsight Compute profiles every launch of our kernels in one training step of
# GPT-2 124M (bf16, B=16, T=1024; cuBLASLt's kernels are left out: the linear layers have their
# own table in bench_kernels.sh) and prints, per kernel averaged over its launches:
#   Speed of Light   duration, compute (SM) throughput and memory throughput as % of the GPU's
#                    peak: whichever is near 100% is the limit; both far below it means latency
#                    (too few warps in flight, or waits on barriers and dependent loads)
#   Occupancy        achieved against theoretical warps per SM, and what bounds the theoretical
#                    one (registers per thread, shared memory per block)
#   Launch stats     registers per thread, shared memory, grid and block sizes
#   Warp state       what the warps wait on, in cycles per issued instruction (a barrier, a
#                    long-scoreboard load, the math pipe): where a latency-bound kernel loses
# This is the per-kernel view behind `--profile`'s per-op rows (bench_train.sh), which give
# TFLOP/s and GB/s but not why. ncu runs with --clock-control none (the GPU's clocks as they
# are) and replays each kernel once per group of counters, so the run takes a minute or two.
# Skipped with one line where there is no ncu or it cannot read the counters (e.g. under gVisor).
#   NCU_MODEL, NCU_B, NCU_T   the model and shape [gpt2:124M, 16, 1024]
#   FLASH_WGMMA=1             the step with --flash-wgmma 1 (part ncu-wgmma): the wgmma flash
#                             attention kernels' view, against the mma.sync ones' in part ncu
#   NCU=path                  the ncu to use [ncu, else /usr/local/cuda/bin/ncu]
#   NCU_FLAGS="--matmul-wgmma 1"  more flags for the trainer (our GEMM's kernels are profiled too)
set -u
cd "$(dirname "$0")/../.."
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
model=${NCU_MODEL:-gpt2:124M} B=${NCU_B:-16} T=${NCU_T:-1024} wg=${FLASH_WGMMA:-0}
echo "# bench_ncu on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $model B=$B T=$T bf16 --flash-wgmma $wg, commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F)"
[ -x "$ncu" ] || { echo "bench_ncu: skipped (no Nsight Compute: ncu)"; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# the kernels of llmc/*.cuh (function names, without templates or parameters)
kernels='flash_|attention_|layernorm_|residual_|fused_classifier|adamw|encoder_|gelu_|add_bias|column_sum|norm_squared|matmul_wgmma'
timeout -k 10 "${RUN_LIMIT:-300}" "$ncu" --clock-control none --kernel-name "regex:$kernels" --launch-count 400 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --print-summary per-kernel \
    ./train_gpt --device cuda --precision bf16 --flash-wgmma "$wg" --model "$model" --batch-size "$B" --seq-len "$T" --steps 1 --val-data "" ${NCU_FLAGS:-} \
    >"$tmp/out.txt" 2>&1
rc=$?
if grep -q 'ERR_NVGPUCTRPERM\|LibraryNotLoaded\|Failed to initialize the profiler' "$tmp/out.txt"; then
    echo "bench_ncu: skipped (ncu cannot read this GPU's counters here: $(grep -m1 'ERR_NVGPUCTRPERM\|LibraryNotLoaded\|Failed to initialize' "$tmp/out.txt"))"
    exit 0
fi
echo
echo "Our kernels in one step (ncu --print-summary per-kernel; exit $rc):"
echo
echo '```'
grep -v '^==PROF==\|^step \|^model:\|^data:\|^device:\|^gpu:\|^memory rank' "$tmp/out.txt"
echo '```'
