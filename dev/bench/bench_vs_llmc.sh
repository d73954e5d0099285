#!/usr/bin/env bash
# bench_vs_llmc.sh — our trainer against llm.c's GPU trainer (the speed anchor) and against a build
# of an earlier commit, on the same GPU in the same run (`make bench BENCH_PARTS=llmc`).
# Each run: the same model (initialized at random), B, T = 1024, token shard and step count; the
# median step time over steps 6..STEPS. A ratio is the other's time over ours (> 1: ours faster).
#
#   dev/bench/bench_vs_llmc.sh [MODEL:B ...]      default: gpt2:124M:64 gpt2:1558M:16
#   LLMC_ANCHOR=DIR   llm.c's trainer and its run_llmc.sh (default .anchor/); skipped if absent
#   BASELINE_BIN=F    ./train_gpt built from an earlier commit (default .baseline/train_gpt, which
#                     dev/bench/build_baseline.sh COMMIT makes); skipped if absent; BASELINE_NAME
#                     names it in the table (default: .baseline/commit's)
#   OURS_ALSO=FLAGS   one more run of ours with these flags (e.g. "--flash-backward split"); more
#                     runs: their flags apart by ';' (e.g. "--flash-wgmma 1;--bias-grad epilogue")
#   STEPS=N           steps a run (default 30); SHARD: the token shard (data/kjv_train_000000.bin)
# Each run of ours also prints, as '# MODEL B=.. BINARY FLAGS: ...' lines, what its timed choices
# kept (--flash-wgmma auto, --layernorm-prefetch auto, ...: the trainer's lines of them).
# Prints a markdown table. Tested without a GPU by test/test_bench_train.sh (stand-ins).
set -u
cd "$(dirname "$0")/../.."
configs=${*:-gpt2:124M:64 gpt2:1558M:16}
anchor=${LLMC_ANCHOR:-.anchor}
baseline=${BASELINE_BIN:-.baseline/train_gpt}
steps=${STEPS:-30}
shard=${SHARD:-data/kjv_train_000000.bin}
bin=${TRAIN_GPT:-./train_gpt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median_ours() {  # median_ours LOG.jsonl: the median "ms" of steps 6.. of our JSON log
    ${PYTHON:-python3} -c '
import json, statistics, sys
ms = [r["ms"] for r in map(json.loads, open(sys.argv[1])) if "ms" in r][5:]
print("%.2f" % statistics.median(ms) if ms else "")' "$1" 2>/dev/null
}
ours() {  # ours BIN MODEL B [FLAGS...]: prints the median step ms, or nothing
    local b=$1 m=$2 B=$3; shift 3
    rm -f "$tmp/log.jsonl"
    timeout -k 10 "${RUN_LIMIT:-300}" "$b" --device cuda --precision bf16 --model "$m" --batch-size "$B" --seq-len 1024 \
        --total-batch-tokens $((B * 1024)) --steps "$steps" --train-data "$shard" --val-data "" --log-file "$tmp/log.jsonl" "$@" \
        >"$tmp/out.txt" 2>&1 || { tail -2 "$tmp/out.txt" | sed 's/^/# /' >&2; return; }
    grep -E '\(--[a-z-]+ (auto|1)[,:]' "$tmp/out.txt" | sed "s|^|# $m B=$B $b${*:+ $*}: |" >&2  # (what its timed choices kept)
    median_ours "$tmp/log.jsonl"
}
llmc_model() { case $1 in gpt2:124M) echo d12 ;; gpt2:350M) echo d24 ;; gpt2:774M) echo d36 ;; gpt2:1558M) echo d48 ;; esac; }
echo "# bench_vs_llmc on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F), median step of steps 6..$steps"
echo
[ -z "${BASELINE_NAME:-}" ] && [ -f "$(dirname "$baseline")/commit" ] && BASELINE_NAME=$(cat "$(dirname "$baseline")/commit")
IFS=';' read -ra alsos <<<"${OURS_ALSO:-}"
head= rule=
for a in "${alsos[@]}"; do head+=" ours $a ms | that / ours |"; rule+="---|---|"; done
echo "| model | B×T | ours ms (tok/s) | llm.c ms | llm.c / ours | ${BASELINE_NAME:-baseline} ms | baseline / ours |$head"
echo "|---|---|---|---|---|---|---|$rule"
for cfg in $configs; do
    m=${cfg%:*} B=${cfg##*:}
    o=$(ours "$bin" "$m" "$B")
    l=
    if [ -x "$anchor/llmc_train_gpt2cu" ] && [ -n "$(llmc_model "$m")" ]; then
        l=$(timeout -k 10 "${RUN_LIMIT:-300}" bash "$anchor/run_llmc.sh" "$shard" "$B" 1024 "$steps" "$(llmc_model "$m")" ${LLMC_FLAGS:-} 2>&1 |
            tee "$tmp/llmc.txt" | sed -n 's/^llm.c: median \([0-9.]*\) ms.*/\1/p')
        [ -n "$l" ] || tail -3 "$tmp/llmc.txt" | sed 's/^/# llm.c: /' >&2
    fi
    base=; [ -x "$baseline" ] && base=$(ours "$baseline" "$m" "$B")
    ratio() { [ -n "$1" ] && [ -n "$o" ] && awk -v a="$1" -v b="$o" 'BEGIN { printf "%.3f×", a / b }'; }
    also=
    for a in "${alsos[@]}"; do r=$(ours "$bin" "$m" "$B" $a); also+=" ${r:-failed} | $(ratio "$r") |"; done
    tok=; [ -n "$o" ] && tok=$(awk -v ms="$o" -v n=$((B * 1024)) 'BEGIN { printf "%.0f", n / ms * 1000 }')
    echo "| $m | ${B}×1024 | ${o:-failed}${tok:+ ($tok)} | ${l:-—} | $(ratio "$l") | ${base:-—} | $(ratio "$base") |$also"
done
echo
echo "llm.c: $( [ -x "$anchor/llmc_train_gpt2cu" ] && echo "its trainer from $anchor (built with cuDNN attention), flags: ${LLMC_FLAGS:-its defaults}" || echo "not carried (no $anchor/llmc_train_gpt2cu)"). Baseline: $( [ -x "$baseline" ] && echo "$baseline" || echo "none")."
