/*
flash_fused_backward.cuh — the attention backward as one wgmma pass (sm_90a): FlashAttention's
five products (S, dP, dV, dK, dQ), where the two passes of flash_attention_hopper.cuh make seven.
Not a header on its own: it follows flash_attention_hopper.cuh and uses its building blocks.

A block owns 128 keys of a key/value head (two warpgroups of 64) and runs over the query tiles
from its diagonal on. dK and dV stay in registers. dQ goes into an fp32 sum in global memory. Each
element has one owner thread at a time, so the sum is the same on every run:

    dQ = Σ over splits s of  Σ over the key blocks kb of s (in order) of  dS_kb · K_kb

Chained (--flash-backward chain): a block per key block, and one sum that they add to in turn.

The kernels:
  flash_backward_fused_wgmma_kernel           head size 64 (the default) and 128 (fused128)
  flash_backward_fused_wgmma_producer_kernel  with a producer warpgroup (flash_backward_producer)
  flash_dq_sum_kernel                         the splits' partial sums, added in split order
  flash_row_dots_kernel                       D = rowsum(dO∘O), as the two passes compute it

Tests: test/gpucheck_ops.cu (parts wgmma and chain: against the CPU op, dK and dV bit-identical
to the two passes', two runs bit-identical), test/test_ptxas.sh, dev/cuda/attention.cu (fused,
v23-v27, v30, v31). More: docs/kernels.md ("The fused backward").
*/
#pragma once

