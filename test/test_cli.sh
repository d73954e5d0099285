#!/usr/bin/env bash
# test_cli — bad input fails with one clear line and the right exit code (never a crash, never
# a silent wrong run), --help is complete, model files round-trip byte for byte, checkpoints are
# laid out as documented (--keep-checkpoints keeps the newest N), the scripts/gpt2.sh recipes'
# flags run, --steps 0 only evaluates (--hellaswag), dev/data/gpt2_weights.py turns a Hugging
# Face safetensors GPT-2 into its model file byte for byte, and a micro-batch too large for the
# host's memory is refused at start with one that fits, and with the larger one --recompute full
# fits (llmc/planner.h); --vocab-size gives a preset V rows padded to a multiple of 128 (a model
# file of another V, or a resume without it, refused naming the flag); one process without a
# launcher starts no MPI daemon, and logs the steps mpirun -n 1 does.
# usage: test/test_cli.sh [TRAIN_GPT]      Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
BIN=${1:-./train_gpt}
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# a tiny model (V=97) and data that fits it, written by the independent Python helpers
$PY - "$tmp" <<'PY'
import sys, struct
sys.path.insert(0, "test")
import gpt2_torch as ref
d = sys.argv[1]
cfg = dict(maxT=32, V=97, Vp=128, L=2, NH=4, C=32)
p = ref.random_params(cfg, seed=3)
ref.write_model(f"{d}/tiny.bin", cfg, p, 3)
ref.write_model(f"{d}/tiny_bf16.bin", cfg, p, 5)
ref.write_shard(f"{d}/ok.bin", [i % 97 for i in range(5000)])
ref.write_shard(f"{d}/bigtok.bin", [(i * 331) % 50000 for i in range(5000)])  # tokens >= V=97
open(f"{d}/ok32.bin", "wb").write(struct.pack("<256i", *([20240801, 7, 5000] + [0] * 253)) +
                                  struct.pack("<5000I", *[i % 97 for i in range(5000)]))  # llm.c's uint32 shard
open(f"{d}/badmagic.bin", "wb").write(struct.pack("<256i", *([12345, 1, 10] + [0] * 253)) + bytes(20))
good = open(f"{d}/ok.bin", "rb").read()
open(f"{d}/truncated.bin", "wb").write(good[:-100])
open(f"{d}/toolong.bin", "wb").write(good + bytes(10))
m = open(f"{d}/tiny.bin", "rb").read()
open(f"{d}/model_truncated.bin", "wb").write(m[:-4])
open(f"{d}/model_badmagic.bin", "wb").write(struct.pack("<i", 7) + m[4:])
open(f"{d}/model_badversion.bin", "wb").write(m[:4] + struct.pack("<i", 4) + m[8:])
open(f"{d}/model_nan.bin", "wb").write(m[:1024] + struct.pack("<f", float("nan")) + m[1028:])  # wte[0][0]: every loss NaN
open(f"{d}/model_hugeC.bin", "wb").write(m[:24] + struct.pack("<i", 1 << 30) + m[28:1024])  # C = 2^30, 1024 bytes: its size overflowed an int
# a tiny Llama with its own classifier (header [20261124, 3, maxT, V, L, NH, C, Vp, NKV, H, theta, untied]),
# and bad headers: 3 key/value heads for 4 query heads, an untied flag of 2, a RoPE scaling of low >= high
cl = dict(arch="llama", maxT=32, V=97, Vp=128, L=2, NH=4, NKV=2, C=32, H=48, theta=10000, tied=False)
ref.write_model(f"{d}/llama.bin", cl, ref.random_params(cl, seed=4))
ml = open(f"{d}/llama.bin", "rb").read()
open(f"{d}/llama_badkv.bin", "wb").write(ml[:32] + struct.pack("<i", 3) + ml[36:])
open(f"{d}/llama_badtied.bin", "wb").write(ml[:44] + struct.pack("<i", 2) + ml[48:])
# RoPE scaling (header[12..15]: factor, low, high, original context) with low >= high
open(f"{d}/llama_badrope.bin", "wb").write(ml[:48] + struct.pack("<4i", 8, 4, 4, 8192) + ml[64:])
# the same model in Hugging Face's safetensors layout (Conv1D weights (in, out), "transformer."
# on some names, the attention mask buffers, the tied lm_head), for dev/data/gpt2_weights.py
import json
import numpy as np
hf = {"transformer.wte.weight": p["wte"][:cfg["V"]], "wpe.weight": p["wpe"], "ln_f.weight": p["lnfw"], "ln_f.bias": p["lnfb"],
      "lm_head.weight": p["wte"][:cfg["V"]]}
names = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
         "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight", "ln2b": "ln_2.bias",
         "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight", "fcprojb": "mlp.c_proj.bias"}
for l in range(cfg["L"]):
    for ours, theirs in names.items():
        hf[f"{'transformer.' if l % 2 else ''}h.{l}.{theirs}"] = p[ours][l].T if p[ours].dim() == 3 else p[ours][l]
    hf[f"h.{l}.attn.bias"] = np.tril(np.ones((cfg["maxT"], cfg["maxT"])))[None, None]
header, blob = {"__metadata__": {"format": "pt"}}, b""
for k, v in hf.items():
    a = np.ascontiguousarray(np.asarray(v, dtype="<f4"))
    header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(blob), len(blob) + a.nbytes]}
    blob += a.tobytes()
h = json.dumps(header).encode()
open(f"{d}/hf.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
# multiple-choice eval files (--hellaswag): (label, context, endings)
hs = [(1, [5, 6, 7], [[8, 9], [10], [11, 12, 13]]), (0, [20], [[21], [22, 23]]), (3, [1, 2], [[3], [4], [5], [6]])]
ref.write_eval(f"{d}/hs_ok.bin", hs)
ref.write_eval(f"{d}/hs_bigtok.bin", hs[:1] + [(0, [20], [[21], [500]])])
ref.write_eval(f"{d}/hs_badlabel.bin", hs[:2] + [(4, [1, 2], [[3], [4], [5], [6]])])
ref.write_eval(f"{d}/hs_long.bin", hs + [(0, list(range(12)), [[1] * 6, [2]])])  # a row of 18 tokens: 17 positions
# a vocabulary of a million (Vp = 1000064) on C = 8: 32 MB of weights, but its logits take 4 MB a
# position, so 1000 x 1024 positions need ~4 TB of activations, more than any host has
import torch
wide = dict(maxT=1024, V=1000000, Vp=1000064, L=1, NH=1, C=8)
ref.write_model(f"{d}/wide_vocab.bin", wide, ref.random_params(wide, seed=5, dtype=torch.float32))
e = open(f"{d}/hs_ok.bin", "rb").read()
open(f"{d}/hs_truncated.bin", "wb").write(e[:-6])
open(f"{d}/hs_badmagic.bin", "wb").write(struct.pack("<i", 20240520) + e[4:])
PY

base=(--device cpu --model "$tmp/tiny.bin" --train-data "$tmp/ok.bin" --val-data "" --batch-size 2 --seq-len 16)

# expect_fail NAME EXIT_CODE PHRASE ARGS... : exits with EXIT_CODE, one stderr line containing PHRASE
expect_fail() {
    local name=$1 code=$2 phrase=$3; shift 3
    "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" = "$code" ] && [ "$lines" = 1 ] && grep -qF -- "$phrase" "$tmp/err"; then
        echo "ok - rejects $name: $(cat "$tmp/err")"
    else
        echo "not ok - rejects $name: exit $rc (want $code), $lines stderr line(s) (want 1, with '$phrase'):"
        sed 's/^/#   /' "$tmp/err" | head -5
    fi
}

expect_fail "unknown flag" 2 "unknown flag '--bogus'" "${base[@]}" --bogus 1
expect_fail "flag without value" 2 "--steps needs a value" "${base[@]}" --steps
expect_fail "non-integer value" 2 "--batch-size: expected an integer in [1, 1048576] or 'auto', got 'abc'" "${base[@]}" --batch-size abc
expect_fail "--batch-size auto without a step size" 2 "--batch-size auto: needs --total-batch-tokens" "${base[@]}" --batch-size auto
expect_fail "--batch-size auto with a step of partial sequences" 2 "--batch-size auto: --total-batch-tokens 100 is not a multiple of seq-len*dp = 16" \
    "${base[@]}" --batch-size auto --total-batch-tokens 100
expect_fail "out-of-range value" 2 "--zero: expected an integer in [0, 3]" "${base[@]}" --zero 7
expect_fail "bad choice" 2 "--lr-schedule: expected one of cosine | linear | constant | wsd" "${base[@]}" --lr-schedule exp
expect_fail "bad --flash-rows" 2 "--flash-rows: expected one of auto | 16 | 32" "${base[@]}" --flash-rows 24
expect_fail "--flash-forward-pingpong without a producer" 2 "--flash-forward-pingpong 1 needs --flash-forward-producer 2 or 3" \
    "${base[@]}" --flash-forward-pingpong 1
expect_fail "--flash-forward-persistent without a producer" 2 "--flash-forward-persistent 1 needs --flash-forward-producer 2 or 3" \
    "${base[@]}" --flash-forward-persistent 1
