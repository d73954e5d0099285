/*
layernorm.cuh — LayerNorm over the channel dimension, and the residual add.

  forward:  mean = Σx/C,  rstd = 1/sqrt(Σ(x-mean)²/C + 1e-5),  n = (x-mean)·rstd,
            out = n·w + b                      (mean and rstd are saved for the backward)
  backward: with g = dout·w:
            dinp += rstd · (g − mean(g) − n·mean(g·n))
            dw   += Σ_rows dout·n              db += Σ_rows dout

The input gradient is *added* (dinp +=): in the transformer the input of every LayerNorm is the
residual stream, whose gradient is the sum of the path through the LayerNorm and the skip path.
Parameter gradients accumulate too (gradient accumulation). Rows are reduced in order, so the
result does not depend on the number of threads.

residual_forward(out, a, b, N): out = a + b. Its backward is the identity on both inputs, which
the model gets for free by accumulating into one residual-gradient buffer.

Test: test/test_ops.cpp (finite differences; eps and the variance use fp32 like PyTorch).
*/
#pragma once
#include <cmath>
#include "common.h"

inline void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp,
                                  const float* w, const float* b, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

inline void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout,
                                   const float* inp, const float* w, const float* mean,
                                   const float* rstd, int N, int C) {
    // input gradient: rows are independent
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* d = dout + (size_t)i * C;
        const float* x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float g_mean = 0.0f, gn_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float g = d[c] * w[c];
            g_mean += g;
            gn_mean += g * n;
        }
        g_mean /= C;
        gn_mean /= C;
        float* di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            di[c] += s * (d[c] * w[c] - g_mean - n * gn_mean);
        }
    }
    // parameter gradients: a reduction over rows, done in row order (deterministic)
    for (int i = 0; i < N; i++) {
        const float* d = dout + (size_t)i * C;
        const float* x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        for (int c = 0; c < C; c++) {
            dw[c] += d[c] * (x[c] - m) * s;
            db[c] += d[c];
        }
    }
}

inline void residual_forward_cpu(float* out, const float* a, const float* b, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

inline void layernorm_forward(const Ctx&, float* out, float* mean, float* rstd, const float* inp,
                              const float* w, const float* b, int N, int C) {
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
}
inline void layernorm_backward(const Ctx&, float* dinp, float* dw, float* db, const float* dout,
                               const float* inp, const float* w, const float* mean,
                               const float* rstd, int N, int C) {
    layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
inline void residual_forward(const Ctx&, float* out, const float* a, const float* b, size_t N) {
    residual_forward_cpu(out, a, b, N);
}
