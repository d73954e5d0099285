#!/usr/bin/env bash
# test_gpu_speed — dev/gpu_speed.sh's decisions after its wgmma check, without a GPU. The script
# runs only where GPU time is short, so a wrong decision (a failed kernel still timed, a run of
# ours with a layout auto that includes a failed kernel, an empty run) costs that time. Here it
# runs in a copy of the tree against stand-ins: nvidia-smi, gpu_session.sh's setup, a
# gpucheck_ops that prints the check lines a case gives (or exits 124, a hang), and the ab and
# llmc benches, which print what they were given. For each case:
#   - every check passed: no version left out; the llmc step's extra runs are the layout autos,
#     --bias-grad epilogue, --flash-backward chain, --matmul-wgmma 1, 2, 4, auto and 2 on the GELU products
#     alone (--matmul-wgmma-products gelu), --classifier-stats epilogue, each cut off after 60 s, 20 steps
#   - a failure that names ping-pong, 3 computing warpgroups, the backward's producer, dQ summed
#     by the last split or chained key blocks: those versions left out, and the auto of that pass
#     (or the chained run) dropped from the extra runs
#   - both passes' failures: neither auto, and no empty run left
#   - a failure of the plain kernels, or a hang: every opt-in version (v11-v36) left out, and
#     every run with a --flash- flag dropped; a hang of the chained backward's check: v31 alone;
#     a failure or hang of the persistent forward's check: v32-v34, v36 and the forward's auto;
#     of our GEMM's check: its runs and its matmul step
#   - SPEED_DEADLINE: a step that would end past it runs only until then, and one with too
#     little time left is skipped, so that the summary still prints
# usage: test/test_gpu_speed.sh     Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/tree/dev/bench" "$tmp/tree/build"
cp dev/gpu_speed.sh "$tmp/tree/dev/"
printf '#!/bin/sh\necho "Stand-in GPU"\n' >"$tmp/bin/nvidia-smi"
printf '#!/bin/sh\nexit 0\n' >"$tmp/tree/dev/gpu_session.sh"
printf '#!/bin/sh\nexit 0\n' >"$tmp/tree/train_gpt"
# the stand-in check of group $1 (wgmma, chain, persistent or gemm): the lines of $STANDIN_CHECKS
# that are its own (chain: those that name chained key blocks; persistent: persistent blocks;
# gemm: our GEMM), then its
# summary; STANDIN_HANG=GROUP: exit 124
cat >"$tmp/tree/build/gpucheck_ops" <<'EOF'
#!/bin/sh
case "$1" in
    chain) lines=$(printf '%s\n' "$STANDIN_CHECKS" | grep "chained") ;;
    persistent) lines=$(printf '%s\n' "$STANDIN_CHECKS" | grep "persistent blocks") ;;
    gemm) lines=$(printf '%s\n' "$STANDIN_CHECKS" | grep "our GEMM") ;;
    *) lines=$(printf '%s\n' "$STANDIN_CHECKS" | grep -v -e "chained" -e "persistent blocks" -e "our GEMM") ;;
esac
printf '%s\n' "$lines"
[ "${STANDIN_HANG:-}" = "$1" ] && exit 124
n=$(printf '%s\n' "$lines" | grep -c "^not ok")
echo "# gpucheck_ops $1: 10 passed, $n failed"
EOF
printf '#!/bin/sh\necho "ab skip=[${DEV_ATTENTION_SKIP:-}]"\n' >"$tmp/tree/dev/bench/bench_attention_ab.sh"
printf '#!/bin/sh\necho "dev_matmul only=[${DEV_MATMUL_ONLY:-}] $*"\n' >"$tmp/tree/build/dev_matmul"
printf '#!/bin/sh\necho "llmc also=[${OURS_ALSO:-}] limit=${RUN_LIMIT:-} steps=${STEPS:-}"\nsleep ${STANDIN_SLEEP:-0}\n' >"$tmp/tree/dev/bench/bench_vs_llmc.sh"
mkdir -p "$tmp/tree/.baseline"; printf '#!/bin/sh\nexit 0\n' >"$tmp/tree/.baseline/dev_attention"
chmod +x "$tmp/bin/"* "$tmp/tree/train_gpt" "$tmp/tree/build/gpucheck_ops" "$tmp/tree/build/dev_matmul" "$tmp/tree/.baseline/dev_attention"

