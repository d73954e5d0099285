/*
adamw.cuh — the AdamW update over fp32 master weights (Loshchilov & Hutter), as torch.optim.AdamW.

For step t ≥ 1, gradient g (already multiplied by grad_scale, the clipping factor):
  m = β1·m + (1−β1)·g            v = β2·v + (1−β2)·g²
  m̂ = m / (1−β1ᵗ)                v̂ = v / (1−β2ᵗ)
  θ = θ − lr·( m̂ / (√v̂ + ε) + wd·θ )
wd is the weight decay: like llm.c and nanoGPT it applies to the 2-D weights only, not to
biases and LayerNorm parameters. One call updates a whole unit (a block's 12 tensors), with the
runs of elements that decay (DecayRuns) — one launch per unit rather than one per tensor.

Precision. θ (the master), m and v are fp32 always; the gradient has the run's dtype T. With
T = bf16 (fp16) the model reads a bf16 (fp16) working copy of the weights, which the update
writes too: copy = T(θ) (round to nearest even), so the copy is always the rounded master.
(fp16's loss scale reaches the update through grad_scale: clip factor / S, loss_scale.h.) With fp32
the parameters are their own master and copy is null.

Memory per parameter: fp32 — θ 4 + gradient 4 + m, v 8 = 16 bytes; bf16, fp16 — copy 2 + gradient 2
+ master, m, v 12 = 16 bytes. Both are the ZeRO table's 16Ψ (data_parallel.h shards them).

CUDA: a thread takes 4 consecutive elements where n and the pointers allow, else one. The
formula is written once (adamw_element) and called by both loops.
Tests: the model against PyTorch's AdamW (test/test_vs_pytorch.py), test/test_ops.cpp,
test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"

// The elements of an update's span that weight decay applies to: up to MAX runs [begin, end),
// in order (a GPT-2 block, updated in one call, has 4: qkvw, attprojw, fcw, fcprojw). The
// other elements (biases, LayerNorm) get wd = 0.
struct DecayRuns {
    static const int MAX = 8;
    int n = 0;
    size_t begin[MAX] = {}, end[MAX] = {};
    void add(size_t b, size_t e) {  // appends [b, e), merged with the last run if they touch
        if (e <= b) return;
        if (n > 0 && end[n - 1] == b) { end[n - 1] = e; return; }
        if (n == MAX) fatal("adamw: more than %d weight-decay runs in one update", MAX);
        begin[n] = b; end[n] = e; n++;
    }
};
HD inline bool decays(const DecayRuns& r, size_t i) {
    for (int k = 0; k < r.n; k++)
        if (i >= r.begin[k] && i < r.end[k]) return true;
    return false;
}

// One element's update, the formula above: m and v in place, the new θ returned. The CPU loop
// and the CUDA kernel below both call it, so they differ only in how they visit the elements.
HD inline float adamw_element(float p, float g, float& m, float& v, float lr, float beta1, float beta2, float eps,
                              float wd, float bc1, float bc2) {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float mhat = m / bc1, vhat = v / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
}

template <class floatX>
inline void adamw_update_cpu(float* params, const floatX* grads, float* m, float* v, floatX* copy, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, const DecayRuns& decay, int t,
                             float grad_scale) {
    const float bc1 = 1.0f - powf(beta1, (float)t);
    const float bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float wd_i = decays(decay, i) ? wd : 0.0f;
        params[i] = adamw_element(params[i], to_f(grads[i]) * grad_scale, m[i], v[i], lr, beta1, beta2, eps, wd_i, bc1, bc2);
        if (copy) copy[i] = from_f<floatX>(params[i]);
    }
}

#ifdef LLMC_CUDA
// A thread updates V consecutive elements, each array moved in one load and one store of V
// elements (adamw_update: V = 4 where n and the pointers allow, else 1).
template <class floatX, int V>
__global__ void adamw_kernel(float* params, const floatX* grads, float* m, float* v, floatX* copy, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, DecayRuns decay, float bc1, float bc2, float grad_scale) {
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < n; i += (size_t)gridDim.x * blockDim.x * V) {
        Pack<float, V> p = load_pack<V>(params + i), mi = load_pack<V>(m + i), vi = load_pack<V>(v + i);  // each read once, written once
        const Pack<floatX, V> g = load_pack<V>(grads + i);
        Pack<floatX, V> c;
        for (int k = 0; k < V; k++) {
            const float wd_k = decays(decay, i + k) ? wd : 0.0f;
            p.v[k] = adamw_element(p.v[k], to_f(g.v[k]) * grad_scale, mi.v[k], vi.v[k], lr, beta1, beta2, eps, wd_k, bc1, bc2);
            c.v[k] = from_f<floatX>(p.v[k]);
        }
        store_pack<V>(m + i, mi);
        store_pack<V>(v + i, vi);
        store_pack<V>(params + i, p);
        if (copy) store_pack<V>(copy + i, c);
    }
}
#endif

// params: the fp32 master; copy: its T working copy to write (null when the master is the
// parameters). wd applies to the elements in `decay`.
template <class floatX>
inline void adamw_update(const Ctx& ctx, float* params, const floatX* grads, float* m, float* v, NoDeduce<floatX>* copy, size_t n,
                         float lr, float beta1, float beta2, float eps, float wd, const DecayRuns& decay, int t,
                         float grad_scale) {
    // bytes: grad in; master, m, v in and out; the working copy out
    OpScope prof(ctx, 0, (double)n * (sizeof(floatX) + 24 + (copy ? sizeof(floatX) : 0)), "adamw");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
        constexpr int V = 4;
        const bool packs = pack_width<float>(n, {params, m, v}) == V && (uintptr_t)grads % sizeof(Pack<floatX, V>) == 0 &&
                           (uintptr_t)copy % sizeof(Pack<floatX, V>) == 0;  // (the 16-bit arrays: 8-byte packs)
        if (packs)
            adamw_kernel<floatX, V><<<grid_for(n / V), 256, 0, ctx.stream>>>(params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, decay, bc1, bc2, grad_scale);
        else
            adamw_kernel<floatX, 1><<<grid_for(n), 256, 0, ctx.stream>>>(params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, decay, bc1, bc2, grad_scale);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    adamw_update_cpu(params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, decay, t, grad_scale);
}
// The same with wd on every element (one tensor).
template <class floatX>
inline void adamw_update(const Ctx& ctx, float* params, const floatX* grads, float* m, float* v, NoDeduce<floatX>* copy, size_t n,
                         float lr, float beta1, float beta2, float eps, float wd, int t, float grad_scale) {
    DecayRuns all;
    all.add(0, n);
    adamw_update(ctx, params, grads, m, v, copy, n, lr, beta1, beta2, eps, wd, all, t, grad_scale);
}
