/*
matmul_hopper.cuh — our own GEMM on Hopper (sm_90a) for the linear layer's forward and input
gradient, with bias, GELU or GELU's backward in its epilogue (--matmul-wgmma 1 to 6), and for the
LM head with the softmax's stats in its epilogue (--classifier-stats epilogue).

  forward: pre[n, o] = Σ_i inp[n, i] · W[o, i] + bias[o]     out = GELU(pre)  (or pre)
  dinp:    dinp[n, i] = (Σ_o dout[n, o] · W[o, i]) · GELU'(pre_in[n, i])  (or the sum alone)
           dbias[o] += Σ_n dout[n, o]   (from the same tiles of dout, by two producer warps)

A block computes tiles of 128 rows × 256 columns, one after another (a block an SM). Its
producer warpgroup copies each tile's k-slices (128 × 64 of A, 64 × 256 of B) by TMA into a ring
of 4 slots. Its two computing warpgroups take 64 rows each: per slot 4 wgmma m64n256k16, both
operands from shared memory (B transposed for dinp). Then each applies the epilogue and stores
from its registers, while the producer already fills the slots with the next tile's slices.
Ping-pong (2): tiles of 128 × 128, each computing warpgroup every other one. TMA stores (3): as 1,
the outputs staged in shared memory and stored by TMA. 4-6: 1-3 in clusters of two blocks on tiles
one under the other, each copying half of B into both (GemmLayout).

Main functions: matmul_wgmma_kernel, gemm_store_tma (layout 3), gemm_row_stats, and the launches
matmul_wgmma_forward, matmul_wgmma_dinp and matmul_wgmma_logits (false where they do not run:
not compute capability 9.0, or rows not 16-byte aligned).
Tests: test/gpucheck_ops.cu (group gemm: against the CPU ops), test/test_ptxas.sh.
More: docs/kernels.md ("Our own GEMM").
*/
#pragma once
#include "hopper.cuh"
#include "gelu.cuh"
#include "autotune.cuh"
#include "fused_classifier.cuh"

// What a tile's products become: + bias; + bias, then pre and GELU(pre) (aux = pre); or
// GELU's backward at aux (the layer's pre-activation, read), the products being its gradient.
enum class GemmEpi { Bias, BiasGelu, DGelu };

// The layouts of a block (--matmul-wgmma 1, 2, 3). 1: both computing warpgroups on one tile of
// 128 × 256, 64 rows each (wgmma n256), one ring of 4 slots. 2 (ping-pong, PP): each warpgroup
// its own tiles of 128 × 128 (two wgmma n128 a k-step: rows 0-63 and 64-127), the two taking
// every other tile of the block, each with a ring of 3 slots of its own. So one's epilogue runs
// while the other's products keep the tensor cores busy. (One ring for both would let a
// warpgroup that skips the other's 12 slices wait on a slot's parity two phases early.)
// 3: layout 1 whose epilogue stores by TMA (TMA_STORE): each warpgroup stages its 64 × 256
// outputs in shared memory (STAGE elements), so the ring has 3 slots. 4, 5, 6: layouts 1, 2, 3 in
// clusters of 2 blocks (CLUSTER) on the tiles of the same columns in row tiles one under the
// other. Each block copies half of the slice of B and multicasts it to both: with tiles of 128 ×
// 256 a block reads from L2 128 × 64 of A and 128 × 64 of B a slice, not 256 × 64 of B. Every
// way a thread holds 128 fp32 sums.
constexpr int GEMM_LAYOUTS = 6;
template <int L> struct GemmLayout {
    static constexpr int BASE = (L - 1) % 3 + 1;  // (the layout of 1-3 it runs in clusters, from 4)
    static constexpr bool PP = BASE == 2, TMA_STORE = BASE == 3;
    static constexpr int CLUSTER = L > 3 ? 2 : 1;
    static constexpr int BM = 128, BN = PP ? 128 : 256, BK = 64, STAGES = PP ? 6 : TMA_STORE ? 3 : 4;
    static constexpr int RINGS = PP ? 2 : 1, SLOTS = STAGES / RINGS;  // (slots a ring)
    static constexpr int ROWS_WG = PP ? 128 : 64;            // a warpgroup's rows of a tile
    static constexpr int READERS = PP ? 4 : 8;               // the warps of a block that read a slot (each gives it back)
    static constexpr size_t SLOT = (size_t)(BM + BN) * BK;   // a slot's elements: A, then B
    static constexpr size_t STAGE = TMA_STORE ? (size_t)ROWS_WG * BN : 0;  // a computing warpgroup's staged outputs
    static constexpr size_t BARRIERS = (STAGES * SLOT + 2 * STAGE) * 2;    // (where the mbarriers start: after the slots and stages, in bytes)
    static constexpr size_t shared_bytes() { return BARRIERS + 2 * STAGES * 8 + 1024; }  // (room to align to 1024)
};