expect_fail "--flash-forward-producer auto with persistent blocks" 2 "--flash-forward-persistent 1 with --flash-forward-producer auto: auto times the persistent forward itself; drop one" \
    "${base[@]}" --flash-forward-producer auto --flash-forward-persistent 1
expect_fail "--flash-forward-keys 128 with a producer of 3 slots" 2 "--flash-forward-keys 128 needs --flash-forward-producer 0 or 2" \
    "${base[@]}" --flash-forward-producer 3 --flash-forward-keys 128
expect_fail "--flash-forward-groups 3 without a producer" 2 "--flash-forward-groups 3 needs --flash-forward-producer 2 or 3" \
    "${base[@]}" --flash-forward-groups 3
expect_fail "--flash-forward-groups 3 with ping-pong" 2 "--flash-forward-groups 3 needs --flash-forward-producer 2 or 3, key tiles of 64 and no ping-pong" \
    "${base[@]}" --flash-forward-producer 2 --flash-forward-pingpong 1 --flash-forward-groups 3
expect_fail "--flash-backward-producer with the split backward" 2 "--flash-backward-producer 3 needs --flash-backward fused" \
    "${base[@]}" --flash-backward split --flash-backward-producer 3
expect_fail "bad --flash-backward-producer" 2 "--flash-backward-producer: expected one of 0 | 3 | 4 | auto" "${base[@]}" --flash-backward-producer 2
expect_fail "--flash-forward-producer auto with ping-pong" 2 "--flash-forward-pingpong 1 with --flash-forward-producer auto: auto times the forward with and without ping-pong itself; drop one" \
    "${base[@]}" --flash-forward-producer auto --flash-forward-pingpong 1
expect_fail "--flash-forward-producer auto with 3 warpgroups" 2 "--flash-forward-groups 3 with --flash-forward-producer auto: auto times 3 computing warpgroups itself; drop one" \
    "${base[@]}" --flash-forward-producer auto --flash-forward-groups 3
expect_fail "--flash-backward-producer auto with the split backward" 2 "--flash-backward-producer auto needs --flash-backward fused" \
    "${base[@]}" --flash-backward split --flash-backward-producer auto
expect_fail "seq-len above the model's maxT" 2 "--seq-len 64 exceeds" "${base[@]}" --seq-len 64
expect_fail "batch tokens not divisible" 2 "--total-batch-tokens 100 is not a multiple" "${base[@]}" --total-batch-tokens 100
expect_fail "--device cuda without CUDA" 2 "--device cuda" "${base[@]}" --device cuda
expect_fail "world size not divisible by tp" 2 "world size 1 is not divisible by tp*pp*cp = 2*1*1 = 2" "${base[@]}" --tp 2
expect_fail "--sp 1 without --tp" 2 "--sp 1: sequence parallelism splits the positions over the tensor-parallel ranks; it needs --tp > 1" "${base[@]}" --sp 1
expect_fail "--vpp without a pipeline" 2 "--vpp 2: chunks of blocks are for the interleaved pipeline schedule" "${base[@]}" --vpp 2
expect_fail "--loss-scale not a power of two" 2 "--loss-scale 1000: must be a power of two" "${base[@]}" --precision fp16 --loss-scale 1000
expect_fail "--loss-scale below 1" 2 "--loss-scale: expected a number in [1, 1e+30], got '0.5'" "${base[@]}" --precision fp16 --loss-scale 0.5
expect_fail "--fp8-scaling without fp8" 2 "--fp8-scaling and --fp8-amax-history are for --precision fp8 (got --precision bf16)" \
    "${base[@]}" --precision bf16 --fp8-scaling delayed
expect_fail "--fp8-scaling of another kind" 2 "--fp8-scaling: expected one of current | delayed, got 'late'" "${base[@]}" --precision fp8 --fp8-scaling late
expect_fail "--fp8-amax-history 0" 2 "--fp8-amax-history: expected an integer in [1, 65536], got '0'" \
    "${base[@]}" --precision fp8 --fp8-scaling delayed --fp8-amax-history 0
expect_fail "--fp8-amax-history without delayed scaling" 2 "--fp8-amax-history: needs --fp8-scaling delayed" \
    "${base[@]}" --precision fp8 --fp8-amax-history 4
expect_fail "--fp8-fast-accum without fp8" 2 "--fp8-fast-accum is for --precision fp8 (got --precision bf16)" \
    "${base[@]}" --precision bf16 --fp8-fast-accum forward
expect_fail "--bias-grad of another kind" 2 "--bias-grad: expected one of kernel | epilogue, got 'atomic'" "${base[@]}" --bias-grad atomic
expect_fail "--matmul-wgmma of another layout" 2 "--matmul-wgmma: expected one of 0 | 1 | 2 | 3 | 4 | 5 | 6 | auto, got '7'" "${base[@]}" --matmul-wgmma 7
expect_fail "--classifier-stats of another kind" 2 "--classifier-stats: expected one of kernel | epilogue, got 'gemm'" "${base[@]}" --classifier-stats gemm
expect_fail "--matmul-wgmma-products without our GEMM" 2 "--matmul-wgmma-products gelu needs --matmul-wgmma 1 to 6 or auto" "${base[@]}" --matmul-wgmma-products gelu

# Divergence is never silent. --eps 0 is refused (AdamW's 0/0 for a parameter whose gradient is 0).
# A run whose every update is skipped (--lr far too high: its norms are soon not finite, and
# --skip-norm-z skips those) stops after --max-skipped-steps of them in a row, exit 3, one line.
# A loss that climbs far above the first step's is named in a warning. Nothing non-finite is saved.
# (A model with a NaN weight stands for a run gone non-finite: every loss is NaN.)
nan=(--device cpu --model "$tmp/model_nan.bin" --train-data "$tmp/ok.bin" --val-data "" --batch-size 2 --seq-len 16)
expect_fail "--eps 0" 2 "--eps 0: must be above 0" "${base[@]}" --eps 0
expect_fail "a non-finite loss" 3 "step 1: the loss is nan (diverged)" "${nan[@]}" --steps 3
expect_fail "a run that skips every update" 3 "step 5: the last 5 steps' updates were all skipped" "${nan[@]}" --skip-loss-z 3 \
    --max-skipped-steps 5 --steps 60 --output-dir "$tmp/skipping" --save-model "$tmp/skipping.bin"
[ ! -e "$tmp/skipping.bin" ] && [ -z "$(ls "$tmp/skipping" 2>/dev/null | grep -v '\.tmp$')" ] && r=ok || r="not ok"
echo "$r - a run stopped for skipping every update saves no model file and no checkpoint"
expect_fail "saving non-finite weights" 1 "'$tmp/nan_out.bin' not written: the weights hold a non-finite value" "${nan[@]}" \
    --skip-loss-z 3 --max-skipped-steps 0 --steps 3 --save-model "$tmp/nan_out.bin"
expect_fail "a checkpoint of non-finite weights" 1 "not written: the weights hold a non-finite value" "${nan[@]}" \
    --skip-loss-z 3 --max-skipped-steps 0 --steps 2 --output-dir "$tmp/nan_ckpt"
[ ! -e "$tmp/nan_out.bin" ] && [ ! -d "$tmp/nan_ckpt/step_00000002" ] && r=ok || r="not ok"
echo "$r - no model file or checkpoint of non-finite weights is left"

# Damaged headers are named, never trusted: a model header's C = 2^30 (its size once overflowed an int,
# and saving it crashed), and a checkpoint's state file with dp = 0 (once a division by zero).
expect_fail "a model header with C = 2^30" 1 "model header's C = 1073741824 is outside [1, 131072]" "${base[@]}" \
    --model "$tmp/model_hugeC.bin" --steps 1 --save-model "$tmp/hugeC_out.bin"
"$BIN" "${base[@]}" --steps 2 --output-dir "$tmp/dp0" >/dev/null 2>&1
/usr/bin/python3 -c "
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[72:80] = struct.pack('<q', 0); open(p, 'wb').write(b)" "$tmp/dp0/step_00000002/state_rank00000.bin"
expect_fail "a checkpoint whose state file says dp = 0" 1 "a damaged training-state header: dp = 0, outside [1, 1048576]" "${base[@]}" \
    --steps 4 --output-dir "$tmp/dp0" --resume

# The log is never silently cut: a failed write (a full disk: /dev/full) stops the run, one line.
expect_fail "a log that cannot be written" 1 "--log-file /dev/full: cannot write" "${base[@]}" --steps 3 --log-file /dev/full
expect_fail "a log in a directory that does not exist" 1 "--log-file: cannot open '$tmp/nodir/log.jsonl' for writing: No such file" \
    "${base[@]}" --steps 3 --log-file "$tmp/nodir/log.jsonl"
# A resume rewrites the log through a .tmp and a rename: the steps before the checkpoint stay, none twice, no .tmp left.
"$BIN" "${base[@]}" --steps 4 --checkpoint-every 2 --output-dir "$tmp/logrun" --log-file "$tmp/logrun.jsonl" >/dev/null 2>&1
rm -rf "$tmp/logrun/step_00000004"
"$BIN" "${base[@]}" --steps 6 --checkpoint-every 2 --output-dir "$tmp/logrun" --log-file "$tmp/logrun.jsonl" --resume >/dev/null 2>&1
[ "$(sed 's/{"step": \([0-9]*\),.*/\1/' "$tmp/logrun.jsonl" | tr '\n' ' ')" = "1 2 3 4 5 6 " ] && [ ! -e "$tmp/logrun.jsonl.tmp" ] && r=ok || r="not ok"
echo "$r - a resumed run's log: steps 1-2 kept, 3-6 logged again once each, no .tmp left"

