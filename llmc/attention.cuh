/*
attention.cuh — causal self-attention that never stores the T×T matrix.

qkv is (B, T, C + 2·KV): each row [q | k | v]. Query head h reads key/value head h / G, with
G = NH/NKV (grouped-query attention; NKV = NH is GPT-2's). out is (B, T, C), lse is (B, NH, T).

  forward:   s_j = q_t·k_j / √hs (j ≤ t),  lse_t = log Σ_j exp(s_j),  out_t = Σ_j exp(s_j − lse_t)·v_j
  backward:  p_j = exp(s_j − lse_t),  D_t = dout_t·out_t,  ds_j = p_j·(dout_t·v_j − D_t)
             dv_j += p_j·dout_t,  dq_t += ds_j·k_j/√hs,  dk_j += ds_j·q_t/√hs

lse is an output because ring attention merges partial results with it. All math is fp32.
This file holds the math, the CPU loops, the exact fp32 kernels (a warp a row) and the ops.
The 16-bit flash kernels live in flash_attention.cuh (mma.sync), flash_attention_hopper.cuh
(wgmma) and flash_fused_backward.cuh (wgmma, the backward in one pass); which of them runs, in
flash_launch.cuh. Every backward is deterministic: no two
threads add to one value.

Main functions: attention_forward, attention_backward (the ops); attention_row_dots (D, below);
attention_block_forward/_backward (ring attention's pieces).

Tests: test/test_ops.cpp (finite differences, lse), test/gpucheck_ops.cu (CUDA against the CPU).
More: docs/kernels.md.
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"
#include "profiler.h"

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
    // Sequence b (of T rows), head h: where its q, k and v start in qkv (or dqkv), where its
    // columns start in out (or dout: rows of C), and its T statistics in lse (or D).
    template <class P> HD P q_at(P qkv, int b, int T, int h) const { return qkv + (size_t)b * T * row() + h * hs; }
    template <class P> HD P k_at(P qkv, int b, int T, int h) const { return qkv + (size_t)b * T * row() + k(h); }
    template <class P> HD P v_at(P qkv, int b, int T, int h) const { return qkv + (size_t)b * T * row() + v(h); }
    template <class P> HD P out_at(P out, int b, int T, int h) const { return out + (size_t)b * T * C + h * hs; }
    template <class P> HD P stats_at(P stats, int b, int T, int h) const { return stats + ((size_t)b * NH + h) * T; }
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

// ---- 16-bit tensor-core flash attention: its kernels and which of them runs (their own files)
#include "flash_launch.cuh"
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
