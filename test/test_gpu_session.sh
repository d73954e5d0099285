#!/usr/bin/env bash
# test_gpu_session — dev/gpu_session.sh (build, gpucheck, train and bench on a GPU machine held
# for minutes) without a GPU. The script only ever runs where GPU time is short, so a mistake in
# it (a step that never starts, a part name that selects nothing, logs that never leave the
# machine, a budget that lets the lease end before the summary is written) costs that time. Here
# it runs in a copy of the tree against a stand-in nvidia-smi, nvcc and make (the stand-in make
# records each call, writes the log that the real target
# writes, and sleeps or fails on request), and:
#   - the core preset runs build, gpucheck with the backend's parts, bench with train+torch, make
#     train, the playgrounds, bench with wgmma and notune, in that order, built for sm_90a on a 9.0 GPU
#     (sm_80 on an 8.0 one)
#   - each part the core preset names is one test/gpucheck.sh or the Makefile's bench knows, and
#     gpucheck.sh refuses a part it does not know (exit 2, naming it) before running anything
#   - while a step runs, its log reaches OUTDIR within the 10 s copy interval
#   - GPU_SESSION_SECONDS: a step is cut off at the budget's end, the steps after it skipped, and
#     each is noted in the session summary, which reaches OUTDIR and ends with those steps as a
#     second command's STEPS; a non-number is refused
#   - the exit status: 0 when every step passed, 1 when one failed (the later steps still run),
#     2 without a GPU; an unknown step is named
#   - dev/gpu_prebuild.sh builds the build step's binaries in a copy of the tree, for sm_90a and
#     -march=x86-64-v3, into .prebuilt/ with a manifest of the sources' hash; the session puts
#     them in place before its first step (build or not) where the manifest matches the tree and
#     the GPU and ldd finds their libraries, and otherwise says why it builds (other sources,
#     another GPU, a library missing)
# usage: test/test_gpu_session.sh     Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/tree/dev/cuda" "$tmp/tree/scripts" "$tmp/tree/llmc"
cp dev/gpu_session.sh dev/gpu_prebuild.sh "$tmp/tree/dev/"
echo "all:" >"$tmp/tree/Makefile"; echo "// a header" >"$tmp/tree/llmc/a.h"; echo "// a playground" >"$tmp/tree/dev/cuda/x.cu"
cp scripts/offline_debs.sh "$tmp/tree/scripts/"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
[ -n "${STANDIN_NO_GPU:-}" ] && exit 9
case "$*" in
-L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
*compute_cap*) echo "${STANDIN_CC:-9.0}" ;;
*name,driver_version,memory.total*) echo "Stand-in GPU, 580.00, 81559 MiB" ;;
*name*) echo "Stand-in GPU" ;;
esac
EOF
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' >"$tmp/bin/nvcc"
# the stand-in make: records each call's arguments (make exports a command line's VAR=VALUE to
# its recipes, so GPUCHECK_PARTS=... reaches test/gpucheck.sh); for gpucheck and bench it writes
# to the log the real recipe appends to; STANDIN_SLEEP="TARGET:SECONDS" sleeps after writing,
# STANDIN_FAIL=TARGET exits 1
cat >"$tmp/bin/make" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$STANDIN_CALLS"
target=
for a in "$@"; do case $a in -*|*=*) ;; *) target=${target:-$a} ;; esac; done
log=dev/gpu_results/$(date -u +%F)-Stand-in_GPU-$LLMC_COMMIT
case $target in
gpucheck) mkdir -p dev/gpu_results; echo "ok - stand-in check" >>"$log.log" ;;
bench) mkdir -p dev/gpu_results; echo "| stand-in bench |" >>"$log-bench.md" ;;
train) echo "step 1/300 | loss 10.9" ;;
esac
if [ -n "${STANDIN_MAKE_CREATES:-}" ]; then  # (gpu_prebuild.sh's build: each target made, naming how)
    for a in "$@"; do case $a in -*|*=*) ;; *) mkdir -p "$(dirname "$a")"; echo "built by make $*" >"$a" ;; esac; done
