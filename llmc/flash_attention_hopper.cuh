/*
flash_attention_hopper.cuh — flash attention with the Hopper tensor cores' warpgroup MMA (wgmma,
sm_90a): its tile copies and products, the forward and the backward as two passes (the
instructions' wrappers: hopper.cuh). flash_launch.cuh runs
these kernels on a GPU of compute capability 9.0. Not a header on its own: it follows
flash_attention.cuh and shares its pieces (A fragments, online softmax, dS, stores). The fused
backward, built on the same blocks, is in flash_fused_backward.cuh.

A warpgroup (4 warps) owns 64 rows. Each product is a few wgmma m64nNk16. A (Q, dO, P, dS) is in
registers (mma.sync's fragment layout) or shared memory. B is read from shared memory, in tiles
of 8×16-byte core matrices, or 128-byte swizzled (TMA's layout). One tile serves as K-major
B (K in S = Q·Kᵀ) and as MN-major B (V in O = P·V). Products run asynchronously, so every
kernel is software-pipelined: the softmax (or dS) of tile j runs while tile j − 1's products run.

The kernels (a _producer_kernel: with a producer warpgroup that copies the tiles in):
  flash_forward_wgmma_kernel          the forward (--flash-wgmma 1, or pass by pass under auto)
  flash_forward_wgmma_producer_kernel cp.async or TMA, a block an SM (--flash-forward-producer, -persistent)
  flash_backward_dq/dkv_wgmma_kernel  the backward as two passes: 7 products (--flash-backward split)

Tests: test/gpucheck_ops.cu (part wgmma: products bit for bit, kernels against the CPU op),
test/test_ptxas.sh (no spills, no wgmma serialized), dev/cuda/attention.cu (v7-v9, v11-v22, v28,
v29, v32-v36). More: docs/kernels.md ("The wgmma kernels").
*/
#pragma once

#include "hopper.cuh"

