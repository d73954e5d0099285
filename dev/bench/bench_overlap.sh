#!/usr/bin/env bash
# bench_overlap.sh — what overlapping communication with compute saves (`make bench`, on a node
# with two GPUs or more; one rank per GPU, NCCL).
#
# For DDP (--zero 0) and ZeRO-1, 2, 3, a bf16 GPT-2 runs a few steps twice: with overlap (the
# default: each unit's gradient all-reduce or reduce-scatter runs on the communication stream
# while the backward goes on; ZeRO-1/2 gather each updated unit while the next forward reaches
# it; ZeRO-3 prefetches the next unit's parameters while this one computes) and with --overlap 0 (each transfer waited for at once, each unit gathered when it
# is used). The same run on one GPU
# has no communication at all. From the median step times:
#     exposed communication without overlap  c = t(--overlap 0) − t(1 GPU)
#     hidden by overlap                       (t(--overlap 0) − t(overlap)) / c
# (1 GPU runs the per-GPU batch, the same work per GPU). Both runs give the same losses and
# bytes (test_dp.sh checks it), so the difference is the overlap alone.
# usage: dev/bench/bench_overlap.sh [MODEL] [B]      (default gpt2:124M 16; T = 1024)
set -u
cd "$(dirname "$0")/../.."
model=${1:-gpt2:124M}; B=${2:-16}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -lt 2 ] || ! command -v mpirun >/dev/null; then
    echo "bench_overlap: skipped (needs 2 GPUs or more and mpirun: NCCL takes one rank per GPU; this machine has $ngpu GPU(s))"
    exit 0
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
flags=(--device cuda --precision bf16 --model "$model" --batch-size "$B" --seq-len 1024 --steps 10 --val-data "")
run() {  # run NAME NP FLAGS...: median step ms (steps 3-10), or "failed"
    local name=$1 np=$2; shift 2
    timeout -k 10 "${RUN_LIMIT:-300}" mpirun -np "$np" ./train_gpt "${flags[@]}" "$@" --log-file "$tmp/$name.jsonl" >"$tmp/$name.txt" 2>&1 ||
        { echo failed; return; }
    ${PYTHON:-python3} -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
print(f'{statistics.median(r[\"ms\"] for r in rows):.1f}')" "$tmp/$name.jsonl" 2>/dev/null || echo failed
}
echo "# bench_overlap on ${ngpu}× $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $model B=$B T=1024 bf16," \
     "commit ${LLMC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%F)"
echo
one=$(run one 1)
echo "| dp=$ngpu, NCCL | step ms, overlap | step ms, --overlap 0 | 1 GPU, no communication | exposed comm without overlap | hidden by overlap | MB sent per rank per step |"
echo "|---|---|---|---|---|---|---|"
for z in 0 1 2 3; do
    with=$(run "z${z}_on" "$ngpu" --zero $z --comm nccl --comm-stats)
    without=$(run "z${z}_off" "$ngpu" --zero $z --comm nccl --overlap 0)
    ${PYTHON:-python3} - "$z" "$with" "$without" "$one" "$tmp/z${z}_on.jsonl" <<'PY'
import json, sys
z, w, wo, one, log = sys.argv[1:]
name = "DDP (zero 0)" if z == "0" else f"ZeRO-{z}"
try:
    mb = sum(json.loads(open(log).readlines()[-1])["comm_bytes"].values()) / 1e6
except Exception:
    mb = float("nan")
if "failed" in (w, wo, one):
    print(f"| {name} | {w} | {wo} | {one} | | | {mb:.0f} |")
else:
    w, wo, one = float(w), float(wo), float(one)
    exposed = wo - one
    hidden = (wo - w) / exposed if exposed > 0 else float("nan")
    print(f"| {name} | {w:.1f} | {wo:.1f} | {one:.1f} | {exposed:.1f} ms | {100 * hidden:.0f}% | {mb:.0f} |")
PY
done
