/*
global_norm.cuh — the squared L2 norm of the gradient, and the clipping factor from it.

  norm² = Σ_i g_i²      (summed in double over fixed chunks of 2^16, chunks summed in order)
  clip factor = max_norm / norm  if norm > max_norm > 0, else 1

The op returns the *squared* sum of the elements it is given, so a parallel layout can add the
partial sums of its shards (an all-reduce) before the square root. The chunking is fixed, not
per thread, so the result does not depend on the thread count.

Dtype T (float | bf16): the gradient's; the sum is double either way.

CUDA: the same fixed chunks, one block per chunk, summed in double inside the block; the
per-chunk sums come back to the host and are added there in order.
Tests: test/test_ops.cpp (against a plain double loop), test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"

template <class T> inline double global_norm_squared_cpu(const T* g, size_t n) {
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
template <class T> __global__ void norm_squared_chunks_kernel(double* part, const T* g, size_t n, size_t chunk) {
    __shared__ double shared[256];
    size_t c = blockIdx.x, end = min(n, (c + 1) * chunk);
    double s = 0.0;
    for (size_t i = c * chunk + threadIdx.x; i < end; i += blockDim.x) { double x = to_f(g[i]); s += x * x; }
    shared[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[c] = shared[0];
}
#endif

template <class T> inline double global_norm_squared(const Ctx& ctx, const T* g, size_t n) {
    OpScope prof(ctx, 0, (double)n * sizeof(T), "gradient norm");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const size_t chunk = 1 << 16, nchunks = ceil_div(n, chunk);
        if (nchunks == 0) return 0.0;
        static Buf<double> part_buf;
        double* part = gpu_scratch(part_buf, ctx, nchunks);
        norm_squared_chunks_kernel<<<(unsigned)nchunks, 256, 0, ctx.stream>>>(part, g, n, chunk);
        CUDA_LAUNCH_CHECK();
        std::vector<double> host(nchunks);
        ctx_copy(ctx, host.data(), part, nchunks * sizeof(double));
        double total = 0.0;
        for (double p : host) total += p;
        return total;
    }
#endif
    return global_norm_squared_cpu(g, n);
}

inline float grad_clip_factor(float norm, float max_norm) {
    return (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
}