# Outputs are checked before the first step (issue class: a trained model lost at the end): an
# unwritable --save-model or --output-dir stops the run at once, exit 2, one line, nothing trained.
expect_fail "--save-model in a missing directory" 2 "--save-model $tmp/nodir/m.bin: its directory '$tmp/nodir' does not exist" \
    "${base[@]}" --steps 50 --save-model "$tmp/nodir/m.bin"
expect_fail "--save-model naming a directory" 2 "--save-model $tmp: is a directory" "${base[@]}" --steps 50 --save-model "$tmp"
expect_fail "--output-dir under a file" 2 "--output-dir $tmp/ok.bin/run: cannot create it" "${base[@]}" --steps 50 --output-dir "$tmp/ok.bin/run"
"$BIN" "${base[@]}" --steps 0 --output-dir "$tmp/made/here" >/dev/null 2>&1  # (--steps 0 writes no checkpoint)
[ -d "$tmp/made/here" ] && r=ok || r="not ok"
echo "$r - --output-dir is created at the start of the run"
# A disk without room for one checkpoint (12 bytes a parameter) is refused before the first step; room for
# fewer than the run keeps gets a note. LLMC_DISK_FREE stands for the file system's free bytes.
LLMC_DISK_FREE=1048576 expect_fail "a disk without room for one checkpoint" 2 \
    "--output-dir $tmp/full: 1.0 MiB free, but one checkpoint of this run takes" "${base[@]}" --steps 50 --output-dir "$tmp/full"
[ -z "$(ls "$tmp/full" 2>/dev/null)" ] && r=ok || r="not ok"
echo "$r - a disk without room for one checkpoint: nothing written"
# The data line says how many epochs --steps reads (5000 tokens: 156 slots of B·T = 32); over one gets a note.
"$BIN" "${base[@]}" --steps 0 >"$tmp/out" 2>&1 && grep -q "^data: 5000 train tokens in 1 shard(s); B=2 T=16 dp=1, 1 micro-batch(es) per step = 32 tokens\$" "$tmp/out" \
    && r=ok || r="not ok"
"$BIN" "${base[@]}" --steps 20 >"$tmp/out" 2>&1 && grep -q "^data: .* = 32 tokens; --steps 20: 0.128 epochs\$" "$tmp/out" && ! grep -q "^note: --steps" "$tmp/out" \
    || r="not ok"
"$BIN" "${base[@]}" --steps 200 >"$tmp/out" 2>&1 && grep -q "; --steps 200: 1.28 epochs\$" "$tmp/out" &&
    grep -q "^note: --steps 200 reads the training data 1.28 times over (an epoch is 156 steps); check that --train-data names every shard" "$tmp/out" \
    || r="not ok"
echo "$r - the data line gives --steps in epochs (none with --steps 0), and more than one epoch gets a note"
# Two more notes of a run that does not do what it seems to: a warmup longer than the run, and validation on training data
ln -sf ok.bin "$tmp/ok_again.bin"
"$BIN" "${base[@]}" --steps 5 --warmup-steps 100 >"$tmp/out" 2>&1 &&
    grep -q "^note: --warmup-steps 100 is more than --steps 5: the learning rate reaches only 5% of --lr$" "$tmp/out" && r=ok || r="not ok"
"$BIN" "${base[@]}" --steps 5 --warmup-steps 5 --val-data "$tmp/ok_again.bin" >"$tmp/out" 2>&1 &&
    grep -q "^note: --val-data reads a file --train-data reads too ($tmp/ok_again.bin): the validation loss is then a training loss$" "$tmp/out" &&
    ! grep -q "^note: --warmup" "$tmp/out" || r="not ok"
"$BIN" "${base[@]}" --steps 5 --val-data "$tmp/ok32.bin" >"$tmp/out" 2>&1 && grep -q "^validation: " "$tmp/out" && ! grep -q "^note:" "$tmp/out" || r="not ok"
echo "$r - notes: --warmup-steps over --steps, --val-data reading a --train-data file (through a link); none for other files"
# The disk fills during the run: 2,000,000 bytes free hold two of this model's checkpoints (~369 kB
# each; one is counted as 12 bytes a parameter + 1 MiB = 1.4 MiB). A save without room is skipped
# with a warning and training goes on; with --keep-checkpoints 2 the oldest goes first instead.
for keep in 0 2; do
    LLMC_DISK_FREE=2000000 "$BIN" "${base[@]}" --steps 10 --checkpoint-every 2 --keep-checkpoints $keep --output-dir "$tmp/room$keep" \
        --save-model "$tmp/room$keep.bin" >"$tmp/out" 2>"$tmp/err"
    rc=$? want=$([ $keep = 0 ] && echo 5 || echo 2)
    grep -q "^note: --output-dir $tmp/room$keep: 1.9 MiB free holds 1 checkpoint of .*, but this run keeps up to $want; free some space" "$tmp/out" \
        && echo "ok - a disk with room for fewer checkpoints than the run keeps (--keep-checkpoints $keep: $want): a note" \
        || { echo "not ok - no note of the disk's room (--keep-checkpoints $keep)"; grep -i "note\|error" "$tmp/out" | sed 's/^/#   /'; }
    left=$(ls "$tmp/room$keep" | tr '\n' ' ')
    if [ $keep = 0 ]; then
        [ $rc = 4 ] && [ "$left" = "step_00000002 step_00000004 " ] && [ -s "$tmp/room0.bin" ] &&
            [ "$(grep -c "^warning: step [0-9]*: checkpoint not written: --output-dir $tmp/room0 has 1.2 MiB free, and one takes 1.4 MiB. The newest is $tmp/room0/step_00000004. Training goes on" "$tmp/out")" = 3 ] &&
            grep -q "^error: the last step's checkpoint was not written (no room in --output-dir $tmp/room0)" "$tmp/err" && [ "$(wc -l <"$tmp/err")" = 1 ] &&
            r=ok || r="not ok"
        echo "$r - a full disk skips saves with a warning and trains on; the last one missing is exit 4, with --save-model written (exit $rc; kept: $left)"
        RESTART_WAIT=0 LLMC_DISK_FREE=2000000 scripts/run_until_done.sh "$BIN" "${base[@]}" --steps 10 --checkpoint-every 2 \
            --output-dir "$tmp/room0u" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        [ $rc = 4 ] && [ "$(grep -c "^run_until_done:" "$tmp/err")" = 1 ] && [ "$(grep -c "^model:" "$tmp/out")" = 1 ] &&
            grep -q "^run_until_done: the run ended without room for its last checkpoint (exit 4): not retried" "$tmp/err" && r=ok || r="not ok"
        echo "$r - scripts/run_until_done.sh: a run without room for its last checkpoint (exit 4) is not retried (exit $rc)"
        "$BIN" "${base[@]}" --steps 10 --checkpoint-every 2 --output-dir "$tmp/room0" --resume >"$tmp/out" 2>&1
        rc=$?
        [ $rc = 0 ] && [ -d "$tmp/room0/step_00000010" ] && r=ok || r="not ok"
        echo "$r - once there is room, --resume writes the missing checkpoints (exit $rc)"
    else
        [ $rc = 0 ] && [ "$left" = "step_00000008 step_00000010 " ] && ! grep -q "^warning" "$tmp/out" &&
            [ "$(grep -c "^note: step [0-9]*: removed $tmp/room2/step_0000000[246] before the save, to make room (--keep-checkpoints 2 would remove it after)" "$tmp/out")" = 3 ] &&
            r=ok || r="not ok"
        echo "$r - a full disk with --keep-checkpoints 2: the oldest goes before the save, every save written (exit $rc; kept: $left)"
    fi
done
"$BIN" "${base[@]}" --steps 10 --checkpoint-every 2 --output-dir "$tmp/room" >"$tmp/out" 2>&1
grep -q "^note: --output-dir" "$tmp/out" && echo "not ok - a note of the disk's room where there is room" || echo "ok - no note where the disk has room"
"$BIN" "${base[@]}" --lr 10 --steps 30 --log-file "$tmp/climb.jsonl" >"$tmp/climb.out" 2>&1
rc=$?
grep -q "^warning: step [0-9]*: the loss [0-9.e+]* is over 1.5 times the first step's" "$tmp/climb.out" && r=ok || r="not ok"
echo "$r - a loss that climbs far above its start is named in a warning (--lr 10, exit $rc)"
expect_fail "--loss-scale without fp16" 2 "--loss-scale and --loss-scale-every are for --precision fp16 (got --precision bf16" \
    "${base[@]}" --precision bf16 --loss-scale 1024
expect_fail "--precision fp8 with B*T not a multiple of 16" 2 "--precision fp8: an FP8 product needs every dimension a multiple of 16" \
    "${base[@]}" --precision fp8 --batch-size 1 --seq-len 8 --total-batch-tokens 8
