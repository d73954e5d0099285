#!/usr/bin/env bash
# test_tp — tensor parallelism (llmc/tensor_parallel.h) on CPU ranks under mpirun, against one
# process with the same global batch (a 2-layer GPT, C = 128, 2 heads, on the shipped Bible folded
# to 250 tokens, test/small_vocab.py, so that the blocks make the runs' cost; samples in GPT-2's).
# Parts: equivalence (tp = 2, dp = 2 × tp = 2 with ZeRO 0-3 and accumulation: losses 1e-5, every
# tensor changed alike), memory and bytes against the formulas to the byte, recompute bit for bit,
# evaluation, resume and resharding, bf16, fp8, sequence parallelism (--sp 1), tp = 4, a Llama,
# bad flags. What each checks: docs/verification.md ("test/test_tp.sh").
# usage: [DEVICE=cuda] [COMM=mpi|nccl] [TP_QUICK=1] test/test_tp.sh [TRAIN_GPT]
# TP_QUICK=1 runs the equivalence part alone, 3 steps (tp = 2, and dp = 2 × tp = 2 with ZeRO-3, each
# also with --sp 1, and --sp 1 over 93 positions): what the
# suite runs on the CPU SIMT emulator (build/train_gpt_simt, DEVICE=cuda), where the tp
# all-reduces take the GPU path of comm.h (and NCCL's, emulated over MPI, with COMM=nccl).
set -u
cd "$(dirname "$0")/.."
BIN=${1:-./train_gpt}
PY=${PYTHON:-/usr/bin/python3}
TEST_NAME=test_tp; source test/mpi_setup.sh  # $tmp, mpi N ARGS...

C=128; L=2; NH=2; V=250; Vp=256; maxT=1024; T=32
$PY test/small_vocab.py build/data $V || { echo "not ok - test_tp: test/small_vocab.py could not fold the Bible to $V tokens"; exit 1; }
# fp32 unless a part says bf16 (a later --precision wins); on cuda "auto" would mean bf16.
# AdamW's ε is 1e-4, not 1e-8: Adam divides each gradient by its own RMS, so an element whose
# gradient is at the round-off level would move by a sizeable part of lr in a direction the
# summation order decides (one such element of attprojw moved 2.8e-4 apart at ε = 1e-8); ε caps
# that amplification, so that the comparison of the weights measures the gradients' sums
common=(--device "${DEVICE:-cpu}" --precision fp32 --model d2 --vocab-size $V --train-data "build/data/kjv${V}_train_*.bin" --seq-len $T --lr 3e-3 --warmup-steps 2 --weight-decay 0.1
        --eps 1e-4 --seed 7 --val-data "" --comm-stats --steps 5)
[ -n "${COMM:-}" ] && common+=(--comm "$COMM")
[ -n "${TP_QUICK:-}" ] && common+=(--steps 3)  # (the emulator is slow; a later --steps wins)

# updates_alike REF.bin OUT.bin NAME: what the two trainings changed, tensor by tensor. Both
# compute the same sums in another order (the tp ranks' partial products), so the changes agree
# to fp32 round-off carried through 5 AdamW steps (measured ≤ 6e-6 relative, per tensor, with the
# ε above); a wrong slice, a missing all-reduce or a bias added twice changes a tensor by O(1).
updates_alike() { $PY test/compare_models.py --updates "$tmp/init.bin" "$1" "$2" 1e-4 | sed "s/ - / - $3: /"; }

"$BIN" "${common[@]}" --steps 0 --save-model "$tmp/init.bin" >/dev/null 2>&1  # the weights every run starts from
[ -z "${TP_QUICK:-}" ] && "$BIN" "${common[@]}" --model d4 --steps 0 --save-model "$tmp/init_d4.bin" >/dev/null 2>&1

