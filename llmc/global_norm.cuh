/*
global_norm.cuh — the squared L2 norm of the gradient, and the clipping factor from it.

  norm² = Σ_i g_i²      (summed in double over fixed chunks of 2^16, chunks summed in order)
  clip factor = max_norm / norm  if norm > max_norm > 0, else 1

The op returns the *squared* sum of the elements it is given, so a parallel layout can add the
partial sums of its shards (an all-reduce) before the square root. The chunking is fixed, not
per thread, so the result does not depend on the thread count.

Dtype T (float | bf16 | fp16): the gradient's; the sum is double either way.

CUDA: the same fixed chunks, one block per chunk, summed in double inside the block (16-byte
loads where the piece is aligned); the per-chunk sums come back to the host and are added there
in order. A list of pieces (a step's gradient, one per unit) runs as one launch and comes back
in one copy: one wait for the GPU per step.
Tests: test/test_ops.cpp (against a plain double loop), test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"
#include "profiler.h"

template <class floatX> inline double global_norm_squared_cpu(const floatX* g, size_t n) {
    const size_t chunk = 1 << 16;
    size_t nchunks = ceil_div(n, chunk);
    std::vector<double> part(nchunks, 0.0);
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        double s = 0.0;
        size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < end; i++) { double x = to_f(g[i]); s += x * x; }
        part[c] = s;
    }
    double total = 0.0;
    for (double p : part) total += p;
    return total;
}

#ifdef LLMC_CUDA
// One thread's part of chunk c of a piece: the sum of its elements' squares, in double. P > 1:
// the thread reads 16-byte packs (P elements each; the chunks start at multiples of P, so only a
// piece's last chunk can end inside a pack: thread 0 takes those last elements), several loads
// in flight; P = 1 where the piece is not 16-byte aligned.
template <class floatX, int P> __device__ inline double norm_thread_sum(const floatX* g, size_t n, size_t chunk, size_t c) {
    const size_t begin = c * chunk, end = min(n, begin + chunk), full = begin + (end - begin) / P * P;
    double s = 0.0;
    #pragma unroll 4
    for (size_t i = begin + threadIdx.x * P; i < full; i += blockDim.x * P) {
        const Pack<floatX, P> x = load_pack<P>(g + i);
        for (int j = 0; j < P; j++) { const double v = to_f(x.v[j]); s += v * v; }
    }
    if (threadIdx.x == 0)
        for (size_t i = full; i < end; i++) { const double v = to_f(g[i]); s += v * v; }
    return s;
}
// Up to NORM_PIECES pieces in one launch, a block a chunk: block b takes chunk b − first[p] of
// piece p, where first[p] ≤ b < first[p + 1]. The block's threads are added by a fixed tree.
constexpr int NORM_PIECES = 96;  // (the table is a kernel argument: 2 KB)
template <class floatX> struct NormTable {
    const floatX* g[NORM_PIECES];
    size_t n[NORM_PIECES];
    unsigned first[NORM_PIECES + 1];
    bool packs[NORM_PIECES];
};
template <class floatX> __global__ void norm_squared_chunks_kernel(double* part, const __grid_constant__ NormTable<floatX> t, size_t chunk) {
    __shared__ double shared[256];
    int p = 0;
    while (blockIdx.x >= t.first[p + 1]) p++;
    const size_t c = blockIdx.x - t.first[p];  // (the piece's chunk)
    const floatX* g = t.g[p];
    shared[threadIdx.x] = t.packs[p] ? norm_thread_sum<floatX, PACK<floatX>>(g, t.n[p], chunk, c) : norm_thread_sum<floatX, 1>(g, t.n[p], chunk, c);
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = shared[0];
}
#endif

// Σ over the pieces (in order) of each piece's norm² (its chunks in order). On CUDA one launch
// per NORM_PIECES pieces writes every chunk's sum into one buffer (a launch a piece left most of
// the GPU idle: a unit's chunks are under one wave), and one copy brings them all back: a single
// wait for the GPU, however many pieces (a step's gradient is one piece per unit).
template <class floatX> struct NormPiece { const floatX* g; size_t n; };
template <class floatX> inline double global_norm_squared(const Ctx& ctx, const std::vector<NormPiece<floatX>>& pieces) {
    double bytes = 0;
    for (const NormPiece<floatX>& p : pieces) bytes += (double)p.n * sizeof(floatX);
    OpScope prof(ctx, 0, bytes, "gradient norm");
    double total = 0.0;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const size_t chunk = 1 << 16;
        size_t nchunks = 0;
        for (const NormPiece<floatX>& p : pieces) nchunks += ceil_div(p.n, chunk);
        if (nchunks == 0) return 0.0;
        static Buf<double> part_buf;
        double* part = gpu_scratch(part_buf, ctx, nchunks);
        size_t at = 0;  // (the chunks before this launch's)
        for (size_t i = 0; i < pieces.size();) {
            NormTable<floatX> t{};
            int k = 0;
            for (; i < pieces.size() && k < NORM_PIECES; i++) {
                if (pieces[i].n == 0) continue;
                t.g[k] = pieces[i].g, t.n[k] = pieces[i].n, t.packs[k] = pack_width<floatX>(chunk, {pieces[i].g}) > 1;
                t.first[k + 1] = t.first[k] + (unsigned)ceil_div(pieces[i].n, chunk);
                k++;
            }
            if (k == 0) continue;
            norm_squared_chunks_kernel<floatX><<<t.first[k], 256, 0, ctx.stream>>>(part + at, t, chunk);
            CUDA_LAUNCH_CHECK();
            at += t.first[k];
        }
        std::vector<double> host(nchunks);
        ctx_copy(ctx, host.data(), part, nchunks * sizeof(double));
        at = 0;
        for (const NormPiece<floatX>& p : pieces) {  // each piece's sum, then the pieces' (as on the CPU)
            double s = 0.0;
            for (size_t c = 0; c < ceil_div(p.n, chunk); c++) s += host[at++];
            total += s;
        }
        return total;
    }
#endif
    for (const NormPiece<floatX>& p : pieces) total += global_norm_squared_cpu(p.g, p.n);
    return total;
}
template <class floatX> inline double global_norm_squared(const Ctx& ctx, const floatX* g, size_t n) {
    return global_norm_squared(ctx, std::vector<NormPiece<floatX>>{{g, n}});
}

inline float grad_clip_factor(float norm, float max_norm) {
    return (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
}
