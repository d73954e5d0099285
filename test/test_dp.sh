#!/usr/bin/env bash
# test_dp — data parallelism on CPU ranks under mpirun, against one process. Parts: equivalence
# (dp = 2, 3 and 4 × ZeRO 0-3 × accumulation 1 and 2: losses and final weights), the stages
# bit-identical, memory and bytes against the ZeRO table and the ring formula, --overlap 0,
# --profile rows, resume and resharding, signals, bf16, fp16, fp8 delayed, the host's waits,
# evaluation, recompute, --skip-norm-z, the memory plan, a Llama, bad layouts.
# What each checks: docs/verification.md ("test/test_dp.sh").
# usage: [DEVICE=cuda] [COMM=mpi|nccl] [DP_SIZES="2 4"] [DP_QUICK=1] test/test_dp.sh [TRAIN_GPT]
# Prints "ok"/"not ok" lines. With DEVICE=cuda the ranks share the GPU(s) and the collectives
# are staged through host memory, or with COMM=nccl go through NCCL (one GPU per rank; on the
# CPU SIMT emulator, build/train_gpt_simt, NCCL is emulated over MPI: test/simt_nccl.h).
# DP_SIZES: the dp sizes of the equivalence and bf16 matrices (resharding always uses dp=4).
# DP_QUICK=1 leaves out what does not depend on the collectives' backend, which the CPU runs
# cover: fp32 resume in stages 1-3 and bf16 resume in stage 1 (bf16 resume in stage 3 stays), the
# signals, resharding, the Llama and the model state's plan; and its runs take 3 steps, not 5.
# The suite runs the NCCL path on the CPU SIMT emulator this way, where each run takes seconds.
set -u
cd "$(dirname "$0")/.."
BIN=${1:-./train_gpt}
PY=${PYTHON:-/usr/bin/python3}  # PYTHON: another python3 with torch and numpy (a GPU image's)
TEST_NAME=test_dp; source test/mpi_setup.sh  # $tmp, mpi N ARGS...

# a 1-layer GPT on the shipped Bible folded to 250 tokens (test/small_vocab.py: a 50257-wide
# classifier would be 98% of Ψ and most of each run's time); Ψ from its shape
C=64; L=1; V=250; Vp=256; maxT=1024
$PY test/small_vocab.py build/data $V || { echo "not ok - test_dp: test/small_vocab.py could not fold the Bible to $V tokens"; exit 1; }
small=(--vocab-size $V --train-data "build/data/kjv${V}_train_*.bin")
PSI=$(( Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C ))
LR=3e-3; STEPS=5; [ -n "${DP_QUICK:-}" ] && STEPS=3  # (DP_QUICK: runs of 3 steps)
# fp32 unless a part says bf16 (a later --precision wins); on cuda "auto" would mean bf16
common=(--device "${DEVICE:-cpu}" --precision fp32 --model d1 "${small[@]}" --seq-len 32 --lr $LR --warmup-steps 2 --weight-decay 0.1 --seed 7 --val-data "" --comm-stats)
[ -n "${COMM:-}" ] && common+=(--comm "$COMM")

fields() { $PY -c "
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d['step'], repr(d['loss']), repr(d['lr']), repr(d['grad_norm']), repr(d.get('val_loss')))" "$1"; }

close_losses() {  # close_losses A B NAME: per-step losses within 1e-5
    $PY - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
# Same math in a different summation order (per-rank partial sums of the gradients, then the
# reduction): fp32 differences of ~1e-7 relative per step, a few 1e-6 absolute after 5 steps.
worst = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) > 0 else float("inf")
print(("ok" if worst <= 1e-5 else "not ok") + f" - {sys.argv[3]}: losses match one process (max diff {worst:.1e} <= 1e-5)")
PY
}
bound=$($PY -c "print(2e-3 * $LR * $STEPS)")  # Adam moves a weight ≤ lr a step: 0.2% of that

# check_memory_and_bytes PREFIX N PRECISION: the runs PREFIX_z{0..3}_a1 against the ZeRO table
# and the ring volumes. Bytes per parameter: fp32 params 4 (they are the master), grads 4, m+v 8;
# bf16 params 2, grads 2, fp32 master+m+v 12 (the ZeRO paper's mixed-precision table).
check_memory_and_bytes() {
    $PY - "$1" "$2" "$PSI" "$3" <<'PY'
import json, re, sys
prefix, N, psi, prec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s, opt = (4, 8) if prec == "fp32" else (2, 12)
table = {0: (s * psi, s * psi, opt * psi), 1: (s * psi, s * psi, opt * psi / N),
         2: (s * psi, s * psi / N, opt * psi / N), 3: (s * psi / N, s * psi / N, opt * psi / N)}
for z in range(4):
    lines = [l for l in open(f"{prefix}_z{z}_a1.txt") if l.startswith("memory rank")]
    ok = len(lines) == N
    worst = 0.0
    for l in lines:
        got = [int(x) for x in re.findall(r"(\d+) B", l)[:3]]
        for g, want in zip(got, table[z]):
            worst = max(worst, abs(g - want) / want)
    ok &= worst <= 0.05
    total = sum(table[z]) / psi
    print(("ok" if ok else "not ok") + f" - {prec} dp={N} zero={z}: every rank's params/grads/optimizer bytes match the table "
          f"({total:.2f} bytes/param; max deviation {worst * 100:.2f}% <= 5%)")
def per_step(z):
    rows = [json.loads(l)["comm_bytes"] for l in open(f"{prefix}_z{z}_a1.jsonl")]
    return sum(rows[-1].values()), rows[-1]
ddp, ddp_ops = per_step(0)
ring = 2 * (N - 1) / N * s * psi
ok = abs(ddp - ring) / ring <= 0.05 and set(ddp_ops) == {"all_reduce"}
print(("ok" if ok else "not ok") + f" - {prec} dp={N}: DDP sends {ddp:.0f} bytes/step/rank = ring all-reduce 2(N-1)/N*{s}*Psi = {ring:.0f}")
for z, want in ((1, 1.0), (2, 1.0), (3, 1.5)):
    b, ops = per_step(z)
    ratio = b / ddp
    ok = abs(ratio - want) <= 0.05 * want
    print(("ok" if ok else "not ok") + f" - {prec} dp={N}: ZeRO-{z} moves {ratio:.4f}x DDP's bytes (expected {want}x) {ops}")
PY
}

# same_across_stages PREFIX NAME: ZeRO 0-3 logs and final weights bit-identical
same_across_stages() {
    local same=1
    for z in 1 2 3; do
        cmp -s <(fields "$1_z0_a1.jsonl") <(fields "$1_z${z}_a1.jsonl") || same=0
        cmp -s "$1_z0_a1.bin" "$1_z${z}_a1.bin" || same=0
    done
    [ $same = 1 ] && echo "ok - $2: ZeRO 0, 1, 2, 3 are bit-identical (logs and final weights)" \
                  || echo "not ok - $2: ZeRO stages differ"
}

