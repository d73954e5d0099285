/*
adamw.cuh — the AdamW update over fp32 master weights (Loshchilov & Hutter), as torch.optim.AdamW.

For step t ≥ 1, gradient g (already multiplied by grad_scale, the clipping factor):
  m = β1·m + (1−β1)·g            v = β2·v + (1−β2)·g²
  m̂ = m / (1−β1ᵗ)                v̂ = v / (1−β2ᵗ)
  θ = θ − lr·( m̂ / (√v̂ + ε) + wd·θ )
wd is the weight decay of this tensor: the caller passes 0 for biases, LayerNorm parameters
(1-D tensors) and — like llm.c and nanoGPT — applies it to the 2-D weights only.

Precision. θ (the master), m and v are fp32 always; the gradient has the run's dtype T. With
T = bf16 the model reads a bf16 working copy of the weights, which the update writes too:
copy = bf16(θ) (round to nearest even), so the copy is always the rounded master. With fp32
the parameters are their own master and copy is null.

Memory per parameter: fp32 — θ 4 + gradient 4 + m, v 8 = 16 bytes; bf16 — copy 2 + gradient 2
+ master, m, v 12 = 16 bytes. Both are the ZeRO table's 16Ψ (data_parallel.h shards them).

CUDA: the same formula, one thread per element.
Tests: the model against PyTorch's AdamW (test/test_vs_pytorch.py), test/test_ops.cpp,
test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"

template <class T>
inline void adamw_update_cpu(float* params, const T* grads, float* m, float* v, T* copy, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, int t,
                             float grad_scale) {
    const float bc1 = 1.0f - powf(beta1, (float)t);
    const float bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = to_f(grads[i]) * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * params[i]);
        if (copy) copy[i] = from_f<T>(params[i]);
    }
}

#ifdef LLMC_CUDA
template <class T>
__global__ void adamw_kernel(float* params, const T* grads, float* m, float* v, T* copy, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2, float grad_scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = to_f(grads[i]) * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = params[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * params[i]);
        params[i] = p;
        if (copy) copy[i] = from_f<T>(p);
    }
}
#endif

// params: the fp32 master; copy: its T working copy to write (null when the master is the parameters)
template <class T>
inline void adamw_update(const Ctx& ctx, float* params, const T* grads, float* m, float* v, NoDeduce<T>* copy, size_t n,
                         float lr, float beta1, float beta2, float eps, float wd, int t,
                         float grad_scale) {
    // bytes: grad in; master, m, v in and out; the working copy out
    OpScope prof(ctx, 0, (double)n * (sizeof(T) + 24 + (copy ? sizeof(T) : 0)), "adamw");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
        adamw_kernel<<<grid_for(n), 256, 0, ctx.stream>>>(params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    adamw_update_cpu(params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, t, grad_scale);
}