// Which tile a block runs n-th (t = blockIdx + n·gridDim), and where tile t lies: in bands of
// GEMM_BAND row tiles, column by column inside a band. So the tiles that run at once share a few
// row panels of A and a few column panels of W, which stay in L2. (Row by row, the LM head's
// 197 column tiles would stream all of W, 77 MB, from memory again for each row tile.) The rings:
// tile n goes to ring n % RINGS. Slice g of a ring, counted over all its tiles, sits in the
// ring's slot g % SLOTS (slot(r, g) of all), and that turn's parity is (g / SLOTS) % 2.
// In clusters a tile is the cluster's (CLUSTER · BM rows), and the block of rank r has its rows
// from r · BM.
constexpr int GEMM_BAND = 16;
template <class Lay> struct GemmTiles {
    int tiles_m, tiles_n, tiles, nk;  // row tiles, column tiles, all tiles, k-slices a tile
    int rank;                         // the block's rank in its cluster
    __device__ int tile(int n) const { return blockIdx.x / Lay::CLUSTER + n * (gridDim.x / Lay::CLUSTER); }
    __device__ int band_rows(int t) const { return min(GEMM_BAND, tiles_m - t / (GEMM_BAND * tiles_n) * GEMM_BAND); }
    __device__ int row0(int t) const {
        return (t / (GEMM_BAND * tiles_n) * GEMM_BAND + t % (GEMM_BAND * tiles_n) % band_rows(t)) * Lay::BM * Lay::CLUSTER + rank * Lay::BM;
    }
    __device__ int col0(int t) const { return t % (GEMM_BAND * tiles_n) / band_rows(t) * Lay::BN; }
    __device__ int slice(int n, int k) const { return n / Lay::RINGS * nk + k; }  // (tile n's slice k, counted in its ring)
    __device__ static int slot(int r, int g) { return r * Lay::SLOTS + g % Lay::SLOTS; }
    __device__ static unsigned phase(int g) { return (unsigned)(g / Lay::SLOTS) & 1; }
};
template <int STAGES> struct GemmBarriers { uint64_t full[STAGES], empty[STAGES]; };

// A slot's readers give it back: with clusters to each block of the cluster, whose producer
// writes its half of B into this block's slot too
template <class Lay> __device__ inline void gemm_free_slot(uint64_t* empty) {
    if constexpr (Lay::CLUSTER == 1) mbar_arrive(empty);
    else
        for (int r = 0; r < Lay::CLUSTER; r++) mbar_arrive_cluster(empty, r);
}

// A box of B into dst (and with clusters into the same place of every block of the cluster)
template <class Lay> __device__ inline void gemm_copy_b(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
    if constexpr (Lay::CLUSTER == 1) tma_load_3d(dst, map, c0, c1, 0, bar);
    else tma_load_multicast_3d(dst, map, c0, c1, 0, bar, (1 << Lay::CLUSTER) - 1);
}

// The producer's first thread: each k-slice of each of the block's tiles into its slot once the
// slot is free, A and B by TMA, both completing the slot's full phase. B is K-major (W in the
// forward: one box of BN rows × 64) or, TRANS_B, MN-major (W in dinp: BN/64 boxes of 64 rows ×
// 64 columns, the panels of 64 columns that wgmma's transposed B reads). In clusters, the
// block copies its part of B (rows or panels from rank · BN/CLUSTER) into every block's slot,
// and the slot's full phase also waits for the others' parts. Its empty phase waits for the
// readers of every block, so no block's part lands in a slot still read.
template <class Lay, bool TRANS_B, class H>
__device__ inline void gemm_produce(H* ring, GemmBarriers<Lay::STAGES>& bar, const GemmTiles<Lay>& tl, const CUtensorMap& a_map,
                                    const CUtensorMap& b_map) {
    for (int n = 0, t; (t = tl.tile(n)) < tl.tiles; n++)
        for (int k = 0; k < tl.nk; k++) {
            const int g = tl.slice(n, k), s = GemmTiles<Lay>::slot(n % Lay::RINGS, g);
            mbar_wait(&bar.empty[s], GemmTiles<Lay>::phase(g) ^ 1);
            mbar_arrive_expect_tx(&bar.full[s], Lay::SLOT * sizeof(H));
            tma_load_3d(ring + s * Lay::SLOT, &a_map, k * Lay::BK, tl.row0(t), 0, &bar.full[s]);
            H* b = ring + s * Lay::SLOT + Lay::BM * Lay::BK;
            constexpr int PART = Lay::BN / Lay::CLUSTER;  // (B's rows, or columns with TRANS_B, this block copies)
            const int p0 = tl.rank * PART;
            if constexpr (TRANS_B)
                for (int p = p0; p < p0 + PART; p += 64) gemm_copy_b<Lay>(b + p * Lay::BK, &b_map, tl.col0(t) + p, k * Lay::BK, &bar.full[s]);
            else
                gemm_copy_b<Lay>(b + p0 * Lay::BK, &b_map, k * Lay::BK, tl.col0(t) + p0, &bar.full[s]);
        }
}

// What the epilogue reads for n-tiles j0..j0+7 of this thread (rows r and r + 8), as 16-bit pairs:
// the bias and, with GELU's backward, the pre-activation. The loads of a chunk go out together,
// and before the stores of the chunk ahead of it: the caller loads the first chunk before the
// tile's last products are done, and each chunk the next one before its own stores. (Loaded
// where each is used, every load waited for the store before it, as out might alias it: a
// memory latency for each pair, 64 a tile.)
constexpr int GEMM_EPI_CHUNK = 8;
struct GemmEpiIn { uint32_t bias[GEMM_EPI_CHUNK], pre[GEMM_EPI_CHUNK][2]; };
template <class H, GemmEpi EPI>
__device__ inline GemmEpiIn gemm_epi_inputs(const H* aux, const H* bias, int j0, int r, int col0, int N, int OC) {
    GemmEpiIn in{};
    #pragma unroll
    for (int j = 0; j < GEMM_EPI_CHUNK; j++) {
        const int c = col0 + 8 * (j0 + j) + 2 * (threadIdx.x % 4);
        if (c >= OC) break;
        if (EPI != GemmEpi::DGelu && bias) in.bias[j] = bias[c].bits | (uint32_t)bias[c + 1].bits << 16;
        #pragma unroll
        for (int h = 0; h < 2; h++)
            if (EPI == GemmEpi::DGelu && r + 8 * h < N) in.pre[j][h] = *reinterpret_cast<const uint32_t*>(aux + (size_t)(r + 8 * h) * OC + c);
    }
    return in;
}

