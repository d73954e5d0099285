#!/usr/bin/env bash
# test_bench_train — dev/bench/bench_train.sh (make bench's training table) without a GPU. The
# script runs only on GPU machines, where a bad flag it passes costs device time that is rarely
# lent; here it runs against a stand-in trainer (it records each command line and answers as the
# trainer does: the gpu line, a JSON log, the peak-memory line, a profile table) and a stand-in
# nvidia-smi, and then
#   - every command line it gave is one the real trainer accepts: each is run again by
#     TRAIN_GPT with the size flags overridden (a later flag wins) to a tiny --steps 0 run, so an
#     unknown flag or a bad value (e.g. a variable that held an exit code) exits 2 there
#   - the options reach the trainer: RECOMPUTE as --recompute, FP8_SCALING as --fp8-scaling, ACCUM as --total-batch-tokens
#     B·1024·ACCUM, BATCH_SIZES as the micro-batches tried, PROFILE=0 as no --profile run,
#     RECIPE=1 as scripts/gpt2.sh's B and micro-batches a step per GPU of 8
#   - its table has one row per model, from the stand-in's log (the median of steps 2-6); under
#     --flash-rows auto (the default) the rows a warp each run kept are listed under it, and so are
#     --flash-wgmma auto's kernels and the cuBLASLt candidates --matmul-tune 1 took; MATMUL_TUNE=0
#     reaches the runs as --matmul-tune 0
# usage: test/test_bench_train.sh TRAIN_GPT     Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
BIN=${1:?usage: test/test_bench_train.sh TRAIN_GPT}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "Stand-in GPU"\n' >"$tmp/bin/nvidia-smi"
cat >"$tmp/train_gpt" <<EOF
#!/usr/bin/env bash
echo "\$*" >>"$tmp/args.txt"
log=""; prev=""
for a in "\$@"; do [ "\$prev" = --log-file ] && log=\$a; prev=\$a; done
echo "gpu: stand-in"
if [ -n "\$log" ]; then
    for i in 1 2 3 4 5 6; do echo "{\"step\": \$i, \"tokens_per_s\": \$((1000 * i)).0, \"mfu\": 0.4\$i, \"ms\": \$((10 * i)).0}" >>"\$log"; done
fi
case " \$* " in *" --flash-rows auto "*)  # (the trainer's lines, llmc/flash_launch.cuh: flash_tune_rows)
    echo "flash attention: 16 query rows a warp in the forward (--flash-rows auto, timed at B=8 T=1024: 0.162 ms with 16, 0.178 ms with 32)"
    echo "flash attention: 32 keys a warp in the dK/dV pass (--flash-rows auto, timed at B=8 T=1024: 0.355 ms with 16, 0.285 ms with 32)"
    echo "flash attention: 32 query rows a warp in the dQ pass (--flash-rows auto, timed at B=8 T=1024: 0.202 ms with 16, 0.194 ms with 32)" ;;
esac
case " \$* " in *" --flash-wgmma auto "*)  # (llmc/flash_launch.cuh: flash_run_pass)
    echo "flash attention: wgmma in the forward (--flash-wgmma auto, timed at B=8 T=1024: 0.162 ms with mma.sync, 0.140 ms with wgmma; the same bits at its first 3 launches)"
    echo "flash attention: mma.sync in the dQ pass (--flash-wgmma auto, timed at B=8 T=1024: 0.194 ms with mma.sync, 0.150 ms with wgmma; the bits differ at launch 1: mma.sync kept)"
    echo "flash attention: mma.sync in the dK/dV pass (--flash-wgmma auto, timed at B=8 T=1024: 0.285 ms with mma.sync, 0.300 ms with wgmma; the same bits at its first 3 launches)" ;;
esac
case " \$* " in *" --matmul-tune 1 "*)  # (llmc/matmul.cuh: lt_matmul)
    echo "matmul: 3072x131072x768 bf16 with the epilogue bias+GELU: candidate 3 of 8 taken (--matmul-tune 1: 1.021 ms against 1.204 ms with the heuristic's first; 5 of the 7 others gave the same bits)"
    echo "matmul: 768x131072x768 bf16 with the epilogue bias: the heuristic's first kept (--matmul-tune 1: 0.250 ms against 0.250 ms with the heuristic's first; 7 of the 7 others gave the same bits)"
    echo "matmul: 768x768x131072 bf16 accumulating: candidate 2 of 8 taken (--matmul-tune 1: 0.540 ms against 0.560 ms with the heuristic's first; 2 of the 7 others gave the same bits)" ;;
