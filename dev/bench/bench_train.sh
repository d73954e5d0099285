#!/usr/bin/env bash
# bench_train.sh — whole-model training throughput on this GPU (`make bench`).
# For each GPT-2 size: the largest micro-batch (of 64, 32, 16, 8, 4, 2, 1 at T=1024; 124M tries
# 128 first: ~55 GB of bf16 activations) that fits, a few steps on the shipped data, and the
# median of the steps after the first: tokens/s, MFU (llmc/mfu.h: 6Ψ + 6·L·C·T FLOPs a token
# against the dense bf16 peak) and peak GPU memory. A micro-batch that cannot fit is refused by
# the trainer's memory plan at once; under the table, each larger micro-batch that did not run is
# listed with the trainer's last line. Each run is cut off after RUN_LIMIT seconds (default 300).
# Prints a markdown table, the trainer's `gpu:` line (GPU, driver, runtime, cuBLASLt), the choices
# its autos made (flash rows, wgmma, loss kernel, matmul candidates), then a --profile of the step
# of the first and of the last model that fit, op by op (llmc/profiler.h).
# Variables (each a part of `make bench`, docs/verification.md):
#   FLASH_ROWS=16|32, FLASH_WGMMA=0|1   pin the flash attention choices that auto makes
#   MATMUL_TUNE=0                       cuBLASLt's heuristic's first algorithm, untimed
#   FP8_SCALING=delayed                 with PRECISION fp8: --fp8-scaling delayed
#   RECOMPUTE=selective|full            --recompute: larger micro-batches fit, at the reruns' cost
#   ACCUM=k                             k micro-batches an optimizer step (--total-batch-tokens k·B·T)
#   BATCH_SIZES="B ..."                 the micro-batches to try; PROFILE=0 leaves out --profile
#   RECIPE=1                            B and micro-batches a step from scripts/gpt2.sh (GPUS=8): the
#                                       MFU one GPU of the recipe's 8-GPU run sees, less its
#                                       communication
# usage: dev/bench/bench_train.sh [PRECISION] [MODELS...]
set -u
cd "$(dirname "$0")/../.."
prec=${1:-bf16}; shift || true
models=${*:-gpt2:124M gpt2:350M gpt2:774M gpt2:1558M}
rows=${FLASH_ROWS:-auto}
wg=${FLASH_WGMMA:-auto}
mt=${MATMUL_TUNE:-1}
recompute=${RECOMPUTE:-none}
extra=(); [ -n "${FP8_SCALING:-}" ] && extra=(--fp8-scaling "$FP8_SCALING")
accum=${ACCUM:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bin=${TRAIN_GPT:-./train_gpt}  # (test/test_bench_train.sh gives a stand-in)
echo "# bench_train on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), precision $prec${FP8_SCALING:+ (--fp8-scaling $FP8_SCALING)}, --flash-rows $rows --flash-wgmma $wg --matmul-tune $mt --recompute $recompute, $([ "${RECIPE:-0}" = 1 ] && echo "scripts/gpt2.sh's B and micro-batches a step on 8 GPUs" || echo "$accum micro-batch(es) a step"), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F)"
echo
echo "| model | B×T | tokens/s | MFU | step ms | peak GPU memory |"
echo "|---|---|---|---|---|---|"
fits=()     # "model B accum" of each model that ran
skipped=()  # each larger micro-batch that did not run, and why (the memory plan's refusal, an error)
tuned=()    # --flash-rows auto: what each model's run chose, pass by pass, with both times
kernels=()  # --flash-wgmma auto: the same for wgmma against mma.sync
algos=()    # --matmul-tune 1: how many products each model's run tuned, and those that took another candidate
staged=()   # --classifier-staged auto: the loss kernel each model's run kept
lnpf=()     # --layernorm-prefetch auto: with or without the LayerNorm backward's prefetch, each model's run
for m in $models; do
    done_one=0
    Bs="64 32 16 8 4 2 1"; [ "$m" = gpt2:124M ] && Bs="128 $Bs"
    Bs=${BATCH_SIZES:-$Bs}
    if [ "${RECIPE:-0}" = 1 ]; then  # the recipe's B, and its step's tokens over B·1024·8
        recipe=$(GPUS=8 LAUNCH=print bash scripts/gpt2.sh "${m#gpt2:}")
        Bs=$(echo "$recipe" | sed -n 's/.*--batch-size \([0-9]*\).*/\1/p')
        accum=$(( $(echo "$recipe" | sed -n 's/.*--total-batch-tokens \([0-9]*\).*/\1/p') / (Bs * 1024 * 8) ))
    fi
    for B in $Bs; do
        timeout -k 10 "${RUN_LIMIT:-300}" "$bin" --device cuda --precision "$prec" --flash-rows "$rows" --flash-wgmma "$wg" --matmul-tune "$mt" --recompute "$recompute" "${extra[@]}" --model "$m" --batch-size $B --seq-len 1024 --steps 6 \
            --total-batch-tokens $((B * 1024 * accum)) \
            --val-data "" --log-file "$tmp/log.jsonl" >"$tmp/out.txt" 2>&1
        rc=$?
        if [ $rc = 124 ] || [ $rc = 137 ]; then echo "| $m | ${B}×1024 | timed out after ${RUN_LIMIT:-300} s | | | |"; done_one=1; break; fi
        if [ $rc != 0 ]; then skipped+=("$m B=$B (exit $rc): $(tail -1 "$tmp/out.txt" | cut -c1-400)"); continue; fi
        ${PYTHON:-python3} - "$tmp/log.jsonl" "$tmp/out.txt" "$m" "${B}×1024$([ "$accum" = 1 ] || echo ", $accum a step")" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
out = open(sys.argv[2]).read()
mem = re.search(r"peak GPU memory.*?: ([\d.]+) MiB", out)
if "note: FP8 products that cuBLASLt has no algorithm for" in out:  # (matmul.cuh's fallback: not FP8's speed)
    sys.argv[3] += " (its FP8 products dequantized to bf16: cuBLASLt refused them)"
tok = statistics.median(r["tokens_per_s"] for r in rows)
mfu = statistics.median(r["mfu"] for r in rows) if rows[0]["mfu"] is not None else float("nan")
ms = statistics.median(r["ms"] for r in rows)
print(f"| {sys.argv[3]} | {sys.argv[4]} | {tok:,.0f} | {100 * mfu:.1f}% | {ms:.1f} | {float(mem.group(1)) / 1024:.1f} GiB |" if mem else f"| {sys.argv[3]} | {sys.argv[4]} | {tok:,.0f} | {100 * mfu:.1f}% | {ms:.1f} | ? |")
PY
        done_one=1
        [ ${#fits[@]} = 0 ] && ran_on=$(grep -m1 '^gpu: ' "$tmp/out.txt")
        grep -q '(--flash-rows auto, ' "$tmp/out.txt" && tuned+=("$m B=$B: $(sed -n 's/^flash attention: \([0-9]* [a-z ]*\) in the \([a-zA-Z/ ]*\) (--flash-rows auto, timed at B=[0-9]* T=[0-9]*: \([0-9.]*\) ms with 16, \([0-9.]*\) ms with 32)$/\2 \1 (\3 | \4 ms)/p' "$tmp/out.txt" | paste -sd';' | sed 's/;/; /g')")
        grep -q '(--flash-wgmma auto, ' "$tmp/out.txt" && kernels+=("$m B=$B: $(sed -n 's/^flash attention: \([a-z.]*\) in the \([a-zA-Z/ ]*\) (--flash-wgmma auto, timed at B=[0-9]* T=[0-9]*: \([0-9.]*\) ms with mma.sync, \([0-9.]*\) ms with wgmma; \(.*\))$/\2 \1 (\3 | \4 ms, \5)/p' "$tmp/out.txt" | paste -sd';' | sed 's/;/; /g')")
        n_tuned=$(grep -c '(--matmul-tune 1: ' "$tmp/out.txt")
        [ "$n_tuned" -gt 0 ] && algos+=("$m B=$B: $n_tuned products tuned, $(grep '(--matmul-tune 1: ' "$tmp/out.txt" | grep -c ' taken (') took another candidate than the heuristic's first$(sed -n 's/^matmul: \(.*\): candidate \([0-9]* of [0-9]*\) taken (--matmul-tune 1: \([0-9.]*\) ms against \([0-9.]*\) ms .*$/; \1: \2 (\3 | \4 ms)/p' "$tmp/out.txt" | tr -d '\n')")
        grep -q '(--layernorm-prefetch auto, ' "$tmp/out.txt" && lnpf+=("$m B=$B: $(sed -n 's/^layernorm: the backward \(with\|without\) its prefetch (--layernorm-prefetch auto, timed at N=[0-9]* C=[0-9]*: \(.*\))$/\1 (\2)/p' "$tmp/out.txt")")
        grep -q '(--classifier-staged auto, ' "$tmp/out.txt" && staged+=("$m B=$B: $(sed -n 's/^classifier: the \([a-z]*\) kernel (--classifier-staged auto, timed on \([0-9]*\) rows of [0-9]*: \(.*\))$/\1 (\3; on \2 rows)/p' "$tmp/out.txt")")
        fits+=("$m $B $accum")
        break
    done
    [ $done_one = 1 ] || echo "| $m | — | does not fit (or failed: $(tail -1 "$tmp/out.txt")) | | | |"
done
listing() {  # listing HEADING ITEMS...: a list under the table, where there is anything to list
    local heading=$1; shift
    [ $# -gt 0 ] || return 0
    echo; echo "$heading"; echo
    printf -- '- %s\n' "$@"
}
listing "Larger micro-batches that did not run:" "${skipped[@]}"
listing "Rows a warp in flash attention that --flash-rows auto kept (pass, rows, ms with 16 | 32):" "${tuned[@]}"
listing "Flash attention kernels that --flash-wgmma auto kept (pass, kernel, ms with mma.sync | wgmma, their bits):" "${kernels[@]}"
listing "Matmuls --matmul-tune 1 timed (the candidates it took: shape, which, ms with it | with the heuristic's first):" "${algos[@]}"
listing "The loss kernel --classifier-staged auto kept (each kernel's time):" "${staged[@]}"
listing "The LayerNorm backward --layernorm-prefetch auto kept (with or without its prefetch: each way's time):" "${lnpf[@]}"
[ -n "${ran_on:-}" ] && { echo; echo "The trainer's own line: \`$ran_on\`"; }
profiled=()
[ ${#fits[@]} -gt 0 ] && profiled=("${fits[0]}")
[ ${#fits[@]} -gt 1 ] && profiled+=("${fits[${#fits[@]}-1]}")
[ "${PROFILE:-1}" = 1 ] || profiled=()
for mb in "${profiled[@]}"; do
    set -- $mb
    echo
    echo "Where a step of $1 (B=$2, T=1024, $prec, --flash-rows $rows --flash-wgmma $wg --matmul-tune $mt --recompute $recompute, $3 micro-batch(es) a step) goes (--profile 1: CUDA events around each op, the steps after the first):"
    echo
    echo '```'
    timeout -k 10 "${RUN_LIMIT:-300}" "$bin" --device cuda --precision "$prec" --flash-rows "$rows" --flash-wgmma "$wg" --matmul-tune "$mt" --recompute "$recompute" "${extra[@]}" --model "$1" --batch-size "$2" --seq-len 1024 --total-batch-tokens $(($2 * 1024 * $3)) \
        --steps 6 --val-data "" --profile 1 2>&1 | sed -n '/^profile:/,/^  other/p'
    echo '```'
done