# resume_check PRECISION Z: dp=2, accumulation 2, shuffling; 6 straight steps == 3, resume, 3
resume_check() {  # resume_check PRECISION ZERO [FLAGS...]
    local p=$1 z=$2; shift 2
    local a="$tmp/ra_${p}_$z${1:+_x}" b="$tmp/rb_${p}_$z${1:+_x}"
    local run=(--precision "$p" --batch-size 4 --total-batch-tokens 512 --steps 6 --zero "$z" --shuffle 1 "$@")
    p="$p${1:+ $*}"  # (the name in the lines)
    mpi 2 "${common[@]}" "${run[@]}" --output-dir "$a" --checkpoint-every 3 --log-file "$a.jsonl" --save-model "$a.bin" >"$a.txt" 2>&1
    mkdir -p "$b" && cp -r "$a/step_00000003" "$b/"
    mpi 2 "${common[@]}" "${run[@]}" --output-dir "$b" --checkpoint-every 3 --log-file "$b.jsonl" --resume --save-model "$b.bin" >"$b.txt" 2>&1
    if [ "$(wc -l <"$b.jsonl" 2>/dev/null)" = 3 ] && cmp -s <(fields "$a.jsonl" | tail -3) <(fields "$b.jsonl") && cmp -s "$a.bin" "$b.bin"; then
        echo "ok - $p dp=2 zero=$z: resuming at step 3 continues bit for bit (losses, norms, final weights)"
    else
        echo "not ok - $p dp=2 zero=$z: resume differs"; tail -2 "$b.txt" | sed 's/^/#   /'
    fi
}

# --- one-process references: the global batch of dp × B, with and without accumulation
for acc in 1 2; do
    "$BIN" "${common[@]}" --batch-size 8 --total-batch-tokens $((8*32*acc)) --steps $STEPS \
        --log-file "$tmp/ref_a$acc.jsonl" --save-model "$tmp/ref_a$acc.bin" >/dev/null 2>&1
done

for N in ${DP_SIZES:-2 4}; do
    B=$((8 / N))
    for acc in 1 2; do
        for z in 0 1 2 3; do
            name="dp=$N zero=$z accum=$acc"
            out="$tmp/n${N}_z${z}_a${acc}"
            mpi $N "${common[@]}" --batch-size $B --total-batch-tokens $((8*32*acc)) --steps $STEPS --zero $z \
                --log-file "$out.jsonl" --save-model "$out.bin" >"$out.txt" 2>&1 || { echo "not ok - $name: run failed"; tail -3 "$out.txt" | sed 's/^/#   /'; continue; }
            close_losses "$tmp/ref_a$acc.jsonl" "$out.jsonl" "$name"
            $PY test/compare_models.py "$tmp/ref_a$acc.bin" "$out.bin" "$bound" | sed "s/ - / - $name: /"
        done
        # bit-identity across stages (no accumulation: every stage reduces the same way)
        [ $acc = 1 ] && same_across_stages "$tmp/n${N}" "dp=$N"
    done
    check_memory_and_bytes "$tmp/n${N}" "$N" fp32
done

# --- uneven chunks: on 3 ranks no unit of d1 divides evenly, so every chunk boundary is ragged
# (NCCL goes through its padded buffers instead of the units themselves); ZeRO-1 (reduce-scatter,
# blocking all-gather) and ZeRO-3 (started all-gathers and reduce-scatters), B = 2 per rank,
# against one process with B = 6
"$BIN" "${common[@]}" --batch-size 6 --steps $STEPS --log-file "$tmp/ref_b6.jsonl" --save-model "$tmp/ref_b6.bin" >/dev/null 2>&1
for z in 1 3; do
    name="dp=3 zero=$z (uneven chunks)" out="$tmp/n3_z${z}"
    mpi 3 "${common[@]}" --batch-size 2 --steps $STEPS --zero $z --log-file "$out.jsonl" --save-model "$out.bin" >"$out.txt" 2>&1 ||
        { echo "not ok - $name: run failed"; tail -3 "$out.txt" | sed 's/^/#   /'; continue; }
    close_losses "$tmp/ref_b6.jsonl" "$out.jsonl" "$name"
    $PY test/compare_models.py "$tmp/ref_b6.bin" "$out.bin" "$bound" | sed "s/ - / - $name: /"
done

# --- --overlap 0 (what bench_overlap.sh times against the default): DDP joins each all-reduce at
# once, ZeRO-1-3 finish each reduce-scatter at once, and ZeRO-3 gathers each unit when it is
# used; the runs and the bytes must not change
N=$(set -- ${DP_SIZES:-2 4}; echo $1)
for z in 0 1 2 3; do
    ref="$tmp/n${N}_z${z}_a2" out="$tmp/ov${N}_z${z}"
    mpi $N "${common[@]}" --batch-size $((8 / N)) --total-batch-tokens 512 --steps $STEPS --zero $z --overlap 0 \
        --log-file "$out.jsonl" --save-model "$out.bin" >"$out.txt" 2>&1
    $PY - "$ref.jsonl" "$out.jsonl" "dp=$N zero=$z accum=2" <<'PY'
import json, sys
keep = ("step", "loss", "lr", "grad_norm", "comm_bytes")  # not the timings
def rows(p):
    try: return [{k: d.get(k) for k in keep} for d in map(json.loads, open(p))]
    except (OSError, ValueError): return None
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = a is not None and a == b and len(a) > 0
print(("ok" if same else "not ok") + f" - {sys.argv[3]} --overlap 0: the same run as with overlap (losses, norms, bytes per collective)")
PY
    cmp -s "$ref.bin" "$out.bin" && echo "ok - dp=$N zero=$z --overlap 0: bit-identical final weights" \
        || { echo "not ok - dp=$N zero=$z --overlap 0: final weights differ"; tail -2 "$out.txt" | sed 's/^/#   /'; }
done

# --- --profile: communication has rows of its own, at the calls per step each stage makes
# (d1: U = 3 units, accumulation A = 2), each kind of transfer with a row for its waits. Stage 0
# all-reduces each unit on the last micro-batch and waits for them once, before the gradient
# norm; stage 1 reduce-scatters each unit on the last micro-batch, 2-3 on every one, and each
# reduce-scatter is waited for; 1-2 all-gather each unit after the update and the next forward
# waits for each (the measured step waits for the previous step's); every stage sums the loss
# and the norm. ZeRO-3 takes each unit it uses, 2L + 5 = 7 per micro-batch, from a prefetch (a
# wait) or by gathering it now, and waits once more after the update (how many prefetches hit
# depends on the order: at least every use is counted).
for z in 0 1 2 3; do
    out="$tmp/prof${N}_z${z}"
    mpi $N "${common[@]}" --batch-size $((8 / N)) --total-batch-tokens 512 --steps 2 --zero $z --profile 1 >"$out.txt" 2>&1
    $PY - "$out.txt" "$z" "dp=$N zero=$z" <<'PY'