esac
echo "classifier: the pipelined kernel (--classifier-staged auto, timed on 4096 rows of 50304: 0.430 ms unstaged, 0.290 ms staged, 0.210 ms pipelined; the same bits)"
echo "layernorm: the backward with its prefetch (--layernorm-prefetch auto, timed at N=131072 C=768: 0.210 ms without, 0.150 ms with; the same bits)"
echo "peak GPU memory (this rank): 2048.0 MiB (2147483648 B)"
printf 'profile: 5 steps, 1.00 ms per step\n  other (host, gaps)  0.10\n'
EOF
chmod +x "$tmp/train_gpt" "$tmp/bin/nvidia-smi"

bench() {  # bench NAME [VAR=VALUE...] -- MODELS...: run bench_train.sh, its output in $tmp/NAME.md
    local name=$1; shift
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done; shift
    : >"$tmp/args.txt"
    env PATH="$tmp/bin:$PATH" TRAIN_GPT="$tmp/train_gpt" LLMC_COMMIT=test PYTHON=/usr/bin/python3 "${vars[@]}" \
        bash dev/bench/bench_train.sh "${PREC:-bf16}" "$@" >"$tmp/$name.md" 2>&1
    cp "$tmp/args.txt" "$tmp/$name.args"
}
bench default -- gpt2:124M gpt2:1558M
bench recompute RECOMPUTE=full -- gpt2:124M
bench accum BATCH_SIZES=16 ACCUM=8 PROFILE=0 -- gpt2:1558M
bench recipe RECIPE=1 PROFILE=0 -- gpt2:124M gpt2:1558M
PREC=fp8 bench fp8d FP8_SCALING=delayed PROFILE=0 -- gpt2:124M
bench rows32 FLASH_ROWS=32 PROFILE=0 -- gpt2:124M
bench notune MATMUL_TUNE=0 PROFILE=0 -- gpt2:124M

# bench_vs_llmc.sh: a stand-in for llm.c's run_llmc.sh (it records its arguments and prints a
# median), the stand-in trainer as the baseline build, and OURS_ALSO's two more runs of ours
mkdir -p "$tmp/anchor"
printf '#!/bin/sh\necho "$*" >>"%s/llmc_args.txt"\necho "llm.c: median 90.00 ms a step over steps 6..6, 1000 tok/s"\n' "$tmp" >"$tmp/anchor/run_llmc.sh"
: >"$tmp/anchor/llmc_train_gpt2cu"; : >"$tmp/llmc_args.txt"
chmod +x "$tmp/anchor/run_llmc.sh" "$tmp/anchor/llmc_train_gpt2cu"
: >"$tmp/args.txt"
env PATH="$tmp/bin:$PATH" TRAIN_GPT="$tmp/train_gpt" LLMC_ANCHOR="$tmp/anchor" BASELINE_BIN="$tmp/train_gpt" BASELINE_NAME=base \
    OURS_ALSO="--flash-backward split;--bias-grad epilogue" STEPS=6 LLMC_COMMIT=test PYTHON=/usr/bin/python3 \
    bash dev/bench/bench_vs_llmc.sh gpt2:124M:64 gpt2:1558M:16 >"$tmp/llmc.md" 2>&1
cp "$tmp/args.txt" "$tmp/llmc.args"

# bench_ncu_steps.sh: a stand-in ncu that records its options, runs the program (the stand-in
# trainer, or run_llmc.sh) and prints a CSV of kernel times: ours 4 steps (the first with a
# 50 ms trial kernel), llm.c an evaluation, 4 steps and 3 samples (windows of 2 kernels)
cat >"$tmp/bin/ncu" <<EOF
#!/usr/bin/env bash
opts=()
while [[ \$1 == --* ]]; do if [ "\$1" = --csv ]; then opts+=("\$1"); shift; else opts+=("\$1 \$2"); shift 2; fi; done
printf '%s\n' "\${opts[*]}" >>"$tmp/ncu_opts.txt"
"\$@" >/dev/null 2>&1
echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
i=0
row() { echo "\"\$i\",\"1\",\"p\",\"h\",\"\$1\",\"1\",\"7\",\"(1, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\",\"\$2\""; i=\$((i + 1)); }
case " \$* " in
*run_llmc*)
    row encoder_forward_kernel3 100,000; row ampere_bf16_gemm 1,000,000
    for s in 1 2 3 4; do row encoder_forward_kernel3 100,000; row cudnn_generated_fort_native_sdpa_sm90 800,000; row sm90_xmma_gemm_bf16 2,000,000
        row matmul_backward_bias_kernel9 300,000; row adamw_kernel3 400,000; done
    for s in 1 2 3; do row encoder_forward_kernel3 100,000; row sm90_xmma_gemm_bf16 50,000; done ;;
