/*
flash_attention.cuh — FlashAttention-2's algorithm, written here: causal attention on the tensor
cores through mma.sync m16n8k16 (16-bit in, fp32 accumulate). It is the bf16/fp16 path of
attention.cuh's ops at head size 64 or 128, on any GPU from sm_80. flash_launch.cuh includes it.

  forward   a block per 64 queries (4 warps × 16 rows), key tiles of 64 through shared memory,
            S = Q·Kᵀ, online softmax in base 2, O += P·V; lse saved for the backward
  backward  two passes, no atomics: dQ (a block per 64 queries; it also computes D = rowsum(dO∘O)),
            then dK/dV (a block per 64 keys, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ so that Pᵀ and dSᵀ are
            A operands of dV += Pᵀ·dO and dK += dSᵀ·Q)

Tiles are copied by cp.async one tile ahead, read by ldmatrix, and masked only on the diagonal.
With --flash-rows 32 (head size 64) a warp owns 32 rows: each fragment read feeds two mma.
Ring attention's blocks (flash_block_*_kernel) use the same tiles without the mask.

Main kernels: flash_forward_kernel, flash_backward_dq_kernel, flash_backward_dkv_kernel,
flash_block_forward_kernel, flash_block_backward_dq/dkv_kernel.

Tests: test/gpucheck_ops.cu (every kernel and switch against the CPU op), test/test_ptxas.sh
(register caps), dev/cuda/attention.cu (versions v3-v6, timed). More: docs/kernels.md.
*/
#pragma once
#include "common.h"

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
static const float LN2 = 0.6931471805599453f;  // (LOG2E and exp2_ftz: kernel_helpers.cuh)

// The backward's dS = P∘(dP − D) with P = exp2(s·log2e/√hs − lse·log2e), on NT n-tiles of a
// warp's C fragments. ds_rows: rows are queries (dQ pass), each thread's two rows' lse2 and D
// given; dp becomes dS. ds_cols: the transposed products (dK/dV pass), columns are queries whose
// lse2 and D are read per column; st becomes Pᵀ and dpt dSᵀ (both are A operands next).
// FTZ = false: exp2f, in the two kernels where exp2_ftz's schedule makes ptxas spill (test_ptxas.sh).
template <int NT> __device__ inline void ds_rows(const float (*s)[4], float (*dp)[4], const float* lse2, const float* Dr, float sl2) {
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const float p = exp2_ftz(fmaf(s[nt][e], sl2, -lse2[e / 2]));
            dp[nt][e] = p * (dp[nt][e] - Dr[e / 2]);
        }
}
template <int NT, bool FTZ = true>
__device__ inline void ds_cols(float (*st)[4], float (*dpt)[4], const float* lse2, const float* Dc, float sl2) {
    const int t = threadIdx.x % 4;
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const int col = nt * 8 + 2 * t + (e & 1);
            const float x = fmaf(st[nt][e], sl2, -lse2[col]), p = FTZ ? exp2_ftz(x) : exp2f(x);
            st[nt][e] = p;
            dpt[nt][e] = p * (dpt[nt][e] - Dc[col]);
        }
}
// One key tile of NT·8 (64 or 128) in the forward's online softmax, for a warp's 16 query rows
// (row0 + g and row0 + g + 8; s in the C layout, the keys from col0): the causal mask where the
// tile reaches the diagonal, the rows' new running max m (base 2; each row's 4 threads agree on
// it), the factor corr = exp2(m_old − m_new) by which what came before is rescaled (l here; the
// output by the caller: rescale_rows), and s turned into probabilities whose per-thread sums go
// into l (added across the row's threads at the end). CAUSAL = false (ring attention's blocks): no mask here.
template <bool CAUSAL = true, int NT = 8>
__device__ inline void online_softmax_p(float (*s)[4], float* m, float* l, float* corr, float sl2, int row0, int col0) {
    if (CAUSAL && col0 + NT * 8 - 1 > row0) mask_future<NT, false>(s, row0, col0);  // the diagonal (and keys past T)
    float rs[2] = {0.0f, 0.0f}, mu[2];
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
        for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * sl2);
        mu[r] = m_new == -INFINITY ? 0.0f : m_new;
        corr[r] = exp2_ftz(m[r] - mu[r]);
        m[r] = m_new;
        l[r] *= corr[r];
    }
    for (int nt = 0; nt < NT; nt++)
        for (int e = 0; e < 4; e++) {
            const float p = exp2_ftz(fmaf(s[nt][e], sl2, -mu[e / 2]));
            s[nt][e] = p;
            rs[e / 2] += p;
        }
    l[0] += rs[0]; l[1] += rs[1];
}
// Row r of the C layout × corr[r]. A warp whose rows all kept their max (every corr is 1) skips
// it: x · 1 = x, so the same bits. (The warp is converged here: the softmax's shuffles just ran.)
template <int D> __device__ inline void rescale_rows(float (*o)[4], const float* corr) {
    if (!__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) return;
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
// The forward's end for a warp's 16 query rows (those below n; T rows a sequence): each row's
// sum over its 4 threads, out = o / l, lse = (m + log2 l)·ln 2. out: H, or fp32 (ring blocks).
template <int D, class O> __device__ inline void forward_store_rows(O* out, float* lse, float (*o)[4], float* m, float* l, int row0,
                                                          int b, int h, int T, int C, int NH, int n) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = row0 + g + 8 * r;
        if (row >= n) continue;
        O* orow = out + ((size_t)b * T + row) * C + h * D;
        for (int dt = 0; dt < D / 8; dt++) store_pair(orow + dt * 8 + 2 * t, o[dt][2 * r] / l[r], o[dt][2 * r + 1] / l[r]);
        if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m[r] + log2f(l[r])) * LN2;
    }
}

