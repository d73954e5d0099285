#!/usr/bin/env bash
# test_cp — context parallelism (llmc/context_parallel.h) on CPU ranks under mpirun, against one
# process with the same global batch (GPT d2: 2 blocks, C = 128, 2 heads; the shipped Bible folded
# to 250 tokens, test/small_vocab.py, so that the blocks make the runs' cost; the evaluation and
# sampling part in GPT-2's vocabulary). Parts: equivalence (cp = 2 contiguous and zigzag, cp = 4,
# with dp, tp + sp, pp, a Llama: losses 1e-5, every tensor's change 1e-4), memory and the ring's
# bytes against the formulas to the byte, recompute bit for bit, evaluation and samples, bf16 and
# fp8, resume, bad layouts. What each checks: docs/verification.md ("test/test_cp.sh").
# usage: [DEVICE=cuda] [COMM=mpi|nccl] [CP_QUICK=1] test/test_cp.sh [TRAIN_GPT]
# CP_QUICK=1 runs cp = 2 zigzag and dp = 2 × cp = 2 ZeRO-3 against one process, 3 steps, and the
# bf16 cp = 2 zigzag part: what the suite runs on the CPU SIMT emulator (build/train_gpt_simt,
# DEVICE=cuda), where the ring runs the CUDA block kernels (fp32: warp-per-row; bf16: tensor
# cores) and comm.h's GPU path (NCCL's, emulated over MPI, with COMM=nccl).
set -u
cd "$(dirname "$0")/.."
BIN=${1:-./train_gpt}
PY=${PYTHON:-/usr/bin/python3}
TEST_NAME=test_cp; source test/mpi_setup.sh  # $tmp, mpi N ARGS..., run, alike, ...

C=128; L=2; NH=2; T=32; B=4; V=250
$PY test/small_vocab.py build/data $V || { echo "not ok - test_cp: test/small_vocab.py could not fold the Bible to $V tokens"; exit 1; }
# fp32 unless a part says bf16; AdamW's ε 1e-4 for the weight comparison (test_tp.sh says why)
common=(--device "${DEVICE:-cpu}" --precision fp32 --model d2 --vocab-size $V --train-data "build/data/kjv${V}_train_*.bin" --seq-len $T --lr 3e-3 --warmup-steps 2 --weight-decay 0.1
        --eps 1e-4 --seed 7 --val-data "" --comm-stats --steps 5 --batch-size $B)
[ -n "${COMM:-}" ] && common+=(--comm "$COMM")
[ -n "${CP_QUICK:-}" ] && common+=(--steps 3)

"$BIN" "${common[@]}" --steps 0 --save-model "$tmp/init.bin" >/dev/null 2>&1

# --- equivalence: one process against the cp ranks, the same B sequences of T a micro-batch
run ref 1
run ref_b8 1 --batch-size 8  # (dp = 2 × B = 4)
if [ -n "${CP_QUICK:-}" ]; then
    run cp2_zigzag 2 --cp 2 --cp-layout zigzag && alike ref cp2_zigzag init "cp=2 zigzag"
    run dp2cp2_z3 4 --cp 2 --cp-layout zigzag --zero 3 && alike ref_b8 dp2cp2_z3 init "dp=2 x cp=2 zigzag zero=3"
    # bf16 (head size 64): on the emulated GPU the ring's blocks run on the tensor-core kernels
    run ref_bf16 1 --precision bf16
    run cp2_bf16 2 --cp 2 --cp-layout zigzag --precision bf16 && close_losses "$tmp/ref_bf16.jsonl" "$tmp/cp2_bf16.jsonl" "bf16 cp=2 zigzag" 2e-2
    exit 0
fi
for layout in contiguous zigzag; do
    run "cp2_$layout" 2 --cp 2 --cp-layout $layout && alike ref "cp2_$layout" init "cp=2 $layout"
done
run cp4_zigzag 4 --cp 4 --cp-layout zigzag && alike ref cp4_zigzag init "cp=4 zigzag (chunks of 4 positions)"
for z in 1 3; do
    run "dp2cp2_z$z" 4 --cp 2 --cp-layout zigzag --zero $z && alike ref_b8 "dp2cp2_z$z" init "dp=2 x cp=2 zigzag zero=$z"
