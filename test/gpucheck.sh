#!/usr/bin/env bash
# gpucheck — the GPU suite (`make gpucheck`, needs a GPU): the CUDA backend against the CPU
# reference, op by op and whole runs, plus the data-parallel matrix with several ranks sharing
# the GPU (MPI, host-staged). Prints "ok"/"not ok" lines and "N passed, N failed".
#   gpucheck_ops     every CUDA op vs its CPU op, poisoned outputs, several shapes (part ops,
#                    as five processes: fp32, bf16, fp16, flash, fp8 (the quantize kernels, cvt
#                    and cuBLASLt FP8 products), so a fatal error costs one of them);
#                    the wgmma flash attention (--flash-wgmma 1) as part wgmma (the chained
#                    backward, the persistent forward and our GEMM as processes of their own)
#   test_gpu_train   10 steps on the GPU vs the CPU run, fp32 (within 1e-4), bf16 and fp8
#                    (2e-2): the loss falls, and two GPU runs are bit-identical
#   test_train       resume bit-exactness, determinism (two GPU runs identical), learning
#   test_vs_pytorch  the GPU trainer vs PyTorch on the same weights and batches
#   test_dp          DDP / ZeRO-1/2/3 with 2 and 4 ranks vs one process: MPI staged through host
#                    memory (ranks may share a GPU), and NCCL where there are 4 GPUs
#   test_tp          tensor parallelism, tp = 2 and dp = 2 × tp = 2, vs one process: the same,
#                    MPI staged (part tp)
#   test_pp          pipeline parallelism, pp = 2 (gpipe, 1f1b) and with dp, tp, vs one process:
#                    the same, MPI staged (part pp)
#   test_cp          context parallelism (ring attention), cp = 2 and 4 and with dp, tp, pp, vs
#                    one process: the same, MPI staged (part cp)
#   dev/cuda         the kernel playgrounds: every version within its bound; their timings
#   sanitize         compute-sanitizer's memcheck, racecheck, synccheck and initcheck over
#                    gpucheck_ops and a short bf16 training (test/gpu_sanitize.sh): no errors
#   hf (not by default) test_hf_export with transformers (GPU images ship it): the exported
#                    Hugging Face folders loaded by it, models it saved read by our importers
set -u
cd "$(dirname "$0")/.."
BIN=./train_gpt
# the reference checks need PyTorch: the python3 on PATH if it has it (GPU images ship their own),
# else the system one (where `make test-deps` installs python3-torch)
PY=/usr/bin/python3
python3 -c "import torch, numpy" 2>/dev/null && PY=$(command -v python3)
export PYTHON=$PY   # the test scripts' python (test_dp.sh, test_train.sh, test_gpu_train.sh)
# each part runs under a time limit (PART_LIMIT seconds, default 900), so a hang costs one part
pass=0; fail=0
part() {
    local name=$1; shift
    echo "== $name"
    local out rc p f t0=$SECONDS
    out=$(timeout -k 10 "${PART_LIMIT:-900}" "$@" 2>&1); rc=$?
    echo "$out"
    p=$(echo "$out" | grep -c '^ok - '); f=$(echo "$out" | grep -c '^not ok - ')
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "not ok - $name ran past its ${PART_LIMIT:-900} s limit"; f=$((f + 1));
    elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then echo "not ok - $name exited with status $rc"; f=1; fi
    echo "# $name: $((SECONDS - t0)) s"
    pass=$((pass + p)); fail=$((fail + f))
}
# GPUCHECK_PARTS picks parts (default all but hf, in this order): ops wgmma train resume pytorch
# playgrounds sanitize dp tp pp cp hf; a name not among them is refused before anything runs
all_parts="ops wgmma train resume pytorch playgrounds sanitize dp tp pp cp hf"
parts=${GPUCHECK_PARTS:-${all_parts% hf}}
for p in $parts; do
    [[ " $all_parts " == *" $p "* ]] || { echo "gpucheck: GPUCHECK_PARTS has '$p', which is not a part ($all_parts)"; exit 2; }
done
want() { [[ " $parts " == *" $1 "* ]]; }
echo "# gpucheck on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F), parts: $(echo $parts)"
# the ops part as five processes, so that a fatal error in one dtype's checks costs only those;
# the FP8 products with cuBLASLt's error log on (CUBLASLT_LOG_LEVEL=1: its reason for refusing one)
if want ops; then
    for g in fp32 bf16 fp16 flash; do part "gpucheck_ops $g" build/gpucheck_ops "$g"; done
    part "gpucheck_ops fp8" env CUBLASLT_LOG_LEVEL=1 build/gpucheck_ops fp8
