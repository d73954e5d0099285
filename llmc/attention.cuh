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

Test: test/test_ops.cpp (finite differences, lse against a direct evaluation).
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"

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

inline void attention_forward(const Ctx&, float* out, float* lse, const float* qkv,
                              int B, int T, int C, int NH) {
    attention_forward_cpu(out, lse, qkv, B, T, C, NH);
}
inline void attention_backward(const Ctx&, float* dqkv, const float* dout, const float* qkv,
                               const float* out, const float* lse, int B, int T, int C, int NH) {
    attention_backward_cpu(dqkv, dout, qkv, out, lse, B, T, C, NH);
}
