/*
swiglu.cuh — SwiGLU (Shazeer, 2020), the MLP nonlinearity of Llama-style models: out = silu(a) ⊙ b,
where one product gives each row's [a | b] (H each: the gate and the up projection fused into
one matmul, x·[W1; W3]ᵀ, whose output rows are 2H wide). The MLP is then
out = (silu(x·W1ᵀ) ⊙ (x·W3ᵀ))·W2ᵀ, with H = 4C·2/3 (rounded up to a multiple) for GPT-2's FLOPs.

  forward:  out = a·σ(a)·b                       σ(a) = 1/(1 + e^(−a)),  silu(a) = a·σ(a)
  backward: da = dout·b·σ(a)·(1 + a·(1 − σ(a)))  (silu'(a))
            db = dout·a·σ(a)
            written, not added, into the row's [da | db]: its input is a scratch buffer
N rows: inp is N × 2H, out and dout N × H, dinp N × 2H. With tensor parallelism a rank holds
its H/tp of the gate's features and the same H/tp of the up projection's (model.h: W1 and W3
split in 2 groups, like qkv's 3), so its rows are [its a | its b] and the op runs unchanged.
Dtype T (float | bf16 | fp16): computed in fp32, each output rounded to T once.

Tests: test/test_ops.cpp (finite differences; bf16 rounded once), test/gpucheck_ops.cu (CUDA vs
CPU).
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"

// silu(a)·b and its two partial derivatives, in fp32 (both backends call these: one formula)
HD inline float swiglu_value(float a, float b) { return a / (1.0f + expf(-a)) * b; }
HD inline void swiglu_grads(float a, float b, float dout, float* da, float* db) {
    const float s = 1.0f / (1.0f + expf(-a));
    *da = dout * b * s * (1.0f + a * (1.0f - s));
    *db = dout * a * s;
}

template <class floatX> inline void swiglu_forward_cpu(floatX* out, const floatX* inp, size_t N, size_t H) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < H; j++)
            out[i * H + j] = from_f<floatX>(swiglu_value(to_f(inp[i * 2 * H + j]), to_f(inp[i * 2 * H + H + j])));
}

template <class floatX> inline void swiglu_backward_cpu(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, size_t H) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < H; j++) {
            float da, db;
            swiglu_grads(to_f(inp[i * 2 * H + j]), to_f(inp[i * 2 * H + H + j]), to_f(dout[i * H + j]), &da, &db);
            dinp[i * 2 * H + j] = from_f<floatX>(da);
            dinp[i * 2 * H + H + j] = from_f<floatX>(db);
        }
}

#ifdef LLMC_CUDA
// one thread per output element (i, j): memory-bound, 3 reads and 2 writes of floatX a feature backward
template <class floatX> __global__ void swiglu_forward_kernel(floatX* out, const floatX* inp, size_t N, size_t H) {
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < N * H; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / H, j = k % H;
        out[k] = from_f<floatX>(swiglu_value(to_f(inp[i * 2 * H + j]), to_f(inp[i * 2 * H + H + j])));
    }
}
template <class floatX> __global__ void swiglu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, size_t H) {
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < N * H; k += (size_t)gridDim.x * blockDim.x) {
        const size_t i = k / H, j = k % H;
        float da, db;
        swiglu_grads(to_f(inp[i * 2 * H + j]), to_f(inp[i * 2 * H + H + j]), to_f(dout[k]), &da, &db);
        dinp[i * 2 * H + j] = from_f<floatX>(da);
        dinp[i * 2 * H + H + j] = from_f<floatX>(db);
    }
}
#endif

template <class floatX> inline void swiglu_forward(const Ctx& ctx, floatX* out, const floatX* inp, size_t N, size_t H) {
    OpScope prof(ctx, 0, 3.0 * N * H * sizeof(floatX), "swiglu forward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        swiglu_forward_kernel<<<grid_for(N * H), 256, 0, ctx.stream>>>(out, inp, N, H);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    swiglu_forward_cpu(out, inp, N, H);
}
template <class floatX> inline void swiglu_backward(const Ctx& ctx, floatX* dinp, const floatX* inp, const floatX* dout, size_t N, size_t H) {
    OpScope prof(ctx, 0, 5.0 * N * H * sizeof(floatX), "swiglu backward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        swiglu_backward_kernel<<<grid_for(N * H), 256, 0, ctx.stream>>>(dinp, inp, dout, N, H);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    swiglu_backward_cpu(dinp, inp, dout, N, H);
}
