/*
gelu.cuh — GELU, tanh approximation (GPT-2's, torch's approximate='tanh').

  forward:  y = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
  backward: dy/dx = ½(1 + tanh u) + ½·x·(1 − tanh² u)·√(2/π)·(1 + 3·0.044715·x²)
            dinp = dout · dy/dx            (written, not added: its input is a scratch buffer)
Dtype T (float | bf16 | fp16): computed in fp32, each output rounded to T once. The backward's
dout may be T or fp32 (matmul.cuh hands it the product before the GELU unrounded, so that dinp
is rounded once). gelu_fast_of and gelu_backward_fast_of: the same by a sigmoid, for our GEMM's
epilogue (fewer instructions, other bits).

Tests: test/test_ops.cpp (finite differences), test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)
// GELU(x), and dout·GELU'(x): each op below (and fp8.cuh's quantize) computes through these two
HD inline float gelu_of(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))); }
HD inline float gelu_backward_of(float x, float dout) {
    const float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return grad * dout;
}
template <class floatX> inline void gelu_forward_cpu(floatX* out, const floatX* inp, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = from_f<floatX>(gelu_of(to_f(inp[i])));
}
template <class floatX, class G> inline void gelu_backward_cpu(floatX* dinp, const floatX* inp, const G* dout, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) dinp[i] = from_f<floatX>(gelu_backward_of(to_f(inp[i]), to_f(dout[i])));
}
#ifdef LLMC_CUDA
// The same two through a sigmoid, ½(1 + tanh u) = s = 1 / (1 + e^(−2u)) and 1 − tanh² u =
// 4s(1 − s), by ex2.approx and a fast division: a handful of instructions where tanhf takes
// about 20, within a few fp32 ulps of the two above (gpucheck_ops, group gemm). Our GEMM's
// epilogue (matmul_hopper.cuh) runs them; every other kernel keeps the two above.
__device__ inline float gelu_fast_of(float x) {
    const float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return div_fast(x, 1.0f + exp2_ftz(-2.0f * LOG2E * u));
}
__device__ inline float gelu_backward_fast_of(float x, float dout) {
    const float x2 = x * x, u = GELU_SCALE * (x + 0.044715f * x2 * x);
    const float s = div_fast(1.0f, 1.0f + exp2_ftz(-2.0f * LOG2E * u));
    return dout * (s + 2.0f * x * s * (1.0f - s) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x2));
}
template <class floatX> __global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<floatX>(gelu_of(to_f(inp[i])));
}
template <class floatX, class G> __global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const G* dout, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = from_f<floatX>(gelu_backward_of(to_f(inp[i]), to_f(dout[i])));
}
#endif
template <class floatX> inline void gelu_forward(const Ctx& ctx, floatX* out, const floatX* inp, size_t N) {
    OpScope prof(ctx, 0, 2.0 * N * sizeof(floatX), "gelu forward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        gelu_forward_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(out, inp, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    gelu_forward_cpu(out, inp, N);
}
template <class floatX, class G> inline void gelu_backward(const Ctx& ctx, floatX* dinp, const floatX* inp, const G* dout, size_t N) {
    OpScope prof(ctx, 0, N * (2.0 * sizeof(floatX) + sizeof(G)), "gelu backward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        gelu_backward_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(dinp, inp, dout, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    gelu_backward_cpu(dinp, inp, dout, N);
}