// One pair of outputs from the sums s[0], s[1] of n-tile j of the chunk in, row half h: + bias;
// with GELU (gelu: the output after it, else pre); or GELU's backward at the pre-activation
template <class H, GemmEpi EPI>
__device__ inline float2 gemm_epi_pair(const float* s, const GemmEpiIn& in, int j, int h, bool gelu) {
    const float2 b = unpack2<H>(in.bias[j]);
    const float v0 = s[0] + b.x, v1 = s[1] + b.y;
    if (EPI == GemmEpi::BiasGelu && gelu) return make_float2(gelu_fast_of(v0), gelu_fast_of(v1));
    if (EPI == GemmEpi::DGelu) {
        const float2 x = unpack2<H>(in.pre[j][h]);
        return make_float2(gelu_backward_fast_of(x.x, v0), gelu_backward_fast_of(x.y, v1));
    }
    return make_float2(v0, v1);
}

// 64 rows × BN columns of a warpgroup's sums after the last k-slice, through the epilogue EPI into
// out (and aux). acc holds the wgmma D layout: warp w's rows 16w + lane/4 (and + 8), n-tile j's
// columns 8j + 2·(lane % 4) (and + 1) in acc[4j..4j+3]. first: its inputs' first chunk.
template <class H, GemmEpi EPI, int BN>
__device__ inline void gemm_store(const float* acc, GemmEpiIn first, H* out, H* aux, const H* bias, int row0, int col0, int N, int OC) {
    const int lane = threadIdx.x % 32, r = row0 + threadIdx.x / 32 % 4 * 16 + lane / 4;
    GemmEpiIn in = first, next{};
    #pragma unroll
    for (int j0 = 0; j0 < BN / 8; j0 += GEMM_EPI_CHUNK, in = next) {
        if (j0 + GEMM_EPI_CHUNK < BN / 8) next = gemm_epi_inputs<H, EPI>(aux, bias, j0 + GEMM_EPI_CHUNK, r, col0, N, OC);
        #pragma unroll
        for (int j = j0; j < j0 + GEMM_EPI_CHUNK; j++) {
            const int c = col0 + 8 * j + 2 * (lane % 4);
            if (c >= OC) break;
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = r + 8 * h;
                if (row >= N) continue;
                const size_t at = (size_t)row * OC + c;
                if (EPI == GemmEpi::BiasGelu) {
                    const float2 pre = gemm_epi_pair<H, EPI>(acc + 4 * j + 2 * h, in, j - j0, h, false);
                    store_pair(aux + at, pre.x, pre.y);
                }
                const float2 v = gemm_epi_pair<H, EPI>(acc + 4 * j + 2 * h, in, j - j0, h, true);
                store_pair(out + at, v.x, v.y);
            }
        }
    }
}

// Layout 3's epilogue: a warpgroup's 64 rows × BN columns through its stage in shared memory,
// then TMA stores. The stage holds BN/64 panels of 64 rows × 64 columns, 128-byte swizzled: the
// boxes of the tensor maps (chunk c/8 of row r at chunk (c/8) ^ (r % 8)). One stmatrix.x4 puts
// two n-tiles' 16 rows there (acc's layout is stmatrix's). The warpgroup's first thread waits
// until its last stores have read the stage, and after the writes (each published to the async
// proxy) issues the new ones. With GELU two passes: pre into aux_map's tensor, then GELU(pre).
// TMA does not write past the tensor's rows and columns. first: the inputs' first chunk.
template <class H, GemmEpi EPI, int BN>
__device__ inline void gemm_store_tma(const float* acc, GemmEpiIn first, H* stage, const CUtensorMap& out_map, const CUtensorMap& aux_map,
                                      const H* aux, const H* bias, int row0, int col0, int N, int OC) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32 % 4, barrier = 1 + threadIdx.x / 128, r = row0 + 16 * w + lane / 4;
    const bool issuer = threadIdx.x % 128 == 0;
    #pragma unroll 1  // (unrolled, the two passes spilled)
    for (int pass = 0; pass < (EPI == GemmEpi::BiasGelu ? 2 : 1); pass++) {
        if (issuer) bulk_wait_read<0>();
        bar_sync(barrier, 128);  // (the stage is free)
        GemmEpiIn in = pass == 0 ? first : gemm_epi_inputs<H, EPI>(aux, bias, 0, r, col0, N, OC), next{};
        #pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += GEMM_EPI_CHUNK, in = next) {
            if (j0 + GEMM_EPI_CHUNK < BN / 8) next = gemm_epi_inputs<H, EPI>(aux, bias, j0 + GEMM_EPI_CHUNK, r, col0, N, OC);
            #pragma unroll
            for (int j = j0; j < j0 + GEMM_EPI_CHUNK; j += 2) {
                uint32_t reg[4];
                #pragma unroll
                for (int i = 0; i < 4; i++) {  // matrix i: rows 8(i % 2).. of n-tile j + i/2
                    const int jj = j + i / 2, h = i % 2;
                    const float2 v = gemm_epi_pair<H, EPI>(acc + 4 * jj + 2 * h, in, jj - j0, h, pass == 1);
                    reg[i] = pack2<H>(v.x, v.y);
                }
                const int m = lane / 8, row = 16 * w + 8 * (m % 2) + lane % 8, col = 8 * (j + m / 2);  // (the row lane gives)
                stsm_x4<false>(reg, stage + (col / 64) * 64 * 64 + row * 64 + ((col % 64 / 8) ^ (row % 8)) * 8);
            }
        }
        fence_proxy_async();
        bar_sync(barrier, 128);  // (the stage holds the outputs)
        if (issuer) {
            const CUtensorMap* map = EPI == GemmEpi::BiasGelu && pass == 0 ? &aux_map : &out_map;
            for (int p = 0; p < BN / 64 && col0 + 64 * p < OC; p++) tma_store_3d(map, stage + p * 64 * 64, col0 + 64 * p, row0, 0);
            bulk_commit();
        }
    }
}

