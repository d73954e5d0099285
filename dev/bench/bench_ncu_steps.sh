#!/usr/bin/env bash
# bench_ncu_steps.sh — where a training step's GPU time goes, kernel by kernel, in our trainer and
# in llm.c's (the speed anchor), on the same model, B, T and data. Nsight Compute times every
# kernel of a 4-step run of each (gpu__time_duration; clocks and caches left alone). The kernels
# from one encoder forward to the next make a window: a step, or an evaluation or a sample. Of
# the windows with at least half the most kernels (the training steps), the one of median time
# is kept. So the first step, with its timing trials and plans, is left out.
#   dev/bench/bench_ncu_steps.sh [MODEL B]     default: gpt2:124M 64
#   LLMC_ANCHOR=DIR   llm.c's trainer and its run_llmc.sh (default .anchor/); without it, ours alone
#   LLMC_FLAGS=...    llm.c's flags, as for bench_vs_llmc.sh; OURS_FLAGS=...: ours'
# Prints a markdown table of the kinds of kernel side by side (ms a step: attention, matmul, ...),
# then each trainer's 15 largest kernels. Kernel times under ncu add no launch gaps, so a step's
# sum is below its time in a plain run. Skipped with one line where there is no ncu.
# (bench_ncu.sh says why each of our kernels is slow; this says where a step's time differs.)
# Tested with a stand-in ncu by test/test_bench_train.sh.
set -u
cd "$(dirname "$0")/../.."
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[ -x "$ncu" ] || { echo "bench_ncu_steps: skipped (no Nsight Compute: ncu)"; exit 0; }
model=${1:-gpt2:124M} B=${2:-64}
anchor=${LLMC_ANCHOR:-.anchor} shard=${SHARD:-data/kjv_train_000000.bin}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "# bench_ncu_steps $model B=$B T=1024 on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
# (at most 6000 kernels each: llm.c's samples after its last step need not be timed)
profile() {  # profile NAME COMMAND...: ncu's CSV of every kernel's time into $tmp/NAME.csv
    local name=$1; shift
    timeout -k 10 "${RUN_LIMIT:-240}" "$ncu" --clock-control none --cache-control none --target-processes all --csv --print-units base \
        --kernel-name-base function --metrics gpu__time_duration.sum --launch-count 6000 "$@" >"$tmp/$name.csv" 2>"$tmp/$name.err" ||
        { echo "# $name: exit $? under ncu"; tail -3 "$tmp/$name.err" | sed "s/^/# $name: /"; }
}
profile ours "${TRAIN_GPT:-./train_gpt}" --device cuda --precision bf16 --model "$model" --batch-size "$B" --seq-len 1024 --total-batch-tokens $((B * 1024)) \
    --steps 4 --train-data "$shard" --val-data "" --log-file "$tmp/ours.jsonl" ${OURS_FLAGS:-}
case $model in gpt2:124M) m=d12 ;; gpt2:350M) m=d24 ;; gpt2:774M) m=d36 ;; gpt2:1558M) m=d48 ;; *) m= ;; esac
[ -x "$anchor/llmc_train_gpt2cu" ] && [ -n "$m" ] && profile llmc bash "$anchor/run_llmc.sh" "$shard" "$B" 1024 4 "$m" ${LLMC_FLAGS:-}
${PYTHON:-python3} - "$tmp" <<'PY'
import csv, os, re, statistics, sys
d = sys.argv[1]
KINDS = [("attention", r"flash|fmha|sdpa|attention|attn|cudnn"), ("matmul", r"gemm|nvjet|xmma|cutlass|splitk"),
         ("loss", r"classifier|crossentropy|softmax"), ("layernorm, residual", r"layernorm|layer_norm|residual|rmsnorm"),
         ("bias", r"bias|column_sum"), ("gelu", r"gelu"), ("adamw", r"adam"), ("encoder", r"encoder"), ("grad norm", r"norm"),
         ("copies", r"copy|cast|fill|memset|zero")]
def kind(name):
    return next((k for k, p in KINDS if re.search(p, name, re.I)), "other")
SCALE = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}
def step(path):  # [(kernel, ms)] of the median training step, and the number of steps seen
    rows, head = [], None
    for r in csv.reader(l for l in open(path, errors="replace") if l.startswith('"')):
        if r and r[0] == "ID": head = {k: i for i, k in enumerate(r)}; continue
        if head and len(r) == len(head) and r[head["Metric Name"]] == "gpu__time_duration.sum":
            v = float(r[head["Metric Value"]].replace(",", "")) * SCALE.get(r[head["Metric Unit"]], float("nan"))
            rows.append((r[head["Kernel Name"]], v))
    starts = [i for i, (n, _) in enumerate(rows) if "encoder_forward" in n]
    wins = [rows[a:b] for a, b in zip(starts, starts[1:])]
    most = max((len(w) for w in wins), default=0)
    steps = sorted((w for w in wins if len(w) >= most / 2), key=lambda w: sum(v for _, v in w))
    return (steps[len(steps) // 2] if steps else []), len(steps)
got = {}
for who in ("ours", "llmc"):
    if os.path.exists(f"{d}/{who}.csv"):
        got[who] = step(f"{d}/{who}.csv")
        if not got[who][0]: print(f"# {who}: no whole step among the kernels ncu timed")
names = {"ours": "ours", "llmc": "llm.c"}
have = [w for w in ("ours", "llmc") if w in got and got[w][0]]
if not have: sys.exit(1)
by_kind = {w: {} for w in have}
for w in have:
    for n, v in got[w][0]: by_kind[w][kind(n)] = by_kind[w].get(kind(n), 0.0) + v
print()
print("| kind | " + " | ".join(f"{names[w]} ms a step" for w in have) + (" | llm.c − ours |" if len(have) == 2 else " |"))
print("|---|" + "---|" * len(have) + ("---|" if len(have) == 2 else ""))
for k in [k for k, _ in KINDS] + ["other", "all"]:
    ms = [sum(by_kind[w].values()) if k == "all" else by_kind[w].get(k, 0.0) for w in have]
    if not any(ms): continue
    print(f"| {k} | " + " | ".join(f"{m:.2f}" for m in ms) + (f" | {round(ms[1] - ms[0], 2) + 0.0:+.2f} |" if len(have) == 2 else " |"))  # (+ 0.0: no "-0.00")
for w in have:
    tot = {}
    for n, v in got[w][0]: c = tot.setdefault(n, [0, 0.0]); c[0] += 1; c[1] += v
    print(f"\n{names[w]}: the largest kernels of the step ({len(got[w][0])} kernels; the median of {got[w][1]} steps)\n")
    print("| kernel | kind | launches | ms a step |")
    print("|---|---|---|---|")
    for n, (c, v) in sorted(tot.items(), key=lambda x: -x[1][1])[:15]: print(f"| {n} | {kind(n)} | {c} | {v:.2f} |")
PY