import re, sys
text, z, name = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
U, A = 3, 2
rows = {n: float(c) for n, c in re.findall(r"^  comm: (.*?)\s+([\d.]+)\s+[\d.]+\s+[\d.]+%", text, re.M)}
AR, RS, AG = "all-reduce gradients", "reduce-scatter gradients", "all-gather parameters"
W = lambda kind: f"{kind} wait (exposed)"
reduces = U * (A if z >= 2 else 1)
if z == 0: want = {AR: U, W("all-reduce"): 1}
else: want = {RS: reduces, W("reduce-scatter"): reduces}
if z in (1, 2): want.update({AG: U, W("all-gather"): U})
want["loss and norm sums"] = 2
if z == 3:
    uses = 7 * A
    ok = (set(rows) == set(want) | {AG, W("all-gather")} and all(rows[k] == v for k, v in want.items())
          and rows[W("all-gather")] + rows[AG] >= uses + 1)
else:
    ok = rows == {k: float(v) for k, v in want.items()}
print(("ok" if ok else "not ok") + f" - {name} --profile: a row per kind of communication and its waits, at the stage's calls per step"
      + ("" if ok else f" (got {rows})"))
PY
done

# --- bf16 (mixed precision): dp = 2 and 4 × ZeRO 0-3 against one bf16 process
"$BIN" "${common[@]}" --precision bf16 --batch-size 8 --steps $STEPS --log-file "$tmp/bref.jsonl" >/dev/null 2>&1
for N in ${DP_SIZES:-2 4}; do
    for z in 0 1 2 3; do
        out="$tmp/b${N}_z${z}_a1"
        mpi $N "${common[@]}" --precision bf16 --batch-size $((8 / N)) --steps $STEPS --zero $z \
            --log-file "$out.jsonl" --save-model "$out.bin" >"$out.txt" 2>&1 || { echo "not ok - bf16 dp=$N zero=$z: run failed"; tail -3 "$out.txt" | sed 's/^/#   /'; continue; }
    done
    # one process sums the whole batch's gradient in fp32 and rounds it once; dp ranks round
    # their partial gradients to bf16 before the sum (as NCCL's bf16 all-reduce does): the
    # gradients differ in their last bits, so the losses agree to the bf16 training bound 2e-2
    # (in practice ~1e-3), not to fp32 precision.
    $PY - "$tmp/bref.jsonl" "$tmp/b${N}_z0_a1.jsonl" "$N" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) > 0 else float("inf")
print(("ok" if worst <= 2e-2 else "not ok") + f" - bf16 dp={sys.argv[3]}: losses within 2e-2 of one bf16 process (max diff {worst:.1e})")
PY
    same_across_stages "$tmp/b${N}" "bf16 dp=$N"
    check_memory_and_bytes "$tmp/b${N}" "$N" bf16
done
for z in 1 3; do [ -n "${DP_QUICK:-}" ] && [ $z = 1 ] && continue; resume_check bf16 $z; done  # the bf16 working copy is rebuilt from the fp32 master in model.bin

# --- fp16 (dynamic loss scaling): dp = 2 × ZeRO 0-3 against one fp16 process. The ranks sum
# their fp16 gradients (times the loss scale) with our fp16 MPI sum (comm.h), each partial sum
# rounded to fp16 as NCCL's fp16 reductions do: bf16's reasoning at 8× finer rounding, 2.5e-3.
"$BIN" "${common[@]}" --precision fp16 --batch-size 8 --steps $STEPS --log-file "$tmp/href.jsonl" >/dev/null 2>&1
for z in 0 1 2 3; do
    out="$tmp/h2_z${z}_a1"
    mpi 2 "${common[@]}" --precision fp16 --batch-size 4 --steps $STEPS --zero $z \
        --log-file "$out.jsonl" --save-model "$out.bin" >"$out.txt" 2>&1 || { echo "not ok - fp16 dp=2 zero=$z: run failed"; tail -3 "$out.txt" | sed 's/^/#   /'; }
done
$PY - "$tmp/href.jsonl" "$tmp/h2_z0_a1.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)) if len(a) == len(b) > 0 else float("inf")
scaled = len(b) > 0 and all(r.get("loss_scale") == 65536 for r in b)
print(("ok" if worst <= 2.5e-3 and scaled else "not ok") + f" - fp16 dp=2: losses within 2.5e-3 of one fp16 process, loss scale 2^16 logged (max diff {worst:.1e})")
PY
same_across_stages "$tmp/h2" "fp16 dp=2"
check_memory_and_bytes "$tmp/h2" 2 fp16
resume_check fp16 3  # (the loss scale in history.bin, read back by every rank)

# --- fp8 with delayed scaling (fp8.cuh): each rank records the amaxes of its own micro-batches;
# at the step's end the ranks take their max, so their histories and scales stay one, and the
# max over the two halves is the whole batch's, as one process records it. Step 1 computes each
# row as one process does (same weights, same rows), so the history after it (the checkpoint's
# fp8_history.bin, rank 0's) is one process's byte for byte; without the max, rank 0's would
# hold its half's amaxes. Later steps' gradients are summed in another order, which moves the
# amaxes by ulps and can flip a scale's power of two: against one process the bf16 bound, 2e-2.
d8=(--precision fp8 --fp8-scaling delayed --fp8-amax-history 2)
"$BIN" "${common[@]}" "${d8[@]}" --batch-size 8 --steps $STEPS --log-file "$tmp/d8ref.jsonl" --output-dir "$tmp/d8ref" \
    --checkpoint-every 1 >/dev/null 2>&1
mpi 2 "${common[@]}" "${d8[@]}" --batch-size 4 --steps $STEPS --zero 1 --log-file "$tmp/d8.jsonl" --output-dir "$tmp/d8" \
    --checkpoint-every 1 >"$tmp/d8.txt" 2>&1 || { echo "not ok - fp8 delayed dp=2: run failed"; tail -3 "$tmp/d8.txt" | sed 's/^/#   /'; }
[ -s "$tmp/d8/step_00000001/fp8_history.bin" ] && cmp -s "$tmp/d8ref/step_00000001/fp8_history.bin" "$tmp/d8/step_00000001/fp8_history.bin" \
    && echo "ok - fp8 delayed dp=2: the amax history after step 1 is one process's byte for byte (the ranks' max is the whole batch's)" \
    || echo "not ok - fp8 delayed dp=2: the amax history after step 1 differs from one process's"