// One k-slice's products of a warpgroup into acc (128 sums a thread): 4 k-steps of one wgmma n256
// on its 64 rows, or (PP) of two wgmma n128, rows 0-63 into acc[0..63] and 64-127 into acc[64..].
template <class Lay, bool TRANS_B, class H>
__device__ inline void gemm_slice_products(float* acc, const H* slot, int wg, bool first) {
    using ADesc = TileDesc<Lay::BK, Lay::BM, true>;
    using BDesc = TileDesc<Lay::BK, Lay::BN, true>;   // (K-major: BN rows of 64)
    using TDesc = TileDesc<Lay::BN, Lay::BK, true>;   // (MN-major: 64 rows of BN, in panels of 64)
    const H* bt = slot + Lay::BM * Lay::BK;
    const uint64_t b = TRANS_B ? TDesc::mn_major(bt) : BDesc::k_major(bt);
    wgmma_fence();
    #pragma unroll
    for (int kc = 0; kc < Lay::BK / 16; kc++) {
        const uint64_t bk = b + (TRANS_B ? TDesc::mn_step(kc) : BDesc::k_step(kc));
        #pragma unroll
        for (int h = 0; h < Lay::ROWS_WG / 64; h++) {
            const uint64_t a = ADesc::k_major(slot + (Lay::ROWS_WG == 64 ? wg * 64 : h * 64) * Lay::BK);
            wgmma_m64k16_ss<H, Lay::BN, TRANS_B>(acc + h * Lay::BN / 2, a + ADesc::k_step(kc), bk, !first || kc > 0);
        }
    }
}

// What the kernel sums besides the product (null: nothing): in dinp A's column sums by row tile
// (dout's: the bias gradient; gemm_column_sums); in the LM head's forward the classifier's part
// stats of its rows (gemm_row_stats), over the columns below V.
struct GemmSums { float* col_sums; float* row_stats; int V; };

// The classifier's part stats of a warpgroup's 64 rows × BN columns (fused_classifier.cuh): for
// each row and each CLASSIFIER_PART = 128 columns, the max m of the logits below V (as stored:
// rounded to H) and Σ 2^((x − m)·log2 e). A thread holds 16 n-tiles of a part in each row half;
// the four threads of a row meet by shuffles, and the first writes the pair. Each part's two
// numbers are the same with BN = 128 or 256: the layouts write the same bits.
template <class H, int BN>
__device__ inline void gemm_row_stats(const float* acc, float* stats, int row0, int col0, int N, int OC, int V) {
    static_assert(BN % CLASSIFIER_PART == 0, "a tile holds whole parts");
    const int lane = threadIdx.x % 32, r = row0 + threadIdx.x / 32 % 4 * 16 + lane / 4, parts = classifier_parts(OC);
    #pragma unroll
    for (int q = 0; q < BN / CLASSIFIER_PART; q++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            auto x = [&](int j, int e) {  // (n-tile j of the part, element e: −∞ at V and past it)
                const int c = col0 + CLASSIFIER_PART * q + 8 * j + 2 * (lane % 4) + e;
                return c < V ? to_f(from_f<H>(acc[4 * (16 * q + j) + 2 * h + e])) : -INFINITY;
            };
            float m = -INFINITY, s = 0.0f;
            #pragma unroll
            for (int j = 0; j < 16; j++) m = fmaxf(m, fmaxf(x(j, 0), x(j, 1)));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            if (m != -INFINITY)
                #pragma unroll
                for (int j = 0; j < 16; j++) s += exp2_ftz((x(j, 0) - m) * LOG2E) + exp2_ftz((x(j, 1) - m) * LOG2E);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            const int row = r + 8 * h, part = col0 / CLASSIFIER_PART + q;
            if (lane % 4 == 0 && row < N && part < parts) *reinterpret_cast<float2*>(stats + 2 * ((size_t)row * parts + part)) = make_float2(m, s);
        }
}

// Where a computing warpgroup's outputs go: out (and aux) from its registers, or with layout 3
// through its stage and TMA (the maps: out's and, with GELU, aux's, in boxes of 64 × 64). And
// where the classifier's part stats go (row_stats, or null).
template <class H> struct GemmOut {
    H* out; H* aux; const H* bias; H* stage; const CUtensorMap* out_map; const CUtensorMap* aux_map;
    float* row_stats; int V;
};

