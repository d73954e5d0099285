/*
attention.cuh — causal self-attention that never stores the T×T matrix.

qkv is (B, T, C + 2·KV): each row [q | k | v]. Query head h reads key/value head h / G, with
G = NH/NKV (grouped-query attention; NKV = NH is GPT-2's). out is (B, T, C), lse is (B, NH, T).

  forward:   s_j = q_t·k_j / √hs (j ≤ t),  lse_t = log Σ_j exp(s_j),  out_t = Σ_j exp(s_j − lse_t)·v_j
  backward:  p_j = exp(s_j − lse_t),  D_t = dout_t·out_t,  ds_j = p_j·(dout_t·v_j − D_t)
             dv_j += p_j·dout_t,  dq_t += ds_j·k_j/√hs,  dk_j += ds_j·q_t/√hs

lse is an output because ring attention merges partial results with it. All math is fp32.
This file holds the math, the CPU loops, the exact fp32 kernels (a warp a row) and the choice
among kernels. The 16-bit flash kernels live in flash_attention.cuh (mma.sync) and
flash_attention_hopper.cuh (wgmma). Every backward is deterministic: no two threads add to one value.

Main functions: attention_forward, attention_backward (the ops); flash_forward, flash_backward
(which flash kernel runs, by the --flash-* switches); flash_run_pass (the timed choices of
--flash-rows auto and --flash-wgmma auto); flash_forward_wgmma_layout, flash_fused_backward (the
Hopper layouts' auto); attention_block_forward/_backward (ring attention).

Tests: test/test_ops.cpp (finite differences, lse), test/gpucheck_ops.cu (CUDA against the CPU).
More: docs/kernels.md.
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"
#include "profiler.h"
#include "autotune.cuh"

// Where head h's q, k and v lie in a row of qkv (see the header): q at h·hs, k at C + (h/G)·hs,
// v at C + KV + (h/G)·hs, in rows of C + 2·KV elements.
struct QKVLayout {
    int C, NH, NKV, hs;
    HD QKVLayout(int C_, int NH_, int NKV_) : C(C_), NH(NH_), NKV(NKV_), hs(C_ / NH_) {}
    HD int kv() const { return NKV * hs; }                   // KV: k's width, and v's
    HD size_t row() const { return (size_t)C + 2 * kv(); }   // a row of qkv
    HD int group() const { return NH / NKV; }                // G: query heads per key/value head
    HD int k(int h) const { return C + h / group() * hs; }  // query head h's key head, in a row
    HD int v(int h) const { return C + kv() + h / group() * hs; }
};
// The ops' layout, checked once (fatal where NKV does not divide NH).
inline QKVLayout qkv_layout(int C, int NH, int NKV) {
    if (NKV < 1 || NH % NKV) fatal("attention: %d query heads are not groups of %d key/value heads", NH, NKV);
    return QKVLayout(C, NH, NKV);
}

// (fp32; the dtype wrapper attention_forward gives it fp32 views of bf16 buffers)
inline void attention_forward_cpu(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV) {
    const QKVLayout L(C, NH, NKV);
    const int hs = L.hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t W = L.row();
    #pragma omp parallel
    {
        std::vector<float> s(T);
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * W + h * hs;
                    float m = -INFINITY;
                    for (int j = 0; j <= t; j++) {
                        const float* k = qkv + ((size_t)b * T + j) * W + L.k(h);
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
                        const float* v = qkv + ((size_t)b * T + j) * W + L.v(h);
                        for (int i = 0; i < hs; i++) o[i] += p * v[i];
                    }
                }
    }
}

// dqkv is written (not accumulated): it is a scratch buffer, consumed by the qkv matmul backward.
// A (b, key/value head kh) pair owns its dk, dv and its group's dq: parallel over those pairs.
inline void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int C, int NH, int NKV) {
    const QKVLayout L(C, NH, NKV);
    const int hs = L.hs, G = L.group();
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t W = L.row();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < NKV; kh++) {
            for (int t = 0; t < T; t++) {
                float* row = dqkv + ((size_t)b * T + t) * W;
                for (int i = 0; i < hs; i++) row[L.k(kh * G) + i] = row[L.v(kh * G) + i] = 0.0f;
                for (int h = kh * G; h < kh * G + G; h++)
                    for (int i = 0; i < hs; i++) row[h * hs + i] = 0.0f;
            }
            for (int h = kh * G; h < kh * G + G; h++)
                for (int t = 0; t < T; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * W + h * hs;
                    const float* dO = dout + ((size_t)b * T + t) * C + h * hs;
                    const float* O = out + ((size_t)b * T + t) * C + h * hs;
                    float* dq = dqkv + ((size_t)b * T + t) * W + h * hs;
                    float l = lse[((size_t)b * NH + h) * T + t];
                    float D = 0.0f;
                    for (int i = 0; i < hs; i++) D += dO[i] * O[i];
                    for (int j = 0; j <= t; j++) {
                        const float* k = qkv + ((size_t)b * T + j) * W + L.k(h);
                        const float* v = qkv + ((size_t)b * T + j) * W + L.v(h);
                        float* dk = dqkv + ((size_t)b * T + j) * W + L.k(h);
                        float* dv = dqkv + ((size_t)b * T + j) * W + L.v(h);
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

// ---- ring attention's pieces (context_parallel.h)
// A rank of a context-parallel group holds some of the sequence's positions; the keys of the
// others arrive one block at a time (kv: (B, Tk, 2·KV), k then v, rows in that rank's order).
// attention_block_forward merges the attention of the query rows [q0, q0 + nq) over the key rows
// [k0, k0 + nk) of kv — all visible, no mask: context_parallel.h passes only blocks of keys that
// lie wholly before the queries — into the running output o (fp32, (B, T, C)) and lse of those rows:
//   lse_blk = log Σ_j exp(s_j),   o_blk = Σ_j exp(s_j − lse_blk) · v_j
//   lse'    = log(exp(lse) + exp(lse_blk)),   o' = exp(lse − lse') · o + exp(lse_blk − lse') · o_blk
// (the CUDA kernel carries on the online softmax from (lse, o) instead: the same sums).
inline void attention_block_forward_cpu(float* o, float* lse, const float* qkv, const float* kv, int B, int T, int Tk, int C,
                                        int NH, int NKV, int q0, int nq, int k0, int nk) {
    const QKVLayout L(C, NH, NKV);
    const int hs = L.hs, KV = L.kv();
    const float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel
    {
        std::vector<float> s(nk), ob(hs);
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = q0; t < q0 + nq; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * L.row() + h * hs;
                    const int kh = h / L.group();
                    float m = -INFINITY;
                    for (int j = 0; j < nk; j++) {
                        const float* k = kv + ((size_t)b * Tk + k0 + j) * 2 * KV + kh * hs;
                        float d = 0.0f;
                        for (int i = 0; i < hs; i++) d += q[i] * k[i];
                        s[j] = d * scale;
                        if (s[j] > m) m = s[j];
                    }
                    float sum = 0.0f;
                    for (int j = 0; j < nk; j++) sum += expf(s[j] - m);
                    const float lse_blk = m + logf(sum);
                    for (int i = 0; i < hs; i++) ob[i] = 0.0f;
                    for (int j = 0; j < nk; j++) {
                        const float p = expf(s[j] - lse_blk);
                        const float* v = kv + ((size_t)b * Tk + k0 + j) * 2 * KV + KV + kh * hs;
                        for (int i = 0; i < hs; i++) ob[i] += p * v[i];
                    }
                    float& l = lse[((size_t)b * NH + h) * T + t];
                    const float mx = fmaxf(l, lse_blk), merged = mx + logf(expf(l - mx) + expf(lse_blk - mx));
                    const float wa = expf(l - merged), wb = expf(lse_blk - merged);
                    float* out = o + ((size_t)b * T + t) * C + h * hs;
                    for (int i = 0; i < hs; i++) out[i] = wa * out[i] + wb * ob[i];
                    l = merged;
                }
    }
}

// D_t = dout_t · out_t per (b, h, t), into D (B, NH, T): the backward's row dots (see the header).
inline void attention_row_dots_cpu(float* D, const float* dout, const float* out, int B, int T, int C, int NH) {
    const int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C + h * hs, *o = out + ((size_t)b * T + t) * C + h * hs;
                float s = 0.0f;
                for (int i = 0; i < hs; i++) s += d[i] * o[i];
                D[((size_t)b * NH + h) * T + t] = s;
            }
}

// The backward of a block, with the whole attention's lse and D (so p is the final probability):
// the query rows' dq (the q columns of dx, an fp32 (B, T, C + 2·KV)) and the key rows' dk, dv
// (dkv, an fp32 (B, Tk, 2·KV)) are *accumulated*, the header's formulas over this block's (t, j)
// pairs. Parallel over (b, key/value head): each owns its dk, dv and its group's dq.
inline void attention_block_backward_cpu(float* dx, float* dkv, const float* dout, const float* qkv, const float* kv,
                                         const float* lse, const float* D, int B, int T, int Tk, int C, int NH, int NKV,
                                         int q0, int nq, int k0, int nk) {
    const QKVLayout L(C, NH, NKV);
    const int hs = L.hs, KV = L.kv(), G = L.group();
    const float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < NKV; kh++)
            for (int h = kh * G; h < kh * G + G; h++)
                for (int t = q0; t < q0 + nq; t++) {
                    const float* q = qkv + ((size_t)b * T + t) * L.row() + h * hs;
                    const float* dO = dout + ((size_t)b * T + t) * C + h * hs;
                    float* dq = dx + ((size_t)b * T + t) * L.row() + h * hs;
                    const float l = lse[((size_t)b * NH + h) * T + t], Dt = D[((size_t)b * NH + h) * T + t];
                    for (int j = k0; j < k0 + nk; j++) {
                        const float* k = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
                        const float* v = k + KV;
                        float* dk = dkv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
                        float* dv = dk + KV;
                        float sc = 0.0f, dp = 0.0f;
                        for (int i = 0; i < hs; i++) { sc += q[i] * k[i]; dp += dO[i] * v[i]; }
                        const float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
                        for (int i = 0; i < hs; i++) {
                            dv[i] += p * dO[i];
                            dq[i] += ds * k[i];
                            dk[i] += ds * q[i];
                        }
                    }
                }
}

// dst rows (pitch dst_pitch elements) = src rows (pitch src_pitch), `width` elements of each of
// `rows` rows, converted to dst's type; or added to them (add). How the ring moves a rank's k and
// v out of qkv, and its fp32 sums in and out of floatX buffers.
template <class D, class S>
inline void copy_rows_cpu(D* dst, size_t dst_pitch, const S* src, size_t src_pitch, size_t width, size_t rows, bool add) {
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++) {
            D& d = dst[r * dst_pitch + i];
            const float x = to_f(src[r * src_pitch + i]);
            d = from_f<D>(add ? to_f(d) + x : x);
        }
}

#ifdef LLMC_CUDA
static const int ATT_MAX_PER_LANE = 8;  // head size up to 256

// r[k] = p[lane + 32k] for the head channels this lane holds (0 past the head size)
template <class floatX> __device__ inline void load_lanes(float* r, const floatX* p, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; r[k] = i < hs ? to_f(p[i]) : 0.0f; }
}
template <class floatX> __device__ inline void store_lanes(floatX* p, const float* r, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) p[i] = from_f<floatX>(r[k]); }
}
// r · p over the head channels (r in the lanes' registers, p in memory), summed over the warp
template <class floatX> __device__ inline float lane_dot(const float* r, const floatX* p, int lane, int hs, int per) {
    float d = 0.0f;
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) d += r[k] * to_f(p[i]); }
    return warp_sum(d);
}
// r += a · p over the lane's head channels
template <class floatX> __device__ inline void lane_axpy(float* r, float a, const floatX* p, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) r[k] += a * to_f(p[i]); }
}

// One key j of the online softmax, in a warp (lanes split the head): s = q·k_j/√hs; the running
// max m and sum l, and the output acc (unnormalized), rescaled to the new max and p·v_j added.
template <class floatX>
__device__ inline void online_softmax_key(float* acc, float& m, float& l, const float* qr, const floatX* kj, const floatX* vj, int lane, int hs,
                                          int per, float scale) {
    float s = lane_dot(qr, kj, lane, hs, per) * scale;
    float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; acc[k] = acc[k] * corr + (i < hs ? p * to_f(vj[i]) : 0.0f); }
    m = m_new;
}

// one warp per (b, h, t); lane i holds head channels i, i+32, ...
template <class floatX>
__global__ void attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int B, int T, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs;
    if (row >= B * NH * T) return;
    int t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * W + h * hs;
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    int per = (hs + 31) / 32;
    load_lanes(qr, q, lane, hs, per);
    for (int k = 0; k < per; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const floatX* kj = qkv + ((size_t)b * T + j) * W + L.k(h);
        const floatX* vj = kj + L.kv();
        online_softmax_key(acc, m, l, qr, kj, vj, lane, hs, per, scale);
    }
    for (int k = 0; k < per; k++) acc[k] /= l;
    store_lanes(out + ((size_t)b * T + t) * L.C + h * hs, acc, lane, hs, per);
    if (lane == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// D[b,h,t] = dout_t · out_t over the head's channels. 8 lanes per (b, t, h) row, 4 rows per warp,
// rows in memory order (b, t, h: row r's channels are elements [r·hs, r·hs + hs) of dout and of
// out), so a warp reads one contiguous stretch of each; V elements per load (16 bytes where hs
// and the pointers allow).
template <class floatX, int V>
__global__ void attention_backward_D_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    const size_t rows = (size_t)B * T * NH, r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 8;
    const int sub = threadIdx.x % 8, hs = C / NH;
    float s = 0.0f;
    if (r < rows)
        for (int c = sub * V; c < hs; c += 8 * V) {
            Pack<floatX, V> dp = load_pack<V>(dout + r * hs + c), op = load_pack<V>(out + r * hs + c);
            for (int k = 0; k < V; k++) s += to_f(dp.v[k]) * to_f(op.v[k]);
        }
    for (int o = 4; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // the row's 8 lanes
    if (r < rows && sub == 0) {
        const size_t bt = r / NH, b = bt / T, t = bt % T, h = r % NH;
        D[(b * NH + h) * T + t] = s;
    }
}

// one warp per query row t: dq_t = Σ_{j≤t} ds_j · k_j / √hs
template <class floatX>
__global__ void attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                             const float* D, int B, int T, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, per = (hs + 31) / 32;
    if (row >= B * NH * T) return;
    int t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const floatX* q = qkv + ((size_t)b * T + t) * W + h * hs;
    const floatX* dO = dout + ((size_t)b * T + t) * L.C + h * hs;
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], dq[ATT_MAX_PER_LANE];
    load_lanes(qr, q, lane, hs, per);
    load_lanes(dor, dO, lane, hs, per);
    for (int k = 0; k < per; k++) dq[k] = 0.0f;
    float l = lse[row], Dt = D[row];
    for (int j = 0; j <= t; j++) {
        const floatX* kj = qkv + ((size_t)b * T + j) * W + L.k(h);
        const floatX* vj = kj + L.kv();
        float sc = lane_dot(qr, kj, lane, hs, per), dp = lane_dot(dor, vj, lane, hs, per);
        float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
        lane_axpy(dq, ds, kj, lane, hs, per);
    }
    store_lanes(dqkv + ((size_t)b * T + t) * W + h * hs, dq, lane, hs, per);
}

// one warp per key row j of key/value head kh: dk_j = Σ_h Σ_{t≥j} ds · q_t / √hs,
// dv_j = Σ_h Σ_{t≥j} p · dout_t over the query heads h of kh's group
template <class floatX>
__global__ void attention_backward_dkv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                              const float* D, int B, int T, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, NKV = L.NKV, G = L.group(), hs = L.hs, per = (hs + 31) / 32;
    if (row >= B * NKV * T) return;
    int j = row % T, kh = (row / T) % NKV, b = row / (T * NKV);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const floatX* kj = qkv + ((size_t)b * T + j) * W + L.k(kh * G);
    const floatX* vj = kj + L.kv();
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE], dk[ATT_MAX_PER_LANE], dv[ATT_MAX_PER_LANE];
    load_lanes(kr, kj, lane, hs, per);
    load_lanes(vr, vj, lane, hs, per);
    for (int k = 0; k < per; k++) { dk[k] = 0.0f; dv[k] = 0.0f; }
    for (int h = kh * G; h < kh * G + G; h++) {
        const size_t head_row0 = ((size_t)b * NH + h) * T;
        for (int t = j; t < T; t++) {
            const floatX* q = qkv + ((size_t)b * T + t) * W + h * hs;
            const floatX* dO = dout + ((size_t)b * T + t) * L.C + h * hs;
            float sc = lane_dot(kr, q, lane, hs, per), dp = lane_dot(vr, dO, lane, hs, per);
            float p = expf(sc * scale - lse[head_row0 + t]), ds = p * (dp - D[head_row0 + t]) * scale;
            lane_axpy(dv, p, dO, lane, hs, per);
            lane_axpy(dk, ds, q, lane, hs, per);
        }
    }
    floatX* dko = dqkv + ((size_t)b * T + j) * W + L.k(kh * G);
    store_lanes(dko, dk, lane, hs, per);
    store_lanes(dko + L.kv(), dv, lane, hs, per);
}
// ---- ring attention's pieces (context_parallel.h): the exact path's warp-per-row kernels, fp32 math
// (fp32 runs and head sizes other than 64 and 128; the 16-bit tensor-core ones are flash_block_*)
// (kv and dkv: (B, Tk, 2·KV) rows, k then v, as the CPU version's)

// one warp per query row (b, h, t in [q0, q0 + nq)): the online softmax carried on from the
// running (lse, o) over the block's keys, which is the merge of the CPU version
template <class floatX>
__global__ void attention_block_forward_kernel(float* o, float* lse, const floatX* qkv, const floatX* kv, int B, int T, int Tk, QKVLayout L,
                                               int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NH * nq) return;
    int t = q0 + row % nq, h = (row / nq) % NH, b = row / (nq * NH), kh = h / L.group();
    const float scale = rsqrtf((float)hs);
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    load_lanes(qr, qkv + ((size_t)b * T + t) * L.row() + h * hs, lane, hs, per);
    float* orow = o + ((size_t)b * T + t) * L.C + h * hs;
    load_lanes(acc, orow, lane, hs, per);
    float* lrow = lse + ((size_t)b * NH + h) * T + t;
    float m = *lrow, l = 1.0f;  // (acc is normalized: weight 1 at m = lse)
    for (int j = k0; j < k0 + nk; j++) {
        const floatX* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
        const floatX* vj = kj + KV;
        online_softmax_key(acc, m, l, qr, kj, vj, lane, hs, per, scale);
    }
    for (int k = 0; k < per; k++) acc[k] /= l;
    store_lanes(orow, acc, lane, hs, per);
    if (lane == 0) *lrow = m + logf(l);
}

// one warp per query row: dq (dx's q columns) += Σ_j ds_j · k_j / √hs over the block's keys
template <class floatX>
__global__ void attention_block_backward_dq_kernel(float* dx, const floatX* dout, const floatX* qkv, const floatX* kv, const float* lse,
                                                   const float* D, int B, int T, int Tk, QKVLayout L, int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NH * nq) return;
    int t = q0 + row % nq, h = (row / nq) % NH, b = row / (nq * NH), kh = h / L.group();
    const float scale = rsqrtf((float)hs);
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], dq[ATT_MAX_PER_LANE];
    load_lanes(qr, qkv + ((size_t)b * T + t) * L.row() + h * hs, lane, hs, per);
    load_lanes(dor, dout + ((size_t)b * T + t) * L.C + h * hs, lane, hs, per);
    float* dqrow = dx + ((size_t)b * T + t) * L.row() + h * hs;
    load_lanes(dq, dqrow, lane, hs, per);
    const size_t st = ((size_t)b * NH + h) * T + t;
    const float l = lse[st], Dt = D[st];
    for (int j = k0; j < k0 + nk; j++) {
        const floatX* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
        float sc = lane_dot(qr, kj, lane, hs, per), dp = lane_dot(dor, kj + KV, lane, hs, per);
        float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
        lane_axpy(dq, ds, kj, lane, hs, per);
    }
    store_lanes(dqrow, dq, lane, hs, per);
}

// one warp per key row j in [k0, k0 + nk) of key/value head kh: dk_j += Σ_h Σ_t ds · q_t / √hs,
// dv_j += Σ_h Σ_t p · dout_t over the query heads h of kh's group
template <class floatX>
__global__ void attention_block_backward_dkv_kernel(float* dkv, const floatX* dout, const floatX* qkv, const floatX* kv, const float* lse,
                                                    const float* D, int B, int T, int Tk, QKVLayout L, int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, NKV = L.NKV, G = L.group(), hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NKV * nk) return;
    int j = k0 + row % nk, kh = (row / nk) % NKV, b = row / (nk * NKV);
    const float scale = rsqrtf((float)hs);
    const floatX* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE], dk[ATT_MAX_PER_LANE], dv[ATT_MAX_PER_LANE];
    load_lanes(kr, kj, lane, hs, per);
    load_lanes(vr, kj + KV, lane, hs, per);
    float* dkrow = dkv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
    load_lanes(dk, dkrow, lane, hs, per);
    load_lanes(dv, dkrow + KV, lane, hs, per);
    for (int h = kh * G; h < kh * G + G; h++) {
        const size_t head_row0 = ((size_t)b * NH + h) * T;
        for (int t = q0; t < q0 + nq; t++) {
            const floatX* q = qkv + ((size_t)b * T + t) * L.row() + h * hs;
            const floatX* dO = dout + ((size_t)b * T + t) * L.C + h * hs;
            float sc = lane_dot(kr, q, lane, hs, per), dp = lane_dot(vr, dO, lane, hs, per);
            float p = expf(sc * scale - lse[head_row0 + t]), ds = p * (dp - D[head_row0 + t]) * scale;
            lane_axpy(dv, p, dO, lane, hs, per);
            lane_axpy(dk, ds, q, lane, hs, per);
        }
    }
    store_lanes(dkrow, dk, lane, hs, per);
    store_lanes(dkrow + KV, dv, lane, hs, per);
}

template <class D, class S>
__global__ void copy_rows_kernel(D* dst, size_t dst_pitch, const S* src, size_t src_pitch, size_t width, size_t rows, bool add) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < width * rows; e += (size_t)gridDim.x * blockDim.x) {
        const size_t r = e / width, i = e % width;
        D& d = dst[r * dst_pitch + i];
        const float x = to_f(src[r * src_pitch + i]);
        d = from_f<D>(add ? to_f(d) + x : x);
    }
}

// ---- 16-bit tensor-core flash attention: its kernels (their own files), then which one runs
#include "flash_attention.cuh"
#include "flash_attention_hopper.cuh"

// The flash kernels run bf16 or fp16 with head size 64 or 128 and 16-byte aligned rows (C % 8 == 0).
// Which of them runs is ctx.kernels' choice (kernel_options.h): the warp-per-row kernels
// (flash = false), per-lane shared-memory loads (flash_ldmatrix = false), tiles staged through
// registers (flash_async = false), one backward pass alone (flash_backward_passes, for timing),
// two m-tiles a warp at head size 64 (flash_*_rows = 32: the same bits, 190-255 registers), wgmma
// on a compute capability 9.0 GPU (flash_wgmma, flash_wgmma_groups warpgroups of 64 rows a block;
// elsewhere ignored), each wgmma waited for at once (flash_wgmma_overlap = false: the same bits;
// where they differ, the software pipeline is wrong).
inline bool gpu_has_wgmma() {  // sm_90a's code runs here (the emulator emulates it)
    static const bool yes = [] {
        int dev = 0, major = 0, minor = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major == 9 && minor == 0;
    }();
    return yes;
}
// --flash-rows auto (flash_rows_auto, the trainer's default): at head size 64, each pass's first
// launch of at least flash_tune_blocks blocks (a training step's, at any real size) is timed with 16 and with 32
// rows a warp, and the faster is kept for the rest of the run. The two give the same bits
// (gpucheck_ops, test_gpu_train), so only the speed depends on the choice. Which is faster has
// gone either way by pass, GPU and compiler (docs/kernels.md). Rank 0 prints each choice.
// --flash-wgmma auto (flash_wgmma_auto, the trainer's default; on a compute capability 9.0 GPU):
// each pass's first FLASH_WGMMA_SAMPLES launches of that size (the first step's layers) run with
// wgmma and then with mma.sync (at its rows, chosen first), the first of them timed both ways,
// each followed by a hash of every bit the pass wrote (gpu_bits_hash); the run goes on with
// mma.sync's output. wgmma is then kept where it was faster and wrote the same bits every time.
// The two add the same products in the same order, so they agree wherever the two instructions
// round their sums alike (gpucheck_ops' wgmma part says, for the log, whether they do); where
// they do not, mma.sync stays: a choice made by timing (which two runs, or two ranks, may make
// differently) must not change what a run computes. Several launches, not one: a tensor whose
// sums happen to need no rounding shows no difference (the emulator's test met one). Rank 0
// prints each decision, its times and whether the bits agreed.
// --flash-backward fused (flash_fused_backward; the trainer's default): where the wgmma kernels
// run (compute capability 9.0, --flash-wgmma 1 or auto, 2 warpgroups) at head size 64, the
// backward is one fused pass (flash_backward_fused_wgmma_kernel: 5 products instead of 7) and,
// with several splits, a sum of their dQ partial sums (one split: the pass writes dQ itself).
// Its dQ adds the same products in another order than the two passes do, so its bits differ
// from theirs; it is chosen by this fixed rule, never by timing.
// --flash-backward fused128 (flash_fused_backward_128): at head size 128 too.
// flash_fused_splits > 0 sets the number of splits (tests); 0 lets flash_fused_splits choose.
inline bool flash_fused_backward_runs(const KernelOptions& o, int hs) {
    return o.flash_fused_backward && o.flash && (hs == 64 || (hs == 128 && o.flash_fused_backward_128)) && o.flash_wgmma_groups == 2 &&
           (o.flash_wgmma || o.flash_wgmma_auto) && gpu_has_wgmma();
}
// Splits of the fused backward's key blocks (each a block of its own) for the heads past the
// GPU's whole waves (one block an SM; flash_fused_grid): the fewest of 1, 2, 4, 8, 16 (at most
// half the key blocks) whose blocks fill the last wave at least 90%, else the fullest. More
// splits mean more partial sums to add up after.
inline int flash_fused_splits(const KernelOptions& o, long kv_heads, int T) {
    if (o.flash_fused_splits > 0) return o.flash_fused_splits;
    const int nkb = ceil_div(T, 128), sms = std::max(1, gpu_sm_count());
    const long last = kv_heads % sms;  // (the last wave's heads)
    if (last == 0) return 1;
    int best = 1;
    double best_fill = 0;
    for (int S = 1; S <= 16 && (S == 1 || S <= nkb / 2); S *= 2) {
        const double waves = (double)last * S / sms, fill = waves / std::ceil(waves);
        if (fill >= 0.9) return S;
        if (fill > best_fill + 1e-9) best = S, best_fill = fill;
    }
    return best;
}
// The fused backward's blocks: the heads of the GPU's whole waves one block each, the rest in S
// splits. Splitting the whole waves' heads too would not shorten the pass (a wave of them takes a
// head's time either way), only add partial sums. flash_fused_full >= 0 sets them (tests).
inline FusedGrid flash_fused_grid(const KernelOptions& o, int B, int NKV, int T) {
    const int heads = B * NKV, S = flash_fused_splits(o, heads, T), sms = std::max(1, gpu_sm_count());
    const int full = S == 1 ? heads : o.flash_fused_full >= 0 ? std::min(o.flash_fused_full, heads) : heads / sms * sms;
    return {full, S, heads, S == 1 ? 0 : B - full / NKV};  // (the batches from the first split head's)
}
// The fused backward's fp32 partial sums of dQ: the scratch that attention_backward takes (the
// memory plan reserves it), or 0 where the fused backward does not run.
template <class floatX> inline size_t flash_backward_scratch_bytes(const KernelOptions& o, int B, int T, int C, int NH, int NKV) {
    if (!is_half_type<floatX> || !flash_fused_backward_runs(o, C / NH) || C % 8) return 0;
    return fused_partial_floats(flash_fused_grid(o, B, NKV, T), B, (size_t)T * C) * sizeof(float);
}
enum FlashPass { FLASH_FORWARD, FLASH_DKV, FLASH_DQ };  // (autotune.cuh keeps each pass's decisions)
constexpr int FLASH_WGMMA_SAMPLES = 3;
inline const char* flash_pass_name(FlashPass pass) {
    static const char* names[3] = {"forward", "dK/dV pass", "dQ pass"};
    return names[pass];
}

// The faster of 16 and 32 rows a warp for one pass (launch(rows) queues it), printed.
template <class F>
inline int flash_tune_rows(const Ctx& ctx, FlashPass pass, int B, int T, const F& launch) {
    static const char* what[3] = {"query rows a warp in the forward", "keys a warp in the dK/dV pass", "query rows a warp in the dQ pass"};
    float ms[2];
    const int rows = 16 << autotune_faster(ctx, [&](int v) { launch(16 << v); }, ms);
    if (g_rank == 0)
        printf("flash attention: %d %s (--flash-rows auto, timed at B=%d T=%d: %.3f ms with 16, %.3f ms with 32)\n",
               rows, what[pass], B, T, ms[0], ms[1]);
    return rows;
}

// --flash-wgmma auto's decision for one pass, printed.
inline void flash_print_wgmma_trial(const AutotuneTrial& t, FlashPass pass, int B, int T) {
    if (g_rank != 0) return;
    printf("flash attention: %s in the %s (--flash-wgmma auto, timed at B=%d T=%d: %.3f ms with mma.sync, %.3f ms with wgmma; ",
           t.kept ? "wgmma" : "mma.sync", flash_pass_name(pass), B, T, t.ms_default, t.ms_candidate);
    if (t.same) printf("the same bits at its first %d launches)\n", t.samples);
    else printf("the bits differ at launch %d: mma.sync kept)\n", t.samples);
}

// One flash pass, by ctx.kernels: wgmma() where flash_wgmma asks or auto kept it (running both and
// comparing their bits at the pass's first large launches: above), else mma(rows) with this
// pass's rows a warp (timing 16 against 32 first where flash_rows_auto asks and the pass has
// both: head size 64, `both`). outs: every buffer the pass writes (auto's test of the bits).
template <class M, class W>
inline void flash_run_pass(const Ctx& ctx, FlashPass pass, bool both, int rows, long blocks, int B, int T, const M& mma,
                           const W& wgmma, std::initializer_list<BitsRegion> outs) {
    const KernelOptions& o = ctx.kernels;
    Autotuned& tuned = *ctx.tuned;
    const bool big = blocks >= o.flash_tune_blocks, hopper = gpu_has_wgmma();
    if (hopper && o.flash_wgmma) { wgmma(); return; }
    if (both && o.flash_rows_auto && !tuned.flash_rows[pass] && big) tuned.flash_rows[pass] = flash_tune_rows(ctx, pass, B, T, mma);
    if (o.flash_rows_auto && tuned.flash_rows[pass]) rows = tuned.flash_rows[pass];
    if (hopper && o.flash_wgmma_auto) {
        AutotuneTrial& t = tuned.flash_wgmma[pass];
        if (!t.decided && big) {  // a sample: wgmma, then mma.sync (whose output stays)
            if (autotune_trial(ctx, &t, FLASH_WGMMA_SAMPLES, wgmma, [&] { mma(rows); }, outs)) flash_print_wgmma_trial(t, pass, B, T);
            return;
        }
        if (t.kept) { wgmma(); return; }
    }
    mma(rows);
}
template <class floatX> inline bool use_flash(const KernelOptions& o, int C, int NH) {
    int hs = C / NH;
    return is_half_type<floatX> && o.flash && (hs == 64 || hs == 128) && C % 8 == 0;
}
// Calls f(D, LDSM, ASYNC) with std::integral_constant arguments (so that f can name a kernel
// instance) for head size hs and the options above.
template <class F> inline void flash_dispatch(const KernelOptions& o, int hs, const F& f) {
    auto with = [&](auto d) {
        using std::true_type, std::false_type;
        if (o.flash_ldmatrix) o.flash_async ? f(d, true_type{}, true_type{}) : f(d, true_type{}, false_type{});
        else o.flash_async ? f(d, false_type{}, true_type{}) : f(d, false_type{}, false_type{});
    };
    if (hs == 64) with(std::integral_constant<int, 64>{});
    else with(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, hs> (64 or 128: the flash kernels' head sizes).
template <class F> inline void with_head_size(int hs, const F& f) {
    if (hs == 64) f(std::integral_constant<int, 64>{});
    else f(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, flash_wgmma_groups> (1 or 2: warpgroups a block).
template <class F> inline void wgmma_groups_dispatch(const KernelOptions& o, const F& f) {
    if (o.flash_wgmma_groups == 1) f(std::integral_constant<int, 1>{});
    else f(std::integral_constant<int, 2>{});
}
// The wgmma forward: G warpgroups of 64 rows a block, key tiles of BN, swizzled tiles (SW) or not.
template <class floatX, int HS, int G, int BN, bool SW>
inline void flash_forward_wgmma_launch(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    SHARED_OPT_IN(flash_forward_wgmma_kernel<floatX, HS, G, BN, SW>);
    const size_t shared = 4 * BN * HS * sizeof(floatX) + (SW ? 1024 : 0);  // (room to align the swizzled tiles)
    flash_forward_wgmma_kernel<floatX, HS, G, BN, SW><<<dim3(L.NH, B, ceil_div(T, 64 * G)), 128 * G, shared, ctx.stream>>>(out, lse, qkv, T, L, ctx.kernels.flash_wgmma_overlap);
    CUDA_LAUNCH_CHECK();
}
// The forward with a producer warpgroup (flash_forward_producer slots a ring: 2 or 3): 2
// warpgroups of 64 rows a block and the producer's; flash_forward_pingpong: the two take turns;
// flash_forward_keys: key tiles of 64, or of 128 (with 2 slots); SW: swizzled tiles; TMA: copied
// by TMA, through a tensor map of qkv as B × T × its row (boxes of 64 columns × BN rows).
// A tensor map of a B × T × W array of 16-bit values (W: a row's elements) for TMA boxes of 64
// columns × `rows` rows, 128-byte swizzled, zeros past T
template <class floatX> inline CUtensorMap flash_tensor_map(const floatX* base, size_t W, int T, int B, uint32_t rows) {
    const uint64_t dims[3] = {W, (uint64_t)T, (uint64_t)B}, strides[2] = {W * sizeof(floatX), T * W * sizeof(floatX)};
    const uint32_t box[3] = {64, rows, 1};
    return tensor_map_3d_16bit(base, dims, strides, box);
}
// NWG computing warpgroups (2, or 3 at head size 64: flash_forward_groups).
template <class floatX, int HS, int S, bool PINGPONG, int BN, bool SW, bool TMA, int NWG = 2>
inline void flash_forward_producer_launch(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    SHARED_OPT_IN(flash_forward_wgmma_producer_kernel<floatX, HS, S, PINGPONG, BN, SW, TMA, NWG>);
    const size_t shared = 2 * S * BN * HS * sizeof(floatX) + (SW ? 1024 : 0);
    CUtensorMap map{};
    if constexpr (TMA) map = flash_tensor_map(qkv, L.row(), T, B, BN);
    flash_forward_wgmma_producer_kernel<floatX, HS, S, PINGPONG, BN, SW, TMA, NWG><<<dim3(L.NH, B, ceil_div(T, 64 * NWG)), 128 * (NWG + 1), shared, ctx.stream>>>(out, lse, qkv, T, L, ctx.kernels.flash_wgmma_overlap, map);
    CUDA_LAUNCH_CHECK();
}
template <class floatX, int HS, bool SW, bool TMA>
inline void flash_forward_producer(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const KernelOptions& k = ctx.kernels;
    const bool three = k.flash_forward_producer == 3, pingpong = k.flash_forward_pingpong, wide = k.flash_forward_keys == 128;
    if (wide && three) fatal("flash attention: key tiles of 128 in the producer forward need 2 slots (flash_forward_producer = 2)");
    if (k.flash_forward_groups == 3) {  // 192 query rows a block, 160 registers a thread: 64 keys a tile (128 spill)
        if (HS != 64 || pingpong || wide) fatal("flash attention: 3 computing warpgroups in the forward need head size 64, key tiles of 64 and no ping-pong");
        if (three) flash_forward_producer_launch<floatX, 64, 3, false, 64, SW, TMA, 3>(ctx, out, lse, qkv, B, T, L);
        else flash_forward_producer_launch<floatX, 64, 2, false, 64, SW, TMA, 3>(ctx, out, lse, qkv, B, T, L);
        return;
    }
    if (wide && pingpong) flash_forward_producer_launch<floatX, HS, 2, true, 128, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (wide) flash_forward_producer_launch<floatX, HS, 2, false, 128, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (three && pingpong) flash_forward_producer_launch<floatX, HS, 3, true, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (three) flash_forward_producer_launch<floatX, HS, 3, false, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (pingpong) flash_forward_producer_launch<floatX, HS, 2, true, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else flash_forward_producer_launch<floatX, HS, 2, false, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
}
// The wgmma forward the options name (a producer or not, key tiles, warpgroups, swizzled tiles, TMA)
template <class floatX, int HS, bool SW>
inline void flash_forward_wgmma(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const KernelOptions& k = ctx.kernels;
    if (k.flash_tma && !(SW && k.flash_forward_producer)) fatal("flash attention: TMA copies need the producer forward and swizzled tiles");
    if constexpr (SW)
        if (k.flash_tma) return flash_forward_producer<floatX, HS, true, true>(ctx, out, lse, qkv, B, T, L);
    if (k.flash_forward_producer) return flash_forward_producer<floatX, HS, SW, false>(ctx, out, lse, qkv, B, T, L);
    if (k.flash_forward_keys == 128 && k.flash_wgmma_groups == 2) return flash_forward_wgmma_launch<floatX, HS, 2, 128, SW>(ctx, out, lse, qkv, B, T, L);
    wgmma_groups_dispatch(k, [&](auto groups) { flash_forward_wgmma_launch<floatX, HS, decltype(groups)::value, 64, SW>(ctx, out, lse, qkv, B, T, L); });
}
// --flash-forward-producer auto (flash_forward_producer_auto): the wgmma forward's layouts that
// compute the plain forward's bits, each run and timed at the first launch of flash_tune_blocks
// blocks or more. The fastest of the plain layout's bits is kept (autotune_pick). Until that
// launch the plain layout runs. The key tiles stay as the options set them (128 keys give other
// bits). The names match dev/cuda/attention.cu's versions.
struct FlashForwardLayout {
    const char* name;
    int producer, groups;  // producer: its slots (0: no producer warpgroup); groups: computing warpgroups
    bool pingpong, swizzle, tma;
};
constexpr FlashForwardLayout FLASH_FORWARD_LAYOUTS[] = {  // name, producer slots, warpgroups, ping-pong, swizzled, TMA
    {"v7 plain", 0, 2, false, false, false},
    {"v18 swizzled", 0, 2, false, true, false},
    {"v11 producer 2", 2, 2, false, false, false},
    {"v12 producer 3", 3, 2, false, false, false},
    {"v13 producer 2 ping-pong", 2, 2, true, false, false},
    {"v14 producer 3 ping-pong", 3, 2, true, false, false},
    {"v19 v13 swizzled", 2, 2, true, true, false},
    {"v21 v19 by TMA", 2, 2, true, true, true},
    {"v21 without ping-pong", 2, 2, false, true, true},
    {"v28 3 warpgroups by TMA", 2, 3, false, true, true},
    {"v29 3 warpgroups", 2, 3, false, false, false},
};
// k with layout f in place of its own, or false where f cannot run there (3 slots or 3 warpgroups
// with key tiles of 128; 3 warpgroups at head size 128)
inline bool flash_forward_layout_options(KernelOptions* k, const FlashForwardLayout& f, int hs) {
    if (k->flash_forward_keys == 128 && (f.producer == 3 || f.groups == 3)) return false;
    if (hs != 64 && f.groups == 3) return false;
    k->flash_forward_producer = f.producer, k->flash_forward_groups = f.groups;
    k->flash_forward_pingpong = f.pingpong, k->flash_swizzle = f.swizzle, k->flash_tma = f.tma;
    if (f.producer || f.groups == 3) k->flash_wgmma_groups = 2;
    return true;
}
// An auto trial over a table of layouts (run(v) runs layout v, or says it cannot): the fastest of
// the first's bits is kept (autotune_pick), its output stays, and rank 0 prints every time as
// "flash attention: WHAT NAME (FLAG auto, timed at B= T=: name ms, ...)". Returns the index kept.
// A layout's first launch that fails, or takes over flash_trial_seconds (it hangs), ends the run
// in one line that names it: a layout that cannot run on some GPU must not hang a run.
template <class Layout, int N, class R>
inline int flash_layout_trial(const Ctx& ctx, const Layout (&layouts)[N], const R& run, const std::vector<BitsRegion>& outs, const char* what,
                              const char* flag, int B, int T) {
    bool waited[N] = {}, ran[N] = {};
    auto run_watched = [&](int v) {
        if (!run(v)) return false;
        ran[v] = true;
        if (waited[v]) return true;
        waited[v] = true;
        const cudaError_t r = gpu_wait_at_most(ctx, ctx.kernels.flash_trial_seconds);
        if (r == cudaErrorNotReady)
            fatal("flash attention: %s %s did not finish in %g s in %s auto's trial (it hangs here): run with %s 0", what, layouts[v].name,
                  ctx.kernels.flash_trial_seconds, flag, flag);
        if (r != cudaSuccess) fatal("flash attention: %s %s failed in %s auto's trial: %s (run with %s 0)", what, layouts[v].name, flag, cudaGetErrorString(r), flag);
        return true;
    };
    const AutotunePick t = autotune_pick(ctx, N, [] {}, run_watched, outs);
    if (g_rank == 0) {
        printf("flash attention: %s %s (%s auto, timed at B=%d T=%d:", what, t.best >= 0 ? layouts[t.best].name : "none", flag, B, T);
        std::string other, idle;  // (layouts of other bits; layouts that do not apply here)
        for (int v = 0; v < N; v++) {
            std::string& to = ran[v] ? other : idle;
            if (!std::isnan(t.ms[v])) printf("%s %s %.3f ms", v == t.first ? "" : ",", layouts[v].name, t.ms[v]);
            else to += std::string(to.empty() ? "" : ", ") + layouts[v].name;
        }
        printf("%s%s%s%s)\n", other.empty() ? "" : "; other bits: ", other.c_str(), idle.empty() ? "" : "; not for this shape: ", idle.c_str());
    }
    return std::max(t.best, 0);
}
// The wgmma forward in the layout ctx.kernels names
template <class floatX, int HS>
inline void flash_forward_wgmma_in(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    if (ctx.kernels.flash_swizzle) flash_forward_wgmma<floatX, HS, true>(ctx, out, lse, qkv, B, T, L);
    else flash_forward_wgmma<floatX, HS, false>(ctx, out, lse, qkv, B, T, L);
}
// The same, or with --flash-forward-producer auto the layout its trial kept (the plain one before it)
template <class floatX, int HS>
inline void flash_forward_wgmma_layout(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    if (!ctx.kernels.flash_forward_producer_auto) return flash_forward_wgmma_in<floatX, HS>(ctx, out, lse, qkv, B, T, L);
    int& kept = ctx.tuned->flash_forward_layout;
    auto run = [&](int v) {
        Ctx c = ctx;
        if (!flash_forward_layout_options(&c.kernels, FLASH_FORWARD_LAYOUTS[v], HS)) return false;
        flash_forward_wgmma_in<floatX, HS>(c, out, lse, qkv, B, T, L);
        return true;
    };
    if (kept < 0 && (long)L.NH * B * (long)ceil_div(T, 64) >= ctx.kernels.flash_tune_blocks) {  // the trial (its output: the kept layout's)
        kept = flash_layout_trial(ctx, FLASH_FORWARD_LAYOUTS, run, {{out, (size_t)B * T * L.C * sizeof(floatX)}, {lse, (size_t)B * L.NH * T * sizeof(float)}},
                                  ctx.kernels.flash_forward_keys == 128 ? "the forward's layout (key tiles of 128)" : "the forward's layout",
                                  "--flash-forward-producer", B, T);
        return;
    }
    run(std::max(kept, 0));
}
// grid (NH, B, row tiles) (the dK/dV pass: NKV key/value heads): the tile index is the slowest, so
// the blocks with the most work (the last query tiles; for dK/dV the first key tiles) start first
// and the short ones fill the tail
template <class floatX>
inline void flash_forward(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const int NH = L.NH;
    if constexpr (is_half_type<floatX>)
        flash_dispatch(ctx.kernels, L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            auto fwd_wgmma = [&] {
                constexpr int HS = decltype(d)::value;  // (D itself is not a constant in here)
                flash_forward_wgmma_layout<floatX, HS>(ctx, out, lse, qkv, B, T, L);
            };
            auto fwd = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_forward_kernel<floatX, D, LD, A, 2><<<dim3(NH, B, ceil_div(T, 128)), 128, 0, ctx.stream>>>(out, lse, qkv, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_forward_kernel<floatX, D, LD, A, 1><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(out, lse, qkv, T, L);
                CUDA_LAUNCH_CHECK();
            };
            flash_run_pass(ctx, FLASH_FORWARD, D == 64, ctx.kernels.flash_forward_rows, (long)NH * B * ceil_div(T, 64), B, T, fwd, fwd_wgmma,
                           {{out, (size_t)B * T * L.C * sizeof(floatX)}, {lse, (size_t)B * NH * T * sizeof(float)}});
        });
}
// dQ's scale, 1/√hs (the same float wherever dQ is finished)
inline float flash_dq_scale(const QKVLayout& L) { return rsqrtf((float)L.hs); }
// The fused pass with a producer warpgroup, SLOTS query-tile slots, its tiles copied by TMA or not
template <class floatX, int SLOTS, bool TMA, bool LAST>
inline void flash_fused_producer_launch(const Ctx& ctx, FusedGrid g, float* part, floatX* dqkv, const float* Dv, const floatX* dout,
                                        const floatX* qkv, const float* lse, int B, int T, const QKVLayout& L, bool dq_finish, unsigned* dq_done) {
    SHARED_OPT_IN(flash_backward_fused_wgmma_producer_kernel<floatX, 64, SLOTS, TMA, LAST>);
    const size_t smem = fused_tiles_elems(64, 8, SLOTS) * sizeof(floatX) + (TMA ? 1024 : 0);
    CUtensorMap qkv_map{}, dout_map{};
    if constexpr (TMA) qkv_map = flash_tensor_map(qkv, L.row(), T, B, 64), dout_map = flash_tensor_map(dout, L.C, T, B, 64);
    flash_backward_fused_wgmma_producer_kernel<floatX, 64, SLOTS, TMA, LAST><<<fused_blocks(g), 384, smem, ctx.stream>>>(dqkv, part, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap, dq_finish, flash_dq_scale(L), dq_done, g, qkv_map, dout_map);
}
// The fused backward (head size 64 or 128): D, the fused pass (FusedGrid: the last wave's heads
// into S splits' fp32 partial sums of dQ), then their sum (a head of one block: the pass finishes
// its dQ itself, dq_finish; flash_dq_last_split: the last split done with a query tile sums it,
// counted in dq_done). flash_backward_producer (3 or 4 query-tile slots; head size 64): the pass
// with a producer warpgroup (the same bits); flash_backward_tma: its tiles swizzled and copied by
// TMA.
template <class floatX, int D, bool LAST>
inline void flash_fused_pass(const Ctx& ctx, FusedGrid g, float* part, floatX* dqkv, const float* Dv, const floatX* dout, const floatX* qkv,
                             const float* lse, int T, const QKVLayout& L, bool dq_finish, unsigned* dq_done) {
    SHARED_OPT_IN(flash_backward_fused_wgmma_kernel<floatX, D, LAST>);
    const size_t smem = fused_tiles_elems(D, 4, 3) * sizeof(floatX);
    flash_backward_fused_wgmma_kernel<floatX, D, LAST><<<fused_blocks(g), 256, smem, ctx.stream>>>(dqkv, part, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap, dq_finish, flash_dq_scale(L), dq_done, g);
}
// dQ of key/value heads [h0, h1), from their partial sums (flash_dq_sum_kernel)
template <class floatX>
inline void flash_dq_sum(const Ctx& ctx, floatX* dqkv, const float* part, const FusedGrid& g, int T, const QKVLayout& L, int h0, int h1) {
    if (h1 <= h0) return;
    const size_t head_float4s = (size_t)T * L.group() * L.hs / 4;  // (4 float4s a thread: dq_sum_rows loads them at once)
    flash_dq_sum_kernel<floatX><<<dim3(ceil_div(head_float4s, 4 * 256), h1 - h0), 256, 0, ctx.stream>>>(dqkv, part, g, T, L, h0, flash_dq_scale(L));
    CUDA_LAUNCH_CHECK();
}
template <class floatX>
inline void flash_fused_backward_in(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out,
                                    const float* lse, int B, int T, const QKVLayout& L) {
    const int C = L.C, NH = L.NH;
    const FusedGrid g = flash_fused_grid(ctx.kernels, B, L.NKV, T);
    const int slots = L.hs == 64 ? ctx.kernels.flash_backward_producer : 0;
    const bool last_split = g.S > 1 && ctx.kernels.flash_dq_last_split && L.hs == 64;  // (at 128 the kernel would spill registers)
    if (L.hs == 128) flash_row_dots_kernel<floatX, 128><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(Dv, dout, out, T, C, NH);
    else flash_row_dots_kernel<floatX, 64><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(Dv, dout, out, T, C, NH);
    CUDA_LAUNCH_CHECK();
    static Buf<float> part_buf;
    float* part = gpu_scratch(part_buf, ctx, fused_partial_floats(g, B, (size_t)T * C));
    if (slots != 0 && slots != 3 && slots != 4) fatal("flash attention: the producer backward takes 3 or 4 slots, not %d", slots);
    if (ctx.kernels.flash_backward_tma && !ctx.kernels.flash_backward_producer) fatal("flash attention: TMA copies in the backward need its producer (flash_backward_producer 3 or 4)");
    const bool tma = ctx.kernels.flash_backward_tma && slots;
    const bool finish = ctx.kernels.flash_dq_in_kernel;  // (a head of one block: the pass writes its dQ itself)
    static Buf<unsigned> done_buf;  // (zeros when allocated; a tile's last split sets its count back to 0)
    unsigned* done = last_split ? gpu_scratch(done_buf, ctx, (size_t)B * L.NKV * ceil_div(T, 64)) : nullptr;
    auto launch = [&](auto last) {  // (last: whether each tile's last split sums it, a constant of the kernels)
        constexpr bool LAST = decltype(last)::value;
        if (slots == 3 && tma) flash_fused_producer_launch<floatX, 3, true, LAST>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 3) flash_fused_producer_launch<floatX, 3, false, LAST>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 4 && tma) flash_fused_producer_launch<floatX, 4, true, LAST>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 4) flash_fused_producer_launch<floatX, 4, false, LAST>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (L.hs == 128) flash_fused_pass<floatX, 128, false>(ctx, g, part, dqkv, Dv, dout, qkv, lse, T, L, finish, done);
        else flash_fused_pass<floatX, 64, LAST>(ctx, g, part, dqkv, Dv, dout, qkv, lse, T, L, finish, done);
    };
    if (last_split) launch(std::true_type{});
    else launch(std::false_type{});
    CUDA_LAUNCH_CHECK();
    if (!finish) flash_dq_sum(ctx, dqkv, part, g, T, L, 0, g.full);  // the heads of one block
    if (!last_split) flash_dq_sum(ctx, dqkv, part, g, T, L, g.full, g.heads);  // the split ones
}
// --flash-backward-producer auto (flash_backward_producer_auto): the fused backward at head size
// 64 without a producer, and with one of 3 or 4 slots, its tiles copied by cp.async or by TMA;
// with several splits, each also with dQ summed by the last split (v30, flash_dq_last_split).
// All compute the same bits. Each is run and timed at the first launch of flash_tune_blocks
// blocks or more, and the fastest of the first's bits is kept (autotune_pick), as in the forward.
struct FlashBackwardLayout { const char* name; int slots; bool tma, last_split; };
constexpr FlashBackwardLayout FLASH_BACKWARD_LAYOUTS[] = {
    {"fused", 0, false, false}, {"v23 producer 3", 3, false, false}, {"v24 producer 4", 4, false, false},
    {"v25 v23 by TMA", 3, true, false}, {"v26 v24 by TMA", 4, true, false}, {"v30 last split sums", 0, false, true},
    {"v30 + v23", 3, false, true}, {"v30 + v24", 4, false, true}, {"v30 + v25", 3, true, true}, {"v30 + v26", 4, true, true},
};
// The fused backward in the layout ctx.kernels names, or (auto) the layout its trial kept
template <class floatX>
inline void flash_fused_backward(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out,
                                 const float* lse, int B, int T, const QKVLayout& L) {
    if (!ctx.kernels.flash_backward_producer_auto || L.hs != 64) return flash_fused_backward_in(ctx, dqkv, Dv, dout, qkv, out, lse, B, T, L);
    int& kept = ctx.tuned->flash_backward_layout;
    const FusedGrid g = flash_fused_grid(ctx.kernels, B, L.NKV, T);
    auto run = [&](int v) {
        const FlashBackwardLayout& l = FLASH_BACKWARD_LAYOUTS[v];
        Ctx c = ctx;
        c.kernels.flash_backward_producer = l.slots, c.kernels.flash_backward_tma = l.tma, c.kernels.flash_dq_last_split = l.last_split;
        flash_fused_backward_in(c, dqkv, Dv, dout, qkv, out, lse, B, T, L);
        return true;
    };
    if (kept < 0 && fused_blocks(g) >= ctx.kernels.flash_tune_blocks) {  // the trial (its output: the kept layout's)
        auto trial_run = [&](int v) { return !(FLASH_BACKWARD_LAYOUTS[v].last_split && g.S == 1) && run(v); };  // (one split: v30 is the layout without it)
        kept = flash_layout_trial(ctx, FLASH_BACKWARD_LAYOUTS, trial_run, {{dqkv, (size_t)B * T * L.row() * sizeof(floatX)}},
                                  "the fused backward's layout", "--flash-backward-producer", B, T);
        return;
    }
    run(std::max(kept, 0));
}
template <class floatX>
inline void flash_backward(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse,
                           int B, int T, const QKVLayout& L) {
    const int NH = L.NH, NKV = L.NKV;
    if constexpr (is_half_type<floatX>)
        flash_dispatch(ctx.kernels, L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            // wgmma: 64·G keys or queries a block; shared memory 2·G + 6 tiles (dK/dV), 5 (dQ)
            auto dq_wgmma = [&] {
                wgmma_groups_dispatch(ctx.kernels, [&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;  // (D itself is not a constant in here)
                    SHARED_OPT_IN(flash_backward_dq_wgmma_kernel<floatX, HS, G>);
                    flash_backward_dq_wgmma_kernel<floatX, HS, G><<<dim3(NH, B, ceil_div(T, 64 * G)), 128 * G, 5 * 64 * HS * sizeof(floatX), ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L, ctx.kernels.flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
            };
            auto dkv_wgmma = [&] {
                wgmma_groups_dispatch(ctx.kernels, [&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;
                    SHARED_OPT_IN(flash_backward_dkv_wgmma_kernel<floatX, HS, G>);
                    flash_backward_dkv_wgmma_kernel<floatX, HS, G><<<dim3(NKV, B, ceil_div(T, 64 * G)), 128 * G, (2 * G + 6) * 64 * HS * sizeof(floatX), ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
            };
            const dim3 kv_grid(NKV, B, ceil_div(T, 64)), q_grid(NH, B, ceil_div(T, 64));
            auto dkv = [&](int keys) {
                if constexpr (D == 64)
                    if (keys == 32) {  // 2 warps × 32 keys: 64 threads a block
                        flash_backward_dkv_kernel<floatX, D, LD, A, 2><<<kv_grid, 64, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dkv_kernel<floatX, D, LD, A, 1><<<kv_grid, 128, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L);
                CUDA_LAUNCH_CHECK();
            };
            auto dq = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_backward_dq_kernel<floatX, D, LD, A, 2><<<dim3(NH, B, ceil_div(T, 128)), 128, 0, ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dq_kernel<floatX, D, LD, A, 1><<<q_grid, 128, 0, ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L);
                CUDA_LAUNCH_CHECK();
            };
            const long blocks = (long)B * ceil_div(T, 64);
            const BitsRegion dqkv_bits{dqkv, (size_t)B * T * L.row() * sizeof(floatX)}, D_bits{Dv, (size_t)B * NH * T * sizeof(float)};
            if (ctx.kernels.flash_backward_passes & 2)  // (first: it computes D)
                flash_run_pass(ctx, FLASH_DQ, D == 64, ctx.kernels.flash_dq_rows, NH * blocks, B, T, dq, dq_wgmma, {dqkv_bits, D_bits});
            if (ctx.kernels.flash_backward_passes & 1)
                flash_run_pass(ctx, FLASH_DKV, D == 64, ctx.kernels.flash_dkv_keys, NKV * blocks, B, T, dkv, dkv_wgmma, {dqkv_bits});
        });
}
#endif

// D = rowsum(dout∘out) over each head's channels (B, NH, T): the backward's, and ring attention's
// (context_parallel.h), each row's 8 lanes loading 16 bytes at a time where the pointers allow.
template <class floatX>
inline void attention_row_dots(const Ctx& ctx, float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const size_t rows = (size_t)B * NH * T;
        constexpr int P = PACK<floatX>;  // (the launch rewriting for the emulator wants no nested <>)
        if (pack_width<floatX>(C / NH, {dout, out}) > 1)
            attention_backward_D_kernel<floatX, P><<<ceil_div(rows, 32), 256, 0, ctx.stream>>>(D, dout, out, B, T, C, NH);
        else
            attention_backward_D_kernel<floatX, 1><<<ceil_div(rows, 32), 256, 0, ctx.stream>>>(D, dout, out, B, T, C, NH);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BTC = (size_t)B * T * C;
    F32View<floatX> d(dout, BTC), o(out, BTC);
    attention_row_dots_cpu(D, d.p, o.p, B, T, C, NH);
}

// The ops. NKV: key/value heads (NKV = NH: multi-head attention, qkv rows of 3C; see the header).
// The FLOPs counted are the products' over the causal half: each query head's, whatever NKV.
template <class floatX>
inline void attention_forward(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int NKV) {
    OpScope prof(ctx, 2.0 * B * T * T * C, 0, "attention forward");  // Q·Kᵀ and P·V over the causal half
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (use_flash<floatX>(ctx.kernels, C, NH)) { flash_forward(ctx, out, lse, qkv, B, T, L); return; }
        if (C / NH > 32 * ATT_MAX_PER_LANE) fatal("attention: head size %d > %d is not supported on CUDA", C / NH, 32 * ATT_MAX_PER_LANE);
        attention_forward_kernel<<<ceil_div((size_t)B * NH * T, 8), 256, 0, ctx.stream>>>(out, lse, qkv, B, T, L);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BT = (size_t)B * T;
    F32View<floatX> o(out, BT * C, false), x(qkv, BT * L.row());
    attention_forward_cpu(o.p, lse, x.p, B, T, C, NH, NKV);
    o.store();
}
template <class floatX>
inline void attention_backward(const Ctx& ctx, floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse,
                               int B, int T, int C, int NH, int NKV) {
    OpScope prof(ctx, 2.5 * 2.0 * B * T * T * C, 0, "attention backward");  // the usual 2.5× the forward (dS, dP, dQ, dK, dV)
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        size_t rows = (size_t)B * NH * T;
        static Buf<float> D_buf;
        float* D = gpu_scratch(D_buf, ctx, rows);
        const bool flash = use_flash<floatX>(ctx.kernels, C, NH);
        if constexpr (is_half_type<floatX>)
            if (flash && flash_fused_backward_runs(ctx.kernels, L.hs)) { flash_fused_backward(ctx, dqkv, D, dout, qkv, out, lse, B, T, L); return; }
        if (!flash || !(ctx.kernels.flash_backward_passes & 2)) attention_row_dots(ctx, D, dout, out, B, T, C, NH);  // (the flash dQ pass computes D itself)
        if (flash) { flash_backward(ctx, dqkv, D, dout, qkv, out, lse, B, T, L); return; }
        attention_backward_dq_kernel<<<ceil_div(rows, 8), 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T, L);
        attention_backward_dkv_kernel<<<ceil_div((size_t)B * NKV * T, 8), 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T, L);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BT = (size_t)B * T;
    F32View<floatX> dx(dqkv, BT * L.row(), false), d(dout, BT * C), x(qkv, BT * L.row()), o(out, BT * C);
    attention_backward_cpu(dx.p, d.p, x.p, o.p, lse, B, T, C, NH, NKV);
    dx.store();
}

// ---- ring attention's pieces, for any dtype T of qkv, kv and dout (context_parallel.h)
template <class floatX>
inline void attention_block_forward(const Ctx& ctx, float* o, float* lse, const floatX* qkv, const floatX* kv, int B, int T, int Tk, int C,
                                    int NH, int NKV, int q0, int nq, int k0, int nk) {
    if (nq == 0 || nk == 0) return;
    OpScope prof(ctx, 4.0 * B * nq * nk * C, 0, "attention block forward");  // Q·Kᵀ and P·V over the whole block
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if constexpr (is_half_type<floatX>)
            if (use_flash<floatX>(ctx.kernels, C, NH)) {  // the tensor cores (bf16, fp16; head size 64, 128)
                with_head_size(L.hs, [&](auto d) {
                    constexpr int HS = decltype(d)::value;
                    flash_block_forward_kernel<floatX, HS><<<dim3(NH, B, ceil_div(nq, 64)), 128, 0, ctx.stream>>>(o, lse, qkv, kv, T, Tk, L, q0, nq, k0, nk);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
        if (C / NH > 32 * ATT_MAX_PER_LANE) fatal("attention: head size %d > %d is not supported on CUDA", C / NH, 32 * ATT_MAX_PER_LANE);
        attention_block_forward_kernel<<<ceil_div((size_t)B * NH * nq, 8), 256, 0, ctx.stream>>>(o, lse, qkv, kv, B, T, Tk, L, q0, nq, k0, nk);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    F32View<floatX> x(qkv, (size_t)B * T * L.row()), y(kv, 2 * (size_t)B * Tk * L.kv());
    attention_block_forward_cpu(o, lse, x.p, y.p, B, T, Tk, C, NH, NKV, q0, nq, k0, nk);
}
template <class floatX>
inline void attention_block_backward(const Ctx& ctx, float* dx, float* dkv, const floatX* dout, const floatX* qkv, const floatX* kv,
                                     const float* lse, const float* D, int B, int T, int Tk, int C, int NH, int NKV, int q0, int nq,
                                     int k0, int nk) {
    if (nq == 0 || nk == 0) return;
    OpScope prof(ctx, 2.5 * 4.0 * B * nq * nk * C, 0, "attention block backward");
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if constexpr (is_half_type<floatX>)
            if (use_flash<floatX>(ctx.kernels, C, NH)) {
                with_head_size(L.hs, [&](auto d) {
                    constexpr int HS = decltype(d)::value;  // (D is the row dots here)
                    flash_block_backward_dq_kernel<floatX, HS><<<dim3(NH, B, ceil_div(nq, 64)), 128, 0, ctx.stream>>>(dx, dout, qkv, kv, lse, D, T, Tk, L, q0, nq, k0, nk);
                    flash_block_backward_dkv_kernel<floatX, HS><<<dim3(NKV, B, ceil_div(nk, 64)), 128, 0, ctx.stream>>>(dkv, dout, qkv, kv, lse, D, T, Tk, L, q0, nq, k0, nk);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
        attention_block_backward_dq_kernel<<<ceil_div((size_t)B * NH * nq, 8), 256, 0, ctx.stream>>>(dx, dout, qkv, kv, lse, D, B, T, Tk, L, q0, nq, k0, nk);
        attention_block_backward_dkv_kernel<<<ceil_div((size_t)B * NKV * nk, 8), 256, 0, ctx.stream>>>(dkv, dout, qkv, kv, lse, D, B, T, Tk, L, q0, nq, k0, nk);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    F32View<floatX> d(dout, (size_t)B * T * C), x(qkv, (size_t)B * T * L.row()), y(kv, 2 * (size_t)B * Tk * L.kv());
    attention_block_backward_cpu(dx, dkv, d.p, x.p, y.p, lse, D, B, T, Tk, C, NH, NKV, q0, nq, k0, nk);
}
template <class D, class S>
inline void copy_rows(const Ctx& ctx, D* dst, size_t dst_pitch, const S* src, size_t src_pitch, size_t width, size_t rows, bool add = false) {
    OpScope prof(ctx, 0, (double)width * rows * ((add ? 2 : 1) * sizeof(D) + sizeof(S)), "copy rows");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        copy_rows_kernel<<<grid_for(width * rows), 256, 0, ctx.stream>>>(dst, dst_pitch, src, src_pitch, width, rows, add);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    copy_rows_cpu(dst, dst_pitch, src, src_pitch, width, rows, add);
}