expect_fail "--val-tokens below one sequence" 2 "--val-tokens 10: fewer than one sequence of --seq-len 16" \
    "${base[@]}" --val-data "$tmp/ok.bin" --val-tokens 10
expect_fail "--comm nccl on the CPU" 2 "--comm nccl: needs --device cuda" "${base[@]}" --device cpu --comm nccl
expect_fail "missing model file" 2 "neither a preset" "${base[@]}" --model "$tmp/nope.bin"
expect_fail "model file with wrong magic" 1 "is not a model file" "${base[@]}" --model "$tmp/model_badmagic.bin"
expect_fail "model file with unknown version" 1 "version 4 is not supported" "${base[@]}" --model "$tmp/model_badversion.bin"
expect_fail "truncated model file" 1 "header describes a" "${base[@]}" --model "$tmp/model_truncated.bin"
expect_fail "Llama model file with 3 key/value heads for 4 query heads" 1 "NKV must divide NH" "${base[@]}" --model "$tmp/llama_badkv.bin"
expect_fail "Llama model file with an untied flag of 2" 1 "untied flag is 2" "${base[@]}" --model "$tmp/llama_badtied.bin"
expect_fail "Llama model file with RoPE scaling low 4 >= high 4" 1 "RoPE scaling (factor 8, low 4, high 4, original context 8192) needs" "${base[@]}" --model "$tmp/llama_badrope.bin"
expect_fail "missing data" 1 "--train-data: no file matches" "${base[@]}" --train-data "$tmp/none_*.bin"
expect_fail "shard with wrong magic" 1 "is not a token shard" "${base[@]}" --train-data "$tmp/badmagic.bin"
expect_fail "truncated shard" 1 "header says 5000 tokens" "${base[@]}" --train-data "$tmp/truncated.bin"
expect_fail "shard longer than its header" 1 "header says 5000 tokens" "${base[@]}" --train-data "$tmp/toolong.bin"
expect_fail "data/model vocabulary mismatch" 1 "outside the model's vocabulary (V=97)" "${base[@]}" --train-data "$tmp/bigtok.bin"
expect_fail "--vocab-size that differs from the model file's" 2 "--vocab-size 250: the model file '$tmp/tiny.bin' has a vocabulary of 97" \
    "${base[@]}" --vocab-size 250
expect_fail "--vocab-size past 2^20" 2 "--vocab-size: expected an integer in [0, 1048576], got '2000000'" "${base[@]}" --model d1 --vocab-size 2000000
# a preset with --vocab-size 97: V = 97 rows of wte padded to Vp = 128 (the header, the file's size),
# trained on the 97-token shard
"$BIN" "${base[@]}" --model d1 --vocab-size 97 --steps 1 --save-model "$tmp/v97.bin" --output-dir "$tmp/v97ck" >"$tmp/out" 2>&1
$PY - "$tmp/v97.bin" <<'PY'
import os, struct, sys
h = struct.unpack("<256i", open(sys.argv[1], "rb").read(1024)) if os.path.exists(sys.argv[1]) else (0,) * 256
V, L, C, Vp, maxT = h[3], h[4], h[6], h[7], h[2]
params = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
ok = (V, Vp, L, C) == (97, 128, 1, 64) and os.path.getsize(sys.argv[1]) == 1024 + 4 * params
print(("ok" if ok else "not ok") + f" - --model d1 --vocab-size 97: a model of V=97 rows padded to Vp=128 trains and saves (header V={V} Vp={Vp})")
PY
# its checkpoint resumed without --vocab-size: the mismatch names the flag that fixes it
expect_fail "resume of a --vocab-size 97 checkpoint without it" 2 "V=97 model, but --model d1 is gpt2 L=1 C=64 V=50257 (resume with --vocab-size 97)" \
    "${base[@]}" --model d1 --steps 2 --output-dir "$tmp/v97ck" --resume
expect_fail "too little data for one batch" 1 "fewer than one batch needs" "${base[@]}" --batch-size 400 --seq-len 32
expect_fail "resume without checkpoint" 1 "--resume: no checkpoint" "${base[@]}" --output-dir "$tmp/empty" --resume
expect_fail "resume without output dir" 2 "--resume needs --output-dir" "${base[@]}" --resume
expect_fail "--hellaswag: missing file" 1 "--hellaswag: cannot open '$tmp/nope.bin' for reading: No such file" "${base[@]}" --hellaswag "$tmp/nope.bin"
expect_fail "--hellaswag: not an eval file" 1 "is not a multiple-choice eval file" "${base[@]}" --hellaswag "$tmp/hs_badmagic.bin"
expect_fail "--hellaswag: truncated file" 1 "ends inside example 2" "${base[@]}" --hellaswag "$tmp/hs_truncated.bin"
expect_fail "--hellaswag: token outside the vocabulary" 1 "example 1: token 500 in its ending is outside the model's vocabulary (V=97)" \
    "${base[@]}" --hellaswag "$tmp/hs_bigtok.bin"
expect_fail "--hellaswag: label past the endings" 1 "example 2 has 4 endings and label 4" "${base[@]}" --hellaswag "$tmp/hs_badlabel.bin"
# a flag that would do nothing without another (the run would go on without what it asked for)
expect_fail "--prompt without samples" 2 "--prompt needs --sample-every N" "${base[@]}" --prompt "In the beginning"
expect_fail "--checkpoint-every without --output-dir" 2 "--checkpoint-every and --keep-checkpoints need --output-dir" \
    "${base[@]}" --checkpoint-every 5
expect_fail "--keep-checkpoints without --output-dir" 2 "need --output-dir" "${base[@]}" --keep-checkpoints 2
expect_fail "--cp-layout zigzag without --cp" 2 "--cp-layout zigzag needs --cp > 1" "${base[@]}" --cp-layout zigzag
expect_fail "--cooldown-frac without wsd" 2 "--cooldown-frac is for --lr-schedule wsd (got --lr-schedule cosine)" "${base[@]}" \
    --cooldown-frac 0.5
expect_fail "--skip-window without a z bound" 2 "--skip-window and --max-skipped-steps are for --skip-loss-z or --skip-norm-z" \
    "${base[@]}" --skip-window 4
expect_fail "--max-skipped-steps without a z bound" 2 "are for --skip-loss-z or --skip-norm-z" "${base[@]}" --max-skipped-steps 3
# a flag given is a flag given, even with its default value: the run would still not do what it names
expect_fail "--cooldown-frac 0.2 (its default) without wsd" 2 "--cooldown-frac is for --lr-schedule wsd" "${base[@]}" --cooldown-frac 0.2
expect_fail "--loss-scale 65536 (its default) without fp16" 2 "--loss-scale and --loss-scale-every are for --precision fp16" \
    "${base[@]}" --loss-scale 65536
expect_fail "--tokenizer: missing file (for samples)" 1 "--tokenizer: cannot open '$tmp/nope.bin'" "${base[@]}" --sample-every 1 \
    --tokenizer "$tmp/nope.bin"
expect_fail "--hellaswag: example longer than --seq-len" 2 "--hellaswag: its longest example needs 17 positions, more than --seq-len 16" \
    "${base[@]}" --hellaswag "$tmp/hs_long.bin"
expect_fail "a micro-batch larger than the host's memory" 2 \
    "--batch-size 1000 --seq-len 1024: a micro-batch needs" --device cpu --model "$tmp/wide_vocab.bin" --val-data "" --batch-size 1000 --seq-len 1024
grep -qE "but the host has .* available after the model state .*; --batch-size [0-9]+ --total-batch-tokens 1024000 fits, with the step's 1024000 tokens in [0-9]+ micro-batches" "$tmp/err" \
    && echo "ok - the refusal names the host's memory and a batch size that fits the step" || echo "not ok - the refusal: $(cat "$tmp/err")"
# a model state larger than the host's memory is refused before anything is allocated (planner.h:
# plan_state): d12 in fp32 keeps 16 bytes a parameter, 1.85 GiB, under LLMC_HOST_MEMORY's 1 GiB
LLMC_HOST_MEMORY=1073741824 expect_fail "a model state larger than the host's memory" 2 \
    "the model state needs 1.85 GiB a rank (parameters 474.8 MiB, gradients 474.8 MiB, optimizer 949.7 MiB at --zero 0), but the host has 1.00 GiB available; spread it over more ranks" \
    --device cpu --model d12 --val-data "" --steps 1
# --recompute full keeps ~1/2.6 of GPT-2 124M's activations per position (model.h: Recompute;
# the logits, which every mode keeps, are most of the rest): a refusal without it names the
# larger micro-batch that fits with it, and a run with it is planned by that same count. Both
# runs plan against LLMC_HOST_MEMORY's 4 GiB (common.h: host_available_bytes), not the host's
# MemAvailable, which moves between two runs (on a host with less, they would see the host's)
deep=(--device cpu --model d12 --val-data "" --batch-size 1000 --seq-len 1024)
LLMC_HOST_MEMORY=4294967296 "$BIN" "${deep[@]}" >/dev/null 2>"$tmp/err_none"; rc1=$?
LLMC_HOST_MEMORY=4294967296 "$BIN" "${deep[@]}" --recompute full >/dev/null 2>"$tmp/err_full"; rc2=$?
$PY - "$tmp/err_none" "$tmp/err_full" "$rc1" "$rc2" <<'PY'
import re, sys
none, full = open(sys.argv[1]).read(), open(sys.argv[2]).read()
capped = "the host has 4.00 GiB available" in none and "the host has 4.00 GiB available" in full
def most(text):  # the largest B the refusal says fits without another flag
    m = re.search(r"\(at most --batch-size (\d+) fits\)", text) or re.search(r"--batch-size (\d+) --total-batch-tokens \d+ fits", text)
    return int(m.group(1)) if m else None