fi
[ "${STANDIN_SLEEP%%:*}" = "$target" ] && sleep "${STANDIN_SLEEP#*:}"
[ "${STANDIN_FAIL:-}" = "$target" ] && exit 1
exit 0
EOF
# the stand-in ldd: STANDIN_LDD_MISSING=1 reports a library not found
cat >"$tmp/bin/ldd" <<'EOF'
#!/bin/sh
echo "	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x0)"
[ -n "${STANDIN_LDD_MISSING:-}" ] && echo "	libmpi.so.40 => not found"
exit 0
EOF
chmod +x "$tmp/bin/"*
export STANDIN_CALLS=$tmp/calls.txt
session() {  # session NAME [VAR=VALUE...] -- STEPS: runs the script in a fresh copy of the tree
    local name=$1; shift
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done; shift
    rm -rf "$tmp/tree/dev/gpu_results" "$tmp/out_$name"; : >"$STANDIN_CALLS"
    env PATH="$tmp/bin:$PATH" LLMC_COMMIT=test STANDIN_SLEEP= "${vars[@]}" \
        bash "$tmp/tree/dev/gpu_session.sh" "$1" "$tmp/out_$name" >"$tmp/$name.txt" 2>&1
    echo $? >"$tmp/$name.rc"
    cp "$STANDIN_CALLS" "$tmp/$name.calls"
}
check() {  # check DESCRIPTION COMMAND...: ok when the command succeeds
    local what=$1; shift
    if "$@"; then echo "ok - gpu_session: $what"; else echo "not ok - gpu_session: $what"; fi
}
day=$(date -u +%F)

session core -- core
expected="-j$(nproc) NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a all build/gpucheck_ops dev-cuda
gpucheck NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a GPUCHECK_PARTS=ops wgmma train resume pytorch
bench NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a BENCH_PARTS=train torch
train NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a
gpucheck NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a GPUCHECK_PARTS=playgrounds hf
bench NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a BENCH_PARTS=wgmma notune"
check "core: build, gpucheck (the backend's parts), bench (train torch), make train, the playgrounds, bench (wgmma notune), in order, for sm_90a" \
    diff <(echo "$expected") "$tmp/core.calls"
check "core: exit 0 when every step passed" test "$(cat "$tmp/core.rc")" = 0
check "core: the four logs reach OUTDIR (gpucheck's, train's, bench's and the summary)" \
    test -s "$tmp/out_core/$day-Stand-in_GPU-test.log" -a -s "$tmp/out_core/$day-Stand-in_GPU-test-train.log" \
         -a -s "$tmp/out_core/$day-Stand-in_GPU-test-bench.md" -a -s "$tmp/out_core/$day-Stand-in_GPU-test-session.txt"
check "core: the summary names each step with its exit status" \
    test "$(grep -cE '^(build|gpucheck \(ops wgmma train resume pytorch\)|bench \(train torch\)|gpucheck \(playgrounds hf\)|train|bench \(wgmma notune\)): exit 0, [0-9]+ s$' \
            "$tmp/out_core/$day-Stand-in_GPU-test-session.txt")" = 6

# the preset's parts exist: gpucheck.sh's list, the Makefile's bench parts
core_line=$(grep -m1 '^core) steps=' dev/gpu_session.sh)
gparts=$(echo "$core_line" | grep -o 'check:[a-z0-9+-]*' | cut -d: -f2 | tr '+\n' '  ')
bparts=$(echo "$core_line" | grep -o 'bench:[a-z0-9+-]*' | cut -d: -f2 | tr '+\n' '  ')
known_g=$(sed -n 's/^all_parts="\(.*\)"$/\1/p' test/gpucheck.sh)
known_b=$(sed -n "s/.*make bench: unknown part '\$\$part' (\([^)]*\)).*/\1/p" Makefile)
unknown=
for p in $gparts; do [[ " $known_g " == *" $p "* ]] || unknown+=" check:$p"; done
for p in $bparts; do [[ " $known_b " == *" $p "* ]] || unknown+=" bench:$p"; done
check "core's parts ($gparts; $bparts) are all known to gpucheck.sh ($known_g) and make bench" \
    test -n "$gparts" -a -n "$bparts" -a -n "$known_g" -a -n "$known_b" -a -z "$unknown"