// ---- The fused backward. The two passes each compute S and dP. A block owns 128 keys of
// key/value head kh (two warpgroups of 64, as the dK/dV pass) and runs over the query tiles j of
// 64 as that pass does. In addition, both warpgroups store dSᵀ(j) into shared memory as dS(j) (64
// queries × 128 keys, the core-matrix layout: a K-major A operand), and in the next iteration,
// beside dV and dK, warpgroup w computes columns [w·D/2, (w+1)·D/2) of dQ(j) = dS(j)·K (the
// block's two K tiles as MN-major B). dQ(j) then goes into an fp32 partial sum in global memory
// (the sum in the header).
// Deterministic without atomics between threads: each element of a partial sum has one owner
// thread (split s runs in one block, its key blocks in order), which stores it at its first key
// block and adds to it (red.global.add) at the next ones, in program order. flash_dq_sum_kernel
// then adds the splits' partial sums in split order and writes dQ. Splits exist to fill the GPU's
// last wave (FusedGrid); key block kb belongs to split fused_split_of(kb, S), a snake order that
// gives each split the same work. Shared memory: the dK/dV pass's 10 tiles and two dS
// tiles, 112 KB at head size 64; at 128, also each warpgroup's Pᵀ and dSᵀ, 224 KB.
__host__ __device__ inline int fused_split_of(int kb, int S) {
    const int round = kb / S, i = kb % S;
    return round % 2 == 0 ? i : S - 1 - i;
}
// p[0] += a, p[1] += b, in the memory system (red: no value returned; sm_90's vector form)
__device__ inline void red_add_f32x2(float* p, float a, float b) {
#ifdef LLMC_SIMT
    simt::check_vector_global(p, 8, "red.global.add.v2.f32");
    p[0] += a, p[1] += b;  // (one thread owns each element: the emulator needs no atomic)
#elif defined(LLMC_WGMMA)
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
// (p[0] + a, p[1] + b) as red_add_f32x2 would add them (rounded to nearest, subnormals flushed, as
// red's f32 add does), read by the thread whose red_add_f32x2 calls made p: a relaxed load at the
// GPU's scope, after them in program order, sees them.
__device__ inline float2 red_sum_f32x2(const float* p, float a, float b) {
#ifdef LLMC_SIMT
    simt::check_vector_global(p, 8, "ld.relaxed.gpu.global.v2.f32");
    return make_float2(p[0] + a, p[1] + b);
#elif defined(LLMC_WGMMA)
    float x, y;
    asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(p) : "memory");
    asm("add.rn.ftz.f32 %0, %0, %1;\n" : "+f"(x) : "f"(a));
    asm("add.rn.ftz.f32 %0, %0, %1;\n" : "+f"(y) : "f"(b));
    return make_float2(x, y);
#else
    __trap();
    return make_float2(0.0f, 0.0f);
#endif
}
// A warp's 16 rows × 64 columns in C fragments (c[nt], fp32) as H into shared memory, one
// stmatrix.x4 for each pair of n-tiles: matrix i of pair p is rows 8(i % 2).. of n-tile 2p + i / 2.
// at(p, m) is the first element of the 8 rows that matrix m of pair p goes to (lane 8m + r gives
// row r): the layout, transposed or not, is the caller's.
template <bool TRANS, class H, class At> __device__ inline void store_c_rows(const float (*c)[4], const At& at) {
    const int m = threadIdx.x % 32 / 8, row = threadIdx.x % 8;  // the matrix and row this lane addresses
    #pragma unroll
    for (int p = 0; p < 4; p++) {
        uint32_t r[4];
        for (int i = 0; i < 4; i++) r[i] = pack2<H>(c[2 * p + i / 2][2 * (i % 2)], c[2 * p + i / 2][2 * (i % 2) + 1]);
        stsm_x4<TRANS>(r, at(p, m) + row * 8);
    }
}
// Where the fused backward's tiles lie in shared memory: the block's two K tiles (warpgroup w's
// K at K(w), its V after it), and query tile j's Q, dO and row stats in slot (n + j) % SLOTS of
// their rings (n: the slot of tile 0), then dS(j) in a ring of 2.
// At head size 128, warpgroup w's Pᵀ and dSᵀ of the tile before follow (PT(w), dST(w): 64 × 64).
template <class H, int D, int SLOTS> struct FusedTiles {
    H *kv, *q;  // K(0), V(0), K(1), V(1); the Q ring, the dO ring, the two dS tiles, (Pᵀ, dSᵀ) × 2
    float (*lse2)[64], (*Ds)[64];
    int n;
    __device__ const H* K(int w) const { return kv + 2 * w * 64 * D; }
    __device__ int slot(int j) const { return (n + j) % SLOTS; }
    __device__ H* Q(int j) const { return q + slot(j) * 64 * D; }
    __device__ H* dO(int j) const { return q + (SLOTS + slot(j)) * 64 * D; }
    __device__ H* dS(int j) const { return q + 2 * SLOTS * 64 * D + (j % 2) * 64 * 128; }
    __device__ H* PT(int w) const { return q + 2 * SLOTS * 64 * D + 2 * 64 * 128 + 2 * w * 64 * 64; }
    __device__ H* dST(int w) const { return PT(w) + 64 * 64; }
};
// The fused backward's shared memory in elements: kv_tiles K and V tiles (4: one key block; 8:
// two), the Q and dO rings, two dS tiles, and at head size 128 the Pᵀ and dSᵀ tiles
__host__ __device__ constexpr size_t fused_tiles_elems(int D, int kv_tiles, int slots) {
    return (size_t)(kv_tiles + 2 * slots) * 64 * D + 2 * 64 * 128 + (D > 64 ? 4 * 64 * 64 : 0);
}
// Where a warpgroup's dQ goes: its split's fp32 partial sum (part, rows C apart), added over the
// key blocks in order. With one split (finish), a query tile's last key block (the diagonal one)
// adds its share to that sum and writes sum · scale into dqkv (out, rows C3 apart) itself: the
// bits of flash_dq_sum_kernel, without its pass. Each element has one owner thread throughout.
// Chained (chain, v31): key block kb adds to the one sum of all key blocks, in its turn (below).
template <class H> struct DqSink {
    float* part;
    H* out;
    int C;
    size_t C3;
    float scale;
    bool first_kb, finish;  // first_kb: this split's first key block, whose sum starts from zero
    unsigned* chain;        // chained: this warpgroup's count of each query tile (2 apart), else nullptr
    int kb;                 // chained: this key block
};
// The chained sum (FusedGrid::chain, --flash-backward chain): a block per key block, and one fp32
// sum of dQ, B·T·C, not one a split. Query tile t gets its shares from key blocks ⌊t/2⌋, ⌊t/2⌋ − 1,
// ..., 0 in that order: the order in which they reach it, since key block kb starts at tile 2kb.
// A count per tile and warpgroup says how many have added. Key block kb waits until the count of
// tile t is ⌊t/2⌋ − kb, adds, and counts itself when it reaches tile t + 1 (a fence, then a
// release), so that its adds are done by then. Key block ⌊t/2⌋ stores; key block 0 finishes
// (sum · scale into dqkv) and sets the count back to 0 for the next launch. A block waits only
// for blocks of the same head that took their tickets before it (fused_block_index): they run.
__device__ inline unsigned ld_acquire_u32(const unsigned* p) {
#ifdef LLMC_SIMT
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#elif defined(__CUDA_ARCH__)
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    return *p;
#endif
}
// Key block kb counts itself in tile t (counts: its warpgroup wg's; the threads, after their adds)
__device__ __noinline__ void chain_count(unsigned* counts, int kb, int t, int wg) {
    __threadfence();  // (each thread's adds to tile t are done)
    bar_sync(2 + wg, 128);
    if (threadIdx.x % 128 == 0) {
        if (kb == 0) counts[2 * t] = 0;  // (the last: ready for the next launch)
        else atomicAdd(counts + 2 * t, 1u);
    }
}
// At tile t: count key block kb in tile t − 1, if it went there, then wait for its turn at t
__device__ __forceinline__ void chain_turn(unsigned* counts, int kb, int t, int wg) {
    if (t - 1 >= 2 * kb) chain_count(counts, kb, t - 1, wg);
#ifdef LLMC_SIMT
    if (t / 2 == kb && kb > 0) simt::late();  // (a test: the next key block must wait for this one's store)
#endif
    if (t / 2 == kb) return;  // (the first to add to tile t)
    if (threadIdx.x % 128 == 0) {
        const unsigned turn = (unsigned)(t / 2 - kb);
#ifdef LLMC_SIMT  // (the blocks before it run on other host threads: 2 minutes without its turn is a hang)
        const auto t0 = std::chrono::steady_clock::now();
        for (long spins = 1; ld_acquire_u32(counts + 2 * t) != turn; spins++)
            if (spins % (1 << 20) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120))
                simt::die("the chained dQ: key block %d waits for its turn at query tile %d forever", kb, t);
#else  // (a GPU: 2^35 clocks, 17-20 s, is a hang: end the kernel, so the run stops with a CUDA error)
        for (const long long t0 = clock64(); ld_acquire_u32(counts + 2 * t) != turn;)
            if (clock64() - t0 > (1LL << 35)) __trap();
#endif
    }
    bar_sync(2 + wg, 128);
}
// The same as a call. ptxas spills the fused kernel at head size 64 with chain_turn inlined, and
// at head size 128 with it called.
__device__ __noinline__ void chain_turn_call(unsigned* counts, int kb, int t, int wg) { chain_turn(counts, kb, t, wg); }
// A warpgroup's 64 keys of the fused backward (keys key0.. of this warp): dK and dV, and one
// pipeline step over query tile j. Iteration j issues Sᵀ(j) and dPᵀ(j), then dV, dK and dQ of
// tile j − 1, adds dQ(j − 1) to dq_to (DqSink: this warpgroup's columns), and stores
// dSᵀ(j) as dS(j) for the next iteration's dQ. dS(j − 1) must be in from both warpgroups.
// At head size 128 (A_SMEM) dK, dV, Sᵀ and dPᵀ fill 192 registers a thread. There, Pᵀ(j) and
// dSᵀ(j) wait for the next iteration as tiles in shared memory, not as A fragments. dQ(j − 1)
// runs at the end of iteration j, after Pᵀ(j) and dSᵀ(j) are stored: its 64 columns in the
// registers of Sᵀ, which then hold nothing.
// SW: the K, V, Q and dO tiles are swizzled (dS is not). dQ's B is K's columns from wg·D/2:
// swizzled, that start is wg·64 bytes into the rows (the tensor cores swizzle the sum).
template <class H, int D, bool SW = false, bool CHAIN = false> struct FusedBackwardKeys {
    static constexpr int DN = D / 2;  // the dQ columns of each warpgroup
    static constexpr bool A_SMEM = D > 64;
    float dk[D / 8][4], dv[D / 8][4], st[8][4], dpt[8][4], dq[A_SMEM ? 1 : 4][4];  // (at 128, dQ in st)
    uint32_t pa[A_SMEM ? 1 : 4][4], dsa[A_SMEM ? 1 : 4][4];  // Pᵀ and dSᵀ of the tile before as A fragments
    __device__ FusedBackwardKeys() {
        for (int dt = 0; dt < D / 8; dt++)
            for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.0f;
    }
    // acc = dQ(j) = dS(j)·K, this warpgroup's DN columns (DN / 2 registers a thread)
    template <class Tiles> __device__ void issue_dq(float* acc, const Tiles& tl, int j, int wg) {
        const int col0 = wg * DN;
        #pragma unroll
        for (int kc = 0; kc < 8; kc++) {
            const H* k = tl.K(kc / 4) + (SW ? (kc % 4) * 16 * 64 + col0 / 64 * 64 * 64 + col0 % 64 : (kc % 4) * 16 * D + col0 * 8);
            const uint64_t b = SW ? wgmma_desc(k, 64 * 128, 1024, 1) : wgmma_desc(k, 16 * D, 128);
            wgmma_m64k16_ss<H, DN, true>(acc, wgmma_desc(tl.dS(j) + kc * 128, 128, 2048), b, kc > 0);
        }
    }
    // dQ of the tile from row0 (acc: the warpgroup's DN columns) into the partial sum, or (last:
    // the tile's last key block) that sum plus it, scaled, into dqkv
    __device__ void add_dq(float (*acc)[4], int row0, const DqSink<H>& to, int T, bool last) {
        wgmma_hold<DN / 2>(&acc[0][0]);
        const bool first = CHAIN ? row0 / 128 == to.kb : to.first_kb;  // (chained: tile row0/64's first key block is ⌊tile/2⌋)
        if constexpr (CHAIN) {
            if constexpr (A_SMEM) chain_turn(to.chain, to.kb, row0 / 64, threadIdx.x / 128);
            else chain_turn_call(to.chain, to.kb, row0 / 64, threadIdx.x / 128);
        }
        const int warp = threadIdx.x / 32 % 4, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        for (int r = 0; r < 2; r++) {
            const int row = row0 + warp * 16 + g + 8 * r;
            if (row >= T) continue;
            float* p = to.part + (size_t)row * to.C + 2 * t;
            H* o = to.out + (size_t)row * to.C3 + 2 * t;
            for (int nt = 0; nt < DN / 8; nt++) {
                const float a = acc[nt][2 * r], b = acc[nt][2 * r + 1];
                if (last) {
                    const float2 sum = first ? make_float2(a, b) : red_sum_f32x2(p + nt * 8, a, b);
                    store_pair(o + nt * 8, sum.x * to.scale, sum.y * to.scale);
                } else if (first) {
                    *reinterpret_cast<float2*>(p + nt * 8) = make_float2(a, b);
                } else {
                    red_add_f32x2(p + nt * 8, a, b);
                }
            }
        }
    }
    template <class Tiles>
    __device__ void step(int j, int nqt, bool overlap, const Tiles& tl, int wg, int k0, int key0, float sl2, const DqSink<H>& dq_to, int T) {
        const int warp = threadIdx.x / 32 % 4;
        const bool last = dq_to.finish && (CHAIN || j - 1 < 2);  // query tile j − 1's last key block is this one
        const H *Ks = tl.K(wg), *Vs = Ks + 64 * D;
        wgmma_pipeline_step(
            j, 0, nqt, overlap,
            [&](int j) {  // Sᵀ(j), dPᵀ(j) (the second warpgroup's at j = 0: all masked, so zeros)
                wgmma_issue_ss<D, SW>(st, Ks, tl.Q(j));
                wgmma_issue_ss<D, SW>(dpt, Vs, tl.dO(j));
            },
            [&](int j) {  // Pᵀ(j) into st, dSᵀ(j) into dpt
                wgmma_hold<32>(&st[0][0]);
                wgmma_hold<32>(&dpt[0][0]);
                const int q0 = k0 + 64 * j;
                if (q0 < key0 + 15) mask_future<8, true>(st, key0, q0);
                ds_cols<8, D == 64>(st, dpt, tl.lse2[tl.slot(j)], tl.Ds[tl.slot(j)], sl2);  // (exp2f at 128: the two passes' bits)
            },
            [&](int j) {
                if constexpr (A_SMEM) {
                    wgmma_issue_sm<D, SW>(dv, tl.PT(wg), tl.dO(j));   // dV += Pᵀ(j)·dO(j)
                    wgmma_issue_sm<D, SW>(dk, tl.dST(wg), tl.Q(j));   // dK += dSᵀ(j)·Q(j)
                } else {
                    wgmma_issue_pm<D, 64, SW>(dv, pa, tl.dO(j));
                    wgmma_issue_pm<D, 64, SW>(dk, dsa, tl.Q(j));
                    issue_dq(&dq[0][0], tl, j, wg);
                }
            },
            [&](int j) {
                wgmma_hold<D / 2>(&dv[0][0]);
                wgmma_hold<D / 2>(&dk[0][0]);
                if (!A_SMEM && j > 0) add_dq(dq, k0 + 64 * (j - 1), dq_to, T, last);
                if (j < nqt) {
                    if constexpr (A_SMEM) {  // Pᵀ(j), dSᵀ(j): this warp's 16 key rows of the K-major tiles
                        auto rows = [&](H* tile) { return [=](int p, int m) { return tile + (2 * warp + m % 2) * 512 + (2 * p + m / 2) * 64; }; };
                        store_c_rows<false, H>(st, rows(tl.PT(wg)));
                        store_c_rows<false, H>(dpt, rows(tl.dST(wg)));
                    } else {
                        c_to_a_16xk<H>(pa, st);
                        c_to_a_16xk<H>(dsa, dpt);
                    }
                    // dSᵀ(j) stored transposed as dS(j): the C fragment of queries 8nt.. and keys
                    // 8h.. of this warp's 16 (matrix 2(nt % 2) + h of an x4) is one core matrix
                    store_c_rows<true, H>(dpt, [&](int p, int m) { return tl.dS(j) + (2 * p + m / 2) * 1024 + (wg * 8 + warp * 2 + m % 2) * 64; });
                }
                if (A_SMEM && j > 0) {  // dQ(j − 1) now, in st: Sᵀ holds nothing after its store above
                    wgmma_fence();
                    issue_dq(&st[0][0], tl, j - 1, wg);
                    wgmma_complete();
                    add_dq(st, k0 + 64 * (j - 1), dq_to, T, last);
                }
            });
    }
};
// Warpgroup wg's dQ columns of query head h, batch b: in part_b (the split's sum for batch b) and in dqkv
template <class H, int D>
__device__ inline DqSink<H> dq_sink(H* dqkv, float* part_b, int b, int h, int wg, int T, const QKVLayout& L, bool first_kb, bool finish,
                                    float scale, unsigned* chain = nullptr, int kb = 0) {
    const int col = h * D + wg * (D / 2);
    unsigned* counts = chain ? chain + ((size_t)b * L.NH + h) * 2 * ((T + 63) / 64) + wg : nullptr;  // (chained: finish is kb == 0)
    return {part_b + col, dqkv + (size_t)b * T * L.row() + col, L.C, L.row(), scale, first_kb, chain ? kb == 0 : finish, counts, kb};
}
// Split s's first key block (nkb: it has none). The snake order's first round gives key block s
// to split s. The query rows below it are reached by none of its key blocks, so its partial sum
// is never written there: flash_dq_sum_kernel adds a zero in its place.
__host__ __device__ inline int fused_first_kb(int s, int nkb) { return s < nkb ? s : nkb; }
// The fused backward's blocks. Key/value head i = b·NKV + kh takes one block where i < full, and
// S blocks otherwise (its splits, side by side: their partial sums are still in L2 when the last
// of them adds a tile up). full is the heads of the GPU's whole waves (flash_fused_grid), so only
// the last wave's heads are split, and only they have partial sums to add up. Split s's partial
// sum of batch b starts at (s·SB + b)·T·C floats. SB (split_batches) counts the last batches,
// those that hold a split head, so splits 1.. take room for those batches only.
// chain: a block per key block (S = its number, full = 0), their dQ in one sum (chain_turn).
struct FusedGrid { int full, S, heads, split_batches; bool chain; };
__host__ __device__ inline int fused_blocks(const FusedGrid& g) { return g.full + (g.heads - g.full) * g.S; }
__host__ __device__ inline size_t fused_partial_floats(const FusedGrid& g, int B, size_t TC) {
    return g.chain ? (size_t)B * TC : ((size_t)B + (size_t)(g.S - 1) * g.split_batches) * TC;
}
// Chained: the counts (one per batch, query head, warpgroup and query tile of 64), then a ticket.
__host__ __device__ inline size_t chain_counts(int B, int NH, int T) { return (size_t)B * NH * 2 * ((T + 63) / 64); }
// The block's place in the grid's order: blockIdx.x, or chained the next ticket (the count after
// the tiles' counts in dq_done: 0 when a launch starts, and the last block sets it back to 0). A
// chained block waits only for blocks before it in that order. It takes its ticket once it runs,
// so those have all started, whatever order the GPU starts blocks in.
template <bool CHAIN> __device__ inline int fused_block_index(const FusedGrid& g, unsigned* dq_done, int NH, int T) {
    if constexpr (!CHAIN) {
        return blockIdx.x;
    } else {
        __shared__ int ticket;
        if (threadIdx.x == 0) {
            unsigned* next = dq_done + chain_counts(g.split_batches, NH, T);  // (chained, split_batches is B)
            ticket = (int)atomicAdd(next, 1u);
            if (ticket == fused_blocks(g) - 1) atomicExch(next, 0u);  // (every block has its ticket)
        }
        __syncthreads();
        return ticket;
    }
}
// The key/value head, batch and split of this block (at its place in the grid's order), and its
// head's splits S (chained: a head's key blocks last to first, so that each waits only for blocks
// before it)
struct FusedBlock { int kh, b, s, S; };
template <bool CHAIN> __device__ inline FusedBlock fused_block(const FusedGrid& g, const QKVLayout& L, int T, unsigned* dq_done) {
    const int i = fused_block_index<CHAIN>(g, dq_done, L.NH, T), NKV = L.NKV;
    const int split = i >= g.full, head = split ? g.full + (i - g.full) / g.S : i;
    return {head % NKV, head / NKV, split ? (CHAIN ? g.S - 1 - (i - g.full) % g.S : (i - g.full) % g.S) : 0, split ? g.S : 1};
}
// This split's partial sum of batch b's dQ (chained: the one sum)
template <bool CHAIN> __device__ inline float* fused_part(const FusedGrid& g, float* dq_part, int s, int b, int T, int C) {
    return dq_part + (size_t)((CHAIN ? 0 : s) * g.split_batches + b) * T * C;
}
// dQ = scale · (the S splits' partial sums added in split order), for rows [r0, r1) of the B·T
// rows and the w columns from c0 (w a multiple of 4); thread tid of nthreads. Split s's partial
// sums lie s·stride floats from split 0's (FusedGrid). Below a split's first key block its sum
// is zero and unwritten: a zero is added (x + 0 is x, except that −0 becomes +0, as when the
// zeros were stored). flash_dq_sum_kernel runs it over whole heads, fused_release_tiles over
// one query tile.
template <class H>
__device__ void dq_sum_rows(H* dqkv, const float* dq_part, int S, size_t stride, int T, int C, size_t C3, float scale, size_t r0, size_t r1,
                            int c0, int w, size_t tid, size_t nthreads) {
    const int nkb = (T + 127) / 128, W = w / 4;  // W: float4s of a row
    const size_t n = (r1 - r0) * W;
    auto row = [&](size_t i) { return r0 + i / W; };
    auto at = [&](int s, size_t i) { return __ldcg(reinterpret_cast<const float4*>(dq_part + s * stride + row(i) * C + c0) + i % W); };
    constexpr int U = 4;  // float4s of each split a thread loads at once (i past n: the last one's, not used)
    for (size_t i0 = tid; i0 < n; i0 += U * nthreads) {
        size_t i[U];
        float4 a[U];
        #pragma unroll
        for (int u = 0; u < U; u++) i[u] = i0 + u * nthreads < n ? i0 + u * nthreads : n - 1, a[u] = at(0, i[u]);  // (split 0 has key block 0)
        for (int s = 1; s < S; s++) {
            float4 v[U];
            #pragma unroll
            for (int u = 0; u < U; u++)
                v[u] = (int)(row(i[u]) % T) < 128 * fused_first_kb(s, nkb) ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : at(s, i[u]);
            #pragma unroll
            for (int u = 0; u < U; u++) a[u].x += v[u].x, a[u].y += v[u].y, a[u].z += v[u].z, a[u].w += v[u].w;
        }
        #pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * nthreads < n)
                *reinterpret_cast<uint2*>(dqkv + row(i[u]) * C3 + c0 + 4 * (i[u] % W)) =
                    make_uint2(pack2<H>(a[u].x * scale, a[u].y * scale), pack2<H>(a[u].z * scale, a[u].w * scale));
    }
}
// With several splits and dq_done (a count for each key/value head, batch and query tile of 64
// rows; zeros at the start), the split that is last done with a query tile sums that tile's dQ
// from the S partial sums, exactly as flash_dq_sum_kernel does. So that kernel, a pass over
// B·T·C·S fp32 values after the pass, does not run, and the sums spread over the pass.
// A split is done with the tiles before its next key block's first one (its key blocks run in
// order). It then counts itself in each of those tiles (fused_release_tiles): a barrier, then a
// fence and an atomic add (a release). The split that counts S fences again (an acquire), sums
// the tile (dq_sum_rows) and sets the count back to zero for the next launch. No block waits
// for another. sync is a barrier of the block's nthreads computing threads (warp 0 among them).
// Here: this split is done with query tiles [j0, j1) (clamped to the last): counted, 32 at a
// time by warp 0, and summed where it was the last split.
template <class H, int D, class Sync>
__device__ __noinline__ void fused_release_tiles(H* dqkv, const float* dq_part, unsigned* dq_done, int split_batches, const FusedBlock& f, int j0,
                                                int j1, int T, const QKVLayout& L, float scale, int nthreads, const Sync& sync) {
    __shared__ bool last[32];
    if (f.S == 1) return;  // (a head of one block: the pass writes its dQ)
    const int ntiles = (T + 63) / 64;
    unsigned* count = dq_done + ((size_t)f.b * L.NKV + f.kh) * ntiles;
    j1 = min(j1, ntiles);
    for (int c0 = j0; c0 < j1; c0 += 32) {
        sync();  // every thread's adds to these tiles are issued, and the chunk before is summed
        if (threadIdx.x < 32) {
            const int j = c0 + threadIdx.x;
            last[threadIdx.x] = false;
            if (j < j1) {
                __threadfence();
                last[threadIdx.x] = atomicAdd(count + j, 1u) == (unsigned)f.S - 1;
                __threadfence();
                if (last[threadIdx.x]) count[j] = 0;
            }
        }
        sync();
        for (int i = 0; i < 32; i++)
            if (last[i]) {  // (tile c0 + i of this head group's dQ columns)
                const size_t r0 = (size_t)f.b * T + 64 * (c0 + i), r1 = (size_t)f.b * T + min(T, 64 * (c0 + i) + 64);
                dq_sum_rows(dqkv, dq_part, f.S, (size_t)split_batches * T * L.C, T, L.C, L.row(), scale, r0, r1, f.kh * L.group() * D, L.group() * D, threadIdx.x, nthreads);
            }
    }
}
// Split s's next key block after kb (nkb: none)
__host__ __device__ inline int fused_next_kb(int kb, int s, int S, int nkb) {
    for (kb++; kb < nkb; kb++)
        if (fused_split_of(kb, S) == s) return kb;
    return nkb;
}
// dq_finish: a head of one block writes its dQ itself. LAST (v30, flash_dq_last_split): a split
// head's tiles are summed by their last split.
template <class H, int D, bool LAST = false, bool CHAIN = false>
__global__ void __launch_bounds__(256) flash_backward_fused_wgmma_kernel(H* dqkv, float* dq_part, const H* dout, const H* qkv,
                                                                         const float* lse, const float* Dv, int T, QKVLayout L,
                                                                         bool overlap, bool dq_finish, float dq_scale, unsigned* dq_done, FusedGrid g) {
    static_assert(D == 64 || D == 128, "the fused backward: head size 64 or 128");
    DYNAMIC_SHARED(H, tiles);
    __shared__ float lse2[3][64], Ds[3][64];
    const FusedBlock f = fused_block<CHAIN>(g, L, T, dq_done);
    const int kh = f.kh, b = f.b, s = f.s, S = f.S;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4;
    const FusedTiles<H, D, 3> tl{tiles, tiles + 4 * 64 * D, lse2, Ds, 0};
    const int C = L.C, G = L.group(), nkb = (T + 127) / 128;
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T * C3;
    float* part_b = fused_part<CHAIN>(g, dq_part, s, b, T, C);
    const float sl2 = rsqrtf((float)D) * LOG2E;
    const int kb_first = fused_first_kb(s, nkb);
    if constexpr (LAST) fused_release_tiles<H, D>(dqkv, dq_part, dq_done, g.split_batches, f, 0, 2 * kb_first, T, L, dq_scale, 256, [] { __syncthreads(); });  // (no key block of this split reaches them)
    for (int kb = kb_first; kb < (CHAIN ? kb_first + 1 : nkb); kb++) {  // (chained: one key block, split s)
        if (!CHAIN && fused_split_of(kb, S) != s) continue;
        const int k0 = kb * 128, key0 = k0 + wg * 64 + warp * 16;  // the block's first key, and this warp's
        FusedBackwardKeys<H, D, false, CHAIN> keys;
        __syncthreads();  // every warpgroup is done with the key block before's tiles
        for (int w = 0; w < 2; w++) {
            stage_tile_cm<D, 256, 64, true>(tl.kv + 2 * w * 64 * D, qkv_b + L.k(kh * G), C3, k0 + 64 * w, T, threadIdx.x);
            stage_tile_cm<D, 256, 64, true>(tl.kv + (2 * w + 1) * 64 * D, qkv_b + L.v(kh * G), C3, k0 + 64 * w, T, threadIdx.x);
        }
        const int nqt = (T - k0 + 63) / 64;  // the query tiles from k0 (queries before k0 see none of these keys)
        for (int h = kh * G; h < kh * G + G; h++) {
            const H* q = qkv_b + h * D;
            const H* dO = L.out_at(dout, b, T, h);
            const float* lse_bh = L.stats_at(lse, b, T, h);
            const float* D_bh = L.stats_at(Dv, b, T, h);
            const DqSink<H> dq_to = dq_sink<H, D>(dqkv, part_b, b, h, wg, T, L, kb == kb_first, dq_finish && S == 1, dq_scale, CHAIN ? dq_done : nullptr, kb);
            auto stage = [&](int j) {
                const int q0 = k0 + 64 * j;
                stage_tile_cm<D, 256, 64, true>(tl.Q(j), q, C3, q0, T, threadIdx.x);
                stage_tile_cm<D, 256, 64, true>(tl.dO(j), dO, C, q0, T, threadIdx.x);
                stage_query_stats<64>(lse2[tl.slot(j)], Ds[tl.slot(j)], lse_bh, D_bh, q0, T);
            };
            if (h > kh * G) __syncthreads();  // every warpgroup is done with the head before's tiles
            stage(0);
            for (int j = 0; j <= nqt; j++) {
                cp_async_wait_all();
                fence_proxy_async();  // (the tiles, and dS(j − 1) stored by each thread)
                __syncthreads();      // tile j and dS(j − 1) are in, and every warpgroup is done with tile j − 2
                if (j + 1 < nqt) stage(j + 1);
                keys.step(j, nqt, overlap, tl, wg, k0, key0, sl2, dq_to, T);
            }
            if constexpr (CHAIN) chain_count(dq_to.chain, kb, (T - 1) / 64, wg);  // (its last query tile)
        }
        H* dk_out = L.k_at(dqkv, b, T, kh * G);
        store_acc_rows<D>(dk_out, C3, keys.dk, key0, T, rsqrtf((float)D));
        store_acc_rows<D>(dk_out + L.kv(), C3, keys.dv, key0, T, 1.0f);
        if constexpr (LAST)
            fused_release_tiles<H, D>(dqkv, dq_part, dq_done, g.split_batches, f, 2 * kb, 2 * fused_next_kb(kb, s, S, nkb), T, L, dq_scale, 256, [] { __syncthreads(); });
    }
}

