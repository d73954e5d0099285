#!/usr/bin/env bash
# gpu_fp8_vs_bf16.sh — FP8 against bf16 at GPT-2 1558M (B = 16) in one call, where an FP8 step goes
# (--profile: the quantizations' share) and where a bf16 1558M and 124M step go, with a ./train_gpt built
# beforehand: bf16, FP8 with current and delayed scaling, and delayed with fast accumulation in
# the forward's products and in every product (--fp8-fast-accum). Where .baseline/train_gpt was
# built (dev/bench/build_baseline.sh), FP8 with delayed scaling runs on it too: the FP8 passes'
# changes since that commit, side by side. Prints the medians last.
#   dev/gpu_fp8_vs_bf16.sh BIN OUTDIR
set -u
bin=${1:?usage: dev/gpu_fp8_vs_bf16.sh BIN OUTDIR} out=${2:?usage: dev/gpu_fp8_vs_bf16.sh BIN OUTDIR}
cd "$(dirname "$0")/.."
[ -d .debs ] && source scripts/offline_debs.sh use .debs
mkdir -p "$out"
logs=$(mktemp -d)  # (the JSON logs stay here: OUTDIR gets each run's output and the medians)
run() {  # run NAME MODEL B [FLAGS...]
    local name=$1 m=$2 B=$3; shift 3
    timeout -k 5 120 "${RUN_BIN:-$bin}" --device cuda --model "gpt2:$m" --batch-size "$B" --seq-len 1024 --total-batch-tokens $((B * 1024)) \
        --steps 20 --train-data data/kjv_train_000000.bin --val-data "" --log-file "$logs/$name.jsonl" "$@" >"$out/$name.txt" 2>&1
    python3 -c '
import json, statistics, sys
ms = [r["ms"] for r in map(json.loads, open(sys.argv[1])) if "ms" in r][5:]
print("%-13s %s" % (sys.argv[2], "%.2f ms" % statistics.median(ms) if ms else "failed"))' "$logs/$name.jsonl" "$name" >>"$out/medians.txt"
}
run bf16 1558M 16
run fp8 1558M 16 --precision fp8
run fp8-delayed 1558M 16 --precision fp8 --fp8-scaling delayed
run fp8-d-fastfwd 1558M 16 --precision fp8 --fp8-scaling delayed --fp8-fast-accum forward
run fp8-d-fastall 1558M 16 --precision fp8 --fp8-scaling delayed --fp8-fast-accum all
if [ -x .baseline/train_gpt ]; then
    echo "(fp8-d-baseline: FP8 with delayed scaling built from $(cat .baseline/commit 2>/dev/null || echo 'an earlier commit'))" >>"$out/medians.txt"
    RUN_BIN=.baseline/train_gpt run fp8-d-baseline 1558M 16 --precision fp8 --fp8-scaling delayed
fi
run profile-fp8-1558M 1558M 16 --precision fp8 --fp8-scaling delayed --profile 1
run profile-1558M 1558M 16 --profile 1
run profile-124M 124M 64 --profile 1
cat "$out/medians.txt"
