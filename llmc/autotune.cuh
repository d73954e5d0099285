/*
autotune.cuh — what the trainer's choices by timing share: timing a launch, hashing its bits.

Flash attention's rows a warp, wgmma and layouts, cuBLASLt's algorithm, the loss kernel's staging
and the LayerNorm backward's prefetch are each chosen once, at a step-sized first call, by one rule:

    choose by time only among variants that write the same bits.

So a choice never changes what a run computes, and runs stay bit-identical whatever the timing.

What was chosen is kept in one Autotuned per GPU, which every copy of its Ctx points to.

Main functions:
  gpu_time_ms(ctx, launch)       a warm-up, then the best of 3 by CUDA events, in ms
  gpu_bits_hash(ctx, regions)    an order-free 64-bit hash of every word the regions hold
  autotune_pick(ctx, n, restore, launch, outs)   the rule for n variants of one call: those with
                                 the first's bits are timed; the fastest wins if 2% faster
  autotune_pick_on_copy(...)     the same for an op that writes in place (the loss kernel)
  autotune_trial(...)            the same rule over several calls (flash attention's wgmma)
  autotune_forget(ctx)           every choice made again (the playgrounds)

Tests: test/test_gpu_train.sh (each tuned run bit-identical to the untuned one; on the emulator
a variant that rounds otherwise is refused), test/test_bench_train.sh (make bench lists the
choices). More: docs/kernels.md.
*/
#pragma once
#include <map>
#include <thread>
#include <tuple>
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

// Waits at most `seconds` for the work queued on ctx.stream, by polling an event (a blocking wait
// on a kernel that hangs never returns). cudaErrorNotReady: not finished by then; else the queue's
// status (an error a kernel raised, or cudaSuccess).
inline cudaError_t gpu_wait_at_most(const Ctx& ctx, double seconds) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, ctx.stream));
    const double t0 = now_seconds();
    cudaError_t r;
    while ((r = cudaEventQuery(e)) == cudaErrorNotReady && now_seconds() - t0 < seconds)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (r != cudaErrorNotReady) cudaEventDestroy(e);  // (one the GPU never reaches stays)
    return r;
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

// autotune_pick for an op that writes its input in place, run on a copy instead: each variant
// starts from the first `bytes` of `input` copied into a scratch buffer, which has `extra` bytes
// more for the op's other outputs; launch(v, scratch) runs variant v there and says whether it
// ran. *room is false (and nothing is picked) where the scratch does not fit on the GPU.
template <class L>
inline AutotunePick autotune_pick_on_copy(const Ctx& ctx, int n, const void* input, size_t bytes, size_t extra, const L& launch, bool* room) {
    void* scratch = nullptr;
    *room = cudaMalloc(&scratch, bytes + extra) == cudaSuccess;
    if (!*room) { cudaGetLastError(); return AutotunePick{}; }
    const AutotunePick p = autotune_pick(ctx, n,
        [&] { CUDA_CHECK(cudaMemcpyAsync(scratch, input, bytes, cudaMemcpyDeviceToDevice, ctx.stream)); },
        [&](int v) { return launch(v, scratch); }, {{scratch, bytes + extra}});
    CUDA_CHECK(cudaFree(scratch));
    return p;
}

// The faster of two variants (launch(0), launch(1)) known to write the same bits; ms: their times.
template <class L> inline int autotune_faster(const Ctx& ctx, const L& launch, float ms[2]) {
    for (int v = 0; v < 2; v++) ms[v] = gpu_time_ms(ctx, [&] { launch(v); });
    return ms[1] < ms[0] ? 1 : 0;
}

// A candidate tried against the default over the first `samples` large calls: each sample runs
// the candidate, then the default (whose output stays), and compares their bits; the first is
// timed. Decided when the bits differ (the default kept) or after the last sample (the candidate
// kept where it was faster).
struct AutotuneTrial {
    int samples = 0;
    float ms_default = 0, ms_candidate = 0;
    bool same = true, decided = false, kept = false;
};
// One sample; true when the trial decided at it.
template <class C, class D>
inline bool autotune_trial(const Ctx& ctx, AutotuneTrial* t, int samples, const C& candidate, const D& dflt, std::initializer_list<BitsRegion> outs) {
    const bool timed = t->samples == 0;
    if (timed) t->ms_candidate = gpu_time_ms(ctx, candidate); else candidate();
    const uint64_t bits_candidate = gpu_bits_hash(ctx, outs);
    if (timed) t->ms_default = gpu_time_ms(ctx, dflt); else dflt();
    t->same = gpu_bits_hash(ctx, outs) == bits_candidate;
    t->samples++;
    if (t->same && t->samples < samples) return false;
    t->decided = true;
    t->kept = t->same && t->ms_candidate < t->ms_default;
    return true;
}

// cuBLASLt's algorithm for one product (matmul.cuh), by dtypes, shape, options and alignments.
using LtKey = std::tuple<int, int, int, int, int, bool, bool, int, int, int, bool, bool, int, uint32_t, uint32_t, uint32_t, bool, int>;
struct LtAlgo { bool any; cublasLtMatmulAlgo_t algo; };  // (any: false where none ran)

// Everything a GPU's run has chosen or learned, shared by every copy of its Ctx.
struct Autotuned {
    int flash_rows[3] = {};             // flash attention, by pass: the rows a warp timing kept (0: not yet)
    AutotuneTrial flash_wgmma[3];       // --flash-wgmma auto's trial, by pass
    int flash_forward_layout = -1;      // --flash-forward-producer auto: -1 not yet, else the layout kept (flash_launch.cuh)
    int flash_backward_layout = -1;     // --flash-backward-producer auto: the same for the fused backward
    int classifier_staged = -1;         // --classifier-staged auto: -1 not yet, else the kernel kept (kernel_options.h)
    int layernorm_prefetch = -1;        // --layernorm-prefetch auto: -1 not yet, else 0 or 1 (layernorm.cuh)
    std::map<LtKey, LtAlgo> lt_algos;   // each product's cuBLASLt algorithm
    std::map<std::tuple<int, int, int, int, int, bool>, int> gemm_layouts;  // --matmul-wgmma auto: our GEMM's layout by product (matmul_hopper.cuh)
    bool fp8_dequantize = false;        // cuBLASLt refused FP8: every FP8 product dequantized (matmul.cuh)
    long fp8_dequantized_products = 0;  // the products that took that path
};
inline Autotuned* autotuned_new() { return new Autotuned(); }
// Forgets what the timing chose (the playgrounds measure the trainer's first calls again).
inline void autotune_forget(const Ctx& ctx) {
    const bool dequantize = ctx.tuned->fp8_dequantize;
    *ctx.tuned = Autotuned{};
    ctx.tuned->fp8_dequantize = dequantize;
}
#endif