// Rows [row0, row0 + ROWS) × D of a strided H matrix into shared memory in the core-matrix
// layout above, by cp.async, zeros past row n, by THREADS threads (t: this one's index among
// them). Copy i (16 bytes) goes to bytes 16i..16i+15 (a warp's 512 contiguous bytes: no bank
// conflicts) from row (i/D)·8 + i%8, columns 8·((i%D)/8)..+7. Thread t copies i = t + k·THREADS:
// one column, and rows RSTEP apart, so a copy costs an add and a bounds check. FEW_REGS
// computes each copy's row and column from i instead (more instructions, fewer registers held:
// the fused backward, which ptxas otherwise spills).
template <int D, int THREADS, int ROWS = 64, bool FEW_REGS = false, class H>
__device__ inline void stage_tile_cm(H* dst, const H* src, size_t ld, int row0, int n, int t) {
    static_assert(THREADS % D == 0 && ROWS * D / 8 % THREADS == 0, "stage_tile_cm: whole rows of copies per thread");
    constexpr int RSTEP = THREADS / D * 8;
    #pragma unroll 1
    for (int k = 0; k < ROWS * D / 8 / THREADS; k++) {
        const int i = t + k * THREADS;
        const int r = row0 + (FEW_REGS ? (i / D) * 8 + i % 8 : (t / D) * 8 + t % 8 + k * RSTEP);
        const int c = ((FEW_REGS ? i : t) % D / 8) * 8;
        const bool in = r < n;
        cp_async16(dst + (size_t)i * 8, src + (size_t)(in ? r : 0) * ld + c, in ? 16 : 0);
    }
}
// The 128-byte swizzled layout (KernelOptions::flash_swizzle: the forward's K and V tiles). A
// tile of ROWS × D is D/64 panels of 64 columns, ROWS·128 bytes each. Row r of a panel is 128
// bytes at 128·r, and its 16-byte chunk c (columns 8c..8c+7) sits at 16·(c XOR r%8). So 8
// threads copy one whole 128-byte line of global memory, and a warp's 8-thread phases write 8
// different bank groups. wgmma reads it in swizzle mode 1: the tensor cores XOR address bits
// 4-6 with bits 7-9, so each panel must start at a multiple of 1024 bytes (align_1024).
template <int D, int THREADS, int ROWS = 64, class H>
__device__ inline void stage_tile_sw(H* dst, const H* src, size_t ld, int row0, int n, int t) {
    constexpr int CH = D / 8, RSTEP = THREADS / CH;  // 16-byte chunks a row; rows a copy step
    static_assert(THREADS % CH == 0 && ROWS % RSTEP == 0 && RSTEP % 8 == 0, "stage_tile_sw: whole rows, the same r%8 at each step");
    const int c = t % CH, r0 = t / CH;
    H* d = dst + (c / 8) * ROWS * 64 + r0 * 64 + ((c % 8) ^ (r0 % 8)) * 8;  // (r%8 is r0%8 at every step)
    #pragma unroll 1
    for (int k = 0; k < ROWS / RSTEP; k++) {
        const int r = row0 + r0 + k * RSTEP;
        const bool in = r < n;
        cp_async16(d + k * RSTEP * 64, src + (size_t)(in ? r : 0) * ld + c * 8, in ? 16 : 0);
    }
}
template <int D, int THREADS, int ROWS, bool SW, class H>  // a tile in the layout SW names
__device__ inline void stage_tile(H* dst, const H* src, size_t ld, int row0, int n, int t) {
    if constexpr (SW) stage_tile_sw<D, THREADS, ROWS>(dst, src, ld, row0, n, t);
    else stage_tile_cm<D, THREADS, ROWS>(dst, src, ld, row0, n, t);
}
// The two kinds of product in the wgmma kernels (each fenced, then issued by the whole
// warpgroup; the caller commits and waits: wgmma_complete). Each k-step's descriptor is the
// first one's plus the step in 16-byte units: it adds to the start address field, which never
// carries (the tiles lie below 256 KB). c (64 × N) = A·Mᵀ: A this warp's 16 rows as D/16 A
// fragments in registers (Q, dO), M an N-row tile (64 or 128) read as K-major B (K, V): S and dP.
template <int D, int N = 64, bool SW = false, class H> __device__ inline void wgmma_issue_amt(float (*c)[4], const uint32_t (*a)[4], const H* tile) {
    wgmma_fence();
    using Desc = TileDesc<D, N, SW>;
    const uint64_t b = Desc::k_major(tile);
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) wgmma_m64k16<H, N, false>(&c[0][0], a[kc], b + Desc::k_step(kc), kc > 0);
}
// The same with A 64 rows from row a_row0 of an A_ROWS-row tile in shared memory (K-major like
// M, both in the layout SW names): the producer forward's S = Q·Kᵀ with Q read by the tensor cores
// from its slot (no registers for Q).
template <int D, int N, int A_ROWS, bool SW, class H> __device__ inline void wgmma_issue_tile_amt(float (*c)[4], const H* a_tile, int a_row0, const H* tile) {
    wgmma_fence();
    using ADesc = TileDesc<D, A_ROWS, SW>;
    using Desc = TileDesc<D, N, SW>;
    const uint64_t a = ADesc::k_major(a_tile + (SW ? a_row0 * 64 : a_row0 * D)), b = Desc::k_major(tile);
    #pragma unroll
    for (int kc = 0; kc < D / 16; kc++) wgmma_m64k16_ss<H, N, false>(&c[0][0], a + ADesc::k_step(kc), b + Desc::k_step(kc), kc > 0);
}
// The same with A a 64-row tile and M a 64-row tile: the dK/dV pass's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
// (K and V would otherwise hold D/4 registers a thread each).
template <int D, bool SW = false, class H> __device__ inline void wgmma_issue_ss(float (*c)[4], const H* a_tile, const H* tile) {
    wgmma_issue_tile_amt<D, 64, 64, SW>(c, a_tile, 0, tile);
}
// acc (64 × D) += P·M: P this warp's 16 rows × K as K/16 A fragments (P, dS or their
// transposes: c_to_a_16xk), M a K-row tile (64 or 128) read as MN-major B (V, K, dO or Q).
template <int D, int K = 64, bool SW = false, class H> __device__ inline void wgmma_issue_pm(float (*acc)[4], const uint32_t (*pa)[4], const H* tile) {
    wgmma_hold<D / 2>(&acc[0][0]);
    wgmma_fence();  // (after the A fragments and acc were written)
    using Desc = TileDesc<D, K, SW>;
    const uint64_t b = Desc::mn_major(tile);
    #pragma unroll
    for (int kc = 0; kc < K / 16; kc++) wgmma_m64k16<H, D, true>(&acc[0][0], pa[kc], b + Desc::mn_step(kc), true);
}
// The same with A a 64 × 64 tile in shared memory (K-major, the core-matrix layout: store_c_rows):
// the fused backward's dV and dK at head size 128, where Pᵀ and dSᵀ as A fragments would spill.
template <int D, bool SW = false, class H> __device__ inline void wgmma_issue_sm(float (*acc)[4], const H* a_tile, const H* tile) {
    wgmma_hold<D / 2>(&acc[0][0]);
    wgmma_fence();
    using ADesc = TileDesc<64, 64, false>;
    using Desc = TileDesc<D, 64, SW>;
    const uint64_t a = ADesc::k_major(a_tile), b = Desc::mn_major(tile);
    #pragma unroll
    for (int kc = 0; kc < 4; kc++) wgmma_m64k16_ss<H, D, true>(&acc[0][0], a + ADesc::k_step(kc), b + Desc::mn_step(kc), true);
}
// a warp's 16 rows × K (64 or 128) in C fragments (fp32) as the A fragments of its K/16 k-chunks (H)
template <class H, int K = 64> __device__ inline void c_to_a_16xk(uint32_t (*a)[4], const float (*c)[4]) {
    #pragma unroll
    for (int kc = 0; kc < K / 16; kc++) c_to_a<H>(a[kc], c[2 * kc], c[2 * kc + 1]);
}
__device__ inline void wgmma_complete() { wgmma_commit(); wgmma_wait<0>(); }  // every product issued is in its D