fi
# the Hopper flash attention (--flash-wgmma 1; by default auto) apart, under its own shorter limit:
# a fault in it names itself and costs no other part
want wgmma && PART_LIMIT=${WGMMA_LIMIT:-180} part "gpucheck_ops wgmma" build/gpucheck_ops wgmma
want wgmma && PART_LIMIT=60 part "gpucheck_ops chain" build/gpucheck_ops chain  # (blocks that wait for blocks: a hang costs only this)
want wgmma && PART_LIMIT=60 part "gpucheck_ops persistent" build/gpucheck_ops persistent  # (blocks that loop over items: the same)
want wgmma && PART_LIMIT=60 part "gpucheck_ops gemm" build/gpucheck_ops gemm  # (our GEMM, --matmul-wgmma: the same)
want train && part "GPU vs CPU training (fp32, bf16, fp8)" bash test/test_gpu_train.sh "$BIN"
want resume && part "test_train (cuda)" env DEVICE=cuda bash test/test_train.sh "$BIN"
want pytorch && part "test_vs_pytorch (cuda)" env DEVICE=cuda "$PY" test/test_vs_pytorch.py "$BIN"
# kernel playgrounds: each version against the CPU op (counted: a playground exits 1 when one is
# over its bound) and its timing, for the log
playground=(bash -c '"$@" && echo "ok - $*: every version within its bound of the CPU op"' playground)
if want playgrounds; then  # (the ones whose timings decide a default first: a budget may cut the rest)
    for p in build/dev_attention build/dev_classifier; do
        [ -x "$p" ] && part "$p" "${playground[@]}" "$p"
    done
    [ -x build/dev_layernorm ] && part "build/dev_layernorm, GPT-2 1558M's width" "${playground[@]}" build/dev_layernorm 16384 1600
    [ -x build/dev_attention ] && part "build/dev_attention, head size 128" "${playground[@]}" build/dev_attention 4 1024 1024 8
    for p in build/dev_layernorm build/dev_adamw build/dev_matmul; do
        [ -x "$p" ] && part "$p" "${playground[@]}" "$p"
    done
    # the rows of GPT-2 124M's step at B = 128 (make bench): LayerNorm's chunks of 128 rows, the dbias sums' 1024 chunks
    [ -x build/dev_layernorm ] && part "build/dev_layernorm, 124M's B·T" "${playground[@]}" build/dev_layernorm 131072 768
    [ -x build/dev_matmul ] && part "build/dev_matmul's dbias sums, 124M's B·T" "${playground[@]}" build/dev_matmul 131072 768 0
fi
# compute-sanitizer: 4 tools × 2 programs, each under its own limit (SANITIZE_LIMIT, 300 s), so
# the part as a whole gets 8 of those
if want sanitize; then
    PATH=$PATH:/usr/local/cuda/bin PART_LIMIT=$((8 * ${SANITIZE_LIMIT:-300} + 60)) \
        part "compute-sanitizer" bash test/gpu_sanitize.sh build/gpucheck_ops "$BIN"
fi
# the dp matrix twice: collectives staged through host memory (MPI; the ranks may share a GPU),
# and NCCL with one rank per GPU where there are 4 GPUs (the matrix goes up to dp = 4)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if want dp; then
    if command -v mpirun >/dev/null; then
        part "test_dp (cuda, mpi staged through host memory)" env DEVICE=cuda COMM=mpi bash test/test_dp.sh "$BIN"
        if [ "$ngpu" -ge 4 ]; then part "test_dp (cuda, nccl, one rank per GPU)" env DEVICE=cuda COMM=nccl bash test/test_dp.sh "$BIN"
        else echo "# test_dp over NCCL skipped: it needs 4 GPUs (one rank per GPU), this machine has $ngpu"; fi
    else echo "# test_dp skipped: no mpirun (OpenMPI) on this machine"; fi
fi
# tensor parallelism: the whole test_tp with the ranks sharing the GPU(s) (MPI staged), and its
# equivalence part over NCCL with one rank per GPU where there are 4
if want tp; then
    if command -v mpirun >/dev/null; then
        part "test_tp (cuda, mpi staged through host memory)" env DEVICE=cuda COMM=mpi bash test/test_tp.sh "$BIN"
        if [ "$ngpu" -ge 4 ]; then part "test_tp (cuda, nccl, one rank per GPU)" env DEVICE=cuda COMM=nccl TP_QUICK=1 bash test/test_tp.sh "$BIN"
        else echo "# test_tp over NCCL skipped: it needs 4 GPUs (one rank per GPU), this machine has $ngpu"; fi
    else echo "# test_tp skipped: no mpirun (OpenMPI) on this machine"; fi
fi
# pipeline parallelism: the whole test_pp with the ranks sharing the GPU(s) (the stages' sends go
# through host memory in any case: pipeline.h)
if want pp; then
    if command -v mpirun >/dev/null; then part "test_pp (cuda, mpi staged through host memory)" env DEVICE=cuda COMM=mpi bash test/test_pp.sh "$BIN"
    else echo "# test_pp skipped: no mpirun (OpenMPI) on this machine"; fi
fi
# context parallelism: the whole test_cp with the ranks sharing the GPU(s) (MPI staged)
if want cp; then
    if command -v mpirun >/dev/null; then part "test_cp (cuda, mpi staged through host memory)" env DEVICE=cuda COMM=mpi bash test/test_cp.sh "$BIN"
    else echo "# test_cp skipped: no mpirun (OpenMPI) on this machine"; fi
fi
# Hugging Face interop, where transformers is (GPU images ship it; the CPU suite runs the rest of
# test_hf_export): dev/data/model_to_hf.py's folders loaded by transformers, its tokenizer, and
# models it saved read by our importers. Not a GPU check, so not by default.
if want hf; then
    if "$PY" -c "import transformers" 2>/dev/null; then part "test_hf_export with transformers" "$PY" test/test_hf_export.py "$BIN"
    else echo "# test_hf_export with transformers skipped: $PY has no transformers"; fi
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
