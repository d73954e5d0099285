#!/usr/bin/env bash
# bench_ncu_attention.sh — what limits the Hopper flash attention kernels at one shape: Nsight
# Compute on one launch of each wgmma kernel that dev/cuda/attention.cu's "time" mode runs.
#   dev/bench/bench_ncu_attention.sh B T C NH [KERNEL_REGEX]   (default regex: flash_.*wgmma)
#   NCU_SKIP=6 NCU_COUNT=3   launches of the matching kernels to skip, then to profile
# The regex matches the demangled name with its template arguments, so
# 'flash_forward_wgmma_kernel<bf16, 128, 2, 64, true>' is v18's forward alone (swizzled tiles).
# Prints ncu's per-kernel sections: Speed of Light (with its breakdown, where this ncu has
# --print-details), compute workload (the tensor pipe's share), memory workload (L1 and L2
# requests and sectors), occupancy, launch stats, warp states (each stall reason's share) and
# scheduler stats. NCU_L2=1: then a second pass over the same launches for where the L2's
# sectors go (reads, writes, reductions such as the fused backward's dQ adds), its hit rate and
# DRAM's bytes (a separate call, so that a metric this ncu lacks fails only it).
# Skipped with one line where there is no ncu. Takes about a minute (ncu replays each launch).
set -u
cd "$(dirname "$0")/../.."
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[ -x "$ncu" ] || { echo "bench_ncu_attention: skipped (no Nsight Compute: ncu)"; exit 0; }
B=${1:?B} T=${2:?T} C=${3:?C} NH=${4:?NH} re=${5:-flash_.*wgmma}
echo "# bench_ncu_attention B=$B T=$T C=$C NH=$NH (head size $((C / NH))), kernels /$re/, commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
details=(); "$ncu" --help 2>/dev/null | grep -q -- --print-details && details=(--print-details all)  # (the stall reasons)
# (the first launches are --flash-wgmma auto's trials: by default skip them, then profile 3)
timeout -k 10 "${RUN_LIMIT:-120}" "$ncu" --clock-control none "${details[@]}" --kernel-name-base demangled --kernel-name "regex:$re" \
    --launch-skip "${NCU_SKIP:-6}" --launch-count "${NCU_COUNT:-3}" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    ./build/dev_attention "$B" "$T" "$C" "$NH" time 2>&1 |
    grep -v '^==PROF=='
[ "${NCU_L2:-0}" = 1 ] || exit 0
echo "# the L2's sectors by operation, its hit rate, DRAM's bytes"
timeout -k 10 "${RUN_LIMIT:-120}" "$ncu" --clock-control none --kernel-name-base demangled --kernel-name "regex:$re" \
    --launch-skip "${NCU_SKIP:-6}" --launch-count "${NCU_COUNT:-3}" \
    --metrics lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    ./build/dev_attention "$B" "$T" "$C" "$NH" time 2>&1 |
    grep -v '^==PROF==' | grep -E "flash_|lts__|dram__|gpu__|ERR|rror"
