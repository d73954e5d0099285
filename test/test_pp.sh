#!/usr/bin/env bash
# test_pp — pipeline parallelism (llmc/pipeline.h) on CPU ranks under mpirun, against one process
# with the same global batch (GPT d2: 2 blocks, C = 128; d3 for uneven stages; d4-d6 for the
# interleaved schedule; the shipped Bible folded to 250 tokens, test/small_vocab.py, so that the
# blocks, not a 50257-wide classifier, make the runs' cost; the evaluation part on GPT-2's).
# Parts: equivalence (gpipe, 1f1b, uneven stages, interleaved --vpp 2, with dp, tp + sp, a Llama:
# losses 1e-5, every tensor changed alike), step 1 bit for bit, memory, slots, send buffers and
# bytes against the formulas, recompute, evaluation, bf16, resume and resharding (fp8 too), bad
# flags, --batch-size auto. What each checks: docs/verification.md ("test/test_pp.sh").
# usage: [DEVICE=cuda] [COMM=mpi|nccl] [PP_QUICK=1] test/test_pp.sh [TRAIN_GPT]
# Runs take 3 steps. PP_QUICK=1 runs pp = 2 (1f1b), tp = 2 × pp = 2, and interleaved 4 and 6 blocks
# of C = 64 over pp = 2 and 3 (2 steps) against one process: what the suite runs on the CPU SIMT
# emulator (build/train_gpt_simt, DEVICE=cuda), where with COMM=nccl the stages' sends and
# receives and the tp collectives take the GPU path (NCCL's, test/simt_nccl.h: the sends left in
# flight until a wait covers them, as on a GPU), and pp = 2 once more with --comm mpi (ranks
# sharing a GPU: the sends staged through host memory).
set -u
cd "$(dirname "$0")/.."
BIN=${1:-./train_gpt}
PY=${PYTHON:-/usr/bin/python3}
TEST_NAME=test_pp; source test/mpi_setup.sh  # $tmp, mpi N ARGS...

C=128; L=2; V=250; Vp=256; maxT=1024; T=32; B=4; M=4
$PY test/small_vocab.py build/data $V || { echo "not ok - test_pp: test/small_vocab.py could not fold the Bible to $V tokens"; exit 1; }
# fp32 unless a part says bf16; AdamW's ε 1e-4 for the weight comparison (test_tp.sh says why)
common=(--device "${DEVICE:-cpu}" --precision fp32 --model d2 --vocab-size $V --train-data "build/data/kjv${V}_train_*.bin"
        --seq-len $T --lr 3e-3 --warmup-steps 2 --weight-decay 0.1
        --eps 1e-4 --seed 7 --val-data "" --comm-stats --steps 3 --batch-size $B --total-batch-tokens $((M * B * T)))
[ -n "${COMM:-}" ] && common+=(--comm "$COMM")

"$BIN" "${common[@]}" --steps 0 --save-model "$tmp/init.bin" >/dev/null 2>&1
[ -z "${PP_QUICK:-}" ] && "$BIN" "${common[@]}" --model d3 --steps 0 --save-model "$tmp/init_d3.bin" >/dev/null 2>&1

