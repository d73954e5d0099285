#!/usr/bin/env bash
# gpu_sanitize — NVIDIA's compute-sanitizer over the CUDA backend on a real GPU (`make gpucheck`,
# part "sanitize"): what neither the comparisons against the CPU nor the emulator can see.
#   memcheck   out-of-bounds and misaligned accesses, and the hardware's own exceptions (the
#              emulator catches only accesses past a buffer's end, by a guard page)
#   racecheck  shared-memory hazards: every one of the run, where the emulator sees a race only
#              if one of its two schedules changes a result
#   synccheck  barriers used wrongly: __syncthreads in divergent code, a warp collective whose
#              mask names lanes that do not take part
#   initcheck  reads of global memory that nothing wrote (a gradient buffer never zeroed, a
#              padded row read by a 16-byte load)
# Each tool runs over two programs: build/gpucheck_ops (every kernel at odd shapes, both dtypes)
# and a 4-step bf16 training of d2 with 2 micro-steps a step, validation, sampling and a
# checkpoint (the whole step on the GPU).
# A verdict is "ok" only when the sanitizer ran (its "ERROR SUMMARY: 0 errors" line is there),
# found nothing and the program itself succeeded. Where the sanitizer says "Device not supported"
# (a GPU it cannot instrument, such as one passed through gVisor) the part is skipped with that
# line, as where there is no sanitizer at all.
# usage: test/gpu_sanitize.sh OPS_BINARY TRAIN_GPT
#   SANITIZER       the sanitizer's command [compute-sanitizer]
#   SANITIZE_TOOLS  which tools [memcheck racecheck synccheck initcheck]
#   SANITIZE_LIMIT  seconds per program and tool [300] (a program runs 10-100× slower under it)
# Test of this script's verdicts (with a stand-in sanitizer): test/test_gpu_sanitize.sh.
set -u
ops=${1:?usage: test/gpu_sanitize.sh OPS_BINARY TRAIN_GPT}
bin=${2:?usage: test/gpu_sanitize.sh OPS_BINARY TRAIN_GPT}
san=${SANITIZER:-compute-sanitizer}
command -v "$san" >/dev/null || { echo "# sanitize skipped: no $san on this machine (it comes with the CUDA toolkit)"; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
train=("$bin" --device cuda --precision bf16 --model d2 --batch-size 2 --seq-len 64 --total-batch-tokens 256
       --steps 4 --lr 1e-3 --val-every 2 --val-steps 1 --sample-every 4 --gen-tokens 4
       --output-dir "$tmp/ckpt" --checkpoint-every 2 --seed 5)
found=86   # the sanitizer's exit status when it reports an error (--error-exitcode)

sanitize() {  # sanitize TOOL NAME PROGRAM ARGS...: one "ok"/"not ok" line, the report on failure
    local tool=$1 name=$2 rc out=$tmp/out; shift 2
    timeout -k 10 "${SANITIZE_LIMIT:-300}" "$san" --tool "$tool" --error-exitcode $found "$@" >"$out" 2>&1; rc=$?
    # the program's output stays in $out (its own "ok" lines are not this check's); on a failure
    # the relevant part of it is shown as "# " comments, which no summary counts
    local what="$tool: $name"
    if grep -qi 'device not supported' "$out"; then  # e.g. under gVisor: the tool cannot attach
        echo "# sanitize skipped: compute-sanitizer cannot check this GPU here ($(grep -i -m1 'device not supported' "$out" | sed 's/^=* *//'))"
        exit 0
    elif [ $rc = 124 ] || [ $rc = 137 ]; then echo "not ok - $what ran past ${SANITIZE_LIMIT:-300} s"
    elif [ $rc = $found ]; then
        grep '^=========' "$out" | head -40 | sed 's/^/# /'
        local summary; summary=$(grep -o 'ERROR SUMMARY: [0-9]* errors*' "$out" | tail -1)
        echo "not ok - $what: ${summary:-errors reported}"
    elif [ $rc != 0 ]; then
        { grep -m10 '^not ok' "$out"; tail -5 "$out"; } | sed 's/^/# /'
        echo "not ok - $what: the program failed under the sanitizer (exit $rc)"
    elif ! grep -q 'ERROR SUMMARY: 0 errors' "$out"; then
        tail -5 "$out" | sed 's/^/# /'
        echo "not ok - $what: no 'ERROR SUMMARY: 0 errors' line (did the sanitizer run?)"
    else echo "ok - $what: no errors"; fi
}
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    sanitize "$tool" "gpucheck_ops (every kernel, fp32 and bf16)" "$ops"
    rm -rf "$tmp/ckpt"
    sanitize "$tool" "bf16 training (d2, 4 steps of 2 micro-steps, validation, sampling, checkpoints)" "${train[@]}"
done