x, y = most(none), re.search(r"; or keep fewer activations: with --recompute full, up to --batch-size (\d+) fits$", none.strip())
xf = most(full)
# d12, T = 1024: 16·L·C + 12·C + Vp = 206,976 elements a position without recomputation, L·C + 27·C
# + Vp = 80,256 with full: 2.58x as many positions fit (less the plan's fixed reserve). Under the
# cap both runs see the same room, so full's own count is the advice exactly; a host with less than
# the cap free shows its own MemAvailable a moment apart in each, hence 5% there
same = 0 if capped else 0.05
ok = (sys.argv[3] == sys.argv[4] == "2" and x and y and xf and int(y.group(1)) >= 2 * x and abs(xf - int(y.group(1))) <= same * xf
      and "--recompute full," not in full)
print(("ok" if ok else "not ok") + f" - a refused micro-batch names the larger one --recompute full fits (d12: {x} without, "
      f"{y.group(1) if y else '?'} with; a run with it plans {xf}" + (", both under LLMC_HOST_MEMORY's 4 GiB)" if capped else
      ", under the host's own memory, less than LLMC_HOST_MEMORY)") + ("" if ok else ": " + none.strip()[-200:] + " | " + full.strip()[-200:]))
PY
LLMC_HOST_MEMORY=lots expect_fail "a LLMC_HOST_MEMORY that is not a number of bytes" 2 "LLMC_HOST_MEMORY=lots: expected a number of bytes" \
    "${deep[@]}"
# a --steps 0 conversion runs no forward: the same flags then only read and write the model
"$BIN" --device cpu --model "$tmp/wide_vocab.bin" --val-data "" --batch-size 1000 --seq-len 1024 --steps 0 --save-model "$tmp/wide_copy.bin" >/dev/null 2>"$tmp/err" \
    && cmp -s "$tmp/wide_vocab.bin" "$tmp/wide_copy.bin" && echo "ok - a --steps 0 conversion needs no room for activations" \
    || echo "not ok - a --steps 0 conversion with a large --batch-size: $(cat "$tmp/err")"
# --batch-size auto on the host: the whole step of 8 sequences fits in one micro-batch; on
# --resume it takes the checkpoint's B (2 here, 4 micro-batches), and the run ends where a
# straight run with --batch-size 2 does, bit for bit (step 4's loss, lr and gradient norm)
"$BIN" "${base[@]}" --batch-size auto --total-batch-tokens 128 --steps 1 >"$tmp/auto.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^batch: --batch-size auto: B=8, the largest that fits (.*; the host has .* available after the model state) and splits the step's 128 tokens into 1 micro-batch" "$tmp/auto.out" \
    && grep -q "^data: .* B=8 T=16 dp=1, 1 micro-batch(es) per step = 128 tokens" "$tmp/auto.out" \
    && echo "ok - --batch-size auto takes the whole step (B=8) where it fits" \
    || { echo "not ok - --batch-size auto on the host: exit $rc"; tail -3 "$tmp/auto.out" | sed 's/^/#   /'; }
# a step of 1000 sequences over 5000 tokens of data, which hold 312 sequences of 16 (+1): auto
# takes the largest divisor of 1000 the data holds, 250, in 4 micro-batches
"$BIN" "${base[@]}" --batch-size auto --total-batch-tokens 16000 --steps 1 >"$tmp/auto.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^batch: --batch-size auto: B=250, .*; the data holds at most B=312) and splits the step's 16000 tokens into 4 micro-batch" "$tmp/auto.out" \
    && grep -q "^data: .* B=250 T=16 dp=1, 4 micro-batch(es)" "$tmp/auto.out" \
    && echo "ok - --batch-size auto takes no more sequences than the data holds (B=250 of a 1000-sequence step, 312 in the data)" \
    || { echo "not ok - --batch-size auto with little data: exit $rc"; tail -3 "$tmp/auto.out" | sed 's/^/#   /'; }
"$BIN" "${base[@]}" --total-batch-tokens 128 --steps 4 --log-file "$tmp/straight.jsonl" >/dev/null 2>&1
"$BIN" "${base[@]}" --total-batch-tokens 128 --steps 4 --checkpoint-every 2 --output-dir "$tmp/auto_ck" >/dev/null 2>&1
rm -rf "$tmp/auto_ck/step_00000004"  # go on from step 2
"$BIN" "${base[@]}" --batch-size auto --total-batch-tokens 128 --steps 4 --output-dir "$tmp/auto_ck" --resume --log-file "$tmp/resumed.jsonl" >"$tmp/auto.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^data: .* B=2 T=16 dp=1, 4 micro-batch(es)" "$tmp/auto.out" && ! grep -q "^batch: " "$tmp/auto.out" \
    && [ "$(tail -1 "$tmp/resumed.jsonl" | cut -d, -f1-4)" = "$(tail -1 "$tmp/straight.jsonl" | cut -d, -f1-4)" ] \
    && echo "ok - --batch-size auto --resume takes the checkpoint's B=2 and ends where the straight run does" \
    || { echo "not ok - --batch-size auto --resume: exit $rc"; grep "^data: " "$tmp/auto.out"; tail -2 "$tmp/auto.out" | sed 's/^/#   /'; }
./tokenize --nope >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && echo "ok - tokenize rejects an unknown option" || echo "not ok - tokenize rejects an unknown option (exit $rc)"
./tokenize --decode "$tmp/badmagic.bin" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q "is not a token shard" "$tmp/err" && echo "ok - tokenize rejects a bad shard" || echo "not ok - tokenize rejects a bad shard (exit $rc)"

# uint32 shards (llm.c's [20240801, 7]) train exactly like the uint16 shard of the same tokens
"$BIN" "${base[@]}" --steps 2 --log-file "$tmp/u16.jsonl" >/dev/null 2>&1
"$BIN" "${base[@]}" --steps 2 --log-file "$tmp/u32.jsonl" --train-data "$tmp/ok32.bin" >/dev/null 2>&1
[ -s "$tmp/u16.jsonl" ] && cmp -s <(cut -d, -f2 "$tmp/u16.jsonl") <(cut -d, -f2 "$tmp/u32.jsonl") \
    && echo "ok - uint32 shard trains exactly like the uint16 shard" || echo "not ok - uint32 shard differs from uint16"

# --val-tokens past the data: it reads all the data holds ((5000 − 1)/16 = 312 sequences) and says so
"$BIN" "${base[@]}" --steps 0 --val-data "$tmp/ok.bin" --val-tokens 100000 >"$tmp/out" 2>&1
grep -q "^validation: 312 sequences of 16 = 4992 tokens each evaluation (all that --val-data holds)$" "$tmp/out" \
    && grep -q "^eval at step 0 | val loss" "$tmp/out" \
    && echo "ok - --val-tokens past the data: reads the 312 sequences the data holds, and says so" \
    || { echo "not ok - --val-tokens past the data"; tail -3 "$tmp/out" | sed 's/^/#   /'; }

# --help: exit 0 and every flag of the table is listed, each with its default
"$BIN" --help >"$tmp/help"; rc=$?
n=$(grep -c '^  --' "$tmp/help")
for flag in device model train-data val-data batch-size seq-len total-batch-tokens steps lr warmup-steps lr-schedule \
            final-lr-frac weight-decay beta1 beta2 eps grad-clip seed shuffle precision recompute zero tp sp pp \
            pp-schedule vpp cp cp-layout output-dir checkpoint-every keep-checkpoints resume val-every val-steps val-tokens skip-loss-z skip-norm-z skip-window sample-every \
            gen-tokens hellaswag log-file comm comm-stats comm-timeout; do
    grep -q -- "--$flag " "$tmp/help" || { echo "not ok - --help lists --$flag"; rc=1; }
done
[ $rc = 0 ] && echo "ok - --help lists all $n flags" || echo "not ok - --help"

# --steps 0 only evaluates: one line on stdout and one in the log, with HellaSwag's fields
"$BIN" "${base[@]}" --steps 0 --hellaswag "$tmp/hs_ok.bin" --log-file "$tmp/eval.jsonl" >"$tmp/out" 2>&1; rc=$?
$PY - "$tmp/eval.jsonl" <<'PY' >"$tmp/check" 2>&1
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ev = json.loads(lines[0])
assert len(lines) == 1 and ev["step"] == 0 and "loss" not in ev, lines
assert ev["hellaswag_total"] == 3 and ev["hellaswag_acc"] == ev["hellaswag_correct"] / 3 and ev["hellaswag_loss"] > 0, ev
assert 0 <= ev["eval_s"] < 60, ev  # its wall time
PY
[ $rc = 0 ] && [ ! -s "$tmp/check" ] && grep -q "^eval at step 0 | hellaswag 0\.[0-9]* ([0-3]/3) (eval [0-9.]* s)$" "$tmp/out" \
    && echo "ok - --steps 0 --hellaswag: only evaluates ($(grep '^eval' "$tmp/out"))" \
    || { echo "not ok - --steps 0 --hellaswag: exit $rc"; cat "$tmp/check" "$tmp/out" | tail -5 | sed 's/^/#   /'; }