*)
    for s in 1 2 3 4; do row encoder_forward_kernel 100,000; row flash_forward_wgmma_kernel 1,000,000; [ \$s = 1 ] && row bits_hash_kernel 50,000,000
        row nvjet_tst_128x256 2,000,000; row adamw_kernel 500,000; done ;;
esac
EOF
chmod +x "$tmp/bin/ncu"
mkdir -p "$tmp/anchor2"; cp "$tmp/anchor/llmc_train_gpt2cu" "$tmp/anchor2/"
sed "s|llmc_args.txt|ncu_llmc_args.txt|" "$tmp/anchor/run_llmc.sh" >"$tmp/anchor2/run_llmc.sh"
: >"$tmp/args.txt"
env PATH="$tmp/bin:$PATH" TRAIN_GPT="$tmp/train_gpt" LLMC_ANCHOR="$tmp/anchor2" LLMC_COMMIT=test PYTHON=/usr/bin/python3 \
    bash dev/bench/bench_ncu_steps.sh gpt2:124M 64 >"$tmp/ncu.md" 2>&1
cp "$tmp/args.txt" "$tmp/ncu.args"

# every command line, once more, on the real trainer: the size flags overridden to a tiny run
accepted=0 refused=""
while read -r line; do
    # shellcheck disable=SC2086  # the recorded flags, one word each (none holds a space but --val-data's empty value)
    set -- $line
    args=()
    while [ $# -gt 0 ]; do
        if [ "$1" = --val-data ]; then args+=(--val-data ""); shift; case ${1:-} in --*) ;; *) shift ;; esac; continue; fi
        args+=("$1"); shift
    done
    "$BIN" "${args[@]}" --device cpu --model d1 --seq-len 16 --batch-size 1 --total-batch-tokens 16 --steps 0 --log-file "" \
        >"$tmp/real.out" 2>&1 && accepted=$((accepted + 1)) || refused+=" [$line: $(tail -1 "$tmp/real.out")]"