# speed NAME CHECKS [VAR=VALUE...]: the script's wgmma, ab and llmc steps; prints "skip|also"
speed() {
    local name=$1 checks=$2; shift 2
    rm -rf "$tmp/tree/dev/gpu_results" "$tmp/out"
    (cd "$tmp/tree" && env PATH="$tmp/bin:$PATH" LLMC_COMMIT=test SPEED_STEPS=${STEPS:-wgmma,ab,llmc} STANDIN_CHECKS="$checks" "$@" \
        bash dev/gpu_speed.sh "$tmp/out" >"$tmp/$name.out" 2>&1)
    local ab llmc
    ab=$(sed -n 's/^ab skip=\[\(.*\)\]$/\1/p' "$tmp"/tree/dev/gpu_results/*-ab.txt 2>/dev/null)
    llmc=$(sed -n 's/^llmc also=\[\(.*\)\] limit=.*/\1/p' "$tmp"/tree/dev/gpu_results/*-llmc.txt 2>/dev/null)
    echo "$ab|$llmc"
}
check() {  # check NAME GOT WANT WHAT
    [ "$2" = "$3" ] && echo "ok - gpu_speed: $4" || { echo "not ok - gpu_speed: $4"; echo "#   got '$2', want '$3'"; sed 's/^/#   /' "$tmp/$1.out"; }
}
autos="--flash-forward-producer auto --flash-backward-producer auto"
got=$(speed pass "ok 1 - bf16 fused backward (flash, wgmma)")
check pass "$got" "|$autos;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "every check passed: no version left out; ours also with both layout autos, with --bias-grad epilogue, chained, and with our GEMM"
limits=$(sed -n 's/^llmc also=.* limit=\(.*\) steps=\(.*\)$/\1 \2/p' "$tmp"/tree/dev/gpu_results/*-llmc.txt)
check pass "$limits" "60 20" "the llmc step's runs are cut off after 60 s, 20 steps each"
got=$(speed pingpong "not ok 5 - bf16 forward B=2 T=256 (flash, wgmma, a producer warpgroup in the forward, ping-pong)")
check pingpong "$got" "13,14,16,19,20,21,22,32,34|--flash-backward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a ping-pong failure: its versions left out, and the forward's auto dropped"
got=$(speed groups "not ok 6 - bf16 forward B=2 T=256 (flash, wgmma, a producer warpgroup and 3 computing warpgroups in the forward)")
check groups "$got" "28,29,33,35,36|--flash-backward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a failure of 3 computing warpgroups: v28, v29, v33, v35, v36 left out, and the forward's auto dropped"
got=$(speed persistent "not ok 11 - bf16 persistent attention B=2 T=100 C=768 NH=12 NKV=12, 5 persistent blocks, 3 slots, vs a block an item forward")
check persistent "$got" "32,33,34,36|--flash-backward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a failure of the persistent forward's check: v32-v34, v36 left out (not the other producer versions), and the forward's auto dropped"
got=$(speed backward "not ok 7 - bf16 fused backward B=2 T=256, a producer warpgroup in the backward")
check backward "$got" "23,24,25,26|--flash-forward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a failure of the backward's producer: v23-v26 left out, and the backward's auto dropped"
got=$(speed lastsplit "not ok 8 - bf16 fused backward B=2 T=100 C=768 NH=12 NKV=12, 2 splits, dQ summed by the last split with a producer warpgroup by TMA vs by the sum kernel dqkv")
check lastsplit "$got" "30|--flash-forward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a failure of dQ summed by the last split: v30 left out (not the forward's TMA versions), and the backward's auto dropped"
got=$(speed mixed "not ok 9 - bf16 fused backward B=1 T=300 C=256 NH=4 NKV=4, 2 of 4 heads in 3 splits, a producer warpgroup in the backward, swizzled tiles by TMA, vs each head's own run dqkv")
check mixed "$got" "25,26|--flash-forward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a failure of the backward's TMA producer where only some heads are split: v25, v26 left out (not the forward's TMA versions), and the backward's auto dropped"
got=$(speed both "not ok 5 - x (flash, wgmma, a producer warpgroup in the forward, ping-pong)
not ok 7 - y, a producer warpgroup in the backward")
check both "$got" "13,14,16,19,20,21,22,32,34,23,24,25,26|--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "failures in both passes: neither auto, and no empty run"
got=$(speed chain "not ok 10 - bf16 fused backward B=1 T=300 C=256 NH=4 NKV=4, key blocks chained, each tile's first late dqkv")
check chain "$got" "31|$autos;--bias-grad epilogue;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "a failure of the chained backward: v31 left out, and its run dropped (not the autos)"
all=11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36
got=$(speed plain "not ok 2 - bf16 forward B=2 T=256 (flash, wgmma)")
check plain "$got" "$all|--bias-grad epilogue;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "a failure of the plain kernels: every opt-in version left out, every run with a --flash- flag dropped"
got=$(speed hang "ok 1 - bf16 forward (flash, wgmma)" STANDIN_HANG=wgmma)
check hang "$got" "$all|--bias-grad epilogue;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "a hang (exit 124): the same"
got=$(speed chainhang "ok 1 - bf16 forward (flash, wgmma)" STANDIN_HANG=chain)
check chainhang "$got" "31|$autos;--bias-grad epilogue;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" "a hang of the chained backward's check (its own process): v31 and its run alone left out"
got=$(speed gemm "not ok 12 - bf16 matmul by our GEMM N=256 C=128 OC=512 +bias +GELU, 3 blocks gelu(x·Wᵀ+b): rel err 1e-01 <= 0.01")
check gemm "$got" "|$autos;--bias-grad epilogue;--flash-backward chain" "a failure of our GEMM's check: its run dropped, no attention version left out"
got=$(speed gemmhang "ok 1 - bf16 forward (flash, wgmma)" STANDIN_HANG=gemm)
check gemmhang "$got" "|$autos;--bias-grad epilogue;--flash-backward chain" "a hang of our GEMM's check (its own process): its run alone dropped"
got=$(speed persistenthang "ok 1 - bf16 forward (flash, wgmma)" STANDIN_HANG=persistent)
check persistenthang "$got" "32,33,34,36|--flash-backward-producer auto;--bias-grad epilogue;--flash-backward chain;--matmul-wgmma 1;--matmul-wgmma 2;--matmul-wgmma 4;--matmul-wgmma auto;--matmul-wgmma 2 --matmul-wgmma-products gelu;--classifier-stats epilogue" \
    "a hang of the persistent forward's check (its own process): v32-v34, v36 and the forward's auto alone left out"
# the matmul step (our GEMM's timings) runs where its check passed, and not where it failed
matmul_step() { sed -n 's/^dev_matmul only=\[\(.*\)\] .*/\1/p' "$tmp"/tree/dev/gpu_results/*-matmul.txt 2>/dev/null; }
STEPS=wgmma,matmul speed matmulpass "ok 1 - bf16 forward (flash, wgmma)" >/dev/null
check matmulpass "$(matmul_step)" "1,7,8,9,10,11,12" "our GEMM's check passed: the matmul step times v1 and v7-v12"
STEPS=wgmma,matmul speed matmulfail "not ok 12 - bf16 matmul by our GEMM N=256 C=128 OC=512 +bias +GELU, 3 blocks gelu(x·Wᵀ+b): rel err 1e-01 <= 0.01" >/dev/null
check matmulfail "$(matmul_step)" "" "our GEMM's check failed: no matmul step"
# SPEED_DEADLINE: the steps fit in it, and the summary prints
STEPS=wgmma,llmc speed early "ok 1 - bf16 forward (flash, wgmma)" SPEED_DEADLINE=5 >/dev/null
got=$(grep -c "^== [a-z]*: skipped (SPEED_DEADLINE" "$tmp/early.out"); ls "$tmp"/tree/dev/gpu_results/*-llmc.txt >/dev/null 2>&1 && got+=" llmc ran"
check early "$got" "5" "SPEED_DEADLINE with no time left: every step skipped (the four checks and llmc), none run"
t0=$SECONDS
STEPS=llmc speed late "ok 1 - bf16 forward (flash, wgmma)" SPEED_DEADLINE=30 STANDIN_SLEEP=60 >/dev/null
limit=$(sed -n 's/^== llmc (limit \([0-9]*\) s)$/\1/p' "$tmp/late.out"); rc=$(sed -n 's/^== llmc: exit \([0-9]*\),.*/\1/p' "$tmp/late.out" | head -1)
[ -n "$limit" ] && [ "$limit" -le 20 ] && [ "$rc" = 124 ] && [ $((SECONDS - t0)) -lt 30 ] && got=ok || got="limit '$limit', exit '$rc', $((SECONDS - t0)) s"
check late "$got" ok "SPEED_DEADLINE=30: a step that would run 60 s is cut to the time left less the summary's 10 s, and the script ends before the deadline"
got=$(cd "$tmp/tree" && env PATH="$tmp/bin:$PATH" SPEED_DEADLINE=5m bash dev/gpu_speed.sh "$tmp/out" 2>&1; echo "rc=$?")
check badline "$(tail -2 <<<"$got" | paste -sd' ')" "gpu_speed: SPEED_DEADLINE is whole seconds, not '5m' rc=2" "SPEED_DEADLINE that is not whole seconds: a one-line error, exit 2"