done
run tp2cp2 4 --tp 2 --sp 1 --cp 2 --cp-layout zigzag && alike ref tp2cp2 init "tp=2 --sp 1 x cp=2 zigzag"
run ref_m2 1 --total-batch-tokens $((2 * B * T))
run pp2cp2 4 --pp 2 --cp 2 --total-batch-tokens $((2 * B * T)) && alike ref_m2 pp2cp2 init "pp=2 x cp=2 contiguous, 2 micro-batches"
# the interleaved pipeline (d4: 2 chunks a stage, each its own ring buffers; the first chunk's wpe rows)
"$BIN" "${common[@]}" --model d4 --steps 0 --save-model "$tmp/init_d4.bin" >/dev/null 2>&1
run ref_d4 1 --model d4 --steps 3 --total-batch-tokens $((2 * B * T))
run il_cp2 4 --model d4 --steps 3 --pp 2 --pp-schedule interleaved --vpp 2 --cp 2 --cp-layout zigzag --total-batch-tokens $((2 * B * T)) &&
    alike ref_d4 il_cp2 init_d4 "d4, pp=2 interleaved (vpp=2) x cp=2 zigzag"
# a Llama (llama:d4): RoPE turns each rank's q, k by their global positions (zigzag: not
# contiguous), and the ring carries each position's NKV key/value heads, not one a query head
# (grouped-query attention: 2·NKV·hs numbers a position); with
# pp = 2, the stages hand on RMSNorm's stream and no wpe
"$BIN" "${common[@]}" --model llama:d4 --steps 0 --save-model "$tmp/init_llama.bin" >/dev/null 2>&1
run ref_llama 1 --model llama:d4 --steps 3 --total-batch-tokens $((2 * B * T))
run llama_cp2 2 --model llama:d4 --steps 3 --cp 2 --cp-layout zigzag --total-batch-tokens $((2 * B * T)) &&
    alike ref_llama llama_cp2 init_llama "llama:d4, cp=2 zigzag"
run llama_pp2cp2 4 --model llama:d4 --steps 3 --pp 2 --cp 2 --cp-layout zigzag --total-batch-tokens $((2 * B * T)) &&
    alike ref_llama llama_pp2cp2 init_llama "llama:d4, pp=2 x cp=2 zigzag"

