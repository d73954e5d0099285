#!/usr/bin/env bash
# test_gpu_sanitize — the verdicts of test/gpu_sanitize.sh (make gpucheck's compute-sanitizer
# part), checked without a GPU: a stand-in sanitizer takes the real one's arguments (--tool T
# --error-exitcode N PROGRAM...) and either runs the program and reports no errors, or reports
# a hazard and exits N, or prints no summary at all. The training it runs is the real command
# line on the emulated GPU (build/train_gpt_simt), so a flag the trainer refuses fails here.
# usage: test/test_gpu_sanitize.sh TRAIN_GPT_SIMT. Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
bin=${1:?usage: test/test_gpu_sanitize.sh TRAIN_GPT_SIMT}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/sanitizer" <<'SH'
#!/usr/bin/env bash
# stand-in for compute-sanitizer: MOCK=pass (run the program), hazard:TOOL, silent, unsupported
[ "$1" = --tool ] && [ "$3" = --error-exitcode ] || { echo "mock: unexpected arguments: $*"; exit 3; }
tool=$2 code=$4; shift 4
case ${MOCK:-pass} in
    hazard:$tool) echo "========= Error: Race reported between Write access at flash_forward_kernel+0x1a0"
                  echo "========= ERROR SUMMARY: 1 error"; exit "$code" ;;
    silent) "$@" >/dev/null 2>&1; exit $? ;;
    unsupported) echo "========= Error: Device not supported"; echo "========= ERROR SUMMARY: 1 error"; exit 255 ;;
    *) "$@"; rc=$?; echo "========= ERROR SUMMARY: 0 errors"; exit $rc ;;
esac
SH
printf '#!/bin/sh\nsleep 20\n' >"$tmp/slow"
chmod +x "$tmp/sanitizer" "$tmp/slow"
run() { SANITIZER=$tmp/sanitizer bash test/gpu_sanitize.sh "$@" 2>&1; }
expect() {  # expect NAME OUTPUT OK_COUNT NOT_OK_COUNT [PATTERN]: the wrapper's lines as wanted
    local name=$1 out=$2 p f
    p=$(echo "$out" | grep -c '^ok - '); f=$(echo "$out" | grep -c '^not ok - ')
    if [ "$p" = "$3" ] && [ "$f" = "$4" ] && { [ -z "${5:-}" ] || echo "$out" | grep -q -- "$5"; }; then
        echo "ok - gpu_sanitize: $name ($p ok, $f not ok)"
    else echo "$out" | sed 's/^/# /'; echo "not ok - gpu_sanitize: $name (wanted $3 ok, $4 not ok${5:+, '$5'}; got $p, $f)"; fi
}
expect "a clean run: the training's command line runs (emulated GPU) and both programs pass" \
    "$(SANITIZE_TOOLS=memcheck run /bin/true "$bin")" 2 0 "ok - memcheck: bf16 training"
expect "a hazard fails that tool's checks, quoting the report and the error count" \
    "$(MOCK=hazard:racecheck SANITIZE_TOOLS='memcheck racecheck' run /bin/true /bin/true)" 2 2 "racecheck: gpucheck_ops.*ERROR SUMMARY: 1 error"
expect "the hazard's report is shown" \
    "$(MOCK=hazard:racecheck SANITIZE_TOOLS=racecheck run /bin/true /bin/true)" 0 2 "^# ========= Error: Race reported"
expect "a program that fails under the sanitizer fails" \
    "$(SANITIZE_TOOLS=initcheck run /bin/false /bin/true)" 1 1 "initcheck: gpucheck_ops.*the program failed"
expect "no ERROR SUMMARY line (the sanitizer did not run) is not a pass" \
    "$(MOCK=silent SANITIZE_TOOLS=synccheck run /bin/true /bin/true)" 0 2 "did the sanitizer run"
expect "a program past SANITIZE_LIMIT fails" \
    "$(SANITIZE_LIMIT=1 SANITIZE_TOOLS=memcheck run "$tmp/slow" /bin/true)" 1 1 "ran past 1 s"
expect "no sanitizer on the machine: skipped with one line, nothing counted" \
    "$(SANITIZER=$tmp/none bash test/gpu_sanitize.sh /bin/true /bin/true 2>&1)" 0 0 "^# sanitize skipped"
expect "a GPU the sanitizer cannot instrument: skipped with its words, nothing counted" \
    "$(MOCK=unsupported run /bin/true /bin/true)" 0 0 "^# sanitize skipped: .*Device not supported"
