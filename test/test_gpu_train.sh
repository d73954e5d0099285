#!/usr/bin/env bash
# test_gpu_train — whole trainings on --device cuda against the CPU run of the same flags: fp32
# (within 1e-4), bf16 and fp8 (2e-2), fp16 (2.5e-3); the loss falls; two GPU runs are
# bit-identical. Then each kernel choice against the run it replaces: --flash-rows, --flash-wgmma,
# the forward's and the fused backward's layouts and their autos (bit for bit), 128-key tiles,
# fused128 and chain (against the CPU; chain at head size 64 and 128), --matmul-tune and
# --classifier-staged (bit for bit), --bias-grad epilogue, --matmul-wgmma. On the emulator also what only it can stage: a wgmma or cuBLASLt candidate that
# rounds otherwise (refused by the autos), a layout that hangs, a cuBLASLt without epilogues or
# FP8, the host's waits per step, a GPU the build cannot use. The full list, with why each bound
# is what it is: docs/verification.md ("test/test_gpu_train.sh").
# usage: [GPU_TRAIN_QUICK=1] [GPU_TRAIN_VOCAB=V] test/test_gpu_train.sh TRAIN_GPT     (a CUDA build on a GPU, or build/train_gpt_simt,
# the trainer on the CPU SIMT emulator). Prints "ok"/"not ok" lines. GPU_TRAIN_QUICK=1 (the suite's
# emulated run): Llama in fp32 alone, and the Llama, wgmma and no-epilogue cases one GPU run each.
set -u
BIN=${1:?usage: test/test_gpu_train.sh TRAIN_GPT}
# GPU_TRAIN_VOCAB=V (the suite's emulated run): the runs train presets of V tokens on the Bible
# folded to them (test/small_vocab.py), where a 50257-wide classifier would be most of the
# emulator's time; unset (make gpucheck on a GPU): GPT-2's vocabulary, the classifier at full width
voc=()
if [ -n "${GPU_TRAIN_VOCAB:-}" ]; then
    ${PYTHON:-/usr/bin/python3} test/small_vocab.py build/data "$GPU_TRAIN_VOCAB" ||
        { echo "not ok - test_gpu_train: test/small_vocab.py could not fold the Bible to $GPU_TRAIN_VOCAB tokens"; exit 1; }
    voc=(--vocab-size "$GPU_TRAIN_VOCAB" --train-data "build/data/kjv${GPU_TRAIN_VOCAB}_train_*.bin")
fi
gpu_vs_cpu() {  # gpu_vs_cpu PRECISION BOUND [ENV=VALUE...]: the GPU runs with those variables set (and GPU_FLAGS; MODEL: d2; FLAGS: both runs'; NOTE: a line the GPU run must print)
    local prec=$1 bound=$2 tmp r; tmp=$(mktemp -d); shift 2
    local gflags=(${GPU_FLAGS:-})
    local flags=(--model "${MODEL:-d2}" "${voc[@]}" --batch-size 4 --seq-len 64 --steps 10 --lr 1e-3 --warmup-steps 2 --val-data "" --seed 3 --precision "$prec" ${FLAGS:-})
    "$BIN" --device cpu "${flags[@]}" --log-file "$tmp/cpu.jsonl" >/dev/null 2>&1
    env "$@" "$BIN" --device cuda "${flags[@]}" "${gflags[@]}" --log-file "$tmp/gpu.jsonl" >"$tmp/gpu.out" 2>&1 || tail -3 "$tmp/gpu.out" | sed 's/^/# /'
    [ -z "${ONCE:-}" ] && env "$@" "$BIN" --device cuda "${flags[@]}" "${gflags[@]}" --log-file "$tmp/gpu2.jsonl" >/dev/null 2>&1
    local what="$prec${MODEL:+ $MODEL}${FLAGS:+ $FLAGS}${GPU_FLAGS:+ $GPU_FLAGS}"
    if [ -n "${NOTE:-}" ]; then
        grep -qF -- "$NOTE" "$tmp/gpu.out" && r=ok || r="not ok"
        echo "$r - $what${1:+ ($*)}: the GPU run says \"$NOTE\""
    fi
    ${PYTHON:-/usr/bin/python3} - "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" "$tmp/gpu2.jsonl" "$what${1:+ ($*)}" "$bound" ${ONCE:+once} <<'PY'
import json, sys
def load(p):
    try: return [json.loads(l) for l in open(p)]
    except OSError: return []
a, b, c = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
prec, bound = sys.argv[4], float(sys.argv[5])
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)) if len(a) == len(b) == 10 else float("inf")
print(("ok" if worst <= bound else "not ok") + f" - {prec} GPU training matches the CPU run over 10 steps (max loss diff {worst:.1e} <= {bound:g})")
falling = len(b) == 10 and b[-1]["loss"] < b[0]["loss"] - 0.5
print(("ok" if falling else "not ok") + f" - {prec}: the GPU loss falls ({b[0]['loss']:.3f} -> {b[-1]['loss']:.3f})" if b else f"not ok - {prec}: no GPU log")
if c or len(sys.argv) <= 6:  # (ONCE: one GPU run)
    same = len(b) == 10 and [(x["loss"], x["grad_norm"]) for x in b] == [(x["loss"], x["grad_norm"]) for x in c]
    print(("ok" if same else "not ok") + f" - {prec}: two GPU runs are bit-identical (losses and norms)")