# --- equivalence: one process with B = 8 (accumulation 1 and 2) against tp = 2, and dp = 2 × tp = 2
val=(--val-data "build/data/kjv${V}_val_*.bin" --val-tokens 256)
[ -n "${TP_QUICK:-}" ] && val=()
run ref_a1 1 --batch-size 8 "${val[@]}"
run ref_a2 1 --batch-size 8 --total-batch-tokens $((2 * 8 * T))
run tp2 2 --tp 2 --batch-size 8 "${val[@]}" &&
    # the gradient norm: one sum of squares over all elements, whose gradients differ by the run's
    # round-off from step 2 on (measured at most 7e-8 relative on the 250-token Bible)
    { close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2.jsonl" "tp=2" 1e-5; close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2.jsonl" "tp=2" 1e-5 grad_norm rel
      updates_alike "$tmp/ref_a1.bin" "$tmp/tp2.bin" "tp=2"; }
zeros="0 1 2 3"; [ -n "${TP_QUICK:-}" ] && zeros=3
for z in $zeros; do
    name="dp=2 x tp=2 zero=$z accum=2"
    run "dp2tp2_z$z" 4 --tp 2 --zero "$z" --batch-size 4 --total-batch-tokens $((2 * 8 * T)) || continue
    close_losses "$tmp/ref_a2.jsonl" "$tmp/dp2tp2_z$z.jsonl" "$name" 1e-5
    updates_alike "$tmp/ref_a2.bin" "$tmp/dp2tp2_z$z.bin" "$name"
done

