#!/usr/bin/env bash
# test_ptxas — what ptxas says about the Hopper (wgmma) kernels, checked without a GPU: each
# compiles for sm_90a with no register spills, and ptxas serializes none of its wgmma. Also the
# mma.sync backward passes at head size 64 stay within the registers that keep 3 and 4 blocks on
# an SM, and the wgmma forward at head size 64 within those that keep 2 (below), and each
# producer kernel's registers at entry cover what its setmaxnreg hands out (else a hang), and our
# GEMM has no stack frame.
# Why: a wgmma kernel that runs out of registers, or whose asynchronous products cross a branch or
# share registers with other instructions before their wait, still computes the right numbers,
# but ptxas then waits for every product before the next ("C75xx: wgmma.mma_async instructions
# are serialized ..."), silently undoing the software pipeline (llmc/flash_attention_hopper.cuh,
# wgmma_pipeline_step). Only its -v report shows it, so this reads that report.
# Reads ptxas's -v report on test/gpucheck_ops.cu (which instantiates every kernel), written by
# the Makefile's build of build/gpucheck_ops (build/gpucheck_ops.ptxas.txt), or, where that is
# missing, older than a source, or has no sm_90a (another NVCC_GENCODE), compiles it to an sm_90a
# cubin for the report; prints each wgmma kernel's registers. Needs nvcc; skips with a line without it.
# Also: the trainer's sm_80 PTX, which the build embeds for GPUs newer than its machine code,
# compiles for Blackwell (sm_100: B200; sm_120: RTX 50xx), as the driver compiles it there at the
# first launch (the Makefile's NVCC_GENCODE). And gpu_speed.sh's Nsight Compute patterns name kernels.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then echo "# skip: test_ptxas needs nvcc"; exit 0; fi
mkdir -p build
fresh() {  # fresh FILE SOURCE...: FILE exists and no source (file or folder's files) is newer
    [ -s "$1" ] && [ -z "$(find "${@:2}" -newer "$1" -type f 2>/dev/null | head -1)" ]
}
# the trainer's sm_80 PTX, for the Blackwell check at the end: the one the Makefile's nvcc build
# of ./train_gpt keeps (build/nvcc_keep), else written here, beside the sm_90a report
ptx=build/nvcc_keep/train_gpt.compute_80.ptx
if ! fresh "$ptx" train_gpt.cu llmc; then
    ptx=build/train_gpt_compute_80.ptx
    "$NVCC" -O3 -std=c++17 -x cu -arch=compute_80 -ptx train_gpt.cu -o "$ptx" >build/ptx_compute_80.txt 2>&1 &
    ptx_pid=$!
    trap 'kill "$ptx_pid" 2>/dev/null' EXIT  # (an exit before its wait below stops it)
fi
report=build/gpucheck_ops.ptxas.txt
if ! fresh "$report" test/gpucheck_ops.cu llmc || ! grep -q "for 'sm_90a'" "$report"; then
    report=build/ptxas_sm90a.txt
    if ! "$NVCC" -O2 -std=c++17 -x cu -gencode=arch=compute_90a,code=sm_90a -cubin -Xptxas -v test/gpucheck_ops.cu \
            -o build/ptxas_sm90a.cubin >"$report" 2>&1; then
        grep -m 20 error "$report"; echo "not ok - nvcc could not compile test/gpucheck_ops.cu for sm_90a"
        exit 1
    fi