$PY - "$tmp/d8ref.jsonl" "$tmp/d8.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) > 0 else float("inf")
print(("ok" if worst <= 2e-2 else "not ok") + f" - fp8 delayed dp=2 zero=1: losses within 2e-2 of one fp8 process with delayed scaling (max diff {worst:.1e})")
PY
resume_check fp8 3 --fp8-scaling delayed --fp8-amax-history 2

# --- resume: bit-exact in every stage (dp=2, accumulation 2, shuffling)
stages="0 1 2 3"; [ -n "${DP_QUICK:-}" ] && stages=0
for z in $stages; do resume_check fp32 $z; done
ls "$tmp/ra_bf16_3/step_00000006" | grep -q "state_rank00001.bin" && echo "ok - each dp rank writes its own optimizer shard" \
    || echo "not ok - sharded checkpoint files missing"

# --- a signal, once step 2 is logged, to one rank only (SIGTERM): both must stop after the same
# step and write its checkpoint together; to mpirun (SIGUSR1, what it forwards to every rank).
# --resume then ends where a straight run did. On GPT-2's vocabulary: a step of the 250-token
# model takes milliseconds, and the 4 steps left could end before the signal lands. The ranks look
# for a signal just after a step's log line, so one sent once step 2 is logged can stop the run
# after step 2 itself (it landed before that look) or after a later step: k >= 2.
sig_run=("${common[@]}" --vocab-size 0 --train-data "data/kjv_train_*.bin" --precision fp32 --batch-size 4
         --total-batch-tokens 512 --steps 6 --zero 1 --shuffle 1)