# --- equivalence: one process against the pipelines, the same 4 micro-batches a step
# first_loss_same REF NAME LABEL: step 1's loss (the initial weights through the stages) bit for bit
first_loss_same() {
    local a b; a=$(losses "$tmp/$1.jsonl" | head -1); b=$(losses "$tmp/$2.jsonl" | head -1)
    [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok - $3: step 1's loss is one process's bit for bit ($a)" ||
        echo "not ok - $3: step 1's loss $b, one process's $a"
}
# send_buffers NAME RANKS CHANNELS LABEL: each of the RANKS stages of run NAME kept no more send
# copies a way than its cap (pipeline.h's gpt_stage_send and pp_send_buffers: the oldest
# reused once its receiver has it, the copy waiting for it at the cap), and its memory line
# counts the caps' copies: (forward + backward)·B·T·CHANNELS·4 bytes (fp32). On the emulated GPU
# also rank 0's peak GPU memory: its model state + activations + the send copies it made (the
# emulator takes each message at once: fewer than the cap), and the kernels' scratch within 1%
# of the activations (test_gpu_train.sh's bound for one GPU).
send_buffers() {
    $PY - "$tmp/$1.txt" "$2" "$(( B * T * $3 * 4 ))" "$4" <<'PY'
import re, sys
text, ranks, copy, label = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kept = {int(r): tuple(map(int, g)) for r, *g in re.findall(r"^pipeline rank (\d+): (\d+) \+ (\d+) send buffer\(s\) \(forward \+ backward; at most (\d+) \+ (\d+)\)", text, re.M)}
caps = {int(r): (int(a), int(b)) for r, a, b in re.findall(r"^pipeline rank (\d+): stage .*, send copies at most (\d+) \+ (\d+) \(forward \+ backward\)$", text, re.M)}
planned = {int(r): int(n) for r, n in re.findall(r"^memory rank (\d+): .* send copies (\d+) B$", text, re.M)}
ok = len(kept) == ranks and all(kept[r][0] <= kept[r][2] and kept[r][1] <= kept[r][3] and caps.get(r) == kept[r][2:]
                                 and planned.get(r) == (kept[r][2] + kept[r][3]) * copy for r in kept)
print(("ok" if ok else "not ok") + f" - {label}: each stage kept at most its cap of send copies a way, which its memory line counts "
      f"(rank: kept forward, backward, caps: {kept}; planned bytes {planned})")
mem, peak = re.search(r"^memory rank 0: (.*)$", text, re.M), re.search(r"^peak GPU memory.*\((\d+) B\)$", text, re.M)
if peak:
    parts = [int(x) for x in re.findall(r"(\d+) B", mem.group(1))] if mem else []
    made = (kept[0][0] + kept[0][1]) * copy if 0 in kept else 0  # (the copies it made: at most the planned)
    extra = int(peak.group(1)) - sum(parts[:5]) - made if len(parts) == 6 else -1
    ok = len(parts) == 6 and 0 <= extra <= 0.01 * parts[4]
    print(("ok" if ok else "not ok") + f" - {label}: rank 0's peak GPU memory is its model state + activations + the send copies "
          f"it made ({parts[:5]}, {made}) + {extra} B of scratch (0 <= scratch <= 1% of the activations)")
PY
}
run ref 1
schedules="gpipe 1f1b"; [ -n "${PP_QUICK:-}" ] && schedules=1f1b
for s in $schedules; do
    run "pp2_$s" 2 --pp 2 --pp-schedule "$s" || continue
    alike ref "pp2_$s" init "pp=2 $s"
    first_loss_same ref "pp2_$s" "pp=2 $s"
    send_buffers "pp2_$s" 2 $C "pp=2 $s"
done
run tp2pp2 4 --tp 2 --sp 1 --pp 2 && alike ref tp2pp2 init "tp=2 --sp 1 x pp=2"
# interleaved 1F1B (--vpp 2 chunks a stage): a 4-block model (d4) over pp = 2 (stage 0 holds
# blocks 0 and 2, stage 1 blocks 1 and 3: every hand-over crosses a stage, stage 1's chunk 0
# hands back to stage 0's chunk 1, and both kinds of message go 0 -> 1: the ring's two links both
# ways), and a 6-block one (d6) over pp = 3 (6 micro-batches a step: a multiple of pp; an odd
# ring, whose NCCL path takes a third communicator a way: comm.h). interleaved_core M4 M6 STEPS C4
# runs them (models: presets or files; M4's channels C4) for STEPS steps.
interleaved_core() {
    local a=${1##*/} b=${2##*/}; a=${a%.bin}; b=${b%.bin}  # (the labels: presets, or files' names)
    il=(--pp-schedule interleaved --vpp 2 --steps "$3")
    "$BIN" "${common[@]}" --model "$1" --steps 0 --save-model "$tmp/init_d4.bin" >/dev/null 2>&1
    run ref_d4 1 --model "$1" --steps "$3"
    run il_d4 2 --model "$1" --pp 2 "${il[@]}" && {
        alike ref_d4 il_d4 init_d4 "$a over pp=2 interleaved, vpp=2"
        first_loss_same ref_d4 il_d4 "$a over pp=2 interleaved"
        send_buffers il_d4 2 "$4" "$a over pp=2 interleaved"
    }
    # one send copy a way (LLMC_PP_SEND_COPIES, pipeline.h): each send after the first waits for
    # the one before it to be taken (on the emulated GPU the compute stream waits for its event;
    # a copy overwritten while its send still reads it is an error there), and the run is the same
    # (emulated NCCL: each receive 300 ms late, longer than a forward there, so the sender finds the
    # send before still in flight: without the wait at the cap the emulator reports the overwrite)
    LLMC_PP_SEND_COPIES=1 SIMT_NCCL_RECV_DELAY_MS=300 run il_d4_cap1 2 --model "$1" --pp 2 "${il[@]}" &&
        same_run "$tmp/il_d4" "$tmp/il_d4_cap1" "$a over pp=2 interleaved with one send copy a way (LLMC_PP_SEND_COPIES=1)" &&
        grep -q "^pipeline rank 0: 1 + 1 send buffer(s) (forward + backward; at most 1 + 1)" "$tmp/il_d4_cap1.txt" &&
        echo "ok - $a over pp=2 interleaved, LLMC_PP_SEND_COPIES=1: stage 0 kept one copy a way" ||
        echo "not ok - $a over pp=2 interleaved, LLMC_PP_SEND_COPIES=1: $(grep '^pipeline rank 0: .* send buffer' "$tmp/il_d4_cap1.txt")"
    "$BIN" "${common[@]}" --model "$2" --steps 0 --save-model "$tmp/init_d6.bin" >/dev/null 2>&1
    run ref_d6 1 --model "$2" --steps "$3" --total-batch-tokens $((6 * B * T))
    run il_d6 3 --model "$2" --pp 3 "${il[@]}" --total-batch-tokens $((6 * B * T)) && alike ref_d6 il_d6 init_d6 "$b over pp=3 interleaved, vpp=2"
}
if [ -n "${PP_QUICK:-}" ]; then  # (emulated: blocks of C = 64, one head, 2 steps, for the emulator's time)
    $PY - "$tmp" $V <<'PY'
import sys
sys.path.insert(0, "test")
import gpt2_torch as ref
for L in (4, 6):
    cfg = dict(maxT=1024, V=int(sys.argv[2]), Vp=(int(sys.argv[2]) + 127) // 128 * 128, L=L, NH=1, C=64)
    ref.write_model(f"{sys.argv[1]}/blocks{L}.bin", cfg, ref.random_params(cfg, seed=5))
PY
    interleaved_core "$tmp/blocks4.bin" "$tmp/blocks6.bin" 2 64
    # and ranks that share a GPU: --comm mpi, the sends staged from the GPU through host memory
    [ "${COMM:-}" = nccl ] && run pp2_mpi 2 --pp 2 --comm mpi && alike ref pp2_mpi init "pp=2 1f1b, --comm mpi"
    # --batch-size auto with --pp (planner.h: a stage keeps as many micro-batches as its schedule
    # does with the m the batch size makes): the step's 16 sequences, 1f1b over pp = 2. With the
    # emulated GPU's 80 GiB the whole step is one micro-batch (B=16). Stage 0 keeps min(m, 2)
    # micro-batches, so B = 16 (m = 1) and B = 8 (m = 2) both keep 16 sequences' activations, B = 4
    # (m = 4) 8: on a GPU with room for B = 4's (+ a margin of a quarter of B = 16's, for its send
    # copies) but not B = 8's, auto takes B = 4, that trains within the plan, and --batch-size 8
    # is refused naming it. (Both ranks share the emulator's one GPU in the plan: room = free / 2.)
    if [ "${DEVICE:-cpu}" = cuda ] && grep -q "^gpu: CPU SIMT emulator" "$tmp/ref.txt"; then
        auto=(--pp 2 --batch-size auto --total-batch-tokens $((16 * T)) --steps 1)
        run auto_pp 2 "${auto[@]}"
        grep -q "^batch: --batch-size auto: B=16, the largest that fits" "$tmp/auto_pp.txt" &&
            grep -q "^data: .* B=16 T=$T dp=1, 1 micro-batch(es)" "$tmp/auto_pp.txt" && r=ok || r="not ok"
        echo "$r - --batch-size auto --pp 2 on an 80 GiB GPU: the step's 16 sequences in one micro-batch ($(grep -m1 '^batch: ' "$tmp/auto_pp.txt" | cut -c1-60))"
        state=$(sed -n 's/^memory rank 0: params \([0-9]*\) B, grads \([0-9]*\) B, optimizer \([0-9]*\) B, working buffers \([0-9]*\) B.*/\1+\2+\3+\4/p' "$tmp/auto_pp.txt")
        acts16=$(sed -n 's/^memory rank 0: .*activations \([0-9]*\) B, send copies.*/\1/p' "$tmp/auto_pp.txt")
        cap=$(( state + 32 * 1048576 + 2 * (64 * 1048576 + acts16 / 2 * 101 / 100 + acts16 / 4) ))
        SIMT_GPU_MEMORY=$cap run auto_pp4 2 "${auto[@]}" && {
            grep -q "^batch: --batch-size auto: B=4, the largest that fits" "$tmp/auto_pp4.txt" &&
                grep -q "^data: .* B=4 T=$T dp=1, 4 micro-batch(es)" "$tmp/auto_pp4.txt" &&
                grep -q "^pipeline rank 0: stage 0, .* 2 activation slot(s)" "$tmp/auto_pp4.txt" && grep -q "^step " "$tmp/auto_pp4.txt" && r=ok || r="not ok"
            echo "$r - --batch-size auto --pp 2 on a GPU that holds B=4's 2 slots but not B=8's: B=4, 4 micro-batches, trains ($(grep -m1 '^batch: ' "$tmp/auto_pp4.txt" | cut -c1-60))"
            send_buffers auto_pp4 2 $C "--batch-size auto --pp 2 (B=4)"
        }
        out=$(SIMT_GPU_MEMORY=$cap mpi 2 "${common[@]}" --pp 2 --batch-size 8 --total-batch-tokens $((16 * T)) --steps 1 2>&1); rc=$?
        [ $rc = 2 ] && echo "$out" | grep -q "^error: --batch-size 8 --seq-len $T: a micro-batch needs .*; --batch-size 4 fits" && r=ok || r="not ok"
        echo "$r - --pp 2 --batch-size 8 on that GPU: refused (exit $rc), naming --batch-size 4"
    fi
    # every stream in one hardware queue could hang the ring's sends behind receives (comm.h): refused
    [ "${COMM:-}" = nccl ] && CUDA_DEVICE_MAX_CONNECTIONS=1 check_error "--pp over NCCL with CUDA_DEVICE_MAX_CONNECTIONS=1" 2 \
        "CUDA_DEVICE_MAX_CONNECTIONS=1: every stream in one queue" --pp 2
    exit 0
fi
run ref_d3 1 --model d3
run pp2_d3 2 --model d3 --pp 2 && alike ref_d3 pp2_d3 init_d3 "d3 over pp=2 (blocks [0, 2) and [2, 3))"
run pp3_d3 3 --model d3 --pp 3 --pp-schedule gpipe && alike ref_d3 pp3_d3 init_d3 "d3 over pp=3, gpipe"
run ref_b8 1 --batch-size 8 --total-batch-tokens $((M * 8 * T))  # (dp = 2 × B = 4)
for z in 0 1 2 3; do
    run "dp2pp2_z$z" 4 --pp 2 --zero "$z" --total-batch-tokens $((M * 8 * T)) && alike ref_b8 "dp2pp2_z$z" init "dp=2 x pp=2 zero=$z"
done
# all three: dp = 2 × tp = 2 (--sp 1) × pp = 2 on 8 ranks (each stage's tp pair hands its rows of
# the residual stream to the next stage's; each (stage, tp rank) pair of dp ranks reduces its units)
run dp2tp2pp2 8 --tp 2 --sp 1 --pp 2 --zero 1 --total-batch-tokens $((M * 8 * T)) &&
    alike ref_b8 dp2tp2pp2 init "dp=2 x tp=2 --sp 1 x pp=2 (8 ranks) zero=1"
# ZeRO-2/3 reduce each unit every micro-batch; a stage of an odd number of units leaves a reduce
# pending in the slot its next backward takes first (d3: stage 1 holds block 2 and lnf)
run ref_d3_b8 1 --model d3 --batch-size 8 --total-batch-tokens $((M * 8 * T))
for z in 2 3; do
    run "dp2pp2_d3_z$z" 4 --model d3 --pp 2 --zero "$z" --total-batch-tokens $((M * 8 * T)) &&
        alike ref_d3_b8 "dp2pp2_d3_z$z" init_d3 "d3, dp=2 x pp=2 zero=$z"
done

# --- interleaved 1F1B: interleaved_core (above) with d4 and d6, then d4 with dp = 2 and ZeRO 1
# and 3, with tp = 2 --sp 1, and uneven d5 over pp = 2 ([0, 2) [3, 4) and [2, 3) [4, 5)); 3 steps each
interleaved_core d4 d6 3 256
run ref_d4_b8 1 --model d4 --steps 3 --batch-size 8 --total-batch-tokens $((M * 8 * T))
for z in 1 3; do
    run "il_dp2_z$z" 4 --model d4 --pp 2 "${il[@]}" --zero "$z" --total-batch-tokens $((M * 8 * T)) &&
        alike ref_d4_b8 "il_dp2_z$z" init_d4 "d4, dp=2 x pp=2 interleaved zero=$z"
done
run il_tp2 4 --model d4 --tp 2 --sp 1 --pp 2 "${il[@]}" && alike ref_d4 il_tp2 init_d4 "d4, tp=2 --sp 1 x pp=2 interleaved"
"$BIN" "${common[@]}" --model d5 --steps 0 --save-model "$tmp/init_d5.bin" >/dev/null 2>&1
run ref_d5 1 --model d5 --steps 3
run il_d5 2 --model d5 --pp 2 "${il[@]}" && alike ref_d5 il_d5 init_d5 "d5 over pp=2 interleaved (uneven chunks)"
# a Llama (llama:d4: no wpe, RMSNorm's head, grouped-query attention) over pp = 2 interleaved,
# with tp = 2 --sp 1 (the stages' chunks of unequal qkv groups)
"$BIN" "${common[@]}" --model llama:d4 --steps 0 --save-model "$tmp/init_llama.bin" >/dev/null 2>&1
run ref_llama 1 --model llama:d4 --steps 3
run il_tp2_llama 4 --model llama:d4 --tp 2 --sp 1 --pp 2 "${il[@]}" &&
    alike ref_llama il_tp2_llama init_llama "llama:d4, tp=2 --sp 1 x pp=2 interleaved"
# ... and one whose classifier is its own (lm_head): the last stage holds no copy of the
# embeddings, and no gradient is summed between the first and the last
untied_llama "$tmp/init_untied.bin" $V
run ref_untied 1 --model "$tmp/init_untied.bin" --steps 3
run pp2_untied 2 --model "$tmp/init_untied.bin" --pp 2 --steps 3 && alike ref_untied pp2_untied init_untied "llama (untied) over pp=2 1f1b"

# --- memory, slots and volume against the formulas in pipeline.h's header
$PY - "$tmp" $C $L $Vp $maxT $T $B $M <<'PY'
import json, re, sys
tmp = sys.argv[1]
C, L, Vp, maxT, T, B, M = map(int, sys.argv[2:])
s = 4  # fp32
def lines(name, what):
    out = {}
    for l in open(f"{tmp}/{name}.txt"):
        m = re.match(what, l)
        if m: out[int(m.group(1))] = tuple(int(x) for x in m.groups()[1:])
    return out
mem = lambda name: lines(name, r"memory rank (\d+): params (\d+) B.* activations (\d+) B")
slots = lambda name: lines(name, r"pipeline rank (\d+): stage \d+, blocks \[\d+, \d+\).*, (\d+) activation slot")
block, emb, lnf = 12 * C * C + 13 * C, Vp * C + maxT * C, 2 * C
want = {0: (emb + block) * s, 1: (emb + block + lnf) * s}  # stage 0: embeddings + block 0; stage 1: block 1, lnf, wte's copy
for sched in ("gpipe", "1f1b"):
    m = mem(f"pp2_{sched}")
    ok = {r: p for r, (p, _) in m.items()} == want
    print(("ok" if ok else "not ok") + f" - pp=2 {sched}: stage 0 holds the embeddings and block 0, stage 1 block 1, lnf and the "
          f"embeddings' copy: {want} bytes (got {m})")
g, o, mg, mo = slots("pp2_gpipe"), slots("pp2_1f1b"), mem("pp2_gpipe"), mem("pp2_1f1b")
ok = g == {0: (M,), 1: (M,)} and o == {0: (2,), 1: (1,)} and all(mg[r][1] * o[r][0] == mo[r][1] * g[r][0] for r in (0, 1))
print(("ok" if ok else "not ok") + f" - pp=2: gpipe keeps m = {M} micro-batches' activations on each stage, 1f1b pp - s (2, 1), "
      f"and the activation bytes follow the slots (gpipe {g}, 1f1b {o})")
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/pp2_1f1b.jsonl")]
send, tied = M * B * T * C * s, (Vp + maxT) * C * s  # tied: an all-reduce of 2 ranks sends 2(2-1)/2 of the unit
ok = len(rows) == 3 and all(r.get("pp_send_recv") == send and r.get("emb_all_reduce") == tied for r in rows)
print(("ok" if ok else "not ok") + f" - pp=2: stage 0 sends m*B*T*C*s = {send} bytes a step, and the tied embeddings' gradients "
      f"(Vp + maxT)*C*s = {tied} (got {rows[-1] if rows else None})")

# interleaved, d4 (C = 256) over pp = 2, v = 2, m = 4: stage 0's list (pp_schedule, Megatron's
# order; F/B micro.chunk) is F0.0 F1.0 F0.1 F1.1 | F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 |
# B2.1 B3.1 B2.0 B3.0: chunk 0 keeps 4 micro-batches at once, chunk 1 2; stage 1's (2 warm-up
# forwards) keeps 3 and 1. Each stage holds 2 of the 4 blocks.
C4, v = 256, 2
ilslots = lines("il_d4", r"pipeline rank (\d+): stage \d+, blocks \[\d+, \d+\) \[\d+, \d+\).*, (\d+) \+ (\d+) activation slot")
block4, emb4 = 12 * C4 * C4 + 13 * C4, Vp * C4 + maxT * C4
want4 = {0: (emb4 + 2 * block4) * s, 1: (emb4 + 2 * block4 + 2 * C4) * s}
m4 = mem("il_d4")
ok = ilslots == {0: (4, 2), 1: (3, 1)} and {r: p for r, (p, _) in m4.items()} == want4
print(("ok" if ok else "not ok") + f" - d4 over pp=2 interleaved: slots per chunk (4, 2) and (3, 1) as the schedule keeps them, "
      f"each stage two blocks' parameters {want4} (got {ilslots}, {m4})")
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/il_d4.jsonl")]
send = (2 * v - 1) * M * B * T * C4 * s  # stage 0: v chunk outputs forward, v - 1 input gradients back, each m times
ok = len(rows) == 3 and all(r.get("pp_send_recv") == send for r in rows)
print(("ok" if ok else "not ok") + f" - d4 over pp=2 interleaved: stage 0 sends (2v-1)*m*B*T*C*s = {send} bytes a step "
      f"(got {rows[-1] if rows else None})")
PY

# --- recompute, validation, bf16
run pp2_full 2 --pp 2 --recompute full && same_run "$tmp/pp2_1f1b" "$tmp/pp2_full" "pp=2 1f1b --recompute full"
run il_d4_full 2 --model d4 --pp 2 "${il[@]}" --recompute full && same_run "$tmp/il_d4" "$tmp/il_d4_full" "d4 over pp=2 interleaved --recompute full"
val=(--val-data "build/data/kjv${V}_val_*.bin" --val-tokens 256)
run ref_val 1 "${val[@]}"
run pp2_val 2 --pp 2 "${val[@]}" && close_losses "$tmp/ref_val.jsonl" "$tmp/pp2_val.jsonl" "pp=2 validation through the stages" 1e-5 val_loss
# evaluation and sampling of the initial weights (--steps 0): the forward through the stages is
# the one process's bit for bit (tp = 2 × pp = 2's is tp = 2's: tensor parallelism sums its
# partial products in another order), so the HellaSwag answers and scores, the validation loss
# and the sampled text (the same generator on every rank, the same logits) are the same; GPT-2's
# vocabulary (the tokenizer's, for the sample)
$PY test/make_choice_set.py "$tmp/hs.bin"
ev=(--steps 0 --vocab-size 0 --train-data "data/kjv_train_*.bin" --hellaswag "$tmp/hs.bin" --val-data data/kjv_val_000000.bin
    --val-tokens 256 --sample-every 1 --gen-tokens 12)
evals() { $PY - "$1" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1] + ".jsonl").readline())
text = open(sys.argv[1] + ".txt", errors="replace").read()
sample = text.split("---- sample at step 0 ----", 1)[1].split("\n---", 1)[0] if "---- sample at step 0" in text else None
print(d["hellaswag_correct"], d["hellaswag_total"], repr(d["hellaswag_loss"]), repr(d["val_loss"]), repr(sample))
PY
}
run ev1 1 "${ev[@]}"
run ev_tp2 2 --tp 2 --sp 1 "${ev[@]}"
run ev_d4 1 --model d4 "${ev[@]}"
# REF RANKS FLAGS...: the pipeline's evaluation against run REF's (one process, or tp = 2)
for layout in "ev1 2 --pp 2" "ev_tp2 4 --pp 2 --tp 2 --sp 1" "ev_d4 2 --model d4 --pp 2 --pp-schedule interleaved --vpp 2"; do
    set -- $layout
    run "pp_$1" "${@:2}" "${ev[@]}" || continue
    a=$(evals "$tmp/$1" 2>/dev/null); b=$(evals "$tmp/pp_$1" 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok - ${*:3}: --hellaswag, --val-tokens and a sample of the initial model are $([ "$1" = ev_tp2 ] && echo "tp=2" || echo "one process")'s, bit for bit" ||
        { echo "not ok - ${*:3}: evaluation or sample differ"; echo "#   without pp: $a"; echo "#   pipeline:   $b"; }
done
run ref_bf16 1 --precision bf16
run pp2_bf16 2 --pp 2 --precision bf16 && close_losses "$tmp/ref_bf16.jsonl" "$tmp/pp2_bf16.jsonl" "bf16 pp=2" 2e-2

# --- resume: dp = 2 × pp = 2 ZeRO-1 (1f1b), 6 straight steps against 3, resume, 3: bit for bit
# (a state file per stage, tp and dp rank)
rs=(--pp 2 --zero 1 --total-batch-tokens $((M * 8 * T)) --steps 6 --shuffle 1 --checkpoint-every 3)
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/ra" --log-file "$tmp/ra.jsonl" --save-model "$tmp/ra.bin" >"$tmp/ra.txt" 2>&1
mkdir -p "$tmp/rb" "$tmp/rc"
for d in rb rc; do cp -r "$tmp/ra/step_00000003" "$tmp/$d/" 2>/dev/null; done
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/rb" --resume --log-file "$tmp/rb.jsonl" --save-model "$tmp/rb.bin" >"$tmp/rb.txt" 2>&1
keep='import json, sys
for l in open(sys.argv[1]): d = json.loads(l); print(repr(d["loss"]), repr(d["grad_norm"]))'
if [ "$(wc -l <"$tmp/rb.jsonl" 2>/dev/null)" = 3 ] && ls "$tmp/ra/step_00000003" | grep -q "state_pp001_tp000_rank00001.bin" &&
   cmp -s <($PY -c "$keep" "$tmp/ra.jsonl" | tail -3) <($PY -c "$keep" "$tmp/rb.jsonl") && cmp -s "$tmp/ra.bin" "$tmp/rb.bin"; then
    echo "ok - dp=2 x pp=2 zero=1: resuming at step 3 continues bit for bit (losses, norms, final weights; a state file per stage and dp rank)"
else
    echo "not ok - dp=2 x pp=2 zero=1: resume differs"; tail -2 "$tmp/rb.txt" | sed 's/^/#   /'
fi
# the same checkpoint with --pp 1 (dp = 2): each stage's AdamW state found through the model
# file's order (checkpoint.h); steps 4-6 as the straight run's, every tensor's change alike
mpi 2 "${common[@]}" "${rs[@]}" --pp 1 --output-dir "$tmp/rc" --resume --log-file "$tmp/rc.jsonl" --save-model "$tmp/rc.bin" >"$tmp/rc.txt" 2>&1
tail -3 "$tmp/ra.jsonl" >"$tmp/ra_tail.jsonl"
close_losses "$tmp/ra_tail.jsonl" "$tmp/rc.jsonl" "the dp=2 x pp=2 checkpoint resumed with --pp 1, steps 4-6" 1e-5 | sed 's/of one process/of the straight run/'
$PY test/compare_models.py --updates "$tmp/ra/step_00000003/model.bin" "$tmp/ra.bin" "$tmp/rc.bin" 1e-4 |
    sed "s/ - / - the dp=2 x pp=2 checkpoint resumed with --pp 1: steps 4-6 as the straight run's: /"
# interleaved (d4, pp = 2, vpp = 2): 4 straight steps against 2, resume, 2
ri=(--model d4 --pp 2 --pp-schedule interleaved --vpp 2 --steps 4 --shuffle 1 --checkpoint-every 2)
mpi 2 "${common[@]}" "${ri[@]}" --output-dir "$tmp/ia" --log-file "$tmp/ia.jsonl" --save-model "$tmp/ia.bin" >"$tmp/ia.txt" 2>&1
mkdir -p "$tmp/ib" "$tmp/ic"
for d in ib ic; do cp -r "$tmp/ia/step_00000002" "$tmp/$d/" 2>/dev/null; done
mpi 2 "${common[@]}" "${ri[@]}" --output-dir "$tmp/ib" --resume --log-file "$tmp/ib.jsonl" --save-model "$tmp/ib.bin" >"$tmp/ib.txt" 2>&1
if [ "$(wc -l <"$tmp/ib.jsonl" 2>/dev/null)" = 2 ] &&
   cmp -s <($PY -c "$keep" "$tmp/ia.jsonl" | tail -2) <($PY -c "$keep" "$tmp/ib.jsonl") && cmp -s "$tmp/ia.bin" "$tmp/ib.bin"; then
    echo "ok - pp=2 interleaved: resuming at step 2 continues bit for bit (losses, norms, final weights)"
else
    echo "not ok - pp=2 interleaved: resume differs"; tail -2 "$tmp/ib.txt" | sed 's/^/#   /'
fi
# the interleaved checkpoint (pp = 2, vpp = 2: blocks 0, 2 and 1, 3) with 1f1b over pp = 4 (a block
# a stage) and, tensor parallel, tp = 2 in one pipeline: the run goes on as the straight one
mpi 4 "${common[@]}" "${ri[@]}" --pp 4 --pp-schedule 1f1b --vpp 1 --output-dir "$tmp/ic" --resume --log-file "$tmp/ic.jsonl" \
    --save-model "$tmp/ic.bin" >"$tmp/ic.txt" 2>&1
mkdir -p "$tmp/id" && cp -r "$tmp/ia/step_00000002" "$tmp/id/"
mpi 2 "${common[@]}" "${ri[@]}" --pp 1 --pp-schedule 1f1b --vpp 1 --tp 2 --output-dir "$tmp/id" --resume --log-file "$tmp/id.jsonl" \
    --save-model "$tmp/id.bin" >"$tmp/id.txt" 2>&1
tail -2 "$tmp/ia.jsonl" >"$tmp/ia_tail.jsonl"
for r in "ic pp=4 1f1b" "id tp=2"; do
    read -r name what <<<"$r"
    close_losses "$tmp/ia_tail.jsonl" "$tmp/$name.jsonl" "the pp=2 interleaved checkpoint resumed with $what, steps 3-4" 1e-5 | sed 's/of one process/of the straight run/'
    $PY test/compare_models.py --updates "$tmp/ia/step_00000002/model.bin" "$tmp/ia.bin" "$tmp/$name.bin" 1e-4 |
        sed "s/ - / - the pp=2 interleaved checkpoint resumed with $what: steps 3-4 as the straight run's: /"
done
# fp8 with delayed scaling (fp8.cuh) on the interleaved schedule: each stage keeps the amax history
# of its chunks' blocks (blocks 0 and 2 on stage 0: the state's places follow the blocks a rank
# holds, not their numbers) in a file of its own; a micro-batch's quantizations, in whatever
# order the schedule runs them, max into the step's amaxes. Against one fp8 process with delayed
# scaling: bf16's bound, 2e-2; resumed at step 2: bit for bit
d8=(--precision fp8 --fp8-scaling delayed --fp8-amax-history 2)
run ref_d8 1 --model d4 --steps 4 --shuffle 1 "${d8[@]}"
mpi 2 "${common[@]}" "${ri[@]}" "${d8[@]}" --output-dir "$tmp/ja" --log-file "$tmp/ja.jsonl" --save-model "$tmp/ja.bin" >"$tmp/ja.txt" 2>&1
close_losses "$tmp/ref_d8.jsonl" "$tmp/ja.jsonl" "fp8 delayed pp=2 interleaved" 2e-2
mkdir -p "$tmp/jb" && cp -r "$tmp/ja/step_00000002" "$tmp/jb/" 2>/dev/null
mpi 2 "${common[@]}" "${ri[@]}" "${d8[@]}" --output-dir "$tmp/jb" --resume --log-file "$tmp/jb.jsonl" --save-model "$tmp/jb.bin" >"$tmp/jb.txt" 2>&1
if [ "$(wc -l <"$tmp/jb.jsonl" 2>/dev/null)" = 2 ] && [ -s "$tmp/ja/step_00000002/fp8_history_pp001_tp000.bin" ] &&
   cmp -s <($PY -c "$keep" "$tmp/ja.jsonl" | tail -2) <($PY -c "$keep" "$tmp/jb.jsonl") && cmp -s "$tmp/ja.bin" "$tmp/jb.bin"; then
    echo "ok - fp8 delayed pp=2 interleaved: resuming at step 2 continues bit for bit (an amax history file per stage)"
else
    echo "not ok - fp8 delayed pp=2 interleaved: resume differs"; tail -2 "$tmp/jb.txt" | sed 's/^/#   /'
fi
# the same checkpoint in one process: the amax history is the stages' (their blocks' slots), so it
# starts anew, and says so; the run goes on within fp8's bound of the straight one
mkdir -p "$tmp/jc" && cp -r "$tmp/ja/step_00000002" "$tmp/jc/" 2>/dev/null
mpi 1 "${common[@]}" "${ri[@]}" "${d8[@]}" --pp 1 --pp-schedule 1f1b --vpp 1 --output-dir "$tmp/jc" --resume --log-file "$tmp/jc.jsonl" >"$tmp/jc.txt" 2>&1
tail -2 "$tmp/ja.jsonl" >"$tmp/ja_tail.jsonl"
if grep -q "amax history is per tp rank and stage of its layout (tp=1 pp=2 vpp=2), not this one's: it starts anew" "$tmp/jc.txt"; then
    close_losses "$tmp/ja_tail.jsonl" "$tmp/jc.jsonl" "fp8 delayed pp=2 interleaved resumed in one process (a new amax history)" 2e-2 |
        sed 's/of one process/of the straight run/'
else
    echo "not ok - fp8 delayed resumed in another layout: no line saying the amax history starts anew"; tail -2 "$tmp/jc.txt" | sed 's/^/#   /'
fi

# --- errors: one line naming the flag, exit 2
check_error "--pp 3 on 2 blocks" 3 "--pp 3: more stages than the model's 2 blocks" --pp 3
check_error "interleaved without --vpp" 2 "--pp-schedule interleaved: needs --vpp >= 2" --pp 2 --pp-schedule interleaved
check_error "--vpp without interleaved" 2 "--vpp 2: chunks of blocks are for the interleaved pipeline schedule" --pp 2 --vpp 2
check_error "--pp 2 --vpp 2 on 2 blocks" 2 "--pp 2 --vpp 2: 4 virtual stages, more than the model's 2 blocks" \
    --pp 2 --pp-schedule interleaved --vpp 2
check_error "interleaved, micro-batches not a multiple of pp" 2 "the 3 micro-batches a step .* must be a multiple of --pp 2" \
    --model d4 --pp 2 --pp-schedule interleaved --vpp 2 --total-batch-tokens $((3 * B * T))
check_error "--batch-size auto, interleaved, a step not a multiple of pp sequences" 2 \
    "--batch-size auto --pp-schedule interleaved: --total-batch-tokens $((3 * T)) is not a multiple of seq-len" \
    --model d4 --pp 2 --pp-schedule interleaved --vpp 2 --batch-size auto --total-batch-tokens $((3 * T))
# --batch-size auto with --pp on the host (CPU ranks; room unknown or ample): the largest batch
# size that splits the step, and for interleaved one that leaves m a multiple of pp (the step's 6
# sequences over pp = 2: B = 6 would leave m = 1, so B = 3, m = 2)
run auto_cpu 2 --pp 2 --batch-size auto --total-batch-tokens $((16 * T)) --steps 1 &&
    grep -q "^data: .* B=16 T=$T dp=1, 1 micro-batch(es)" "$tmp/auto_cpu.txt" && r=ok || r="not ok"
echo "$r - --batch-size auto --pp 2 (1f1b): the step's 16 sequences in one micro-batch"
run auto_il 2 --model d4 --pp 2 --pp-schedule interleaved --vpp 2 --batch-size auto --total-batch-tokens $((6 * T)) --steps 1 &&
    grep -q "^data: .* B=3 T=$T dp=1, 2 micro-batch(es)" "$tmp/auto_il.txt" && r=ok || r="not ok"
echo "$r - --batch-size auto --pp 2 interleaved, a step of 6 sequences: B=3, 2 micro-batches (a multiple of pp)"