// Ping-pong (FlashAttention-3): two warpgroups take turns to issue their products, so that one's
// softmax runs while the other's products keep the tensor cores busy. Warpgroup w waits for its
// turn at named barrier 1 + w, issues, and passes the turn at the other's barrier. Each phase
// has 256 threads: the 128 that wait and the other warpgroup's 128 that pass. Warpgroup 1 gives
// the first turn (first_turn), and warpgroup 0 takes one more at the end (last_turn), so that no
// phase is left half full. PingPong<false> does nothing: the schedule without turns.
template <bool ON> struct PingPong {
    int wg;  // 0 or 1
    __device__ void wait() const { if constexpr (ON) bar_sync(1 + wg, 256); }
    __device__ void pass() const { if constexpr (ON) bar_arrive(2 - wg, 256); }
    __device__ void first_turn() const { if constexpr (ON) if (wg == 1) bar_arrive(1, 256); }
    __device__ void last_turn() const { if constexpr (ON) if (wg == 0) bar_sync(1, 256); }
};

// The software pipeline of the wgmma kernels (FlashAttention-3's intra-warpgroup overlap),
// iteration j of a warpgroup whose tiles are first .. last − 1: first_products(j) issues the
// products of tile j (S; S and dP; Sᵀ and dPᵀ), second(j − 1) the accumulation that uses tile
// j − 1's result (O += P·V; dQ += dS·K; dV += Pᵀ·dO and dK += dSᵀ·Q). Both are issued, then
// mid(j) runs on the first products' results once they are in, while the second still runs on
// the tensor cores, and end(j) once it is in too. Iteration first has no second product,
// iteration last only the last one (then mid is not called). overlap = false waits for each
// group as soon as it is committed: the same operations in the same order, so the same bits
// (what the pipeline's check compares against). turns (PingPong) brackets the issuing, in
// every iteration, also one with nothing to issue.
// Each branch waits for every product it issued: where a wgmma's pipeline crosses a branch,
// ptxas serializes them all (C7518).
template <class First, class Mid, class Second, class End, class Turns = PingPong<false>>
__device__ inline void wgmma_pipeline_step(int j, int first, int last, bool overlap, const First& first_products, const Mid& mid,
                                           const Second& second, const End& end, const Turns& turns = {}) {
    turns.wait();
    if (first >= last || j < first || j > last) {
        turns.pass();
    } else if (j == first) {
        first_products(j);
        wgmma_commit();
        turns.pass();
        wgmma_wait<0>();
        mid(j);
        end(j);
    } else if (j < last) {
        first_products(j);
        wgmma_commit();
        if (!overlap) wgmma_wait<0>();
        second(j - 1);
        wgmma_commit();
        turns.pass();
        if (!overlap) wgmma_wait<0>();
        wgmma_wait<1>();  // the first products are in
        mid(j);
        wgmma_wait<0>();  // the second too, and it is done with its A registers
        end(j);
    } else {
        second(j - 1);
        wgmma_commit();
        turns.pass();
        wgmma_wait<0>();
        end(j);
    }
}