// MT m-tiles of 16 query rows per warp (1, or 2 for hs 64: each K and V fragment loaded from
// shared memory then feeds two mma instead of one); a block has 4 warps, 64·MT query rows.
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128) flash_forward_kernel(H* out, float* lse, const H* qkv, int T, QKVLayout L) {
    __shared__ __align__(16) H Ks[64][D + 8];
    __shared__ __align__(16) H Vs[64][D + 8];
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int warp = threadIdx.x / 32;
    const size_t C3 = L.row();  // (3C without grouped-query attention)
    const H* q = L.q_at(qkv, b, T, h);  // row i of q: q + i·C3
    const H *k = L.k_at(qkv, b, T, h), *v = L.v_at(qkv, b, T, h);
    const float sl2 = rsqrtf((float)D) * LOG2E;         // scores in base 2: s·log2(e)/√hs
    int row0[MT];                                       // m-tile i: rows row0[i] + g and + g + 8
    uint32_t qf[MT][D / 16][4];
    float o[MT][D / 8][4], m[MT][2], l[MT][2];          // m: the running max in base 2
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        row0[i] = qt * 64 * MT + (warp * MT + i) * 16;
        for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[i][kc], q, C3, row0[i], T, kc * 16);
        for (int dt = 0; dt < D / 8; dt++) o[i][dt][0] = o[i][dt][1] = o[i][dt][2] = o[i][dt][3] = 0.0f;
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
    }
    // key tiles up to the block's last row (and T); K and V take turns: V(kt) is copied in while
    // S = Q·K(kt)ᵀ is computed, K(kt+1) while O += P·V(kt)
    const int nkt = min((qt + 1) * MT, (T + 63) / 64);
    stage_rows<64, D, ASYNC>(Ks, k, C3, 0, T);
    for (int kt = 0; kt < nkt; kt++) {
        stage_wait<ASYNC>();
        __syncthreads();  // K(kt) is in, and every warp is done with V(kt−1)
        stage_rows<64, D, ASYNC>(Vs, v, C3, kt * 64, T);
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
        if (kt + 1 < nkt) stage_rows<64, D, ASYNC>(Ks, k, C3, (kt + 1) * 64, T);
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
    for (int i = 0; i < MT; i++) forward_store_rows<D>(out, lse, o[i], m[i], l[i], row0[i], b, h, T, L.C, L.NH, T);
}

