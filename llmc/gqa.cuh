/*
gqa.cuh — grouped-query attention (Ainslie et al., 2023; Llama 2 70B, Llama 3) on top of the
ordinary attention kernels: NKV key/value heads, each shared by G = NH/NKV query heads.

qkv's product gives each position a row [q (NH heads) | k (NKV heads) | v (NKV heads)] of hd
features a head, (NH + 2·NKV)·hd wide. The attention kernels (attention.cuh, and the ring of
context_parallel.h) read rows [q | k | v] of NH heads each, so query head h must find its key and
value head h / G there. This file makes such rows and takes their gradient back:

  expand:  out[q] = q,   out[k head h] = k[h / G],   out[v head h] = v[h / G]
  reduce:  dq = dout[q], dk[j] = Σ_{h = jG … jG+G−1} dout[k head h]   (dv the same), summed in
           fp32 in the order of h and rounded once, written (not added)

The expanded rows cost 2·(NH − NKV)·hd elements a position, in one block's buffer that the
backward makes again (model.h); the parameters and the kept activations are the grouped ones.
(A kernel that reads head h / G itself would need no copy: the next step for the flash kernels.)
With tensor parallelism a rank holds NH/tp query heads and NKV/tp key/value heads, whole groups,
so it expands its own rows the same way. G = 1 is the identity (the model then skips the copy).
Dtype T (float | bf16): copies are exact; the reduce's sums are rounded to T once.

Tests: test/test_ops.cpp (expand against its definition, reduce as expand's transpose:
⟨expand(x), y⟩ = ⟨x, reduce(y)⟩; bf16 rounded once), test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include "common.h"
#include "profiler.h"

// Where element e of an expanded row (3·NH·hd) comes from in a grouped row ((NH + 2·NKV)·hd).
HD inline size_t gqa_source(size_t e, int NH, int NKV, int hd) {
    const size_t q = (size_t)NH * hd;
    if (e < q) return e;
    const size_t part = (e - q) / q, in = (e - q) % q;  // part 0: k, 1: v; `in`: head h's feature
    const int G = NH / NKV, h = (int)(in / hd);
    return q + part * (size_t)NKV * hd + (size_t)(h / G) * hd + in % hd;
}
// Element e of a grouped row's gradient: dq's element, or the sum over the group's heads, in fp32.
template <class T> HD inline float gqa_reduced(const T* dout_row, size_t e, int NH, int NKV, int hd) {
    const size_t q = (size_t)NH * hd, kv = (size_t)NKV * hd;
    if (e < q) return to_f(dout_row[e]);
    const size_t part = (e - q) / kv, in = (e - q) % kv;
    const int G = NH / NKV, j = (int)(in / hd);
    float s = 0.0f;
    for (int h = j * G; h < j * G + G; h++) s += to_f(dout_row[q + part * q + (size_t)h * hd + in % hd]);
    return s;
}

template <class T> inline void gqa_expand_cpu(T* out, const T* qkv, size_t N, int NH, int NKV, int hd) {
    const size_t wide = 3 * (size_t)NH * hd, narrow = (size_t)(NH + 2 * NKV) * hd;
    #pragma omp parallel for
    for (size_t n = 0; n < N; n++)
        for (size_t e = 0; e < wide; e++) out[n * wide + e] = qkv[n * narrow + gqa_source(e, NH, NKV, hd)];
}
template <class T> inline void gqa_reduce_cpu(T* dqkv, const T* dout, size_t N, int NH, int NKV, int hd) {
    const size_t wide = 3 * (size_t)NH * hd, narrow = (size_t)(NH + 2 * NKV) * hd;
    #pragma omp parallel for
    for (size_t n = 0; n < N; n++)
        for (size_t e = 0; e < narrow; e++) dqkv[n * narrow + e] = from_f<T>(gqa_reduced(dout + n * wide, e, NH, NKV, hd));
}

#ifdef LLMC_CUDA
// one thread per output element: memory-bound copies (the reduce reads G elements for each)
template <class T> __global__ void gqa_expand_kernel(T* out, const T* qkv, size_t N, int NH, int NKV, int hd) {
    const size_t wide = 3 * (size_t)NH * hd, narrow = (size_t)(NH + 2 * NKV) * hd;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * wide; i += (size_t)gridDim.x * blockDim.x)
        out[i] = qkv[(i / wide) * narrow + gqa_source(i % wide, NH, NKV, hd)];
}
template <class T> __global__ void gqa_reduce_kernel(T* dqkv, const T* dout, size_t N, int NH, int NKV, int hd) {
    const size_t wide = 3 * (size_t)NH * hd, narrow = (size_t)(NH + 2 * NKV) * hd;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * narrow; i += (size_t)gridDim.x * blockDim.x)
        dqkv[i] = from_f<T>(gqa_reduced(dout + (i / narrow) * wide, i % narrow, NH, NKV, hd));
}
#endif

// out (N × 3·NH·hd) ← the N grouped rows of qkv (N × (NH + 2·NKV)·hd), each k, v head repeated.
template <class T> inline void gqa_expand(const Ctx& ctx, T* out, const T* qkv, size_t N, int NH, int NKV, int hd) {
    OpScope prof(ctx, 0, (double)N * (4 * NH + 2 * NKV) * hd * sizeof(T), "gqa expand");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        gqa_expand_kernel<<<grid_for(N * 3 * NH * hd), 256, 0, ctx.stream>>>(out, qkv, N, NH, NKV, hd);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    gqa_expand_cpu(out, qkv, N, NH, NKV, hd);
}
// dqkv (N grouped rows) ← the gradient of gqa_expand's output, dout (N × 3·NH·hd).
template <class T> inline void gqa_reduce(const Ctx& ctx, T* dqkv, const T* dout, size_t N, int NH, int NKV, int hd) {
    OpScope prof(ctx, 0, (double)N * (4 * NH + 2 * NKV) * hd * sizeof(T), "gqa reduce");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        gqa_reduce_kernel<<<grid_for(N * (NH + 2 * NKV) * hd), 256, 0, ctx.stream>>>(dqkv, dout, N, NH, NKV, hd);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    gqa_reduce_cpu(dqkv, dout, N, NH, NKV, hd);
}
