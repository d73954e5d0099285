#!/usr/bin/env bash
# gpu_session.sh — everything a GPU is needed for, in one command, for a machine held for minutes
# (a rented node by the hour, a shared box, a lease of a quarter of an hour): set up, build,
# `make gpucheck`, `make train`, `make bench`, within a time budget, every log copied out as it grows.
#   dev/gpu_session.sh STEPS [OUTDIR]
#     STEPS  comma-separated, run in the order given: setup (the setup below alone), build (the
#            trainer, gpucheck_ops, the playgrounds), check (`make gpucheck`; check:P+P+... those
#            parts of test/gpucheck.sh), train (`make train`), bench (`make bench`; bench:P+P+...
#            those parts); or a preset: all (build,check,train,bench), core (what the CUDA
#            backend's acceptance needs, most telling first: about 10 minutes on an H100)
#     OUTDIR where the logs are copied every 10 s while a step runs and when it ends, so a
#            machine taken back (or a command cut off) mid-step still leaves what was written.
#   GPU_SESSION_SECONDS=N  the budget: each step runs under a limit of what is left of N seconds
#            (less 10 s for the summary); a step with under 30 s left is skipped. The summary's
#            last line lists the steps cut off or skipped, as the STEPS of a second command.
# Set up: OpenMPI and PCRE2 from .debs/ when it exists (scripts/offline_debs.sh); the binaries
# from .prebuilt/ when it holds this tree's for this GPU (dev/gpu_prebuild.sh); else the CUDA code
# is built for this GPU's architecture only, one job a core. LLMC_COMMIT names the commit in the
# logs where the tree has no .git.
# Logs: dev/gpu_results/<date>-<GPU>-<commit>.log (gpucheck), ...-train.log and ...-bench.md, plus
# <...>-session.txt with what ran and how long each step took. Exit status: 0 when every step ran
# and passed. More: docs/verification.md ("On a machine held for minutes"). Tested without a GPU
# by test/test_gpu_session.sh (stand-ins).
set -u
cd "$(dirname "$0")/.."
steps=${1:?usage: dev/gpu_session.sh build,check[:PARTS],train,bench[:PARTS]|all|core [OUTDIR]}
outdir=${2:-}
case $steps in
all) steps=build,check,train,bench ;;
core) steps=build,check:ops+wgmma+train+resume+pytorch,bench:train+torch,train,check:playgrounds+hf,bench:wgmma+notune ;;
esac
budget=${GPU_SESSION_SECONDS:-0}   # 0: no budget
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_session: GPU_SESSION_SECONDS must be a whole number of seconds, not '$budget'"; exit 2; }
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
budget_says=; [ "$budget" -gt 0 ] && budget_says=", a budget of $budget s"
note "# gpu_session $steps on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)," \
     "commit $LLMC_COMMIT, $(date -u '+%F %T') UTC, nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*'), $gencode$budget_says"
status=0
unfinished=()   # the steps the budget cut off or skipped, to name for a second command
save_logs() { save dev/gpu_results/*"-$LLMC_COMMIT".log dev/gpu_results/*"-$LLMC_COMMIT"-train.log dev/gpu_results/*"-$LLMC_COMMIT"-bench.md; }
run_step() {  # run_step NAME COMMAND...: runs it (under what is left of the budget), notes its time and exit status, saves new logs
    local name=$1 t0=$SECONDS rc saver limit=(); shift
    if [ "$budget" -gt 0 ]; then
        local left=$((budget - SECONDS - 10))
        if [ $left -lt 30 ]; then note "$name: skipped, $((budget - SECONDS)) s of the $budget s budget left"; status=1; unfinished+=("$step"); return; fi
        limit=(timeout -k 10 $left)
    fi
    if [ -n "$outdir" ]; then (while sleep 10; do save_logs; done) & saver=$!; fi
    "${limit[@]}" "$@"; rc=$?
    [ -n "$outdir" ] && { kill "$saver" 2>/dev/null; wait "$saver" 2>/dev/null; }
    if [ ${#limit[@]} -gt 0 ] && { [ $rc = 124 ] || [ $rc = 137 ]; }; then note "$name: cut off at the budget's end, $((SECONDS - t0)) s"; unfinished+=("$step")
    else note "$name: exit $rc, $((SECONDS - t0)) s"; fi
    save_logs
    [ $rc = 0 ] || status=1
}
# .prebuilt/ (dev/gpu_prebuild.sh, made before the session on a machine with the same nvcc): its
# binaries go into place, newer than their sources so that make keeps them, where its manifest
# names these sources and this GPU's gencode and every library they load is found here. Before
# the first step, whatever the steps: a second command on a fresh machine (the summary's
# unfinished steps, without build) would otherwise have make compile everything in its first step
use_prebuilt() {
    [ -f .prebuilt/manifest ] || return 0
    local want have f missing=
    want=$(printf 'sources %s\ngencode %s' "$(bash dev/gpu_prebuild.sh --hash)" "$gencode")
    have=$(grep -E '^(sources|gencode) ' .prebuilt/manifest)
    if [ "$have" != "$want" ]; then
        note "prebuilt: .prebuilt/ was built from other sources or for another GPU ($(grep '^gencode' .prebuilt/manifest)): building here"
        return 0
    fi
    local bins=($(cd .prebuilt && find . -type f ! -name manifest | sed 's|^\./||' | sort))
    for f in "${bins[@]}"; do
        ldd ".prebuilt/$f" 2>/dev/null | grep -q 'not found' && missing+=" $f ($(ldd ".prebuilt/$f" | grep -m1 'not found' | awk '{print $1}'))"
    done
    if [ -n "$missing" ]; then note "prebuilt: a library is missing here for$missing: building here"; return 0; fi
    for f in "${bins[@]}"; do mkdir -p "$(dirname "$f")"; cp ".prebuilt/$f" "$f"; touch "$f"; done
    note "prebuilt: ${#bins[@]} binaries from .prebuilt/ ($(grep '^host_arch' .prebuilt/manifest)), of these sources, for $gencode"
}
use_prebuilt
for step in ${steps//,/ }; do
    parts=; [[ $step == *:* ]] && parts=${step#*:} && parts=${parts//+/ }
    case $step in
    build) run_step build make -j"$(nproc)" NVCC_GENCODE="$gencode" all build/gpucheck_ops dev-cuda ;;
    check) run_step gpucheck make gpucheck NVCC_GENCODE="$gencode" ;;
    check:?*) run_step "gpucheck ($parts)" make gpucheck NVCC_GENCODE="$gencode" GPUCHECK_PARTS="$parts" ;;
    train) run_step train bash -o pipefail -c "make train NVCC_GENCODE='$gencode' 2>&1 | tee -a $prefix-train.log" ;;
    bench) run_step bench make bench NVCC_GENCODE="$gencode" ;;
    bench:?*) run_step "bench ($parts)" make bench NVCC_GENCODE="$gencode" BENCH_PARTS="$parts" ;;
    setup) ;;  # (the setup above alone: .debs/, .prebuilt/)
    *) note "unknown step '$step' (setup, build, check[:PARTS], train, bench[:PARTS], or all, core)"; status=1 ;;
    esac
done
[ ${#unfinished[@]} -gt 0 ] && note "not finished within the budget: $(IFS=,; echo "${unfinished[*]}") (dev/gpu_session.sh $(IFS=,; echo "${unfinished[*]}") OUTDIR runs them)"
exit $status