out=$(cd "$root" && GPUCHECK_PARTS="ops trian" bash test/gpucheck.sh 2>&1); rc=$?
check "gpucheck.sh refuses a part it does not know, before running anything (exit 2, naming it)" \
    test "$rc" = 2 -a "$(echo "$out" | grep -c "'trian', which is not a part")" = 1 -a "$(echo "$out" | grep -c '^==')" = 0

session a100 STANDIN_CC=8.0 -- build
check "an 8.0 GPU: built for sm_80" grep -q "NVCC_GENCODE=-gencode=arch=compute_80,code=sm_80 all" "$tmp/a100.calls"

# a step that sleeps past the budget: its log reaches OUTDIR while it runs, it is cut off, the
# step after it is skipped, and the summary says both
session budget GPU_SESSION_SECONDS=43 STANDIN_SLEEP=gpucheck:120 -- check:ops,bench
summary=$tmp/out_budget/$day-Stand-in_GPU-test-session.txt
check "budget: the running step's log reached OUTDIR while it ran" test -s "$tmp/out_budget/$day-Stand-in_GPU-test.log"
check "budget: the step is cut off at the budget's end and noted" grep -qE '^gpucheck \(ops\): cut off at the budget.s end, 3[2-6] s$' "$summary"
check "budget: the next step is skipped and noted, the exit status 1" \
    test "$(grep -cE '^bench: skipped, [0-9]+ s of the 43 s budget left$' "$summary")" = 1 -a "$(cat "$tmp/budget.rc")" = 1 \
         -a "$(grep -c '^bench ' "$tmp/budget.calls")" = 0
check "budget: the summary's first line states it" grep -q 'a budget of 43 s$' "$summary"
check "budget: the summary's last line names the unfinished steps as a second command's" \
    test "$(tail -1 "$summary")" = "not finished within the budget: check:ops,bench (dev/gpu_session.sh check:ops,bench OUTDIR runs them)"
session nan GPU_SESSION_SECONDS=9m -- build
check "budget: a non-number is refused (exit 2), nothing run" \
    test "$(cat "$tmp/nan.rc")" = 2 -a ! -s "$tmp/nan.calls" -a "$(grep -c "GPU_SESSION_SECONDS must be a whole number of seconds, not '9m'" "$tmp/nan.txt")" = 1

session fail STANDIN_FAIL=gpucheck -- check:ops,bench:train,nonsense
check "a failing step: exit 1, the later steps still run, an unknown step named" \
    test "$(cat "$tmp/fail.rc")" = 1 -a "$(grep -c '^bench ' "$tmp/fail.calls")" = 1 \
         -a "$(grep -c "unknown step 'nonsense'" "$tmp/fail.txt")" = 1 -a "$(grep -c '^gpucheck (ops): exit 1' "$tmp/fail.txt")" = 1
session nogpu STANDIN_NO_GPU=1 -- core
check "no GPU: exit 2 with one line, nothing run" \
    test "$(cat "$tmp/nogpu.rc")" = 2 -a ! -s "$tmp/nogpu.calls" -a "$(cat "$tmp/nogpu.txt")" = "gpu_session: no GPU here (nvidia-smi lists none)"

# dev/gpu_prebuild.sh (here, before a session): the build step's binaries, made in a copy of the
# tree, into .prebuilt/ with the manifest
: >"$STANDIN_CALLS"
(cd "$tmp/tree" && env PATH="$tmp/bin:$PATH" STANDIN_MAKE_CREATES=1 bash dev/gpu_prebuild.sh >"$tmp/prebuild.txt" 2>&1)
echo $? >"$tmp/prebuild.rc"; cp "$STANDIN_CALLS" "$tmp/prebuild.calls"
pre=$tmp/tree/.prebuilt
check "prebuild: one make in a copy of the tree, for sm_90a with the host code for x86-64-v3, of the build step's binaries" \
    test "$(cat "$tmp/prebuild.calls")" = "-j$(nproc) --no-print-directory NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a HOST_ARCH=x86-64-v3 train_gpt tokenize build/gpucheck_ops build/dev_x" \
         -a "$(cat "$tmp/prebuild.rc")" = 0 -a ! -e "$tmp/tree/train_gpt"