PY
    rm -rf "$tmp"
}
gpu_vs_cpu fp32 1e-4
gpu_vs_cpu bf16 2e-2
# a Llama (llama:d2: RMSNorm, RoPE, SwiGLU, 2 query heads sharing 1 key/value head): the same bounds
# (GPU_TRAIN_QUICK=1, the suite's emulated run: fp32 alone; the same kernels' bf16 paths are in simcheck_ops)
# GPU_TRAIN_QUICK=1 also runs the cases after the first two once (ONCE): two runs bit-identical is
# each kernel's determinism, which those two hold for the kernels all of them share
quick=${GPU_TRAIN_QUICK:+1}
MODEL=llama:d2 ONCE=$quick gpu_vs_cpu fp32 1e-4
[ -z "${GPU_TRAIN_QUICK:-}" ] && MODEL=llama:d2 gpu_vs_cpu bf16 2e-2
# --flash-rows 32 (two m-tiles per warp in every flash attention pass, head size 64 here: d2 has
# C=128, NH=2) runs the same mma sequences on the same values: the whole training bit-identical
# (--flash-backward split: the rows are those of the two backward passes; the fused pass has none)
flash_rows() {
    local tmp; tmp=$(mktemp -d)
    local flags=(--device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps 4 --lr 1e-3 --val-data "" --seed 3 --precision bf16
                 --flash-backward split)
    "$BIN" "${flags[@]}" --flash-rows 16 --log-file "$tmp/16.jsonl" >/dev/null 2>&1
    "$BIN" "${flags[@]}" --flash-rows 32 --log-file "$tmp/32.jsonl" >"$tmp/32.out" 2>&1 || tail -3 "$tmp/32.out" | sed 's/^/# /'
    # auto (the default): each pass's first launch of LLMC_FLASH_TUNE_BLOCKS blocks or more (1
    # here; 256 by default, which these launches of 8 and 4 blocks are under) timed both ways
    LLMC_FLASH_TUNE_BLOCKS=1 "$BIN" "${flags[@]}" --flash-rows auto --flash-wgmma 0 --log-file "$tmp/auto.jsonl" >"$tmp/auto.out" 2>&1 || tail -3 "$tmp/auto.out" | sed 's/^/# /'
    "$BIN" "${flags[@]}" --log-file "$tmp/default.jsonl" >"$tmp/default.out" 2>&1
    ${PYTHON:-/usr/bin/python3} - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
a, b, c = load(f"{d}/16.jsonl"), load(f"{d}/32.jsonl"), load(f"{d}/auto.jsonl")
print(("ok" if len(a) == 4 and a == b else "not ok") + " - bf16: --flash-rows 32 trains bit-identically to 16 (4 steps, losses and norms)")
out = open(f"{d}/auto.out").read()
tuned = re.findall(r"^flash attention: (16|32) (?:query rows|keys) a warp in the (forward|dK/dV pass|dQ pass) \(--flash-rows auto, "
                   r"timed at B=4 T=64: [0-9.]+ ms with 16, [0-9.]+ ms with 32\)$", out, re.M)
print(("ok" if sorted(p for _, p in tuned) == ["dK/dV pass", "dQ pass", "forward"] else "not ok") +
      f" - bf16: --flash-rows auto times each pass once, at its first launch of LLMC_FLASH_TUNE_BLOCKS=1 blocks or more, and says what it keeps ({tuned})")
print(("ok" if len(c) == 4 and c == a else "not ok") + " - bf16: --flash-rows auto (each pass's rows timed, then kept) trains bit-identically to 16")
quiet = all(w not in open(f"{d}/default.out").read() for w in ("flash attention:", "matmul:", "classifier:")) and load(f"{d}/default.jsonl") == a
print(("ok" if quiet else "not ok") + " - bf16: by default (auto) launches under 256 blocks are not timed (16 rows a warp: the same run), "
      "nor products under 1e10 flops (--matmul-tune), nor a loss kernel under 4096 rows (--classifier-staged auto): nothing printed")
PY
    rm -rf "$tmp"
}
flash_rows
GPU_FLAGS="--flash-wgmma 1" ONCE=$quick gpu_vs_cpu bf16 2e-2
# (the above runs the fused backward, the default where wgmma runs; the two wgmma passes too)
GPU_FLAGS="--flash-wgmma 1 --flash-backward split" ONCE=1 gpu_vs_cpu bf16 2e-2
# --flash-forward-producer 2 and 3 (the wgmma forward with a producer warpgroup and a ring of 2
# or 3 slots; "2p": 2 with ping-pong; "2g": 2 with 3 computing warpgroups; "2s": 2 persistent, on
# an emulated GPU of 3 SMs (SIMT_SM_COUNT), so that each block runs several) run the wgmma
# forward's products in its order, and
# --flash-backward-producer 3 and 4 ("b3", "b4") the fused backward's: the training is
# bit-identical to --flash-wgmma 1 alone. On the emulator SIMT_COUNT_LAUNCHES shows the
# producer kernel ran. There the fused backward has one split, so it writes dQ itself: the
# emulator counts no launch of the sum kernel.
# "auto": --flash-forward-producer auto --flash-backward-producer auto at LLMC_FLASH_TUNE_BLOCKS=1
# (3 SMs, so the persistent layouts loop) time every layout at the first launch and keep one:
# bit-identical too, each trial printed once
# with a time for every layout (all compute the same bits). "splits": at T = 512 and B = 1 the
# fused backward has 2 splits, so the backward's auto also times the 5 layouts in which the last
# split sums dQ (v30): 10 times, and the same training as without the auto.
# (emulator only) A layout that hangs (SIMT_HANG_KERNEL: its kernel never finishes, as the host's
# polls see it) ends an auto's trial after LLMC_FLASH_TRIAL_SECONDS=1 with exit 1 and one line
# that names the layout and the flag that avoids it.
flash_forward_producer() {
    local tmp; tmp=$(mktemp -d)
    local flags=(--device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps 4 --lr 1e-3 --val-data "" --seed 3 --precision bf16
                 --flash-wgmma 1)
    SIMT_COUNT_LAUNCHES=flash_dq_sum_kernel "$BIN" "${flags[@]}" --log-file "$tmp/0.jsonl" >"$tmp/0.out" 2>&1
    for s in 2 3 2p 2g 2s b3 b4 auto; do
        local extra=(--flash-forward-producer ${s:0:1}) kernel=flash_forward_wgmma_producer_kernel
        [[ $s == *p ]] && extra+=(--flash-forward-pingpong 1)
        [[ $s == *g ]] && extra+=(--flash-forward-groups 3)
        [[ $s == *s ]] && extra+=(--flash-forward-persistent 1)
        [[ $s == b* ]] && extra=(--flash-backward-producer ${s#b}) kernel=flash_backward_fused_wgmma_producer_kernel
        [[ $s == auto ]] && extra=(--flash-forward-producer auto --flash-backward-producer auto)
        SIMT_SM_COUNT=$([[ $s == 2s || $s == auto ]] && echo 3 || echo 132) LLMC_FLASH_TUNE_BLOCKS=$([[ $s == auto ]] && echo 1 || echo 256) SIMT_COUNT_LAUNCHES=$kernel "$BIN" "${flags[@]}" "${extra[@]}" --log-file "$tmp/$s.jsonl" \
            >"$tmp/$s.out" 2>&1 || tail -3 "$tmp/$s.out" | sed 's/^/# /'
    done
    local long=(--batch-size 1 --seq-len 512 --steps 2)  # (2 splits)
    "$BIN" "${flags[@]}" "${long[@]}" --log-file "$tmp/splits0.jsonl" >"$tmp/splits0.out" 2>&1
    LLMC_FLASH_TUNE_BLOCKS=1 "$BIN" "${flags[@]}" "${long[@]}" --flash-backward-producer auto --log-file "$tmp/splits.jsonl" >"$tmp/splits.out" 2>&1
    if [[ $BIN == *simt* ]]; then
        local pass k
        for pass in forward backward; do
            k=flash_forward_wgmma_producer_kernel; [ $pass = backward ] && k=flash_backward_fused_wgmma_producer_kernel
            SIMT_HANG_KERNEL=$k LLMC_FLASH_TRIAL_SECONDS=1 LLMC_FLASH_TUNE_BLOCKS=1 "$BIN" "${flags[@]}" --flash-$pass-producer auto \
                --log-file "" >"$tmp/hang_$pass.out" 2>&1
            echo "exit $?" >>"$tmp/hang_$pass.out"
        done
    fi
    ${PYTHON:-/usr/bin/python3} - "$tmp" "$BIN" <<'PY'
import json, os, re, sys
d, binary = sys.argv[1], sys.argv[2]
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
base = load(f"{d}/0.jsonl")
for what, layout in (("forward", "the forward's layout v11 producer 2"), ("backward", "the fused backward's layout v23 producer 3")):
    if not os.path.exists(f"{d}/hang_{what}.out"): continue
    out = open(f"{d}/hang_{what}.out").read()
    want = (f"error: flash attention: {layout} did not finish in 1 s in --flash-{what}-producer auto's trial (it hangs here): "
            f"run with --flash-{what}-producer 0\nexit 1\n")
    print(("ok" if out.endswith(want) else "not ok") +
          f" - bf16: a layout that hangs ends --flash-{what}-producer auto's trial after LLMC_FLASH_TRIAL_SECONDS, in one line naming it (exit 1)")
if "simt" in binary:
    sums = re.search(r"^simt: ([0-9]+) launches of flash_dq_sum_kernel$", open(f"{d}/0.out").read(), re.M)
    print(("ok" if len(base) == 4 and sums is not None and sums.group(1) == "0" else "not ok") +
          f" - bf16: the fused backward with one split writes dQ itself (the sum kernel ran {sums.group(1) if sums else '?'} times)")
for s in ("2", "3", "2p", "2g", "2s", "b3", "b4"):
    ran = re.search(r"^simt: ([0-9]+) launches of flash_\w+_producer_kernel$", open(f"{d}/{s}.out").read(), re.M)
    emulated = "simt" in binary
    used = not emulated or (ran is not None and int(ran.group(1)) > 0)
    flags = (f"--flash-backward-producer {s[1]}" if s[0] == "b" else
             f"--flash-forward-producer {s[0]}{' --flash-forward-pingpong 1' if s.endswith('p') else ''}"
             f"{' --flash-forward-groups 3' if s.endswith('g') else ''}"
             f"{' --flash-forward-persistent 1 (3 SMs: each block runs several blocks of rows)' if s.endswith('s') else ''}")
    print(("ok" if len(base) == 4 and load(f"{d}/{s}.jsonl") == base and used else "not ok") +
          f" - bf16: {flags}" +
          " trains bit-identically to --flash-wgmma 1 alone (4 steps, losses and norms)" +
          (f"; the producer kernel ran {ran.group(1) if ran else 0} times" if emulated else ""))
out = open(f"{d}/auto.out").read()
for what, flag, n in (("forward's", "forward", 14), ("fused backward's", "backward", 5)):
    said = re.findall(rf"^flash attention: the {re.escape(what)} layout (.+?) \(--flash-{flag}-producer auto, timed at B=4 T=64: (.*)\)$", out, re.M)
    times = re.findall(r"[0-9.]+ ms", said[0][1]) if len(said) == 1 else []
    print(("ok" if len(said) == 1 and len(times) == n and "other bits" not in said[0][1] else "not ok") +
          f" - bf16: --flash-{flag}-producer auto times the {what} {n} layouts once, each with the first's bits, and names the one it keeps"
          f" ({said[0][0] if said else 'no line'}: {len(times)} times)")
print(("ok" if len(base) == 4 and load(f"{d}/auto.jsonl") == base else "not ok") +
      " - bf16: --flash-forward-producer auto --flash-backward-producer auto trains bit-identically to --flash-wgmma 1 alone")
said = re.findall(r"^flash attention: the fused backward's layout (.+?) \(--flash-backward-producer auto, timed at B=1 T=512: (.*)\)$",
                  open(f"{d}/splits.out").read(), re.M)
times = re.findall(r"[0-9.]+ ms", said[0][1]) if len(said) == 1 else []
v30 = re.findall(r"v30[^,]* [0-9.]+ ms", said[0][1]) if len(said) == 1 else []
splits0 = load(f"{d}/splits0.jsonl")
print(("ok" if len(times) == 10 and len(v30) == 5 and len(splits0) == 2 and load(f"{d}/splits.jsonl") == splits0 else "not ok") +
      " - bf16: with 2 splits --flash-backward-producer auto also times the 5 layouts where the last split sums dQ (v30), each with"
      f" the first's bits, and trains bit-identically ({said[0][0] if said else 'no line'}: {len(times)} times, {len(v30)} of v30)")
PY
    rm -rf "$tmp"
}
flash_forward_producer
# --flash-forward-keys 128 (the producer forward with key tiles of 128: other bits) against the CPU,
# at T = 320 (3 tiles of 128; at T = 64 one tile holds every key, and the bits equal 64's)
FLAGS="--seq-len 320" GPU_FLAGS="--flash-wgmma 1 --flash-forward-producer 2 --flash-forward-keys 128" ONCE=1 gpu_vs_cpu bf16 2e-2
FLAGS="--seq-len 320" GPU_FLAGS="--flash-wgmma 1 --flash-forward-keys 128" ONCE=1 gpu_vs_cpu bf16 2e-2  # (and without a producer)
# --flash-backward fused128 and chain: the fused backward at head size 128 (a GPT-2 model file of
# 2 heads of 128, one block; T = 192: two key blocks, the second short) against the CPU. On the
# emulator the run must say that the fused kernel ran.
fused_hs128() {  # fused_hs128 fused128|chain
    local model=build/gpu_train_hs128.bin V=${GPU_TRAIN_VOCAB:-50257}
    ${PYTHON:-/usr/bin/python3} -c "
import sys; sys.path.insert(0, 'test')
import gpt2_torch as g
V = int(sys.argv[2])
cfg = dict(maxT=256, V=V, L=1, NH=2, C=256, Vp=(V + 127) // 128 * 128)
g.write_model(sys.argv[1], cfg, g.random_params(cfg, 1))" "$model" "$V"
    local note=()
    [[ $BIN == *simt* ]] && note=(SIMT_COUNT_LAUNCHES=flash_backward_fused_wgmma_kernel)
    NOTE=${note:+"simt: 10 launches of flash_backward_fused_wgmma_kernel"} MODEL=$model FLAGS="--seq-len 192" \
        GPU_FLAGS="--flash-wgmma 1 --flash-backward $1" ONCE=1 gpu_vs_cpu bf16 2e-2 "${note[@]}"
    rm -f "$model" "$model.crc32c"
}
fused_hs128 fused128
fused_hs128 chain
# --flash-backward chain: the fused backward with a block per key block, adding to one dQ sum in
# turn (T = 320: 3 key blocks, the last short) against the CPU, and two runs bit-identical
FLAGS="--seq-len 320" GPU_FLAGS="--flash-wgmma 1 --flash-backward chain" gpu_vs_cpu bf16 2e-2
# --flash-wgmma auto (the default): at each pass's first 3 launches of LLMC_FLASH_TUNE_BLOCKS blocks
# or more, wgmma and mma.sync both run (timed at the first) and the bits they wrote are hashed;
# wgmma is kept only where it wrote the same bits each time, so the run is --flash-wgmma 0's
# whatever it chooses. SIMT_WGMMA_REVERSE=1
# makes the emulator's wgmma add its 16 terms in the other order (as a GPU whose two instructions
# round otherwise): auto must see the bits differ and keep mma.sync.
# (--flash-backward split: auto decides pass by pass among the two backward passes; the fused one
# is chosen by a fixed rule, not by timing)
flash_wgmma_auto() {
    local tmp; tmp=$(mktemp -d)
    local flags=(--device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps 4 --lr 1e-3 --val-data "" --seed 3 --precision bf16
                 --flash-backward split)
    "$BIN" "${flags[@]}" --flash-wgmma 0 --log-file "$tmp/off.jsonl" >/dev/null 2>&1
    LLMC_FLASH_TUNE_BLOCKS=1 "$BIN" "${flags[@]}" --flash-wgmma auto --log-file "$tmp/auto.jsonl" >"$tmp/auto.out" 2>&1 || tail -3 "$tmp/auto.out" | sed 's/^/# /'
    SIMT_WGMMA_REVERSE=1 "$BIN" "${flags[@]}" --flash-wgmma 1 --log-file "$tmp/rev1.jsonl" >/dev/null 2>&1
    SIMT_WGMMA_REVERSE=1 LLMC_FLASH_TUNE_BLOCKS=1 "$BIN" "${flags[@]}" --flash-wgmma auto --log-file "$tmp/revauto.jsonl" >"$tmp/revauto.out" 2>&1 \
        || tail -3 "$tmp/revauto.out" | sed 's/^/# /'
    ${PYTHON:-/usr/bin/python3} - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
off, auto, rev1, revauto = (load(f"{d}/{n}.jsonl") for n in ("off", "auto", "rev1", "revauto"))
line = (r"^flash attention: (wgmma|mma\.sync) in the (forward|dK/dV pass|dQ pass) \(--flash-wgmma auto, timed at B=4 T=64: "
        r"[0-9.]+ ms with mma\.sync, [0-9.]+ ms with wgmma; (the same bits at its first 3 launches|the bits differ at launch [123]: mma\.sync kept)\)$")
chose = re.findall(line, open(f"{d}/auto.out").read(), re.M)
if not chose:
    print("# skip: --flash-wgmma auto chose nothing (not a compute capability 9.0 GPU)")
    sys.exit(0)
print(("ok" if sorted(p for _, p, _ in chose) == ["dK/dV pass", "dQ pass", "forward"] else "not ok") +
      f" - bf16: --flash-wgmma auto runs each pass both ways at its first launches of LLMC_FLASH_TUNE_BLOCKS=1 blocks or more, and says once what it keeps ({chose})")
print(("ok" if len(auto) == 4 and auto == off else "not ok") + " - bf16: --flash-wgmma auto trains bit-identically to --flash-wgmma 0")
if "CPU SIMT emulator" not in open(f"{d}/auto.out").read():  # (the trainer's gpu: line)
    print("# skip: SIMT_WGMMA_REVERSE is the emulator's (its wgmma rounding otherwise); on this GPU: " +
          ("--flash-wgmma 1 trains bit-identically to 0" if rev1 == off else "--flash-wgmma 1 trains otherwise than 0"))
    sys.exit(0)
rev = re.findall(line, open(f"{d}/revauto.out").read(), re.M)
print(("ok" if len(rev1) == 4 and rev1 != off else "not ok") + " - bf16: with SIMT_WGMMA_REVERSE=1 the emulator's wgmma rounds otherwise (--flash-wgmma 1 trains differently)")
print(("ok" if sorted(p for k, p, b in rev if k == "mma.sync" and b.startswith("the bits differ")) == ["dK/dV pass", "dQ pass", "forward"] else "not ok") +
      f" - bf16: --flash-wgmma auto sees each pass's bits differ there and keeps mma.sync ({rev})")
print(("ok" if len(revauto) == 4 and revauto == off else "not ok") + " - bf16: ... and trains bit-identically to --flash-wgmma 0")
PY
    rm -rf "$tmp"
}
flash_wgmma_auto
# --matmul-tune 1 (the default): each product of LLMC_MATMUL_TUNE_FLOPS flops or more (1 here;
# 1e10 by default, which d2's products are under) runs every algorithm cuBLASLt's heuristic
# offers at its first call, and the fastest of those that wrote the first's bits is kept: the run
# is --matmul-tune 0's whatever it chooses. On the emulator the heuristic offers 4
# (SIMT_LT_ALGOS=4), and with SIMT_LT_ALGO_REVERSE=1 the 2nd and 4th sum along k in reverse: in
# fp32, where no rounding to 16 bits can hide the difference, tuning must refuse both for every
# product. (In bf16 a sum of a few hundred bf16 products is often exact in fp32, in any order:
# the bits then agree because the results do. The default threshold keeps tuning to products
# whose sums are long and whose outputs are millions of elements.) On a GPU the SIMT_ variables
# are ignored, and the check is cuBLASLt's own candidates in fp32: the tuned run bit-identical to
# 0. In bf16 at d2's sizes a candidate that sums in another order (split-k) may write the same
# bits at its first call, its sums happening to be exact, and other bits later: there the bf16
# run with every product tuned is reported, not checked (at real sizes the first call shows it).
# --classifier-staged auto (the default), in the bf16 tuned run: at the first call of
# LLMC_CLASSIFIER_TUNE_ROWS rows or more (1 here; 4096 by default, over d2's 256) the loss kernel
# runs unstaged, staged and pipelined on a copy of the rows, and a staged one is kept only where
# it wrote the same bits: 0, 1, 2 and auto train alike, bit for bit (each thread handles the same
# packs every way; 2: d2's 256 rows are 2 a block on the emulator's SMs, so its second buffer runs;
# where two rows do not fit in shared memory, as GPT-2's on an A100, 2 runs the unstaged kernel).
# --layernorm-prefetch auto (the default), in the same run: at the first LayerNorm backward of
# LLMC_LAYERNORM_TUNE_ROWS rows or more (1 here) it runs with and without the prefetch on copies
# and says what it keeps, with the same bits; 1 trains as 0, bit for bit.
tuned_choices() {
    local tmp; tmp=$(mktemp -d)
    local base=(--device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps 2 --lr 1e-3 --val-data "" --seed 3)
    local tune=(LLMC_MATMUL_TUNE_FLOPS=1 SIMT_LT_ALGOS=4)
    "$BIN" "${base[@]}" --precision fp32 --matmul-tune 0 --log-file "$tmp/fp32-off.jsonl" --save-model "$tmp/fp32-off.bin" >"$tmp/fp32-off.out" 2>&1
    local bf16_tune=("${tune[@]}")  # (on a GPU: the bf16 checks without --matmul-tune, the tuned bf16 run reported apart)
    grep -q "gpu: CPU SIMT emulator" "$tmp/fp32-off.out" || bf16_tune=(LLMC_MATMUL_TUNE_FLOPS=1e30)
    "$BIN" "${base[@]}" --precision bf16 --matmul-tune 0 --classifier-staged 0 --log-file "$tmp/bf16-off.jsonl" >/dev/null 2>&1
    "$BIN" "${base[@]}" --precision bf16 --matmul-tune 0 --classifier-staged 1 --log-file "$tmp/bf16-staged.jsonl" >/dev/null 2>&1
    "$BIN" "${base[@]}" --precision bf16 --matmul-tune 0 --classifier-staged 2 --log-file "$tmp/bf16-pipelined.jsonl" >/dev/null 2>&1
    "$BIN" "${base[@]}" --precision bf16 --matmul-tune 0 --classifier-staged 0 --layernorm-prefetch 1 --log-file "$tmp/bf16-lnpf.jsonl" >/dev/null 2>&1
    env "${bf16_tune[@]}" LLMC_CLASSIFIER_TUNE_ROWS=1 LLMC_LAYERNORM_TUNE_ROWS=1 "$BIN" "${base[@]}" --precision bf16 --log-file "$tmp/bf16-on.jsonl" >"$tmp/bf16-on.out" 2>&1 \
        || tail -3 "$tmp/bf16-on.out" | sed 's/^/# /'
    grep -q "gpu: CPU SIMT emulator" "$tmp/fp32-off.out" ||
        env "${tune[@]}" "$BIN" "${base[@]}" --precision bf16 --log-file "$tmp/bf16-tuned.jsonl" >/dev/null 2>&1
    env "${tune[@]}" SIMT_LT_ALGO_REVERSE=1 "$BIN" "${base[@]}" --precision fp32 --log-file "$tmp/fp32-on.jsonl" --save-model "$tmp/fp32-on.bin" >"$tmp/fp32-on.out" 2>&1 \
        || tail -3 "$tmp/fp32-on.out" | sed 's/^/# /'
    SIMT_LT_REFUSE=1 SIMT_LT_ALGO_REVERSE=1 "$BIN" "${base[@]}" --precision fp32 --matmul-tune 0 --log-file "$tmp/rev0.jsonl" --save-model "$tmp/rev0.bin" >/dev/null 2>&1
    ${PYTHON:-/usr/bin/python3} - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
line = re.compile(r"^matmul: \d+x\d+x\d+ (fp32|bf16)( accumulating)?( with the epilogue [a-zA-Z+ ]+)?: (the heuristic's first kept|candidate [234] of 4 taken) "
                  r"\(--matmul-tune 1: [0-9.]+ ms against [0-9.]+ ms with the heuristic's first; ([0-3]) of the 3 others gave the same bits\)$", re.M)
emulated = "gpu: CPU SIMT emulator" in open(f"{d}/fp32-off.out").read()
off, on = load(f"{d}/bf16-off.jsonl"), load(f"{d}/bf16-on.jsonl")
print(("ok" if len(off) == 2 and on == off else "not ok") + " - bf16: " + ("--matmul-tune 1 with every product tuned (and " if emulated else "(")
      + "--classifier-staged auto, --layernorm-prefetch auto) trains bit-identically to --matmul-tune 0 --classifier-staged 0 (2 steps)")
lnpf = load(f"{d}/bf16-lnpf.jsonl")
print(("ok" if len(off) == 2 and lnpf == off else "not ok") + " - bf16: --layernorm-prefetch 1 (dinp loaded in the first pass) trains bit-identically to the default")
said = re.findall(r"^layernorm: the backward with(?:out)? its prefetch \(--layernorm-prefetch auto, timed at N=\d+ C=\d+: [0-9.]+ ms without, "
                  r"[0-9.]+ ms with; the same bits\)$", open(f"{d}/bf16-on.out").read(), re.M)
print(("ok" if len(said) == 1 else "not ok") + f" - bf16: --layernorm-prefetch auto times the backward both ways once, sees the same bits and says what it keeps ({len(said)} lines)")
if not emulated:
    tuned = load(f"{d}/bf16-tuned.jsonl")
    print("# bf16 with every product tuned at d2's sizes (LLMC_MATMUL_TUNE_FLOPS=1), not a check (see above): " +
          ("bit-identical to --matmul-tune 0" if tuned == off and len(off) == 2 else f"not bit-identical to --matmul-tune 0 ({tuned} against {off})"))
if emulated:
    said = line.findall(open(f"{d}/bf16-on.out").read())
    ok = len(said) >= 10 and all(s[4] == "3" for s in said)
    print(("ok" if ok else "not ok") + f" - bf16: each product says once what it kept and that the 3 other candidates gave the same bits ({len(said)} products)")
staged, pipelined = load(f"{d}/bf16-staged.jsonl"), load(f"{d}/bf16-pipelined.jsonl")
print(("ok" if len(off) == 2 and staged == off else "not ok") + " - bf16: --classifier-staged 1 (the row in shared memory) trains bit-identically to 0")
print(("ok" if len(off) == 2 and pipelined == off else "not ok") + " - bf16: --classifier-staged 2 (a block an SM, the next row copied in "
      "while it computes) trains bit-identically to 0")
said = re.findall(r"^classifier: the (staged|unstaged|pipelined) kernel \(--classifier-staged auto, timed on 256 rows of \d+: [0-9.]+ ms unstaged, "
                  r"[0-9.]+ ms staged(, [0-9.]+ ms pipelined)?; the same bits\)$", open(f"{d}/bf16-on.out").read(), re.M)
three = len(said) == 1 and (said[0][1] != "" or not emulated)  # (the emulator's shared memory holds two rows)
print(("ok" if three else "not ok") + f" - bf16: --classifier-staged auto times the kernels that fit (three; two where two rows do not, as on an A100) once, at its first call of "
      f"LLMC_CLASSIFIER_TUNE_ROWS=1 rows or more, sees the same bits and says what it keeps ({said})")
off, on, rev0 = load(f"{d}/fp32-off.jsonl"), load(f"{d}/fp32-on.jsonl"), load(f"{d}/rev0.jsonl")
def model(name):  # the saved weights' bytes: a last-bit difference in a loss may round away in its print
    try: return open(f"{d}/{name}.bin", "rb").read()
    except OSError: return b""
if emulated:
    print(("ok" if len(rev0) == 2 and model("rev0") and model("rev0") != model("fp32-off") else "not ok")
          + " - fp32: with SIMT_LT_ALGO_REVERSE=1 the 2nd candidate rounds otherwise (run alone, it trains other weights)")
    said = line.findall(open(f"{d}/fp32-on.out").read())
    ok = len(said) >= 10 and all(s[4] == "1" and "candidate 2" not in s[3] and "candidate 4" not in s[3] for s in said)
    print(("ok" if ok else "not ok") + f" - fp32: --matmul-tune 1 sees the 2nd and 4th candidates' bits differ at every product and never takes them ({len(said)} products)")
else:
    print("# SIMT_LT_ALGO_REVERSE is the emulator's (candidates that round otherwise): here the fp32 run tunes among this GPU's own")
print(("ok" if len(off) == 2 and on == off and model("fp32-off") and model("fp32-on") == model("fp32-off") else "not ok")
      + " - fp32: --matmul-tune 1 with every product tuned trains bit-identically to 0 (the losses, norms and weights)")
PY
    rm -rf "$tmp"
}
tuned_choices
host_waits() {  # host_waits STEPS TOTAL_BATCH_TOKENS: the emulator's count of full waits (empty on a GPU; "failed")
    local out
    out=$(SIMT_COUNT_WAITS=1 "$BIN" --device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps "$1" --val-data "" \
        --total-batch-tokens "$2" 2>&1 >/dev/null) || { echo failed; return; }
    sed -n 's/^simt: the host waited for all queued GPU work \([0-9]*\) times$/\1/p' <<<"$out"
}
w31=$(host_waits 3 256)
if [ -n "$w31" ]; then
    w34=$(host_waits 3 1024) w61=$(host_waits 6 256)
    if [[ "$w31 $w34 $w61" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
        [ "$w34" = "$w31" ] && r=ok || r="not ok"
        echo "$r - host waits for the whole GPU queue do not grow with micro-steps (3 steps: $w31 with 1 micro-step each, $w34 with 4)"
        [ $((w61 - w31)) -le 3 ] && r=ok || r="not ok"
        echo "$r - at most one host wait for the whole GPU queue per optimizer step (3 more steps: $((w61 - w31)) more)"
    else
        echo "not ok - counting the host's waits: a run failed or printed no count ($w31, $w34, $w61)"
    fi
    # where cuBLASLt has no algorithm with the bias/GELU epilogues, they run as our kernels
    # (matmul.cuh): the same training, within the same bound of the CPU run
    ONCE=$quick gpu_vs_cpu bf16 2e-2 SIMT_LT_NO_EPILOGUES=1
    # where cuBLASLt refuses every FP8 product (as cuBLASLt 13.1 once did on an H100), they run as
    # bf16 products of their dequantized values (matmul.cuh: fp8_linear): the same numbers, so
    # the same training within the same bound, and a note says so
    NOTE="note: FP8 products that cuBLASLt has no algorithm for run as bf16 products of their dequantized values" \
        ONCE=1 gpu_vs_cpu fp8 2e-2 SIMT_LT_REFUSE_FP8=1
fi
# --bias-grad epilogue: the bias gradients from cuBLASLt's epilogue on the weight-gradient
# products, their sums rounded to bf16 before they are added: within the bf16 bound of the CPU
GPU_FLAGS="--bias-grad epilogue" ONCE=1 gpu_vs_cpu bf16 2e-2
# --matmul-wgmma 1-6: every forward and input-gradient product by our GEMM (TMA, wgmma; other sums' order), on 3
# emulated SMs (4 for clusters of 2) so that a block runs several tiles: within the bf16 bound of the CPU, and two runs
# bit-identical (each output element has one owner thread, which sums its k-slices in order)
NOTE="matmul: the forward and input-gradient products by our GEMM" GPU_FLAGS="--matmul-wgmma 1" gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3
GPU_FLAGS="--matmul-wgmma 2" gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3  # (ping-pong)
GPU_FLAGS="--matmul-wgmma 3" gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3  # (TMA stores)
GPU_FLAGS="--matmul-wgmma 4" gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=4  # (1 in clusters of 2: 2 of them; 5 and 6 in auto below)
# a GPU where no cluster of 2 fits (here 1 SM): layout 1 runs instead, and the run says so
NOTE="matmul: our GEMM's clusters of 2 do not fit on this GPU: layout 1 runs for 4" GPU_FLAGS="--matmul-wgmma 4" ONCE=1 gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=1
# --matmul-wgmma-products gelu: our GEMM for the MLP's fc forward and fcproj's input gradient
# alone, cuBLASLt for the rest: the emulator counts 2 launches a layer a step (d2: 40 in 10 steps)
if [[ $BIN == *simt* ]]; then note=(SIMT_COUNT_LAUNCHES=matmul_wgmma_kernel) gelu_note="simt: 40 launches of matmul_wgmma_kernel"
else note=() gelu_note="matmul: the products with a GELU in the epilogue by our GEMM"; fi
NOTE=$gelu_note GPU_FLAGS="--matmul-wgmma 2 --matmul-wgmma-products gelu" ONCE=1 gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3 "${note[@]}"
# --classifier-stats epilogue: the LM head's product by our GEMM (layout 1: d2's is too small to time), whose
# epilogue also gives each row's max and sum of exps per 128 columns; the loss kernel then reads
# the row once. Within the bf16 bound of the CPU, two runs bit-identical.
NOTE="matmul: the LM head's product by our GEMM, with the classifier's stats in its epilogue" GPU_FLAGS="--classifier-stats epilogue" \
    gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3
# without --matmul-wgmma the LM head's layout is chosen by timing, as auto does (LLMC_MATMUL_TUNE_FLOPS=1: at d2's size too)
NOTE="(--classifier-stats epilogue, by timing: 1-6 took" GPU_FLAGS="--classifier-stats epilogue" ONCE=1 \
    gpu_vs_cpu bf16 2e-2 SIMT_SM_COUNT=3 LLMC_MATMUL_TUNE_FLOPS=1
# --matmul-wgmma auto: each product of LLMC_MATMUL_TUNE_FLOPS flops or more (1 here) runs the
# six layouts at its first call and keeps the fastest. They write the same bits (each output's
# sum runs over the same k-slices in order), so the run is --matmul-wgmma 1's, bit for bit, and a
# line for each product's shape says what it kept, with the 5 other layouts giving layout 1's bits.
# Both runs take the classifier's stats from the LM head's product: its line says so, and its
# stats too are layout 1's bits in every layout.
gemm_auto() {
    local tmp; tmp=$(mktemp -d)
    local base=(--device cuda --model d2 "${voc[@]}" --batch-size 4 --seq-len 64 --steps 3 --lr 1e-3 --val-data "" --seed 3 --precision bf16
                --classifier-stats epilogue)
    SIMT_SM_COUNT=3 "$BIN" "${base[@]}" --matmul-wgmma 1 --log-file "$tmp/1.jsonl" >/dev/null 2>&1
    SIMT_SM_COUNT=3 LLMC_MATMUL_TUNE_FLOPS=1 "$BIN" "${base[@]}" --matmul-wgmma auto --log-file "$tmp/auto.jsonl" >"$tmp/auto.out" 2>&1
    ${PYTHON:-/usr/bin/python3} - "$tmp" <<'PY'
import json, re, sys
d = sys.argv[1]
def load(p):
    try: return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
    except OSError: return []
a, b = load(f"{d}/1.jsonl"), load(f"{d}/auto.jsonl")
print(("ok" if len(a) == 3 and a == b else "not ok") + " - bf16: --matmul-wgmma auto trains bit-identically to --matmul-wgmma 1 (3 steps, losses and norms)")
lines = re.findall(r"^matmul: our GEMM (\d+x\d+x\d+[^:]*): layout [1-6] \(--matmul-wgmma auto: 1-6 took [0-9.]+(?:, [0-9.]+){5} ms; 5 of 5 gave layout 1's bits\)$",
                   open(f"{d}/auto.out").read(), re.M)
ok = len(lines) >= 8 and len(set(lines)) == len(lines) and any("with GELU" in s for s in lines) and any("with dGELU" in s for s in lines) \
    and any("the LM head's, with the classifier's stats" in s for s in lines)
print(("ok" if ok else "not ok") + f" - bf16: --matmul-wgmma auto times the 6 layouts once a product's shape, all with layout 1's bits, and says what it keeps ({len(lines)} shapes)")
PY
    rm -rf "$tmp"
}
gemm_auto
ONCE=$quick gpu_vs_cpu fp8 2e-2
# delayed scaling (the one-pass quantize kernel with its atomicMax record, the history on the host):
# the same bound; both sides record the same amaxes up to the runs' last-bit differences
FLAGS="--fp8-scaling delayed --fp8-amax-history 4" ONCE=$quick gpu_vs_cpu fp8 2e-2
# fp16 (dynamic loss scaling, llmc/loss_scale.h; the flash kernels' .f16 mma, cuBLASLt's 16F):
# bf16's reasoning at 8× finer rounding, 2.5e-3 (~1e-5 observed on the emulator)
ONCE=$quick gpu_vs_cpu fp16 2.5e-3
[ -z "${GPU_TRAIN_QUICK:-}" ] && GPU_FLAGS="--flash-wgmma 1" gpu_vs_cpu fp16 2.5e-3
# memory plan (llmc/planner.h, model.h's gpt_activation_bytes):
#   the activations the memory line predicts are what the run allocates: the peak of Buf's GPU
#   memory is the model state plus them, and the kernels' scratch stays within 1% of them (the
#   share the plan reserves; the emulator shows under 0.3%); so too with --recompute selective
#   and full, whose activations are fewer, and for a Llama (grouped-query attention, no repeated k, v);
#   for a GPT-2 of odd width, whose GELU backward keeps an fp32 product the plan counts; with FP8
#   (its scratch), and (emulator only) with FP8 refused by cuBLASLt, which the trainer finds
#   before its plan and says so (the dequantized operands counted)
#   a --batch-size whose activations cannot fit is refused before the weights are drawn (exit 2),
#   with a batch size that fits and keeps the step's tokens in whole micro-batches
#   --batch-size auto takes the whole step in one micro-batch where it fits
#   (emulator only) on a GPU of SIMT_GPU_MEMORY bytes, the suggested flags then train within it,
#   --batch-size auto picks that same suggestion and trains (or, where not even B=1 fits, says
#   so: exit 2), and a model state larger than the GPU is refused before it is allocated
#   (planner.h: plan_state; exit 2, one line), and a GPU without room for the cuBLASLt
#   workspace is one line too (common.h: cuda_ctx_init; exit 1)
# A vocabulary of 8192 here (the Bible folded to it, test/small_vocab.py), GPU_TRAIN_VOCAB or not:
# with 250 tokens a d2 keeps ~8-12 KB of activations a position, and the kernels' scratch (~104 B
# a position: attention's D rows, the encoder's indices, the column-sum partials) is 0.9-1.3% of
# them, which the plan's fixed 64 MiB covers but its 1% share does not; with 8192 the logits make
# them ~27 KB, the scratch ~0.4%. (GPT-2's 50257 made them ~112 KB, the scratch ~0.1%: a check
# 10x less tight, and these runs most of the emulated suite's time.)
memory_plan() {
    local tmp; tmp=$(mktemp -d)
    ${PYTHON:-/usr/bin/python3} test/small_vocab.py build/data 8192 ||
        { echo "not ok - memory plan: test/small_vocab.py could not fold the Bible to 8192 tokens"; rm -rf "$tmp"; return; }
    local flags=(--device cuda --model d2 --vocab-size 8192 --train-data "build/data/kjv8192_train_*.bin" --seq-len 64 --steps 1 --val-data "" --precision bf16)
    "$BIN" "${flags[@]}" --batch-size 16 >"$tmp/run.out" 2>&1 || tail -3 "$tmp/run.out" | sed 's/^/# /'
    local r
    for r in selective full; do  # (model.h: Recompute) fewer activations kept: the prediction follows
        "$BIN" "${flags[@]}" --batch-size 16 --recompute $r >"$tmp/run_$r.out" 2>&1 || tail -3 "$tmp/run_$r.out" | sed 's/^/# /'
    done
    # a Llama (grouped-query attention, NKV = 1 of NH = 2: qkv keeps (NH + 2·NKV)·hs a position, its
    # kernels read it in place; RoPE's table, SwiGLU's two up-projections): the same accounting
    "$BIN" "${flags[@]/d2/llama:d2}" --batch-size 16 >"$tmp/run_llama.out" 2>&1 || tail -3 "$tmp/run_llama.out" | sed 's/^/# /'
    # a GPT-2 of odd width (a model file: C = 129, 3 heads of 43, one block): its 16-bit weights lie
    # at odd elements (2-byte aligned, as cuBLASLt is told), and fc projection's input, 4C = 516
    # wide, rules out cuBLASLt's DGELU epilogue (rows a multiple of 8), so the GELU backward keeps
    # its product in an fp32 scratch, B·T·4C floats, which the plan counts (model.h:
    # gpt_gelu_scratch_bytes): 8.7% of the activations here, past the 1% were it not counted
    ${PYTHON:-/usr/bin/python3} -c "
import sys; sys.path.insert(0, 'test')
import gpt2_torch as g
cfg = dict(maxT=64, V=8192, L=1, NH=3, C=129, Vp=8192)
g.write_model(sys.argv[1], cfg, g.random_params(cfg, 1))" "$tmp/odd.bin"
    "$BIN" "${flags[@]/d2/$tmp/odd.bin}" --batch-size 16 >"$tmp/run_odd.out" 2>&1 || tail -3 "$tmp/run_odd.out" | sed 's/^/# /'
    # --precision fp8: the FP8 products' scratch, in the memory line beside the activations
    "$BIN" "${flags[@]/bf16/fp8}" --batch-size 16 >"$tmp/run_fp8.out" 2>&1 || tail -3 "$tmp/run_fp8.out" | sed 's/^/# /'
    # (emulator only) and where cuBLASLt refuses FP8 products (SIMT_LT_REFUSE_FP8=1): the trainer
    # finds so before its plan (matmul.cuh: fp8_products_run), which then counts the dequantized
    # fallback's bf16 operands (~2 MB here, 7.4% of the activations: past the 1% were it unplanned)
    local fallback=()
    if grep -q '^gpu: CPU SIMT emulator' "$tmp/run.out"; then
        SIMT_LT_REFUSE_FP8=1 "$BIN" "${flags[@]/bf16/fp8}" --batch-size 16 >"$tmp/run_fp8_fallback.out" 2>&1 ||
            tail -3 "$tmp/run_fp8_fallback.out" | sed 's/^/# /'
        fallback=("$tmp/run_fp8_fallback.out")
    fi
    # fp32 d2 at 1000x1024 tokens needs ~229 GB of activations: more than any one GPU has
    "$BIN" --device cuda --model d2 --seq-len 1024 --batch-size 1000 --steps 1 --val-data "" --precision fp32 >"$tmp/big.out" 2>&1
    echo "rc $?" >>"$tmp/big.out"
    ${PYTHON:-/usr/bin/python3} - "$tmp/run.out" "$tmp/big.out" "$tmp/run_selective.out" "$tmp/run_full.out" "$tmp/run_llama.out" "$tmp/run_fp8.out" "$tmp/run_odd.out" "${fallback[@]}" <<'PY'
import re, sys
run, big = open(sys.argv[1]).read(), open(sys.argv[2]).read()
runs = [("", sys.argv[1]), (" with --recompute selective", sys.argv[3]), (" with --recompute full", sys.argv[4]),
        (" of llama:d2", sys.argv[5]), (" with --precision fp8 (its scratch in the memory line)", sys.argv[6]),
        (" of a GPT-2 of odd width (C = 129: the GELU backward's fp32 scratch in the memory line)", sys.argv[7])]
ok = re.search(r"^memory rank 0: .*, gelu scratch \d+ B$", open(sys.argv[7]).read(), re.M) is not None
print(("ok" if ok else "not ok") + " - memory plan: a GPT-2 of odd width trains in bf16 and its memory line counts the GELU "
      "backward's fp32 scratch (no DGELU epilogue at 4C = 516)")
if len(sys.argv) > 8:
    runs.append((" with --precision fp8 where cuBLASLt refuses FP8 (the dequantized operands in the fp8 scratch)", sys.argv[8]))
    note = "note: FP8 products that cuBLASLt has no algorithm for run as bf16 products of their dequantized values: " \
           "the same numbers, not FP8's speed; here it refused a 64x64x64 one, so every FP8 product does, and the memory plan counts"
    ok = note in open(sys.argv[8]).read()
    print(("ok" if ok else "not ok") + " - memory plan: with cuBLASLt refusing FP8, the trainer says before training that every "
          "FP8 product runs dequantized and that the plan counts it")
predicted = []
for name, path in runs:
    text = open(path).read()
    mem = re.search(r"^memory rank 0: (.*)$", text, re.M)
    peak = re.search(r"^peak GPU memory.*\((\d+) B\)$", text, re.M)
    if mem and peak:
        state_acts = [int(x) for x in re.findall(r"(\d+) B", mem.group(1))]
        acts, extra = state_acts[4], int(peak.group(1)) - sum(state_acts)
        predicted.append(acts)
        ok = 0 <= extra <= 0.01 * acts
        print(("ok" if ok else "not ok") + f" - memory plan{name}: peak GPU memory = model state + the predicted activations "
              f"({acts} B) + {extra} B of scratch (0 <= scratch <= 1% of the activations)")
    else:
        print(f"not ok - memory plan{name}: the d2 run printed no memory or peak line")
ok = len(predicted) == len(runs) and predicted[0] > predicted[1] > predicted[2]
print(("ok" if ok else "not ok") + f" - memory plan: the activations shrink with --recompute (none, selective, full: {predicted[:3]} B)")
m = re.search(r"^error: --batch-size 1000 --seq-len 1024: a micro-batch needs .* of activations and scratch, but the GPU has .* "
              r"free .*; --batch-size (\d+) --total-batch-tokens 1024000 fits, with the step's 1024000 tokens in (\d+) micro-batches", big, re.M)
ok = bool(m) and "rc 2" in big and "step " not in big and int(m.group(1)) * 1024 * int(m.group(2)) == 1024000 and int(m.group(1)) < 1000
print(("ok" if ok else "not ok") + " - memory plan: --batch-size 1000 (~229 GB of activations) is refused before training (exit 2), "
      "naming a batch size that fits and splits the step's tokens" + ("" if ok else ": " + " | ".join(big.strip().splitlines()[-3:])[:300]))
PY
    # auto where the whole step fits: B = the step's 16 sequences, one micro-batch
    "$BIN" "${flags[@]}" --batch-size auto --total-batch-tokens 1024 >"$tmp/auto.out" 2>&1
    local rc=$?
    [ $rc = 0 ] && grep -q '^batch: --batch-size auto: B=16, ' "$tmp/auto.out" && grep -q '^data: .* B=16 T=64 dp=1, 1 micro-batch' "$tmp/auto.out" &&
        r=ok || r="not ok"
    echo "$r - memory plan: --batch-size auto --total-batch-tokens 1024 takes B=16 (the whole step) where it fits (exit $rc: $(grep -m1 '^batch: ' "$tmp/auto.out" || tail -1 "$tmp/auto.out"))"
    if grep -q '^gpu: CPU SIMT emulator' "$tmp/run.out"; then
        # a GPU with room for the model state and about half of B=16's activations
        local state acts cap
        state=$(sed -n 's/^memory rank 0: params \([0-9]*\) B, grads \([0-9]*\) B, optimizer \([0-9]*\) B, working buffers \([0-9]*\) B.*/\1+\2+\3+\4/p' "$tmp/run.out")
        acts=$(sed -n 's/^memory rank 0: .*activations \([0-9]*\) B\(, [a-z0-9 ]* scratch .*\)\{0,1\}$/\1/p' "$tmp/run.out")
        cap=$(( state + acts / 2 + (32 + 64) * 1048576 ))  # + the cuBLASLt workspace and the plan's fixed reserve
        SIMT_GPU_MEMORY=$cap "$BIN" "${flags[@]}" --batch-size 16 >"$tmp/small.out" 2>&1
        rc=$?; local advice
        advice=$(grep -o -- '--batch-size [0-9]* --total-batch-tokens [0-9]* fits' "$tmp/small.out" | sed 's/ fits$//')
        if [ $rc = 2 ] && [ -n "$advice" ]; then
            SIMT_GPU_MEMORY=$cap "$BIN" "${flags[@]}" $advice >"$tmp/advised.out" 2>&1
            rc=$?
            [ $rc = 0 ] && r=ok || r="not ok"
            echo "$r - memory plan: B=16 on an emulated GPU of $cap B is refused; the advised '$advice' trains there (exit $rc)"
            # auto on that GPU: the same B as the advice (the largest that fits and divides the
            # step's 16 sequences), and it trains
            SIMT_GPU_MEMORY=$cap "$BIN" "${flags[@]}" --batch-size auto --total-batch-tokens 1024 >"$tmp/auto_small.out" 2>&1
            rc=$?
            local want=${advice#--batch-size }; want=${want%% *}
            [ $rc = 0 ] && grep -q "^batch: --batch-size auto: B=$want, " "$tmp/auto_small.out" &&
                grep -q "^data: .* B=$want T=64 dp=1, $((16 / want)) micro-batch" "$tmp/auto_small.out" && r=ok || r="not ok"
            echo "$r - memory plan: --batch-size auto on that GPU picks the advised B=$want and trains (exit $rc: $(grep -m1 '^batch: ' "$tmp/auto_small.out" || tail -1 "$tmp/auto_small.out"))"
            # a GPU with room for the model state only: auto finds no B (exit 2, before training)
            SIMT_GPU_MEMORY=$(( state + 48 * 1048576 )) "$BIN" "${flags[@]}" --batch-size auto --total-batch-tokens 1024 >"$tmp/auto_none.out" 2>&1
            rc=$?
            [ $rc = 2 ] && grep -q "^error: --batch-size auto --seq-len 64: a micro-batch of 1 needs .*; not even --batch-size 1 fits" "$tmp/auto_none.out" &&
                ! grep -q '^step ' "$tmp/auto_none.out" && r=ok || r="not ok"
            echo "$r - memory plan: --batch-size auto where not even B=1 fits beside the model state is one line (exit $rc: $(tail -1 "$tmp/auto_none.out" | cut -c1-200))"
        else
            echo "not ok - memory plan: B=16 on an emulated GPU of $cap B: exit $rc, no advice ($(tail -1 "$tmp/small.out"))"
        fi
        # room for the cuBLASLt workspace (32 MiB, cuda_ctx_init's) and half the model state
        SIMT_GPU_MEMORY=$(( 32 * 1048576 + state / 2 )) "$BIN" "${flags[@]}" --batch-size 16 >"$tmp/tiny.out" 2>&1
        rc=$?
        [ $rc = 2 ] && [ "$(grep -c '^error' "$tmp/tiny.out")" = 1 ] && ! grep -q '^step ' "$tmp/tiny.out" &&
            grep -q '^error: the model state needs .* a rank (parameters .* at --zero 0), but the GPU has .* free; spread it over more ranks' "$tmp/tiny.out" && r=ok || r="not ok"
        echo "$r - memory plan: a model state larger than the GPU is refused in one line before it is allocated, nothing trained (exit $rc: $(tail -1 "$tmp/tiny.out"))"
        # no room even for the workspace: one line saying so, before anything else
        SIMT_GPU_MEMORY=$(( 16 * 1048576 )) "$BIN" "${flags[@]}" --batch-size 16 >"$tmp/none.out" 2>&1
        rc=$?
        [ $rc = 1 ] && [ "$(wc -l <"$tmp/none.out")" = 1 ] &&
            grep -q '^error: GPU 0 has 16.0 MiB free of 16.0 MiB, less than the 32.0 MiB cuBLASLt workspace the CUDA backend allocates first' "$tmp/none.out" && r=ok || r="not ok"
        echo "$r - a GPU with less free memory than the cuBLASLt workspace: one line naming both, exit 1 (exit $rc: $(tail -1 "$tmp/none.out"))"
    fi
    rm -rf "$tmp"
}
memory_plan
# a GPU this build cannot use (emulator only: test/simt.h's SIMT_DRIVER_VERSION,
# SIMT_COMPUTE_CAPABILITY and SIMT_NO_KERNEL_IMAGE): --device cuda is refused in one line that
# names the cause and what to do (exit 2, nothing trained); --device auto trains on the CPU and
# says why in a note; a driver of the runtime's major version (13.x) is usable
unusable_gpu() {
    local tmp; tmp=$(mktemp -d)
    local flags=(--model d2 "${voc[@]}" --batch-size 2 --seq-len 32 --steps 1 --val-data "")
    "$BIN" --device cuda "${flags[@]}" >"$tmp/probe.out" 2>&1
    if ! grep -q '^gpu: CPU SIMT emulator' "$tmp/probe.out"; then rm -rf "$tmp"; return; fi
    local cases=(
        "SIMT_DRIVER_VERSION=12040|the NVIDIA driver supports CUDA up to 12\.4, but this build's CUDA runtime is 13\.0: update the driver, or rebuild with a CUDA toolkit no newer than 12\.4"
        "SIMT_COMPUTE_CAPABILITY=7.0|GPU 0 \(.*\) has compute capability 7\.0, and the CUDA kernels need 8\.0 or newer: Ampere \(A100, RTX 30xx\) and later, for bf16 tensor cores and cp\.async"
        "SIMT_NO_KERNEL_IMAGE=1|this binary has no code that GPU 0 \(.*, compute capability 9\.0\) can run \(no kernel image is available for execution on the device\); rebuild it on this machine with make clean && make, which adds this GPU's architecture"
    )
    local c env why rc r
    for c in "${cases[@]}"; do
        env=${c%%|*} why=${c#*|}
        env "$env" "$BIN" --device cuda "${flags[@]}" >"$tmp/cuda.out" 2>&1
        rc=$?
        [ $rc = 2 ] && [ "$(wc -l <"$tmp/cuda.out")" = 1 ] && grep -qE "^error: --device cuda: $why \(or run with --device cpu\)\$" "$tmp/cuda.out" &&
            r=ok || r="not ok"
        echo "$r - unusable GPU ($env): --device cuda is one line naming the cause and the remedy, exit 2 (exit $rc: $(head -c 300 "$tmp/cuda.out"))"
        env "$env" "$BIN" --device auto "${flags[@]}" >"$tmp/auto.out" 2>"$tmp/auto.err"
        rc=$?
        [ $rc = 0 ] && grep -q '^device: cpu, ' "$tmp/auto.out" && grep -q '^step     1/1 ' "$tmp/auto.out" &&
            grep -qE "^note: --device auto: running on the CPU: $why" "$tmp/auto.err" && r=ok || r="not ok"
        echo "$r - unusable GPU ($env): --device auto trains on the CPU and says why (exit $rc: $(head -c 200 "$tmp/auto.err"))"
    done
    # --precision fp8 on a GPU without FP8 tensor cores (8.0): one line, exit 2
    SIMT_COMPUTE_CAPABILITY=8.0 "$BIN" --device cuda "${flags[@]}" --precision fp8 >"$tmp/fp8.out" 2>&1
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <"$tmp/fp8.out")" = 1 ] &&
        grep -qE "^error: --precision fp8: this GPU \(compute capability 8\.0\) has no FP8 tensor cores; they came with 8\.9 .* use --precision bf16\$" "$tmp/fp8.out" &&
        r=ok || r="not ok"
    echo "$r - --precision fp8 on compute capability 8.0: one line naming why and what to use, exit 2 (exit $rc: $(head -c 200 "$tmp/fp8.out"))"
    # cuBLASLt refusing every algorithm its heuristic offers (the emulator's SIMT_LT_REFUSE=2): the
    # run stops at its first product, saying which and how to see cuBLASLt's reason (exit 1)
    SIMT_LT_REFUSE=2 "$BIN" --device cuda "${flags[@]}" >"$tmp/refuse.out" 2>&1
    rc=$?
    [ $rc = 1 ] && grep -q "^note: cuBLASLt refused all 2 algorithms its heuristic offered for a .* (NOT_SUPPORTED: op(A) " "$tmp/refuse.out" &&
        grep -qE "^error: cuBLASLt has no algorithm for a [0-9]+x[0-9]+x[0-9]+ (fp32|bf16) matmul \(CUBLASLT_LOG_LEVEL=2 in the environment shows its reason\)\$" "$tmp/refuse.out" &&
        r=ok || r="not ok"
    echo "$r - cuBLASLt refusing every algorithm: a note with what it was asked, then one error naming the product and CUBLASLT_LOG_LEVEL, exit 1 (exit $rc: $(tail -c 300 "$tmp/refuse.out"))"
    SIMT_DRIVER_VERSION=13000 "$BIN" --device auto "${flags[@]}" >"$tmp/compat.out" 2>&1
    rc=$?
    [ $rc = 0 ] && grep -q '^device: cuda, ' "$tmp/compat.out" && ! grep -q '^note: ' "$tmp/compat.out" && r=ok || r="not ok"
    echo "$r - a driver for CUDA 13.0 under the 13.0 runtime: --device auto runs on the GPU, without a note (exit $rc)"
    rm -rf "$tmp"
}
unusable_gpu