// A computing warpgroup: for each of its tiles (all of the block's, or PP every other one), each
// k-slice's products once its slot is full; the slot before is free once at most this slice's
// products are in flight (lane 0 of each warp arrives at its empty phase). Then the tile's stores.
template <class Lay, class H, bool TRANS_B, GemmEpi EPI>
__device__ inline void gemm_consume(const H* ring, GemmBarriers<Lay::STAGES>& bar, const GemmTiles<Lay>& tl, const GemmOut<H>& o, int N, int OC) {
    constexpr bool PP = Lay::PP;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    float acc[128];
    const int r = PP ? wg : 0;  // (its ring)
    for (int n = r, t; (t = tl.tile(n)) < tl.tiles; n += Lay::RINGS) {
        int g = tl.slice(n, 0);
        for (int k = 0; k < tl.nk; k++, g++) {
            const int s = GemmTiles<Lay>::slot(r, g);
            mbar_wait(&bar.full[s], GemmTiles<Lay>::phase(g));
            gemm_slice_products<Lay, TRANS_B>(acc, ring + s * Lay::SLOT, wg, k == 0);
            wgmma_commit();
            wgmma_wait<1>();
            if (k > 0 && lane == 0) gemm_free_slot<Lay>(&bar.empty[GemmTiles<Lay>::slot(r, g - 1)]);
        }
        const int row0 = tl.row0(t) + (PP ? 0 : wg * 64), rt = threadIdx.x / 32 % 4 * 16 + lane / 4;  // (the warpgroup's rows, the thread's)
        const GemmEpiIn first = gemm_epi_inputs<H, EPI>(o.aux, o.bias, 0, row0 + rt, tl.col0(t), N, OC);  // (loaded while the last products run)
        wgmma_wait<0>();
        wgmma_hold<128>(acc);  // (the stores read acc only after the wait)
        if (lane == 0) gemm_free_slot<Lay>(&bar.empty[GemmTiles<Lay>::slot(r, g - 1)]);
        if constexpr (Lay::TMA_STORE) {
            gemm_store_tma<H, EPI, Lay::BN>(acc, first, o.stage + wg * Lay::STAGE, *o.out_map, *o.aux_map, o.aux, o.bias, row0, tl.col0(t), N, OC);
        } else {
            #pragma unroll
            for (int h = 0; h < Lay::ROWS_WG / 64; h++) {  // (unrolled: acc stays in registers; PP's second 64 rows load their first chunk)
                const GemmEpiIn in = h == 0 ? first : gemm_epi_inputs<H, EPI>(o.aux, o.bias, 0, row0 + 64 + rt, tl.col0(t), N, OC);
                gemm_store<H, EPI, Lay::BN>(acc + h * Lay::BN / 2, in, o.out, o.aux, o.bias, row0 + 64 * h, tl.col0(t), N, OC);
            }
        }
        if constexpr (!TRANS_B && EPI == GemmEpi::Bias)  // (the LM head's: no bias)
            if (o.row_stats)
                #pragma unroll
                for (int h = 0; h < Lay::ROWS_WG / 64; h++) gemm_row_stats<H, Lay::BN>(acc + h * Lay::BN / 2, o.row_stats, row0 + 64 * h, tl.col0(t), N, OC, o.V);
    }
    if (Lay::TMA_STORE && threadIdx.x % 128 == 0) bulk_wait_read<0>();  // (the stage lives as long as the block)
}

// Warps 1 and 2 of the producer warpgroup, where the caller wants A's column sums (dinp: dout's,
// the bias gradient): every k-slice of the block in the producer's order, once it is full. In a
// tile of the first column tile, thread c adds column c of the slice's 128 rows of A in row
// order, into col_sums[row tile][64k + c]: the sums' first stage, in a fixed order. Then lane 0
// of each warp gives the slot back (it counts among the slot's readers; it reads no block's B).
// A tile's rows past N (a cluster's second block) add nothing.
template <class Lay, class H>
__device__ inline void gemm_column_sums(const H* ring, GemmBarriers<Lay::STAGES>& bar, const GemmTiles<Lay>& tl, float* col_sums, int N, int K) {
    const int c = threadIdx.x - 288;  // (0..63)
    for (int n = 0, t; (t = tl.tile(n)) < tl.tiles; n++)
        for (int k = 0; k < tl.nk; k++) {
            const int g = tl.slice(n, k), s = GemmTiles<Lay>::slot(n % Lay::RINGS, g);
            mbar_wait(&bar.full[s], GemmTiles<Lay>::phase(g));
            if (tl.col0(t) == 0 && tl.row0(t) < N && k * Lay::BK + c < K) {
                const H* a = ring + s * Lay::SLOT;  // (128-byte swizzled rows of 64: chunk c/8 of row r at chunk (c/8) ^ (r%8))
                float sum = 0.0f;
                #pragma unroll 8  // (8 loads in flight; unrolled whole, its loads took more registers than the kernel's cap)
                for (int r = 0; r < Lay::BM; r++) sum += to_f(a[r * 64 + ((c / 8) ^ (r % 8)) * 8 + c % 8]);
                col_sums[(size_t)(tl.row0(t) / Lay::BM) * K + k * Lay::BK + c] = sum;
            }
            if (threadIdx.x % 32 == 0) mbar_arrive(&bar.empty[s]);
        }
}

