#!/usr/bin/env bash
# run_tests — the whole CPU suite (`make test`; TEST_QUICK=1: the quick tier, `make test-quick`).
# Each part prints "ok - …" / "not ok - …" lines; this script runs them (two at a time:
# TEST_JOBS), reports them in order, counts, and ends with the summary line "N passed, N failed".
# A part that dies without reporting counts as a failure. Exit status: 0 only if all passed.
# The parts, by kind (what each proves: docs/verification.md, a section a part):
#   the ops and the command line: test_ops, test_cli, test_fuzz, test_form, plot
#   training: test_train, test_vs_pytorch, test_tokenizer, test_llama_convert, test_hf_export
#   parallelism on CPU ranks: test_comm, test_dp, test_tp, test_pp, test_cp
#   the CUDA code without a GPU: test_simt (the emulator itself), simcheck_ops (every CUDA
#     kernel on the emulator against its CPU op, in both schedules), test_ptxas (with nvcc:
#     sm_90a registers and wgmma), dev/cuda (the playgrounds at small shapes), and "emulated
#     GPU": build/train_gpt_simt with --device cuda through test_gpu_train, test_train,
#     test_vs_pytorch, and test_dp, test_tp, test_pp, test_cp with NCCL emulated over MPI
#   the GPU tooling against stand-ins: dev/bench, test_bench_train, test_gpu_session,
#     test_gpu_speed, test_gpu_sanitize, test_offline_debs
# With an nvcc build, ./train_gpt is that build and build/train_gpt_cpu the g++ one: the
# trainer tests run on both (the g++ build's test_dp and test_train quick: the Llama runs and the
# dp = 4 matrix once, on ./train_gpt; the emulated GPU runs Llama in fp32 alone, GPU_TRAIN_QUICK).
# The multi-rank tests, the emulated test_gpu_train and most of test_train train on the Bible
# folded to 250 tokens (test/small_vocab.py, --vocab-size 250): with GPT-2's 50257 the classifier
# is ~16x a d2's blocks.
set -u
cd "$(dirname "$0")/.."
log=build/test.log
mkdir -p build; : > "$log"
pass=0; fail=0

# Parts run TEST_JOBS at a time (default 2; TEST_JOBS=1 runs them one after another), each into
# its own file under build/test_parts; each is reported, in the order listed here, once it and
# every part before it have ended: its failures and diagnostics (the "ok" lines go to the log),
# then its count, its wall time and the cores it kept busy on average (CPU time over wall time).
# Two at once fill the cores that one part leaves idle (a single-threaded step, a rank waiting
# for another, a compiler) on a CI machine of 2 cores; the parts share no files (each works in
# its own mktemp folder; test/small_vocab.py writes its shared data under temporary names).
jobs_max=${TEST_JOBS:-2}
# Each part's OpenMP threads: the cores shared among the parts that run at once (unless
# OMP_NUM_THREADS is set). With two threads each, two parts on 2 cores kept waiting at the end of
# each parallel region for a thread that the other part held, and ran longer than with one thread
# each (dev/cpu_results/2026-12-07-test-threads.log).
cores=$(nproc 2>/dev/null || echo 1)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores / jobs_max > 1 ? cores / jobs_max : 1))}
parts=build/test_parts
rm -rf "$parts"; mkdir -p "$parts"
names=() started=0 shown=0

run_part() {  # run_part N COMMAND... (in a subshell): N.out its output, N.end "status wall-seconds cpu-seconds"
    local n=$1 start=$SECONDS rc; shift
    "$@" >"$parts/$n.out" 2>&1; rc=$?
    times >"$parts/$n.times"  # this subshell's own CPU time and its children's: the part's
    echo "$rc $((SECONDS - start)) $(awk '{ for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } } END { printf "%d", s }' "$parts/$n.times")" \
        >"$parts/$n.end.tmp" && mv "$parts/$n.end.tmp" "$parts/$n.end"
}
report() {  # report N
    local n=$1 name=${names[$1]} rc wall cpu p f
    read -r rc wall cpu <"$parts/$n.end"
    echo "== $name"
    tee -a "$log" <"$parts/$n.out" | grep -v '^ok - ' || true   # show failures and diagnostics only
    p=$(grep -c '^ok - ' "$parts/$n.out")
    f=$(grep -c '^not ok - ' "$parts/$n.out")
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then echo "not ok - $name exited with status $rc" | tee -a "$log"; f=1; fi
    echo "   $name: $p passed, $f failed ($wall s, $(awk -v c="$cpu" -v w="$wall" 'BEGIN { printf "%.1f", (w > 0 ? c / w : 0) }') cores)"
    pass=$((pass + p)); fail=$((fail + f))
}
report_ended() {  # the parts not yet reported whose predecessors all were, as far as they have ended
    while [ "$shown" -lt "$started" ] && [ -e "$parts/$shown.end" ]; do report "$shown"; shown=$((shown + 1)); done
}
part() {  # part NAME COMMAND...: started once fewer than TEST_JOBS parts run
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; report_ended; done
    names[started]=$1; shift
    run_part "$started" "$@" &
    started=$((started + 1))
    report_ended
}

