#!/usr/bin/env bash
# build_baseline.sh — ./train_gpt and build/dev_attention of an earlier commit, for
# bench_vs_llmc.sh's side-by-side column (BASELINE_BIN, default .baseline/train_gpt) and
# bench_attention_ab.sh's old column (.baseline/dev_attention). Built here, before a GPU session,
# like dev/gpu_prebuild.sh's binaries (the GPU machine gets no .git to build them from).
#   dev/bench/build_baseline.sh COMMIT [ARCH]     ARCH: default this machine's GPU (9.0: 90a, 8.6: 86),
#                                                 or 90a (H100, H200) where it has none
set -eu
cd "$(dirname "$0")/../.."
commit=${1:?usage: dev/bench/build_baseline.sh COMMIT [ARCH]}
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
case $cap in 90) cap=90a ;; [0-9][0-9]|[0-9][0-9][0-9]) ;; *) cap=90a ;; esac  # (sm_90a: wgmma needs the a)
arch=${2:-$cap}
src=$(mktemp -d)/src; trap 'git worktree remove --force "$src" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$src" "$commit" >/dev/null
make -C "$src" --no-print-directory train_gpt build/dev_attention NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" HOST_ARCH=x86-64-v3 >/dev/null
mkdir -p .baseline
cp "$src/train_gpt" .baseline/train_gpt
cp "$src/build/dev_attention" .baseline/dev_attention
echo "$(git rev-parse --short "$commit")" >.baseline/commit
echo "build_baseline: .baseline/train_gpt and dev_attention from $(cat .baseline/commit) for sm_$arch; carry .baseline to the GPU machine"