# --- memory and volume against the formulas in context_parallel.h's header
run ref_half 1 --seq-len $((T / 2)) --steps 0  # one process's activations at T/cp
$PY - "$tmp" $C $L $NH $T $B <<'PY'
import json, re, sys
tmp = sys.argv[1]
C, L, NH, T, B = map(int, sys.argv[2:])
s, c, N = 4, 2, B * T // 2
def acts(name):
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"memory rank (\d+): .* activations (\d+) B", open(f"{tmp}/{name}.txt").read())}
ring = 2 * N * 2 * C * s + N * 3 * C * 4 + 3 * N * 2 * C * 4 + N * NH * 4 + (T // c) * C * s
half, got = acts("ref_half"), acts("cp2_zigzag")
want = half.get(0, -1) + ring
ok = got == {0: want, 1: want}
print(("ok" if ok else "not ok") + f" - cp=2: each rank's activations are one process's at T/2 ({half.get(0)}) plus the ring's "
      f"{ring} bytes (got {got})")
want = L * (c - 1) * N * 2 * C * (2 * s + 4)  # forward k, v; backward k, v and fp32 dk, dv
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/cp2_zigzag.jsonl")]
ok = len(rows) == 5 and all(r.get("cp_send_recv") == want for r in rows)
print(("ok" if ok else "not ok") + f" - cp=2: the ring sends L*(c-1)*N*2C*(2s+4) = {want} bytes a step (got {rows[-1] if rows else None})")
# a Llama's ring carries its NKV key/value heads, KV = NKV·hs numbers each of k and v a position
# (grouped-query attention: not one a query head); llama_cp2 runs 2 micro-batches a step
m = re.search(r"^model: L=(\d+) C=(\d+) NH=(\d+) .* NKV=(\d+)", open(f"{tmp}/llama_cp2.txt").read(), re.M)
if m:
    Ll, Cl, NHl, NKVl = map(int, m.groups())
    KV = NKVl * (Cl // NHl)
    want = 2 * Ll * (c - 1) * N * 2 * KV * (2 * s + 4)
    rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/llama_cp2.jsonl")]
    ok = NKVl < NHl and rows and all(r.get("cp_send_recv") == want for r in rows)
    print(("ok" if ok else "not ok") + f" - llama:d4 cp=2: the ring sends 2 micro-batches x L*(c-1)*N*2KV*(2s+4) = {want} bytes a step, "
          f"KV = NKV*hs = {NKVl}*{Cl // NHl} of C = {Cl} (got {rows[-1] if rows else None})")
else:
    print("not ok - llama:d4 cp=2: no model line with NKV in its output")
PY

# --- recompute (the ring's forward again in each block's backward: the same bits, more bytes)
run cp2_full 2 --cp 2 --cp-layout zigzag --recompute full && {
    same_run "$tmp/cp2_zigzag" "$tmp/cp2_full" "cp=2 zigzag --recompute full"
    $PY - "$tmp" $C $L $T $B <<'PY'
import json, sys
tmp = sys.argv[1]
C, L, T, B = map(int, sys.argv[2:])
s, c, N = 4, 2, B * T // 2
want = L * (c - 1) * N * 2 * C * (2 * s + s + 4)  # two forwards' k, v, the backward's k, v and dk, dv
rows = [json.loads(l)["comm_bytes"] for l in open(f"{tmp}/cp2_full.jsonl")]
ok = len(rows) == 5 and all(r.get("cp_send_recv") == want for r in rows)
print(("ok" if ok else "not ok") + f" - cp=2 --recompute full: the ring sends the forward's bytes twice, {want} a step (got {rows[-1] if rows else None})")
PY
}

# --- evaluation and sampling
val=(--val-data "build/data/kjv${V}_val_*.bin" --val-tokens 256)
run ref_val 1 "${val[@]}"
run cp2_val 2 --cp 2 --cp-layout zigzag "${val[@]}" && close_losses "$tmp/ref_val.jsonl" "$tmp/cp2_val.jsonl" "cp=2 validation" 1e-5 val_loss
$PY test/make_choice_set.py "$tmp/hs.bin"
ev=(--steps 0 --vocab-size 0 --train-data "data/kjv_train_*.bin" --hellaswag "$tmp/hs.bin" --val-data data/kjv_val_000000.bin
    --val-tokens 256 --sample-every 1 --gen-tokens 12)
run ev1 1 "${ev[@]}"
for layout in "cp2_contiguous 2 --cp 2" "cp2_zigzag 2 --cp 2 --cp-layout zigzag" "pp2cp2_zigzag 4 --pp 2 --cp 2 --cp-layout zigzag"; do
    set -- $layout
    run "ev_$1" "${@:2}" "${ev[@]}" || continue
    $PY - "$tmp/ev1" "$tmp/ev_$1" "${*:3}" <<'PY'
import json, sys
def get(p):
    d = json.loads(open(p + ".jsonl").readline())
    text = open(p + ".txt", errors="replace").read()
    sample = text.split("---- sample at step 0 ----", 1)[1].split("\n---", 1)[0] if "---- sample at step 0" in text else None
    return d, sample
(a, sa), (b, sb) = get(sys.argv[1]), get(sys.argv[2])
ok = (a["hellaswag_correct"], a["hellaswag_total"]) == (b["hellaswag_correct"], b["hellaswag_total"]) and \
     abs(a["hellaswag_loss"] - b["hellaswag_loss"]) <= 1e-5 and abs(a["val_loss"] - b["val_loss"]) <= 1e-5 and sa == sb and sa
print(("ok" if ok else "not ok") + f" - {sys.argv[3]} --steps 0: HellaSwag {b['hellaswag_correct']}/{b['hellaswag_total']} "
      f"(one process {a['hellaswag_correct']}/{a['hellaswag_total']}), its loss and the validation loss within 1e-5, the same sample")
PY
done
run ref_bf16 1 --precision bf16
run cp2_bf16 2 --cp 2 --cp-layout zigzag --precision bf16 && close_losses "$tmp/ref_bf16.jsonl" "$tmp/cp2_bf16.jsonl" "bf16 cp=2 zigzag" 2e-2
# fp8 with delayed scaling: the cp ranks hold parts of the same sequences and the same weights, and
# take the max of their amaxes (the dp x cp group's), so one history: bf16's bound against one process
run ref_fp8d 1 --precision fp8 --fp8-scaling delayed
run cp2_fp8d 2 --cp 2 --cp-layout zigzag --precision fp8 --fp8-scaling delayed &&
    close_losses "$tmp/ref_fp8d.jsonl" "$tmp/cp2_fp8d.jsonl" "fp8 delayed scaling cp=2 zigzag" 2e-2

# --- resume: dp = 2 × cp = 2 ZeRO-1, 6 straight steps against 3, resume, 3: bit for bit
rs=(--cp 2 --cp-layout zigzag --zero 1 --batch-size 4 --steps 6 --shuffle 1 --checkpoint-every 3)
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/ra" --log-file "$tmp/ra.jsonl" --save-model "$tmp/ra.bin" >"$tmp/ra.txt" 2>&1
mkdir -p "$tmp/rb"
cp -r "$tmp/ra/step_00000003" "$tmp/rb/" 2>/dev/null
mpi 4 "${common[@]}" "${rs[@]}" --output-dir "$tmp/rb" --resume --log-file "$tmp/rb.jsonl" --save-model "$tmp/rb.bin" >"$tmp/rb.txt" 2>&1
keep='import json, sys
for l in open(sys.argv[1]): d = json.loads(l); print(repr(d["loss"]), repr(d["grad_norm"]))'
if [ "$(wc -l <"$tmp/rb.jsonl" 2>/dev/null)" = 3 ] && cmp -s <($PY -c "$keep" "$tmp/ra.jsonl" | tail -3) <($PY -c "$keep" "$tmp/rb.jsonl") &&
   cmp -s "$tmp/ra.bin" "$tmp/rb.bin"; then
    echo "ok - dp=2 x cp=2 zero=1: resuming at step 3 continues bit for bit (losses, norms, final weights)"
else
    echo "not ok - dp=2 x cp=2 zero=1: resume differs"; tail -2 "$tmp/rb.txt" | sed 's/^/#   /'
fi

# the same checkpoint resumed without context parallelism (dp = 2, the same sequences a step):
# the AdamW shards of 4 ranks resharded to 2, the run goes on (1e-5: attention no longer merged)
mkdir -p "$tmp/rd"
cp -r "$tmp/ra/step_00000003" "$tmp/rd/" 2>/dev/null
mpi 2 "${common[@]}" --zero 1 --batch-size 4 --steps 6 --shuffle 1 --output-dir "$tmp/rd" --resume --log-file "$tmp/rd.jsonl" >"$tmp/rd.txt" 2>&1
tail -3 "$tmp/ra.jsonl" > "$tmp/ra_tail.jsonl"
close_losses "$tmp/ra_tail.jsonl" "$tmp/rd.jsonl" "the dp=2 x cp=2 checkpoint resumed with cp=1, steps 4-6" 1e-5 | sed 's/of one process/of the straight run/'

# --profile: the ring's sends get rows of their own
run cp2_profile 2 --cp 2 --steps 2 --profile 1 &&
    { grep -q "comm: cp ring send k, v" "$tmp/cp2_profile.txt" && grep -q "comm: cp ring send dk, dv home" "$tmp/cp2_profile.txt" &&
          echo "ok - cp=2 --profile: rows for the ring's k, v and its dk, dv sent home" ||
          { echo "not ok - cp=2 --profile: no ring rows"; grep "comm:" "$tmp/cp2_profile.txt" | sed 's/^/#   /'; }; }

# --- errors: one line naming the flag, exit 2
check_error "--seq-len that zigzag's 2*cp chunks do not divide" 2 "--seq-len 30 must be a multiple of 4" --cp 2 --cp-layout zigzag --seq-len 30
check_error "--seq-len that --cp does not divide" 2 "--seq-len 31 must be a multiple of 2" --cp 2 --seq-len 31
check_error "--cp that does not divide the world" 2 "not divisible by tp\*pp\*cp" --cp 3