signal_check() {  # signal_check SIG TARGET(rank|mpirun)
    local c="$tmp/sig_$1" target= i
    local run=("${sig_run[@]}" --output-dir "$c" --log-file "$c.jsonl" --save-model "$c.bin")
    # (under a time limit: ranks that disagreed about stopping would wait for each other for ever)
    timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${run[@]}" >"$c.txt" 2>&1 &
    local pid=$!  # (timeout's: the target is found first, so that the signal follows step 2 at once)
    for i in $(seq 3000); do
        if [ "$2" = rank ]; then target=$(pgrep -f -- "^$BIN .*--log-file $c.jsonl" | head -1)
        else target=$(pgrep -f -- "^mpirun .*--log-file $c.jsonl"); fi
        [ -n "$target" ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01
    done
    for i in $(seq 6000); do [ "$(cat "$c.jsonl" 2>/dev/null | wc -l)" -ge 2 ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.005; done
    kill -"$1" "$target"; wait $pid
    local rc=$? k=$(wc -l <"$c.jsonl") last=$(ls "$c" 2>/dev/null | tail -1)
    if [ $rc = $((128 + $(kill -l "$1"))) ] && [ "$k" -ge 2 ] && [ "$k" -lt 6 ] && [ "$last" = "$(printf 'step_%08d' "$k")" ] && [ -e "$c/$last/state_rank00001.bin" ] \
        && grep -q "^stopped by SIG$1 after step $k of 6" "$c.txt"; then
        echo "ok - dp=2: SIG$1 to $2 at step $k: both ranks stop after it and write its checkpoint, exit $rc"
    else
        echo "not ok - dp=2: SIG$1 to $2: exit $rc, $k steps logged, newest checkpoint '$last'"; tail -2 "$c.txt" | sed 's/^/#   /'
    fi
    mpi 2 "${run[@]}" --resume >"$c.txt" 2>&1
    cmp -s <(fields "$tmp/sig_straight.jsonl") <(fields "$c.jsonl") && cmp -s "$tmp/sig_straight.bin" "$c.bin" \
        && echo "ok - dp=2: resumed after SIG$1, the run equals the uninterrupted one bit for bit" \
        || echo "not ok - dp=2: the run resumed after SIG$1 differs from the uninterrupted one"
}
if [ -z "${DP_QUICK:-}" ]; then
    mpi 2 "${sig_run[@]}" --log-file "$tmp/sig_straight.jsonl" --save-model "$tmp/sig_straight.bin" >"$tmp/sig_straight.txt" 2>&1 ||
        echo "not ok - dp=2: the straight run for the signal checks failed"
    signal_check TERM rank; signal_check USR1 mpirun
fi

# --- evaluation: --hellaswag's ranks split the rows (R = B·T/T' a forward, 40 rows: at dp=3 the
# last global batch leaves rank 2 only padding) and ZeRO-3 gathers the parameters for each forward;
# the answers are the one process's. --val-tokens 700 is 21 sequences of 32, in rounds of B·dp
# (the last round leaves some ranks one sequence or none). Each row and sequence is scored by the
# same forward shape whichever rank runs it, and each sequence's loss is added in sequence order,
# so the scores and the validation loss are bit-identical (on the CPU and the emulated GPU).
$PY test/make_choice_set.py "$tmp/hs.bin" "build/data/kjv${V}_val_000000.bin"
hs_fields() { $PY -c "
import json, sys
d = json.loads(open(sys.argv[1]).readline())
print(d['hellaswag_correct'], d['hellaswag_total'], repr(d['hellaswag_loss']), 'val', repr(d['val_loss']))" "$1" 2>/dev/null; }
evals=(--steps 0 --hellaswag "$tmp/hs.bin" --val-data "build/data/kjv${V}_val_000000.bin" --val-tokens 700)
"$BIN" "${common[@]}" --batch-size 4 "${evals[@]}" --log-file "$tmp/hs1.jsonl" >"$tmp/hs1.txt" 2>&1
for layout in "2 3" "3 1"; do
    set -- $layout
    mpi "$1" "${common[@]}" --batch-size 4 --zero "$2" "${evals[@]}" --log-file "$tmp/hs$1.jsonl" >"$tmp/hs$1.txt" 2>&1
    [ -n "$(hs_fields "$tmp/hs1.jsonl")" ] && [ "$(hs_fields "$tmp/hs1.jsonl")" = "$(hs_fields "$tmp/hs$1.jsonl")" ] \
        && echo "ok - --hellaswag and --val-tokens at dp=$1 zero=$2: the one process's answers, scores and validation loss, bit for bit ($(hs_fields "$tmp/hs1.jsonl"))" \
        || { echo "not ok - --hellaswag and --val-tokens at dp=$1 zero=$2: '$(hs_fields "$tmp/hs$1.jsonl")' vs one process '$(hs_fields "$tmp/hs1.jsonl")'"; tail -2 "$tmp/hs$1.txt" | sed 's/^/#   /'; }
done

# --- resharding: saved at dp=4 ZeRO-3, resumed at dp=2 ZeRO-1 (and at dp=1) with the same global batch
run=(--total-batch-tokens 256 --steps 6)
[ -z "${DP_QUICK:-}" ] && mpi 4 "${common[@]}" "${run[@]}" --batch-size 2 --zero 3 --output-dir "$tmp/s4" --checkpoint-every 3 --log-file "$tmp/s4.jsonl" >"$tmp/s4.txt" 2>&1
targets=("2 1" "1 0"); [ -n "${DP_QUICK:-}" ] && targets=()
for target in "${targets[@]}"; do
    set -- $target
    mkdir -p "$tmp/s$1" && cp -r "$tmp/s4/step_00000003" "$tmp/s$1/"
    mpi "$1" "${common[@]}" "${run[@]}" --batch-size 2 --zero "$2" --output-dir "$tmp/s$1" --log-file "$tmp/s$1.jsonl" --resume >"$tmp/s$1.txt" 2>&1
    tail -3 "$tmp/s4.jsonl" > "$tmp/s4_tail.jsonl"
    if [ "$(wc -l <"$tmp/s$1.jsonl" 2>/dev/null)" = 3 ]; then
        close_losses "$tmp/s4_tail.jsonl" "$tmp/s$1.jsonl" "reshard dp=4 zero=3 -> dp=$1 zero=$2, steps 4-6" | sed 's/match one process/continue the dp=4 run/'
    else
        echo "not ok - reshard dp=4 zero=3 -> dp=$1 zero=$2: the resumed run failed"; tail -2 "$tmp/s$1.txt" | sed 's/^/#   /'
    fi
done

# --- the runs used the collectives asked for (the trainer names them on its device line)
if [ -n "${COMM:-}" ] && [ "${DEVICE:-cpu}" = cuda ]; then
    f="$tmp/n$(set -- ${DP_SIZES:-2 4}; echo $1)_z0_a1.txt"
    grep -q "(collectives: $COMM" "$f" && echo "ok - the dp runs' collectives went through $COMM" \
        || { echo "not ok - the dp runs did not use $COMM:"; grep "^device" "$f" | sed 's/^/#   /'; }
fi

# --- on the emulated GPU (which counts them): at most one host wait for the whole GPU queue per
# optimizer step in every stage, however many units and micro-steps (a wait inside the step
# drains the GPU's queue, and the host's launches are then exposed: e.g. ZeRO's per-unit copies)
f="$tmp/n$(set -- ${DP_SIZES:-2 4}; echo $1)_z0_a1.txt"
if [ "${DEVICE:-cpu}" = cuda ] && [ "${COMM:-}" = nccl ] && grep -q "^gpu: CPU SIMT emulator" "$f"; then
    host_waits() {  # host_waits ZERO STEPS: rank 0's count (empty if the run failed)
        SIMT_COUNT_WAITS=1 mpi 2 "${common[@]}" --batch-size 4 --total-batch-tokens 512 --zero "$1" --steps "$2" \
            >/dev/null 2>"$tmp/waits.err" || return
        sed -n 's/^simt: the host waited for all queued GPU work \([0-9]*\) times$/\1/p' "$tmp/waits.err" | head -1
    }
    for z in 0 1 2 3; do
        w2=$(host_waits $z 2) w4=$(host_waits $z 4)
        if [ -n "$w2" ] && [ -n "$w4" ]; then
            [ $((w4 - w2)) -le 2 ] && r=ok || r="not ok"
            echo "$r - dp=2 zero=$z, 3 units, 2 micro-steps: at most one host wait for the whole GPU queue per step (2 more steps: $((w4 - w2)) more)"
        else
            echo "not ok - dp=2 zero=$z: no count of host waits (the run failed?)"
        fi
    done
fi

# --- the memory plan over ranks (emulated GPU: each rank's capacity set by SIMT_GPU_MEMORY):
# where rank 1's GPU is smaller, --batch-size auto gives every rank the B that fits on rank 1
# (of the divisors of the step's 8 sequences a rank: 4) and names that GPU; where rank 1 has
# room for the model state only, every rank stops with one line naming it (exit 2), none hangs
if [ "${DEVICE:-cpu}" = cuda ] && grep -q "^gpu: CPU SIMT emulator" "$f"; then
    # rank 1 holds the model state, the cuBLASLt workspace and, for each of the two ranks the
    # emulator's one GPU is shared by, the plan's need at B=4 and an eighth of B=4's activations
    state=$(sed -n 's/^memory rank 0: params \([0-9]*\) B, grads \([0-9]*\) B, optimizer \([0-9]*\) B, working buffers \([0-9]*\) B.*/\1+\2+\3+\4/p' "$f")
    acts=$(sed -n 's/^memory rank 0: .*activations \([0-9]*\) B$/\1/p' "$f")  # B=4
    cap=$(( state + 32 * 1048576 + 2 * (64 * 1048576 + acts * 101 / 100) + acts / 8 ))
    two_gpus() {  # two_gpus CAPACITY_OF_RANK_1 OUT: the auto run, rank 1 on the smaller GPU
        mpirun --oversubscribe -np 1 "$BIN" "${common[@]}" --batch-size auto --total-batch-tokens 512 --steps 1 : \
            -np 1 -x SIMT_GPU_MEMORY="$1" "$BIN" "${common[@]}" --batch-size auto --total-batch-tokens 512 --steps 1 >"$2" 2>&1
    }
    two_gpus "$cap" "$tmp/auto2.txt"; rc=$?
    [ $rc = 0 ] && grep -q "^batch: --batch-size auto: B=4, the largest that fits .*; rank 1's GPU has" "$tmp/auto2.txt" &&
        grep -q "^data: .* B=4 T=32 dp=2, 2 micro-batch(es)" "$tmp/auto2.txt" && r=ok || r="not ok"
    echo "$r - dp=2, rank 1's GPU smaller: --batch-size auto takes B=4 on both ranks, what fits rank 1 (exit $rc: $(grep -m1 '^batch: ' "$tmp/auto2.txt" | cut -c1-120))"
    # (room for the state only: the plan counts both ranks' states on the one GPU they share, which
    # on the emulator is each process's own, so 2·state; planner.h's plan_state checks it before
    # allocating, plan_batch what is left after)
    two_gpus $(( 2 * state + 48 * 1048576 )) "$tmp/auto2.txt"; rc=$?
    n=$(grep -c "^error: --batch-size auto --seq-len 32: a micro-batch of 1 needs .* but rank 1's GPU has .*; not even --batch-size 1 fits" "$tmp/auto2.txt")
    [ $rc = 2 ] && [ "$n" = 1 ] && ! grep -q "^step " "$tmp/auto2.txt" && r=ok || r="not ok"
    echo "$r - dp=2, no room on rank 1's GPU: both ranks stop with one line naming it (exit $rc, $n such line)"
fi

# --- the model state over ranks (planner.h: plan_state), on the host (CPU ranks, not DP_QUICK): d12
# in fp32 at dp = 2 under LLMC_HOST_MEMORY's 3.2 GiB, 1.6 GiB for each of the two ranks that share
# the host. ZeRO 0 keeps 16Ψ = 1.85 GiB a rank: refused before anything is allocated (exit 2, one
# line), naming --zero 3's Ψ·16/2 plus its working buffers (two gather slots and a gradient buffer
# of the embeddings, the largest unit; two reduce-scatter chunks): 1.57 GiB, which fits; and the
# advised --zero 3 then starts (a --steps 0 run: the state allocated, the weights drawn, no forward)
if [ "${DEVICE:-cpu}" = cpu ] && [ -z "${DP_QUICK:-}" ]; then
    cap=3435973837  # 3.2 GiB
    state=(--device cpu --model d12 --val-data "" --seq-len 64 --steps 0)
    mpirun --oversubscribe -np 2 -x LLMC_HOST_MEMORY=$cap "$BIN" "${state[@]}" --zero 0 >"$tmp/st0.txt" 2>&1; rc=$?
    advice=$(sed -n 's/^error: the model state needs \(.*\) a rank (.* at --zero 0), but .* has .*; --zero 3 shards it over the 2 data-parallel ranks: \(.*\) a rank$/\1 \2/p' "$tmp/st0.txt")
    [ $rc = 2 ] && [ "$(grep -c '^error' "$tmp/st0.txt")" = 1 ] && [ -n "$advice" ] && r=ok || r="not ok"
    echo "$r - dp=2, d12's ZeRO-0 state larger than each rank's 1.6 GiB: refused in one line naming --zero 3 (exit $rc; needs, and at --zero 3: ${advice:-$(tail -1 "$tmp/st0.txt")})"
    mpirun --oversubscribe -np 2 -x LLMC_HOST_MEMORY=$cap "$BIN" "${state[@]}" --zero 3 >"$tmp/st3.txt" 2>&1; rc=$?
    [ $rc = 0 ] && r=ok || r="not ok"
    echo "$r - dp=2: the advised --zero 3 fits the same memory and starts (exit $rc$([ $rc = 0 ] || echo ": $(tail -1 "$tmp/st3.txt")"))"
fi

# --- activation checkpointing under ZeRO-3 (model.h: Recompute): each block's backward reruns
# its forward on the parameters ZeRO-3 gathered for that backward, and the run is the one without
# recomputation, bit for bit (2 layers: a missing rerun would read the other block's activations).
# Not on the emulated GPU, where two runs of 2 layers cost two minutes of make test (test_train
# runs --recompute there in one process)
f="$tmp/n$(set -- ${DP_SIZES:-2 4}; echo $1)_z0_a1.txt"
if ! grep -q "^gpu: CPU SIMT emulator" "$f"; then
    for r in none full; do
        mpi 2 "${common[@]}" --model d2 --batch-size 2 --total-batch-tokens 256 --zero 3 --steps 3 --recompute $r \
            --log-file "$tmp/rc_$r.jsonl" >"$tmp/rc_$r.txt" 2>&1 || { echo "# dp=2 zero=3 --recompute $r failed:"; tail -2 "$tmp/rc_$r.txt"; }
    done
    if [ -s "$tmp/rc_full.jsonl" ] && cmp -s <(fields "$tmp/rc_none.jsonl") <(fields "$tmp/rc_full.jsonl"); then
        echo "ok - dp=2 zero=3 --recompute full: the same run as without recomputation, bit for bit"
    else
        echo "not ok - dp=2 zero=3 --recompute full differs from none"; diff <(fields "$tmp/rc_none.jsonl") <(fields "$tmp/rc_full.jsonl") | sed 's/^/#   /'
    fi
fi

# --- skipping outliers (outliers.h): every rank judges the same all-reduced loss and norm, so all
# skip together, and a skipped step leaves each stage's state as its update would have found it
# (ZeRO-3 forgets its gathered units, stages 1-2 have nothing to gather): the four stages run the
# same training, bit for bit, skips included. Not on the emulated GPU (the decision is host code;
# test_train runs it there in one process).
if ! grep -q "^gpu: CPU SIMT emulator" "$f"; then
    for z in 0 1 2 3; do
        mpi 2 "${common[@]}" --batch-size 4 --zero $z --steps 14 --lr-schedule constant --skip-norm-z 1 --skip-window 4 \
            --log-file "$tmp/sk_$z.jsonl" >"$tmp/sk_$z.txt" 2>&1 || { echo "# dp=2 zero=$z --skip-norm-z failed:"; tail -2 "$tmp/sk_$z.txt"; }
    done
    sk_fields() { $PY -c "
import json, sys
for d in map(json.loads, open(sys.argv[1])): print(d['step'], repr(d['loss']), repr(d['grad_norm']), d.get('skipped', False))" "$1" 2>/dev/null; }
    n=$(sk_fields "$tmp/sk_0.jsonl" | grep -c True)
    if [ "$n" -gt 0 ] && [ "$n" -lt 10 ] && cmp -s <(sk_fields "$tmp/sk_0.jsonl") <(sk_fields "$tmp/sk_1.jsonl") \
        && cmp -s <(sk_fields "$tmp/sk_0.jsonl") <(sk_fields "$tmp/sk_2.jsonl") && cmp -s <(sk_fields "$tmp/sk_0.jsonl") <(sk_fields "$tmp/sk_3.jsonl"); then
        echo "ok - dp=2 --skip-norm-z: ZeRO 0-3 skip the same $n of 14 steps and run the same training, bit for bit"
    else
        echo "not ok - dp=2 --skip-norm-z: $n skipped steps at ZeRO 0, or the stages differ"
        for z in 1 2 3; do diff <(sk_fields "$tmp/sk_0.jsonl") <(sk_fields "$tmp/sk_$z.jsonl") | sed "s/^/#   zero $z: /"; done
    fi
fi

# --- a Llama (llama:d4: blocks with no biases, so its units' shards fall elsewhere) at dp = 2 with
# ZeRO 1-3 and accumulation 2 against one process: losses 1e-5, every tensor's change 1e-4
# (mpi_setup.sh's alike; AdamW's ε 1e-4 as test_tp.sh says why)
if [ -z "${DP_QUICK:-}" ]; then
    lcommon=("${common[@]}"); common=(--device "${DEVICE:-cpu}" --precision fp32 --model llama:d4 "${small[@]}" --seq-len 32 --lr 3e-3
        --warmup-steps 2 --weight-decay 0.1 --eps 1e-4 --seed 7 --val-data "" --steps 3)
    [ -n "${COMM:-}" ] && common+=(--comm "$COMM")
    "$BIN" "${common[@]}" --steps 0 --save-model "$tmp/llama_init.bin" >/dev/null 2>&1
    run llama_ref 1 --batch-size 8 --total-batch-tokens 512
    for z in 1 3; do  # (ZeRO-2 shards as 1 and 3 do)
        run llama_z$z 2 --batch-size 4 --zero $z --total-batch-tokens 512 && alike llama_ref llama_z$z llama_init "llama:d4 dp=2 zero=$z accum=2"
    done
    untied_llama "$tmp/untied_init.bin" $V  # (ZeRO-3 gathers lm_head with lnf, and prefetches by the untied order)
    run untied_ref 1 --model "$tmp/untied_init.bin" --batch-size 8 --total-batch-tokens 512
    run untied_z3 2 --model "$tmp/untied_init.bin" --batch-size 4 --zero 3 --total-batch-tokens 512 &&
        alike untied_ref untied_z3 untied_init "llama (untied) dp=2 zero=3 accum=2"
    common=("${lcommon[@]}")
fi

# --- bad layouts fail before allocating, with one line from rank 0
mpi 3 "${common[@]}" --batch-size 2 --tp 2 >"$tmp/bad.out" 2>"$tmp/bad.err"; rc=$?
n=$(grep -c "error: world size 3 is not divisible by tp\*pp\*cp" "$tmp/bad.err")
[ $rc = 2 ] && [ "$n" = 1 ] && ! grep -q "^memory" "$tmp/bad.out" && echo "ok - world size 3 with --tp 2 is refused with one line (exit 2)" \
    || echo "not ok - bad layout: exit $rc, $n error lines"

# --- the ranks must agree: the same flags, the same build, the same shards and one --output-dir for
# all. Here rank 1 differs in one of them (mpirun's colon form starts each rank its own way; a
# working directory of its own stands for another node's disk). The run stops before its first
# step: exit 2, one line that names rank 1.
if [ -z "${DP_QUICK:-}" ]; then  # (these checks use MPI, whatever the backend)
    bin=$(readlink -f "$BIN")
    cp "$bin" "$tmp/same_build" && printf x >>"$tmp/same_build"  # (other bytes, the same sources: as nvcc builds them again)
    printf '#!/bin/sh\nLLMC_BUILD_ID=7 exec "%s" "$@"\n' "$bin" >"$tmp/other_build" && chmod +x "$tmp/other_build"  # (other sources)
    for n in 0 1; do mkdir -p "$tmp/node$n/data"; done
    ln -s "$(readlink -f build/data/kjv${V}_train_000000.bin)" "$tmp/node0/data/kjv_train_000000.bin"
    ln -s "$(readlink -f build/data/kjv${V}_val_000000.bin)" "$tmp/node1/data/kjv_train_000000.bin"  # (another shard, same name)
    two_ranks() {  # two_ranks NAME PATTERN DIR0 BIN0 DIR1 BIN1 ARGS...: both ranks get common + ARGS, rank 1 then $only1
        local name=$1 pat=$2 d0=$3 b0=$4 d1=$5 b1=$6; shift 6
        local args=("${common[@]}" --batch-size 2 --steps 2 "$@") out rc n
        out=$(mpirun --oversubscribe -np 1 --wdir "$d0" "$b0" "${args[@]}" : -np 1 --wdir "$d1" "$b1" "${args[@]}" $only1 2>&1); rc=$?
        n=$(echo "$out" | grep -c "^error: ")
        if [ $rc = 2 ] && [ "$n" = 1 ] && echo "$out" | grep -q -- "$pat" && ! echo "$out" | grep -q "^step "; then
            echo "ok - $name: exit 2 before the first step, '$(echo "$out" | grep "^error: " | cut -c8-90)...'"
        else echo "not ok - $name: exit $rc, $n error lines"; echo "$out" | tail -3 | sed 's/^/#   /'; fi
    }
    here=$PWD
    only1="--lr 1e-3" two_ranks "rank 1 given other flags" "^error: rank 1 was started with other flags than rank 0" "$here" "$bin" "$here" "$bin"
    only1=""  # (from here on the same flags)
    two_ranks "rank 1 runs another build" "^error: rank 1 runs another build of the trainer than rank 0" "$here" "$bin" "$here" "$tmp/other_build"
    mpirun --oversubscribe -np 1 "$bin" "${common[@]}" --batch-size 2 --steps 2 : -np 1 "$tmp/same_build" "${common[@]}" --batch-size 2 \
        --steps 2 >"$tmp/agree.out" 2>&1 && grep -q "^step *2/2" "$tmp/agree.out" \
        && echo "ok - rank 1 runs a copy of the build with other bytes (the same sources and flags): the run trains" \
        || { echo "not ok - rank 1 runs the same build from another file: refused"; tail -2 "$tmp/agree.out" | sed 's/^/#   /'; }
    dcommon=("${common[@]}"); common+=(--train-data "data/kjv_*.bin")  # (relative: each rank its own node's)
    two_ranks "rank 1 sees other shards" "^error: --train-data: rank 1 sees other shards than rank 0 (rank 0: [0-9]* tokens in 1 shard(s); rank 1: [0-9]* tokens in 1 shard(s))" \
        "$tmp/node0" "$bin" "$tmp/node1" "$bin"
    rm "$tmp/node1/data/kjv_train_000000.bin" && ln -s "$(readlink -f "$tmp/node0/data/kjv_train_000000.bin")" "$tmp/node1/data/kjv_train_000000.bin"
    two_ranks "--output-dir on each node's own disk" "^error: --output-dir out: rank 1 does not see the files rank 0 writes there" \
        "$tmp/node0" "$bin" "$tmp/node1" "$bin" --output-dir out
    "$BIN" "${dcommon[@]}" --steps 0 --seed 1 --save-model "$tmp/node0/model.bin" >/dev/null 2>&1
    "$BIN" "${dcommon[@]}" --steps 0 --seed 2 --save-model "$tmp/node1/model.bin" >/dev/null 2>&1
    two_ranks "rank 1 reads another --model file" "^error: --model model.bin: rank 1 reads another file than rank 0" \
        "$tmp/node0" "$bin" "$tmp/node1" "$bin" --model model.bin
    # the ranks compare what model.bin.crc32c says; rank 1's says rank 0's, but its model.bin is another: its load stops it
    cp "$tmp/node1/model.bin.crc32c" "$tmp/node1.crc32c" && cp "$tmp/node0/model.bin.crc32c" "$tmp/node1/model.bin.crc32c"
    out=$(timeout 60 mpirun --oversubscribe -np 1 --wdir "$tmp/node0" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin : \
        -np 1 --wdir "$tmp/node1" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin 2>&1); rc=$?
    [ $rc = 1 ] && echo "$out" | grep -q "error: 'model.bin' is damaged: its CRC32C is" && ! echo "$out" | grep -q "^step " \
        && echo "ok - rank 1's model.bin.crc32c says rank 0's CRC, but its file is another: its load stops the run (exit $rc)" \
        || { echo "not ok - rank 1's other model file under rank 0's checksum: exit $rc"; echo "$out" | tail -3 | sed 's/^/#   /'; }
    mv "$tmp/node1.crc32c" "$tmp/node1/model.bin.crc32c"
    $PY test/make_choice_set.py "$tmp/node0/hs.bin" "build/data/kjv${V}_val_000000.bin"
    $PY test/make_choice_set.py "$tmp/node1/hs.bin" "build/data/kjv${V}_train_000000.bin"  # (other examples)
    two_ranks "rank 1 reads another --hellaswag file" "^error: --hellaswag hs.bin: rank 1 reads another file than rank 0" \
        "$tmp/node0" "$bin" "$tmp/node1" "$bin" --hellaswag hs.bin
    # a refusal that only rank 1 meets (its node lacks the model file): rank 0 goes on to its next collective,
    # so after 10 s rank 1 prints its line and ends without MPI, and the launcher ends rank 0 (not a hang)
    rm "$tmp/node1/model.bin"*
    alone="[rank 1] error: --model: 'model.bin' is neither a preset"
    out=$(timeout 60 mpirun --oversubscribe -np 1 --wdir "$tmp/node0" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin : \
        -np 1 --wdir "$tmp/node1" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin 2>&1); rc=$?
    [ $rc = 2 ] && echo "$out" | grep -F -- "$alone" | grep -qF "(the other ranks did not stop with it within 10 s)" \
        && echo "ok - a refusal only rank 1 meets ends the run (exit 2): '$alone ... (the other ranks did not stop with it within 10 s)'" \
        || { echo "not ok - a refusal only rank 1 meets: exit $rc"; echo "$out" | head -3 | sed 's/^/#   /'; }
    out=$(timeout 60 mpirun --oversubscribe -np 1 --wdir "$tmp/node1" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin : \
        -np 1 --wdir "$tmp/node0" "$bin" "${common[@]}" --batch-size 2 --steps 2 --model model.bin 2>&1); rc=$?
    [ $rc = 2 ] && [ "$(echo "$out" | grep -c "error: ")" = 1 ] && echo "$out" | grep -q "^error: --model: 'model.bin' is neither a preset" \
        && echo "ok - a refusal only rank 0 meets ends the run (exit 2), its line printed once" \
        || { echo "not ok - a refusal only rank 0 meets: exit $rc"; echo "$out" | head -3 | sed 's/^/#   /'; }
    rm -rf "$tmp/node1/out" && ln -s "$tmp/node0/out" "$tmp/node1/out"  # (now one directory for both: the run goes on)
    mpirun --oversubscribe -np 1 --wdir "$tmp/node0" "$bin" "${common[@]}" --batch-size 2 --steps 2 --output-dir out : \
        -np 1 --wdir "$tmp/node1" "$bin" "${common[@]}" --batch-size 2 --steps 2 --output-dir out >"$tmp/agree.out" 2>&1; rc=$?
    [ $rc = 0 ] && [ -d "$tmp/node0/out/step_00000002" ] && echo "ok - --output-dir shared by both ranks: the run trains and saves" \
        || { echo "not ok - --output-dir shared by both ranks: exit $rc"; tail -3 "$tmp/agree.out" | sed 's/^/#   /'; }
    common=("${dcommon[@]}")
fi

# --- --comm-timeout (llmc/comm_timeout.h): rank 1 stopped (SIGSTOP) in the middle of a run, the way a hung
# GPU or a dead link leaves it; rank 0 waits in a collective no longer than the timeout (3 s), then ends the
# run (exit 1) with one line naming the collective, its group and the step, and the launcher ends rank 1.
# (Here with this run's backend: CPU ranks over MPI, or the emulated GPU with NCCL.)
mpi 2 "${common[@]}" --batch-size 2 --steps 100000000 --comm-timeout 3 --log-file "$tmp/hang.jsonl" >"$tmp/hang.out" 2>&1 &
hang=$!
for i in $(seq 600); do [ "$(wc -l 2>/dev/null <"$tmp/hang.jsonl" || echo 0)" -ge 3 ] && break; sleep 0.1; done
stopped=""
for p in $(pgrep -f -- "$tmp/hang.jsonl"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && kill -STOP "$p" && stopped=$p
done
t0=$(date +%s)
for i in $(seq 300); do kill -0 $hang 2>/dev/null || break; sleep 0.1; done  # (30 s at most)
took=$(($(date +%s) - t0))
kill -0 $hang 2>/dev/null && { kill -9 $hang; [ -n "$stopped" ] && kill -9 "$stopped"; }
wait $hang; rc=$?
line=$(grep "^\[rank 0\] error: --comm-timeout 3: waited [0-9]* s in .* over the .* group at step [0-9]* " "$tmp/hang.out" | head -1)
[ -n "$stopped" ] && [ $rc != 0 ] && [ "$took" -le 15 ] && [ -n "$line" ] \
    && echo "ok - --comm-timeout 3: rank 1 stopped, rank 0 ended the run in $took s (exit $rc): ${line#*error: }" \
    || { echo "not ok - --comm-timeout 3: rank 1 stopped ('$stopped'), the run ended after $took s, exit $rc"; tail -3 "$tmp/hang.out" | sed 's/^/#   /'; }

# --- NCCL's setup that never ends, the way it hangs on a network it cannot reach: on the emulated GPU
# rank 1's ncclCommInitRank never returns (SIMT_NCCL_INIT_STALL=1, test/simt_nccl.h). Rank 0 waits in its
# own no longer than --comm-timeout, and ends the run with one line that names it.
f="$tmp/n$(set -- ${DP_SIZES:-2 4}; echo $1)_z0_a1.txt"
if [ "${DEVICE:-cpu}" = cuda ] && [ "${COMM:-}" = nccl ] && grep -q "^gpu: CPU SIMT emulator" "$f"; then
    t0=$(date +%s)
    SIMT_NCCL_INIT_STALL=1 timeout 120 mpirun --oversubscribe -np 2 "$BIN" "${common[@]}" --batch-size 2 --steps 2 --comm-timeout 3 \
        >"$tmp/stall.out" 2>&1; rc=$?
    took=$(($(date +%s) - t0))
    line=$(grep "^\[rank 0\] error: --comm-timeout 3: waited [0-9]* s in NCCL's setup (ncclCommInitRank) over the world group before the first step" "$tmp/stall.out")
    [ $rc != 0 ] && [ $rc != 124 ] && [ -n "$line" ] \
        && echo "ok - NCCL's setup stalled on rank 1: rank 0 ended the run in $took s (exit $rc): ${line#*error: }" \
        || { echo "not ok - NCCL's setup stalled on rank 1: exit $rc after $took s"; tail -3 "$tmp/stall.out" | sed 's/^/#   /'; }
fi
