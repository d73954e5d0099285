/*
matmul.cuh — the linear layer, y = x·Wᵀ + b, with W stored (out, in) like torch.nn.Linear.

  forward:  out[n, o]  = Σ_i inp[n, i] · W[o, i] + bias[o]          (N×OC, 2·N·C·OC flops)
  backward: dinp[n, i] = Σ_o dout[n, o] · W[o, i]                    (written)
            dW[o, i]  += Σ_n dout[n, o] · inp[n, i]                  (accumulated)
            dbias[o]  += Σ_n dout[n, o]                              (accumulated)

The CPU reference is three plain loop nests, blocked so the weight rows of one block stay in
cache while every input row streams past them (a 50304×768 classifier matrix does not fit in any
cache; without blocking each input row would reread it from memory). Each output element is
reduced by one thread in a fixed order: results do not depend on the thread count.
The CUDA version (cuBLASLt, with bias/GELU epilogues) goes beside it.

Test: test/test_ops.cpp (finite differences), and the whole model against PyTorch.
*/
#pragma once
#include "common.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static const int MATMUL_BLOCK = 64;  // weight rows per block: 64 rows × C floats stays in L2

inline void matmul_forward_cpu(float* out, const float* inp, const float* W, const float* bias,
                               int N, int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
        int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
        int n = 0;
        for (; n + 4 <= N; n += 4) {  // four input rows at a time share each weight row load
            const float* x0 = inp + (size_t)n * C;
            const float* x1 = x0 + C; const float* x2 = x1 + C; const float* x3 = x2 + C;
            for (int o = o0; o < o1; o++) {
                const float* w = W + (size_t)o * C;
                float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                #pragma omp simd reduction(+:s0, s1, s2, s3)
                for (int i = 0; i < C; i++) {
                    s0 += x0[i] * w[i]; s1 += x1[i] * w[i]; s2 += x2[i] * w[i]; s3 += x3[i] * w[i];
                }
                float bo = bias ? bias[o] : 0.0f;
                out[(size_t)(n + 0) * OC + o] = s0 + bo;
                out[(size_t)(n + 1) * OC + o] = s1 + bo;
                out[(size_t)(n + 2) * OC + o] = s2 + bo;
                out[(size_t)(n + 3) * OC + o] = s3 + bo;
            }
        }
        for (; n < N; n++) {  // leftover rows
            const float* x = inp + (size_t)n * C;
            for (int o = o0; o < o1; o++) {
                const float* w = W + (size_t)o * C;
                float s = 0;
                #pragma omp simd reduction(+:s)
                for (int i = 0; i < C; i++) s += x[i] * w[i];
                out[(size_t)n * OC + o] = s + (bias ? bias[o] : 0.0f);
            }
        }
    }
}

inline void matmul_backward_cpu(float* dinp, float* dW, float* dbias, const float* dout,
                                const float* inp, const float* W, int N, int C, int OC) {
    // dinp = dout · W: each thread owns a range of rows n; the weight matrix streams through
    // in blocks so a block is reused by all of the thread's rows while it is in cache.
    if (dinp) {
        #pragma omp parallel
        {
            int nthreads = 1, tid = 0;
#ifdef _OPENMP
            nthreads = omp_get_num_threads(); tid = omp_get_thread_num();
#endif
            int chunk = (N + nthreads - 1) / nthreads;
            int n0 = tid * chunk < N ? tid * chunk : N, n1 = n0 + chunk < N ? n0 + chunk : N;
            for (size_t k = (size_t)n0 * C; k < (size_t)n1 * C; k++) dinp[k] = 0.0f;
            for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
                int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
                for (int n = n0; n < n1; n++) {
                    float* di = dinp + (size_t)n * C;
                    const float* d = dout + (size_t)n * OC;
                    int o = o0;
                    for (; o + 4 <= o1; o += 4) {  // four weight rows per pass over di
                        const float* w0 = W + (size_t)o * C;
                        const float *w1 = w0 + C, *w2 = w1 + C, *w3 = w2 + C;
                        float d0 = d[o], d1 = d[o + 1], d2 = d[o + 2], d3 = d[o + 3];
                        #pragma omp simd
                        for (int i = 0; i < C; i++) di[i] += d0 * w0[i] + d1 * w1[i] + d2 * w2[i] + d3 * w3[i];
                    }
                    for (; o < o1; o++) {
                        const float* w = W + (size_t)o * C;
                        #pragma omp simd
                        for (int i = 0; i < C; i++) di[i] += d[o] * w[i];
                    }
                }
            }
        }
    }
    // dW += doutᵀ · inp: each thread owns a block of weight rows, inputs stream past them.
    #pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
        int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
        int n = 0;
        for (; n + 4 <= N; n += 4) {  // four input rows per pass over each dW row
            const float* x0 = inp + (size_t)n * C;
            const float *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
            const float* d = dout + (size_t)n * OC;
            for (int o = o0; o < o1; o++) {
                float d0 = d[o], d1 = d[OC + o], d2 = d[2 * (size_t)OC + o], d3 = d[3 * (size_t)OC + o];
                float* dw = dW + (size_t)o * C;
                #pragma omp simd
                for (int i = 0; i < C; i++) dw[i] += d0 * x0[i] + d1 * x1[i] + d2 * x2[i] + d3 * x3[i];
            }
        }
        for (; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            for (int o = o0; o < o1; o++) {
                float d = dout[(size_t)n * OC + o];
                float* dw = dW + (size_t)o * C;
                #pragma omp simd
                for (int i = 0; i < C; i++) dw[i] += d * x[i];
            }
        }
    }
    if (dbias) {
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * OC;
            #pragma omp simd
            for (int o = 0; o < OC; o++) dbias[o] += d[o];
        }
    }
}

inline void matmul_forward(const Ctx&, float* out, const float* inp, const float* W,
                           const float* bias, int N, int C, int OC) {
    matmul_forward_cpu(out, inp, W, bias, N, C, OC);
}
inline void matmul_backward(const Ctx&, float* dinp, float* dW, float* dbias, const float* dout,
                            const float* inp, const float* W, int N, int C, int OC) {
    matmul_backward_cpu(dinp, dW, dbias, dout, inp, W, N, C, OC);
}
