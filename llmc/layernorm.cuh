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

Dtype T (float | bf16, common.h): statistics (mean, rstd) are fp32 and all math is fp32; each
output is rounded to T once (the backward's sums over rows too: on the CPU via F32View).

CUDA: one warp per row for the forward and the input gradient; the parameter gradients are a
two-stage deterministic reduction (row chunks → partial sums → summed in chunk order).
Tests: test/test_ops.cpp (finite differences; eps and the variance use fp32 like PyTorch),
test/gpucheck_ops.cu (CUDA vs CPU).
*/
#pragma once
#include <cmath>
#include "common.h"

template <class T>
inline void layernorm_forward_cpu(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const T* x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += to_f(x[c]);
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = to_f(x[c]) - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        T* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = from_f<T>((to_f(x[c]) - m) * s * to_f(w[c]) + to_f(b[c]));
        mean[i] = m;
        rstd[i] = s;
    }
}

// (fp32; the dtype wrapper below gives it fp32 views of bf16 buffers)
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

template <class T> inline void residual_forward_cpu(T* out, const T* a, const T* b, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <class T> inline void add_inplace_cpu(T* dst, const T* src, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) dst[i] = from_f<T>(to_f(dst[i]) + to_f(src[i]));
}

#ifdef LLMC_CUDA
// one warp per row
template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const T* x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += to_f(x[c]);
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = to_f(x[c]) - m; v += d * d; }
    float r = rsqrtf(warp_sum(v) / C + 1e-5f);
    T* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = from_f<T>((to_f(x[c]) - m) * r * to_f(w[c]) + to_f(b[c]));
    if (lane == 0) { mean[row] = m; rstd[row] = r; }
}
template <class T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const float* mean, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const T* d = dout + (size_t)row * C;
    const T* x = inp + (size_t)row * C;
    float m = mean[row], r = rstd[row], g_sum = 0.0f, gn_sum = 0.0f;
    for (int c = lane; c < C; c += 32) { float g = to_f(d[c]) * to_f(w[c]); g_sum += g; gn_sum += g * (to_f(x[c]) - m) * r; }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    T* di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        di[c] = from_f<T>(to_f(di[c]) + r * (to_f(d[c]) * to_f(w[c]) - g_mean - (to_f(x[c]) - m) * r * gn_mean));
}
// stage 1: chunk k of rows → partial[k][c] (dw) and partial[K + k][c] (db)
template <class T>
__global__ void layernorm_backward_params_partial(float* partial, const T* dout, const T* inp,
                                                  const float* mean, const float* rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y, K = gridDim.y;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    int r1 = min(N, (k + 1) * rows_per_chunk);
    for (int i = k * rows_per_chunk; i < r1; i++) {
        float d = to_f(dout[(size_t)i * C + c]);
        sw += d * (to_f(inp[(size_t)i * C + c]) - mean[i]) * rstd[i];
        sb += d;
    }
    partial[(size_t)k * C + c] = sw;
    partial[(size_t)(K + k) * C + c] = sb;
}
// stage 2: dw[c] += Σ_k partial, in chunk order
template <class T>
__global__ void layernorm_backward_params_final(T* dw, T* db, const float* partial, int C, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < K; k++) { sw += partial[(size_t)k * C + c]; sb += partial[(size_t)(K + k) * C + c]; }
    dw[c] = from_f<T>(to_f(dw[c]) + sw);
    db[c] = from_f<T>(to_f(db[c]) + sb);
}
template <class T> __global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}
template <class T> __global__ void add_inplace_kernel(T* dst, const T* src, size_t N) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<T>(to_f(dst[i]) + to_f(src[i]));
}
#endif

template <class T>
inline void layernorm_forward(const Ctx& ctx, T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, ctx.stream>>>(out, mean, rstd, inp, w, b, N, C);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
}
template <class T>
inline void layernorm_backward(const Ctx& ctx, T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                               const float* mean, const float* rstd, int N, int C) {
#ifdef LLMC_CUDA
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
    const size_t NC = (size_t)N * C;
    F32View<T> di(dinp, NC), dW(dw, C), dB(db, C), d(dout, NC), x(inp, NC), W(w, C);
    layernorm_backward_cpu(di.p, dW.p, dB.p, d.p, x.p, W.p, mean, rstd, N, C);
    di.store(); dW.store(); dB.store();
}
template <class T> inline void residual_forward(const Ctx& ctx, T* out, const T* a, const T* b, size_t N) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        residual_forward_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(out, a, b, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    residual_forward_cpu(out, a, b, N);
}
template <class T> inline void add_inplace(const Ctx& ctx, T* dst, const T* src, size_t N) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (N) add_inplace_kernel<<<grid_for(N), 256, 0, ctx.stream>>>(dst, src, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    add_inplace_cpu(dst, src, N);
}
