#!/usr/bin/env bash
# gpu_session.sh — everything a GPU is needed for, in one command, for a machine held for minutes
# (a rented node by the hour, a shared box): set up, build, `make gpucheck`, `make bench`.
#
#   dev/gpu_session.sh STEPS [OUTDIR]
#     STEPS  comma-separated, run in the order given: build, check, train, bench; or all (= the
#            four). check honours GPUCHECK_PARTS (test/gpucheck.sh), bench BENCH_PARTS and
#            BENCH_MODELS (Makefile); train is `make train` (GPT-2 124M on the shipped data,
#            300 steps), its output kept in ...-train.log.
#     OUTDIR where the logs are copied every 10 s while a step runs and when it ends, so a
#            machine taken back (or a command cut off) mid-step still leaves what was written.
#
# Set up: OpenMPI and PCRE2 from .debs/ when that folder exists (scripts/offline_debs.sh: for
# machines without a package mirror); the CUDA code is built only for this GPU's architecture
# (sm_90a on an H100/H200: half the compile time of the default sm_90a + sm_80), with one job
# per core. LLMC_COMMIT names the commit in the logs where the tree has no .git.
# Logs: dev/gpu_results/<date>-<GPU>-<commit>.log (gpucheck), ...-train.log and ...-bench.md, plus
# <...>-session.txt with what ran and how long each step took. Exit status: 0 when every step
# passed.
set -u
cd "$(dirname "$0")/.."
steps=${1:?usage: dev/gpu_session.sh build,check,train,bench|all [OUTDIR]}
outdir=${2:-}
[ "$steps" = all ] && steps=build,check,train,bench
[ -d .debs ] && source scripts/offline_debs.sh use .debs
export PATH=$PATH:/usr/local/cuda/bin
command -v nvidia-smi >/dev/null && nvidia-smi -L | grep -q '^GPU' || { echo "gpu_session: no GPU here (nvidia-smi lists none)"; exit 2; }
export LLMC_COMMIT=${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d . )   # 9.0 -> 90
arch=$cc; [ "$cc" = 90 ] && arch=90a   # Hopper's wgmma/setmaxnreg need the arch-specific target
gencode="-gencode=arch=compute_$arch,code=sm_$arch"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
mkdir -p dev/gpu_results
prefix=dev/gpu_results/$(date -u +%F)-$gpu-$LLMC_COMMIT
summary=$prefix-session.txt
save() { [ -n "$outdir" ] && mkdir -p "$outdir" && cp -f "$@" "$outdir"/ 2>/dev/null; return 0; }
note() { echo "$*" | tee -a "$summary"; save "$summary"; }
note "# gpu_session $steps on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)," \
     "commit $LLMC_COMMIT, $(date -u '+%F %T') UTC, nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*'), $gencode"
status=0
save_logs() { save dev/gpu_results/*"-$LLMC_COMMIT".log dev/gpu_results/*"-$LLMC_COMMIT"-train.log dev/gpu_results/*"-$LLMC_COMMIT"-bench.md; }
run_step() {  # run_step NAME COMMAND...: runs it, notes its time and exit status, saves new logs
    local name=$1 t0=$SECONDS rc saver; shift
    if [ -n "$outdir" ]; then (while sleep 10; do save_logs; done) & saver=$!; fi
    "$@"; rc=$?
    [ -n "$outdir" ] && { kill "$saver" 2>/dev/null; wait "$saver" 2>/dev/null; }
    note "$name: exit $rc, $((SECONDS - t0)) s"
    save_logs
    [ $rc = 0 ] || status=1
}
for step in ${steps//,/ }; do
    case $step in
    build) run_step build make -j"$(nproc)" NVCC_GENCODE="$gencode" all build/gpucheck_ops dev-cuda ;;
    check) run_step gpucheck make gpucheck NVCC_GENCODE="$gencode" ;;
    train) run_step train bash -o pipefail -c "make train NVCC_GENCODE='$gencode' 2>&1 | tee -a $prefix-train.log" ;;
    bench) run_step bench make bench NVCC_GENCODE="$gencode" ;;
    *) note "unknown step '$step' (build, check, train, bench or all)"; status=1 ;;
    esac
done
exit $status