check "prebuild: .prebuilt/ holds them at their paths, and a manifest of the sources' hash, the gencode and the host's -march" \
    test -s "$pre/train_gpt" -a -s "$pre/tokenize" -a -s "$pre/build/gpucheck_ops" -a -s "$pre/build/dev_x" \
         -a "$(cat "$pre/manifest")" = "sources $(cd "$tmp/tree" && bash dev/gpu_prebuild.sh --hash)
gencode -gencode=arch=compute_90a,code=sm_90a
host_arch x86-64-v3"
prebuilt_session() {  # prebuilt_session NAME [VAR=VALUE...]: STEPS (build by default) in a tree whose binaries come only from .prebuilt/
    rm -rf "$tmp/tree/train_gpt" "$tmp/tree/tokenize" "$tmp/tree/build"
    local name=$1; shift
    session "$name" "$@" -- "${STEPS:-build}"
    sum="$tmp/out_$name/$day-Stand-in_GPU-test-session.txt"
}
prebuilt_session prebuilt
check "prebuilt: the build step puts the 4 binaries in place, newer than the sources, says so, and make still runs (finding them made)" \
    test "$(cat "$tmp/tree/build/dev_x")" = "$(cat "$pre/build/dev_x")" -a -s "$tmp/tree/train_gpt" -a "$tmp/tree/train_gpt" -nt "$tmp/tree/llmc/a.h" \
         -a "$(grep -c '^prebuilt: 4 binaries from .prebuilt/ (host_arch x86-64-v3), of these sources, for -gencode=arch=compute_90a,code=sm_90a$' "$sum")" = 1 \
         -a "$(grep -c ' all build/gpucheck_ops dev-cuda$' "$tmp/prebuilt.calls")" = 1
echo "// changed after the prebuild" >>"$tmp/tree/llmc/a.h"
prebuilt_session changed
check "prebuilt: sources changed since: not used, the summary says so, make builds" \
    test ! -e "$tmp/tree/train_gpt" -a "$(grep -c '^prebuilt: .prebuilt/ was built from other sources or for another GPU' "$sum")" = 1 \
         -a "$(grep -c ' all build/gpucheck_ops dev-cuda$' "$tmp/changed.calls")" = 1
(cd "$tmp/tree" && sed -i "s/^sources .*/sources $(bash dev/gpu_prebuild.sh --hash)/" .prebuilt/manifest)
prebuilt_session a100_prebuilt STANDIN_CC=8.0
check "prebuilt: an 8.0 GPU and binaries for sm_90a: not used" \
    test ! -e "$tmp/tree/train_gpt" -a "$(grep -c '^prebuilt: .prebuilt/ was built from other sources or for another GPU (gencode -gencode=arch=compute_90a,code=sm_90a): building here$' "$sum")" = 1
prebuilt_session missing STANDIN_LDD_MISSING=1
check "prebuilt: a library ldd does not find here: not used, the library named" \
    test ! -e "$tmp/tree/train_gpt" -a "$(grep -c '^prebuilt: a library is missing here for build/dev_x (libmpi.so.40) .*: building here$' "$sum")" = 1
STEPS=bench:wgmma prebuilt_session second_command
check "prebuilt: a second command without build (the summary's unfinished steps) still takes them, before its first step" \
    test "$(cat "$tmp/tree/build/dev_x")" = "$(cat "$pre/build/dev_x")" -a "$tmp/tree/train_gpt" -nt "$tmp/tree/llmc/a.h" \
         -a "$(sed -n 2p "$sum")" = "prebuilt: 4 binaries from .prebuilt/ (host_arch x86-64-v3), of these sources, for -gencode=arch=compute_90a,code=sm_90a" \
         -a "$(grep -c '^bench (wgmma): exit 0' "$sum")" = 1 -a "$(grep -c 'all build/gpucheck_ops dev-cuda$' "$tmp/second_command.calls")" = 0