// A warp's 16 rows (row0 + g, row0 + g + 8) of a rows × D accumulator in the C layout, times
// scale, as H into dst + row·ld (rows < T only): the backward passes' dQ, dK and dV.
template <int D, class H> __device__ inline void store_acc_rows(H* dst, size_t ld, const float (*acc)[4], int row0, int T, float scale) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T) continue;
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
__device__ inline void row_lse2(float* lse2, const float* lse_bh, int row0, int n) {
    const int g = (threadIdx.x % 32) / 4;
    for (int r = 0; r < 2; r++) lse2[r] = row0 + g + 8 * r < n ? lse_bh[row0 + g + 8 * r] * LOG2E : INFINITY;
}
__device__ inline void row_stats(float* lse2, float* Dr, const float* lse_bh, const float* D_bh, int row0, int n) {
    const int g = (threadIdx.x % 32) / 4;
    row_lse2(lse2, lse_bh, row0, n);
    for (int r = 0; r < 2; r++) Dr[r] = row0 + g + 8 * r < n ? D_bh[row0 + g + 8 * r] : 0.0f;
}
// The causal dQ passes compute D = rowsum(dO∘O) themselves (no kernel before them, no extra read of
// dO), for a warp's rows row0 + g and row0 + g + 8 (rows ≥ n: 0): from the dO A fragments the pass
// holds (of, D/16 k-chunks) and O's, loaded here alike; each thread's 4·D/16 products in a chain of
// FMAs, then the row's 4 threads added pairwise — the same order for any rows of any warp, so the
// 16- and 32-row variants (and the wgmma pass) compute the same D bit for bit. Stored to D_bh (the
// dK/dV pass reads it there, after this pass).
template <int D, class H>
__device__ inline void row_dots(float* Dr, const uint32_t (*of)[4], const H* o, size_t ld, int row0, int n, float* D_bh) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    auto lo = [](uint32_t u) { return to_f(H{(uint16_t)(u & 0xffffu)}); };
    auto hi = [](uint32_t u) { return to_f(H{(uint16_t)(u >> 16)}); };
    float s[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        uint32_t oa[4];
        load_a_rows(oa, o, ld, row0, n, kc * 16);
        for (int i = 0; i < 4; i++) {  // A fragment register i: row g + 8·(i % 2)
            s[i % 2] = fmaf(lo(of[kc][i]), lo(oa[i]), s[i % 2]);
            s[i % 2] = fmaf(hi(of[kc][i]), hi(oa[i]), s[i % 2]);
        }
    }
    for (int r = 0; r < 2; r++) {
        s[r] += __shfl_xor_sync(0xffffffffu, s[r], 1);
        s[r] += __shfl_xor_sync(0xffffffffu, s[r], 2);
        Dr[r] = s[r];
        if (t == 0 && row0 + g + 8 * r < n) D_bh[row0 + g + 8 * r] = s[r];
    }
}
// The dK/dV passes' per-query values for queries q0 .. q0 + R − 1 (threads t = 0 .. R − 1 write
// them): lse in base 2 (lse·log2e) and D = rowsum(dO∘O); past T, lse2 = ∞ so that p = 0.
template <int R> __device__ inline void stage_query_stats(float* lse2, float* Ds, const float* lse_bh, const float* D_bh, int q0, int T,
                                                          int t = threadIdx.x) {
    if (t < R) {
        const int r = q0 + t;
        lse2[t] = r < T ? lse_bh[r] * LOG2E : INFINITY;
        Ds[t] = r < T ? D_bh[r] : 0.0f;
    }
}
// Blocks of 128 threads each SM must hold at head size 64 (MT = 1), which caps the registers:
// 65536 / (3 · 128) → 168 for the dK/dV pass, 65536 / (4 · 128) → 128 for the dQ pass. Left to
// itself nvcc gave them 173 and 140: one block an SM fewer each, and a slower pass (docs/kernels.md).
// Within the caps ptxas spills one register in the default dK/dV variant; test/test_ptxas.sh holds that.
#define FLASH_DKV_MIN_BLOCKS(D, MT) ((D) == 64 && (MT) == 1 ? 3 : 1)
#define FLASH_DQ_MIN_BLOCKS(D, MT) ((D) == 64 && (MT) == 1 ? 4 : 1)
// Backward pass 1 (run after the dQ pass, whose D it reads): dK, dV for 64 keys of one key/value head per block, over query tiles of 32 (of
// each query head of its group: grouped-query attention's sum, in registers). MT = 1: 4 warps × 16
// keys, their K and V fragments held in registers. MT = 2 (head size 64): 2 warps × 32 keys, so
// that each Q and dO fragment read from shared memory feeds two mma; K and V then wait in shared
// memory and are read per use (registers cannot hold them beside dK and dV for 32 keys).
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128, FLASH_DKV_MIN_BLOCKS(D, MT)) flash_backward_dkv_kernel(H* dqkv, const H* dout, const H* qkv,
                                                                 const float* lse, const float* Dv, int T, QKVLayout L) {
    constexpr bool KV_SHARED = MT > 1;
    __shared__ __align__(16) H Qs[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H dOs[2][32][D + 8];
    __shared__ __align__(16) H Ks[KV_SHARED ? 64 : 1][D + 8];  // the block's keys and values (MT = 2)
    __shared__ __align__(16) H Vs[KV_SHARED ? 64 : 1][D + 8];
    __shared__ float lse2[2][32], Ds[2][32];
    const int kt = blockIdx.z, kh = blockIdx.x, b = blockIdx.y;  // the first keys (most queries) first
    const int warp = threadIdx.x / 32, C = L.C, G = L.group();
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T * C3;  // batch b's rows
    const H *k = qkv_b + L.k(kh * G), *v = qkv_b + L.v(kh * G);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    int key0[MT];  // m-tile i: keys key0[i] + g and + g + 8, rows (key0[i] − kt·64) of Ks and Vs
    #pragma unroll
    for (int i = 0; i < MT; i++) key0[i] = kt * 64 + (warp * MT + i) * 16;
    uint32_t kf[KV_SHARED ? 1 : D / 16][4], vf[KV_SHARED ? 1 : D / 16][4];
    if constexpr (KV_SHARED) {  // (there for every warp after the loop's first stage_wait and __syncthreads)
        stage_rows<64, D, ASYNC>(Ks, k, C3, kt * 64, T);
        stage_rows<64, D, ASYNC>(Vs, v, C3, kt * 64, T);
    } else {
        for (int kc = 0; kc < D / 16; kc++) {
            load_a_rows(kf[kc], k, C3, key0[0], T, kc * 16);
            load_a_rows(vf[kc], v, C3, key0[0], T, kc * 16);
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
    const int nqt = (T - kt * 64 + 31) / 32, nit = G * nqt;
    auto tile_q0 = [&](int it) { return kt * 64 + it % nqt * 32; };
    auto stage = [&](int buf, int it) {  // iteration it's query tile into buffer buf
        const int h = kh * G + it / nqt, q0 = tile_q0(it);
        stage_rows<32, D, ASYNC>(Qs[buf], qkv_b + h * D, C3, q0, T);
        stage_rows<32, D, ASYNC>(dOs[buf], L.out_at(dout, b, T, h), C, q0, T);
        stage_query_stats<32>(lse2[buf], Ds[buf], L.stats_at(lse, b, T, h), L.stats_at(Dv, b, T, h), q0, T);
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
            ds_cols<4, false>(st[i], dpt[i], lse2[buf], Ds[buf], sl2);  // Pᵀ, dSᵀ (queries past T: lse2 = ∞, p = 0)
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
    H* dk_out = L.k_at(dqkv, b, T, kh * G);
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        store_acc_rows<D>(dk_out, C3, dk[i], key0[i], T, rsqrtf((float)D));
        store_acc_rows<D>(dk_out + L.kv(), C3, dv[i], key0[i], T, 1.0f);
    }
}

// Backward pass 2 (run first: it computes D, row_dots): dQ for 64·MT queries per block, MT m-tiles
// of 16 rows per warp (1, or 2 for hs 64: each K fragment from shared memory feeds two mma, as in
// the forward), over key tiles of 32.
template <class H, int D, bool LDSM, bool ASYNC, int MT>
__global__ void __launch_bounds__(128, FLASH_DQ_MIN_BLOCKS(D, MT)) flash_backward_dq_kernel(H* dqkv, float* Dv, const H* dout, const H* qkv,
                                                                const H* out, const float* lse, int T, QKVLayout L) {
    __shared__ __align__(16) H Ks[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H Vs[2][32][D + 8];
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int warp = threadIdx.x / 32;
    const int C = L.C;
    const size_t C3 = L.row();
    const H* q = L.q_at(qkv, b, T, h);
    const H *k = L.k_at(qkv, b, T, h), *v = L.v_at(qkv, b, T, h);
    const H *dO = L.out_at(dout, b, T, h), *O = L.out_at(out, b, T, h);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    int row0[MT];  // m-tile i: rows row0[i] + g and + g + 8
    float lse2[MT][2], Dr[MT][2];
    uint32_t qf[MT][D / 16][4], of[MT][D / 16][4];
    float dq[MT][D / 8][4];
    #pragma unroll
    for (int i = 0; i < MT; i++) {
        row0[i] = qt * 64 * MT + (warp * MT + i) * 16;
        row_lse2(lse2[i], L.stats_at(lse, b, T, h), row0[i], T);
        for (int kc = 0; kc < D / 16; kc++) {
            load_a_rows(qf[i][kc], q, C3, row0[i], T, kc * 16);
            load_a_rows(of[i][kc], dO, C, row0[i], T, kc * 16);
        }
        row_dots<D>(Dr[i], of[i], O, C, row0[i], T, L.stats_at(Dv, b, T, h));
        for (int dt = 0; dt < D / 8; dt++) dq[i][dt][0] = dq[i][dt][1] = dq[i][dt][2] = dq[i][dt][3] = 0.0f;
    }
    const int key_end = min(T, (qt + 1) * 64 * MT);  // causal: no key after the block's last query
    auto stage = [&](int buf, int k0) {  // the key tile from k0 into buffer buf
        stage_rows<32, D, ASYNC>(Ks[buf], k, C3, k0, T);
        stage_rows<32, D, ASYNC>(Vs[buf], v, C3, k0, T);
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
    for (int i = 0; i < MT; i++) store_acc_rows<D>(L.q_at(dqkv, b, T, h), C3, dq[i], row0[i], T, rsqrtf((float)D));
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
__global__ void __launch_bounds__(128) flash_block_forward_kernel(float* o, float* lse, const H* qkv, const H* kv, int T, int Tk,
                                                                  QKVLayout L, int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Ks[64][D + 8];
    __shared__ __align__(16) H Vs[64][D + 8];
    const int h = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, row0 = q0 + blockIdx.z * 64 + warp * 16;  // this warp's rows: row0 + g, row0 + g + 8
    const H* q = L.q_at(qkv, b, T, h);
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + (h / L.group()) * D, *v = k + L.kv();
    float* ob = L.out_at(o, b, T, h);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    uint32_t qf[D / 16][4];
    float acc[D / 8][4], m[2], l[2];
    for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[kc], q, C3, row0, qend, kc * 16);
    for (int r = 0; r < 2; r++) {  // the running state (a row with no keys yet, lse = −∞: O = 0, l = 0)
        const int row = row0 + g + 8 * r;
        const float l0 = row < qend ? lse[((size_t)b * L.NH + h) * T + row] : -INFINITY;
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
    forward_store_rows<D>(o, lse, acc, m, l, row0, b, h, T, L.C, L.NH, qend);  // the merged o and lse
}
// Backward, dQ: one block per 64 queries of a (b, h) over the block's keys in tiles of 32, as
// flash_backward_dq_kernel (MT = 1) without the mask; dx's q columns += dQ (fp32). Keys past nk
// need no mask here: their K rows are zero, so whatever their dS, dS·K adds nothing.
template <class H, int D>
__global__ void __launch_bounds__(128) flash_block_backward_dq_kernel(float* dx, const H* dout, const H* qkv, const H* kv,
                                                                      const float* lse, const float* Dv, int T, int Tk, QKVLayout L,
                                                                      int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Ks[2][32][D + 8];  // two buffers: the tile in use, the next one arriving
    __shared__ __align__(16) H Vs[2][32][D + 8];
    const int h = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32;
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, row0 = q0 + blockIdx.z * 64 + warp * 16;
    const H* q = L.q_at(qkv, b, T, h);
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + (h / L.group()) * D, *v = k + L.kv();
    const H* dO = L.out_at(dout, b, T, h);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    float lse2[2], Dr[2];
    row_stats(lse2, Dr, lse + ((size_t)b * L.NH + h) * T, Dv + ((size_t)b * L.NH + h) * T, row0, qend);
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
    add_acc_rows<D>(L.q_at(dx, b, T, h), C3, dq, row0, qend, rsqrtf((float)D));
}
// Backward, dK and dV: one block per 64 keys of a (b, key/value head), 4 warps × 16 keys (K and V
// fragments in registers), over the query tiles of 32 of each query head of its group, as
// flash_backward_dkv_kernel (MT = 1) without the mask; dkv += (fp32).
template <class H, int D>
__global__ void __launch_bounds__(128) flash_block_backward_dkv_kernel(float* dkv, const H* dout, const H* qkv, const H* kv,
                                                                       const float* lse, const float* Dv, int T, int Tk, QKVLayout L,
                                                                       int q0, int nq, int k0, int nk) {
    __shared__ __align__(16) H Qs[2][32][D + 8];
    __shared__ __align__(16) H dOs[2][32][D + 8];
    __shared__ float lse2[2][32], Ds[2][32];
    const int kh = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, G = L.group();
    const size_t C3 = L.row(), KV2 = 2 * (size_t)L.kv();
    const int qend = q0 + nq, key0 = blockIdx.z * 64 + warp * 16;  // this warp's keys (of the block's nk): key0 + g, + g + 8
    const H *k = kv + ((size_t)b * Tk + k0) * KV2 + kh * D, *v = k + L.kv();
    const H* qkv_b = qkv + (size_t)b * T * C3;
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
        stage_rows<32, D, true>(dOs[buf], L.out_at(dout, b, T, h), L.C, t0, qend);
        stage_query_stats<32>(lse2[buf], Ds[buf], lse + ((size_t)b * L.NH + h) * T, Dv + ((size_t)b * L.NH + h) * T, t0, qend);
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