// A warp's 16 rows r0.. of a ROWS × D tile in shared memory (the core-matrix layout, or the
// swizzled one: SW) as the D/16 A fragments of its k-chunks, by ldmatrix (a_frag_smem's order)
template <int D, int ROWS, bool SW, class H> __device__ inline void load_a_tile(uint32_t (*a)[4], const H* tile, int r0) {
    const int lane = threadIdx.x % 32, r = r0 + lane % 8 + 8 * (lane / 8 % 2);
    for (int kc = 0; kc < D / 16; kc++) {
        const int c = 2 * kc + lane / 16;  // the 16-byte chunk: columns 8c..8c+7
        ldsm_x4<false>(a[kc], tile + (SW ? c / 8 * ROWS * 64 + r * 64 + ((c % 8) ^ (r % 8)) * 8 : r / 8 * 8 * D + c * 64 + r % 8 * 8));
    }
}
// A warp's 16 query rows of the wgmma forward: Q as A fragments, O, the softmax's running max m
// and sum l, and one pipeline step over key tile j of BN keys (64 or 128; Ks(j) for S, Vs(j−1)
// for O += P·V; SW: the tiles are swizzled). Q_ROWS > 0: Q is not in registers; S reads it from
// q_tile, a tile of Q_ROWS rows in shared memory (the warpgroup's 64 rows of it).
template <class H, int D, int BN = 64, bool SW = false, int Q_ROWS = 0> struct ForwardRows {
    uint32_t qf[Q_ROWS ? 1 : D / 16][4], pa[BN / 16][4];  // Q, and P of the tile before as A fragments
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, s[BN / 8][4], corr[2];
    float sl2;
    int row0;
    // Q loaded from rows row0_.. of q (row stride ld; rows past T are zeros)
    __device__ ForwardRows(const H* q, size_t ld, int row0_, int T) : sl2(rsqrtf((float)D) * LOG2E), row0(row0_) {
        for (int kc = 0; kc < D / 16; kc++) load_a_rows(qf[kc], q, ld, row0, T, kc * 16);
        zero_o();
    }
    // Q not loaded yet (the producer forward loads it from shared memory: load_a_tile)
    __device__ explicit ForwardRows(int row0_) : sl2(rsqrtf((float)D) * LOG2E), row0(row0_) { zero_o(); }
    __device__ void zero_o() {
        for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    }
    template <class KTile, class VTile, class Turns = PingPong<false>>
    __device__ void step(int j, int nlive, bool overlap, const KTile& Ks, const VTile& Vs, const Turns& turns = {}, const H* q_tile = nullptr) {
        wgmma_pipeline_step(
            j, 0, nlive, overlap,
            [&](int j) {  // S(j)
                if constexpr (Q_ROWS > 0) wgmma_issue_tile_amt<D, BN, Q_ROWS, SW>(s, q_tile, threadIdx.x / 128 * 64, Ks(j));
                else wgmma_issue_amt<D, BN, SW>(s, qf, Ks(j));
            },
            [&](int j) {  // P(j) into s, and corr(j) for what came before
                wgmma_hold<BN / 2>(&s[0][0]);
                online_softmax_p<true, BN / 8>(s, m, l, corr, sl2, row0, j * BN);
            },
            [&](int j) { wgmma_issue_pm<D, BN, SW>(o, pa, Vs(j)); },  // O += P(j)·V(j)
            [&](int j) {
                wgmma_hold<D / 2>(&o[0][0]);
                if (j == nlive) return;
                rescale_rows<D>(o, corr);
                c_to_a_16xk<H, BN>(pa, s);
            },
            turns);
    }
};

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
// while K(j+1) and V(j) are copied in, so two buffers each: 4·BN·D·2 bytes (64 KB at D = 128).
// A warpgroup skips the tiles whose keys all come after its 64 rows. BN = 128 (NWG = 2): key
// tiles of 128, as the producer forward's below (other bits; 128 KB at D = 128). SW: the tiles
// in the swizzled layout (the same values, so the same bits; 1 KB more to align them).
// At head size 64 (64-key tiles) at most 128 registers a thread, so two blocks of 256 share an SM
// (FORWARD_WGMMA_MIN_BLOCKS; test_ptxas.sh holds it).
template <int D, int NWG, int BN> constexpr int FORWARD_WGMMA_MIN_BLOCKS = D == 64 && BN == 64 ? 4 / NWG : 1;
template <class H, int D, int NWG, int BN = 64, bool SW = false>
__global__ void __launch_bounds__(128 * NWG, (FORWARD_WGMMA_MIN_BLOCKS<D, NWG, BN>))
    flash_forward_wgmma_kernel(H* out, float* lse, const H* qkv, int T, QKVLayout L, bool overlap) {
    DYNAMIC_SHARED(H, shared);
    H* tiles = SW ? align_1024(shared) : shared;
    auto Ks = [&](int j) { return tiles + (j % 2) * BN * D; };
    auto Vs = [&](int j) { return tiles + (2 + j % 2) * BN * D; };
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    const size_t C3 = L.row();
    const H *k = L.k_at(qkv, b, T, h), *v = L.v_at(qkv, b, T, h);
    const int wrow0 = (qt * NWG + wg) * 64;  // the warpgroup's rows
    ForwardRows<H, D, BN, SW> rows(L.q_at(qkv, b, T, h), C3, wrow0 + warp * 16, T);
    const int nkt = min(((qt + 1) * 64 * NWG + BN - 1) / BN, (T + BN - 1) / BN);  // the block's key tiles
    const int nlive = wrow0 >= T ? 0 : min(nkt, wrow0 / BN + 1);  // the warpgroup's: tiles 0 .. nlive − 1 (none past T)
    stage_tile<D, 128 * NWG, BN, SW>(Ks(0), k, C3, 0, T, threadIdx.x);
    for (int j = 0; j <= nkt; j++) {
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // K(j) and V(j−1) are in, and every warpgroup is done with K(j−1) and V(j−2)
        if (j + 1 < nkt) stage_tile<D, 128 * NWG, BN, SW>(Ks(j + 1), k, C3, (j + 1) * BN, T, threadIdx.x);
        if (j < nkt) stage_tile<D, 128 * NWG, BN, SW>(Vs(j), v, C3, j * BN, T, threadIdx.x);
        rows.step(j, nlive, overlap, Ks, Vs);
    }
    forward_store_rows<D>(out, lse, rows.o, rows.m, rows.l, rows.row0, b, h, T, L.C, L.NH, T);
}

// One tile of ROWS × D by TMA: D/64 swizzled panels of 64 columns, each copied as ROWS/BOX boxes
// of BOX rows, from column col0, row row0 of batch b in map; bar's phase expects the tile's bytes.
template <int D, int ROWS, int BOX = ROWS, class H> __device__ inline void tma_tile(H* dst, const CUtensorMap* map, int col0, int row0, int b, uint64_t* bar) {
    mbar_arrive_expect_tx(bar, ROWS * D * sizeof(H));
    for (int p = 0; p < D / 64; p++)
        for (int r = 0; r < ROWS; r += BOX) tma_load_3d(dst + p * ROWS * 64 + r * 64, map, col0 + p * 64, row0 + r, b, bar);
}

