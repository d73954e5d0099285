#!/usr/bin/env bash
# same_training — proves a refactor changed nothing: runs a fixed set of short trainings and prints,
# for each, its step lines (timings cut out), samples, evaluations and the sha256 of every file it
# wrote (model file, checkpoints, JSON log without timings). Run it on the builds before and after
# a change and diff the two outputs: any difference is a changed training.
# usage: dev/same_training.sh CPU_TRAIN_GPT [SIMT_TRAIN_GPT] > digest.txt
#   CPU_TRAIN_GPT: build/train_gpt_cpu (g++ with MPI); SIMT_TRAIN_GPT: build/train_gpt_simt (the
#   CUDA backend on the emulated GPU, test/simt.h), whose runs are added when given.
# Needs the 250-token Bible shards (test/small_vocab.py build/data 250, which make test writes).
set -u
CPU=${1:?usage: dev/same_training.sh CPU_TRAIN_GPT [SIMT_TRAIN_GPT]}
SIMT=${2:-}
PY=${PYTHON:-/usr/bin/python3}
[ -f build/data/kjv250_train_000000.bin ] || $PY test/small_vocab.py build/data 250 >/dev/null
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
data=(--vocab-size 250 --train-data "build/data/kjv250_train_*.bin" --val-data "build/data/kjv250_val_*.bin")
common=("${data[@]}" --model d2 --seq-len 64 --batch-size 2 --val-every 3 --val-steps 2 --seed 7 --threads 1)

# case NAME RANKS BIN FLAGS...: one training, its digest under a "== NAME" line
case_() {
    local name=$1 n=$2 bin=$3; shift 3
    local d=$tmp/$name; mkdir -p "$d"
    echo "== $name"
    local run=("$bin")
    [ "$n" -gt 1 ] && run=(mpirun --oversubscribe -np "$n" "$bin")
    "${run[@]}" "${common[@]}" --log-file "$d/log.jsonl" "$@" >"$d/out" 2>&1
    echo "exit $?"
    # the lines that carry results; timings, throughput and memory addresses cut out
    # (and the send copies a pipeline rank made: how many depends on when the receivers took them)
    grep -av "^gpu:\|^note:\|matmul tune\|chose\|kept\|send buffer(s)" "$d/out" |
        sed -E "s|$tmp|TMP|g" | sed -E 's/\| [0-9.]+ ms \| [0-9]+ tok\/s( \| mfu [0-9.]+%)?//; s/\(eval [0-9.]+ s\)//; s/has [0-9.]+ GiB available/has N GiB available/' |
        if [ "$n" -gt 1 ]; then sort; else cat; fi   # (ranks print their own lines in any order)
    $PY - "$d/log.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("ms", "tokens_per_s", "mfu", "eval_s"): r.pop(k, None)
    print(json.dumps(r, sort_keys=True))
PY
    [ -f "$d/log.jsonl" ] || return 0
    (cd "$d" && find . -type f ! -name out ! -name log.jsonl ! -name .lock | sort | xargs -r sha256sum)  # (.lock: the pid)
}

o=$tmp/ck   # a checkpointed run, then the same run resumed from its middle
case_ fp32 1 "$CPU" --steps 6 --save-model "$tmp/fp32/model.bin" --output-dir "$tmp/fp32/ck" --checkpoint-every 3
case_ resume-a 1 "$CPU" --steps 3 --output-dir "$o"
case_ resume-b 1 "$CPU" --steps 6 --output-dir "$o" --resume
for p in bf16 fp16 fp8; do case_ $p 1 "$CPU" --steps 4 --precision $p; done
case_ fp8-delayed 1 "$CPU" --steps 4 --precision fp8 --fp8-scaling delayed
case_ sample 1 "$CPU" --steps 2 --vocab-size 0 --train-data "data/kjv_train_*.bin" --val-data "data/kjv_val_*.bin" \
    --sample-every 1 --gen-tokens 6 --prompt "In the beginning"
case_ llama 1 "$CPU" --steps 4 --model llama:d2 --recompute full
case_ skip 1 "$CPU" --steps 6 --skip-loss-z 0.5 --skip-window 2 --lr-schedule wsd --warmup-steps 2
case_ zero1 2 "$CPU" --steps 4 --zero 1 --total-batch-tokens 512
case_ zero3 2 "$CPU" --steps 4 --zero 3 --shuffle 1
case_ tp-sp 2 "$CPU" --steps 4 --tp 2 --sp 1
case_ pp-1f1b 2 "$CPU" --steps 4 --pp 2 --total-batch-tokens 512
case_ pp-il 2 "$CPU" --steps 4 --model d4 --pp 2 --pp-schedule interleaved --vpp 2 --total-batch-tokens 512
case_ cp-zz 2 "$CPU" --steps 4 --cp 2 --cp-layout zigzag
case_ tp-pp 4 "$CPU" --steps 3 --tp 2 --pp 2 --total-batch-tokens 256
case_ auto-batch 1 "$CPU" --steps 2 --batch-size auto --total-batch-tokens 512
case_ eval-only 1 "$CPU" --steps 0 --model "$tmp/fp32/model.bin" --vocab-size 0
if [ -n "$SIMT" ]; then
    case_ gpu-bf16 1 "$SIMT" --device cuda --steps 3 --precision bf16
    case_ gpu-fp8 1 "$SIMT" --device cuda --steps 2 --precision fp8
    case_ gpu-fp8-delayed 1 "$SIMT" --device cuda --steps 3 --precision fp8 --fp8-scaling delayed
    case_ gpu-fp16 1 "$SIMT" --device cuda --steps 2 --precision fp16 --flash-backward split
    case_ gpu-nccl-zero2 2 "$SIMT" --device cuda --steps 2 --zero 2 --comm nccl
fi