fi
# One line per sm_90a kernel: name, registers, spill store bytes (ptxas prints the properties,
# then the count; the report may hold other architectures' too).
all=$(awk '
    /Compiling entry function/ { name = $0; sub(/.*function .\047?/, "", name); sub(/\047.*/, "", name); spill = 0; sm90a = /for .sm_90a.$/ }
    /bytes spill stores/ { for (i = 1; i <= NF; i++) if ($i == "spill" && $(i + 1) == "stores,") spill = $(i - 2) }
    /Used [0-9]+ registers/ && sm90a { for (i = 1; i <= NF; i++) if ($i == "Used") regs = $(i + 1); print name, regs, spill }
' "$report")
kernels=$(echo "$all" | grep -i wgmma)
if [ -z "$kernels" ]; then echo "not ok - ptxas reported no wgmma kernel (are they still instantiated by gpucheck_ops?)"; exit 1; fi
while read -r name regs spill; do
    short=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
    if [ "$spill" = 0 ]; then echo "ok - ptxas sm_90a: $short: $regs registers, no spills"
    else echo "not ok - ptxas sm_90a: $short: $regs registers, $spill bytes of spill stores"; fi
    if grep -q "(C75[0-9][0-9]).*'$name'" "$report"; then
        echo "not ok - ptxas sm_90a: $short: wgmma serialized: $(grep -o "(C75[0-9][0-9])[^']*" <(grep "'$name'" "$report") | head -1)"
    else echo "ok - ptxas sm_90a: $short: no wgmma serialized"; fi
done <<<"$kernels"
# The mma.sync backward passes at head size 64 (flash_attention.cuh: FLASH_DKV_MIN_BLOCKS,
# FLASH_DQ_MIN_BLOCKS): within the registers that let 3 (dK/dV) and 4 (dQ) blocks share an SM,
# spilling at most the 4 bytes (one register, one store and one load) of the bf16 dK/dV pass's
# default variant when the cap came in; more would say the kernels outgrew their cap.
for pass in dkv:168 dq:128; do
    k=${pass%%:*} cap=${pass#*:} n=0
    while read -r name regs spill; do
        n=$((n + 1))
        short=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
        if [ "$regs" -le "$cap" ] && [ "$spill" -le 4 ]; then echo "ok - ptxas sm_90a: $short: $regs registers (cap $cap), $spill bytes of spill stores"
        else echo "not ok - ptxas sm_90a: $short: $regs registers (cap $cap), $spill bytes of spill stores (at most 4)"; fi
    done < <(echo "$all" | grep -E "^_Z[0-9]+flash_backward_${k}_kernelI[A-Za-z0-9_]+Li64ELb[01]ELb[01]ELi1EE")
    [ "$n" -gt 0 ] || echo "not ok - ptxas reported no flash_backward_${k}_kernel at head size 64 (still instantiated by gpucheck_ops?)"
done
# The wgmma forward at head size 64 with 64-key tiles: at most 128 registers, so that two blocks
# of 256 threads share an SM (FORWARD_WGMMA_MIN_BLOCKS in flash_attention_hopper.cuh). A change
# that grows it past 128 halves the warps an SM, with no other sign (docs/kernels.md).
n=0
while read -r name regs spill; do
    n=$((n + 1))
    short=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
    if [ "$regs" -le 128 ] && [ "$spill" = 0 ]; then echo "ok - ptxas sm_90a: $short: $regs registers (two blocks an SM), no spills"
    else echo "not ok - ptxas sm_90a: $short: $regs registers, $spill bytes of spill stores (at most 128, none)"; fi
done < <(echo "$all" | grep -E "^_Z[0-9]+flash_forward_wgmma_kernelI[A-Za-z0-9_]+Li64ELi[12]ELi64ELb[01]EE")
[ "$n" -gt 0 ] || echo "not ok - ptxas reported no flash_forward_wgmma_kernel at head size 64 (still instantiated by gpucheck_ops?)"
# The producer kernels move registers with setmaxnreg: the producer warpgroup gives some back
# (.dec to P), the NWG computing ones take them (.inc to C). A .inc waits until the block's pool
# holds them, so entry registers × threads must cover P·128 + C·NWG·128, else the computing
# warpgroups wait for ever (a hang no emulator shows). P and C as the kernels set them.
fwd=$(grep -o "PRODUCER_REGS = NWG == 2 ? [0-9]* : [0-9]*, COMPUTE_REGS = NWG == 2 ? [0-9]* : [0-9]*" llmc/flash_attention_hopper.cuh | grep -o "[0-9]\+" | tr '\n' ' ')
bwd=$(sed -n '/flash_backward_fused_wgmma_producer_kernel(/,/^}/p' llmc/flash_fused_backward.cuh | grep -o "setmaxnreg<[0-9]*" | grep -o "[0-9]*" | tr '\n' ' ')
gemm=$(sed -n '/matmul_wgmma_kernel(/,/^}/p' llmc/matmul_hopper.cuh | grep -o "setmaxnreg<[0-9]*" | grep -o "[0-9]*" | tr '\n' ' ')
read -r _ p2 p3 _ c2 c3 <<<"$fwd"; read -r pb cb <<<"$bwd"; read -r pg cg <<<"$gemm"
n=0
while read -r name regs spill; do
    n=$((n + 1))
    short=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
    case "$short" in
        *flash_backward_fused_wgmma_producer_kernel*) nwg=2 p=$pb c=$cb ;;
        *matmul_wgmma_kernel*) nwg=2 p=$pg c=$cg ;;
        *) nwg=$(sed 's/.*, \([0-9]*\)>(.*/\1/' <<<"$short"); if [ "$nwg" = 3 ]; then p=$p3 c=$c3; else p=$p2 c=$c2; fi ;;
    esac
    need=$(( (p + c * nwg) * 128 )) have=$(( regs * 128 * (nwg + 1) ))
    if [ -n "$p" ] && [ -n "$c" ] && [ "$have" -ge "$need" ] && [ "$need" -le 65536 ]; then
        echo "ok - ptxas sm_90a: $short: setmaxnreg balanced ($regs registers at entry × $((128 * (nwg + 1))) threads cover $p + $nwg × $c a thread of 128)"
    else echo "not ok - ptxas sm_90a: $short: setmaxnreg unbalanced: $regs registers at entry × $((128 * (nwg + 1))) threads, the warpgroups ask $p + $nwg × $c a thread of 128 (P='$p' C='$c')"; fi
