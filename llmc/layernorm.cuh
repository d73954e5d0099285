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
add_inplace(dst, src, N): dst += src (ZeRO-2/3 add each micro-batch's reduced gradient chunk).

CUDA: one warp per row for the forward and the input gradient; the parameter gradients are a
two-stage deterministic reduction (row chunks → partial sums → summed in chunk order).
Tests: test/test_ops.cpp (finite differences; eps and the variance use fp32 like PyTorch),
test/gpucheck_ops.cu (CUDA vs CPU).
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

inline void add_inplace_cpu(float* dst, const float* src, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) dst[i] += src[i];
}

#ifdef __CUDACC__
// one warp per row
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = x[c] - m; v += d * d; }
    float r = rsqrtf(warp_sum(v) / C + 1e-5f);
    float* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) { mean[row] = m; rstd[row] = r; }
}
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                               const float* mean, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* d = dout + (size_t)row * C;
    const float* x = inp + (size_t)row * C;
    float m = mean[row], r = rstd[row], g_sum = 0.0f, gn_sum = 0.0f;
    for (int c = lane; c < C; c += 32) { float g = d[c] * w[c]; g_sum += g; gn_sum += g * (x[c] - m) * r; }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    float* di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) di[c] += r * (d[c] * w[c] - g_mean - (x[c] - m) * r * gn_mean);
}
// stage 1: chunk k of rows → partial[k][c] (dw) and partial[K + k][c] (db)
__global__ void layernorm_backward_params_partial(float* partial, const float* dout, const float* inp,
                                                  const float* mean, const float* rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y, K = gridDim.y;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    int r1 = min(N, (k + 1) * rows_per_chunk);
    for (int i = k * rows_per_chunk; i < r1; i++) {
        float d = dout[(size_t)i * C + c];
        sw += d * (inp[(size_t)i * C + c] - mean[i]) * rstd[i];
        sb += d;
    }
    partial[(size_t)k * C + c] = sw;
    partial[(size_t)(K + k) * C + c] = sb;
}
// stage 2: dw[c] += Σ_k partial, in chunk order
__global__ void layernorm_backward_params_final(float* dw, float* db, const float* partial, int C, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < K; k++) { sw += partial[(size_t)k * C + c]; sb += partial[(size_t)(K + k) * C + c]; }
    dw[c] += sw;
    db[c] += sb;
}
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) out[i] = a[i] + b[i];
}
__global__ void add_inplace_kernel(float* dst, const float* src, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) dst[i] += src[i];
}
#endif

inline void layernorm_forward(const Ctx& ctx, float* out, float* mean, float* rstd, const float* inp,
                              const float* w, const float* b, int N, int C) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, ctx.stream>>>(out, mean, rstd, inp, w, b, N, C);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
}
inline void layernorm_backward(const Ctx& ctx, float* dinp, float* dw, float* db, const float* dout,
                               const float* inp, const float* w, const float* mean,
                               const float* rstd, int N, int C) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        layernorm_backward_dinp_kernel<<<ceil_div(N, 8), 256, 0, ctx.stream>>>(dinp, dout, inp, w, mean, rstd, N, C);
        const int K = std::min(N, 64), rows = (int)ceil_div(N, K);
        static Buf<float> partial_buf;
        float* partial = gpu_scratch(partial_buf, ctx, 2 * (size_t)K * C);
        dim3 grid(ceil_div(C, 128), K);
        layernorm_backward_params_partial<<<grid, 128, 0, ctx.stream>>>(partial, dout, inp, mean, rstd, N, C, rows);
        layernorm_backward_params_final<<<ceil_div(C, 128), 128, 0, ctx.stream>>>(dw, db, partial, C, K);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
inline void residual_forward(const Ctx& ctx, float* out, const float* a, const float* b, size_t N) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        residual_forward_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(out, a, b, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    residual_forward_cpu(out, a, b, N);
}
inline void add_inplace(const Ctx& ctx, float* dst, const float* src, size_t N) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        if (N) add_inplace_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(dst, src, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    add_inplace_cpu(dst, src, N);
}