"$BIN" "${base[@]}" --steps 0 >"$tmp/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^--steps 0: nothing to do (give --val-data, --hellaswag or --sample-every" "$tmp/out" \
    && echo "ok - --steps 0 with nothing to evaluate says so" || echo "not ok - --steps 0 with nothing to evaluate: exit $rc"

# dev/data/gpt2_weights.py: Hugging Face's layout -> the model file, byte for byte (fp32, and bf16
# rounded like torch)
ok=1
for prec in "" --bf16; do
    want="$tmp/tiny.bin"; [ -n "$prec" ] && want="$tmp/tiny_bf16.bin"
    $PY dev/data/gpt2_weights.py --safetensors "$tmp/hf.safetensors" --n-head 4 --out "$tmp/conv.bin" $prec >"$tmp/out" 2>&1 \
        && cmp -s "$want" "$tmp/conv.bin" || { ok=0; sed 's/^/#   /' "$tmp/out" | tail -3; }
done
[ $ok = 1 ] && echo "ok - dev/data/gpt2_weights.py: a Hugging Face safetensors GPT-2 becomes its llm.c model file byte for byte (fp32, bf16)" \
    || echo "not ok - dev/data/gpt2_weights.py: the converted model file differs"

# model files: load → save is byte-identical (fp32 and bf16), and our fp32→bf16 rounding is torch's
"$BIN" "${base[@]}" --steps 0 --save-model "$tmp/rt.bin" >/dev/null 2>&1
cmp -s "$tmp/tiny.bin" "$tmp/rt.bin" && echo "ok - fp32 model file round trip is byte-identical" || echo "not ok - fp32 model file round trip"
"$BIN" "${base[@]}" --model "$tmp/tiny_bf16.bin" --steps 0 --save-model "$tmp/rt16.bin" --save-precision bf16 >/dev/null 2>&1
cmp -s "$tmp/tiny_bf16.bin" "$tmp/rt16.bin" && echo "ok - bf16 model file round trip is byte-identical" || echo "not ok - bf16 model file round trip"
"$BIN" "${base[@]}" --steps 0 --save-model "$tmp/to16.bin" --save-precision bf16 >/dev/null 2>&1
cmp -s "$tmp/tiny_bf16.bin" "$tmp/to16.bin" && echo "ok - fp32 -> bf16 save rounds like torch" || echo "not ok - fp32 -> bf16 save rounds like torch"
"$BIN" "${base[@]}" --model "$tmp/llama.bin" --steps 0 --save-model "$tmp/rt_llama.bin" >/dev/null 2>&1
cmp -s "$tmp/llama.bin" "$tmp/rt_llama.bin" && echo "ok - Llama model file (its own lm_head) round trip is byte-identical" \
    || echo "not ok - Llama model file round trip"

# checkpoint layout: a complete directory per step, nothing temporary left behind
"$BIN" "${base[@]}" --steps 2 --checkpoint-every 1 --output-dir "$tmp/run" --save-model "$tmp/final.bin" >/dev/null 2>&1
ok=1
for s in 00000001 00000002; do
    for f in model.bin state_rank00000.bin history.bin manifest.json; do [ -s "$tmp/run/step_$s/$f" ] || ok=0; done
done
ls "$tmp/run" | grep -q tmp && ok=0
cmp -s "$tmp/run/step_00000002/model.bin" "$tmp/final.bin" || ok=0
$PY -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['step']==2 and m['model']['num_layers']==2 and 'history.bin' in m['files']" "$tmp/run/step_00000002/manifest.json" || ok=0
# history.bin (checkpoint.h): a 16-int64 header [20261123, 2, 2, 2, 0 (no loss scale: not fp16), 0, …] and the 2 losses and
# 2 norms of steps 1-2
$PY -c "import struct,sys; b=open(sys.argv[1],'rb').read(); h=struct.unpack('<16q', b[:128]); assert h[:6]==(20261123,2,2,2,0,0) and len(b)==128+4*8" \
    "$tmp/run/step_00000002/history.bin" || ok=0
[ $ok = 1 ] && echo "ok - checkpoints: step dirs with model, state, step history and manifest; no temp dirs; model = saved model" \
            || echo "not ok - checkpoint directory layout"
# every file a run writes has a checksum (llmc/checksum.h): a model file PATH its PATH.crc32c, a checkpoint's
# state, history and FP8 history files theirs in their headers. One flipped byte in the data of any of them stops
# a resume or a load (exit 1), one line naming the file; a model file without a .crc32c (llm.c's) still loads
flip() { $PY -c "import sys; p, o = sys.argv[1], int(sys.argv[2]); b = bytearray(open(p, 'rb').read()); b[o] ^= 0x10; open(p, 'wb').write(b)" "$1" "$2"; }
for f in model.bin state_rank00000.bin history.bin; do
    rm -rf "$tmp/bad_$f" && mkdir -p "$tmp/bad_$f" && cp -r "$tmp/run/step_00000002" "$tmp/bad_$f/"
    flip "$tmp/bad_$f/step_00000002/$f" $(($(stat -c %s "$tmp/bad_$f/step_00000002/$f") - 3))
    expect_fail "a checkpoint whose $f has a flipped byte" 1 "$tmp/bad_$f/step_00000002/$f' is damaged" \
        "${base[@]}" --steps 3 --output-dir "$tmp/bad_$f" --resume
done
cp "$tmp/final.bin" "$tmp/flipped.bin" && cp "$tmp/final.bin.crc32c" "$tmp/flipped.bin.crc32c" && flip "$tmp/flipped.bin" 2000
expect_fail "a model file with a flipped byte" 1 "'$tmp/flipped.bin' is damaged: its CRC32C is" "${base[@]}" --model "$tmp/flipped.bin" --steps 1
rm "$tmp/flipped.bin.crc32c"
"$BIN" "${base[@]}" --model "$tmp/flipped.bin" --steps 1 >/dev/null 2>&1 && [ "$(cat "$tmp/final.bin.crc32c" | wc -w)" = 3 ] \
    && echo "ok - a model file without its .crc32c (as llm.c writes them) loads unchecked; ours have one: 'crc32c HEX BYTES'" \
    || echo "not ok - a model file without a .crc32c, or the .crc32c's form"
# a checkpoint from before history.bin existed resumes (with empty outlier windows)
mkdir -p "$tmp/old" && cp -r "$tmp/run/step_00000002" "$tmp/old/" && rm "$tmp/old/step_00000002/history.bin"
"$BIN" "${base[@]}" --steps 3 --output-dir "$tmp/old" --resume >"$tmp/out" 2>&1 && grep -q "^step     3/3" "$tmp/out" \
    && echo "ok - a checkpoint without history.bin (older) resumes" || { echo "not ok - a checkpoint without history.bin"; tail -2 "$tmp/out" | sed 's/^/#   /'; }
# a version-1 history.bin (before fp16's loss scale joined it, and before checksums: no model.bin.crc32c, no seal in
# header slots 14-15) resumes, an fp16 run from --loss-scale
mkdir -p "$tmp/v1" && cp -r "$tmp/run/step_00000002" "$tmp/v1/" && rm "$tmp/v1/step_00000002/model.bin.crc32c"
$PY -c "import struct,sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[8:16]=struct.pack('<q',1); b[112:128]=bytes(16); open(p,'wb').write(b)" \
    "$tmp/v1/step_00000002/history.bin"
"$BIN" "${base[@]}" --steps 3 --output-dir "$tmp/v1" --resume --precision fp16 --loss-scale 1024 >"$tmp/out" 2>&1 \
    && grep -q "^step     3/3 .*| loss scale 1024" "$tmp/out" \
    && echo "ok - a version-1 history.bin (no loss scale) resumes; fp16 then starts from --loss-scale" \
    || { echo "not ok - a version-1 history.bin"; tail -2 "$tmp/out" | sed 's/^/#   /'; }
# fp8 with delayed scaling (fp8.cuh): fp8_history.bin, a 16-int64 header [20261125, 1, steps 3, H 2, tensors 24
# (2 blocks x 4 products x x, W, dout), amaxes kept 2, ...] and 24 x 2 floats, each tensor's oldest first, all > 0;
# listed in the manifest. A checkpoint of current scaling (no such file) resumes with delayed scaling, saying so;
# a history of another model's tensor count is refused naming the file
d8=(--precision fp8 --fp8-scaling delayed --fp8-amax-history 2)
"$BIN" "${base[@]}" "${d8[@]}" --steps 3 --output-dir "$tmp/d8" >"$tmp/out" 2>&1
$PY -c "
import json, struct, sys
b = open(sys.argv[1] + '/fp8_history.bin', 'rb').read()
h = struct.unpack('<16q', b[:128])
a = struct.unpack('<48f', b[128:])
assert h[:6] == (20261125, 1, 3, 2, 24, 2) and len(b) == 128 + 48 * 4 and all(x > 0 for x in a), (h[:6], len(b))
assert 'fp8_history.bin' in json.load(open(sys.argv[1] + '/manifest.json'))['files']
" "$tmp/d8/step_00000003" && grep -q "^device: cpu, .*, bf16 with the blocks' products in fp8 (delayed scaling, amax history 2)" "$tmp/out" \
    && echo "ok - fp8 delayed scaling: the checkpoint's fp8_history.bin holds the 24 tensors' last 2 amaxes (header, size, in the manifest)" \
    || { echo "not ok - fp8 delayed scaling: fp8_history.bin"; tail -2 "$tmp/out" | sed 's/^/#   /'; }