// The kernel: out (N × OC) = A (N × K) · B + epilogue, B = Wᵀ (K-major W, OC × K) or, TRANS_B,
// W itself (MN-major, K × OC). Warpgroups 0 and 1 compute, warpgroup 2 copies (it gives back
// registers: setmaxnreg, 40 a thread; the computing ones take 232). a_map: A in boxes of 64 × 128;
// b_map: W in boxes of 64 × BN/CLUSTER, or 64 × 64 with TRANS_B (gemm_tensor_map). L:
// GemmLayout; with layouts 3 and 6 out_map and aux_map take the stores; with 4-6 the grid runs in
// clusters of 2. sums: what it also sums (GemmSums).
template <class H, bool TRANS_B, GemmEpi EPI, int L>
__global__ void __launch_bounds__(384, 1) matmul_wgmma_kernel(H* out, H* aux, const H* bias, GemmSums sums, int N, int OC, int K,
                                                              const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                                                              const __grid_constant__ CUtensorMap out_map, const __grid_constant__ CUtensorMap aux_map) {
    using Lay = GemmLayout<L>;
    DYNAMIC_SHARED(H, shared);
    H* ring = align_1024(shared);
    GemmBarriers<Lay::STAGES>& bar = *reinterpret_cast<GemmBarriers<Lay::STAGES>*>((char*)ring + Lay::BARRIERS);
    constexpr int CM = Lay::BM * Lay::CLUSTER;  // (a tile's rows)
    const int tiles_m = (N + CM - 1) / CM, tiles_n = (OC + Lay::BN - 1) / Lay::BN;
    const GemmTiles<Lay> tl{tiles_m, tiles_n, tiles_m * tiles_n, (K + Lay::BK - 1) / Lay::BK, Lay::CLUSTER > 1 ? cluster_rank() : 0};
    if (threadIdx.x == 0) {
        for (int i = 0; i < Lay::STAGES; i++) mbar_init(&bar.full[i], 1), mbar_init(&bar.empty[i], Lay::READERS * Lay::CLUSTER + (sums.col_sums ? 2 : 0));
        mbar_init_fence();
    }
    if (Lay::CLUSTER > 1) cluster_sync();  // (the barriers are initialized, in every block of the cluster)
    else __syncthreads();                  // (the only block barrier)
    if (threadIdx.x / 128 == 2) {
        setmaxnreg<40, false>();
        if (threadIdx.x == 256) gemm_produce<Lay, TRANS_B>(ring, bar, tl, a_map, b_map);
        if (sums.col_sums && threadIdx.x >= 288 && threadIdx.x < 352) gemm_column_sums<Lay>(ring, bar, tl, sums.col_sums, N, K);
    } else {
        setmaxnreg<232, true>();
        const GemmOut<H> o{out, aux, bias, ring + Lay::STAGES * Lay::SLOT, &out_map, &aux_map, sums.row_stats, sums.V};
        gemm_consume<Lay, H, TRANS_B, EPI>(ring, bar, tl, o, N, OC);
    }
    if (Lay::CLUSTER > 1) cluster_sync();  // (no block exits while another may still give its slots back)
}