# --- sequence parallelism (--sp 1): the LayerNorms and the residual stream on each rank's rows.
# Each row's LayerNorm is the same arithmetic wherever it runs and the gathers move bits, so the
# forward is tp = 2's bit for bit (step 1's loss); the LayerNorms' parameter gradients are sums
# over the positions in another order (each rank's rows, then over the ranks): the rest within
# the round-off bounds above
run tp2sp 2 --tp 2 --sp 1 --batch-size 8 "${val[@]}" &&
    { close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2sp.jsonl" "tp=2 --sp 1" 1e-5
      close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2sp.jsonl" "tp=2 --sp 1" 1e-5 grad_norm rel
      updates_alike "$tmp/ref_a1.bin" "$tmp/tp2sp.bin" "tp=2 --sp 1"
      a=$(head -1 "$tmp/tp2.jsonl" | $PY -c "import json,sys; print(repr(json.loads(sys.stdin.read())['loss']))" 2>/dev/null)
      b=$(head -1 "$tmp/tp2sp.jsonl" | $PY -c "import json,sys; print(repr(json.loads(sys.stdin.read())['loss']))")
      [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok - tp=2 --sp 1: step 1's loss is tp=2's bit for bit ($b)" ||
          echo "not ok - tp=2 --sp 1: step 1's loss $b, tp=2's $a"; }
for z in $zeros; do
    name="dp=2 x tp=2 --sp 1 zero=$z accum=2"
    [ "$z" = 0 ] || [ "$z" = 2 ] && continue  # (ZeRO shards the same parameters with or without --sp: 1 and 3 suffice)
    run "dp2tp2sp_z$z" 4 --tp 2 --sp 1 --zero "$z" --batch-size 4 --total-batch-tokens $((2 * 8 * T)) || continue
    close_losses "$tmp/ref_a2.jsonl" "$tmp/dp2tp2sp_z$z.jsonl" "$name" 1e-5
    updates_alike "$tmp/ref_a2.bin" "$tmp/dp2tp2sp_z$z.bin" "$name"
done
# B·T = 3·31 = 93 positions: 47 a rank, the last rank's 47th row padding (zero throughout)
run ref_odd 1 --batch-size 3 --seq-len 31 "${val[@]}"
run tp2sp_odd 2 --tp 2 --sp 1 --batch-size 3 --seq-len 31 "${val[@]}" &&
    { close_losses "$tmp/ref_odd.jsonl" "$tmp/tp2sp_odd.jsonl" "tp=2 --sp 1, 93 positions (one padding row)" 1e-5
      updates_alike "$tmp/ref_odd.bin" "$tmp/tp2sp_odd.bin" "tp=2 --sp 1, 93 positions"; }
[ -n "${TP_QUICK:-}" ] && exit 0

# --- memory and volume against the formulas in tensor_parallel.h's header
$PY - "$tmp" $C $L $NH $Vp $maxT $T <<'PY'
import json, re, sys
tmp = sys.argv[1]
C, L, NH, Vp, maxT, T = map(int, sys.argv[2:])
t, s, B = 2, 4, 8
def mem(name):  # {rank: (params, activations)} from the "memory rank" lines
    out = {}
    for l in open(f"{tmp}/{name}.txt"):
        m = re.match(r"memory rank (\d+): params (\d+) B.* activations (\d+) B", l)
        if m: out[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return out
one, two = mem("ref_a1"), mem("tp2")
psi_t = Vp * C // t + maxT * C + L * (12 * C * C // t + 7 * C // t + 6 * C) + 2 * C
ok = len(two) == 2 and all(p == s * psi_t for p, _ in two.values())
print(("ok" if ok else "not ok") + f" - tp=2: each rank holds Vp*C/t + maxT*C + L*(12C^2/t + 7C/t + 6C) + 2C = {psi_t} parameters "
      f"(one process {one[0][0] // s})")
# per position: L blocks of (3C + C + 4C + 4C)(1 - 1/t) elements (qkv, attention output, the MLP's
# two hidden buffers) and NH(1 - 1/t) lse floats, the backward's dqkv + dfch scratch (7C)(1 - 1/t)
# and Vp(1 - 1/t) logits; added: every rank's classifier stats (3 floats a position)
saved = B * T * (L * 12 * C * (t - 1) // t * s + L * NH * (t - 1) // t * 4 + 7 * C * (t - 1) // t * s + Vp * (t - 1) // t * s)
added = t * B * T * 3 * 4
ok = len(two) == 2 and all(a == one[0][1] - saved + added for _, a in two.values())
print(("ok" if ok else "not ok") + f" - tp=2: each rank's activations are one process's less (12C + NH + 7C/L + Vp/L)(1-1/t) per "
      f"block and position, plus the classifier's stats: {one[0][1]} - {saved} + {added} B")
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/tp2.jsonl")]
reduce = (4 * L + 2) * 2 * (t - 1) / t * B * T * C * s
gather = (t - 1) * B * T * 3 * 4
ok = all(r.get("tp_all_reduce") == reduce and r.get("tp_all_gather") == gather for r in rows) and len(rows) == 5
print(("ok" if ok else "not ok") + f" - tp=2: the tp group's all-reduces send (4L+2)*2(t-1)/t*B*T*C*s = {reduce:.0f} bytes a step, "
      f"its all-gathers (t-1)*B*T*12 = {gather:.0f} (got {rows[-1] if rows else None})")
# sequence parallelism: per position, the residual stream and LayerNorm outputs (4C a block: ln1,
# res2, ln2, res3; and encoded, lnf, the forward's scratch and the residual gradient) and their
# statistics (4 floats a block, 2 for lnf) are 1/t on each rank; added: the gathered buffer
# (B·T·C) and one LayerNorm's parameter gradient (2C)
sp = mem("tp2sp")
cut = B * T * (t - 1) // t * ((4 * L + 4) * C * s + (4 * L + 2) * 4)
ok = len(sp) == 2 and all(a == two[0][1] - cut + B * T * C * s + 2 * C * s for _, a in sp.values()) and \
     all(p == s * psi_t for p, _ in sp.values())
print(("ok" if ok else "not ok") + f" - tp=2 --sp 1: the same parameters; activations tp=2's less ((4L+4)C + 4L+2 floats)(1-1/t) a "
      f"position, plus the gathered buffer and a LayerNorm's gradient: {two[0][1]} - {cut} + {B * T * C * s + 2 * C * s} B "
      f"(got {sorted(a for _, a in sp.values())})")
# volume: the 4L+2 all-reduces of B·T·C become reduce-scatters (half the bytes); the all-gathers
# add 6L+3 of B·T·C: per block ln1 and ln2 forward, and backward the residual gradient twice and
# ln1 and ln2 again; lnf forward and backward, and the encoder's gradient; and every LayerNorm's
# parameter gradient (2C) is all-reduced: 2L+1 of them
half = (t - 1) / t * B * T * C * s
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/tp2sp.jsonl")]
want = {"tp_reduce_scatter": (4 * L + 2) * half, "tp_all_gather": gather + (6 * L + 3) * half,
        "tp_all_reduce": (2 * L + 1) * 2 * (t - 1) / t * 2 * C * s}
ok = len(rows) == 5 and all(all(r.get(k) == v for k, v in want.items()) for r in rows)
print(("ok" if ok else "not ok") + f" - tp=2 --sp 1: reduce-scatters (4L+2)*(t-1)/t*B*T*C*s, all-gathers tp=2's + (6L+3)*(t-1)/t*B*T*C*s, "
      f"all-reduces (2L+1)*2(t-1)/t*2C*s: {want} (got {rows[-1] if rows else None})")
PY
close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2.jsonl" "tp=2 validation" 1e-5 val_loss
close_losses "$tmp/ref_a1.jsonl" "$tmp/tp2sp.jsonl" "tp=2 --sp 1 validation" 1e-5 val_loss
close_losses "$tmp/ref_odd.jsonl" "$tmp/tp2sp_odd.jsonl" "tp=2 --sp 1 validation, 31-token sequences" 1e-5 val_loss

# --- recompute: the same run bit for bit; full reruns the attention projection's all-reduce
for r in selective full; do
    run "tp2_$r" 2 --tp 2 --batch-size 8 "${val[@]}" --recompute $r && same_run "$tmp/tp2" "$tmp/tp2_$r" "tp=2 --recompute $r"
done
$PY - "$tmp/tp2.jsonl" "$tmp/tp2_full.jsonl" <<'PY'
import json, sys
L = 2  # (d2)
a, b = ([json.loads(l)["comm_bytes"].get("tp_all_reduce") for l in open(p)] for p in sys.argv[1:3])
ok = len(a) == len(b) > 0 and all(y == (5 * L + 2) * x / (4 * L + 2) for x, y in zip(a, b))
print(("ok" if ok else "not ok") + f" - tp=2 --recompute full: 5 all-reduces a block instead of 4 ({b[-1] if b else None} bytes a step)")
PY
# with --sp 1: the rerun gathers ln1 and ln2 again and reduce-scatters the attention projection
# (full: RS 5L+1, AG of B·T·C 8L+3); selective's rerun (two LayerNorms and a GELU) moves nothing
for r in selective full; do
    run "tp2sp_$r" 2 --tp 2 --sp 1 --batch-size 8 "${val[@]}" --recompute $r && same_run "$tmp/tp2sp" "$tmp/tp2sp_$r" "tp=2 --sp 1 --recompute $r"
done
$PY - "$tmp" $C $L $T <<'PY'
import json, sys
tmp, (C, L, T) = sys.argv[1], map(int, sys.argv[2:])
t, s, B = 2, 4, 8
half = (t - 1) / t * B * T * C * s
def rows(name): return [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/{name}.jsonl")]
base, sel, full = rows("tp2sp"), rows("tp2sp_selective"), rows("tp2sp_full")
ok = len(base) == len(sel) == len(full) == 5 and sel == base and all(
    f["tp_reduce_scatter"] == b["tp_reduce_scatter"] + L * half and f["tp_all_gather"] == b["tp_all_gather"] + 2 * L * half
    for b, f in zip(base, full))
print(("ok" if ok else "not ok") + f" - tp=2 --sp 1 --recompute: selective moves the same bytes, full 1 reduce-scatter and 2 all-gathers "
      f"more a block ({full[-1] if full else None})")
PY

# --- samples and --profile (in GPT-2's vocabulary: the tokenizer's)
gpt2=(--vocab-size 0 --train-data "data/kjv_train_*.bin")
run tp2_prof 2 --tp 2 --batch-size 8 --steps 2 --profile 1 --sample-every 2 --gen-tokens 8 "${gpt2[@]}" &&
if grep -q "^---- sample at step 2" "$tmp/tp2_prof.txt" && grep -q "comm: tp all-reduce" "$tmp/tp2_prof.txt"; then
    echo "ok - tp=2: samples, and --profile shows the tp all-reduces in a row of their own"
else
    echo "not ok - tp=2: no sample or no 'comm: tp all-reduce' row"; tail -5 "$tmp/tp2_prof.txt" | sed 's/^/#   /'
fi
# (sampling runs B = 1 over the prompt's length: any number of positions, padded to a multiple of tp)
run tp2sp_prof 2 --tp 2 --sp 1 --batch-size 8 --steps 2 --profile 1 --sample-every 2 --gen-tokens 8 "${gpt2[@]}" &&
if grep -q "^---- sample at step 2" "$tmp/tp2sp_prof.txt" && grep -q "comm: tp reduce-scatter" "$tmp/tp2sp_prof.txt"; then
    echo "ok - tp=2 --sp 1: samples, and --profile shows the tp reduce-scatters in a row of their own"
else
    echo "not ok - tp=2 --sp 1: no sample or no 'comm: tp reduce-scatter' row"; tail -5 "$tmp/tp2sp_prof.txt" | sed 's/^/#   /'
fi

# --- resume: 6 straight steps against 3 + resume + 3 (dp = 2 × tp = 2, ZeRO-1, shuffled)
rs=(--tp 2 --zero 1 --batch-size 2 --total-batch-tokens $((8 * T)) --steps 6 --shuffle 1 --checkpoint-every 3)
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/ra" --log-file "$tmp/ra.jsonl" --save-model "$tmp/ra.bin" >"$tmp/ra.txt" 2>&1
mkdir -p "$tmp/rb" "$tmp/rc" "$tmp/rd" "$tmp/re"
for d in rb rc rd re; do cp -r "$tmp/ra/step_00000003" "$tmp/$d/"; done
# resume_same STRAIGHT RESUMED NAME: the resumed run's 3 steps and final weights are the straight run's, bit for bit
resume_same() {
    if [ "$(wc -l <"$tmp/$2.jsonl" 2>/dev/null)" = 3 ] && ls "$tmp/$1/step_00000003" | grep -q "state_tp001_rank00001.bin" &&
       cmp -s <(tail -3 "$tmp/$1.jsonl" | $PY -c "import json,sys; [print(json.loads(l)['loss'], json.loads(l)['grad_norm']) for l in sys.stdin]") \
              <($PY -c "import json,sys; [print(json.loads(l)['loss'], json.loads(l)['grad_norm']) for l in open(sys.argv[1])]" "$tmp/$2.jsonl") &&
       cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then
        echo "ok - $3: resuming at step 3 continues bit for bit (losses, norms, final weights; a state file per tp and dp rank)"
    else
        echo "not ok - $3: resume differs"; tail -2 "$tmp/$2.txt" | sed 's/^/#   /'
    fi
}
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/rb" --resume --log-file "$tmp/rb.jsonl" --save-model "$tmp/rb.bin" >"$tmp/rb.txt" 2>&1
resume_same ra rb "dp=2 x tp=2 zero=1"
# the same with --sp 1 throughout
mpi 4 "${common[@]}" "${rs[@]}" --sp 1 --output-dir "$tmp/sa" --log-file "$tmp/sa.jsonl" --save-model "$tmp/sa.bin" >"$tmp/sa.txt" 2>&1
mkdir -p "$tmp/sb" && cp -r "$tmp/sa/step_00000003" "$tmp/sb/"
mpi 4 "${common[@]}" "${rs[@]}" --sp 1 --output-dir "$tmp/sb" --resume --log-file "$tmp/sb.jsonl" --save-model "$tmp/sb.bin" >"$tmp/sb.txt" 2>&1
resume_same sa sb "dp=2 x tp=2 --sp 1 zero=1"
# the same checkpoint on dp = 1 × tp = 2 (ZeRO-3): each element of AdamW's state from the old dp rank that held it
mpi 2 "${common[@]}" "${rs[@]}" --zero 3 --output-dir "$tmp/rc" --resume --log-file "$tmp/rc.jsonl" >"$tmp/rc.txt" 2>&1
$PY - "$tmp/ra.jsonl" "$tmp/rc.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])][3:]
try: b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
except OSError: b = []
worst = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 3 else float("inf")
print(("ok" if worst <= 1e-5 else "not ok") + f" - resharded dp=2 x tp=2 zero=1 -> dp=1 x tp=2 zero=3: the run continues (max loss diff {worst:.1e} <= 1e-5)")
PY
# and with --sp 1 (the parameters and AdamW's state are laid out as without)
mpi 4 "${common[@]}" "${rs[@]}" --sp 1 --output-dir "$tmp/re" --resume --log-file "$tmp/re.jsonl" >"$tmp/re.txt" 2>&1
tail -3 "$tmp/ra.jsonl" > "$tmp/ra_tail.jsonl"
close_losses "$tmp/ra_tail.jsonl" "$tmp/re.jsonl" "the dp=2 x tp=2 checkpoint resumed with --sp 1, steps 4-6" 1e-5 | sed 's/of one process/of the straight run/'
# and with --tp 1 (dp = 2): each element of AdamW's state found through the model file's order in
# the old tp ranks' files (checkpoint.h); the run goes on as the straight one, every tensor's
# change from the checkpoint alike (a moment read from the wrong place moves its tensor O(1) apart)
mkdir -p "$tmp/rd" && cp -r "$tmp/ra/step_00000003" "$tmp/rd/"
mpi 2 "${common[@]}" "${rs[@]}" --tp 1 --output-dir "$tmp/rd" --resume --log-file "$tmp/rd.jsonl" --save-model "$tmp/rd.bin" >"$tmp/rd.txt" 2>&1
close_losses "$tmp/ra_tail.jsonl" "$tmp/rd.jsonl" "the dp=2 x tp=2 checkpoint resumed with --tp 1, steps 4-6" 1e-5 | sed 's/of one process/of the straight run/'
$PY test/compare_models.py --updates "$tmp/ra/step_00000003/model.bin" "$tmp/ra.bin" "$tmp/rd.bin" 1e-4 |
    sed "s/ - / - the dp=2 x tp=2 checkpoint resumed with --tp 1: steps 4-6 as the straight run's: /"
# a Llama (grouped-query heads: qkv's rows in 3 unequal groups) at tp = 2 --sp 1, resumed in one process
rl=(--model llama:d4 --batch-size 4 --total-batch-tokens $((8 * T)) --steps 4 --shuffle 1 --checkpoint-every 2)
mpi 2 "${common[@]}" "${rl[@]}" --tp 2 --sp 1 --output-dir "$tmp/la" --log-file "$tmp/la.jsonl" --save-model "$tmp/la.bin" >"$tmp/la.txt" 2>&1
mkdir -p "$tmp/lb" && cp -r "$tmp/la/step_00000002" "$tmp/lb/"
mpi 1 "${common[@]}" "${rl[@]}" --output-dir "$tmp/lb" --resume --log-file "$tmp/lb.jsonl" --save-model "$tmp/lb.bin" >"$tmp/lb.txt" 2>&1
$PY test/compare_models.py --updates "$tmp/la/step_00000002/model.bin" "$tmp/la.bin" "$tmp/lb.bin" 1e-4 |
    sed "s/ - / - a llama:d4 tp=2 --sp 1 checkpoint resumed in one process: steps 3-4 as the straight run's: /"

# --- tp = 4 (d4: 4 heads, C = 256), with --sp 1: four parts of every split, 64 of the 256 positions a rank
run ref_d4 1 --model d4 --batch-size 8
run tp4sp 4 --model d4 --tp 4 --sp 1 --batch-size 8 &&
    { close_losses "$tmp/ref_d4.jsonl" "$tmp/tp4sp.jsonl" "tp=4 --sp 1 (d4)" 1e-5
      $PY test/compare_models.py --updates "$tmp/init_d4.bin" "$tmp/ref_d4.bin" "$tmp/tp4sp.bin" 1e-4 | sed "s/ - / - tp=4 --sp 1 (d4): /"; }

# --- a Llama (llama:d4: 4 query heads sharing 2 key/value heads, so qkv's rows split in 3 unequal
# groups; SwiGLU's gate and up split alike; RMSNorm with no bias, RoPE), tp = 2 with --sp 1
if [ -z "${TP_QUICK:-}" ]; then
    "$BIN" "${common[@]}" --model llama:d4 --steps 0 --save-model "$tmp/init_llama.bin" >/dev/null 2>&1
    run ref_llama 1 --model llama:d4 --batch-size 8
    run tp2sp_llama 2 --model llama:d4 --tp 2 --sp 1 --batch-size 8 && alike ref_llama tp2sp_llama init_llama "llama:d4 tp=2 --sp 1"
    untied_llama "$tmp/init_untied.bin" $V  # (lm_head vocabulary-parallel like wte)
    run ref_untied 1 --model "$tmp/init_untied.bin" --batch-size 8
    run tp2_untied 2 --model "$tmp/init_untied.bin" --tp 2 --batch-size 8 && alike ref_untied tp2_untied init_untied "llama (untied) tp=2"
fi

# --- bf16: the tp all-reduces in bf16 (one rounding per sum), the rest as one bf16 process
run ref_bf16 1 --batch-size 8 --precision bf16
run tp2_bf16 2 --tp 2 --batch-size 8 --precision bf16 &&
    close_losses "$tmp/ref_bf16.jsonl" "$tmp/tp2_bf16.jsonl" "bf16 tp=2 (bf16 activations: one rounding more per sum)" 2e-2
run tp2sp_bf16 2 --tp 2 --sp 1 --batch-size 8 --precision bf16 &&
    close_losses "$tmp/ref_bf16.jsonl" "$tmp/tp2sp_bf16.jsonl" "bf16 tp=2 --sp 1 (and the LayerNorms' gradients summed in bf16)" 2e-2
# --- fp8 (llmc/fp8.cuh): each tp rank scales its own shard of a weight and of a gradient (its
# amax, not the whole tensor's), so its FP8 codes differ from one process's: bf16's bound
run ref_fp8 1 --batch-size 8 --precision fp8
run tp2sp_fp8 2 --tp 2 --sp 1 --batch-size 8 --precision fp8 &&
    close_losses "$tmp/ref_fp8.jsonl" "$tmp/tp2sp_fp8.jsonl" "fp8 tp=2 --sp 1 (each rank's shards scaled by their own amax)" 2e-2
# delayed scaling: each tp rank keeps the amax history of its own shards
run ref_fp8d 1 --batch-size 8 --precision fp8 --fp8-scaling delayed
run tp2sp_fp8d 2 --tp 2 --sp 1 --batch-size 8 --precision fp8 --fp8-scaling delayed &&
    close_losses "$tmp/ref_fp8d.jsonl" "$tmp/tp2sp_fp8d.jsonl" "fp8 delayed scaling tp=2 --sp 1 (each rank's shards' own amax histories)" 2e-2
# the FP8 backward multiplies the xᵀ its forward kept (model.h: fp8_keeps_operands), so it gathers
# no LayerNorm output: 2 all-gathers of B·T·C a block fewer than bf16's. --recompute full keeps
# nothing and quantizes x and W again in the backward: the same run, bit for bit
run tp2sp_fp8d_full 2 --tp 2 --sp 1 --batch-size 8 --precision fp8 --fp8-scaling delayed --recompute full &&
    same_run "$tmp/tp2sp_fp8d" "$tmp/tp2sp_fp8d_full" "fp8 delayed scaling tp=2 --sp 1 --recompute full (x and W quantized again)"
$PY - "$tmp" $C $L $T <<'PY'
import json, sys
tmp, (C, L, T) = sys.argv[1], map(int, sys.argv[2:])
t, B = 2, 8
half = (t - 1) / t * B * T * C * 2  # (bf16 activations)
def rows(name): return [json.loads(l)["comm_bytes"]["tp_all_gather"] for l in open(f"{tmp}/{name}.jsonl")]
bf, f8 = rows("tp2sp_bf16"), rows("tp2sp_fp8d")
ok = len(bf) == len(f8) > 0 and all(y == x - 2 * L * half for x, y in zip(bf, f8))
print(("ok" if ok else "not ok") + f" - fp8 tp=2 --sp 1: the backward gathers no LayerNorm output ({f8[-1] if f8 else None} "
      f"all-gather bytes a step, bf16 {bf[-1] if bf else None})")
PY

# --- errors: one line naming the flag, exit 2
check_error "--tp 2 on a 1-head model" 2 "--tp 2: must divide the model's 1 attention heads" --model d1 --tp 2
check_error "--tp 2 on llama:d2 (2 query heads, 1 key/value head)" 2 "--tp 2: must divide the model's 1 key/value heads" --model llama:d2 --tp 2
check_error "--tp 2 on 3 ranks" 3 "world size 3 is not divisible by tp" --tp 2
check_error "--sp 1 without --tp" 2 "--sp 1: sequence parallelism splits the positions over the tensor-parallel ranks; it needs --tp > 1" --sp 1
