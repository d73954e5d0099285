/*
attention.cuh — causal multi-head self-attention that never stores the T×T matrix.

Layout: qkv is (B, T, C + 2·KV): each row [q | k | v], q of NH heads and k, v of NKV heads each,
hs = C/NH features a head (KV = NKV·hs). Query head h reads key/value head h / G, G = NH/NKV:
grouped-query attention (Ainslie et al., 2023; Llama 2 70B, Llama 3), where G query heads share
one key/value head; NKV = NH (G = 1) is GPT-2's multi-head attention, rows [q | k | v] of C each.
Head h owns channels [h·hs, (h+1)·hs) of q and out; key/value head j channels [j·hs, (j+1)·hs) of
k and of v (QKVLayout below). out is (B, T, C), lse is (B, NH, T).

  forward, per (b, h, t):  s_j = q_t·k_j / √hs  for j ≤ t        (causal)
                           lse_t = log Σ_j exp(s_j)               (saved: one float per row)
                           out_t = Σ_j exp(s_j − lse_t) · v_j
  backward (the flash-attention backward, which recomputes p from lse instead of storing it):
                           p_j  = exp(s_j − lse_t)
                           D_t  = dout_t · out_t                  (= Σ_j p_j (dout_t·v_j))
                           dv_j += p_j · dout_t
                           ds_j = p_j · (dout_t·v_j − D_t)
                           dq_t += ds_j · k_j / √hs,   dk_j += ds_j · q_t / √hs
  (k_j, v_j: key/value head h / G; so dk_j, dv_j of that head sum over the G query heads of its
  group, in fp32, and are rounded once: nothing repeats k and v per query head.)

The log-sum-exp is the forward's second output because ring attention (context parallelism)
merges partial attention over key blocks with it: out = Σ_blocks exp(lse_blk − lse) · out_blk.
Memory is O(B·T·C) for any T; the CPU loops do the same O(T²) work as the math above.
(b, key/value head) pairs are independent and own disjoint slices of dqkv (the dq of their group's
query heads, and their own dk, dv): parallel and deterministic.

Dtype T (float | bf16 | fp16): qkv, out and their gradients are T, lse is fp32, all math is fp32. The
CPU runs the fp32 loops below on F32View copies (each output rounded once).

CUDA: the same online-softmax algorithm, one warp per query row, lanes splitting the head
dimension; never a T×T buffer. The backward is split so that nothing is accumulated by two warps
(deterministic, no atomics): D_t first, then one warp per query row for dq and one warp per key
row (of a key/value head, over its group's query heads) for dk and dv, each recomputing p from
lse. (The 16-bit tensor-core flash attention is below; this is the exact path, fp32 math for
either dtype.)

CUDA 16-bit flash attention (FlashAttention-2's algorithm, written here; used for bf16 and fp16
when the head size is 64 or 128): tensor cores through mma.sync m16n8k16 (bf16 or fp16 in, fp32
accumulate; the kernels are templates over the 16-bit type, and only the instruction differs).
  forward   block = 64 queries of one (b, h), 4 warps × 16 rows (or, g_flash_forward_rows = 32
            with head size 64, 128 queries, 4 warps × 32: each B fragment feeds two mma, and an
            m-tile wholly before a key tile skips it); Q fragments in registers; key
            tiles of 64 (K, V staged in shared memory) up to the diagonal; S = QKᵀ, online
            softmax in base 2 on the accumulators, P rounded to 16 bits and fed back as the A
            operand of O += P·V; lse written for the backward. Shared memory 2·64·(hs+8)·2 B.
            K and V take turns in flight: V(kt) is copied in while S = Q·K(kt)ᵀ is computed,
            K(kt+1) while O += P·V(kt) is, so the loads hide behind the mma work.
  backward  two deterministic passes, no atomics (like the fp32 path): (1) a block per 64 keys
            (4 warps × 16) walks the query tiles of 32 from the diagonal down (a warp skips a
            tile whose queries all come before its keys) and accumulates
            dK, dV in registers, computing the transposed products Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ so
            that Pᵀ and dSᵀ come out already as A operands of dV += Pᵀ·dO and dK += dSᵀ·Q
            (g_flash_dkv_keys = 32 with head size 64: 2 warps × 32 keys, K and V read from shared
            memory per use, since registers hold dK and dV for 32 keys and little else);
            (2) a block per 64 queries walks the key tiles of 32 and accumulates dQ += dS·K
            (g_flash_dq_rows = 32 with head size 64: 128 queries, 4 warps × 32 rows, as the
            forward's variant). A B fragment (k16×n8, 256 bytes) read from shared memory feeds
            2·16·8·16 flops per 16 rows of the warp: 16 flops per byte at 16 rows, 32 at 32
            (about 21 in the dK/dV variant, which reads its K and V fragments there too).
            At an SM's 128 bytes/clock of shared memory, 16 caps the mma units near half
            their peak; more rows per warp lift that cap, at more registers a thread (which of
            the two wins is timed per pass when the trainer runs: --flash-rows auto).
            P is recomputed from lse each time; D_t = dout_t·out_t comes from the fp32 pass.
            Both passes double-buffer their tiles: the next one is copied in during this one.
  copies    global → shared by cp.async (16 bytes, no register round trip), started a tile
            ahead and waited for (cp.async.wait_all + __syncthreads) just before use.
  mask      only the tiles that reach the diagonal are masked (key > query → −∞); every other
            tile is entirely in the past. Scores enter exp2 as one FMA: exp2(s·log2e/√hs − m).
  shared    B operands come from shared memory by ldmatrix.x4: one instruction per warp loads
            the fragments of two n-tiles (.trans for tiles stored k-major, e.g. V in P·V, where a
            lane would otherwise need four 16-bit loads per fragment). Rows are padded to hs+8
            elements, so the 8 rows of each 8×8 matrix fall in distinct banks.
  order     grid (NH, B, tiles) with the tile slowest: the blocks with the most work (the last
            query tiles; for dK/dV the first key tiles) start first and the short ones fill the
            tail of the last wave.
  groups    (grouped-query attention) the forward and the dQ pass read query head h's keys and
            values from key/value head h/G's columns of qkv; a dK/dV block belongs to a key/value
            head and runs its loop over the query tiles once for each of its G query heads, so
            dK and dV sum over the group in registers and are written once.
Hopper (g_flash_wgmma, --flash-wgmma 1; compute capability 9.0, sm_90a): the same three kernels
with warpgroup MMA. A warpgroup (4 warps) owns 64 rows; each product is a few wgmma
m64nNk16 whose A operand (Q, dO, P, dS) is in registers in the mma fragment layout above
and whose B operand the tensor cores read straight from shared memory, where tiles of 64 rows
are stored as 8×16-byte core matrices (no swizzle) so that one tile serves as K-major B (K in
S = Q·Kᵀ) and as MN-major B (V in O = P·V, by the descriptor's transpose); in the dK/dV pass
K and V are A operands read from such tiles too. Two warpgroups a block share each tile. What
goes: ldmatrix and the B fragments in registers; the mma.sync path's cap of 16 flops per shared
byte (wgmma's shared-memory reads are the tensor cores' own). The products run asynchronously,
so all three kernels are software-pipelined (FlashAttention-3's intra-warpgroup overlap,
wgmma_pipeline_step): the softmax (or dS) of tile j runs while the tile j − 1 products that
accumulate (O += P·V; dQ += dS·K; dV and dK) are still on the tensor cores.
Registers (ptxas, head size 64 / 128): forward 123 / 170-173, dQ 170 / 234, dK/dV 220 / 252, no
spills, and no wgmma serialized.
Ring attention's blocks (context_parallel.h: attention_block_forward / _backward) in 16 bits
with head size 64 or 128 run on the same tiles and helpers (flash_block_*_kernel): queries of a
range of qkv against a borrowed kv buffer's keys, all visible (no mask), the forward carrying
the online softmax on from the running fp32 (o, lse), the backward adding dQ and dK, dV into fp32
buffers; other dtypes and head sizes take the exact warp-per-row kernels.
Fragment layouts (PTX ISA, mma.m16n8k16, g = lane/4, t = lane%4): A (16×16, row-major) regs
{(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}; B (16×8, "col") regs {(k=2t..2t+1,
n=g), (k=2t+8.., n=g)}; C (16×8 fp32) {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. The C
fragments of two adjacent n-tiles are exactly the A fragment of one 16-wide k-chunk.

Tests: test/test_ops.cpp (finite differences, lse against a direct evaluation),
test/gpucheck_ops.cu (CUDA vs CPU).
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
// v out of qkv, and its fp32 sums in and out of T buffers.
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
template <class T> __device__ inline void load_lanes(float* r, const T* p, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; r[k] = i < hs ? to_f(p[i]) : 0.0f; }
}
template <class T> __device__ inline void store_lanes(T* p, const float* r, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) p[i] = from_f<T>(r[k]); }
}
// r · p over the head channels (r in the lanes' registers, p in memory), summed over the warp
template <class T> __device__ inline float lane_dot(const float* r, const T* p, int lane, int hs, int per) {
    float d = 0.0f;
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) d += r[k] * to_f(p[i]); }
    return warp_sum(d);
}
// r += a · p over the lane's head channels
template <class T> __device__ inline void lane_axpy(float* r, float a, const T* p, int lane, int hs, int per) {
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; if (i < hs) r[k] += a * to_f(p[i]); }
}

// One key j of the online softmax, in a warp (lanes split the head): s = q·k_j/√hs; the running
// max m and sum l, and the output acc (unnormalized), rescaled to the new max and p·v_j added.
template <class T>
__device__ inline void online_softmax_key(float* acc, float& m, float& l, const float* qr, const T* kj, const T* vj, int lane, int hs,
                                          int per, float scale) {
    float s = lane_dot(qr, kj, lane, hs, per) * scale;
    float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int k = 0; k < per; k++) { int i = lane + 32 * k; acc[k] = acc[k] * corr + (i < hs ? p * to_f(vj[i]) : 0.0f); }
    m = m_new;
}

// one warp per (b, h, t); lane i holds head channels i, i+32, ...
template <class T>
__global__ void attention_forward_kernel(T* out, float* lse, const T* qkv, int B, int T_, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs;
    if (row >= B * NH * T_) return;
    int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const T* q = qkv + ((size_t)b * T_ + t) * W + h * hs;
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    int per = (hs + 31) / 32;
    load_lanes(qr, q, lane, hs, per);
    for (int k = 0; k < per; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const T* kj = qkv + ((size_t)b * T_ + j) * W + L.k(h);
        const T* vj = kj + L.kv();
        online_softmax_key(acc, m, l, qr, kj, vj, lane, hs, per, scale);
    }
    for (int k = 0; k < per; k++) acc[k] /= l;
    store_lanes(out + ((size_t)b * T_ + t) * L.C + h * hs, acc, lane, hs, per);
    if (lane == 0) lse[((size_t)b * NH + h) * T_ + t] = m + logf(l);
}

// D[b,h,t] = dout_t · out_t over the head's channels. 8 lanes per (b, t, h) row, 4 rows per warp,
// rows in memory order (b, t, h: row r's channels are elements [r·hs, r·hs + hs) of dout and of
// out), so a warp reads one contiguous stretch of each; V elements per load (16 bytes where hs
// and the pointers allow).
template <class T, int V>
__global__ void attention_backward_D_kernel(float* D, const T* dout, const T* out, int B, int T_, int C, int NH) {
    const size_t rows = (size_t)B * T_ * NH, r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 8;
    const int sub = threadIdx.x % 8, hs = C / NH;
    float s = 0.0f;
    if (r < rows)
        for (int c = sub * V; c < hs; c += 8 * V) {
            Pack<T, V> dp = load_pack<V>(dout + r * hs + c), op = load_pack<V>(out + r * hs + c);
            for (int k = 0; k < V; k++) s += to_f(dp.v[k]) * to_f(op.v[k]);
        }
    for (int o = 4; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // the row's 8 lanes
    if (r < rows && sub == 0) {
        const size_t bt = r / NH, b = bt / T_, t = bt % T_, h = r % NH;
        D[(b * NH + h) * T_ + t] = s;
    }
}

// one warp per query row t: dq_t = Σ_{j≤t} ds_j · k_j / √hs
template <class T>
__global__ void attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                             const float* D, int B, int T_, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, per = (hs + 31) / 32;
    if (row >= B * NH * T_) return;
    int t = row % T_, h = (row / T_) % NH, b = row / (T_ * NH);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const T* q = qkv + ((size_t)b * T_ + t) * W + h * hs;
    const T* dO = dout + ((size_t)b * T_ + t) * L.C + h * hs;
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], dq[ATT_MAX_PER_LANE];
    load_lanes(qr, q, lane, hs, per);
    load_lanes(dor, dO, lane, hs, per);
    for (int k = 0; k < per; k++) dq[k] = 0.0f;
    float l = lse[row], Dt = D[row];
    for (int j = 0; j <= t; j++) {
        const T* kj = qkv + ((size_t)b * T_ + j) * W + L.k(h);
        const T* vj = kj + L.kv();
        float sc = lane_dot(qr, kj, lane, hs, per), dp = lane_dot(dor, vj, lane, hs, per);
        float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
        lane_axpy(dq, ds, kj, lane, hs, per);
    }
    store_lanes(dqkv + ((size_t)b * T_ + t) * W + h * hs, dq, lane, hs, per);
}

// one warp per key row j of key/value head kh: dk_j = Σ_h Σ_{t≥j} ds · q_t / √hs,
// dv_j = Σ_h Σ_{t≥j} p · dout_t over the query heads h of kh's group
template <class T>
__global__ void attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                              const float* D, int B, int T_, QKVLayout L) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, NKV = L.NKV, G = L.group(), hs = L.hs, per = (hs + 31) / 32;
    if (row >= B * NKV * T_) return;
    int j = row % T_, kh = (row / T_) % NKV, b = row / (T_ * NKV);
    const size_t W = L.row();
    const float scale = rsqrtf((float)hs);
    const T* kj = qkv + ((size_t)b * T_ + j) * W + L.k(kh * G);
    const T* vj = kj + L.kv();
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE], dk[ATT_MAX_PER_LANE], dv[ATT_MAX_PER_LANE];
    load_lanes(kr, kj, lane, hs, per);
    load_lanes(vr, vj, lane, hs, per);
    for (int k = 0; k < per; k++) { dk[k] = 0.0f; dv[k] = 0.0f; }
    for (int h = kh * G; h < kh * G + G; h++) {
        const size_t head_row0 = ((size_t)b * NH + h) * T_;
        for (int t = j; t < T_; t++) {
            const T* q = qkv + ((size_t)b * T_ + t) * W + h * hs;
            const T* dO = dout + ((size_t)b * T_ + t) * L.C + h * hs;
            float sc = lane_dot(kr, q, lane, hs, per), dp = lane_dot(vr, dO, lane, hs, per);
            float p = expf(sc * scale - lse[head_row0 + t]), ds = p * (dp - D[head_row0 + t]) * scale;
            lane_axpy(dv, p, dO, lane, hs, per);
            lane_axpy(dk, ds, q, lane, hs, per);
        }
    }
    T* dko = dqkv + ((size_t)b * T_ + j) * W + L.k(kh * G);
    store_lanes(dko, dk, lane, hs, per);
    store_lanes(dko + L.kv(), dv, lane, hs, per);
}
// ---- ring attention's pieces (context_parallel.h): the exact path's warp-per-row kernels, fp32 math
// (fp32 runs and head sizes other than 64 and 128; the 16-bit tensor-core ones are flash_block_*)
// (kv and dkv: (B, Tk, 2·KV) rows, k then v, as the CPU version's)

// one warp per query row (b, h, t in [q0, q0 + nq)): the online softmax carried on from the
// running (lse, o) over the block's keys, which is the merge of the CPU version
template <class T>
__global__ void attention_block_forward_kernel(float* o, float* lse, const T* qkv, const T* kv, int B, int T_, int Tk, QKVLayout L,
                                               int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NH * nq) return;
    int t = q0 + row % nq, h = (row / nq) % NH, b = row / (nq * NH), kh = h / L.group();
    const float scale = rsqrtf((float)hs);
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    load_lanes(qr, qkv + ((size_t)b * T_ + t) * L.row() + h * hs, lane, hs, per);
    float* orow = o + ((size_t)b * T_ + t) * L.C + h * hs;
    load_lanes(acc, orow, lane, hs, per);
    float* lrow = lse + ((size_t)b * NH + h) * T_ + t;
    float m = *lrow, l = 1.0f;  // (acc is normalized: weight 1 at m = lse)
    for (int j = k0; j < k0 + nk; j++) {
        const T* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
        const T* vj = kj + KV;
        online_softmax_key(acc, m, l, qr, kj, vj, lane, hs, per, scale);
    }
    for (int k = 0; k < per; k++) acc[k] /= l;
    store_lanes(orow, acc, lane, hs, per);
    if (lane == 0) *lrow = m + logf(l);
}

// one warp per query row: dq (dx's q columns) += Σ_j ds_j · k_j / √hs over the block's keys
template <class T>
__global__ void attention_block_backward_dq_kernel(float* dx, const T* dout, const T* qkv, const T* kv, const float* lse,
                                                   const float* D, int B, int T_, int Tk, QKVLayout L, int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NH * nq) return;
    int t = q0 + row % nq, h = (row / nq) % NH, b = row / (nq * NH), kh = h / L.group();
    const float scale = rsqrtf((float)hs);
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], dq[ATT_MAX_PER_LANE];
    load_lanes(qr, qkv + ((size_t)b * T_ + t) * L.row() + h * hs, lane, hs, per);
    load_lanes(dor, dout + ((size_t)b * T_ + t) * L.C + h * hs, lane, hs, per);
    float* dqrow = dx + ((size_t)b * T_ + t) * L.row() + h * hs;
    load_lanes(dq, dqrow, lane, hs, per);
    const size_t st = ((size_t)b * NH + h) * T_ + t;
    const float l = lse[st], Dt = D[st];
    for (int j = k0; j < k0 + nk; j++) {
        const T* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
        float sc = lane_dot(qr, kj, lane, hs, per), dp = lane_dot(dor, kj + KV, lane, hs, per);
        float p = expf(sc * scale - l), ds = p * (dp - Dt) * scale;
        lane_axpy(dq, ds, kj, lane, hs, per);
    }
    store_lanes(dqrow, dq, lane, hs, per);
}

// one warp per key row j in [k0, k0 + nk) of key/value head kh: dk_j += Σ_h Σ_t ds · q_t / √hs,
// dv_j += Σ_h Σ_t p · dout_t over the query heads h of kh's group
template <class T>
__global__ void attention_block_backward_dkv_kernel(float* dkv, const T* dout, const T* qkv, const T* kv, const float* lse,
                                                    const float* D, int B, int T_, int Tk, QKVLayout L, int q0, int nq, int k0, int nk) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const int NH = L.NH, NKV = L.NKV, G = L.group(), hs = L.hs, KV = L.kv(), per = (hs + 31) / 32;
    if (row >= B * NKV * nk) return;
    int j = k0 + row % nk, kh = (row / nk) % NKV, b = row / (nk * NKV);
    const float scale = rsqrtf((float)hs);
    const T* kj = kv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE], dk[ATT_MAX_PER_LANE], dv[ATT_MAX_PER_LANE];
    load_lanes(kr, kj, lane, hs, per);
    load_lanes(vr, kj + KV, lane, hs, per);
    float* dkrow = dkv + ((size_t)b * Tk + j) * 2 * KV + kh * hs;
    load_lanes(dk, dkrow, lane, hs, per);
    load_lanes(dv, dkrow + KV, lane, hs, per);
    for (int h = kh * G; h < kh * G + G; h++) {
        const size_t head_row0 = ((size_t)b * NH + h) * T_;
        for (int t = q0; t < q0 + nq; t++) {
            const T* q = qkv + ((size_t)b * T_ + t) * L.row() + h * hs;
            const T* dO = dout + ((size_t)b * T_ + t) * L.C + h * hs;
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
// ---- 16-bit tensor-core flash attention (see the header)
// The kernels are templates over H, the 16-bit type (bf16 or fp16): the tiles move H's bits
// whatever they mean, and only the products (mma_16816, wgmma_m64k16: the instruction's input
// type) and the rounding of fp32 values to H (pack2) look at which it is.

template <class H> __device__ inline void mma_16816(float* c, const uint32_t* a, const uint32_t* b) {
    static_assert(is_half_type<H>, "mma_16816: bf16 or fp16 inputs");
#ifdef LLMC_SIMT
    simt::mma_m16n8k16(c, a, b, std::is_same_v<H, fp16>);  // the CPU emulator's warp-wide product (test/simt.h)
#else
    if constexpr (std::is_same_v<H, bf16>)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
template <class H> __device__ inline uint32_t pack2(float lo, float hi) {  // two floats → an H pair, lo in the low half
    return (uint32_t)from_f<H>(lo).bits | ((uint32_t)from_f<H>(hi).bits << 16);
}
template <class H> __device__ inline uint32_t pack_raw(H lo, H hi) { return (uint32_t)lo.bits | ((uint32_t)hi.bits << 16); }
template <class H> __device__ inline uint32_t ld32(const H* p) { return *reinterpret_cast<const uint32_t*>(p); }
// the A fragment of k-chunk kc from the C fragments of n-tiles 2kc and 2kc+1
template <class H> __device__ inline void c_to_a(uint32_t* a, const float* c0, const float* c1) {
    a[0] = pack2<H>(c0[0], c0[1]); a[1] = pack2<H>(c0[2], c0[3]);
    a[2] = pack2<H>(c1[0], c1[1]); a[3] = pack2<H>(c1[2], c1[3]);
}
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8×8 16-bit matrices from shared memory in
// one instruction; lane l gives the address of row l%8 of matrix l/8 (16 bytes, 16-byte aligned),
// and r[i] receives matrix i's elements (g, 2t..2t+1), or (2t..2t+1, g) transposed.
template <bool TRANS, class H> __device__ inline void ldsm_x4(uint32_t* r, const H* row) {
#ifdef LLMC_SIMT
    simt::ldmatrix(r, 4, TRANS, row);  // the CPU emulator's warp-wide load (test/simt.h)
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
#endif
}
// The B fragments (k16 × n8) of the two n-tiles n0 and n0+8, for k = k0..k0+15, from a shared tile.
// LDSM: one ldmatrix.x4 per warp; otherwise each lane loads its own elements (what the
// instruction does for it; kept for comparison in dev/cuda/attention.cu and gpucheck_ops).
// b_frags_nk: the tile holds Bᵀ, row n, column k (K for S = Q·Kᵀ): pairs along a row, 32-bit loads.
template <bool LDSM, int LD, class H> __device__ inline void b_frags_nk(uint32_t (*b)[2], const H (*M)[LD], int n0, int k0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    if constexpr (LDSM) {
        ldsm_x4<false>(&b[0][0], &M[n0 + 8 * (lane / 16) + lane % 8][k0 + 8 * ((lane / 8) % 2)]);
    } else {
        for (int j = 0; j < 2; j++) {
            b[j][0] = ld32(&M[n0 + 8 * j + g][k0 + 2 * t]);
            b[j][1] = ld32(&M[n0 + 8 * j + g][k0 + 2 * t + 8]);
        }
    }
}
// b_frags_kn: the tile holds B itself, row k, column n (V for O = P·V): pairs down a column,
// which ldmatrix.trans reads as rows; per lane that is four 16-bit loads per fragment.
template <bool LDSM, int LD, class H> __device__ inline void b_frags_kn(uint32_t (*b)[2], const H (*M)[LD], int k0, int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    if constexpr (LDSM) {
        ldsm_x4<true>(&b[0][0], &M[k0 + 8 * ((lane / 8) % 2) + lane % 8][n0 + 8 * (lane / 16)]);
    } else {
        for (int j = 0; j < 2; j++) {
            const int n = n0 + 8 * j + g, k = k0 + 2 * t;
            b[j][0] = pack_raw(M[k][n], M[k + 1][n]);
            b[j][1] = pack_raw(M[k + 8][n], M[k + 9][n]);
        }
    }
}
// The A fragment (16 × k16) of rows r0..r0+15, columns k0..k0+15 of a shared tile (row-major: K
// or V rows in the dK/dV pass with 32 keys per warp). LDSM: one ldmatrix.x4, matrix i = rows
// r0 + 8·(i%2), columns k0 + 8·(i/2), as the A layout orders them; otherwise per-lane 32-bit loads.
template <bool LDSM, int LD, class H> __device__ inline void a_frag_smem(uint32_t* a, const H (*M)[LD], int r0, int k0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    if constexpr (LDSM) {
        ldsm_x4<false>(a, &M[r0 + lane % 8 + 8 * ((lane / 8) % 2)][k0 + 8 * (lane / 16)]);
    } else {
        a[0] = ld32(&M[r0 + g][k0 + 2 * t]);
        a[1] = ld32(&M[r0 + g + 8][k0 + 2 * t]);
        a[2] = ld32(&M[r0 + g][k0 + 2 * t + 8]);
        a[3] = ld32(&M[r0 + g + 8][k0 + 2 * t + 8]);
    }
}
// A fragment of rows r0, r0+8 (of a row-major matrix with stride ld, rows ≥ n are 0), columns c..c+15
template <class H> __device__ inline void load_a_rows(uint32_t* a, const H* m, size_t ld, int r0, int n, int c) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    int ra = r0 + g, rb = r0 + g + 8;
    a[0] = ra < n ? ld32(m + (size_t)ra * ld + c + 2 * t) : 0u;
    a[1] = rb < n ? ld32(m + (size_t)rb * ld + c + 2 * t) : 0u;
    a[2] = ra < n ? ld32(m + (size_t)ra * ld + c + 2 * t + 8) : 0u;
    a[3] = rb < n ? ld32(m + (size_t)rb * ld + c + 2 * t + 8) : 0u;
}
// Copies rows [row0, row0 + R) × D of a strided H matrix into shared memory (row stride D+8),
// zero past row n, 16 bytes at a time (the caller guarantees 16-byte alignment). ASYNC: by
// cp.async, so the copy runs while the warps compute; it is there after stage_wait<true>() and a
// __syncthreads. Otherwise through registers, there when this returns.
template <int R, int D, bool ASYNC = false, class H>
__device__ inline void stage_rows(H (*dst)[D + 8], const H* src, size_t ld, int row0, int n) {
    for (int i = threadIdx.x; i < R * D / 8; i += blockDim.x) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        const bool in = row0 + r < n;
        const H* from = src + (size_t)(in ? row0 + r : 0) * ld + c;
        if constexpr (ASYNC) cp_async16(&dst[r][c], from, in ? 16 : 0);
        else *reinterpret_cast<uint4*>(&dst[r][c]) = in ? *reinterpret_cast<const uint4*>(from) : make_uint4(0, 0, 0, 0);
    }
}
template <bool ASYNC> __device__ inline void stage_wait() {
    if constexpr (ASYNC) cp_async_wait_all();
}
// The causal mask, applied only to the tiles that reach the diagonal (the others need none): the
// entries of NT fragments (this warp's 16 rows from row0 × NT·8 columns from col0, C layout)
// whose key comes after its query become −∞, so that their probability is exp2(−∞) = 0. Rows are
// queries and columns keys, or the other way round (KEY_ROWS) in the transposed products.
template <int NT, bool KEY_ROWS> __device__ inline void mask_future(float (*c)[4], int row0, int col0) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const int row = row0 + g + 8 * (e / 2), col = col0 + nt * 8 + 2 * t + (e & 1);
            if (KEY_ROWS ? row > col : col > row) c[nt][e] = -INFINITY;
        }
}
static const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

// The backward's dS = P∘(dP − D) with P = exp2(s·log2e/√hs − lse·log2e), on NT n-tiles of a
// warp's C fragments. ds_rows: rows are queries (dQ pass), each thread's two rows' lse2 and D
// given; dp becomes dS. ds_cols: the transposed products (dK/dV pass), columns are queries whose
// lse2 and D are read per column; st becomes Pᵀ and dpt dSᵀ (both are A operands next).
template <int NT> __device__ inline void ds_rows(const float (*s)[4], float (*dp)[4], const float* lse2, const float* Dr, float sl2) {
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(fmaf(s[nt][e], sl2, -lse2[e / 2]));
            dp[nt][e] = p * (dp[nt][e] - Dr[e / 2]);
        }
}
template <int NT> __device__ inline void ds_cols(float (*st)[4], float (*dpt)[4], const float* lse2, const float* Dc, float sl2) {
    const int t = threadIdx.x % 4;
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const int col = nt * 8 + 2 * t + (e & 1);
            const float p = exp2f(fmaf(st[nt][e], sl2, -lse2[col]));
            st[nt][e] = p;
            dpt[nt][e] = p * (dpt[nt][e] - Dc[col]);
        }
}
// One key tile of 64 in the forward's online softmax, for a warp's 16 query rows (row0 + g and
// row0 + g + 8; s in the C layout, the keys from col0): the causal mask where the tile reaches the
// diagonal, the rows' new running max m (base 2; each row's 4 threads agree on it), the factor
// corr = exp2(m_old − m_new) by which what came before is rescaled (l here; the output by the
// caller: rescale_rows), and s turned into probabilities whose per-thread sums go into l (added
// across the row's threads at the end). CAUSAL = false (ring attention's blocks): no mask here.
template <bool CAUSAL = true>
__device__ inline void online_softmax_p(float (*s)[4], float* m, float* l, float* corr, float sl2, int row0, int col0) {
    if (CAUSAL && col0 + 63 > row0) mask_future<8, false>(s, row0, col0);  // the diagonal (and keys past T)
    float rs[2] = {0.0f, 0.0f}, mu[2];
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
        for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * sl2);
        mu[r] = m_new == -INFINITY ? 0.0f : m_new;
        corr[r] = exp2f(m[r] - mu[r]);
        m[r] = m_new;
        l[r] *= corr[r];
    }
    for (int nt = 0; nt < 8; nt++)
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(fmaf(s[nt][e], sl2, -mu[e / 2]));
            s[nt][e] = p;
            rs[e / 2] += p;
        }
    l[0] += rs[0]; l[1] += rs[1];
}
template <int D> __device__ inline void rescale_rows(float (*o)[4], const float* corr) {  // row r of the C layout × corr[r]
    for (int dt = 0; dt < D / 8; dt++)
        for (int e = 0; e < 4; e++) o[dt][e] *= corr[e / 2];
}
template <int D, bool CAUSAL = true>
__device__ inline void online_softmax_tile(float (*s)[4], float (*o)[4], float* m, float* l, float sl2, int row0, int col0) {
    float corr[2];
    online_softmax_p<CAUSAL>(s, m, l, corr, sl2, row0, col0);
    rescale_rows<D>(o, corr);
}
// two adjacent outputs: an H pair (one 32-bit store), or two floats (ring attention's fp32 sums)
template <class H> __device__ inline void store_pair(H* p, float lo, float hi) { *reinterpret_cast<uint32_t*>(p) = pack2<H>(lo, hi); }
__device__ inline void store_pair(float* p, float lo, float hi) { p[0] = lo; p[1] = hi; }
// The forward's end for a warp's 16 query rows (those below n; T_ rows a sequence): each row's
// sum over its 4 threads, out = o / l, lse = (m + log2 l)·ln 2. out: H, or fp32 (ring blocks).
template <int D, class O> __device__ inline void forward_store_rows(O* out, float* lse, float (*o)[4], float* m, float* l, int row0,
                                                          int b, int h, int T_, int C, int NH, int n) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = row0 + g + 8 * r;
        if (row >= n) continue;
        O* orow = out + ((size_t)b * T_ + row) * C + h * D;
        for (int dt = 0; dt < D / 8; dt++) store_pair(orow + dt * 8 + 2 * t, o[dt][2 * r] / l[r], o[dt][2 * r + 1] / l[r]);
        if (t == 0) lse[((size_t)b * NH + h) * T_ + row] = (m[r] + log2f(l[r])) * LN2;
    }
}

// MT m-tiles of 16 query rows per warp (1, or 2 for hs 64: each K and V fragment loaded from
// shared memory then feeds two mma instead of one); a block has 4 warps, 64·MT query rows.
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128) flash_forward_kernel(H* out, float* lse, const H* qkv, int T_, QKVLayout L) {
    __shared__ __align__(16) H Ks[64][D + 8];
    __shared__ __align__(16) H Vs[64][D + 8];
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int warp = threadIdx.x / 32;
    const size_t C3 = L.row();  // (3C without grouped-query attention)
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;  // row i of q: q + i·C3
    const H *k = qkv + (size_t)b * T_ * C3 + L.k(h), *v = qkv + (size_t)b * T_ * C3 + L.v(h);
    const float sl2 = rsqrtf((float)D) * LOG2E;         // scores in base 2: s·log2(e)/√hs
    int row0[MT];                                       // m-tile i: rows row0[i] + g and + g + 8
    uint32_t qf[MT][D / 16][4];
    float o[MT][D / 8][4], m[MT][2], l[MT][2];          // m: the running max in base 2
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        row0[i] = qt * 64 * MT + (warp * MT + i) * 16;
        for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[i][kc], q, C3, row0[i], T_, kc * 16);
        for (int dt = 0; dt < D / 8; dt++) o[i][dt][0] = o[i][dt][1] = o[i][dt][2] = o[i][dt][3] = 0.0f;
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
    }
    // key tiles up to the block's last row (and T); K and V take turns: V(kt) is copied in while
    // S = Q·K(kt)ᵀ is computed, K(kt+1) while O += P·V(kt)
    const int nkt = min((qt + 1) * MT, (T_ + 63) / 64);
    stage_rows<64, D, ASYNC>(Ks, k, C3, 0, T_);
    for (int kt = 0; kt < nkt; kt++) {
        stage_wait<ASYNC>();
        __syncthreads();  // K(kt) is in, and every warp is done with V(kt−1)
        stage_rows<64, D, ASYNC>(Vs, v, C3, kt * 64, T_);
        bool live[MT];  // m-tile i sees some key of this tile (else every one is after its rows)
        #pragma unroll
        for (int i = 0; i < MT; i++) live[i] = kt * 64 <= row0[i] + 15;
        float s[MT][8][4];
        #pragma unroll
        for (int i = 0; i < MT; i++)
            for (int nt = 0; nt < 8; nt++) s[i][nt][0] = s[i][nt][1] = s[i][nt][2] = s[i][nt][3] = 0.0f;
        for (int kc = 0; kc < D / 16; kc++)
            for (int nt = 0; nt < 8; nt += 2) {
                uint32_t kb[2][2];
                b_frags_nk<LDSM>(kb, Ks, nt * 8, kc * 16);
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    if (live[i]) {
                        mma_16816<H>(s[i][nt], qf[i][kc], kb[0]);
                        mma_16816<H>(s[i][nt + 1], qf[i][kc], kb[1]);
                    }
            }
        #pragma unroll
        for (int i = 0; i < MT; i++)
            if (live[i]) online_softmax_tile<D>(s[i], o[i], m[i], l[i], sl2, row0[i], kt * 64);
        stage_wait<ASYNC>();
        __syncthreads();  // V(kt) is in, and every warp is done with K(kt)
        if (kt + 1 < nkt) stage_rows<64, D, ASYNC>(Ks, k, C3, (kt + 1) * 64, T_);
        for (int kc = 0; kc < 4; kc++) {  // O += P·V over the tile's 64 keys, 16 at a time
            uint32_t pa[MT][4];
            #pragma unroll
            for (int i = 0; i < MT; i++) c_to_a<H>(pa[i], s[i][2 * kc], s[i][2 * kc + 1]);
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t vb[2][2];
                b_frags_kn<LDSM>(vb, Vs, kc * 16, dt * 8);
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    if (live[i]) {
                        mma_16816<H>(o[i][dt], pa[i], vb[0]);
                        mma_16816<H>(o[i][dt + 1], pa[i], vb[1]);
                    }
            }
        }
    }
    #pragma unroll
    for (int i = 0; i < MT; i++) forward_store_rows<D>(out, lse, o[i], m[i], l[i], row0[i], b, h, T_, L.C, L.NH, T_);
}

// ---- Hopper: flash attention with warpgroup MMA (wgmma, sm_90a)
// A warpgroup (4 consecutive warps, 128 threads) issues one wgmma.mma_async for a 64 × N × 16
// product: A from registers (each warp its 16 rows, the mma.m16n8k16 A fragment), B read by the
// tensor cores straight from shared memory through a 64-bit descriptor, D in registers (warp w
// rows 16w..16w+15, lane and register as mma's C fragment, n-tile j in d[4j..4j+3]). No
// ldmatrix, no B fragments in registers: the B bytes a warp had to move itself per mma are gone.
// The product runs asynchronously: wgmma.fence before (the registers it reads were written by
// ordinary instructions), commit_group after, wait_group before its D is read.
// Shared layout, no swizzle ("interleaved", PTX ISA "Shared Memory Matrix Layout"): the unit is a
// core matrix, 8 rows × 16 bytes stored as 128 contiguous bytes. A tile of 64 rows × D (16-bit)
// puts the 16 bytes of row r, columns 8c..8c+7 at byte (r/8)·16·D + 128·c + 16·(r%8).
//   K in S = Q·Kᵀ is B "K-major" (n = key, k = head dim): core matrices 128 B apart along k
//     (leading byte offset, LBO) and 16·D B apart along n (stride byte offset, SBO);
//   V in O = P·V is B "MN-major" (n = head dim, k = key; the instruction's transpose-B): core
//     matrices 128 B apart along n (SBO) and 16·D B apart along k (LBO).
// So one tile layout serves both, and a k-step of 16 moves the start by 256 B (K) or 32·D B (V).
// The emulator (test/simt.h) reads B through the same descriptor fields. Public no-swizzle wgmma
// code that has run on H100s uses these values too: ThunderKittens' first "interleave" tiles
// (this byte layout; LBO 128, SBO 16·D for K-major, the two swapped for transposed B) and
// MMA-Sim's sm_90 tests (a 64 × 16 K-major A: LBO 128, SBO 256).
__device__ inline uint32_t smem_addr(const void* p) {  // the shared-memory window address
#ifdef LLMC_SIMT
    return simt::shared_offset(p);  // the emulator's: the offset in the block's dynamic shared memory
#else
    return (uint32_t)__cvta_generic_to_shared(p);
#endif
}
// descriptor: start address, LBO, SBO (each in 16-byte units, 14 bits), base offset 0, swizzle 0
template <class H> __device__ inline uint64_t wgmma_desc(const H* tile, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((smem_addr(tile) & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}
// The instructions exist only in the sm_90a build; another GPU's build traps (the host launches
// these kernels only on compute capability 9.0: gpu_has_wgmma).
#if defined(LLMC_SIMT) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_WGMMA 1
#endif
__device__ inline void wgmma_fence() {
#if defined(LLMC_SIMT)
#elif defined(LLMC_WGMMA)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
__device__ inline void wgmma_commit() {
#if defined(LLMC_SIMT)
    simt::wgmma_commit();
#elif defined(LLMC_WGMMA)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ inline void wgmma_wait() {  // until at most N committed groups are in flight
#if defined(LLMC_SIMT)
    simt::wgmma_wait(N);  // a warpgroup collective: the emulator computes the products here
#elif defined(LLMC_WGMMA)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Pins a D array's registers at this point of the program (the wgmma asm names them; the
// compiler must not move their reads above a wait or their writes below a fence).
template <int R> __device__ inline void wgmma_hold(float* d) {
#if !defined(LLMC_SIMT)
    #pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
#endif
}
// shared memory written by the generic proxy (cp.async, stores) before the tensor cores read it
__device__ inline void fence_proxy_async() {
#if !defined(LLMC_SIMT) && defined(LLMC_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The D operands of a wgmma m64n64 (32 fp32 registers a thread) and m64n128 (64), for the asm below.
#define LLMC_WGMMA_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define LLMC_WGMMA_D32(d, i) LLMC_WGMMA_D8(d, i), LLMC_WGMMA_D8(d, i + 8), LLMC_WGMMA_D8(d, i + 16), LLMC_WGMMA_D8(d, i + 24)
#define LLMC_WGMMA_D32_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LLMC_WGMMA_D64_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// D (64 × N fp32, N/2 registers a thread) += or = A (64 × 16, registers) · B (16 × N, descriptor),
// A and B of type H: the instruction's .bf16.bf16 or .f16.f16
template <class H, int N, bool TRANS_B> __device__ inline void wgmma_m64k16(float* d, const uint32_t* a, uint64_t desc, bool accumulate) {
    static_assert(N == 64 || N == 128, "wgmma: N = 64 or 128");
    static_assert(is_half_type<H>, "wgmma: bf16 or fp16 inputs");
#if defined(LLMC_SIMT)
    simt::wgmma_m64k16(d, a, desc, N, TRANS_B, accumulate, std::is_same_v<H, fp16>);
#elif defined(LLMC_WGMMA)
#define LLMC_WGMMA_N64(TY)                                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " LLMC_WGMMA_D32_TEXT ", "                  \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"                                                       \
                 : LLMC_WGMMA_D32(d, 0)                                                                             \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TRANS_B ? 1 : 0), "r"(accumulate ? 1 : 0))
#define LLMC_WGMMA_N128(TY)                                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " LLMC_WGMMA_D64_TEXT ", "                 \
                 "{%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"                                                       \
                 : LLMC_WGMMA_D32(d, 0), LLMC_WGMMA_D32(d, 32)                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(TRANS_B ? 1 : 0), "r"(accumulate ? 1 : 0))
    if constexpr (std::is_same_v<H, bf16>) {
        if constexpr (N == 64) LLMC_WGMMA_N64("bf16");
        else LLMC_WGMMA_N128("bf16");
    } else {
        if constexpr (N == 64) LLMC_WGMMA_N64("f16");
        else LLMC_WGMMA_N128("f16");
    }
#undef LLMC_WGMMA_N64
#undef LLMC_WGMMA_N128
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
// D (64 × 64 fp32) += or = A (64 × 16, K-major in shared memory, descriptor) · B (16 × 64, K-major, descriptor)
template <class H> __device__ inline void wgmma_m64n64k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    static_assert(is_half_type<H>, "wgmma: bf16 or fp16 inputs");
#if defined(LLMC_SIMT)
    simt::wgmma_m64k16_ss(d, desc_a, desc_b, 64, false, accumulate, std::is_same_v<H, fp16>);
#elif defined(LLMC_WGMMA)
#define LLMC_WGMMA_SS(TY)                                                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " LLMC_WGMMA_D32_TEXT ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : LLMC_WGMMA_D32(d, 0)                                                                             \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0))
    if constexpr (std::is_same_v<H, bf16>) LLMC_WGMMA_SS("bf16");
    else LLMC_WGMMA_SS("f16");
#undef LLMC_WGMMA_SS
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
// Rows [row0, row0 + 64) × D of a strided H matrix into shared memory in the core-matrix
// layout above, by cp.async, zeros past row n. Thread i writes bytes 16i..16i+15 (a warp's 512
// contiguous bytes: no bank conflicts) and reads row (i/D)·8 + i%8, columns 8·((i%D)/8)..+7.
template <int D, class H> __device__ inline void stage_tile_cm(H* dst, const H* src, size_t ld, int row0, int n) {
    for (int i = threadIdx.x; i < 64 * D / 8; i += blockDim.x) {
        const int r = (i / D) * 8 + i % 8, c = ((i % D) / 8) * 8;
        const bool in = row0 + r < n;
        cp_async16(dst + (size_t)i * 8, src + (size_t)(in ? row0 + r : 0) * ld + c, in ? 16 : 0);
    }
}
// The two kinds of product in the wgmma kernels (each fenced, then issued by the whole
// warpgroup; the caller commits and waits: wgmma_complete). c (64 × 64) = A·Mᵀ: A this warp's
// 16 rows as D/16 A fragments in registers (Q, dO), M a 64-row tile read as K-major B (K, V):
// S and dP.
template <int D, class H> __device__ inline void wgmma_issue_amt(float (*c)[4], const uint32_t (*a)[4], const H* tile) {
    wgmma_fence();
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) wgmma_m64k16<H, 64, false>(&c[0][0], a[kc], wgmma_desc(tile + kc * 128, 128, 16 * D), kc > 0);
}
// The same with A a 64-row tile in shared memory (the core-matrix layout, K-major like M): the
// dK/dV pass's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (K and V would otherwise hold D/4 registers a thread each).
template <int D, class H> __device__ inline void wgmma_issue_amt(float (*c)[4], const H* a_tile, const H* tile) {
    wgmma_fence();
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++)
        wgmma_m64n64k16_ss<H>(&c[0][0], wgmma_desc(a_tile + kc * 128, 128, 16 * D), wgmma_desc(tile + kc * 128, 128, 16 * D), kc > 0);
}
// acc (64 × D) += P·M: P this warp's 16 rows × 64 as 4 A fragments (P, dS or their transposes:
// c_to_a_16x64), M a 64-row tile read as MN-major B (V, K, dO or Q).
template <int D, class H> __device__ inline void wgmma_issue_pm(float (*acc)[4], const uint32_t (*pa)[4], const H* tile) {
    wgmma_hold<D / 2>(&acc[0][0]);
    wgmma_fence();  // (after the A fragments and acc were written)
    #pragma unroll
    for (int kc = 0; kc < 4; kc++) wgmma_m64k16<H, D, true>(&acc[0][0], pa[kc], wgmma_desc(tile + kc * 16 * D, 16 * D, 128), true);
}
// a warp's 16 rows × 64 in C fragments (fp32) as the A fragments of its 4 k-chunks (H)
template <class H> __device__ inline void c_to_a_16x64(uint32_t (*a)[4], const float (*c)[4]) {
    #pragma unroll
    for (int kc = 0; kc < 4; kc++) c_to_a<H>(a[kc], c[2 * kc], c[2 * kc + 1]);
}
__device__ inline void wgmma_complete() { wgmma_commit(); wgmma_wait<0>(); }  // every product issued is in its D

// The software pipeline of the wgmma kernels (FlashAttention-3's intra-warpgroup overlap),
// iteration j of a warpgroup whose tiles are first .. last − 1: first_products(j) issues the
// products of tile j (S; S and dP; Sᵀ and dPᵀ), second(j − 1) the accumulation that uses tile
// j − 1's result (O += P·V; dQ += dS·K; dV += Pᵀ·dO and dK += dSᵀ·Q). Both are issued, then
// mid(j) runs on the first products' results once they are in, while the second still runs on
// the tensor cores, and end(j) once it is in too. Iteration first has no second product,
// iteration last only the last one (then mid is not called). overlap = false waits for each
// group as soon as it is committed: the same operations in the same order, so the same bits
// (what the pipeline's check compares against).
// Each branch waits for every product it issued: where a wgmma's pipeline crosses a branch,
// ptxas serializes them all (C7518).
template <class First, class Mid, class Second, class End>
__device__ inline void wgmma_pipeline_step(int j, int first, int last, bool overlap, const First& first_products, const Mid& mid,
                                           const Second& second, const End& end) {
    if (first >= last || j < first || j > last) return;
    if (j == first) {
        first_products(j);
        wgmma_complete();
        mid(j);
        end(j);
    } else if (j < last) {
        first_products(j);
        wgmma_commit();
        if (!overlap) wgmma_wait<0>();
        second(j - 1);
        wgmma_commit();
        if (!overlap) wgmma_wait<0>();
        wgmma_wait<1>();  // the first products are in
        mid(j);
        wgmma_wait<0>();  // the second too, and it is done with its A registers
        end(j);
    } else {
        second(j - 1);
        wgmma_complete();
        end(j);
    }
}

// The forward of flash_forward_kernel (MT = 1) with wgmma: NWG warpgroups a block, each with 64
// query rows (NWG = 2: 128 rows share each K and V tile copied in). Per key tile j of 64:
// S(j) = Q·K(j)ᵀ as D/16 wgmma m64n64k16 (Q in registers), the same online softmax on the
// accumulators (the same C layout), and O += P(j)·V(j) as 4 wgmma m64nDk16 with P in registers
// and V transposed by the descriptor.
// Pipelined (wgmma_pipeline_step): iteration j issues S(j) and then O += P(j−1)·V(j−1), runs the
// softmax of tile j while the P·V product still runs, then rescales O by tile j's correction.
// O goes through the same operations in the same order as without the pipeline
// (O·corr(j−1) + P(j−1)·V(j−1), then ·corr(j)).
// Shared memory, dynamic (the descriptors address it): K(j) and V(j−1) are in use in iteration j
// while K(j+1) and V(j) are copied in, so two buffers each: 4·64·D·2 bytes (64 KB at D = 128).
// A warpgroup skips the tiles whose keys all come after its 64 rows.
template <class H, int D, int NWG>
__global__ void __launch_bounds__(128 * NWG) flash_forward_wgmma_kernel(H* out, float* lse, const H* qkv, int T_, QKVLayout L,
                                                                        bool overlap) {
    DYNAMIC_SHARED(H, tiles);
    auto Ks = [&](int j) { return tiles + (j % 2) * 64 * D; };
    auto Vs = [&](int j) { return tiles + (2 + j % 2) * 64 * D; };
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    const size_t C3 = L.row();
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;
    const H *k = qkv + (size_t)b * T_ * C3 + L.k(h), *v = qkv + (size_t)b * T_ * C3 + L.v(h);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int wrow0 = (qt * NWG + wg) * 64, row0 = wrow0 + warp * 16;  // the warpgroup's rows; this warp's 16
    uint32_t qf[D / 16][4], pa[4][4];  // Q, and P of the tile before as A fragments
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[kc], q, C3, row0, T_, kc * 16);
    for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    const int nkt = min((qt + 1) * NWG, (T_ + 63) / 64);  // the block's key tiles
    const int nlive = min(nkt, wrow0 / 64 + 1);           // the warpgroup's: tiles 0 .. nlive − 1
    float s[8][4], corr[2];
    stage_tile_cm<D>(Ks(0), k, C3, 0, T_);
    for (int j = 0; j <= nkt; j++) {
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // K(j) and V(j−1) are in, and every warpgroup is done with K(j−1) and V(j−2)
        if (j + 1 < nkt) stage_tile_cm<D>(Ks(j + 1), k, C3, (j + 1) * 64, T_);
        if (j < nkt) stage_tile_cm<D>(Vs(j), v, C3, j * 64, T_);
        wgmma_pipeline_step(
            j, 0, nlive, overlap, [&](int j) { wgmma_issue_amt<D>(s, qf, Ks(j)); },  // S(j)
            [&](int j) {  // P(j) into s, and corr(j) for what came before
                wgmma_hold<32>(&s[0][0]);
                online_softmax_p(s, m, l, corr, sl2, row0, j * 64);
            },
            [&](int j) { wgmma_issue_pm<D>(o, pa, Vs(j)); },  // O += P(j)·V(j)
            [&](int j) {
                wgmma_hold<D / 2>(&o[0][0]);
                if (j == nlive) return;
                rescale_rows<D>(o, corr);
                c_to_a_16x64<H>(pa, s);
            });
    }
    forward_store_rows<D>(out, lse, o, m, l, row0, b, h, T_, L.C, L.NH, T_);
}

// A warp's 16 rows (row0 + g, row0 + g + 8) of a rows × D accumulator in the C layout, times
// scale, as H into dst + row·ld (rows < T_ only): the backward passes' dQ, dK and dV.
template <int D, class H> __device__ inline void store_acc_rows(H* dst, size_t ld, const float (*acc)[4], int row0, int T_, float scale) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T_) continue;
        H* d = dst + (size_t)row * ld;
        for (int dt = 0; dt < D / 8; dt++)
            *reinterpret_cast<uint32_t*>(d + dt * 8 + 2 * t) = pack2<H>(acc[dt][2 * r] * scale, acc[dt][2 * r + 1] * scale);
    }
}
// Both backward passes start a tile with two products of the same shape, 16 rows × 32 rows of two
// shared tiles: c1 = A1·M1ᵀ and c2 = A2·M2ᵀ, for each of the warp's MT m-tiles that is live (each B
// fragment loaded from shared memory feeds all of them). a1(i, kc, buf) and a2 return m-tile i's
// A fragment for k-chunk kc: one held in registers, or one read from shared memory into buf where
// registers cannot hold them.
template <bool LDSM, int D, int MT, class FragA1, class FragA2, class H>
__device__ inline void two_products_16x32(float (*c1)[4][4], float (*c2)[4][4], const FragA1& a1, const FragA2& a2,
                                          const bool* live, const H (*M1)[D + 8], const H (*M2)[D + 8]) {
    #pragma unroll
    for (int i = 0; i < MT; i++)
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) c1[i][nt][e] = c2[i][nt][e] = 0.0f;
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {  // (unrolled: register fragments are indexed by constants)
        uint32_t buf1[MT][4], buf2[MT][4];
        const uint32_t *f1[MT], *f2[MT];
        #pragma unroll
        for (int i = 0; i < MT; i++)
            f1[i] = a1(i, kc, buf1[i]), f2[i] = a2(i, kc, buf2[i]);  // (a dead m-tile's: unused)
        for (int nt = 0; nt < 4; nt += 2) {
            uint32_t b1[2][2], b2[2][2];
            b_frags_nk<LDSM>(b1, M1, nt * 8, kc * 16);
            b_frags_nk<LDSM>(b2, M2, nt * 8, kc * 16);
            #pragma unroll
            for (int i = 0; i < MT; i++)
                if (live[i])
                    for (int j = 0; j < 2; j++) {
                        mma_16816<H>(c1[i][nt + j], f1[i], b1[j]);
                        mma_16816<H>(c2[i][nt + j], f2[i], b2[j]);
                    }
        }
    }
}
// The dQ passes' per-query values for a warp's rows row0 + g and row0 + g + 8 (rows ≥ n: lse2 = ∞,
// so p = 0): lse in base 2 and D = rowsum(dO∘O), from (b, h)'s rows lse_bh and D_bh.
__device__ inline void row_stats(float* lse2, float* Dr, const float* lse_bh, const float* D_bh, int row0, int n) {
    const int g = (threadIdx.x % 32) / 4;
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        lse2[r] = row < n ? lse_bh[row] * LOG2E : INFINITY;
        Dr[r] = row < n ? D_bh[row] : 0.0f;
    }
}
// The dK/dV passes' per-query values for queries q0 .. q0 + R − 1 (threads 0 .. R − 1 write
// them): lse in base 2 (lse·log2e) and D = rowsum(dO∘O); past T, lse2 = ∞ so that p = 0.
template <int R> __device__ inline void stage_query_stats(float* lse2, float* Ds, const float* lse_bh, const float* D_bh, int q0, int T_) {
    if (threadIdx.x < R) {
        const int r = q0 + threadIdx.x;
        lse2[threadIdx.x] = r < T_ ? lse_bh[r] * LOG2E : INFINITY;
        Ds[threadIdx.x] = r < T_ ? D_bh[r] : 0.0f;
    }
}
// Blocks of 128 threads each SM must hold at head size 64 (MT = 1), which caps the registers:
// 65536 / (3 · 128) → 168 for the dK/dV pass, 65536 / (4 · 128) → 128 for the dQ pass. At
// 798ba9d nvcc gave them 168 and 128 by itself; left to itself it later gave 173 and 140 (grouped-
// query attention's QKVLayout among the changes), one block an SM fewer each, and on an H100 the
// dK/dV pass went from 0.258 to 0.355 ms, the dQ pass from 0.186 to 0.202 (GPT-2 124M's shape,
// B = 16; dev/gpu_results 2026-11-22 and 2026-11-26). Within the caps ptxas spills one register
// (4 bytes, one store, one load) in the default dK/dV variant; test/test_ptxas.sh holds that.
#define FLASH_DKV_MIN_BLOCKS(D, MT) ((D) == 64 && (MT) == 1 ? 3 : 1)
#define FLASH_DQ_MIN_BLOCKS(D, MT) ((D) == 64 && (MT) == 1 ? 4 : 1)
// Backward pass 1: dK, dV for 64 keys of one key/value head per block, over query tiles of 32 (of
// each query head of its group: grouped-query attention's sum, in registers). MT = 1: 4 warps × 16
// keys, their K and V fragments held in registers. MT = 2 (head size 64): 2 warps × 32 keys, so
// that each Q and dO fragment read from shared memory feeds two mma; K and V then wait in shared
// memory and are read per use (registers cannot hold them beside dK and dV for 32 keys).
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128, FLASH_DKV_MIN_BLOCKS(D, MT)) flash_backward_dkv_kernel(H* dqkv, const H* dout, const H* qkv,
                                                                 const float* lse, const float* Dv, int T_, QKVLayout L) {
    constexpr bool KV_SHARED = MT > 1;
    __shared__ __align__(16) H Qs[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H dOs[2][32][D + 8];
    __shared__ __align__(16) H Ks[KV_SHARED ? 64 : 1][D + 8];  // the block's keys and values (MT = 2)
    __shared__ __align__(16) H Vs[KV_SHARED ? 64 : 1][D + 8];
    __shared__ float lse2[2][32], Ds[2][32];
    const int kt = blockIdx.z, kh = blockIdx.x, b = blockIdx.y;  // the first keys (most queries) first
    const int warp = threadIdx.x / 32, C = L.C, NH = L.NH, G = L.group();
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T_ * C3;  // batch b's rows
    const H *k = qkv_b + L.k(kh * G), *v = qkv_b + L.v(kh * G);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    int key0[MT];  // m-tile i: keys key0[i] + g and + g + 8, rows (key0[i] − kt·64) of Ks and Vs
    #pragma unroll
    for (int i = 0; i < MT; i++) key0[i] = kt * 64 + (warp * MT + i) * 16;
    uint32_t kf[KV_SHARED ? 1 : D / 16][4], vf[KV_SHARED ? 1 : D / 16][4];
    if constexpr (KV_SHARED) {  // (there for every warp after the loop's first stage_wait and __syncthreads)
        stage_rows<64, D, ASYNC>(Ks, k, C3, kt * 64, T_);
        stage_rows<64, D, ASYNC>(Vs, v, C3, kt * 64, T_);
    } else {
        for (int kc = 0; kc < D / 16; kc++) {
            load_a_rows(kf[kc], k, C3, key0[0], T_, kc * 16);
            load_a_rows(vf[kc], v, C3, key0[0], T_, kc * 16);
        }
    }
    auto k_frag = [&](int i, int kc, uint32_t* buf) -> const uint32_t* {
        if constexpr (KV_SHARED) { a_frag_smem<LDSM>(buf, Ks, key0[i] - kt * 64, kc * 16); return buf; }
        else return kf[kc];
    };
    auto v_frag = [&](int i, int kc, uint32_t* buf) -> const uint32_t* {
        if constexpr (KV_SHARED) { a_frag_smem<LDSM>(buf, Vs, key0[i] - kt * 64, kc * 16); return buf; }
        else return vf[kc];
    };
    float dk[MT][D / 8][4], dv[MT][D / 8][4];
    #pragma unroll
    for (int i = 0; i < MT; i++)
        for (int dt = 0; dt < D / 8; dt++)
            for (int e = 0; e < 4; e++) dk[i][dt][e] = dv[i][dt][e] = 0.0f;
    // The query tiles of 32 from the block's first key to T (queries before it see none of its
    // keys), for each query head of key/value head kh's group in turn, in one loop: iteration it
    // is head kh·G + it / nqt's tile it % nqt, and dK, dV sum over them all. (ptxas, head size
    // 128: 8 bytes spilled; a loop over heads around the loop over tiles spilled 44-60.)
    const int nqt = (T_ - kt * 64 + 31) / 32, nit = G * nqt;
    auto tile_q0 = [&](int it) { return kt * 64 + it % nqt * 32; };
    auto stage = [&](int buf, int it) {  // iteration it's query tile into buffer buf
        const int h = kh * G + it / nqt, q0 = tile_q0(it);
        stage_rows<32, D, ASYNC>(Qs[buf], qkv_b + h * D, C3, q0, T_);
        stage_rows<32, D, ASYNC>(dOs[buf], dout + (size_t)b * T_ * C + h * D, C, q0, T_);
        stage_query_stats<32>(lse2[buf], Ds[buf], lse + ((size_t)b * NH + h) * T_, Dv + ((size_t)b * NH + h) * T_, q0, T_);
    };
    stage(0, 0);
    for (int it = 0, buf = 0; it < nit; it++, buf ^= 1) {
        const int q0 = tile_q0(it);
        stage_wait<ASYNC>();
        __syncthreads();  // this tile is in buffer buf, and every warp is done with the other one
        if (it + 1 < nit) stage(buf ^ 1, it + 1);  // the next tile arrives while this one is used
        bool live[MT];  // some query of the tile comes at or after some of m-tile i's keys
        #pragma unroll
        for (int i = 0; i < MT; i++) live[i] = q0 + 31 >= key0[i];
        if (!live[0]) continue;  // (only a head's first tile, for the warp's last 32 keys of the block)
        float st[MT][4][4], dpt[MT][4][4];  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: each m-tile's 16 keys × 32 queries
        two_products_16x32<LDSM, D, MT>(st, dpt, k_frag, v_frag, live, Qs[buf], dOs[buf]);
        uint32_t pa[MT][2][4], sa[MT][2][4];  // Pᵀ and dSᵀ as A operands, 16 queries at a time
        #pragma unroll
        for (int i = 0; i < MT; i++) {
            if (!live[i]) continue;
            if (q0 < key0[i] + 15) mask_future<4, true>(st[i], key0[i], q0);  // the tiles that reach the diagonal
            ds_cols<4>(st[i], dpt[i], lse2[buf], Ds[buf], sl2);  // Pᵀ, dSᵀ (queries past T: lse2 = ∞, p = 0)
            for (int kc = 0; kc < 2; kc++) {
                c_to_a<H>(pa[i][kc], st[i][2 * kc], st[i][2 * kc + 1]);
                c_to_a<H>(sa[i][kc], dpt[i][2 * kc], dpt[i][2 * kc + 1]);
            }
        }
        for (int kc = 0; kc < 2; kc++)  // dV += Pᵀ·dO, dK += dSᵀ·Q over the 32 queries
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t ob[2][2], qb[2][2];
                b_frags_kn<LDSM>(ob, dOs[buf], kc * 16, dt * 8);
                b_frags_kn<LDSM>(qb, Qs[buf], kc * 16, dt * 8);
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    if (live[i])
                        for (int j = 0; j < 2; j++) {
                            mma_16816<H>(dv[i][dt + j], pa[i][kc], ob[j]);
                            mma_16816<H>(dk[i][dt + j], sa[i][kc], qb[j]);
                        }
            }
    }
    H* dk_out = dqkv + (size_t)b * T_ * C3 + L.k(kh * G);
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        store_acc_rows<D>(dk_out, C3, dk[i], key0[i], T_, rsqrtf((float)D));
        store_acc_rows<D>(dk_out + L.kv(), C3, dv[i], key0[i], T_, 1.0f);
    }
}

// Backward pass 2: dQ for 64·MT queries per block, MT m-tiles of 16 rows per warp (1, or 2 for hs
// 64: each K fragment from shared memory feeds two mma, as in the forward), over key tiles of 32.
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128, FLASH_DQ_MIN_BLOCKS(D, MT)) flash_backward_dq_kernel(H* dqkv, const H* dout, const H* qkv,
                                                                const float* lse, const float* Dv, int T_, QKVLayout L) {
    __shared__ __align__(16) H Ks[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H Vs[2][32][D + 8];
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int warp = threadIdx.x / 32;
    const int C = L.C, NH = L.NH;
    const size_t C3 = L.row();
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;
    const H *k = qkv + (size_t)b * T_ * C3 + L.k(h), *v = qkv + (size_t)b * T_ * C3 + L.v(h);
    const H* dO = dout + (size_t)b * T_ * C + h * D;
    const float sl2 = rsqrtf((float)D) * LOG2E;
    int row0[MT];  // m-tile i: rows row0[i] + g and + g + 8
    float lse2[MT][2], Dr[MT][2];
    uint32_t qf[MT][D / 16][4], of[MT][D / 16][4];
    float dq[MT][D / 8][4];
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        row0[i] = qt * 64 * MT + (warp * MT + i) * 16;
        row_stats(lse2[i], Dr[i], lse + ((size_t)b * NH + h) * T_, Dv + ((size_t)b * NH + h) * T_, row0[i], T_);
        for (int kc = 0; kc < D / 16; kc++) {
            load_a_rows(qf[i][kc], q, C3, row0[i], T_, kc * 16);
            load_a_rows(of[i][kc], dO, C, row0[i], T_, kc * 16);
        }
        for (int dt = 0; dt < D / 8; dt++) dq[i][dt][0] = dq[i][dt][1] = dq[i][dt][2] = dq[i][dt][3] = 0.0f;
    }
    const int key_end = min(T_, (qt + 1) * 64 * MT);  // causal: no key after the block's last query
    auto stage = [&](int buf, int k0) {  // the key tile from k0 into buffer buf
        stage_rows<32, D, ASYNC>(Ks[buf], k, C3, k0, T_);
        stage_rows<32, D, ASYNC>(Vs[buf], v, C3, k0, T_);
    };
    stage(0, 0);
    for (int k0t = 0, buf = 0; k0t < key_end; k0t += 32, buf ^= 1) {
        stage_wait<ASYNC>();
        __syncthreads();  // this tile is in buffer buf, and every warp is done with the other one
        if (k0t + 32 < key_end) stage(buf ^ 1, k0t + 32);  // the next tile arrives while this one is used
        bool live[MT];  // m-tile i sees some key of this tile (else every one is after its rows)
        #pragma unroll
        for (int i = 0; i < MT; i++) live[i] = k0t <= row0[i] + 15;
        float s[MT][4][4], dp[MT][4][4];  // S = Q·Kᵀ and dP = dO·Vᵀ: each m-tile's 16 queries × 32 keys
        auto q_frag = [&](int i, int kc, uint32_t*) -> const uint32_t* { return qf[i][kc]; };
        auto o_frag = [&](int i, int kc, uint32_t*) -> const uint32_t* { return of[i][kc]; };
        two_products_16x32<LDSM, D, MT>(s, dp, q_frag, o_frag, live, Ks[buf], Vs[buf]);
        uint32_t sa[MT][2][4];  // dS as the A operand of dQ += dS·K, 16 keys at a time
        #pragma unroll
        for (int i = 0; i < MT; i++) {
            if (!live[i]) continue;
            if (k0t + 31 > row0[i]) mask_future<4, false>(s[i], row0[i], k0t);  // the tiles that reach the diagonal (and T)
            ds_rows<4>(s[i], dp[i], lse2[i], Dr[i], sl2);  // dS into dp
            for (int kc = 0; kc < 2; kc++) c_to_a<H>(sa[i][kc], dp[i][2 * kc], dp[i][2 * kc + 1]);
        }
        for (int kc = 0; kc < 2; kc++)  // dQ += dS·K over the 32 keys
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t kb[2][2];
                b_frags_kn<LDSM>(kb, Ks[buf], kc * 16, dt * 8);
                #pragma unroll
                for (int i = 0; i < MT; i++)
                    if (live[i]) {
                        mma_16816<H>(dq[i][dt], sa[i][kc], kb[0]);
                        mma_16816<H>(dq[i][dt + 1], sa[i][kc], kb[1]);
                    }
            }
    }
    #pragma unroll
    for (int i = 0; i < MT; i++) store_acc_rows<D>(dqkv + (size_t)b * T_ * C3 + h * D, C3, dq[i], row0[i], T_, rsqrtf((float)D));
}

// The two backward passes with wgmma (as the forward: NWG warpgroups a block, each 64 rows, the
// A operands in registers, B tiles of 64 rows in the core-matrix layout).
// dQ pass: a warpgroup's 64 queries over key tiles j of 64: S = Q·K(j)ᵀ and dP = dO·V(j)ᵀ (K and
// V as K-major B), dS = P∘(dP − D), dQ += dS·K(j) (K as MN-major B, the same tile). Pipelined
// as the forward: iteration j issues S(j) and dP(j), then dQ += dS(j−1)·K(j−1), and computes dS(j)
// while that product runs.
// Shared memory: K(j−1), K(j) in use and K(j+1) copied in, V(j) in use and V(j+1) copied in:
// 5·64·D·2 bytes (80 KB at D = 128: opted in).
template <class H, int D, int NWG>
__global__ void __launch_bounds__(128 * NWG) flash_backward_dq_wgmma_kernel(H* dqkv, const H* dout, const H* qkv,
                                                                            const float* lse, const float* Dv, int T_, QKVLayout L,
                                                                            bool overlap) {
    DYNAMIC_SHARED(H, tiles);
    auto Ks = [&](int j) { return tiles + (j % 3) * 64 * D; };
    auto Vs = [&](int j) { return tiles + (3 + j % 2) * 64 * D; };
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    const int C = L.C, NH = L.NH;
    const size_t C3 = L.row();
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;
    const H *k = qkv + (size_t)b * T_ * C3 + L.k(h), *v = qkv + (size_t)b * T_ * C3 + L.v(h);
    const H* dO = dout + (size_t)b * T_ * C + h * D;
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int wrow0 = (qt * NWG + wg) * 64, row0 = wrow0 + warp * 16;
    float lse2[2], Dr[2];
    row_stats(lse2, Dr, lse + ((size_t)b * NH + h) * T_, Dv + ((size_t)b * NH + h) * T_, row0, T_);
    uint32_t qf[D / 16][4], of[D / 16][4], dsa[4][4];  // Q, dO, and dS of the tile before as A fragments
    for (int kc = 0; kc < D / 16; kc++) {
        load_a_rows(qf[kc], q, C3, row0, T_, kc * 16);
        load_a_rows(of[kc], dO, C, row0, T_, kc * 16);
    }
    float dq[D / 8][4];
    for (int dt = 0; dt < D / 8; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
    const int nkt = min((qt + 1) * NWG, (T_ + 63) / 64);  // causal: no key after the block's last query
    const int nlive = min(nkt, wrow0 / 64 + 1);           // the warpgroup's key tiles: 0 .. nlive − 1
    float s[8][4], dp[8][4];
    stage_tile_cm<D>(Ks(0), k, C3, 0, T_);
    stage_tile_cm<D>(Vs(0), v, C3, 0, T_);
    for (int j = 0; j <= nkt; j++) {
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // K(j) and V(j) are in, and every warpgroup is done with K(j−2) and V(j−1)
        if (j + 1 < nkt) {
            stage_tile_cm<D>(Ks(j + 1), k, C3, (j + 1) * 64, T_);
            stage_tile_cm<D>(Vs(j + 1), v, C3, (j + 1) * 64, T_);
        }
        wgmma_pipeline_step(
            j, 0, nlive, overlap,
            [&](int j) {  // S(j), dP(j)
                wgmma_issue_amt<D>(s, qf, Ks(j));
                wgmma_issue_amt<D>(dp, of, Vs(j));
            },
            [&](int j) {  // dS(j) into dp
                wgmma_hold<32>(&s[0][0]);
                wgmma_hold<32>(&dp[0][0]);
                if (j * 64 + 63 > row0) mask_future<8, false>(s, row0, j * 64);  // the diagonal (and T)
                ds_rows<8>(s, dp, lse2, Dr, sl2);
            },
            [&](int j) { wgmma_issue_pm<D>(dq, dsa, Ks(j)); },  // dQ += dS(j)·K(j)
            [&](int j) {
                wgmma_hold<D / 2>(&dq[0][0]);
                if (j < nlive) c_to_a_16x64<H>(dsa, dp);
            });
    }
    store_acc_rows<D>(dqkv + (size_t)b * T_ * C3 + h * D, C3, dq, row0, T_, rsqrtf((float)D));
}
// dK/dV pass: a warpgroup's 64 keys over query tiles j of 64 from the block's first key:
// Sᵀ = K·Q(j)ᵀ and dPᵀ = V·dO(j)ᵀ (K and V as A, Q and dO as B: 64-row tiles in shared memory,
// all K-major), Pᵀ and dSᵀ = Pᵀ∘(dPᵀ − D) in registers as A operands of dV += Pᵀ·dO(j) and
// dK += dSᵀ·Q(j) (dO and Q as MN-major B, the same tiles). Pipelined as the others: iteration j
// issues Sᵀ(j) and dPᵀ(j), then the dV and dK products of tile j − 1, and computes Pᵀ(j) and
// dSᵀ(j) while those run. K and V stay in shared memory (not in registers as the others' Q and dO
// do) to make room for that: two accumulators, Sᵀ and dPᵀ, and tile j − 1's Pᵀ and dSᵀ as A
// fragments are 160 registers a thread at head size 64.
// Shared memory: each warpgroup's K and V, and Q(j−1), Q(j), Q(j+1) and dO(j−1..j+1) (two in use,
// one copied in): (2·NWG + 6)·64·D·2 bytes (80 KB at D = 64, NWG = 2; 160 KB at D = 128); each
// query's lse (base 2) and D beside them, two buffers.
// A block belongs to key/value head kh and runs the pipeline once for each query head of its group
// (grouped-query attention), dK and dV accumulating over them all.
template <class H, int D, int NWG>
__global__ void __launch_bounds__(128 * NWG) flash_backward_dkv_wgmma_kernel(H* dqkv, const H* dout, const H* qkv,
                                                                             const float* lse, const float* Dv, int T_, QKVLayout L,
                                                                             bool overlap) {
    DYNAMIC_SHARED(H, tiles);
    __shared__ float lse2[2][64], Ds[2][64];
    const int kb = blockIdx.z, kh = blockIdx.x, b = blockIdx.y;  // the first keys (most queries) first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    auto KVs = [&](int w) { return tiles + 2 * w * 64 * D; };  // warpgroup w's K tile, its V tile after it
    const H *Ks = KVs(wg), *Vs = Ks + 64 * D;                 // this warpgroup's keys
    auto Qs = [&](int j) { return tiles + (2 * NWG + j % 3) * 64 * D; };
    auto dOs = [&](int j) { return tiles + (2 * NWG + 3 + j % 3) * 64 * D; };
    const int C = L.C, NH = L.NH, G = L.group();
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T_ * C3;  // batch b's rows
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int k0 = kb * 64 * NWG, key0 = k0 + wg * 64 + warp * 16;  // the block's first key, and this warp's
    float dk[D / 8][4], dv[D / 8][4], st[8][4], dpt[8][4];  // (Sᵀ, dPᵀ: 64 keys × 64 queries)
    uint32_t pa[4][4], dsa[4][4];                           // Pᵀ and dSᵀ of the tile before as A fragments
    for (int dt = 0; dt < D / 8; dt++)
        for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.0f;
    for (int w = 0; w < NWG; w++) {
        stage_tile_cm<D>(KVs(w), qkv_b + L.k(kh * G), C3, k0 + 64 * w, T_);
        stage_tile_cm<D>(KVs(w) + 64 * D, qkv_b + L.v(kh * G), C3, k0 + 64 * w, T_);
    }
    const int nqt = (T_ - k0 + 63) / 64;  // the block's query tiles; the warpgroup's from tile wg (before: all queries before its keys)
    for (int h = kh * G; h < kh * G + G; h++) {  // the query heads of key/value head kh's group, dK and dV summing over them
        const H* q = qkv_b + h * D;
        const H* dO = dout + (size_t)b * T_ * C + h * D;
        const float* lse_bh = lse + ((size_t)b * NH + h) * T_;
        const float* D_bh = Dv + ((size_t)b * NH + h) * T_;
        auto stage = [&](int j) {  // the query tile from k0 + 64·j (queries before the block's keys see none of them)
            const int q0 = k0 + 64 * j;
            stage_tile_cm<D>(Qs(j), q, C3, q0, T_);
            stage_tile_cm<D>(dOs(j), dO, C, q0, T_);
            stage_query_stats<64>(lse2[j % 2], Ds[j % 2], lse_bh, D_bh, q0, T_);
        };
        if (h > kh * G) __syncthreads();  // every warpgroup is done with the head before's tiles
        stage(0);
        for (int j = 0; j <= nqt; j++) {
            cp_async_wait_all();
            fence_proxy_async();
            __syncthreads();  // tile j is in, and every warpgroup is done with tile j − 2
            if (j + 1 < nqt) stage(j + 1);
            wgmma_pipeline_step(
                j, wg, nqt, overlap,
                [&](int j) {  // Sᵀ(j), dPᵀ(j)
                    wgmma_issue_amt<D>(st, Ks, Qs(j));
                    wgmma_issue_amt<D>(dpt, Vs, dOs(j));
                },
                [&](int j) {  // Pᵀ(j) into st, dSᵀ(j) into dpt
                    wgmma_hold<32>(&st[0][0]);
                    wgmma_hold<32>(&dpt[0][0]);
                    const int q0 = k0 + 64 * j;
                    if (q0 < key0 + 15) mask_future<8, true>(st, key0, q0);  // the tiles that reach the diagonal
                    ds_cols<8>(st, dpt, lse2[j % 2], Ds[j % 2], sl2);    // (queries past T: lse2 = ∞, p = 0)
                },
                [&](int j) {
                    wgmma_issue_pm<D>(dv, pa, dOs(j));   // dV += Pᵀ(j)·dO(j)
                    wgmma_issue_pm<D>(dk, dsa, Qs(j));   // dK += dSᵀ(j)·Q(j)
                },
                [&](int j) {
                    wgmma_hold<D / 2>(&dv[0][0]);
                    wgmma_hold<D / 2>(&dk[0][0]);
                    if (j == nqt) return;
                    c_to_a_16x64<H>(pa, st);
                    c_to_a_16x64<H>(dsa, dpt);
                });
        }
    }
    H* dk_out = dqkv + (size_t)b * T_ * C3 + L.k(kh * G);
    store_acc_rows<D>(dk_out, C3, dk, key0, T_, rsqrtf((float)D));
    store_acc_rows<D>(dk_out + L.kv(), C3, dv, key0, T_, 1.0f);
}

// ---- ring attention's blocks (context_parallel.h) on the tensor cores
// attention_block_forward and _backward (see them, and their CPU loops, above) with the flash
// kernels' tiles and products: the queries [q0, q0 + nq) of qkv against the keys [k0, k0 + nk) of
// a borrowed kv buffer ((B, Tk, 2·KV) rows: k, then v), all visible (no causal mask), the sums
// into fp32 buffers. Keys past nk are staged as zero rows; queries past q0 + nq as zero rows
// with lse = ∞ (p = 0), and are never stored.
// Forward: one block per 64 queries of a (b, h), 4 warps × 16 rows, key tiles of 64. The online
// softmax carries on from the running (o, lse): o is already normalized by its lse, so in the
// kernel's terms its state is m = lse (base 2), row sum 1, O = o; after the block's keys,
// o = O / l and lse = m + log2 l (ln) are the merged ones: the sums the CPU's merge formula gives.

// columns ≥ n (NT n-tiles of the C layout from col0) → −∞: keys past the block's end
template <int NT> __device__ inline void mask_cols_from(float (*c)[4], int col0, int n) {
    const int t = threadIdx.x % 4;
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++)
            if (col0 + nt * 8 + 2 * t + (e & 1) >= n) c[nt][e] = -INFINITY;
}
// dst rows (row0 + g, row0 + g + 8, rows < n only; stride ld, fp32) += scale · acc (the C layout)
template <int D> __device__ inline void add_acc_rows(float* dst, size_t ld, const float (*acc)[4], int row0, int n, float scale) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= n) continue;
        float* d = dst + (size_t)row * ld + 2 * t;
        for (int dt = 0; dt < D / 8; dt++)
            for (int c = 0; c < 2; c++) d[dt * 8 + c] += acc[dt][2 * r + c] * scale;
    }
}
template <class H, int D>
__global__ void __launch_bounds__(128) flash_block_forward_kernel(float* o, float* lse, const H* qkv, const H* kv, int T_, int Tk,
                                                                  QKVLayout L, int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Ks[64][D + 8];
    __shared__ __align__(16) H Vs[64][D + 8];
    const int h = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, row0 = q0 + blockIdx.z * 64 + warp * 16;  // this warp's rows: row0 + g, row0 + g + 8
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + (h / L.group()) * D, *v = k + L.kv();
    float* ob = o + (size_t)b * T_ * L.C + h * D;
    const float sl2 = rsqrtf((float)D) * LOG2E;
    uint32_t qf[D / 16][4];
    float acc[D / 8][4], m[2], l[2];
    for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[kc], q, C3, row0, qend, kc * 16);
    for (int r = 0; r < 2; r++) {  // the running state (a row with no keys yet, lse = −∞: O = 0, l = 0)
        const int row = row0 + g + 8 * r;
        const float l0 = row < qend ? lse[((size_t)b * L.NH + h) * T_ + row] : -INFINITY;
        const bool live = l0 > -INFINITY;
        m[r] = live ? l0 * LOG2E : -INFINITY;
        l[r] = live && t == 0 ? 1.0f : 0.0f;  // (the row's 4 threads' partial sums add up to 1)
        for (int dt = 0; dt < D / 8; dt++)
            for (int c = 0; c < 2; c++) acc[dt][2 * r + c] = live ? ob[(size_t)row * L.C + dt * 8 + 2 * t + c] : 0.0f;
    }
    const int nkt = (nk + 63) / 64;  // K and V take turns in flight, as in flash_forward_kernel
    stage_rows<64, D, true>(Ks, k, KV2, 0, nk);
    for (int kt = 0; kt < nkt; kt++) {
        stage_wait<true>();
        __syncthreads();  // K(kt) is in, and every warp is done with V(kt−1)
        stage_rows<64, D, true>(Vs, v, KV2, kt * 64, nk);
        float s[8][4];
        for (int nt = 0; nt < 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        for (int kc = 0; kc < D / 16; kc++)
            for (int nt = 0; nt < 8; nt += 2) {
                uint32_t kb[2][2];
                b_frags_nk<true>(kb, Ks, nt * 8, kc * 16);
                mma_16816<H>(s[nt], qf[kc], kb[0]);
                mma_16816<H>(s[nt + 1], qf[kc], kb[1]);
            }
        if (kt * 64 + 64 > nk) mask_cols_from<8>(s, kt * 64, nk);  // (their zero rows would count in l)
        online_softmax_tile<D, false>(s, acc, m, l, sl2, row0, kt * 64);
        stage_wait<true>();
        __syncthreads();  // V(kt) is in, and every warp is done with K(kt)
        if (kt + 1 < nkt) stage_rows<64, D, true>(Ks, k, KV2, (kt + 1) * 64, nk);
        for (int kc = 0; kc < 4; kc++) {
            uint32_t pa[4];
            c_to_a<H>(pa, s[2 * kc], s[2 * kc + 1]);
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t vb[2][2];
                b_frags_kn<true>(vb, Vs, kc * 16, dt * 8);
                mma_16816<H>(acc[dt], pa, vb[0]);
                mma_16816<H>(acc[dt + 1], pa, vb[1]);
            }
        }
    }
    forward_store_rows<D>(o, lse, acc, m, l, row0, b, h, T_, L.C, L.NH, qend);  // the merged o and lse
}
// Backward, dQ: one block per 64 queries of a (b, h) over the block's keys in tiles of 32, as
// flash_backward_dq_kernel (MT = 1) without the mask; dx's q columns += dQ (fp32). Keys past nk
// need no mask here: their K rows are zero, so whatever their dS, dS·K adds nothing.
template <class H, int D>
__global__ void __launch_bounds__(128) flash_block_backward_dq_kernel(float* dx, const H* dout, const H* qkv, const H* kv,
                                                                      const float* lse, const float* Dv, int T_, int Tk, QKVLayout L,
                                                                      int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Ks[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H Vs[2][32][D + 8];
    const int h = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32;
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, row0 = q0 + blockIdx.z * 64 + warp * 16;
    const H* q = qkv + (size_t)b * T_ * C3 + h * D;
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + (h / L.group()) * D, *v = k + L.kv();
    const H* dO = dout + (size_t)b * T_ * L.C + h * D;
    const float sl2 = rsqrtf((float)D) * LOG2E;
    float lse2[2], Dr[2];
    row_stats(lse2, Dr, lse + ((size_t)b * L.NH + h) * T_, Dv + ((size_t)b * L.NH + h) * T_, row0, qend);
    uint32_t qf[D / 16][4], of[D / 16][4];
    for (int kc = 0; kc < D / 16; kc++) {
        load_a_rows(qf[kc], q, C3, row0, qend, kc * 16);
        load_a_rows(of[kc], dO, L.C, row0, qend, kc * 16);
    }
    float dq[D / 8][4];
    for (int dt = 0; dt < D / 8; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
    auto stage = [&](int buf, int j0) {
        stage_rows<32, D, true>(Ks[buf], k, KV2, j0, nk);
        stage_rows<32, D, true>(Vs[buf], v, KV2, j0, nk);
    };
    stage(0, 0);
    const bool live[1] = {true};
    auto q_frag = [&](int, int kc, uint32_t*) -> const uint32_t* { return qf[kc]; };
    auto o_frag = [&](int, int kc, uint32_t*) -> const uint32_t* { return of[kc]; };
    for (int j0 = 0, buf = 0; j0 < nk; j0 += 32, buf ^= 1) {
        stage_wait<true>();
        __syncthreads();  // this tile is in buffer buf, and every warp is done with the other one
        if (j0 + 32 < nk) stage(buf ^ 1, j0 + 32);
        float s[1][4][4], dp[1][4][4];  // S = Q·Kᵀ, dP = dO·Vᵀ: 16 queries × 32 keys
        two_products_16x32<true, D, 1>(s, dp, q_frag, o_frag, live, Ks[buf], Vs[buf]);
        ds_rows<4>(s[0], dp[0], lse2, Dr, sl2);  // dS into dp
        uint32_t sa[2][4];
        for (int kc = 0; kc < 2; kc++) c_to_a<H>(sa[kc], dp[0][2 * kc], dp[0][2 * kc + 1]);
        for (int kc = 0; kc < 2; kc++)  // dQ += dS·K over the 32 keys
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t kb[2][2];
                b_frags_kn<true>(kb, Ks[buf], kc * 16, dt * 8);
                mma_16816<H>(dq[dt], sa[kc], kb[0]);
                mma_16816<H>(dq[dt + 1], sa[kc], kb[1]);
            }
    }
    add_acc_rows<D>(dx + (size_t)b * T_ * C3 + h * D, C3, dq, row0, qend, rsqrtf((float)D));
}
// Backward, dK and dV: one block per 64 keys of a (b, key/value head), 4 warps × 16 keys (K and V
// fragments in registers), over the query tiles of 32 of each query head of its group, as
// flash_backward_dkv_kernel (MT = 1) without the mask; dkv += (fp32).
template <class H, int D>
__global__ void __launch_bounds__(128) flash_block_backward_dkv_kernel(float* dkv, const H* dout, const H* qkv, const H* kv,
                                                                       const float* lse, const float* Dv, int T_, int Tk, QKVLayout L,
                                                                       int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Qs[2][32][D + 8];
    __shared__ __align__(16) H dOs[2][32][D + 8];
    __shared__ float lse2[2][32], Ds[2][32];
    const int kh = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, G = L.group();
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, key0 = blockIdx.z * 64 + warp * 16;  // this warp's keys (of the block's nk): key0 + g, + g + 8
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + kh * D, *v = k + L.kv();
    const H* qkv_b = qkv + (size_t)b * T_ * C3;
    const float sl2 = rsqrtf((float)D) * LOG2E;
    uint32_t kf[D / 16][4], vf[D / 16][4];
    for (int kc = 0; kc < D / 16; kc++) {
        load_a_rows(kf[kc], k, KV2, key0, nk, kc * 16);
        load_a_rows(vf[kc], v, KV2, key0, nk, kc * 16);
    }
    float dk[D / 8][4], dv[D / 8][4];
    for (int dt = 0; dt < D / 8; dt++)
        for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.0f;
    const int nqt = (nq + 31) / 32, nit = G * nqt;  // iteration it: head kh·G + it / nqt, its query tile it % nqt
    auto stage = [&](int buf, int it) {
        const int h = kh * G + it / nqt, t0 = q0 + it % nqt * 32;
        stage_rows<32, D, true>(Qs[buf], qkv_b + h * D, C3, t0, qend);
        stage_rows<32, D, true>(dOs[buf], dout + (size_t)b * T_ * L.C + h * D, L.C, t0, qend);
        stage_query_stats<32>(lse2[buf], Ds[buf], lse + ((size_t)b * L.NH + h) * T_, Dv + ((size_t)b * L.NH + h) * T_, t0, qend);
    };
    stage(0, 0);
    const bool live[1] = {true};
    auto k_frag = [&](int, int kc, uint32_t*) -> const uint32_t* { return kf[kc]; };
    auto v_frag = [&](int, int kc, uint32_t*) -> const uint32_t* { return vf[kc]; };
    for (int it = 0, buf = 0; it < nit; it++, buf ^= 1) {
        stage_wait<true>();
        __syncthreads();  // this tile is in buffer buf, and every warp is done with the other one
        if (it + 1 < nit) stage(buf ^ 1, it + 1);
        float st[1][4][4], dpt[1][4][4];  // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ: 16 keys × 32 queries
        two_products_16x32<true, D, 1>(st, dpt, k_frag, v_frag, live, Qs[buf], dOs[buf]);
        ds_cols<4>(st[0], dpt[0], lse2[buf], Ds[buf], sl2);  // Pᵀ, dSᵀ (queries past the range: lse2 = ∞, p = 0)
        uint32_t pa[2][4], sa[2][4];
        for (int kc = 0; kc < 2; kc++) {
            c_to_a<H>(pa[kc], st[0][2 * kc], st[0][2 * kc + 1]);
            c_to_a<H>(sa[kc], dpt[0][2 * kc], dpt[0][2 * kc + 1]);
        }
        for (int kc = 0; kc < 2; kc++)  // dV += Pᵀ·dO, dK += dSᵀ·Q over the 32 queries
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t ob[2][2], qb[2][2];
                b_frags_kn<true>(ob, dOs[buf], kc * 16, dt * 8);
                b_frags_kn<true>(qb, Qs[buf], kc * 16, dt * 8);
                for (int j = 0; j < 2; j++) {
                    mma_16816<H>(dv[dt + j], pa[kc], ob[j]);
                    mma_16816<H>(dk[dt + j], sa[kc], qb[j]);
                }
            }
    }
    float* dk_out = dkv + ((size_t)b * Tk + k0) * KV2 + kh * D;
    add_acc_rows<D>(dk_out, KV2, dk, key0, nk, rsqrtf((float)D));
    add_acc_rows<D>(dk_out + L.kv(), KV2, dv, key0, nk, 1.0f);
}

// The flash kernels run bf16 or fp16 with head size 64 or 128 and 16-byte aligned rows (C % 8 == 0).
// Switches, for comparison (dev/cuda/attention.cu, gpucheck_ops): g_flash_attention = false forces
// the warp-per-row kernels; g_flash_ldmatrix = false the per-lane shared-memory loads;
// g_flash_async = false stages tiles through registers, each before its use (no cp.async);
// g_flash_backward_passes runs one backward pass alone (its dqkv part only: timing);
// g_flash_forward_rows, g_flash_dq_rows and g_flash_dkv_keys = 32 give head size 64 two m-tiles
// per warp (the same bits; 190-255 registers, so fewer warps per SM): faster or slower by pass
// and compiler (below: g_flash_rows_auto times both).
// g_flash_wgmma = true runs the forward and both backward passes with wgmma on a compute
// capability 9.0 GPU (elsewhere the switch is ignored), g_flash_wgmma_groups warpgroups (64 rows
// each) a block. Off until an H100 run shows it right (gpucheck_ops) and faster (dev_attention).
// g_flash_wgmma_overlap = false waits for each wgmma product as soon as it is issued (the same
// bits: where the overlapped run differs from it, the software pipeline is wrong, not a layout).
inline bool g_flash_attention = true, g_flash_ldmatrix = true, g_flash_async = true;
inline bool g_flash_wgmma = false, g_flash_wgmma_overlap = true;
inline int g_flash_wgmma_groups = 2;     // 1 or 2
inline int g_flash_backward_passes = 3;  // bit 0: the dK/dV pass, bit 1: the dQ pass (to time them apart)
inline int g_flash_forward_rows = 16;    // query rows per warp in the forward: 16, or 32 (head size 64 only)
inline int g_flash_dq_rows = 16;         // query rows per warp in the backward's dQ pass: 16, or 32 (head size 64 only)
inline int g_flash_dkv_keys = 16;        // keys per warp in the backward's dK/dV pass: 16, or 32 (head size 64 only)
// --flash-rows auto (g_flash_rows_auto, the trainer's default): at head size 64, each pass's first
// launch of at least g_flash_tune_blocks blocks (a training step's, at any real size; the
// LLMC_FLASH_TUNE_BLOCKS environment variable sets another count) is timed with 16 and with 32
// rows a warp, and the faster is kept for the rest of the run. The two give the same bits
// (gpucheck_ops, test_gpu_train), so only the speed depends on the choice; and which is faster
// has gone either way by pass, GPU and compiler (on an H100, dev/gpu_results/: 16 in all three
// passes on 2026-11-22; on 2026-11-26, with nvcc giving the 16-row backward more registers, 16
// in the forward and 32 in both backward passes). Rank 0 prints each choice and its times.
inline bool g_flash_rows_auto = false;
inline long g_flash_tune_blocks = [] {
    const char* e = getenv("LLMC_FLASH_TUNE_BLOCKS");
    return e && atol(e) > 0 ? atol(e) : 256L;
}();
enum FlashPass { FLASH_FORWARD, FLASH_DKV, FLASH_DQ };
inline bool g_flash_tuned[3] = {};  // (by FlashPass)

// The faster of 16 and 32 rows a warp for one pass: launch(rows) queues it on ctx's stream (it
// overwrites its outputs, so running it again changes nothing); each once to warm up (a kernel's
// first launch loads its code), then the best of 3 timed by CUDA events. Sets *rows, notes it.
template <class F>
inline void flash_tune_rows(const Ctx& ctx, FlashPass pass, int B, int T_, int* rows, const F& launch) {
    static const char* what[3] = {"query rows a warp in the forward", "keys a warp in the dK/dV pass", "query rows a warp in the dQ pass"};
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[2];
    for (int v = 0; v < 2; v++) {
        launch(16 << v);
        ms[v] = INFINITY;
        for (int rep = 0; rep < 3; rep++) {
            CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
            launch(16 << v);
            CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float t = 0;
            CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
            ms[v] = fminf(ms[v], t);
        }
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    *rows = ms[1] < ms[0] ? 32 : 16;
    g_flash_tuned[pass] = true;
    if (g_rank == 0)
        printf("flash attention: %d %s (--flash-rows auto, timed at B=%d T=%d: %.3f ms with 16, %.3f ms with 32)\n",
               *rows, what[pass], B, T_, ms[0], ms[1]);
}
// Runs launch(rows) with this pass's rows a warp, timing both first where --flash-rows auto asks
// and the pass has both (head size 64: `both`; launch runs 16 for 32 elsewhere).
template <class F>
inline void flash_launch_rows(const Ctx& ctx, FlashPass pass, bool both, int* rows, long blocks, int B, int T_, const F& launch) {
    if (both && g_flash_rows_auto && !g_flash_tuned[pass] && blocks >= g_flash_tune_blocks) flash_tune_rows(ctx, pass, B, T_, rows, launch);
    launch(*rows);
}
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
template <class T> inline bool use_flash(int C, int NH) {
    int hs = C / NH;
    return is_half_type<T> && g_flash_attention && (hs == 64 || hs == 128) && C % 8 == 0;
}
// Calls f(D, LDSM, ASYNC) with std::integral_constant arguments (so that f can name a kernel
// instance) for head size hs and the switches above.
template <class F> inline void flash_dispatch(int hs, const F& f) {
    auto with = [&](auto d) {
        using std::true_type, std::false_type;
        if (g_flash_ldmatrix) g_flash_async ? f(d, true_type{}, true_type{}) : f(d, true_type{}, false_type{});
        else g_flash_async ? f(d, false_type{}, true_type{}) : f(d, false_type{}, false_type{});
    };
    if (hs == 64) with(std::integral_constant<int, 64>{});
    else with(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, hs> (64 or 128: the flash kernels' head sizes).
template <class F> inline void with_head_size(int hs, const F& f) {
    if (hs == 64) f(std::integral_constant<int, 64>{});
    else f(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, g_flash_wgmma_groups> (1 or 2: warpgroups a block).
template <class F> inline void wgmma_groups_dispatch(const F& f) {
    if (g_flash_wgmma_groups == 1) f(std::integral_constant<int, 1>{});
    else f(std::integral_constant<int, 2>{});
}
// grid (NH, B, row tiles) (the dK/dV pass: NKV key/value heads): the tile index is the slowest, so
// the blocks with the most work (the last query tiles; for dK/dV the first key tiles) start first
// and the short ones fill the tail
template <class T>
inline void flash_forward(const Ctx& ctx, T* out, float* lse, const T* qkv, int B, int T_, const QKVLayout& L) {
    const int NH = L.NH;
    if constexpr (is_half_type<T>)
        flash_dispatch(L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            if (g_flash_wgmma && gpu_has_wgmma()) {
                wgmma_groups_dispatch([&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;  // (D itself is not a constant in here)
                    const size_t smem = 4 * 64 * HS * sizeof(T);  // (64 KB at head size 128)
                    SHARED_OPT_IN(flash_forward_wgmma_kernel<T, HS, G>);
                    flash_forward_wgmma_kernel<T, HS, G><<<dim3(NH, B, ceil_div(T_, 64 * G)), 128 * G, smem, ctx.stream>>>(out, lse, qkv, T_, L, g_flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
            auto fwd = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_forward_kernel<T, D, LD, A, 2><<<dim3(NH, B, ceil_div(T_, 128)), 128, 0, ctx.stream>>>(out, lse, qkv, T_, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_forward_kernel<T, D, LD, A, 1><<<dim3(NH, B, ceil_div(T_, 64)), 128, 0, ctx.stream>>>(out, lse, qkv, T_, L);
                CUDA_LAUNCH_CHECK();
            };
            flash_launch_rows(ctx, FLASH_FORWARD, D == 64, &g_flash_forward_rows, (long)NH * B * ceil_div(T_, 64), B, T_, fwd);
        });
}
template <class T>
inline void flash_backward(const Ctx& ctx, T* dqkv, const T* dout, const T* qkv, const float* lse, const float* Dv,
                           int B, int T_, const QKVLayout& L) {
    const int NH = L.NH, NKV = L.NKV;
    if constexpr (is_half_type<T>)
        flash_dispatch(L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            if (g_flash_wgmma && gpu_has_wgmma()) {
                wgmma_groups_dispatch([&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;  // (D itself is not a constant in here)
                    const size_t tile = 64 * HS * sizeof(T);  // shared memory: 2·G + 6 tiles (dK/dV), 5 (dQ)
                    const dim3 kv_grid(NKV, B, ceil_div(T_, 64 * G)), q_grid(NH, B, ceil_div(T_, 64 * G));  // 64·G keys or queries a block
                    SHARED_OPT_IN(flash_backward_dkv_wgmma_kernel<T, HS, G>);
                    SHARED_OPT_IN(flash_backward_dq_wgmma_kernel<T, HS, G>);
                    if (g_flash_backward_passes & 1)
                        flash_backward_dkv_wgmma_kernel<T, HS, G><<<kv_grid, 128 * G, (2 * G + 6) * tile, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L, g_flash_wgmma_overlap);
                    if (g_flash_backward_passes & 2)
                        flash_backward_dq_wgmma_kernel<T, HS, G><<<q_grid, 128 * G, 5 * tile, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L, g_flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
            const dim3 kv_grid(NKV, B, ceil_div(T_, 64)), q_grid(NH, B, ceil_div(T_, 64));
            auto dkv = [&](int keys) {
                if constexpr (D == 64)
                    if (keys == 32) {  // 2 warps × 32 keys: 64 threads a block
                        flash_backward_dkv_kernel<T, D, LD, A, 2><<<kv_grid, 64, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dkv_kernel<T, D, LD, A, 1><<<kv_grid, 128, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L);
                CUDA_LAUNCH_CHECK();
            };
            auto dq = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_backward_dq_kernel<T, D, LD, A, 2><<<dim3(NH, B, ceil_div(T_, 128)), 128, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dq_kernel<T, D, LD, A, 1><<<q_grid, 128, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T_, L);
                CUDA_LAUNCH_CHECK();
            };
            const long blocks = (long)B * ceil_div(T_, 64);
            if (g_flash_backward_passes & 1) flash_launch_rows(ctx, FLASH_DKV, D == 64, &g_flash_dkv_keys, NKV * blocks, B, T_, dkv);
            if (g_flash_backward_passes & 2) flash_launch_rows(ctx, FLASH_DQ, D == 64, &g_flash_dq_rows, NH * blocks, B, T_, dq);
        });
}
#endif

// The ops. NKV: key/value heads (NKV = NH: multi-head attention, qkv rows of 3C; see the header).
// The FLOPs counted are the products' over the causal half: each query head's, whatever NKV.
template <class T>
inline void attention_forward(const Ctx& ctx, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV) {
    OpScope prof(ctx, 2.0 * B * T_ * T_ * C, 0, "attention forward");  // Q·Kᵀ and P·V over the causal half
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (use_flash<T>(C, NH)) { flash_forward(ctx, out, lse, qkv, B, T_, L); return; }
        if (C / NH > 32 * ATT_MAX_PER_LANE) fatal("attention: head size %d > %d is not supported on CUDA", C / NH, 32 * ATT_MAX_PER_LANE);
        attention_forward_kernel<<<ceil_div((size_t)B * NH * T_, 8), 256, 0, ctx.stream>>>(out, lse, qkv, B, T_, L);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BT = (size_t)B * T_;
    F32View<T> o(out, BT * C, false), x(qkv, BT * L.row());
    attention_forward_cpu(o.p, lse, x.p, B, T_, C, NH, NKV);
    o.store();
}
template <class T>
inline void attention_backward(const Ctx& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                               int B, int T_, int C, int NH, int NKV) {
    OpScope prof(ctx, 2.5 * 2.0 * B * T_ * T_ * C, 0, "attention backward");  // the usual 2.5× the forward (dS, dP, dQ, dK, dV)
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        size_t rows = (size_t)B * NH * T_;
        static Buf<float> D_buf;
        float* D = gpu_scratch(D_buf, ctx, rows);
        constexpr int P = PACK<T>;  // (the launch rewriting for the emulator wants no nested <>)
        if (pack_width<T>(C / NH, {dout, out}) > 1)
            attention_backward_D_kernel<T, P><<<ceil_div(rows, 32), 256, 0, ctx.stream>>>(D, dout, out, B, T_, C, NH);
        else
            attention_backward_D_kernel<T, 1><<<ceil_div(rows, 32), 256, 0, ctx.stream>>>(D, dout, out, B, T_, C, NH);
        if (use_flash<T>(C, NH)) { flash_backward(ctx, dqkv, dout, qkv, lse, D, B, T_, L); return; }
        attention_backward_dq_kernel<<<ceil_div(rows, 8), 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T_, L);
        attention_backward_dkv_kernel<<<ceil_div((size_t)B * NKV * T_, 8), 256, 0, ctx.stream>>>(dqkv, dout, qkv, lse, D, B, T_, L);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BT = (size_t)B * T_;
    F32View<T> dx(dqkv, BT * L.row(), false), d(dout, BT * C), x(qkv, BT * L.row()), o(out, BT * C);
    attention_backward_cpu(dx.p, d.p, x.p, o.p, lse, B, T_, C, NH, NKV);
    dx.store();
}

// ---- ring attention's pieces, for any dtype T of qkv, kv and dout (context_parallel.h)
template <class T>
inline void attention_block_forward(const Ctx& ctx, float* o, float* lse, const T* qkv, const T* kv, int B, int T_, int Tk, int C,
                                    int NH, int NKV, int q0, int nq, int k0, int nk) {
    if (nq == 0 || nk == 0) return;
    OpScope prof(ctx, 4.0 * B * nq * nk * C, 0, "attention block forward");  // Q·Kᵀ and P·V over the whole block
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if constexpr (is_half_type<T>)
            if (use_flash<T>(C, NH)) {  // the tensor cores (bf16, fp16; head size 64, 128)
                with_head_size(L.hs, [&](auto d) {
                    constexpr int HS = decltype(d)::value;
                    flash_block_forward_kernel<T, HS><<<dim3(NH, B, ceil_div(nq, 64)), 128, 0, ctx.stream>>>(o, lse, qkv, kv, T_, Tk, L, q0, nq, k0, nk);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
        if (C / NH > 32 * ATT_MAX_PER_LANE) fatal("attention: head size %d > %d is not supported on CUDA", C / NH, 32 * ATT_MAX_PER_LANE);
        attention_block_forward_kernel<<<ceil_div((size_t)B * NH * nq, 8), 256, 0, ctx.stream>>>(o, lse, qkv, kv, B, T_, Tk, L, q0, nq, k0, nk);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    F32View<T> x(qkv, (size_t)B * T_ * L.row()), y(kv, 2 * (size_t)B * Tk * L.kv());
    attention_block_forward_cpu(o, lse, x.p, y.p, B, T_, Tk, C, NH, NKV, q0, nq, k0, nk);
}
template <class T>
inline void attention_row_dots(const Ctx& ctx, float* D, const T* dout, const T* out, int B, int T_, int C, int NH) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const size_t rows = (size_t)B * NH * T_;
        attention_backward_D_kernel<T, 1><<<ceil_div(rows, 32), 256, 0, ctx.stream>>>(D, dout, out, B, T_, C, NH);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    const size_t BTC = (size_t)B * T_ * C;
    F32View<T> d(dout, BTC), o(out, BTC);
    attention_row_dots_cpu(D, d.p, o.p, B, T_, C, NH);
}
template <class T>
inline void attention_block_backward(const Ctx& ctx, float* dx, float* dkv, const T* dout, const T* qkv, const T* kv,
                                     const float* lse, const float* D, int B, int T_, int Tk, int C, int NH, int NKV, int q0, int nq,
                                     int k0, int nk) {
    if (nq == 0 || nk == 0) return;
    OpScope prof(ctx, 2.5 * 4.0 * B * nq * nk * C, 0, "attention block backward");
    const QKVLayout L = qkv_layout(C, NH, NKV);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if constexpr (is_half_type<T>)
            if (use_flash<T>(C, NH)) {
                with_head_size(L.hs, [&](auto d) {
                    constexpr int HS = decltype(d)::value;  // (D is the row dots here)
                    flash_block_backward_dq_kernel<T, HS><<<dim3(NH, B, ceil_div(nq, 64)), 128, 0, ctx.stream>>>(dx, dout, qkv, kv, lse, D, T_, Tk, L, q0, nq, k0, nk);
                    flash_block_backward_dkv_kernel<T, HS><<<dim3(NKV, B, ceil_div(nk, 64)), 128, 0, ctx.stream>>>(dkv, dout, qkv, kv, lse, D, T_, Tk, L, q0, nq, k0, nk);
                });
                CUDA_LAUNCH_CHECK();
                return;
            }
        attention_block_backward_dq_kernel<<<ceil_div((size_t)B * NH * nq, 8), 256, 0, ctx.stream>>>(dx, dout, qkv, kv, lse, D, B, T_, Tk, L, q0, nq, k0, nk);
        attention_block_backward_dkv_kernel<<<ceil_div((size_t)B * NKV * nk, 8), 256, 0, ctx.stream>>>(dkv, dout, qkv, kv, lse, D, B, T_, Tk, L, q0, nq, k0, nk);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    F32View<T> d(dout, (size_t)B * T_ * C), x(qkv, (size_t)B * T_ * L.row()), y(kv, 2 * (size_t)B * Tk * L.kv());
    attention_block_backward_cpu(dx, dkv, d.p, x.p, y.p, lse, D, B, T_, Tk, C, NH, NKV, q0, nq, k0, nk);
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