// The producer forward's work items: an item is query block qt (NWG·64 rows) of head h and batch
// b. Item i: h fastest, then b, then qt from the last (the longest rows first), the plain grid's order.
struct ForwardItem {
    int qt, h, b;
    __device__ ForwardItem(int i, int nqt, int NH, int B) : qt(nqt - 1 - i / (NH * B)), h(i % NH), b(i / NH % B) {}
};
// Block p's n-th item in a grid of G blocks: round n of G items, every other round backwards (a
// snake), so that the blocks' rows add up about alike. With a block an item (G = items) it is item p.
__device__ inline int forward_item_index(int n, int p, int G) { return n * G + (n % 2 ? G - 1 - p : p); }
// The rows of the producer forward's TMA boxes: a K or V tile's, unless Q's rows are no multiple of them
__host__ __device__ constexpr int forward_tma_box(int qrows, int bn) { return qrows % bn == 0 ? bn : 64; }
template <int BN> __device__ inline int forward_key_tiles(int qt, int qrows, int T) {  // an item's key tiles (causal)
    return min(((qt + 1) * qrows + BN - 1) / BN, (T + BN - 1) / BN);
}
// The producer forward's shared memory: a ring of STAGES K slots and STAGES V slots (BN × D each),
// then 2 Q slots (QROWS × D), each slot with a full and an empty mbarrier (ForwardBarriers). Tile
// g of the ring, counted over the block's items, sits in slot g % STAGES; that turn's parity is
// (g / STAGES) % 2. Item n's Q sits in slot n % 2.
template <int STAGES> struct ForwardBarriers { uint64_t full_k[STAGES], full_v[STAGES], empty_k[STAGES], empty_v[STAGES], full_q[2], empty_q[2]; };
template <class H, int D, int STAGES, int BN, int QROWS> struct ForwardRing {
    H* tiles;
    __device__ H* K(int g) const { return tiles + (g % STAGES) * BN * D; }
    __device__ H* V(int g) const { return tiles + (STAGES + g % STAGES) * BN * D; }
    __device__ H* Q(int n) const { return tiles + 2 * STAGES * BN * D + (n % 2) * QROWS * D; }
    __device__ static unsigned phase(int g) { return (unsigned)(g / STAGES) & 1; }
};
// One tile of ROWS × D (columns col.., rows row0.. of batch b; zeros past T) into dst, its arrival
// on full: by TMA (the producer's first thread; boxes of BOX rows) or by its 128 threads' cp.async
template <int D, int ROWS, int BOX, bool SW, bool TMA, class H>
__device__ inline void forward_copy_tile(H* dst, const H* qkv, const CUtensorMap& map, size_t C3, int T, int b, int col, int row0, uint64_t* full) {
    if constexpr (TMA) {
        tma_tile<D, ROWS, BOX>(dst, &map, col, row0, b, full);
    } else {
        stage_tile<D, 128, ROWS, SW>(dst, qkv + (size_t)b * T * C3 + col, C3, row0, T, threadIdx.x % 128);
        mbar_arrive_on_copies(full);
    }
}
// The producer warpgroup: for each of the block's items its Q, then its K and V tiles, each into
// its slot once the slot is free. By TMA only its first thread works, with boxes of BOX rows
// (forward_tma_box: BN, or 64 where Q's rows are not a multiple of BN).
template <int D, int STAGES, int BN, int QROWS, bool SW, bool TMA, class H>
__device__ inline void forward_produce(const ForwardRing<H, D, STAGES, BN, QROWS>& ring, ForwardBarriers<STAGES>& bar, const H* qkv,
                                       const CUtensorMap& map, int T, int B, const QKVLayout& L, int nqt) {
    constexpr int BOX = forward_tma_box(QROWS, BN);
    if (TMA && threadIdx.x % 128 != 0) return;
    const size_t C3 = L.row();
    int g = 0;  // the ring's tiles so far
    for (int n = 0, i; (i = forward_item_index(n, blockIdx.x, gridDim.x)) < nqt * L.NH * B; n++) {
        const ForwardItem it(i, nqt, L.NH, B);
        mbar_wait(&bar.empty_q[n % 2], ((n / 2) & 1) ^ 1);
        forward_copy_tile<D, QROWS, BOX, SW, TMA>(ring.Q(n), qkv, map, C3, T, it.b, it.h * D, it.qt * QROWS, &bar.full_q[n % 2]);
        for (int j = 0; j < forward_key_tiles<BN>(it.qt, QROWS, T); j++, g++) {
            mbar_wait(&bar.empty_k[g % STAGES], ring.phase(g) ^ 1);
            forward_copy_tile<D, BN, BOX, SW, TMA>(ring.K(g), qkv, map, C3, T, it.b, L.k(it.h), j * BN, &bar.full_k[g % STAGES]);
            mbar_wait(&bar.empty_v[g % STAGES], ring.phase(g) ^ 1);
            forward_copy_tile<D, BN, BOX, SW, TMA>(ring.V(g), qkv, map, C3, T, it.b, L.v(it.h), j * BN, &bar.full_v[g % STAGES]);
        }
    }
    if constexpr (!TMA) cp_async_wait_all();  // (its copies have landed before it ends)
}
// The computing warpgroups: for each item a warp's 16 rows (ForwardRows, Q from its slot), a
// pipeline step a key tile, then the rows' output. A computing warp waits for K(j)'s and
// V(j−1)'s full phases before iteration j, and its lane 0 arrives at their empty phases after.
// Every warp passes through each tile's barriers, also those past its last tile, so the producer
// never waits for ever. The turns (PINGPONG) go on from one item to the next. Q_SMEM: S reads Q
// from its slot (wgmma from shared memory), so the slot is free only after the item's last S.
template <int D, int STAGES, int BN, int QROWS, bool SW, bool PINGPONG, bool Q_SMEM, class H>
__device__ inline void forward_consume(const ForwardRing<H, D, STAGES, BN, QROWS>& ring, ForwardBarriers<STAGES>& bar, H* out, float* lse,
                                       int T, int B, const QKVLayout& L, int nqt, bool overlap) {
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const PingPong<PINGPONG> turns{wg};
    turns.first_turn();
    int g = 0;  // the ring's tiles so far
    for (int n = 0, i; (i = forward_item_index(n, blockIdx.x, gridDim.x)) < nqt * L.NH * B; n++) {
        const ForwardItem it(i, nqt, L.NH, B);
        const int nkt = forward_key_tiles<BN>(it.qt, QROWS, T), wrow0 = it.qt * QROWS + wg * 64;  // (the warpgroup's rows)
        const int nlive = wrow0 >= T ? 0 : min(nkt, wrow0 / BN + 1);  // the warpgroup's tiles: 0 .. nlive − 1 (none past T)
        ForwardRows<H, D, BN, SW, Q_SMEM ? QROWS : 0> rows(wrow0 + warp * 16);
        mbar_wait(&bar.full_q[n % 2], (n / 2) & 1);
        if constexpr (!Q_SMEM) {
            load_a_tile<D, QROWS, SW>(rows.qf, ring.Q(n), wg * 64 + warp * 16);
            if (lane == 0) mbar_arrive(&bar.empty_q[n % 2]);  // (this warp's Q is in its registers)
        }
        for (int j = 0; j <= nkt; j++) {
            if (j < nkt) mbar_wait(&bar.full_k[(g + j) % STAGES], ring.phase(g + j));
            if (j > 0) mbar_wait(&bar.full_v[(g + j - 1) % STAGES], ring.phase(g + j - 1));
            fence_proxy_async();  // (cp.async wrote them by the generic proxy; wgmma reads them through the async one)
            rows.step(j, nlive, overlap, [&](int j) { return ring.K(g + j); }, [&](int j) { return ring.V(g + j); }, turns, ring.Q(n));
            if (lane == 0) {  // this warp is done with K(j) and V(j−1)
                if (j < nkt) mbar_arrive(&bar.empty_k[(g + j) % STAGES]);
                if (j > 0) mbar_arrive(&bar.empty_v[(g + j - 1) % STAGES]);
            }
        }
        if (Q_SMEM && lane == 0) mbar_arrive(&bar.empty_q[n % 2]);  // (every S of the item is done)
        forward_store_rows<D>(out, lse, rows.o, rows.m, rows.l, rows.row0, it.b, it.h, T, L.C, L.NH, T);
        g += nkt;
    }
    turns.last_turn();
}

