/*
autotune.cuh — what the trainer's choices by timing share: timing a launch, hashing its bits.

Flash attention's rows a warp and wgmma, cuBLASLt's algorithm, and the loss kernel's staging are
each chosen once, at the first call of a training step's size, by one rule:

    choose by time only among variants that write the same bits.

So a choice never changes what a run computes, and runs stay bit-identical whatever the timing.

Main functions:
  gpu_time_ms(ctx, launch)       a warm-up, then the best of 3 by CUDA events, in ms
  gpu_bits_hash(ctx, regions)    an order-free 64-bit hash of every word the regions hold
  autotune_pick(ctx, n, restore, launch, outs)
                                 the rule for n variants of one call: those with the first's
                                 bits are timed; the fastest wins if 2% faster than the first

Tests: test/test_gpu_train.sh (each tuned run bit-identical to the untuned one; on the emulator
a variant that rounds otherwise is refused), test/test_bench_train.sh (make bench lists the
choices). More: docs/kernels.md.
*/
#pragma once
#include <vector>
#include "common.h"

#ifdef LLMC_CUDA
template <class F> inline float gpu_time_ms(const Ctx& ctx, const F& launch) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    launch();
    float best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
        launch();
        CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        best = fminf(best, t);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return best;
}

HD inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
// each block's threads' sums of mix(mix(i) ⊕ w_i) into partial[block]
__global__ void bits_hash_kernel(uint64_t* partial, const uint32_t* w, size_t n) {
    __shared__ uint64_t sums[256];
    uint64_t h = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) h += mix64(mix64(i) ^ w[i]);
    sums[threadIdx.x] = h;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int t = 1; t < (int)blockDim.x; t++) h += sums[t];
        partial[blockIdx.x] = h;
    }
}
// A device buffer whose bytes are hashed: 4-byte aligned, a multiple of 4 bytes.
struct BitsRegion { const void* p; size_t bytes; };
inline uint64_t gpu_bits_hash(const Ctx& ctx, const std::vector<BitsRegion>& regions) {
    const int blocks = 256;
    static Buf<uint64_t> partial;
    uint64_t* part = gpu_scratch(partial, ctx, (size_t)blocks * regions.size());
    for (const BitsRegion& g : regions) {
        if ((uintptr_t)g.p % 4 || g.bytes % 4) fatal("gpu_bits_hash: a region of %zu bytes at an address that is not a multiple of 4", g.bytes);
        bits_hash_kernel<<<blocks, 256, 0, ctx.stream>>>(part, (const uint32_t*)g.p, g.bytes / 4);
        CUDA_LAUNCH_CHECK();
        part += blocks;
    }
    std::vector<uint64_t> host((size_t)blocks * regions.size());
    CUDA_CHECK(cudaMemcpyAsync(host.data(), partial.data(), host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    uint64_t h = 0;
    for (size_t i = 0; i < host.size(); i++) h += mix64(host[i] + i / blocks);
    return h;
}

struct AutotunePick {
    int first = -1, best = -1, same = 0;  // the first variant that ran (−1: none), the one picked, how many others gave its bits
    std::vector<float> ms;                // each variant's time (NaN: not timed: it did not run, or its bits differed)
};
// launch(v) queues variant v and says whether it ran (a library may refuse one it offered).
template <class R, class L>
inline AutotunePick autotune_pick(const Ctx& ctx, int n, const R& restore, const L& launch, const std::vector<BitsRegion>& outs) {
    AutotunePick p;
    p.ms.assign(n, NAN);
    uint64_t bits_first = 0;
    for (int v = 0; v < n; v++) {
        restore();
        if (!launch(v)) continue;
        const uint64_t bits = gpu_bits_hash(ctx, outs);
        if (p.first < 0) { p.first = v; bits_first = bits; }
        else if (bits != bits_first) continue;
        else p.same++;
        p.ms[v] = gpu_time_ms(ctx, [&] { launch(v); });  // (a variant that accumulates or works in place: restored next)
        if (v == p.first || p.ms[v] < 0.98f * p.ms[p.best]) p.best = v;
    }
    if (p.best >= 0) { restore(); launch(p.best); }
    return p;
}
#endif
