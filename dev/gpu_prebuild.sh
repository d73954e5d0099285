#!/usr/bin/env bash
# gpu_prebuild.sh — build a GPU session's binaries before the session, on any machine with the
# same CUDA toolkit (no GPU needed), so that the minutes a GPU is held are not spent compiling
# (dev/gpu_session.sh's build step took 93 s of a 10-minute session on an H100, 2026-11-26).
#
#   dev/gpu_prebuild.sh [ARCH] [DIR]     ARCH: the GPU's target, default 90a (H100, H200: sm_90a)
#                                        DIR:  where they go, default .prebuilt (git ignores it)
#   dev/gpu_prebuild.sh --hash           prints the hash of the sources the binaries are built from
#
# What it builds: what gpu_session.sh's build step makes (the trainer, tokenize, gpucheck_ops and
# the dev/cuda playgrounds), in a copy of the working tree (tracked and untracked files alike, as
# they are now, so that this tree's own binaries stay as they were), for sm_ARCH alone, with
# the host code for any x86-64 with AVX2 (HOST_ARCH=x86-64-v3: the GPU machine's processor may
# lack what -march=native found here). DIR gets them at their paths in the tree, and a manifest:
#   sources <hash of Makefile, the .cu/.cpp/.h/.cuh files of the tree's root, llmc/, test/ and dev/cuda/>
#   gencode -gencode=arch=compute_ARCH,code=sm_ARCH
#   host_arch x86-64-v3
# Carry DIR to the GPU machine with the tree (and .debs: scripts/offline_debs.sh). There
# gpu_session.sh's build step takes the binaries only where the manifest's sources and gencode
# are the tree's and the GPU's and every shared library they need is found (ldd); else it builds.
# Tested by test/test_gpu_session.sh (a stand-in make).
set -u
cd "$(dirname "$0")/.."
source_hash() {  # (the files make reads to build these binaries; names and contents)
    local d dirs=()
    for d in . llmc test dev/cuda; do [ -d "$d" ] && dirs+=("$d"); done
    { ls Makefile; find "${dirs[@]}" -maxdepth 1 -type f \( -name '*.cu' -o -name '*.cpp' -o -name '*.h' -o -name '*.cuh' \); } |
        sed 's|^\./||' | LC_ALL=C sort -u | while read -r f; do echo "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
}
[ "${1:-}" = --hash ] && { source_hash; exit 0; }
arch=${1:-90a}
dir=${2:-.prebuilt}
[[ $arch =~ ^[0-9]+a?$ ]] || { echo "gpu_prebuild: ARCH is a compute capability like 90a or 80, not '$arch'"; exit 2; }
export PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || { echo "gpu_prebuild: no nvcc here (the CUDA toolkit): nothing to build with"; exit 2; }
gencode="-gencode=arch=compute_$arch,code=sm_$arch"
host_arch=x86-64-v3
copy=$(mktemp -d); trap 'rm -rf "$copy"' EXIT
# the tree as it is: tracked files and untracked ones git does not ignore (what a GPU machine gets)
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z -c -o --exclude-standard | tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$copy"
else
    tar --exclude=./build --exclude="./$dir" -cf - . | tar -xf - -C "$copy"
fi
targets=(train_gpt tokenize build/gpucheck_ops $(cd "$copy" && ls dev/cuda/*.cu | sed 's|dev/cuda/\(.*\)\.cu|build/dev_\1|'))
echo "gpu_prebuild: building ${targets[*]} for sm_$arch (host code -march=$host_arch), $(nproc) jobs"
t0=$SECONDS
(cd "$copy" && make -j"$(nproc)" --no-print-directory NVCC_GENCODE="$gencode" HOST_ARCH=$host_arch "${targets[@]}") ||
    { echo "gpu_prebuild: the build failed"; exit 1; }
rm -rf "$dir"; mkdir -p "$dir/build"
for t in "${targets[@]}"; do
    [ -f "$copy/$t" ] || { echo "gpu_prebuild: make left no $t"; exit 1; }
    cp -p "$copy/$t" "$dir/$t"
done
printf 'sources %s\ngencode %s\nhost_arch %s\n' "$(cd "$copy" && source_hash)" "$gencode" "$host_arch" >"$dir/manifest"
echo "gpu_prebuild: ${#targets[@]} binaries ($(du -sh "$dir" | cut -f1)) in $dir, $((SECONDS - t0)) s; carry it with the tree"