// A tensor map of a rows × cols matrix of 16-bit values (row-major) in boxes of 64 columns × box_rows
template <class H> inline CUtensorMap gemm_tensor_map(const H* base, int rows, int cols, uint32_t box_rows) {
    const uint64_t dims[3] = {(uint64_t)cols, (uint64_t)rows, 1}, strides[2] = {cols * sizeof(H), (uint64_t)rows * cols * sizeof(H)};
    const uint32_t box[3] = {64, box_rows, 1};
    return tensor_map_3d_16bit(base, dims, strides, box);
}
// One launch of matmul_wgmma_kernel: out (N × OC) from A (N × K) and W (see the kernel)
template <class H, bool TRANS_B, GemmEpi EPI, int L>
inline void gemm_launch(const Ctx& ctx, H* out, H* aux, const H* bias, GemmSums sums, const H* A, const H* W, int N, int OC, int K) {
    using Lay = GemmLayout<L>;
    const CUtensorMap a_map = gemm_tensor_map(A, N, K, Lay::BM),
                      b_map = TRANS_B ? gemm_tensor_map(W, K, OC, 64) : gemm_tensor_map(W, OC, K, Lay::BN / Lay::CLUSTER);
    CUtensorMap out_map{}, aux_map{};  // (layout 3's stores: boxes of 64 × 64)
    if (Lay::TMA_STORE) out_map = gemm_tensor_map(out, N, OC, 64);
    if (Lay::TMA_STORE && EPI == GemmEpi::BiasGelu) aux_map = gemm_tensor_map(aux, N, OC, 64);
    const long tiles = (long)ceil_div(N, Lay::BM * Lay::CLUSTER) * ceil_div(OC, Lay::BN);  // (with clusters: the clusters' tiles)
    const int asked = ctx.kernels.matmul_wgmma_blocks;
    SHARED_OPT_IN(matmul_wgmma_kernel<H, TRANS_B, EPI, L>);
    const size_t smem = Lay::shared_bytes();
    if constexpr (Lay::CLUSTER > 1) {  // (a cluster an SM pair, as many as fit at once)
        static const int fit = gpu_max_clusters(matmul_wgmma_kernel<H, TRANS_B, EPI, L>, Lay::CLUSTER, 384, smem);
        if (fit == 0) {  // (the same bits without clusters)
            static bool said = false;  // (once a kernel)
            if (!said && g_rank == 0) printf("matmul: our GEMM's clusters of %d do not fit on this GPU: layout %d runs for %d\n", Lay::CLUSTER, Lay::BASE, L);
            said = true;
            return gemm_launch<H, TRANS_B, EPI, Lay::BASE>(ctx, out, aux, bias, sums, A, W, N, OC, K);
        }
        const int clusters = (int)std::min<long>(tiles, asked > 0 ? std::max(1, asked / Lay::CLUSTER) : fit);
        launch_in_clusters(KERNEL_AND_NAME(matmul_wgmma_kernel<H, TRANS_B, EPI, L>), Lay::CLUSTER, clusters * Lay::CLUSTER, 384, smem, ctx.stream,
                           out, aux, bias, sums, N, OC, K, a_map, b_map, out_map, aux_map);
    } else {
        const int blocks = (int)std::min<long>(tiles, asked > 0 ? asked : gpu_sm_count());
        matmul_wgmma_kernel<H, TRANS_B, EPI, L><<<blocks, 384, smem, ctx.stream>>>(out, aux, bias, sums, N, OC, K, a_map, b_map, out_map, aux_map);
    }
    CUDA_LAUNCH_CHECK();
}
// --matmul-wgmma auto: the layout for a product's shape, chosen at its first call of at least
// matmul_tune_flops among the six by autotune_pick. They write the same bits: each output's sum
// runs over the same k-slices in the same order, whatever the tile. Smaller products take 1.
// run(layout) launches one. Printed once a shape.
template <class H, bool TRANS_B, GemmEpi EPI, class R>
inline int gemm_layout_auto(const Ctx& ctx, const R& run, const H* out, const H* aux, const GemmSums& sums, int N, int OC, int K) {
    const auto key = std::make_tuple((int)EPI, (int)TRANS_B, N, OC, K, sums.col_sums != nullptr || sums.row_stats != nullptr);
    auto it = ctx.tuned->gemm_layouts.find(key);
    if (it != ctx.tuned->gemm_layouts.end()) return it->second;
    int layout = 1;
    if (2.0 * N * OC * K >= ctx.kernels.matmul_tune_flops) {
        std::vector<BitsRegion> outs{{out, (size_t)N * OC * sizeof(H)}};  // (what each layout writes)
        if (EPI == GemmEpi::BiasGelu) outs.push_back({aux, (size_t)N * OC * sizeof(H)});
        if (sums.col_sums) outs.push_back({sums.col_sums, (size_t)ceil_div(N, 128) * K * sizeof(float)});
        if (sums.row_stats) outs.push_back({sums.row_stats, (size_t)N * classifier_parts(OC) * 2 * sizeof(float)});
        const AutotunePick t = autotune_pick(ctx, GEMM_LAYOUTS, [] {}, [&](int v) { run(v + 1); return true; }, outs);
        layout = t.best + 1;
        if (g_rank == 0) {
            std::string ms;
            for (float m : t.ms) {
                char one[24];
                snprintf(one, sizeof(one), "%s%.3f", ms.empty() ? "" : ", ", m);
                ms += one;
            }
            printf("matmul: our GEMM %dx%dx%d%s%s: layout %d (%s: 1-%d took %s ms; %d of %d gave layout 1's bits)\n", N, OC, K,
                   TRANS_B ? " (input gradient)" : sums.row_stats ? " (the LM head's, with the classifier's stats)" : "",
                   EPI == GemmEpi::BiasGelu ? " with GELU" : EPI == GemmEpi::DGelu ? " with dGELU" : "", layout,
                   ctx.kernels.matmul_wgmma ? "--matmul-wgmma auto" : "--classifier-stats epilogue, by timing", GEMM_LAYOUTS, ms.c_str(), t.same,
                   GEMM_LAYOUTS - 1);
        }
    }
    return ctx.tuned->gemm_layouts[key] = layout;
}
// The layout ctx asks for (--matmul-wgmma 1: one tile a block at a time; 2: ping-pong; 3: 1 with
// TMA stores; 4-6: 1-3 in clusters of 2; auto: by timing, gemm_layout_auto)
template <class H, bool TRANS_B, GemmEpi EPI>
inline void gemm_launch(const Ctx& ctx, H* out, H* aux, const H* bias, GemmSums sums, const H* A, const H* W, int N, int OC, int K) {
    auto run = [&](int layout) {
        switch (layout) {
            case 2: gemm_launch<H, TRANS_B, EPI, 2>(ctx, out, aux, bias, sums, A, W, N, OC, K); break;
            case 3: gemm_launch<H, TRANS_B, EPI, 3>(ctx, out, aux, bias, sums, A, W, N, OC, K); break;
            case 4: gemm_launch<H, TRANS_B, EPI, 4>(ctx, out, aux, bias, sums, A, W, N, OC, K); break;
            case 5: gemm_launch<H, TRANS_B, EPI, 5>(ctx, out, aux, bias, sums, A, W, N, OC, K); break;
            case 6: gemm_launch<H, TRANS_B, EPI, 6>(ctx, out, aux, bias, sums, A, W, N, OC, K); break;
            default: gemm_launch<H, TRANS_B, EPI, 1>(ctx, out, aux, bias, sums, A, W, N, OC, K);
        }
    };
    run(ctx.kernels.matmul_wgmma_auto ? gemm_layout_auto<H, TRANS_B, EPI>(ctx, run, out, aux, sums, N, OC, K) : ctx.kernels.matmul_wgmma);
}
// Whether ctx asks our GEMM for a product (gelu: one with a GELU in its epilogue)
inline bool gemm_wanted(const Ctx& ctx, bool gelu) { return ctx.kernels.matmul_wgmma && (gelu || !ctx.kernels.matmul_wgmma_gelu_only); }
// Rank 0 says once whether our GEMM runs, or why not (why: null where it runs), so that a run shows
// it: once for --matmul-wgmma, once for the LM head's product with the classifier's stats (head)
inline void gemm_say(const Ctx& ctx, const char* why, bool head) {
    static bool said[2] = {false, false};
    if (said[head] || g_rank != 0) return;
    said[head] = true;
    if (head && why) printf("matmul: --classifier-stats epilogue %s: cuBLASLt runs the LM head's product, the classifier makes its own stats\n", why);
    else if (head) printf("matmul: the LM head's product by our GEMM, with the classifier's stats in its epilogue (--classifier-stats epilogue)\n");
    else if (why) printf("matmul: --matmul-wgmma %s: cuBLASLt runs every product\n", why);
    else
        printf(ctx.kernels.matmul_wgmma_gelu_only ? "matmul: the products with a GELU in the epilogue by our GEMM (--matmul-wgmma-products gelu)\n"
                                                  : "matmul: the forward and input-gradient products by our GEMM (--matmul-wgmma)\n");
}
// Whether our GEMM runs here for these matrices: sm_90a, a 16-bit dtype, rows of 16-byte multiples
// (TMA's strides) and matrices that start 16-byte aligned (TMA's addresses; else cuBLASLt runs)
template <class floatX> inline bool gemm_runs(const Ctx& ctx, int C, int OC, int N, std::initializer_list<const void*> matrices, bool head = false) {
    const char* why = !is_half_type<floatX> ? "needs bf16 or fp16" : !gpu_has_wgmma() ? "needs a GPU of compute capability 9.0" : nullptr;
    gemm_say(ctx, why, head);
    for (const void* p : matrices) if (p && alignment_of(p) < 16) return false;
    return !why && C % 8 == 0 && OC % 8 == 0 && N > 0;
}
// out (and pre, with GELU) = inp·Wᵀ + bias through matmul_wgmma_kernel; false where it cannot run
// here (then nothing was launched).
template <class floatX>
inline bool matmul_wgmma_forward(const Ctx& ctx, floatX* out, floatX* pre, const floatX* inp, const floatX* W, const floatX* bias, int N, int C, int OC) {
    if (!gemm_runs<floatX>(ctx, C, OC, N, {out, pre, inp, W})) return false;
    if constexpr (is_half_type<floatX>) {
        if (pre) gemm_launch<floatX, false, GemmEpi::BiasGelu>(ctx, out, pre, bias, GemmSums{}, inp, W, N, OC, C);
        else gemm_launch<floatX, false, GemmEpi::Bias>(ctx, out, nullptr, bias, GemmSums{}, inp, W, N, OC, C);
    }
    return true;
}
// The LM head's logits = inp·Wᵀ (OC = Vp columns, V of them real) and each row's part stats for
// the classifier (fused_classifier.cuh: N × classifier_parts(OC) × 2 floats), by our GEMM's
// epilogue (gemm_row_stats); false where it cannot run here (then nothing was launched). The
// layout: --matmul-wgmma's, or where that is 0 the fastest by timing, as auto (the same bits).
template <class floatX>
inline bool matmul_wgmma_logits(const Ctx& ctx, floatX* logits, float* stats, const floatX* inp, const floatX* W, int N, int C, int OC, int V) {
    if (!gemm_runs<floatX>(ctx, C, OC, N, {logits, inp, W}, true)) return false;
    Ctx c = ctx;
    if (!c.kernels.matmul_wgmma) c.kernels.matmul_wgmma_auto = true;
    if constexpr (is_half_type<floatX>) gemm_launch<floatX, false, GemmEpi::Bias>(c, logits, nullptr, nullptr, GemmSums{nullptr, stats, V}, inp, W, N, OC, C);
    return true;
}
// dinp = dout·W, times GELU'(pre_in) where pre_in is given (the layer's input was GELU(pre_in)).
// dbias (or null) += dout's column sums, made from the tiles the kernel copies in anyway: the
// partial sums of each 128 rows, then column_sum_add over them in order.
template <class floatX>
inline bool matmul_wgmma_dinp(const Ctx& ctx, floatX* dinp, const floatX* pre_in, const floatX* dout, const floatX* W, int N, int C, int OC,
                              floatX* dbias = nullptr) {
    if (!gemm_runs<floatX>(ctx, C, OC, N, {dinp, pre_in, dout, W})) return false;
    if constexpr (is_half_type<floatX>) {
        static Buf<float> sums_buf;
        const int row_tiles = ceil_div(N, 128);
        const GemmSums sums{dbias ? gpu_scratch(sums_buf, ctx, (size_t)row_tiles * OC) : nullptr, nullptr, 0};
        if (pre_in) gemm_launch<floatX, true, GemmEpi::DGelu>(ctx, dinp, const_cast<floatX*>(pre_in), nullptr, sums, dout, W, N, C, OC);
        else gemm_launch<floatX, true, GemmEpi::Bias>(ctx, dinp, nullptr, nullptr, sums, dout, W, N, C, OC);
        if (dbias) column_sum_add(ctx, dbias, sums.col_sums, OC, row_tiles);
    }
    return true;
}
