#!/usr/bin/env bash
# gpu_speed.sh — the speed work's GPU call, most telling first, for a machine held for minutes:
# the wgmma checks (the fused backward against the CPU op), whole steps against llm.c and a
# baseline (bench_vs_llmc.sh), attention against SDPA's cuDNN and flash backends
# (bench_vs_torch.sh, attention alone), then gpucheck's flash ops and GPU training.
#   dev/gpu_speed.sh OUTDIR       (binaries from .prebuilt/, packages from .debs/: dev/gpu_session.sh)
#   SPEED_STEPS=wgmma,llmc,...    the steps to run (default all: wgmma ab llmc attention classifier biasgrad matmul layernorm
#                                 fp8 flash bf16 train;
#                                 ab: our attention against .baseline/dev_attention, bench_attention_ab.sh;
#                                 classifier: dev/cuda/classifier.cu's versions, old (v5) and new;
#                                 biasgrad: dbias's column sums, kernels against cuBLASLt's epilogue
#                                 (dev/cuda/matmul.cu's dbias part at 124M's rows; the fp8 step has 1558M's);
#                                 layernorm: dev/cuda/layernorm.cu's versions (v5: the prefetch);
#                                 matmul: our GEMM's products against cuBLASLt's (dev/cuda/matmul.cu v7-v12, v1);
#                                 fp8: gpucheck's FP8 ops, dev/cuda/matmul.cu at 1558M's layers (bf16 and
#                                 FP8 products each, and dbias), then FP8 against bf16 at 1558M (gpu_fp8_vs_bf16.sh);
#                                 ncu, ncubwd, not in the default: Nsight Compute on the forward's
#                                 layouts, on the fused backward's producers; ncugemm, not in the default:
#                                 Nsight Compute on a 124M step with --matmul-wgmma 1 (bench_ncu.sh); kernels, not in the
#                                 default: every kernel of a 124M step timed by Nsight Compute, ours
#                                 and llm.c's side by side (bench_ncu_steps.sh); llama, not in the
#                                 default: llama:3B's step (head size 128) with --flash-backward fused128 and chain)
#   SPEED_DEADLINE=S              every step ends within S s of the start, so the summary still prints:
#                                 a step's limit shrinks to the time left; under 15 s left, it is skipped
# Each step's output goes to OUTDIR as it runs; dev/gpu_results/ gets the logs. Tested without a
# GPU by test/test_gpu_speed.sh (what a failed check leaves out).
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: dev/gpu_speed.sh OUTDIR}
mkdir -p "$out"
[[ ${SPEED_DEADLINE:-0} =~ ^[0-9]+$ ]] || { echo "gpu_speed: SPEED_DEADLINE is whole seconds, not '$SPEED_DEADLINE'"; exit 2; }
export PYTHON=${PYTHON:-python3}  # (the GPU image's python3 holds numpy and PyTorch; /usr/bin/python3 may not)
export LLMC_COMMIT=${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export LLMC_FLAGS=${LLMC_FLAGS-"-r 0 -ge 2"}  # (llm.c's fastest on an H200: no recompute, GELU fused into the matmuls)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
log=dev/gpu_results/$(date -u +%F)-$gpu-$LLMC_COMMIT
mkdir -p dev/gpu_results
step() {  # step NAME LIMIT COMMAND...: its output into $log-NAME.txt, copied to OUTDIR as it grows
    local name=$1 limit=$2 t0=$SECONDS; shift 2
    if [ -n "${SPEED_DEADLINE:-}" ]; then  # (10 s kept for the summary)
        local left=$((SPEED_DEADLINE - SECONDS - 10))
        [ "$left" -lt 15 ] && { echo "== $name: skipped (SPEED_DEADLINE: $((left + 10)) s left)"; return 1; }
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "== $name (limit $limit s)"
    (while sleep 5; do cp -f "$log-$name.txt" "$out"/ 2>/dev/null; done) & local saver=$!
    timeout -k 5 "$limit" "$@" >"$log-$name.txt" 2>&1
    echo "== $name: exit $?, $((SECONDS - t0)) s" | tee -a "$log-$name.txt"
    kill $saver 2>/dev/null; cp -f "$log-$name.txt" "$out"/
}
# the prebuilt binaries (gpu_session.sh's setup alone: its first step is a no-op check of nothing)
bash dev/gpu_session.sh setup "$out" >/dev/null 2>&1
[ -x train_gpt ] && [ -x build/gpucheck_ops ] || { echo "gpu_speed: no binaries (the .prebuilt/ manifest did not match?)"; cat dev/gpu_results/*-session.txt; exit 2; }
[ -d .debs ] && source scripts/offline_debs.sh use .debs
want=",${SPEED_STEPS:-wgmma,ab,llmc,attention,classifier,biasgrad,matmul,layernorm,fp8,flash,bf16,train},"
[[ $want == *,wgmma,* ]] && step wgmma 90 build/gpucheck_ops wgmma
[[ $want == *,wgmma,* ]] && step chain 45 build/gpucheck_ops chain  # (its blocks wait for blocks: a hang costs only v31)
[[ $want == *,wgmma,* ]] && step persistent 45 build/gpucheck_ops persistent  # (its blocks loop over items: a hang costs only v32-v34, v36)
[[ $want == *,wgmma,* ]] && step gemm 45 build/gpucheck_ops gemm  # (our GEMM, --matmul-wgmma: a hang costs only its runs)
# Kernels that failed their check (or hung it: exit 124) are left out of the timings below.
# (the llmc step's runs of ours beside the default: bench_vs_llmc.sh's OURS_ALSO, apart by ';')
# (auto: every layout of the forward and of the fused backward timed at the first step, the fastest kept and named)
also=${OURS_ALSO-"--flash-forward-producer auto --flash-backward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue"}
# Failures that name only ping-pong, swizzled tiles, TMA, the backward's producer, the fused
# backward at head size 128 (C=512 in the checks; v27), 3 computing warpgroups (v28, v29) or dQ
# summed by the last split (v30) leave out those versions, and the auto of the pass they belong
# to; others, or a hang, every opt-in version (v11-v36) and every --flash- flag. The persistent
# forward's own check (a failure or a hang) leaves out v32-v34, v36 and the forward's auto. The chained
# backward's own check (a failure or a hang) leaves out v31 and its run alone.
if [ -f "$log-wgmma.txt" ] && ! grep -q "^# gpucheck_ops wgmma: [0-9]* passed, 0 failed" "$log-wgmma.txt"; then
    all_bad=$(grep "^not ok" "$log-wgmma.txt") skip=
    bad=$(grep -v -e "3 computing warpgroups" -e "summed by the last split" <<<"$all_bad")
    grep -q "3 computing warpgroups" <<<"$all_bad" && { skip+=28,29,33,35,36,; also=${also//--flash-forward-producer auto/}; }
    grep -q "summed by the last split" <<<"$all_bad" && { skip+=30,; also=${also//--flash-backward-producer auto/}; }
    grep -q "ping-pong" <<<"$bad" && { skip+=13,14,16,19,20,21,22,32,34,; also=${also//--flash-forward-producer auto/}; }
    grep -v "in the backward" <<<"$bad" | grep -q "by TMA" && { skip+=21,22,28,32,33,34,35,36,; also=${also//--flash-forward-producer auto/}; }
    grep -v "by TMA" <<<"$bad" | grep -q "swizzled" && { skip+=18,19,20,21,22,28,32,33,34,35,36,; also=${also//--flash-forward-producer auto/}; }
    grep "in the backward" <<<"$bad" | grep -q "by TMA" && { skip+=25,26,; also=${also//--flash-backward-producer auto/}; }
    grep "in the backward" <<<"$bad" | grep -vq "by TMA" && { skip+=23,24,25,26,; also=${also//--flash-backward-producer auto/}; }
    grep "fused backward" <<<"$bad" | grep -q "C=512" && skip+=27,
    if [ -z "$all_bad" ] || grep -v -e "ping-pong" -e "swizzled" -e "by TMA" -e "producer warpgroup in the backward" <<<"$bad" |
            grep -v "C=512.*fused backward\|fused backward.*C=512" | grep -q . ||
        grep -q "^== wgmma: exit 124" "$log-wgmma.txt"; then
        skip=11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36
        also=$(tr ';' '\n' <<<"$also" | grep -v -e --flash- | paste -sd';')  # (the runs without opt-in attention stay)
    fi
    export DEV_ATTENTION_SKIP=${skip%,}
    echo "gpu_speed: the wgmma check did not pass: versions $DEV_ATTENTION_SKIP left out"
fi
if [ -f "$log-persistent.txt" ] && ! grep -q "^# gpucheck_ops persistent: [0-9]* passed, 0 failed" "$log-persistent.txt"; then
    also=${also//--flash-forward-producer auto/}  # (its layouts include persistent ones)
    export DEV_ATTENTION_SKIP=${DEV_ATTENTION_SKIP:+$DEV_ATTENTION_SKIP,}32,33,34,36
    echo "gpu_speed: the persistent forward's check did not pass: v32-v34, v36 left out, and the forward's auto"
fi
if [ -f "$log-chain.txt" ] && ! grep -q "^# gpucheck_ops chain: [0-9]* passed, 0 failed" "$log-chain.txt"; then
    also=${also//--flash-backward chain/}
    [[ ,${DEV_ATTENTION_SKIP:-}, == *,31,* ]] || export DEV_ATTENTION_SKIP=${DEV_ATTENTION_SKIP:+$DEV_ATTENTION_SKIP,}31
    echo "gpu_speed: the chained backward's check did not pass: v31 left out"
fi
gemm_ok=1
if [ -f "$log-gemm.txt" ] && ! grep -q "^# gpucheck_ops gemm: [0-9]* passed, 0 failed" "$log-gemm.txt"; then
    also=${also//--matmul-wgmma-products gelu/} gemm_ok=0
    also=${also//--matmul-wgmma [1-6]/}
    also=${also//--matmul-wgmma auto/}
    also=${also//--classifier-stats epilogue/}
    echo "gpu_speed: our GEMM's check did not pass: its runs left out"
fi
also=$(tr ';' '\n' <<<"$also" | sed 's/^ *//; s/ *$//; s/  */ /g' | grep . | paste -sd';')  # (no empty runs)
echo "gpu_speed: ours also: '${also}'"
# (our GEMM's forward and dinp products against cuBLASLt's, v7-v12 against v1, at 124M's B = 64)
[[ $want == *,matmul,* && $gemm_ok == 1 ]] && DEV_MATMUL_ONLY=1,7,8,9,10,11,12 step matmul 180 build/dev_matmul 65536 768 50304 64
[[ $want == *,ab,* && -x .baseline/dev_attention ]] && step ab 150 bash dev/bench/bench_attention_ab.sh .baseline/dev_attention
# (RUN_LIMIT: a run that hangs costs 60 s, not the step's whole limit: a run took ~16 s. A layout
# that hangs in an auto's trial ends its run after 20 s, naming the layout in the log. 480 s: 13
# runs a model, 2 models; a model's row is printed after its last run.)
[[ $want == *,llmc,* ]] && STEPS=${STEPS:-20} RUN_LIMIT=${RUN_LIMIT:-60} LLMC_FLASH_TRIAL_SECONDS=20 OURS_ALSO=$also \
    step llmc 480 bash dev/bench/bench_vs_llmc.sh
# (and at GPT-2 1558M's shape the fused backward by its splits, no version loop: DEV_ATTENTION_SKIP)
[[ $want == *,attention,* ]] && BENCH_TORCH_STEP=0 step attention 180 bash -c \
    "bash dev/bench/bench_vs_torch.sh; DEV_ATTENTION_SKIP=$(seq -s, 7 29),32,33,34,35,36 build/dev_attention 16 1024 1600 25 time |
     grep -e 'by its splits' -e 'fused / split' -e 'chained / fused' | sed 's/^ */GPT-2 1558M B=16: /'"
[[ $want == *,classifier,* ]] && step classifier 60 build/dev_classifier
[[ $want == *,biasgrad,* ]] && step biasgrad 60 build/dev_matmul 65536 768 0
[[ $want == *,layernorm,* ]] && step layernorm 60 bash -c "build/dev_layernorm 65536 768 && build/dev_layernorm 16384 1600"
llama_also="--flash-backward fused128"  # (and chained at head size 128, where its check passed)
[[ $also == *"--flash-backward chain"* ]] && llama_also+=";--flash-backward chain"
[[ $want == *,llama,* ]] && STEPS=15 BASELINE_BIN=none OURS_ALSO=$llama_also step llama 240 bash dev/bench/bench_vs_llmc.sh llama:3B:4
[[ $want == *,fp8,* ]] && step fp8 400 bash -c "build/gpucheck_ops fp8 && { build/dev_matmul 16384 1600 50304; bash dev/gpu_fp8_vs_bf16.sh ./train_gpt '$out/fp8'; }"
[[ $want == *,flash,* ]] && step flash 90 build/gpucheck_ops flash
[[ $want == *,bf16,* ]] && step bf16 90 build/gpucheck_ops bf16
[[ $want == *,train,* ]] && GPU_TRAIN_QUICK=1 step train 200 bash test/test_gpu_train.sh ./train_gpt
# ncu: the forward at head size 128, T = 8192, with interleaved tiles (v7), swizzled (v18), and
# swizzled with a producer, ping-pong and 128 keys, by cp.async (v20) and by TMA (v22): one
# launch each, L2 and stall details.
ncu_forward() {
    local spec
    for spec in "6:flash_forward_wgmma_kernel<.*, 2, 64, false>" "0:flash_forward_wgmma_kernel<.*, 2, 64, true>" \
                "0:flash_forward_wgmma_producer_kernel<.*, 2, true, 128, true, false, 2>" \
                "0:flash_forward_wgmma_producer_kernel<.*, 2, true, 128, true, true, 2>"; do
        DEV_ATTENTION_SKIP=${DEV_ATTENTION_SKIP:+$DEV_ATTENTION_SKIP,}8,9,11,12,13,14,15,16,17,19,21,28,29,32,33,34,35,36 NCU_SKIP=${spec%%:*} NCU_COUNT=1 \
            bash dev/bench/bench_ncu_attention.sh 2 8192 768 6 "${spec#*:}"
    done
}
export -f ncu_forward
[[ $want == *,ncu,* ]] && step ncu 300 bash -c ncu_forward
# ncubwd: the fused backward at head size 64, B=16 T=1024 (GPT-2's shape): without a producer
# (the default), with one by cp.async (v23) and by TMA (v25); then at B=2 T=8192 the default and
# the chained one (v31). One launch each, and where its L2 sectors go and DRAM's bytes (NCU_L2:
# are dQ's reductions what keeps the L2 busy? does the model of docs/performance.md hold?).
ncu_backward() {
    local spec
    for spec in "1024:flash_backward_fused_wgmma_kernel<.*, 64, false, false>" "1024:flash_backward_fused_wgmma_producer_kernel<.*, 3, false, false, false>" \
                "1024:flash_backward_fused_wgmma_producer_kernel<.*, 3, true, false, false>" \
                "8192:flash_backward_fused_wgmma_kernel<.*, 64, false, false>" "8192:flash_backward_fused_wgmma_kernel<.*, 64, false, true>"; do
        local T=${spec%%:*}
        DEV_ATTENTION_SKIP=${DEV_ATTENTION_SKIP:+$DEV_ATTENTION_SKIP,}7,8,9,11,12,13,14,15,16,17,18,19,20,21,22,24,26,28,29 NCU_SKIP=0 NCU_COUNT=1 \
            NCU_L2=1 bash dev/bench/bench_ncu_attention.sh $((16384 / T)) "$T" 768 12 "${spec#*:}"
    done
}
export -f ncu_backward
[[ $want == *,ncubwd,* ]] && step ncubwd 300 bash -c ncu_backward
[[ $want == *,kernels,* ]] && RUN_LIMIT=120 step kernels 260 bash dev/bench/bench_ncu_steps.sh gpt2:124M 64
[[ $want == *,ncugemm,* && $gemm_ok == 1 ]] && NCU_FLAGS="--matmul-wgmma 1" step ncugemm 300 bash dev/bench/bench_ncu.sh
for f in wgmma ab llmc attention classifier llama flash bf16 train ncu ncubwd kernels; do
    [ -f "$log-$f.txt" ] && { echo "== $f"; grep -E "^# gpucheck_ops|not ok|^\| |fused / split|by its splits|^== |^bf16 v" "$log-$f.txt" | tail -40; }
done