"$BIN" "${base[@]}" --precision fp8 --steps 2 --output-dir "$tmp/c8" >/dev/null 2>&1
"$BIN" "${base[@]}" "${d8[@]}" --steps 3 --output-dir "$tmp/c8" --resume >"$tmp/out" 2>&1 && grep -q "^step     3/3" "$tmp/out" \
    && grep -q "^fp8 delayed scaling: the checkpoint has no amax history (saved without --fp8-scaling delayed): the first step scales each tensor from itself" "$tmp/out" \
    && echo "ok - a checkpoint of fp8 current scaling resumes with delayed scaling, from an empty history (it says so)" \
    || { echo "not ok - resuming current scaling's checkpoint with delayed scaling"; tail -2 "$tmp/out" | sed 's/^/#   /'; }
$PY -c "import struct,sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[32:40]=struct.pack('<q',12); open(p,'wb').write(b)" \
    "$tmp/d8/step_00000003/fp8_history.bin"
expect_fail "an FP8 amax history of another tensor count" 1 "fp8_history.bin' holds the amaxes of 12 FP8 tensors, this rank's blocks have 24" \
    "${base[@]}" "${d8[@]}" --steps 4 --output-dir "$tmp/d8" --resume
# --keep-checkpoints 2: only the newest two stay, through a resume too
"$BIN" "${base[@]}" --steps 4 --checkpoint-every 1 --keep-checkpoints 2 --output-dir "$tmp/keep" >/dev/null 2>&1
a=$(ls "$tmp/keep" | tr '\n' ' ')
"$BIN" "${base[@]}" --steps 5 --checkpoint-every 1 --keep-checkpoints 2 --output-dir "$tmp/keep" --resume >/dev/null 2>&1
b=$(ls "$tmp/keep" | tr '\n' ' ')
[ "$a" = "step_00000003 step_00000004 " ] && [ "$b" = "step_00000004 step_00000005 " ] \
    && echo "ok - --keep-checkpoints 2: the newest two checkpoints stay (steps 3-4, then 4-5 after a resume)" \
    || echo "not ok - --keep-checkpoints 2: left '$a', then '$b'"
# --output-dir belongs to one run (llmc/checkpoint.h: output_dir_claim). A second run in a directory that a running
# run holds is refused at once, naming the holder (rank 0 holds a flock on DIR/.lock); a fresh run (no --resume)
# refuses a directory with checkpoints (another run's), naming the newest and the way on; only names of step_ and
# 8 digits are checkpoints (a step_00000009.broken is neither resumed nor pruned); a step_N.tmp that a stopped save
# left is removed at the start, saying so; --keep-checkpoints deletes only this run's older checkpoints
"$BIN" "${base[@]}" --steps 100000000 --output-dir "$tmp/busy" >"$tmp/busy.out" 2>&1 &
busy=$!
for i in $(seq 200); do grep -q "^step " "$tmp/busy.out" 2>/dev/null && break; sleep 0.05; done
expect_fail "a second run in a directory that a running run holds" 2 "--output-dir $tmp/busy: another run is using it (pid $busy" \
    "${base[@]}" --steps 2 --output-dir "$tmp/busy" --resume
kill $busy 2>/dev/null; wait $busy 2>/dev/null
expect_fail "a fresh run in a directory that holds checkpoints" 2 \
    "--output-dir $tmp/run: holds checkpoints of another run (the newest: step_00000002); continue it with --resume, or choose another directory" \
    "${base[@]}" --steps 3 --output-dir "$tmp/run"
mkdir -p "$tmp/names" && cp -r "$tmp/run/step_00000001" "$tmp/run/step_00000002" "$tmp/names/" \
    && cp -r "$tmp/run/step_00000002" "$tmp/names/step_00000009.broken" && mkdir "$tmp/names/step_00000007.tmp"
"$BIN" "${base[@]}" --steps 3 --keep-checkpoints 1 --output-dir "$tmp/names" --resume >"$tmp/out" 2>&1; rc=$?
left=$(ls "$tmp/names" | tr '\n' ' ')
[ $rc = 0 ] && grep -q "^resumed from $tmp/names/step_00000002 at step 2" "$tmp/out" \
    && grep -q "^note: --output-dir $tmp/names: removed step_00000007.tmp, a checkpoint that a stopped run did not finish" "$tmp/out" \
    && [ "$left" = "step_00000003 step_00000009.broken " ] \
    && echo "ok - only step_ and 8 digits is a checkpoint: step_00000009.broken neither resumed nor pruned; a leftover .tmp removed, saying so" \
    || { echo "not ok - checkpoint names and leftovers: exit $rc, left '$left'"; tail -3 "$tmp/out" | sed 's/^/#   /'; }
# every file of a checkpoint is on disk before its directory takes its name (fsync of each file and of the .tmp
# directory, then the rename, then fsync of --output-dir), so a power cut never leaves a named but partial one
if command -v strace >/dev/null && strace -qq -o /dev/null true 2>/dev/null; then
    strace -f -qq -e trace=fsync,rename,renameat,renameat2 -o "$tmp/sync.trace" "$BIN" "${base[@]}" --steps 1 --output-dir "$tmp/synced" >/dev/null 2>&1
    before=$(awk '/rename.*step_00000001\.tmp", / { exit } /fsync\(/ { n++ } END { print n + 0 }' "$tmp/sync.trace")
    after=$(awk '/rename.*step_00000001\.tmp", / { seen = 1; next } seen && /fsync\(/ { n++ } END { print n + 0 }' "$tmp/sync.trace")
    [ "$before" -ge 5 ] && [ "$after" -ge 1 ] && echo "ok - a checkpoint's 4 files and its directory are fsynced before the rename ($before fsyncs), the parent after ($after)" \
        || echo "not ok - fsync before a checkpoint's rename: $before before, $after after"
fi
# scripts/gpt2.sh: each size's flags run (one step of the tiny model on the CPU, the later flags
# overriding size, device and data; its --val-tokens then reads all the small shard holds), and its
# step of tokens splits evenly over 8 GPUs
for size in 124M 350M 774M 1558M; do
    eval "recipe=($(TOKENS=10e9 LAUNCH=print scripts/gpt2.sh $size))"
    value() { printf '%s\n' "${recipe[@]}" | grep -A1 -x -- "$1" | tail -1; }  # the word after flag $1
    B=$(value --batch-size) D=$(value --total-batch-tokens) S=$(value --steps)
    "$BIN" "${recipe[@]}" --device cpu --precision fp32 --model "$tmp/tiny.bin" --train-data "$tmp/ok.bin" --val-data "$tmp/ok.bin" \
        --batch-size 2 --seq-len 16 --total-batch-tokens 64 --steps 1 --output-dir "$tmp/gpt2_$size" \
        --log-file "$tmp/gpt2_$size.jsonl" --sample-every 0 --hellaswag "" >"$tmp/gpt2.out" 2>&1; rc=$?
    [ $rc = 0 ] && [ "$(wc -l <"$tmp/gpt2_$size.jsonl")" = 1 ] && grep -q '"val_loss"' "$tmp/gpt2_$size.jsonl" && [ -n "$B" ] && [ $((D % (B * 1024 * 8))) = 0 ] \
        && [ "$S" = $((10000000000 / D)) ] \
        && echo "ok - scripts/gpt2.sh $size: its flags run (validation too); $D tokens a step = $((D / (B * 1024 * 8))) x B=$B x T=1024 x 8 GPUs; $S steps = 10B tokens" \
        || { echo "not ok - scripts/gpt2.sh $size: exit $rc, B='$B', D='$D', steps '$S'"; tail -2 "$tmp/gpt2.out" | sed 's/^/#   /'; }
done
# ... and its launch: 2 ranks under mpirun (GPUS=2), here on the CPU with the same overrides
if command -v mpirun >/dev/null; then
    GPUS=2 OUT="$tmp/gpt2_launch" scripts/gpt2.sh 124M --device cpu --precision fp32 --model "$tmp/tiny.bin" \
        --train-data "$tmp/ok.bin" --val-data "" --batch-size 2 --seq-len 16 --total-batch-tokens 64 --steps 1 \
        --sample-every 0 >"$tmp/gpt2_launch.out" 2>&1; rc=$?
    [ $rc = 0 ] && grep -q "^device: cpu, 2 rank(s)" "$tmp/gpt2_launch.out" && [ "$(wc -l <"$tmp/gpt2_launch/log.jsonl")" = 1 ] \
        && echo "ok - scripts/gpt2.sh launches GPUS=2 ranks with mpirun and logs to OUT" \
        || { echo "not ok - scripts/gpt2.sh GPUS=2: exit $rc"; tail -2 "$tmp/gpt2_launch.out" | sed 's/^/#   /'; }