binaries=(./train_gpt)
if [ -x build/train_gpt_cpu ] && ! cmp -s ./train_gpt build/train_gpt_cpu; then binaries+=(build/train_gpt_cpu); fi

if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
dev_playgrounds() {  # each exits 1 if a version is over its bound (dev/cuda/common.cuh)
    local args out
    for args in "attention 1 64 128 2" "attention 1 70 256 2" "attention 1 70 256 4 2" "layernorm 100 768" "layernorm 300 200" "layernorm 40 1600" "classifier 64 1000 1024" "adamw 100003" "matmul 64 48 104" "matmul 40 24 56 17"; do
        set -- $args
        if out=$("build/simt_dev_$1" "${@:2}" 2>&1); then echo "ok - dev/cuda/$1.cu ${*:2}: every version within its bound"
        else echo "$out"; echo "not ok - dev/cuda/$1.cu ${*:2}"; fi
    done
    # time mode (make bench's attention table reads it): v5, v6, the trainer's defaults (--flash-rows
    # auto and --flash-wgmma auto, each pass tried both ways: LLMC_FLASH_TUNE_BLOCKS=1 lets these
    # 4-block launches be), wgmma, ring blocks
    if out=$(LLMC_FLASH_TUNE_BLOCKS=1 build/simt_dev_attention 1 128 128 2 time 2>&1) \
       && [ "$(grep -c '^flash attention: .* (--flash-rows auto, timed at B=1 T=128: ' <<<"$out")" = 3 ] \
       && [ "$(grep -c '^flash attention: .* (--flash-wgmma auto, timed at B=1 T=128: .*; the same bits at its first 3 launches)$' <<<"$out")" = 3 ] \
       && grep -q '^  with --flash-rows auto --flash-wgmma auto --flash-backward fused (the trainer.s defaults; the fused backward ran): forward [0-9.]* ms' <<<"$out" \
       && grep -q '^  with --flash-backward split (the two passes, else the same): backward [0-9.]* ms .*; fused / split time [0-9.]*$' <<<"$out"; then
        echo "ok - dev/cuda/attention.cu 1 128 128 2 time: every version timed, the two autos' three choices each among them, the fused backward against the two passes"
    else echo "$out"; echo "not ok - dev/cuda/attention.cu 1 128 128 2 time"; fi
    # head size 128: the two passes (the default there), fused128 (v27) and chained (v31) beside them
    if out=$(LLMC_FLASH_TUNE_BLOCKS=1 build/simt_dev_attention 1 128 256 2 time 2>&1) \
       && grep -q '^  with --flash-backward fused128 (.*): backward [0-9.]* ms .*; fused / split time [0-9.]*$' <<<"$out" \
       && grep -q '^  with --flash-backward chain (v31 at head size 128.*): backward [0-9.]* ms .*; chained / split time [0-9.]*, chained / fused128 time [0-9.]*$' <<<"$out"; then
        echo "ok - dev/cuda/attention.cu 1 128 256 2 time: at head size 128 fused128 and chained timed beside the two passes"
    else echo "$out"; echo "not ok - dev/cuda/attention.cu 1 128 256 2 time"; fi
}
torch_baselines() {  # make bench's PyTorch side (dev/bench/torch_baselines.py) on tiny CPU shapes
    local args out
    for args in "sdpa 1 32 2 16" "gpt2 124M 1 16" "kernels 64 48 16 100 104 1000" "matmul 64 48 104"; do
        set -- $args
        out=$(/usr/bin/python3 dev/bench/torch_baselines.py "$@" --cpu 2>&1)
        if echo "$out" | tail -1 | /usr/bin/python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
times = [v for k, v in r.items() if k.endswith('_ms')]
sys.exit(0 if r['kind'] == sys.argv[1] and times and all(t > 0 for t in times) else 1)" "$1" 2>/dev/null
        then echo "ok - torch_baselines.py $args --cpu: one JSON line, every time > 0"
        else echo "$out"; echo "not ok - torch_baselines.py $args --cpu"; fi
    done
}
plot() {  # dev/plot.py: a real log (make train's), two runs overlaid with HellaSwag; bad logs in one line
    local tmp r; tmp=$(mktemp -d)
    local log=dev/cpu_results/2026-11-21-make-train-d4.jsonl
    # a second run: the same steps, HellaSwag at three of them, and a resume that logs steps 9-10 again
    /usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][:10]