// The wgmma forward with a producer warpgroup (flash_forward_producer slots; v11 in
// dev/cuda/attention.cu): warpgroup NWG copies Q, K and V in, and warpgroups 0 .. NWG − 1
// compute, with no block barrier but the first. The producer gives back registers (setmaxnreg)
// and the computing warpgroups take them: 232 a thread for 2 (the producer keeps 40), 160 for 3
// (it keeps 32). With 3, 192 query rows share each K and V tile, as in FlashAttention-3 at head
// size 64. 160 registers hold key tiles of 64; they hold 128 only where S reads Q from its slot
// (Q_SMEM: wgmma from shared memory, as FlashAttention-3 does), by TMA. The slots and their mbarriers:
// ForwardRing. PINGPONG (NWG = 2): the two computing warpgroups take turns to issue their
// products (PingPong). BN = 64: the products and their order are the forward's above, so the
// same bits (gpucheck_ops). BN = 128: key tiles of 128 (half the softmax steps and rescales of
// O; not the same bits, and the first warpgroup computes its last tile's masked half too). SW:
// swizzled tiles. TMA (with SW): one thread of the producer copies each tile by TMA from kv_map
// (qkv as B × T × its row: tensor_map_3d_16bit), in place of 128 threads' cp.async.
// Block p runs items forward_item_index(n, p, G) for n = 0, 1, ...: a grid of a block an item runs
// each once, as the plain forward's grid does. A persistent grid (flash_forward_persistent: a
// block an SM) runs several a block. Its producer copies the next item's Q, K and V while the
// computing warpgroups finish this one, so the copies' pipeline does not drain between items.
template <class H, int D, int STAGES, bool PINGPONG, int BN, bool SW, bool TMA, int NWG = 2>
__global__ void __launch_bounds__(128 * (NWG + 1), 1) flash_forward_wgmma_producer_kernel(H* out, float* lse, const H* qkv, int T, int B, QKVLayout L,
                                                                                     bool overlap, const __grid_constant__ CUtensorMap kv_map) {
    static_assert(SW || !TMA, "TMA fills the swizzled layout");
    static_assert(NWG == 2 || (NWG == 3 && !PINGPONG), "2 computing warpgroups, or 3 without ping-pong");
    constexpr int PRODUCER_REGS = NWG == 2 ? 40 : 32, COMPUTE_REGS = NWG == 2 ? 232 : 160;  // (NWG·128·COMPUTE + 128·PRODUCER ≤ 64K)
    constexpr int QROWS = 64 * NWG;
    constexpr bool Q_SMEM = NWG == 3 && BN == 128;  // (160 registers hold S, P and O of 128 keys, not Q too)
    DYNAMIC_SHARED(H, shared);
    __shared__ ForwardBarriers<STAGES> bar;
    const ForwardRing<H, D, STAGES, BN, QROWS> ring{SW ? align_1024(shared) : shared};
    const int nqt = (T + QROWS - 1) / QROWS;
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; i++) {
            mbar_init(&bar.full_k[i], TMA ? 1 : 128), mbar_init(&bar.full_v[i], TMA ? 1 : 128);
            mbar_init(&bar.empty_k[i], 4 * NWG), mbar_init(&bar.empty_v[i], 4 * NWG);
        }
        for (int i = 0; i < 2; i++) mbar_init(&bar.full_q[i], TMA ? 1 : 128), mbar_init(&bar.empty_q[i], 4 * NWG);
        mbar_init_fence();
    }
    __syncthreads();  // (the barriers are initialized; the only block barrier)
    if (threadIdx.x / 128 == NWG) {
        setmaxnreg<PRODUCER_REGS, false>();
        forward_produce<D, STAGES, BN, QROWS, SW, TMA>(ring, bar, qkv, kv_map, T, B, L, nqt);
    } else {
        setmaxnreg<COMPUTE_REGS, true>();
        forward_consume<D, STAGES, BN, QROWS, SW, PINGPONG, Q_SMEM>(ring, bar, out, lse, T, B, L, nqt, overlap);
    }
}