fi
# scripts/llama3.sh: its flags run for one step of the tiny Llama (the same overrides), with the
# model given, the largest B that fits, 1e9 tokens of 0.5M a step, and the rank file for samples
eval "recipe=($(TOKENIZER=data/gpt2_tokenizer.bin LAUNCH=print scripts/llama3.sh "$tmp/llama.bin"))"  # (value: above)
"$BIN" "${recipe[@]}" --device cpu --precision fp32 --train-data "$tmp/ok.bin" --val-data "$tmp/ok.bin" --batch-size 2 --seq-len 16 \
    --total-batch-tokens 64 --steps 1 --output-dir "$tmp/llama3" --log-file "$tmp/llama3.jsonl" --sample-every 0 >"$tmp/llama3.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q '"val_loss"' "$tmp/llama3.jsonl" && grep -q "^model: .*llama: NKV=2" "$tmp/llama3.out" \
    && [ "$(value --model)" = "$tmp/llama.bin" ] && [ "$(value --batch-size)" = auto ] && [ "$(value --steps)" = $((1000000000 / 524288)) ] \
    && [ "$(value --tokenizer)" = data/gpt2_tokenizer.bin ] \
    && echo "ok - scripts/llama3.sh: its flags run on a Llama model file (validation too); --batch-size auto, $(value --steps) steps of 0.5M tokens = 1e9, samples through TOKENIZER" \
    || { echo "not ok - scripts/llama3.sh: exit $rc, model '$(value --model)', B '$(value --batch-size)', steps '$(value --steps)'"; tail -2 "$tmp/llama3.out" | sed 's/^/#   /'; }
expect_fail "resume with a different model" 2 "--resume: the checkpoint" "${base[@]}" --model d2 --output-dir "$tmp/run" --resume --steps 3
# scripts/run_until_done.sh: the trainer killed (kill -9) twice under it, each time soon after a new checkpoint;
# the script restarts it with --resume until it is done, and the run ends as an unbroken run does (the same
# model file, bit for bit, and the same logged steps); a refused command (exit 2) is not retried
cat >"$tmp/flaky.sh" <<FLAKY
#!/usr/bin/env bash
n=\$(cat "$tmp/flaky.n" 2>/dev/null || echo 0); echo \$((n + 1)) >"$tmp/flaky.n"
[ "\$n" -ge 2 ] && exec "$BIN" "\$@"
before=\$(ls -d "$tmp/relaunch"/step_???????? 2>/dev/null | wc -l)
"$BIN" "\$@" & pid=\$!
while kill -0 \$pid 2>/dev/null && [ "\$(ls -d "$tmp/relaunch"/step_???????? 2>/dev/null | wc -l)" -le "\$before" ]; do sleep 0.005; done
kill -9 \$pid 2>/dev/null; wait \$pid
FLAKY
chmod +x "$tmp/flaky.sh"
long=("${base[@]}" --steps 300)
"$BIN" "${long[@]}" --save-model "$tmp/unbroken.bin" --log-file "$tmp/unbroken.jsonl" >/dev/null 2>&1
RESTART_WAIT=0 scripts/run_until_done.sh "$tmp/flaky.sh" "${long[@]}" --checkpoint-every 20 --output-dir "$tmp/relaunch" \
    --save-model "$tmp/relaunched.bin" \
    --log-file "$tmp/relaunched.jsonl" >"$tmp/relaunch.out" 2>"$tmp/relaunch.err"; rc=$?
steps() { $PY -c 'import json, sys; [print(r["step"], r["loss"]) for r in map(json.loads, open(sys.argv[1]))]' "$1"; }
[ $rc = 0 ] && [ "$(grep -c '^run_until_done: the run ended with exit 137; restart [12] of at most 100' "$tmp/relaunch.err")" = 2 ] \
    && grep -q "^run_until_done: the run is done (after 2 restart(s))" "$tmp/relaunch.err" && cmp -s "$tmp/unbroken.bin" "$tmp/relaunched.bin" \
    && [ "$(steps "$tmp/unbroken.jsonl")" = "$(steps "$tmp/relaunched.jsonl")" ] \
    && echo "ok - scripts/run_until_done.sh: the trainer killed twice, restarted with --resume each time: the same model and steps as an unbroken run" \
    || { echo "not ok - scripts/run_until_done.sh: exit $rc"; sed 's/^/#   /' "$tmp/relaunch.err" | tail -4; }
RESTART_WAIT=0 scripts/run_until_done.sh "$BIN" "${base[@]}" --zero 9 --output-dir "$tmp/refused" >/dev/null 2>"$tmp/relaunch.err"; rc=$?
[ $rc = 2 ] && grep -q "^run_until_done: the command was refused (exit 2): not retried" "$tmp/relaunch.err" \
    && echo "ok - scripts/run_until_done.sh: a refused command (exit 2) is not retried" || echo "not ok - scripts/run_until_done.sh: a refused command (exit $rc)"
# a run that diverges (exit 3) would diverge again from its checkpoint, bit for bit: not retried
RESTART_WAIT=0 scripts/run_until_done.sh "$BIN" "${nan[@]}" --steps 3 --output-dir "$tmp/diverging" >/dev/null 2>"$tmp/relaunch.err"; rc=$?
[ $rc = 3 ] && [ "$(grep -c "^run_until_done:" "$tmp/relaunch.err")" = 1 ] \
    && grep -q "^run_until_done: the run diverged or stopped learning (exit 3): not retried" "$tmp/relaunch.err" \
    && echo "ok - scripts/run_until_done.sh: a diverged run (exit 3) is not retried" || echo "not ok - scripts/run_until_done.sh: a diverged run (exit $rc)"
# a command that fails each time before a new checkpoint: STUCK (3) failures in a row, then it gives up
printf '#!/usr/bin/env bash
echo x >>"%s"
exit 1
' "$tmp/stuck.runs" >"$tmp/stuck.sh" && chmod +x "$tmp/stuck.sh"
RESTART_WAIT=0 scripts/run_until_done.sh "$tmp/stuck.sh" --output-dir "$tmp/stuck" >/dev/null 2>"$tmp/relaunch.err"; rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$tmp/stuck.runs")" = 3 ] \
    && grep -q "^run_until_done: the run failed 3 times in a row (exit 1) without a new checkpoint after the start; giving up (STUCK=3)" "$tmp/relaunch.err" \
    && echo "ok - scripts/run_until_done.sh: 3 failures in a row without a new checkpoint: it gives up" \
    || { echo "not ok - scripts/run_until_done.sh: failures without progress: exit $rc, $(wc -l <"$tmp/stuck.runs") runs"; tail -2 "$tmp/relaunch.err" | sed 's/^/#   /'; }
# One process without a launcher runs without MPI (llmc/comm.h: mesh_start): no MPI_Init, whose
# "singleton" start forks OpenMPI's daemon (orted); under mpirun -n 1 it is the same run
one=("$BIN" --device cpu --precision fp32 --model "$tmp/tiny.bin" --train-data "$tmp/ok.bin" --val-data "" --batch-size 2 --seq-len 16 --steps 2)
if command -v strace >/dev/null && strace -qq -o /dev/null true 2>/dev/null; then
    strace -f -qq -e trace=execve -o "$tmp/execs" "${one[@]}" --log-file "$tmp/one.jsonl" >"$tmp/one.out" 2>&1; rc=$?
    progs=$(grep -v "exited with\|killed by\|resumed>" "$tmp/execs" | grep -o 'execve("[^"]*"' | sed 's/execve("//; s/"$//' | sort -u | tr '\n' ' ')
    [ $rc = 0 ] && [ "$(grep -c 'execve(' "$tmp/execs")" = 1 ] \
        && echo "ok - one process without mpirun starts no other program (no MPI daemon): exec'd only $progs" \
        || echo "not ok - one process without mpirun: exit $rc, programs started: $progs"
else
    "${one[@]}" --log-file "$tmp/one.jsonl" >"$tmp/one.out" 2>&1
    echo "# no usable strace here: that one process starts no MPI daemon is not checked"
fi
if command -v mpirun >/dev/null && [ -f "$tmp/one.jsonl" ]; then
    mpirun -n 1 "${one[@]}" --log-file "$tmp/mpi1.jsonl" >"$tmp/mpi1.out" 2>&1; rc=$?
    strip() { $PY -c 'import json, sys; [print(*(json.loads(l).get(k) for k in ("step", "loss", "lr", "grad_norm"))) for l in open(sys.argv[1])]' "$1"; }  # (not the timings)
    [ $rc = 0 ] && [ -s "$tmp/mpi1.jsonl" ] && [ "$(strip "$tmp/one.jsonl")" = "$(strip "$tmp/mpi1.jsonl")" ] \
        && echo "ok - mpirun -n 1 (MPI initialized) logs the same steps as one process without it" \
        || { echo "not ok - mpirun -n 1 (exit $rc) logs other steps than one process:"; diff <(strip "$tmp/one.jsonl") <(strip "$tmp/mpi1.jsonl") | head -4 | sed 's/^/#   /'; }
fi