for r in rows[8:]: rows.append(dict(r, loss=r['loss'] + 1))
for r in rows[:10:4]: r['hellaswag_acc'] = 0.25 + r['step'] / 1000
print('\n'.join(json.dumps(r) for r in rows))" "$log" >"$tmp/b.jsonl"
    r=$(/usr/bin/python3 dev/plot.py "$log" "$tmp/b.jsonl" --label A --label B --ref 124M -o "$tmp/c.png" 2>&1)
    if [ "$(head -c 8 "$tmp/c.png" 2>/dev/null | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$tmp/c.png")" -gt 20000 ] \
       && [ "$r" = "plot.py: 2 run(s), 5 panels -> $tmp/c.png" ]; then echo "ok - dev/plot.py: make train's log and a second run with HellaSwag: a PNG of 5 panels"
    else echo "$r"; echo "not ok - dev/plot.py: the PNG of two runs"; fi
    printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": \n' >"$tmp/bad.jsonl"
    r=$(/usr/bin/python3 dev/plot.py "$tmp/bad.jsonl" -o "$tmp/d.png" 2>&1); local rc=$?
    [ $rc = 2 ] && [ "$(wc -l <<<"$r")" = 1 ] && [[ $r == "plot.py: $tmp/bad.jsonl:2: not a JSON object"* ]] && [ ! -e "$tmp/d.png" ] \
        && echo "ok - dev/plot.py: a malformed line stops it in one line naming the file and line, nothing written" \
        || { echo "$r"; echo "not ok - dev/plot.py: a malformed line (exit $rc)"; }
    printf '{"loss": 2.5}\n' >"$tmp/nostep.jsonl"
    r=$(/usr/bin/python3 dev/plot.py "$tmp/nostep.jsonl" -o "$tmp/d.png" 2>&1); rc=$?
    [ $rc = 2 ] && [[ $r == "plot.py: $tmp/nostep.jsonl:1: a log line needs an integer \"step\""* ]] \
        && echo "ok - dev/plot.py: a line without a step is named too" || { echo "$r"; echo "not ok - dev/plot.py: a line without a step (exit $rc)"; }
    rm -rf "$tmp"
}
if [ -n "${TEST_QUICK:-}" ]; then  # make test-quick: the g++ trainer, one layout of each strategy
    q=build/train_gpt_cpu
    part "test_cli ($q)" bash test/test_cli.sh "$q"
    part test_ops build/test_ops
    part "test_vs_pytorch ($q)" /usr/bin/python3 test/test_vs_pytorch.py "$q"
    part "test_train ($q, resume)" env TRAIN_RESUME_ONLY=1 TRAIN_QUICK=1 bash test/test_train.sh "$q"
    part "test_dp ($q, dp=2, quick: ZeRO 0-3)" env DP_SIZES=2 DP_QUICK=1 bash test/test_dp.sh "$q"
    part "test_tp ($q, quick: tp=2 and dp=2 x tp=2 ZeRO-3, with and without --sp)" env TP_QUICK=1 bash test/test_tp.sh "$q"
    part "test_pp ($q, quick: 1f1b, tp x pp, interleaved)" env PP_QUICK=1 bash test/test_pp.sh "$q"
    part "test_cp ($q, quick: zigzag, dp x cp ZeRO-3)" env CP_QUICK=1 bash test/test_cp.sh "$q"
    part "test_form (headers, docs/ links)" bash test/test_form.sh
    part "test_fuzz ($q, 320 damaged files)" /usr/bin/python3 test/test_fuzz.py "$q" 320