// The two backward passes with wgmma (as the forward: NWG warpgroups a block, each 64 rows, the
// A operands in registers, B tiles of 64 rows in the core-matrix layout).
// dQ pass (first, computing D as the mma.sync pass does: row_dots): a warpgroup's 64 queries
// over key tiles j of 64: S = Q·K(j)ᵀ and dP = dO·V(j)ᵀ (K and V as K-major B), dS = P∘(dP − D),
// dQ += dS·K(j) (K as MN-major B, the same tile). Pipelined as the forward: iteration j issues
// S(j) and dP(j), then dQ += dS(j−1)·K(j−1), and computes dS(j) while that product runs.
// Shared memory: K(j−1), K(j) in use and K(j+1) copied in, V(j) in use and V(j+1) copied in:
// 5·64·D·2 bytes (80 KB at D = 128: opted in).
template <class H, int D, int NWG>
__global__ void __launch_bounds__(128 * NWG) flash_backward_dq_wgmma_kernel(H* dqkv, float* Dv, const H* dout, const H* qkv,
                                                                            const H* out, const float* lse, int T, QKVLayout L,
                                                                            bool overlap) {
    DYNAMIC_SHARED(H, tiles);
    auto Ks = [&](int j) { return tiles + (j % 3) * 64 * D; };
    auto Vs = [&](int j) { return tiles + (3 + j % 2) * 64 * D; };
    const int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y;  // the longest rows first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    const int C = L.C;
    const size_t C3 = L.row();
    const H* q = L.q_at(qkv, b, T, h);
    const H *k = L.k_at(qkv, b, T, h), *v = L.v_at(qkv, b, T, h);
    const H *dO = L.out_at(dout, b, T, h), *O = L.out_at(out, b, T, h);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int wrow0 = (qt * NWG + wg) * 64, row0 = wrow0 + warp * 16;
    float lse2[2], Dr[2];
    row_lse2(lse2, L.stats_at(lse, b, T, h), row0, T);
    uint32_t qf[D / 16][4], of[D / 16][4], dsa[4][4];  // Q, dO, and dS of the tile before as A fragments
    for (int kc = 0; kc < D / 16; kc++) {
        load_a_rows(qf[kc], q, C3, row0, T, kc * 16);
        load_a_rows(of[kc], dO, C, row0, T, kc * 16);
    }
    row_dots<D>(Dr, of, O, C, row0, T, L.stats_at(Dv, b, T, h));  // D, as the mma.sync pass
    float dq[D / 8][4];
    for (int dt = 0; dt < D / 8; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
    const int nkt = min((qt + 1) * NWG, (T + 63) / 64);  // causal: no key after the block's last query
    const int nlive = wrow0 >= T ? 0 : min(nkt, wrow0 / 64 + 1);  // the warpgroup's key tiles: 0 .. nlive − 1 (none past T)
    float s[8][4], dp[8][4];
    stage_tile_cm<D, 128 * NWG>(Ks(0), k, C3, 0, T, threadIdx.x);
    stage_tile_cm<D, 128 * NWG>(Vs(0), v, C3, 0, T, threadIdx.x);
    for (int j = 0; j <= nkt; j++) {
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads();  // K(j) and V(j) are in, and every warpgroup is done with K(j−2) and V(j−1)
        if (j + 1 < nkt) {
            stage_tile_cm<D, 128 * NWG>(Ks(j + 1), k, C3, (j + 1) * 64, T, threadIdx.x);
            stage_tile_cm<D, 128 * NWG>(Vs(j + 1), v, C3, (j + 1) * 64, T, threadIdx.x);
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
                if (j < nlive) c_to_a_16xk<H>(dsa, dp);
            });
    }
    store_acc_rows<D>(L.q_at(dqkv, b, T, h), C3, dq, row0, T, rsqrtf((float)D));
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
                                                                             const float* lse, const float* Dv, int T, QKVLayout L,
                                                                             bool overlap) {
    DYNAMIC_SHARED(H, tiles);
    __shared__ float lse2[2][64], Ds[2][64];
    const int kb = blockIdx.z, kh = blockIdx.x, b = blockIdx.y;  // the first keys (most queries) first
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    auto KVs = [&](int w) { return tiles + 2 * w * 64 * D; };  // warpgroup w's K tile, its V tile after it
    const H *Ks = KVs(wg), *Vs = Ks + 64 * D;                 // this warpgroup's keys
    auto Qs = [&](int j) { return tiles + (2 * NWG + j % 3) * 64 * D; };
    auto dOs = [&](int j) { return tiles + (2 * NWG + 3 + j % 3) * 64 * D; };
    const int C = L.C, G = L.group();
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T * C3;  // batch b's rows
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int k0 = kb * 64 * NWG, key0 = k0 + wg * 64 + warp * 16;  // the block's first key, and this warp's
    float dk[D / 8][4], dv[D / 8][4], st[8][4], dpt[8][4];  // (Sᵀ, dPᵀ: 64 keys × 64 queries)
    uint32_t pa[4][4], dsa[4][4];                           // Pᵀ and dSᵀ of the tile before as A fragments
    for (int dt = 0; dt < D / 8; dt++)
        for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.0f;
    for (int w = 0; w < NWG; w++) {
        stage_tile_cm<D, 128 * NWG>(KVs(w), qkv_b + L.k(kh * G), C3, k0 + 64 * w, T, threadIdx.x);
        stage_tile_cm<D, 128 * NWG>(KVs(w) + 64 * D, qkv_b + L.v(kh * G), C3, k0 + 64 * w, T, threadIdx.x);
    }
    const int nqt = (T - k0 + 63) / 64;  // the block's query tiles; the warpgroup's from tile wg (before: all queries before its keys)
    for (int h = kh * G; h < kh * G + G; h++) {  // the query heads of key/value head kh's group, dK and dV summing over them
        const H* q = qkv_b + h * D;
        const H* dO = L.out_at(dout, b, T, h);
        const float* lse_bh = L.stats_at(lse, b, T, h);
        const float* D_bh = L.stats_at(Dv, b, T, h);
        auto stage = [&](int j) {  // the query tile from k0 + 64·j (queries before the block's keys see none of them)
            const int q0 = k0 + 64 * j;
            stage_tile_cm<D, 128 * NWG>(Qs(j), q, C3, q0, T, threadIdx.x);
            stage_tile_cm<D, 128 * NWG>(dOs(j), dO, C, q0, T, threadIdx.x);
            stage_query_stats<64>(lse2[j % 2], Ds[j % 2], lse_bh, D_bh, q0, T);
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
                    wgmma_issue_ss<D>(st, Ks, Qs(j));
                    wgmma_issue_ss<D>(dpt, Vs, dOs(j));
                },
                [&](int j) {  // Pᵀ(j) into st, dSᵀ(j) into dpt
                    wgmma_hold<32>(&st[0][0]);
                    wgmma_hold<32>(&dpt[0][0]);
                    const int q0 = k0 + 64 * j;
                    if (q0 < key0 + 15) mask_future<8, true>(st, key0, q0);  // the tiles that reach the diagonal
                    ds_cols<8, D == 64>(st, dpt, lse2[j % 2], Ds[j % 2], sl2);  // (queries past T: lse2 = ∞, p = 0)
                },
                [&](int j) {
                    wgmma_issue_pm<D>(dv, pa, dOs(j));   // dV += Pᵀ(j)·dO(j)
                    wgmma_issue_pm<D>(dk, dsa, Qs(j));   // dK += dSᵀ(j)·Q(j)
                },
                [&](int j) {
                    wgmma_hold<D / 2>(&dv[0][0]);
                    wgmma_hold<D / 2>(&dk[0][0]);
                    if (j == nqt) return;
                    c_to_a_16xk<H>(pa, st);
                    c_to_a_16xk<H>(dsa, dpt);
                });
        }
    }
    H* dk_out = L.k_at(dqkv, b, T, kh * G);
    store_acc_rows<D>(dk_out, C3, dk, key0, T, rsqrtf((float)D));
    store_acc_rows<D>(dk_out + L.kv(), C3, dv, key0, T, 1.0f);
}
