#!/usr/bin/env bash
# bench_attention_ab.sh — our attention against an earlier build of it, side by side in one run:
# dev/cuda/attention.cu's "time" mode of both binaries at each shape, one after the other.
#   dev/bench/bench_attention_ab.sh OLD_BINARY [NEW_BINARY]   (NEW default: build/dev_attention)
#   SHAPES="B:T:C:NH ..."   default: 16384 tokens a call, T = 1024 and 8192, head size 64 and 128
# Prints a markdown table: the trainer's defaults (forward, backward) and v7's forward (two
# warpgroups a block), old and new, with old / new time (> 1: the new build is faster); and
# where the new binary has them, the forward of v11-v22 (a producer warpgroup, 2 or 3 slots;
# v13, v14 with ping-pong; v15-v17 with key tiles of 128; v18-v20 with swizzled tiles; v21, v22
# copied by TMA; v28, v29 with 3 computing warpgroups, head size 64; v32-v34: v21, v28, v22 with a
# block an SM, persistent; v35: v28 with key tiles of 128, Q read from shared memory; v36: v35
# persistent) with v7 / vN (> 1: faster than v7's); at head size 64 the backward of v23-v26
# (the fused backward with a producer warpgroup, 3 or 4 slots; v25, v26 by TMA) with defaults / vN.
set -u
cd "$(dirname "$0")/../.."
old=${1:?usage: bench_attention_ab.sh OLD_BINARY [NEW_BINARY]} new=${2:-build/dev_attention}
shapes=${SHAPES:-16:1024:768:12 2:8192:768:12 16:1024:768:6 2:8192:768:6}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ms() {  # ms FILE PATTERN FIELD: the time in ms after "FIELD " on the line matching PATTERN
    grep -m1 -- "$2" "$1" | sed -n "s/.*$3 \([0-9.]*\) ms.*/\1/p"
}
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo "| B T hs | defaults fwd old / new ms | old / new | defaults bwd old / new ms | old / new | v7 fwd old / new | old / new | v11 fwd (v7 / v11) | v12 fwd (v7 / v12) | v13 fwd (v7 / v13) | v14 fwd (v7 / v14) | v15 fwd (v7 / v15) | v16 fwd (v7 / v16) | v17 fwd (v7 / v17) | v18 fwd (v7 / v18) | v19 fwd (v7 / v19) | v20 fwd (v7 / v20) | v21 fwd (v7 / v21) | v22 fwd (v7 / v22) | v28 fwd (v7 / v28) | v29 fwd (v7 / v29) | v32 fwd (v7 / v32) | v33 fwd (v7 / v33) | v34 fwd (v7 / v34) | v35 fwd (v7 / v35) | v36 fwd (v7 / v36) | v23 bwd (defaults / v23) | v24 bwd (defaults / v24) | v25 bwd (defaults / v25) | v26 bwd (defaults / v26) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for s in $shapes; do
    IFS=: read -r B T C NH <<<"$s"
    timeout -k 5 "${RUN_LIMIT:-120}" "$old" "$B" "$T" "$C" "$NH" time >"$tmp/old.txt" 2>&1
    timeout -k 5 "${RUN_LIMIT:-120}" "$new" "$B" "$T" "$C" "$NH" time >"$tmp/new.txt" 2>&1
    d='the trainer.s defaults'
    fo=$(ms "$tmp/old.txt" "$d" forward) fn=$(ms "$tmp/new.txt" "$d" forward)
    bo=$(ms "$tmp/old.txt" "$d" backward) bn=$(ms "$tmp/new.txt" "$d" backward)
    vo=$(ms "$tmp/old.txt" "(v7)" forward) vn=$(ms "$tmp/new.txt" "(v7)" forward)
    row="| $B $T $((C / NH)) | $fo / $fn | $(ratio "$fo" "$fn") | $bo / $bn | $(ratio "$bo" "$bn") | $vo / $vn | $(ratio "$vo" "$vn") |"
    for v in 11 12 13 14 15 16 17 18 19 20 21 22 28 29 32 33 34 35 36; do
        t=$(ms "$tmp/new.txt" "(v$v)" forward)
        row+=" ${t:-—} ($(ratio "$vn" "$t")) |"
    done
    for v in 23 24 25 26; do
        t=$(ms "$tmp/new.txt" "(v$v)" backward)
        row+=" ${t:-—} ($(ratio "$bn" "$t")) |"
    done
    echo "$row"
done