else
# The longest parts first (the emulated GPU's), so that the last two to end end close together.
part "test_gpu_train (emulated GPU)" env GPU_TRAIN_QUICK=1 GPU_TRAIN_VOCAB=250 bash test/test_gpu_train.sh build/train_gpt_simt
part "simcheck_ops (CUDA kernels emulated, thread order)" env SIMT_ORDER=forward build/simcheck_ops
# (the second run also has the emulated cuBLASLt refuse its heuristic's first algorithm each
# time, as cuBLASLt may: every product then runs on the next one, matmul.cuh's lt_matmul)
part "simcheck_ops (CUDA kernels emulated, reverse order; cuBLASLt refusing its first algorithm)" env SIMT_ORDER=reverse SIMT_LT_REFUSE=1 build/simcheck_ops
part "dev/cuda playgrounds (emulated)" dev_playgrounds
part "test_train (emulated GPU)" env DEVICE=cuda TRAIN_QUICK=1 bash test/test_train.sh build/train_gpt_simt
part "test_dp, NCCL path (emulated GPU, NCCL over MPI, dp=2)" env DEVICE=cuda COMM=nccl DP_SIZES=2 DP_QUICK=1 bash test/test_dp.sh build/train_gpt_simt
part test_ops build/test_ops
part "test_comm (4 ranks)" mpirun --oversubscribe -np 4 build/test_comm
part "test_comm (3 ranks)" mpirun --oversubscribe -np 3 build/test_comm
for b in "${binaries[@]}"; do
    part "test_cli ($b)" bash test/test_cli.sh "$b"
    if [ "$b" = ./train_gpt ]; then part "test_train ($b)" bash test/test_train.sh "$b"
    else part "test_train ($b, quick)" env TRAIN_QUICK=1 bash test/test_train.sh "$b"; fi
    part "test_vs_pytorch ($b)" /usr/bin/python3 test/test_vs_pytorch.py "$b"
    part "test_llama_convert ($b)" /usr/bin/python3 test/test_llama_convert.py "$b"
    # (the g++ build beside an nvcc one: dp = 2 and DP_QUICK, the collectives of every kind; its
    # dp = 4 matrix, other ZeRO stages, signals and resharding are the same code as ./train_gpt's)
    if [ "$b" = ./train_gpt ]; then part "test_dp ($b)" bash test/test_dp.sh "$b"
    else part "test_dp ($b, dp=2, quick)" env DP_SIZES=2 DP_QUICK=1 bash test/test_dp.sh "$b"; fi
done
part "test_hf_export (./train_gpt)" /usr/bin/python3 test/test_hf_export.py ./train_gpt
part "test_tp (./train_gpt)" bash test/test_tp.sh ./train_gpt
part "test_pp (./train_gpt)" bash test/test_pp.sh ./train_gpt
part "test_cp (./train_gpt)" bash test/test_cp.sh ./train_gpt
part "test_fuzz (./train_gpt, 320 damaged files)" /usr/bin/python3 test/test_fuzz.py ./train_gpt 320
part test_tokenizer bash test/test_tokenizer.sh
part test_simt build/test_simt
part test_ptxas bash test/test_ptxas.sh
part "dev/bench PyTorch baselines (CPU, tiny shapes)" torch_baselines
part "dev/plot.py (a picture of runs)" plot
part "test_form (headers, docs/ links)" bash test/test_form.sh
part "test_bench_train (make bench's training table, stand-in trainer)" bash test/test_bench_train.sh ./train_gpt
part "test_gpu_session (dev/gpu_session.sh, stand-in GPU tools)" bash test/test_gpu_session.sh
part "test_gpu_speed (dev/gpu_speed.sh's choices after its checks, stand-in GPU tools)" bash test/test_gpu_speed.sh
part "test_offline_debs (OpenMPI from .debs under a prefix)" bash test/test_offline_debs.sh build/train_gpt_cpu
part "gpu_sanitize's verdicts (stand-in sanitizer, emulated GPU)" bash test/test_gpu_sanitize.sh build/train_gpt_simt
part "test_vs_pytorch (emulated GPU)" env DEVICE=cuda /usr/bin/python3 test/test_vs_pytorch.py build/train_gpt_simt
part "test_llama_convert (emulated GPU)" env DEVICE=cuda /usr/bin/python3 test/test_llama_convert.py build/train_gpt_simt
part "test_tp, NCCL path (emulated GPU, NCCL over MPI, tp=2, dp=2 x tp=2)" env DEVICE=cuda COMM=nccl TP_QUICK=1 bash test/test_tp.sh build/train_gpt_simt
part "test_pp (emulated GPU, pp=2, tp=2 x pp=2, interleaved pp=2 and 3; NCCL over MPI)" env DEVICE=cuda COMM=nccl PP_QUICK=1 bash test/test_pp.sh build/train_gpt_simt
part "test_cp (emulated GPU, cp=2 and dp=2 x cp=2; NCCL over MPI)" env DEVICE=cuda COMM=nccl CP_QUICK=1 bash test/test_cp.sh build/train_gpt_simt
fi
wait; report_ended
if [ -x build/gpucheck_ops ]; then
    echo "== GPU checks: build/gpucheck_ops compiled (sm_90a, sm_80, and sm_80 PTX for newer GPUs); on a GPU they run with 'make gpucheck' (here the kernels ran emulated: simcheck_ops)"
else
    echo "== GPU checks: skipped (no nvcc: the CUDA code was not compiled)"
fi

echo "full output: $log"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