done < <(cat "$tmp"/*.args)
total=$(cat "$tmp"/*.args | wc -l)
[ -z "$refused" ] && [ "$total" -ge 14 ] && r=ok || r="not ok"
echo "$r - bench_train.sh: the trainer accepts every command line it gave ($accepted of $total)${refused:+:$refused}"

/usr/bin/python3 - "$tmp" <<'PY'
import re, sys
d = sys.argv[1]
def lines(name): return open(f"{d}/{name}.args").read().splitlines()
def md(name): return open(f"{d}/{name}.md").read()
def flag(line, f):
    m = re.search(rf"--{f} (\S+)", line)
    return m.group(1) if m else None
ok = True
def check(cond, what):
    global ok
    print(("ok" if cond else "not ok") + " - bench_train.sh: " + what)
    ok &= bool(cond)
default, rec, acc, recipe = lines("default"), lines("recompute"), lines("accum"), lines("recipe")
# the stand-in fits every first B: one run per model and a --profile run for the first and the last
check(len(default) == 4 and [flag(l, "batch-size") for l in default] == ["128", "64", "128", "64"]
      and [("--profile 1" in l) for l in default] == [False, False, True, True]
      and all(flag(l, "recompute") == "none" and int(flag(l, "total-batch-tokens")) == int(flag(l, "batch-size")) * 1024 for l in default),
      "by default each model at the largest micro-batch tried (124M 128, 1558M 64), one micro-batch a step, "
      "no recomputation, the first and last model profiled")
rows = re.findall(r"^\| (gpt2:\S+) \| ([^|]+) \| ([\d,]+) \| ([\d.]+)% \| ([\d.]+) \| ([\d.]+) GiB \|$", md("default"), re.M)
# the median of steps 2-6 of the stand-in's log: tokens/s 4000, MFU 44%, 40 ms; 2048 MiB = 2.0 GiB
check([r[0] for r in rows] == ["gpt2:124M", "gpt2:1558M"] and all(r[2:] == ("4,000", "44.0", "40.0", "2.0") for r in rows)
      and rows[0][1].strip() == "128×1024", f"a table row per model from the trainer's log and peak line ({rows})")
check(rec and all(flag(l, "recompute") == "full" for l in rec) and "--recompute full" in md("recompute").splitlines()[0],
      "RECOMPUTE=full reaches every run, the profile run included, and the title")
check(len(acc) == 1 and flag(acc[0], "batch-size") == "16" and flag(acc[0], "total-batch-tokens") == str(16 * 1024 * 8)
      and "16×1024, 8 a step" in md("accum") and "Where a step" not in md("accum"),
      "BATCH_SIZES=16 ACCUM=8 PROFILE=0: B=16 in steps of 8 micro-batches, no profile run")
# scripts/gpt2.sh on 8 GPUs: 124M B=64 in 0.5M-token steps (1 micro-batch a GPU), 1558M B=16 in 1M (8)
check([(flag(l, "model"), flag(l, "batch-size"), flag(l, "total-batch-tokens")) for l in recipe]
      == [("gpt2:124M", "64", str(64 * 1024)), ("gpt2:1558M", "16", str(16 * 1024 * 8))]
      and "64×1024 |" in md("recipe") and "16×1024, 8 a step" in md("recipe"),
      "RECIPE=1: each size at scripts/gpt2.sh's B and its micro-batches a step per GPU of 8")
fp8d = lines("fp8d")
check(fp8d and all(flag(l, "precision") == "fp8" and flag(l, "fp8-scaling") == "delayed" for l in fp8d)
      and "precision fp8 (--fp8-scaling delayed)" in md("fp8d").splitlines()[0],
      "FP8_SCALING=delayed (part fp8-delayed) reaches every run and the title")
def listing(name, heading):  # the "- model B=..: ..." lines under a heading
    text = md(name)
    if heading not in text: return []
    block = text.split(heading, 1)[1].split("\n\n")[1]
    return re.findall(r"^- (gpt2:\S+ B=\d+): (.*)$", block, re.M)
listed = listing("default", "--flash-rows auto kept")
check(all(flag(l, "flash-rows") == "auto" for l in default) and "--flash-rows auto" in md("default").splitlines()[0]
      and listed == [(m, "forward 16 query rows a warp (0.162 | 0.178 ms); dK/dV pass 32 keys a warp (0.355 | 0.285 ms); "
                         "dQ pass 32 query rows a warp (0.202 | 0.194 ms)") for m in ("gpt2:124M B=128", "gpt2:1558M B=64")],
      f"by default --flash-rows auto, and what it kept in each model's run listed under the table ({listed})")
kept = listing("default", "--flash-wgmma auto kept")
check(all(flag(l, "flash-wgmma") == "auto" for l in default) and "--flash-wgmma auto" in md("default").splitlines()[0]
      and kept == [(m, "forward wgmma (0.162 | 0.140 ms, the same bits at its first 3 launches); "
                       "dQ pass mma.sync (0.194 | 0.150 ms, the bits differ at launch 1: mma.sync kept); "
                       "dK/dV pass mma.sync (0.285 | 0.300 ms, the same bits at its first 3 launches)") for m in ("gpt2:124M B=128", "gpt2:1558M B=64")],
      f"by default --flash-wgmma auto, and the kernels it kept listed too ({kept})")
r32 = lines("rows32")
check(r32 and all(flag(l, "flash-rows") == "32" for l in r32) and "--flash-rows 32" in md("rows32").splitlines()[0]
      and "--flash-rows auto kept" not in md("rows32"), "FLASH_ROWS=32 (part flash32) reaches every run and the title, nothing tuned")
algos = listing("default", "--matmul-tune 1 timed")
check(all(flag(l, "matmul-tune") == "1" for l in default) and "--matmul-tune 1" in md("default").splitlines()[0]
      and algos == [(m, "3 products tuned, 2 took another candidate than the heuristic's first; "
                        "3072x131072x768 bf16 with the epilogue bias+GELU: 3 of 8 (1.021 | 1.204 ms); "
                        "768x768x131072 bf16 accumulating: 2 of 8 (0.540 | 0.560 ms)") for m in ("gpt2:124M B=128", "gpt2:1558M B=64")],
      f"by default --matmul-tune 1, and the candidates it took listed under the table ({algos})")
loss = listing("default", "--classifier-staged auto kept")
check(loss == [(m, "pipelined (0.430 ms unstaged, 0.290 ms staged, 0.210 ms pipelined; the same bits; on 4096 rows)") for m in ("gpt2:124M B=128", "gpt2:1558M B=64")],
      f"the loss kernel --classifier-staged auto kept, listed too ({loss})")
ln = listing("default", "--layernorm-prefetch auto kept")
check(ln == [(m, "with (0.210 ms without, 0.150 ms with; the same bits)") for m in ("gpt2:124M B=128", "gpt2:1558M B=64")],
      f"the LayerNorm backward's choice --layernorm-prefetch auto made, listed too ({ln})")
nt = lines("notune")
check(nt and all(flag(l, "matmul-tune") == "0" for l in nt) and "--matmul-tune 0" in md("notune").splitlines()[0]
      and "--matmul-tune 1 timed" not in md("notune"), "MATMUL_TUNE=0 (part notune) reaches every run and the title, nothing listed")
# bench_vs_llmc.sh: one row per config, each run's median of steps 6.. (the stand-in's step 6:
# 60 ms) and the ratios to it; llm.c run on the same shard, B, T, steps and its model's name
rows = re.findall(r"^\| (gpt2:\S+) \| (\d+)×1024 \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*)" + r" \| ([^|]*) \| ([^|]*)" * 2 + r" \|$",
                  md("llmc"), re.M)
want = [(m, B, "60.00 (" + str(round(int(B) * 1024 / 60 * 1000)) + ")", "90.00", "1.500×", "60.00", "1.000×") + ("60.00", "1.000×") * 2
        for m, B in (("gpt2:124M", "64"), ("gpt2:1558M", "16"))]
check(rows == want, f"bench_vs_llmc.sh: a row per config with the medians and ratios ({rows})")
llmc = open(f"{d}/llmc_args.txt").read().splitlines()
check(llmc == ["data/kjv_train_000000.bin 64 1024 6 d12", "data/kjv_train_000000.bin 16 1024 6 d48"],
      f"bench_vs_llmc.sh: llm.c runs the same shard, B, T and steps, GPT-2 124M as d12 and 1558M as d48 ({llmc})")
ours = lines("llmc")
head = md("llmc").splitlines()[2]
check("| ours --flash-backward split ms | that / ours | ours --bias-grad epilogue ms | that / ours |" in head,
      f"bench_vs_llmc.sh: a pair of columns for each of OURS_ALSO's runs ({head})")
said = re.findall(r"^# (gpt2:\S+ B=\d+) \S*train_gpt(.*?): layernorm: the backward with its prefetch \(--layernorm-prefetch auto, ", md("llmc"), re.M)
check(len(said) == 8 and sum(f == " --bias-grad epilogue" for _, f in said) == 2,
      f"bench_vs_llmc.sh: each run of ours says what its timed choices kept, with its config and flags ({said})")
check(len(ours) == 8 and sum("--flash-backward split" in l for l in ours) == 2 and sum("--bias-grad epilogue" in l for l in ours) == 2 and all("--batch-size 64 " in l or "--batch-size 16 " in l for l in ours),
      f"bench_vs_llmc.sh: ours, the baseline and ours with each of OURS_ALSO's flags, per config ({len(ours)} runs)")
# bench_ncu_steps.sh: ncu times every kernel (clocks and caches left alone) of a 4-step run of
# ours and of llm.c on the same config; the median training step is kept (not the first, with
# its trial kernel; not llm.c's evaluation or samples); kinds side by side, then each one's kernels
ncu = md("ncu")
kinds = dict((k, (a, b, c)) for k, a, b, c in re.findall(r"^\| ([a-z ,]+) \| ([0-9.]+) \| ([0-9.]+) \| ([-+0-9.]+) \|$", ncu, re.M))
check(kinds == {"attention": ("1.00", "0.80", "-0.20"), "matmul": ("2.00", "2.00", "+0.00"), "bias": ("0.00", "0.30", "+0.30"),
                "adamw": ("0.50", "0.40", "-0.10"), "encoder": ("0.10", "0.10", "+0.00"), "all": ("3.60", "3.60", "+0.00")},
      f"bench_ncu_steps.sh: the kinds of kernel of the median training step side by side, ms a step ({kinds})")
check("| bits_hash_kernel " not in ncu and "| flash_forward_wgmma_kernel | attention | 1 | 1.00 |" in ncu
      and "| matmul_backward_bias_kernel9 | bias | 1 | 0.30 |" in ncu and "(4 kernels; the median of 3 steps)" in ncu
      and "(5 kernels; the median of 4 steps)" in ncu, "bench_ncu_steps.sh: each one's kernels of that step, the first step's trial left out")
opts = open(f"{d}/ncu_opts.txt").read().splitlines()
check(len(opts) == 2 and all("--clock-control none" in o and "--cache-control none" in o and "--metrics gpu__time_duration.sum" in o for o in opts)
      and open(f"{d}/ncu_llmc_args.txt").read().splitlines() == ["data/kjv_train_000000.bin 64 1024 4 d12"]
      and [flag(l, "steps") for l in lines("ncu")] == ["4"], f"bench_ncu_steps.sh: ncu's options, llm.c's and ours' 4 steps ({opts})")
PY
