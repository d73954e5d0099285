/*
attention.cuh — causal multi-head self-attention that never stores the T×T matrix.

Layout: qkv is (B, T, 3C) with q = [0, C), k = [C, 2C), v = [2C, 3C); head h owns channels
[h·hs, (h+1)·hs) of each, hs = C/NH. out is (B, T, C), lse is (B, NH, T).

  forward, per (b, h, t):  s_j = q_t·k_j / √hs  for j ≤ t        (causal)
                           lse_t = log Σ_j exp(s_j)               (saved: one float per row)
                           out_t = Σ_j exp(s_j − lse_t) · v_j
  backward (the flash-attention backward, which recomputes p from lse instead of storing it):
                           p_j  = exp(s_j − lse_t)
                           D_t  = dout_t · out_t                  (= Σ_j p_j (dout_t·v_j))
                           dv_j += p_j · dout_t
                           ds_j = p_j · (dout_t·v_j − D_t)
                           dq_t += ds_j · k_j / √hs,   dk_j += ds_j · q_t / √hs

The log-sum-exp is the forward's second output because ring attention (context parallelism)
merges partial attention over key blocks with it: out = Σ_blocks exp(lse_blk − lse) · out_blk.
Memory is O(B·T·C) for any T; the CPU loops do the same O(T²) work as the math above.
(b, h) pairs are independent and own disjoint slices of dqkv: parallel and deterministic.

Dtype T (float | bf16): qkv, out and their gradients are T, lse is fp32, all math is fp32. The
CPU runs the fp32 loops below on F32View copies (each output rounded once).

CUDA: the same online-softmax algorithm, one warp per query row, lanes splitting the
head dimension; never a T×T buffer. The backward is split so that nothing is accumulated by
two warps (deterministic, no atomics): D_t first, then one warp per query row for dq and one
warp per key row for dk and dv, each recomputing p from lse. (The bf16 tensor-core flash
attention is the next step; this is the exact path, fp32 math for either dtype.)

Tests: test/test_ops.cpp (finite differences, lse against a direct evaluation),
test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"

// (fp32; the dtype wrapper attention_forward gives it fp32 views of bf16 buffers)
inline void attention_forward_cpu(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t C3 = 3 * (size_t)C;
    #pragma omp parallel
    {
        std::vector<float> s(T);
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                    float m = -INFINITY;
                    for (int j = 0; j <= t; j++) {
                        const float* k = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
                        float d = 0.0f;
                        for (int i = 0; i < hs; i++) d += q[i] * k[i];
                        s[j] = d * scale;
                        if (s[j] > m) m = s[j];
                    }
                    float sum = 0.0f;
                    for (int j = 0; j <= t; j++) sum += expf(s[j] - m);
                    float l = m + logf(sum);
                    lse[((size_t)b * NH + h) * T + t] = l;
                    float* o = out + ((size_t)b * T + t) * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        float p = expf(s[j] - l);
                        const float* v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * hs;
                        for (int i = 0; i < hs; i++) o[i] += p * v[i];
                    }
                }
    }
}

// dqkv is written (not accumulated): it is a scratch buffer, consumed by the qkv matmul backward.
inline void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++)
                for (int part = 0; part < 3; part++) {
                    float* d = dqkv + ((size_t)b * T + t) * C3 + part * C + h * hs;
                    for (int i = 0; i < hs; i++) d[i] = 0.0f;
                }
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                const float* dO = dout + ((size_t)b * T + t) * C + h * hs;
                const float* O = out + ((size_t)b * T + t) * C + h * hs;
                float* dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                float l = lse[((size_t)b * NH + h) * T + t];
                float D = 0.0f;
                for (int i = 0; i < hs; i++) D += dO[i] * O[i];
                for (int j = 0; j <= t; j++) {
                    const float* k = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
                    const float* v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * hs;
                    float* dk = dqkv + ((size_t)b * T + j) * C3 + C + h * hs;
                    float* dv = dqkv + ((size_t)b * T + j) * C3 + 2 * C + h * hs;
                    float sc = 0.0f, dp = 0.0f;
                    for (int i = 0; i < hs; i++) { sc += q[i] * k[i]; dp += dO[i] * v[i]; }
                    float p = expf(sc * scale - l);
                    float ds = p * (dp - D) * scale;
                    for (int i = 0; i < hs; i++) {
                        dv[i] += p * dO[i];
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
}

#ifdef __CUDACC__
static const int ATT_MAX_PER_LANE = 8;  // head size up to 256

// r[k] = p[lane + 32k] for the head channels this lane holds (0 past the head size)
template <class T> __device__ inline void load_lanes(float* r, const T* p, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; r[k] = i < hs ? to_f(p[i]) : 0.0f; }
}
template <class T> __device__ inline void store_lanes(T* p, const float* r, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) p[i] = from_f<T>(r[k]); }
}

// one warp per (b, h, t); lane i holds head channels i, i+32, ...
template <class T>
__global__ void attention_forward_kernel(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T_) return;
    int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH), hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float scale = rsqrtf((float)hs);
    const T* q = qkv + ((size_t)b * T_ + t) * C3 + h * hs;
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    int per = (hs + 31) / 32;
    load_lanes(qr, q, lane, hs, per);
    for (int k = 0; k < per; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const T* kj = qkv + ((size_t)b * T_ + j) * C3 + C + h * hs;
        const T* vj = kj + C;
        float d = 0.0f;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) d += qr[k] * to_f(kj[i]); }
        float s = warp_sum(d) * scale;
        float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; acc[k] = acc[k] * corr + (i < hs ? p * to_f(vj[i]) : 0.0f); }
        m = m_new;
    }
    for (int k = 0; k < per; k++) acc[k] /= l;
    store_lanes(out + ((size_t)b * T_ + t) * C + h * hs, acc, lane, hs, per);
    if (lane == 0) lse[((size_t)b * NH + h) * T_ + t] = m + logf(l);
}

// D[b,h,t] = dout_t · out_t
template <class T>
__global__ void attention_backward_D_kernel(float* D, const T* dout, const T* out, int B, int T_, int C, int NH) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T_) return;
    int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH), hs = C / NH;
    const T* dO = dout + ((size_t)b * T_ + t) * C + h * hs;
    const T* O = out + ((size_t)b * T_ + t) * C + h * hs;
    float s = 0.0f;
    for (int i = lane; i < hs; i += 32) s += to_f(dO[i]) * to_f(O[i]);
    s = warp_sum(s);
    if (lane == 0) D[row] = s;
}

// one warp per query row t: dq_t = Σ_{j≤t} ds_j · k_j / √hs
template <class T>
__global__ void attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                             const float* D, int B, int T_, int C, int NH) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T_) return;
    int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH), hs = C / NH, per = (hs + 31) / 32;
    const size_t C3 = 3 * (size_t)C;
    const float scale = rsqrtf((float)hs);
    const T* q = qkv + ((size_t)b * T_ + t) * C3 + h * hs;
    const T* dO = dout + ((size_t)b * T_ + t) * C + h * hs;
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], dq[ATT_MAX_PER_LANE];
    load_lanes(qr, q, lane, hs, per);
    load_lanes(dor, dO, lane, hs, per);
    for (int k = 0; k < per; k++) dq[k] = 0.0f;
    float l = lse[row], Dt = D[row];
    for (int j = 0; j <= t; j++) {
        const T* kj = qkv + ((size_t)b * T_ + j) * C3 + C + h * hs;
        const T* vj = kj + C;
        float sc = 0.0f, dp = 0.0f;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) { sc += qr[k] * to_f(kj[i]); dp += dor[k] * to_f(vj[i]); } }
        sc = warp_sum(sc); dp = warp_sum(dp);
        float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) dq[k] += ds * to_f(kj[i]); }
    }
    store_lanes(dqkv + ((size_t)b * T_ + t) * C3 + h * hs, dq, lane, hs, per);
}

// one warp per key row j: dk_j = Σ_{t≥j} ds · q_t / √hs,  dv_j = Σ_{t≥j} p · dout_t
template <class T>
__global__ void attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                              const float* D, int B, int T_, int C, int NH) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T_) return;
    int j = row % T_, h = (row / T_) % NH, b = row / (T_ * NH), hs = C / NH, per = (hs + 31) / 32;
    const size_t C3 = 3 * (size_t)C;
    const float scale = rsqrtf((float)hs);
    const T* kj = qkv + ((size_t)b * T_ + j) * C3 + C + h * hs;
    const T* vj = kj + C;
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE], dk[ATT_MAX_PER_LANE], dv[ATT_MAX_PER_LANE];
    load_lanes(kr, kj, lane, hs, per);
    load_lanes(vr, vj, lane, hs, per);
    for (int k = 0; k < per; k++) { dk[k] = 0.0f; dv[k] = 0.0f; }
    const size_t head_row0 = ((size_t)b * NH + h) * T_;
    for (int t = j; t < T_; t++) {
        const T* q = qkv + ((size_t)b * T_ + t) * C3 + h * hs;
        const T* dO = dout + ((size_t)b * T_ + t) * C + h * hs;
        float sc = 0.0f, dp = 0.0f;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) { sc += to_f(q[i]) * kr[k]; dp += to_f(dO[i]) * vr[k]; } }
        sc = warp_sum(sc); dp = warp_sum(dp);
        float p = expf(sc * scale - lse[head_row0 + t]), ds = p * (dp - D[head_row0 + t]) * scale;
        for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) { dv[k] += p * to_f(dO[i]); dk[k] += ds * to_f(q[i]); } }
    }
    T* dko = dqkv + ((size_t)b * T_ + j) * C3 + C + h * hs;
    store_lanes(dko, dk, lane, hs, per);
    store_lanes(dko + C, dv, lane, hs, per);
}
#endif

template <class T>
inline void attention_forward(const Ctx& ctx, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        if (C / NH > 32 * ATT_MAX_PER_LANE) fatal("attention: head size %d > %d is not supported on CUDA", C / NH, 32 * ATT_MAX_PER_LANE);
        attention_forward_kernel<<<ceil_div((size_t)B * NH * T_, 8), 256, 0, ctx.stream>>>(out, lse, qkv, B, T_, C, NH);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BTC = (size_t)B * T_ * C;
    F32View<T> o(out, BTC, false), x(qkv, 3 * BTC);
    attention_forward_cpu(o.p, lse, x.p, B, T_, C, NH);
    o.store();
}
template <class T>
inline void attention_backward(const Ctx& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                               int B, int T_, int C, int NH) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        size_t rows = (size_t)B * NH * T_;
        static Buf<float> D_buf;
        float* D = gpu_scratch(D_buf, ctx, rows);
        int grid = (int)ceil_div(rows, 8);
        attention_backward_D_kernel<<<grid, 256, 0, ctx.stream>>>(D, dout, out, B, T_, C, NH);
        attention_backward_dq_kernel<<<grid, 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T_, C, NH);
        attention_backward_dkv_kernel<<<grid, 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T_, C, NH);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BTC = (size_t)B * T_ * C;
    F32View<T> dx(dqkv, 3 * BTC, false), d(dout, BTC), x(qkv, 3 * BTC), o(out, BTC);
    attention_backward_cpu(dx.p, d.p, x.p, o.p, lse, B, T_, C, NH);
    dx.store();
}
