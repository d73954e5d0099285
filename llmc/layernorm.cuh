/*
layernorm.cuh — LayerNorm (and RMSNorm) over the channel dimension, and the residual add.

  forward:  mean = Σx/C,  rstd = 1/sqrt(Σ(x − mean)²/C + 1e-5),  n = (x − mean)·rstd,  out = n·w + b
  backward: with g = dout·w:   dinp += rstd · (g − mean(g) − n·mean(g·n))
                               dw += Σ_rows dout·n,   db += Σ_rows dout

RMSNorm is the same with mean = 0 and no bias: mean == nullptr selects it. The input gradient
is added, because a LayerNorm's input is the residual stream. Statistics and math are fp32.
CUDA: a warp a row; the parameter gradients are a two-stage reduction in a fixed order
(deterministic); 16-byte loads, since these kernels are memory-bound.

Main functions: layernorm_forward, residual_layernorm_forward (res = a + b, then LayerNorm, in
one pass), layernorm_backward, the rmsnorm_* forms, residual_forward, add_inplace.

Tests: test/test_ops.cpp (finite differences), test/gpucheck_ops.cu (CUDA against the CPU).
More: docs/kernels.md.
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"
#include "autotune.cuh"

// (mean == nullptr: RMSNorm, no centering; b == nullptr: no bias)
template <class floatX>
inline void layernorm_forward_cpu(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const floatX* x = inp + (size_t)i * C;
        float m = 0.0f;
        if (mean) {
            for (int c = 0; c < C; c++) m += to_f(x[c]);
            m /= C;
        }
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = to_f(x[c]) - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        floatX* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = from_f<floatX>((to_f(x[c]) - m) * s * to_f(w[c]) + (b ? to_f(b[c]) : 0.0f));
        if (mean) mean[i] = m;
        rstd[i] = s;
    }
}

// (fp32; the dtype wrapper below gives it fp32 views of bf16 buffers. mean == nullptr:
// RMSNorm's, no mean(g) term; db == nullptr: no bias)
inline void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout,
                                   const float* inp, const float* w, const float* mean,
                                   const float* rstd, int N, int C) {
    // input gradient: rows are independent
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* d = dout + (size_t)i * C;
        const float* x = inp + (size_t)i * C;
        float m = mean ? mean[i] : 0.0f, s = rstd[i];
        float mean_g = 0.0f, mean_gn = 0.0f;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float g = d[c] * w[c];
            mean_g += g;
            mean_gn += g * n;
        }
        mean_g = mean ? mean_g / C : 0.0f;
        mean_gn /= C;
        float* di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            di[c] += s * (d[c] * w[c] - mean_g - n * mean_gn);
        }
    }
    // parameter gradients: a reduction over rows, done in row order (deterministic)
    for (int i = 0; i < N; i++) {
        const float* d = dout + (size_t)i * C;
        const float* x = inp + (size_t)i * C;
        float m = mean ? mean[i] : 0.0f, s = rstd[i];
        for (int c = 0; c < C; c++) {
            dw[c] += d[c] * (x[c] - m) * s;
            if (db) db[c] += d[c];
        }
    }
}

template <class floatX> inline void residual_forward_cpu(floatX* out, const floatX* a, const floatX* b, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = from_f<floatX>(to_f(a[i]) + to_f(b[i]));
}

#ifdef LLMC_CUDA
// The kernels take V, the elements each lane moves per load: PACK<floatX> (16 bytes, common.h) where
// C and the pointers allow, else 1. ctx.kernels.layernorm_packs = false forces V = 1 (for
// dev/cuda's comparison); the sums per lane then run in another order, the math is the same.

// one warp per row; lane l reads elements [l·V, l·V + V), then 32·V further on, ...
// ADD: the row normalized is res = inp + add, formed (rounded to floatX) and written in the first pass;
// the later passes read it back, each lane its own elements, from cache. Else inp is normalized.
// mean == nullptr: RMSNorm (the row's mean taken as 0, not stored); b == nullptr: no bias.
// The row's first two passes (fp8.cuh's layernorm_forward_fp8 shares them): the sum, forming res
// where ADD, then the variance. Returns the row's mean and rstd; the warp's lanes all get them.
template <class floatX, int V, bool ADD>
__device__ inline float2 ln_row_stats(floatX* res, const floatX* inp, const floatX* add, size_t off, int C, bool rms, int lane) {
    const floatX* x = (ADD ? res : inp) + off;
    float s = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        Pack<floatX, V> xp = load_pack<V>(inp + off + c);
        if constexpr (ADD) {
            Pack<floatX, V> ap = load_pack<V>(add + off + c);
            for (int k = 0; k < V; k++) xp.v[k] = from_f<floatX>(to_f(xp.v[k]) + to_f(ap.v[k]));
            store_pack<V>(res + off + c, xp);
        }
        for (int k = 0; k < V; k++) s += to_f(xp.v[k]);
    }
    float m = rms ? 0.0f : warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        Pack<floatX, V> xp = load_pack<V>(x + c);
        for (int k = 0; k < V; k++) { float d = to_f(xp.v[k]) - m; v += d * d; }
    }
    return make_float2(m, rsqrtf(warp_sum(v) / C + 1e-5f));
}
// The third pass's V outputs at x[c…]: (x − mean)·rstd·w + b, rounded to floatX.
template <class floatX, int V>
__device__ inline Pack<floatX, V> ln_out_pack(const floatX* x, const floatX* w, const floatX* b, int c, float m, float r) {
    Pack<floatX, V> xp = load_pack<V>(x + c), wp = load_pack<V>(w + c), bp, op;
    if (b) bp = load_pack<V>(b + c);
    for (int k = 0; k < V; k++) op.v[k] = from_f<floatX>((to_f(xp.v[k]) - m) * r * to_f(wp.v[k]) + (b ? to_f(bp.v[k]) : 0.0f));
    return op;
}
template <class floatX, int V, bool ADD>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* res, const floatX* inp, const floatX* add,
                                         const floatX* w, const floatX* b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const bool rms = mean == nullptr;
    const float2 mr = ln_row_stats<floatX, V, ADD>(res, inp, add, off, C, rms, lane);
    const floatX* x = (ADD ? res : inp) + off;
    for (int c = lane * V; c < C; c += 32 * V) store_pack<V>(out + off + c, ln_out_pack<floatX, V>(x, w, b, c, mr.x, mr.y));
    if (lane == 0) { if (!rms) mean[row] = mr.x; rstd[row] = mr.y; }
}
// The backward's per-element arithmetic, shared by the two-kernel and the one-kernel backward,
// with each rounding spelled out: __fmul_rn and __fadd_rn are never contracted into an FMA. The
// two must give the same bits, and nvcc, left to itself, contracted the same expression
// differently in the two kernels (RMSNorm's dinp differed in the last bit on an H100).
//   n = (x − m)·r;  the row sums: Σ g and Σ g·n with g = dout·w;
//   dinp += r·(g − mean(g) − n·mean(g·n));  the parameter sums: dw += dout·n, db += dout
__device__ inline float ln_n(float x, float m, float r) { return __fmul_rn(__fsub_rn(x, m), r); }
__device__ inline void ln_row_sums(float d, float w, float x, float m, float r, float& sum_g, float& sum_gn) {
    const float g = __fmul_rn(d, w);
    sum_g = __fadd_rn(sum_g, g);
    sum_gn = __fadd_rn(sum_gn, __fmul_rn(g, ln_n(x, m, r)));
}
__device__ inline float ln_dinp(float di, float d, float w, float x, float m, float r, float mean_g, float mean_gn) {
    return __fadd_rn(di, __fmul_rn(r, __fsub_rn(__fsub_rn(__fmul_rn(d, w), mean_g), __fmul_rn(ln_n(x, m, r), mean_gn))));
}
__device__ inline void ln_param_sums(float d, float x, float m, float r, float& sw, float& sb) {
    sw = __fadd_rn(sw, __fmul_rn(d, ln_n(x, m, r)));
    sb = __fadd_rn(sb, d);
}
template <class floatX, int V>
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                               const float* mean, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX* d = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float m = mean ? mean[row] : 0.0f, r = rstd[row], sum_g = 0.0f, sum_gn = 0.0f;  // (mean == nullptr: RMSNorm)
    for (int c = lane * V; c < C; c += 32 * V) {
        Pack<floatX, V> dp = load_pack<V>(d + c), xp = load_pack<V>(x + c), wp = load_pack<V>(w + c);
        for (int k = 0; k < V; k++) ln_row_sums(to_f(dp.v[k]), to_f(wp.v[k]), to_f(xp.v[k]), m, r, sum_g, sum_gn);
    }
    float mean_g = mean ? warp_sum(sum_g) / C : 0.0f, mean_gn = warp_sum(sum_gn) / C;
    floatX* di = dinp + (size_t)row * C;
    for (int c = lane * V; c < C; c += 32 * V) {
        Pack<floatX, V> dp = load_pack<V>(d + c), xp = load_pack<V>(x + c), wp = load_pack<V>(w + c), ip = load_pack<V>(di + c);
        for (int k = 0; k < V; k++)
            ip.v[k] = from_f<floatX>(ln_dinp(to_f(ip.v[k]), to_f(dp.v[k]), to_f(wp.v[k]), to_f(xp.v[k]), m, r, mean_g, mean_gn));
        store_pack<V>(di + c, ip);
    }
}
// Parameter gradients, stage 1: a block of 8 warps takes a chunk of R rows and 32·V channels;
// warp w sums rows w, w + 8, ... of the chunk for its lane's V channels, then the 8 warps' sums
// are added in warp order (common.h: block_column_sums) → partial[k][c] (dw), partial[K + k][c] (db).
// R (ln_chunk_rows): 32 rows, or more where N is large, so that there are about 1024 chunks:
// enough blocks to fill the GPU in the fused kernel below (one chunk per block), and each block's
// fixed cost (its sums through shared memory, 2·C partial sums written and read back by stage 2)
// spread over more rows: at N = 131072 (GPT-2 124M, B = 128) 128 rows, 16 per warp, where 32
// rows gave each warp 4 and wrote 25 MB of partial sums.
constexpr int LN_WARPS = 8;
inline int ln_chunk_rows(int N) { return std::max(32, (int)ceil_div(ceil_div(N, 1024), 8) * 8); }
template <class floatX, int V>
__global__ void layernorm_backward_params_partial(float* partial, const floatX* dout, const floatX* inp,
                                                  const float* mean, const float* rstd, int N, int C, int R) {
    __shared__ float sh[2 * LN_WARPS * 32 * V];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, k = blockIdx.y, K = gridDim.y;
    const int c0 = blockIdx.x * 32 * V, c = c0 + lane * V;
    float sw[V], sb[V];
    for (int j = 0; j < V; j++) sw[j] = sb[j] = 0.0f;
    if (c < C) {
        const int r1 = min(N, (k + 1) * R);
        for (int i = k * R + w; i < r1; i += LN_WARPS) {
            Pack<floatX, V> dp = load_pack<V>(dout + (size_t)i * C + c), xp = load_pack<V>(inp + (size_t)i * C + c);
            const float m = mean ? mean[i] : 0.0f, r = rstd[i];
            for (int j = 0; j < V; j++) ln_param_sums(to_f(dp.v[j]), to_f(xp.v[j]), m, r, sw[j], sb[j]);
        }
    }
    block_column_sums<V, LN_WARPS, 2>(sh, {sw, sb}, partial + (size_t)k * C, (size_t)K * C, c0, C);  // dw, db
}
// The whole backward in one kernel: a block of 8 warps takes a chunk of R rows; warp w
// does rows w, w + 8, ... of it one at a time as the dinp kernel does, and keeps the parameter
// sums of its lane's channels (pack p: channels (lane + 32p)·V onwards); then the 8 warps' sums
// are added in warp order into partial[k] and partial[K + k]. The same rows in the same order as
// the two kernels above, so the results are bit-identical to them; but dout and x are read once
// (the dinp pass's second read of a row hits the cache), 4·N·C·s bytes instead of 6·N·C·s.
// Where the sums live:
//   NP > 0: in registers, NP packs per lane (the launch takes NP·V = 32: C ≤ 1024, GPT-2 124M
//           and 350M; more would leave no room for two blocks per SM);
//   NP = 0: in dynamic shared memory, each warp its own 2·C floats (64·C bytes a block: C ≤ 3632
//           on an H100; GPT-2 774M and 1558M). Each lane updates only its own channels, so the
//           warps need no barrier until the end. A warp's C sums of a kind are stored as V/4
//           planes of G = C/V float4s: channel g·V + 4q + e at float (q·G + g)·4 + e
//           (ln_sum_slot). A lane updates its pack g's sums with V/4 float4 loads and stores,
//           and for each q the warp's lanes (g = lane + 32p) touch 32 consecutive float4s: no
//           bank conflicts. (In channel order, lanes 32/V apart shared a bank: a V-way conflict,
//           which made the bf16 one-kernel backward slower than two kernels; docs/kernels.md.)
// PF (NP > 0; ctx.kernels.layernorm_prefetch): dinp's packs are loaded in the first pass, beside dout's
// and x's, and kept in registers (NP packs more a lane), so that each row waits for device memory
// once, not twice (the second pass's dinp read was the other wait). Launch bounds hold it to two
// blocks an SM (ptxas: bf16 127 registers, no spills; fp32 8 bytes spilled). The same arithmetic: the same bits.
// (NP = 0) where the float4 of sums for channels g·V + 4q .. g·V + 4q + 3 starts, of C floats
template <int V> __device__ inline size_t ln_sum_slot(int g, int q, int C) { return ((size_t)q * (C / V) + g) * 4; }
template <class floatX, int V, int NP, bool PF = false>
__global__ void __launch_bounds__(256, PF ? 2 : 1) layernorm_backward_fused_kernel(floatX* dinp, float* partial, const floatX* dout, const floatX* inp, const floatX* w,
                                                                                  const float* mean, const float* rstd, int N, int C, int R) {
    constexpr bool SHARED_SUMS = NP == 0;
    static_assert(!SHARED_SUMS || V % 4 == 0, "the shared sums move as float4s: V = 4 (fp32) or 8 (16-bit)");
    static_assert(!PF || NP > 0, "the prefetch keeps dinp in registers: NP > 0");
    Pack<floatX, V> ipf[PF ? NP : 1];  // (PF) this row's dinp packs
    constexpr int U = SHARED_SUMS ? 2 : 1;  // packs loaded together (NP > 0: the loops unroll whole anyway)
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, k = blockIdx.x, K = gridDim.x;
    float sw[SHARED_SUMS ? 1 : NP][V], sb[SHARED_SUMS ? 1 : NP][V];  // (NP > 0)
    float* all = nullptr;   // (NP = 0) every warp's sums: warp u's dw in [2uC, 2uC + C), its db after (in planes)
    float* sums = nullptr;  // ... this warp's
    if constexpr (SHARED_SUMS) {
        DYNAMIC_SHARED(float, dyn);
        all = dyn;
        sums = all + (size_t)warp * 2 * C;
        for (int g = lane; g < C / V; g += 32)  // (each lane its own packs' slots)
            for (int q = 0; q < V / 4; q++) {
                store_pack<4>(sums + ln_sum_slot<V>(g, q, C), Pack<float, 4>{});
                store_pack<4>(sums + C + ln_sum_slot<V>(g, q, C), Pack<float, 4>{});
            }
    } else {
        for (int p = 0; p < NP; p++)
            for (int j = 0; j < V; j++) sw[p][j] = sb[p][j] = 0.0f;
    }
    const int r1 = min(N, (k + 1) * R);
    for (int row = k * R + warp; row < r1; row += LN_WARPS) {
        const floatX* d = dout + (size_t)row * C;
        const floatX* x = inp + (size_t)row * C;
        const float m = mean ? mean[row] : 0.0f, r = rstd[row];  // (mean == nullptr: RMSNorm)
        floatX* di = dinp + (size_t)row * C;
        float sum_g = 0.0f, sum_gn = 0.0f;
        for (int p0 = 0; SHARED_SUMS || p0 < NP; p0 += U) {
            if ((lane + 32 * p0) * V >= C) break;
            Pack<floatX, V> dp[U], xp[U], wp[U];
            #pragma unroll
            for (int u = 0; u < U; u++) {  // U packs' loads, then their sums in pack order
                const int c = (lane + 32 * (p0 + u)) * V;
                if (c >= C) continue;
                dp[u] = load_pack<V>(d + c), xp[u] = load_pack<V>(x + c), wp[u] = load_pack<V>(w + c);
                if constexpr (PF) ipf[p0 + u] = load_pack<V>(di + c);
            }
            #pragma unroll
            for (int u = 0; u < U; u++)
                if ((lane + 32 * (p0 + u)) * V < C)
                    for (int j = 0; j < V; j++) ln_row_sums(to_f(dp[u].v[j]), to_f(wp[u].v[j]), to_f(xp[u].v[j]), m, r, sum_g, sum_gn);
        }
        const float mean_g = mean ? warp_sum(sum_g) / C : 0.0f, mean_gn = warp_sum(sum_gn) / C;
        for (int p0 = 0; SHARED_SUMS || p0 < NP; p0 += U) {
            if ((lane + 32 * p0) * V >= C) break;
            Pack<floatX, V> dp[U], xp[U], wp[U], ip[U];
            #pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = (lane + 32 * (p0 + u)) * V;
                if (c >= C) continue;
                dp[u] = load_pack<V>(d + c), xp[u] = load_pack<V>(x + c), wp[u] = load_pack<V>(w + c);
                if constexpr (PF) ip[u] = ipf[p0 + u];
                else ip[u] = load_pack<V>(di + c);
            }
            #pragma unroll
            for (int u = 0; u < U; u++) {
                const int p = p0 + u, c = (lane + 32 * p) * V;
                if (c >= C) continue;
                for (int j = 0; j < V; j++) {
                    const float dv = to_f(dp[u].v[j]), xv = to_f(xp[u].v[j]);
                    ip[u].v[j] = from_f<floatX>(ln_dinp(to_f(ip[u].v[j]), dv, to_f(wp[u].v[j]), xv, m, r, mean_g, mean_gn));
                    if constexpr (!SHARED_SUMS) ln_param_sums(dv, xv, m, r, sw[p][j], sb[p][j]);
                }
                store_pack<V>(di + c, ip[u]);
                if constexpr (SHARED_SUMS) {
                    for (int q = 0; q < V / 4; q++) {  // channels c + 4q .. c + 4q + 3
                        float* pw = sums + ln_sum_slot<V>(c / V, q, C);
                        Pack<float, 4> sw4 = load_pack<4>(pw), sb4 = load_pack<4>(pw + C);
                        for (int e = 0; e < 4; e++)
                            ln_param_sums(to_f(dp[u].v[4 * q + e]), to_f(xp[u].v[4 * q + e]), m, r, sw4.v[e], sb4.v[e]);
                        store_pack<4>(pw, sw4);
                        store_pack<4>(pw + C, sb4);
                    }
                }
            }
        }
    }
    if constexpr (SHARED_SUMS) {
        __syncthreads();  // every warp's sums are complete
        for (int t = threadIdx.x; t < C; t += blockDim.x) {  // the 8 warps' sums in warp order
            const size_t at = ln_sum_slot<V>(t / V, t % V / 4, C) + t % 4;  // channel t's float
            float a = 0.0f, b = 0.0f;
            for (int u = 0; u < LN_WARPS; u++) { a += all[(size_t)u * 2 * C + at]; b += all[(size_t)u * 2 * C + C + at]; }
            partial[(size_t)k * C + t] = a;
            partial[(size_t)(K + k) * C + t] = b;
        }
    } else {
        __shared__ float sh[2 * LN_WARPS * 32 * V];
        #pragma unroll  // (constant indices: sw and sb stay in registers)
        for (int p = 0; p < NP; p++)  // slice p: channels [32·V·p, 32·V·(p+1))
            if (32 * V * p < C) block_column_sums<V, LN_WARPS, 2>(sh, {sw[p], sb[p]}, partial + (size_t)k * C, (size_t)K * C, 32 * V * p, C);
    }
}
// out = a + b, V elements per thread per step (the tail, N mod V, by thread 0); out may be a
template <class floatX, int V> __global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t N) {
    const size_t stride = (size_t)gridDim.x * blockDim.x * V, main = N / V * V;
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < main; i += stride) {
        Pack<floatX, V> ap = load_pack<V>(a + i), bp = load_pack<V>(b + i), op;
        for (int k = 0; k < V; k++) op.v[k] = from_f<floatX>(to_f(ap.v[k]) + to_f(bp.v[k]));
        store_pack<V>(out + i, op);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (size_t i = main; i < N; i++) out[i] = from_f<floatX>(to_f(a[i]) + to_f(b[i]));
}
// the vector width for rows of C elements at these pointers (1 when packs are switched off);
// C = 0 for a flat array, where only the pointers matter
template <class floatX> inline int layernorm_pack(const Ctx& ctx, size_t C, std::initializer_list<const void*> ptrs) {
    return ctx.kernels.layernorm_packs ? pack_width<floatX>(C, ptrs) : 1;
}
#endif

#ifdef LLMC_CUDA
template <class floatX, bool ADD>
inline void layernorm_forward_launch(const Ctx& ctx, floatX* out, float* mean, float* rstd, floatX* res, const floatX* inp, const floatX* add,
                                     const floatX* w, const floatX* b, int N, int C) {
    constexpr int P = PACK<floatX>;  // (the launch rewriting for the emulator wants no nested <>)
    if (layernorm_pack<floatX>(ctx, C, {out, res, inp, add, w, b}) > 1)
        layernorm_forward_kernel<floatX, P, ADD><<<ceil_div(N, 8), 256, 0, ctx.stream>>>(out, mean, rstd, res, inp, add, w, b, N, C);
    else
        layernorm_forward_kernel<floatX, 1, ADD><<<ceil_div(N, 8), 256, 0, ctx.stream>>>(out, mean, rstd, res, inp, add, w, b, N, C);
    CUDA_LAUNCH_CHECK();
}
#endif
template <class floatX>
inline void layernorm_forward(const Ctx& ctx, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N, int C) {
    OpScope prof(ctx, 0, 2.0 * N * C * sizeof(floatX) + 8.0 * N, "layernorm forward");  // inp → out, mean, rstd
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA)
        return layernorm_forward_launch<floatX, false>(ctx, out, mean, rstd, nullptr, inp, nullptr, w, b, N, C);
#endif
    layernorm_forward_cpu(out, mean, rstd, inp, w, b, N, C);
}
// res = a + b, then out = LayerNorm(res): the residual add and the LayerNorm that reads its sum.
// On the GPU one kernel does both, so res is not read back from memory: 4·N·C elements move
// instead of the 5·N·C of residual_forward then layernorm_forward. The same bits as those two.
template <class floatX>
inline void residual_layernorm_forward(const Ctx& ctx, floatX* res, floatX* out, float* mean, float* rstd, const floatX* a, const floatX* b,
                                       const floatX* w, const floatX* bias, int N, int C) {
    OpScope prof(ctx, 0, 4.0 * N * C * sizeof(floatX) + 8.0 * N, "residual + layernorm forward");  // a, b → res, out, mean, rstd
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA)
        return layernorm_forward_launch<floatX, true>(ctx, out, mean, rstd, res, a, b, w, bias, N, C);
#endif
    residual_forward_cpu(res, a, b, (size_t)N * C);
    layernorm_forward_cpu(out, mean, rstd, res, w, bias, N, C);
}
#ifdef LLMC_CUDA
template <class floatX, int V>
inline void layernorm_backward_launch(const Ctx& ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout, const floatX* inp, const floatX* w,
                                      const float* mean, const float* rstd, int N, int C);
// --layernorm-prefetch auto's trial (layernorm_prefetch_auto, the trainer's default): the whole
// backward without and with the prefetch, each on copies of dinp, dw and db, timed and its
// outputs hashed (autotune.cuh's rule). The prefetch is kept if it was 2% faster and wrote the
// same bits, which it should: the same arithmetic. Rank 0 prints the decision.
template <class floatX, int V>
inline int layernorm_tune_prefetch(const Ctx& ctx, const floatX* dinp, const floatX* dw, const floatX* db, const floatX* dout, const floatX* inp,
                                   const floatX* w, const float* mean, const float* rstd, int N, int C) {
    const size_t NC = (size_t)N * C, n = NC + (db ? 2 : 1) * (size_t)C;
    floatX* s = nullptr;  // copies of dinp, dw, db
    if (cudaMalloc(&s, n * sizeof(floatX)) != cudaSuccess) {
        cudaGetLastError();
        if (g_rank == 0) printf("layernorm: the backward without its prefetch (--layernorm-prefetch auto: no room for its trial)\n");
        return 0;
    }
    auto copy = [&](floatX* to, const floatX* from, size_t k) { CUDA_CHECK(cudaMemcpyAsync(to, from, k * sizeof(floatX), cudaMemcpyDeviceToDevice, ctx.stream)); };
    const AutotunePick t = autotune_pick(ctx, 2, [&] { copy(s, dinp, NC); copy(s + NC, dw, C); if (db) copy(s + NC + C, db, C); },
        [&](int v) {
            Ctx variant = ctx;
            variant.kernels.layernorm_prefetch_auto = false, variant.kernels.layernorm_prefetch = v == 1;
            layernorm_backward_launch<floatX, V>(variant, s, s + NC, db ? s + NC + C : nullptr, dout, inp, w, mean, rstd, N, C);
            return true;
        }, {{s, n * sizeof(floatX)}});
    CUDA_CHECK(cudaFree(s));
    if (g_rank == 0)
        printf("layernorm: the backward %s its prefetch (--layernorm-prefetch auto, timed at N=%d C=%d: %.3f ms without, %.3f ms with%s)\n",
               t.best == 1 ? "with" : "without", N, C, t.ms[0], t.ms[1], t.same ? "; the same bits" : "; the bits differed");
    return t.best == 1 ? 1 : 0;
}
// ctx.kernels.layernorm_fused = false runs the backward as two kernels, dinp and the parameter
// pass (for dev/cuda's comparison; the results are the same bits). layernorm_prefetch: the
// one-kernel backward with its sums in registers (C ≤ 32·V·NP) prefetches dinp (PF above);
// layernorm_prefetch_auto: with or without, as its trial above decides at the first call of
// layernorm_tune_rows rows or more. The same bits either way.
template <class floatX, int V>
inline void layernorm_backward_launch(const Ctx& ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout, const floatX* inp, const floatX* w,
                                      const float* mean, const float* rstd, int N, int C) {
    const int R = ln_chunk_rows(N), K = (int)ceil_div(N, R), np = (int)ceil_div(C, 32 * V);
    static Buf<float> partial_buf;
    float* partial = gpu_scratch(partial_buf, ctx, 2 * (size_t)K * C);
    constexpr int NP = 32 / V;  // 32 channels per lane: 64 fp32 sums in registers (C ≤ 1024; ~100 registers)
    const size_t sums_bytes = (size_t)LN_WARPS * 2 * C * sizeof(float);  // wider rows: the sums in shared memory
    bool fused = false;
    if constexpr (V > 1) {  // (V = PACK<floatX>: 4 or 8)
        if (ctx.kernels.layernorm_fused && np <= NP) {
            bool prefetch = ctx.kernels.layernorm_prefetch;
            if (ctx.kernels.layernorm_prefetch_auto) {
                int& kept = ctx.tuned->layernorm_prefetch;
                if (kept < 0 && N >= ctx.kernels.layernorm_tune_rows) kept = layernorm_tune_prefetch<floatX, V>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
                prefetch = kept == 1;
            }
            if (prefetch)
                layernorm_backward_fused_kernel<floatX, V, NP, true><<<K, 32 * LN_WARPS, 0, ctx.stream>>>(dinp, partial, dout, inp, w, mean, rstd, N, C, R);
            else
                layernorm_backward_fused_kernel<floatX, V, NP><<<K, 32 * LN_WARPS, 0, ctx.stream>>>(dinp, partial, dout, inp, w, mean, rstd, N, C, R);
            fused = true;
        } else if (ctx.kernels.layernorm_fused && sums_bytes <= dynamic_shared_ceiling(layernorm_backward_fused_kernel<floatX, V, 0>)) {
            SHARED_OPT_IN(layernorm_backward_fused_kernel<floatX, V, 0>);
            layernorm_backward_fused_kernel<floatX, V, 0><<<K, 32 * LN_WARPS, sums_bytes, ctx.stream>>>(dinp, partial, dout, inp, w, mean, rstd, N, C, R);
            fused = true;
        }
    }
    if (!fused) {
        layernorm_backward_dinp_kernel<floatX, V><<<ceil_div(N, 8), 256, 0, ctx.stream>>>(dinp, dout, inp, w, mean, rstd, N, C);
        dim3 grid(ceil_div(C, 32 * V), K);
        layernorm_backward_params_partial<floatX, V><<<grid, 32 * LN_WARPS, 0, ctx.stream>>>(partial, dout, inp, mean, rstd, N, C, R);
    }
    CUDA_LAUNCH_CHECK();
    column_sum_add(ctx, dw, partial, C, K);  // stage 2 (common.h), in a fixed order
    if (db) column_sum_add(ctx, db, partial + (size_t)K * C, C, K);  // (no bias: its sums are dropped)
}
#endif
template <class floatX>
inline void layernorm_backward(const Ctx& ctx, floatX* dinp, floatX* dw, floatX* db, const floatX* dout, const floatX* inp, const floatX* w,
                               const float* mean, const float* rstd, int N, int C) {
    OpScope prof(ctx, 0, 4.0 * N * C * sizeof(floatX) + 8.0 * N, "layernorm backward");  // dout, inp, mean, rstd; dinp +=
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (layernorm_pack<floatX>(ctx, C, {dinp, dout, inp, w}) > 1)
            layernorm_backward_launch<floatX, PACK<floatX>>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
        else
            layernorm_backward_launch<floatX, 1>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
        return;
    }
#endif
    const size_t NC = (size_t)N * C;
    F32View<floatX> di(dinp, NC), dW(dw, C), dB(db, db ? C : 0), d(dout, NC), x(inp, NC), W(w, C);
    layernorm_backward_cpu(di.p, dW.p, db ? dB.p : nullptr, d.p, x.p, W.p, mean, rstd, N, C);
    di.store(); dW.store(); if (db) dB.store();
}

// RMSNorm (Llama's): LayerNorm without the centering and the bias (the header), through the
// same functions and kernels with mean = b = db = nullptr.
template <class floatX> inline void rmsnorm_forward(const Ctx& ctx, floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    layernorm_forward(ctx, out, (float*)nullptr, rstd, inp, w, (const floatX*)nullptr, N, C);
}
template <class floatX> inline void residual_rmsnorm_forward(const Ctx& ctx, floatX* res, floatX* out, float* rstd, const floatX* a, const floatX* b, const floatX* w,
                                                        int N, int C) {
    residual_layernorm_forward(ctx, res, out, (float*)nullptr, rstd, a, b, w, (const floatX*)nullptr, N, C);
}
template <class floatX> inline void rmsnorm_backward(const Ctx& ctx, floatX* dinp, floatX* dw, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd,
                                                int N, int C) {
    layernorm_backward(ctx, dinp, dw, (floatX*)nullptr, dout, inp, w, (const float*)nullptr, rstd, N, C);
}
template <class floatX> inline void residual_forward(const Ctx& ctx, floatX* out, const floatX* a, const floatX* b, size_t N) {
    OpScope prof(ctx, 0, 3.0 * N * sizeof(floatX), "residual add");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<floatX>;
        if (layernorm_pack<floatX>(ctx, 0, {out, a, b}) > 1)
            residual_forward_kernel<floatX, P><<<grid_for(ceil_div(N, (size_t)P)), 256, 0, ctx.stream>>>(out, a, b, N);
        else
            residual_forward_kernel<floatX, 1><<<grid_for(N), 256, 0, ctx.stream>>>(out, a, b, N);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    residual_forward_cpu(out, a, b, N);
}
// dst += src: the residual add in place (each thread reads its pack before it writes it back)
template <class floatX> inline void add_inplace(const Ctx& ctx, floatX* dst, const floatX* src, size_t N) {
    OpScope prof(ctx, 0, 3.0 * N * sizeof(floatX), "add in place");  // (not the model's residual add)
    residual_forward(ctx, dst, dst, src, N);
}