done < <(echo "$all" | grep -E "^_Z[0-9]+(flash_(forward|backward_fused)_wgmma_producer_kernel|matmul_wgmma_kernel)")
[ "$n" -gt 0 ] || echo "not ok - ptxas reported no producer kernel (still instantiated by gpucheck_ops?)"
# Our GEMM (matmul_hopper.cuh) keeps its 128 sums a thread in registers: no stack frame. An index
# the compiler cannot resolve (a loop over the sums left rolled) moves them to local memory, with
# no spill reported, and every wgmma then waits for the one before (C7514).
n=0
while read -r frame name; do
    n=$((n + 1))
    short=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
    if [ "$frame" = 0 ]; then echo "ok - ptxas sm_90a: $short: no stack frame"
    else echo "not ok - ptxas sm_90a: $short: a stack frame of $frame bytes (its sums or counts in local memory)"; fi
done < <(awk '/Compiling entry function/ { sm90a = /for .sm_90a.$/ } /Function properties for/ { name = $NF }
             /bytes stack frame/ && sm90a { print $1, name }' "$report" | grep "matmul_wgmma_kernel" | sort -u)
[ "$n" -gt 0 ] || echo "not ok - ptxas reported no matmul_wgmma_kernel (still instantiated by gpucheck_ops?)"
# dev/gpu_speed.sh's Nsight Compute steps pick kernels by a pattern of their template arguments:
# each must still name a kernel (a template argument added since would leave the step empty)
names=$(echo "$all" | awk '{print $1}' | c++filt)
while read -r re; do
    [ -z "$re" ] && continue
    if grep -Eq -- "$re" <<<"$names"; then echo "ok - ptxas sm_90a: gpu_speed.sh's Nsight Compute pattern '$re' names a kernel"
    else echo "not ok - ptxas sm_90a: gpu_speed.sh's Nsight Compute pattern '$re' names no kernel (template arguments changed?)"; fi
done < <(grep -o '"[0-9]*:\{0,1\}flash_[a-z_]*kernel<[^"]*"' dev/gpu_speed.sh | tr -d '"' | sed 's/^[0-9]*://')
# the PTX a Blackwell GPU runs from: ptxas (the driver's compiler) for each sm this nvcc knows,
# the two at once
if [ -n "${ptx_pid:-}" ]; then
    wait "$ptx_pid"; ptx_rc=$?; trap - EXIT
    if [ "$ptx_rc" != 0 ]; then
        grep -m 20 error build/ptx_compute_80.txt; echo "not ok - nvcc could not write train_gpt.cu's compute_80 PTX"; exit 1
    fi
fi
sms=() pids=()
for sm in sm_100 sm_120; do
    if ! "$NVCC" --list-gpu-code 2>/dev/null | grep -qx "$sm"; then echo "# skip: this nvcc does not know $sm"; continue; fi
    sms+=("$sm")
    "$(dirname "$NVCC")/ptxas" -arch="$sm" "$ptx" -o /dev/null >"build/ptxas_$sm.txt" 2>&1 &
    pids+=($!)
done
for i in "${!sms[@]}"; do
    sm=${sms[$i]}
    if wait "${pids[$i]}"; then
        echo "ok - ptxas $sm: the trainer's compute_80 PTX (what the driver compiles on a GPU newer than the build's SASS) compiles"
    else
        grep -m 5 error "build/ptxas_$sm.txt"; echo "not ok - ptxas $sm: the trainer's compute_80 PTX does not compile"
    fi
done