// The fused backward with a producer warpgroup (KernelOptions::flash_backward_producer; v23-v26
// in dev/cuda/attention.cu): warpgroup 2 copies every tile in, and warpgroups 0 and 1 compute as
// above, with no block barrier. The producer gives back registers (setmaxnreg), the computing
// warpgroups take them. Two rings of slots, each slot with a full and an empty mbarrier:
//   K and V of a key block (2 slots)  full: the producer's copies have landed; empty: the 8
//                                     computing warps are done with the key block
//   Q, dO and row stats of a query    full: the copies have landed and the stats are stored;
//   tile (SLOTS, 3 or 4)              empty: the 8 warps are done with it (after iteration j + 1)
// The two computing warpgroups still meet once an iteration (named barrier 1, 256 threads):
// dQ(j) = dS(j)·K needs both warpgroups' dS(j). TMA (flash_backward_tma): the tiles swizzled,
// and one producer thread copies each by TMA from qkv_map and dout_map (B × T × a row, boxes of
// 64 × 64). The row stats are plain stores by 64 producer threads, each then a plain arrival
// (its release publishes them). The same products in the same order as the kernel above, so the
// same bits (gpucheck_ops).
template <class H, int D, int SLOTS, bool TMA, bool LAST = false, bool CHAIN = false>
__global__ void __launch_bounds__(384, 1) flash_backward_fused_wgmma_producer_kernel(H* dqkv, float* dq_part, const H* dout, const H* qkv,
                                                                                     const float* lse, const float* Dv, int T, QKVLayout L,
                                                                                     bool overlap, bool dq_finish, float dq_scale, unsigned* dq_done, FusedGrid g,
                                                                                     const __grid_constant__ CUtensorMap qkv_map,
                                                                                     const __grid_constant__ CUtensorMap dout_map) {
    static_assert(D == 64 && SLOTS >= 3, "the fused backward: head size 64; a query tile is in use for two iterations");
    DYNAMIC_SHARED(H, shared);
    H* tiles = TMA ? align_1024(shared) : shared;
    __shared__ float lse2[SLOTS][64], Ds[SLOTS][64];
    __shared__ uint64_t kv_full[2], kv_empty[2], q_full[SLOTS], q_empty[SLOTS];
    auto parity = [](int n, int slots) { return (unsigned)(n / slots) & 1; };  // of use n of its slot
    const FusedBlock f = fused_block<CHAIN>(g, L, T, dq_done);
    const int kh = f.kh, b = f.b, s = f.s, S = f.S;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int C = L.C, NH = L.NH, G = L.group(), nkb = (T + 127) / 128;
    const size_t C3 = L.row();
    const H* qkv_b = qkv + (size_t)b * T * C3;
    float* part_b = fused_part<CHAIN>(g, dq_part, s, b, T, C);
    auto kv = [&](int m) { return tiles + (m % 2) * 4 * 64 * D; };  // key block m's K(0), V(0), K(1), V(1)
    H* const rings = tiles + 8 * 64 * D;
    if (threadIdx.x == 0) {  // (TMA: each tile's copy is one arrival with its bytes)
        for (int i = 0; i < 2; i++) mbar_init(&kv_full[i], TMA ? 4 : 128), mbar_init(&kv_empty[i], 8);
        for (int i = 0; i < SLOTS; i++) mbar_init(&q_full[i], (TMA ? 2 : 128) + 64), mbar_init(&q_empty[i], 8);
        mbar_init_fence();
    }
    __syncthreads();  // (the barriers are initialized; the only block barrier)
    if (wg == 2) {  // the producer: each key block's K and V, then its query tiles, each into a free slot
        setmaxnreg<40, false>();
        const int t = threadIdx.x - 256;
        const FusedTiles<H, D, SLOTS> tl{nullptr, rings, lse2, Ds, 0};
        for (int kb = 0, m = 0, n = 0; kb < nkb; kb++) {
            if (fused_split_of(kb, S) != s) continue;
            const int k0 = kb * 128, nqt = (T - k0 + 63) / 64;
            mbar_wait(&kv_empty[m % 2], parity(m, 2) ^ 1);
            for (int i = 0; i < 4; i++) {  // K(0), V(0), K(1), V(1)
                const int col = i % 2 ? L.v(kh * G) : L.k(kh * G), row0 = k0 + 64 * (i / 2);
                if constexpr (TMA) { if (t == 0) tma_tile<D, 64>(kv(m) + i * 64 * D, &qkv_map, col, row0, b, &kv_full[m % 2]); }
                else stage_tile_cm<D, 128, 64, true>(kv(m) + i * 64 * D, qkv_b + col, C3, row0, T, t);
            }
            if (!TMA) mbar_arrive_on_copies(&kv_full[m % 2]);
            m++;
            for (int h = kh * G; h < kh * G + G; h++)
                for (int j = 0; j < nqt; j++, n++) {
                    const int slot = tl.slot(n), q0 = k0 + 64 * j;
                    mbar_wait(&q_empty[slot], parity(n, SLOTS) ^ 1);
                    if constexpr (TMA) {
                        if (t == 0) tma_tile<D, 64>(tl.Q(n), &qkv_map, h * D, q0, b, &q_full[slot]);
                        if (t == 0) tma_tile<D, 64>(tl.dO(n), &dout_map, h * D, q0, b, &q_full[slot]);
                    } else {
                        stage_tile_cm<D, 128, 64, true>(tl.Q(n), qkv_b + h * D, C3, q0, T, t);
                        stage_tile_cm<D, 128, 64, true>(tl.dO(n), L.out_at(dout, b, T, h), C, q0, T, t);
                        mbar_arrive_on_copies(&q_full[slot]);
                    }
                    const size_t bh = ((size_t)b * NH + h) * T;
                    stage_query_stats<64>(lse2[slot], Ds[slot], lse + bh, Dv + bh, q0, T, t);  // the row stats
                    if (t < 64) mbar_arrive(&q_full[slot]);
                }
        }
        if (!TMA) cp_async_wait_all();  // (its copies have landed before it ends)
    } else {
        setmaxnreg<232, true>();
        const float sl2 = rsqrtf((float)D) * LOG2E;
        const int kb_first = fused_first_kb(s, nkb);
        if constexpr (LAST) fused_release_tiles<H, D>(dqkv, dq_part, dq_done, g.split_batches, f, 0, 2 * kb_first, T, L, dq_scale, 256, [] { bar_sync(1, 256); });
        for (int kb = kb_first, m = 0, n = 0; kb < nkb; kb++) {
            if (fused_split_of(kb, S) != s) continue;
            const int k0 = kb * 128, key0 = k0 + wg * 64 + warp * 16, nqt = (T - k0 + 63) / 64;
            FusedBackwardKeys<H, D, TMA, CHAIN> keys;
            mbar_wait(&kv_full[m % 2], parity(m, 2));
            for (int h = kh * G; h < kh * G + G; h++, n += nqt) {
                const FusedTiles<H, D, SLOTS> tl{kv(m), rings, lse2, Ds, n % SLOTS};
                const DqSink<H> dq_to = dq_sink<H, D>(dqkv, part_b, b, h, wg, T, L, kb == kb_first, dq_finish && S == 1, dq_scale, CHAIN ? dq_done : nullptr, kb);
                for (int j = 0; j <= nqt; j++) {
                    if (j < nqt) mbar_wait(&q_full[tl.slot(j)], parity(n + j, SLOTS));
                    fence_proxy_async();  // (the copies, and dS(j − 1) stored by each thread)
                    bar_sync(1, 256);     // dS(j − 1) is in from both warpgroups, and both are done with iteration j − 1
                    keys.step(j, nqt, overlap, tl, wg, k0, key0, sl2, dq_to, T);
                    if (lane == 0 && j > 0) mbar_arrive(&q_empty[tl.slot(j - 1)]);  // this warp is done with tile j − 1
                }
                if constexpr (CHAIN) chain_count(dq_to.chain, kb, (T - 1) / 64, wg);  // (its last query tile)
            }
            if (lane == 0) mbar_arrive(&kv_empty[m % 2]);  // and with the key block's K and V
            m++;
            H* dk_out = L.k_at(dqkv, b, T, kh * G);
            store_acc_rows<D>(dk_out, C3, keys.dk, key0, T, rsqrtf((float)D));
            store_acc_rows<D>(dk_out + L.kv(), C3, keys.dv, key0, T, 1.0f);
            if constexpr (LAST)
                fused_release_tiles<H, D>(dqkv, dq_part, dq_done, g.split_batches, f, 2 * kb, 2 * fused_next_kb(kb, s, S, nkb), T, L, dq_scale, 256, [] { bar_sync(1, 256); });
        }
    }
}
// D = rowsum(dO∘O) for the fused backward, computed as the dQ passes compute it (row_dots: the
// same bits, so that the fused pass's dK and dV are the two passes' bit for bit). A warp per 16
// rows, a block per 64.
template <class H, int D>
__global__ void flash_row_dots_kernel(float* Dv, const H* dout, const H* out, int T, QKVLayout L) {
    const int h = blockIdx.x, b = blockIdx.y, row0 = blockIdx.z * 64 + threadIdx.x / 32 * 16;
    const H *dO = L.out_at(dout, b, T, h), *O = L.out_at(out, b, T, h);
    uint32_t of[D / 16][4];
    for (int kc = 0; kc < D / 16; kc++) load_a_rows(of[kc], dO, L.C, row0, T, kc * 16);
    float Dr[2];
    row_dots<D>(Dr, of, O, L.C, row0, T, L.stats_at(Dv, b, T, h));
}
// dQ = scale · (its splits' partial sums added in split order) of key/value heads h0.. (one a
// blockIdx.y; head b·NKV + kh: batch b's rows, the columns of kh's query heads), into dqkv
template <class H>
__global__ void flash_dq_sum_kernel(H* dqkv, const float* dq_part, FusedGrid g, int T, QKVLayout L, int h0, float scale) {
    const int head = h0 + blockIdx.y, b = head / L.NKV, kh = head % L.NKV, w = L.group() * L.hs;
    dq_sum_rows(dqkv, dq_part, head < g.full ? 1 : g.S, (size_t)g.split_batches * T * L.C, T, L.C, L.row(), scale, (size_t)b * T, (size_t)b * T + T, kh * w, w,
                (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}
