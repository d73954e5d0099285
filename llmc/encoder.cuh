/*
encoder.cuh — token + position embedding.

  forward:  out[b,t,:] = wte[tok[b,t], :] + wpe[t, :]
  backward: dwte[tok[b,t], :] += dout[b,t,:]      dwpe[t, :] += dout[b,t,:]

The CUDA forward moves 16 bytes per load and store where C and the pointers allow (common.h:
Pack). The backward is a scatter-add into dwte; the CPU loop runs (b,t) in order so the sum is
deterministic. The CUDA backward is deterministic without atomics: the host (which has the
tokens anyway) groups the positions by token id, and one thread per (token, channel) sums its
positions in order; dwpe is a sum over b, one thread per (t, channel). So the backward takes
the tokens in *host* memory. Parameter gradients accumulate (+=) so gradient accumulation
needs no copy. Templated on the dtype T (float | bf16, common.h): each sum is formed in fp32
and rounded once when it is added to the gradient (on the CPU through F32View).
dwte has V rows (V ≥ every token id).
Tests: test/test_ops.cpp (finite differences of the forward), test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <algorithm>
#include "common.h"
#include "profiler.h"

template <class T>
inline void encoder_forward_cpu(T* out, const int* tok, const T* wte, const T* wpe, int B, int T_, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T_; t++) {
            T* o = out + ((size_t)b * T_ + t) * C;
            const T* te = wte + (size_t)tok[b * T_ + t] * C;
            const T* pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = from_f<T>(to_f(te[c]) + to_f(pe[c]));
        }
}

// (fp32; the dtype wrapper below gives it fp32 views of bf16 buffers)
inline void encoder_backward_cpu(float* dwte, float* dwpe, const float* dout, const int* tok,
                                 int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            float* dte = dwte + (size_t)tok[b * T + t] * C;
            float* dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) { dte[c] += d[c]; dpe[c] += d[c]; }
        }
}

#ifdef LLMC_CUDA
// one thread per V consecutive channels of a (b, t) row: V = 16 bytes where C and the pointers allow
template <class T, int V>
__global__ void encoder_forward_kernel(T* out, const int* tok, const T* wte, const T* wpe, int B, int T_, int C) {
    const size_t n = (size_t)B * T_ * C / V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t bt = i / (C / V);
        const int c = (int)(i % (C / V)) * V, t = (int)(bt % T_);
        Pack<T, V> e = load_pack<V>(wte + (size_t)tok[bt] * C + c), p = load_pack<V>(wpe + (size_t)t * C + c), o;
        for (int k = 0; k < V; k++) o.v[k] = from_f<T>(to_f(e.v[k]) + to_f(p.v[k]));
        store_pack<V>(out + bt * C + c, o);
    }
}
// one thread per (unique token u, channel c): dwte[token_u, c] += Σ dout[pos, c] over its positions, in order
template <class T>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int* uniq, const int* start, const int* pos, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = start[u]; k < start[u + 1]; k++) s += to_f(dout[(size_t)pos[k] * C + c]);
    T* d = dwte + (size_t)uniq[u] * C + c;
    *d = from_f<T>(to_f(*d) + s);
}
template <class T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
    int t = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += to_f(dout[((size_t)b * T_ + t) * C + c]);
    T* d = dwpe + (size_t)t * C + c;
    *d = from_f<T>(to_f(*d) + s);
}

template <class T>
inline void encoder_backward_cuda(const Ctx& ctx, T* dwte, T* dwpe, const T* dout, const int* tok_host, int B, int T_, int C) {
    // group positions by token on the host: uniq[u], positions pos[start[u] .. start[u+1])
    int BT = B * T_;
    std::vector<int> order(BT);
    for (int i = 0; i < BT; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tok_host[a] < tok_host[b]; });
    std::vector<int> idx;  // [uniq (U) | start (U+1) | pos (BT)]
    std::vector<int> uniq, start;
    for (int i = 0; i < BT; i++)
        if (i == 0 || tok_host[order[i]] != tok_host[order[i - 1]]) { uniq.push_back(tok_host[order[i]]); start.push_back(i); }
    start.push_back(BT);
    int U = (int)uniq.size();
    idx.insert(idx.end(), uniq.begin(), uniq.end());
    idx.insert(idx.end(), start.begin(), start.end());
    idx.insert(idx.end(), order.begin(), order.end());
    // uploaded without waiting for the GPU (common.h's HostStage); sized for any U ≤ BT, so the
    // buffer a queued kernel may still read is never reallocated
    static Buf<int> dev_idx;
    static HostStage stage;
    int* d = gpu_scratch(dev_idx, ctx, 3 * (size_t)BT + 1);
    stage_upload(ctx, stage, d, idx.data(), idx.size() * sizeof(int));
    dim3 grid_wte(U, ceil_div(C, 128)), grid_wpe(ceil_div(C, 128), T_);
    encoder_backward_wte_kernel<<<grid_wte, 128, 0, ctx.stream>>>(dwte, dout, d, d + U, d + 2 * U + 1, C);
    encoder_backward_wpe_kernel<<<grid_wpe, 128, 0, ctx.stream>>>(dwpe, dout, B, T_, C);
    CUDA_LAUNCH_CHECK();
}
#endif

template <class T>
inline void encoder_forward(const Ctx& ctx, T* out, const int* tok, const T* wte, const T* wpe, int B, int T_, int C) {
    // bytes: the B·T rows of wte, T rows of wpe, the tokens; the output
    OpScope prof(ctx, 0, (2.0 * B * T_ + T_) * C * sizeof(T) + 4.0 * B * T_, "encoder forward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<T>;  // (the launch rewriting for the emulator wants no nested <>)
        if (pack_width<T>(C, {out, wte, wpe}) > 1)
            encoder_forward_kernel<T, P><<<grid_for((size_t)B * T_ * C / P), 256, 0, ctx.stream>>>(out, tok, wte, wpe, B, T_, C);
        else
            encoder_forward_kernel<T, 1><<<grid_for((size_t)B * T_ * C), 256, 0, ctx.stream>>>(out, tok, wte, wpe, B, T_, C);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    encoder_forward_cpu(out, tok, wte, wpe, B, T_, C);
}
// tok_host: the tokens in host memory.
template <class T>
inline void encoder_backward(const Ctx& ctx, T* dwte, T* dwpe, const T* dout, const int* tok_host, int B, int T_, int C,
                             size_t V) {
    // bytes: dout; the touched rows of dwte (≤ B·T) and dwpe read and written
    OpScope prof(ctx, 0, (3.0 * B * T_ + 2.0 * T_) * C * sizeof(T), "encoder backward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { encoder_backward_cuda(ctx, dwte, dwpe, dout, tok_host, B, T_, C); return; }
#endif
    (void)V;
    F32View<T> te(dwte, V * C), pe(dwpe, (size_t)T_ * C), d(dout, (size_t)B * T_ * C);
    encoder_backward_cpu(te.p, pe.p, d.p, tok_host, B, T_, C);
    te.store(); pe.store();
}
