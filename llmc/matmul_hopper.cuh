/*
matmul_hopper.cuh — our own GEMM on Hopper (sm_90a) for the linear layer's forward and input
gradient, with bias, GELU or GELU's backward in its epilogue (--matmul-wgmma 1).

  forward: pre[n, o] = Σ_i inp[n, i] · W[o, i] + bias[o]     out = GELU(pre)  (or pre)
  dinp:    dinp[n, i] = (Σ_o dout[n, o] · W[o, i]) · GELU'(pre_in[n, i])  (or the sum alone)

A block computes tiles of 128 rows × 256 columns, one after another (a block an SM). Its
producer warpgroup copies each tile's k-slices (128 × 64 of A, 64 × 256 of B) by TMA into a ring
of 4 slots. Its two computing warpgroups take 64 rows each: per slot 4 wgmma m64n256k16, both
operands from shared memory (B transposed for dinp). Then each applies the epilogue and stores
from its registers, while the producer already fills the slots with the next tile's slices.

Main functions: matmul_wgmma_kernel, matmul_wgmma_forward and matmul_wgmma_dinp (the launches;
false where they do not run: not compute capability 9.0, or rows not 16-byte aligned).
Tests: test/gpucheck_ops.cu (group gemm: against the CPU ops), test/test_ptxas.sh.
More: docs/kernels.md ("Our own GEMM").
*/
#pragma once
#include "hopper.cuh"
#include "gelu.cuh"

constexpr int GEMM_BM = 128, GEMM_BN = 256, GEMM_BK = 64, GEMM_STAGES = 4;
constexpr size_t GEMM_SLOT = (GEMM_BM + GEMM_BN) * GEMM_BK;  // a slot's elements: A, then B
constexpr size_t matmul_wgmma_shared_bytes() { return GEMM_STAGES * GEMM_SLOT * 2 + 1024; }  // (room to align to 1024)
// What a tile's products become: + bias; + bias, then pre and GELU(pre) (aux = pre); or
// GELU's backward at aux (the layer's pre-activation, read), the products being its gradient.
enum class GemmEpi { Bias, BiasGelu, DGelu };

// Which tile a block runs n-th, and the ring: the block's k-slice g (counted over all its tiles)
// sits in slot g % STAGES, and that turn's parity is (g / STAGES) % 2.
struct GemmTiles {
    int tiles_n, tiles, nk;  // column tiles, all tiles, k-slices a tile
    __device__ int row0(int t) const { return t / tiles_n * GEMM_BM; }
    __device__ int col0(int t) const { return t % tiles_n * GEMM_BN; }
    __device__ static unsigned phase(int g) { return (unsigned)(g / GEMM_STAGES) & 1; }
};
struct GemmBarriers { uint64_t full[GEMM_STAGES], empty[GEMM_STAGES]; };

// The producer's first thread: each k-slice of each of the block's tiles into its slot once the
// slot is free, A and B by TMA, both completing the slot's full phase. B is K-major (W in the
// forward: one box of 256 rows × 64) or, TRANS_B, MN-major (W in dinp: 4 boxes of 64 rows × 64
// columns, the 4 panels of 64 columns that wgmma's transposed B reads).
template <bool TRANS_B, class H>
__device__ inline void gemm_produce(H* ring, GemmBarriers& bar, const GemmTiles& tl, const CUtensorMap& a_map, const CUtensorMap& b_map) {
    int g = 0;
    for (int t = blockIdx.x; t < tl.tiles; t += gridDim.x)
        for (int k = 0; k < tl.nk; k++, g++) {
            const int s = g % GEMM_STAGES;
            mbar_wait(&bar.empty[s], GemmTiles::phase(g) ^ 1);
            mbar_arrive_expect_tx(&bar.full[s], GEMM_SLOT * sizeof(H));
            tma_load_3d(ring + s * GEMM_SLOT, &a_map, k * GEMM_BK, tl.row0(t), 0, &bar.full[s]);
            H* b = ring + s * GEMM_SLOT + GEMM_BM * GEMM_BK;
            if constexpr (TRANS_B)
                for (int p = 0; p < GEMM_BN / 64; p++) tma_load_3d(b + p * 64 * GEMM_BK, &b_map, tl.col0(t) + 64 * p, k * GEMM_BK, 0, &bar.full[s]);
            else
                tma_load_3d(b, &b_map, k * GEMM_BK, tl.col0(t), 0, &bar.full[s]);
        }
}

// A computing warpgroup's 64 rows × 256 columns after the last k-slice, through the epilogue
// EPI into out (and aux). acc holds the wgmma D layout: warp w's rows 16w + lane/4 (and + 8),
// n-tile j's columns 8j + 2·(lane % 4) (and + 1) in acc[4j..4j+3].
template <class H, GemmEpi EPI>
__device__ inline void gemm_store(const float* acc, H* out, H* aux, const H* bias, int row0, int col0, int N, int OC) {
    const int lane = threadIdx.x % 32, r = row0 + threadIdx.x / 32 % 4 * 16 + lane / 4;
    #pragma unroll
    for (int j = 0; j < GEMM_BN / 8; j++) {
        const int c = col0 + 8 * j + 2 * (lane % 4);
        if (c >= OC) break;
        const float b0 = bias ? to_f(bias[c]) : 0.0f, b1 = bias ? to_f(bias[c + 1]) : 0.0f;
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = r + 8 * h;
            if (row >= N) continue;
            const float v0 = acc[4 * j + 2 * h] + b0, v1 = acc[4 * j + 2 * h + 1] + b1;
            const size_t at = (size_t)row * OC + c;
            if constexpr (EPI == GemmEpi::BiasGelu) {
                store_pair(aux + at, v0, v1);
                store_pair(out + at, gelu_of(v0), gelu_of(v1));
            } else if constexpr (EPI == GemmEpi::DGelu) {
                store_pair(out + at, gelu_backward_of(to_f(aux[at]), v0), gelu_backward_of(to_f(aux[at + 1]), v1));
            } else {
                store_pair(out + at, v0, v1);
            }
        }
    }
}

// A computing warpgroup: for each tile, each k-slice's 4 products once its slot is full; the
// slot before is free once at most this slice's products are in flight (lane 0 of each warp
// arrives at its empty phase). Then the tile's stores.
template <class H, bool TRANS_B, GemmEpi EPI>
__device__ inline void gemm_consume(const H* ring, GemmBarriers& bar, const GemmTiles& tl, H* out, H* aux, const H* bias, int N, int OC) {
    using ADesc = TileDesc<GEMM_BK, GEMM_BM, true>;
    using BDesc = TileDesc<GEMM_BK, GEMM_BN, true>;   // (K-major: 256 rows of 64)
    using TDesc = TileDesc<GEMM_BN, GEMM_BK, true>;   // (MN-major: 64 rows of 256, in 4 panels)
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    float acc[GEMM_BN / 2];
    int g = 0;
    for (int t = blockIdx.x; t < tl.tiles; t += gridDim.x) {
        for (int k = 0; k < tl.nk; k++, g++) {
            const int s = g % GEMM_STAGES;
            mbar_wait(&bar.full[s], GemmTiles::phase(g));
            wgmma_fence();
            const H* bt = ring + s * GEMM_SLOT + GEMM_BM * GEMM_BK;
            const uint64_t a = ADesc::k_major(ring + s * GEMM_SLOT + wg * 64 * GEMM_BK), b = TRANS_B ? TDesc::mn_major(bt) : BDesc::k_major(bt);
            #pragma unroll
            for (int kc = 0; kc < GEMM_BK / 16; kc++)
                wgmma_m64k16_ss<H, GEMM_BN, TRANS_B>(acc, a + ADesc::k_step(kc), b + (TRANS_B ? TDesc::mn_step(kc) : BDesc::k_step(kc)), k > 0 || kc > 0);
            wgmma_commit();
            wgmma_wait<1>();
            if (k > 0 && lane == 0) mbar_arrive(&bar.empty[(g - 1) % GEMM_STAGES]);
        }
        wgmma_wait<0>();
        wgmma_hold<GEMM_BN / 2>(acc);  // (the stores read acc only after the wait)
        if (lane == 0) mbar_arrive(&bar.empty[(g - 1) % GEMM_STAGES]);
        gemm_store<H, EPI>(acc, out, aux, bias, tl.row0(t) + wg * 64, tl.col0(t), N, OC);
    }
}

// The kernel: out (N × OC) = A (N × K) · B + epilogue, B = Wᵀ (K-major W, OC × K) or, TRANS_B,
// W itself (MN-major, K × OC). Warpgroups 0 and 1 compute, warpgroup 2 copies (it gives back
// registers: setmaxnreg, 40 a thread; the computing ones take 232). a_map: A in boxes of 64 × 128;
// b_map: W in boxes of 64 × 256, or 64 × 64 with TRANS_B (gemm_tensor_map).
template <class H, bool TRANS_B, GemmEpi EPI>
__global__ void __launch_bounds__(384, 1) matmul_wgmma_kernel(H* out, H* aux, const H* bias, int N, int OC, int K,
                                                              const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map) {
    DYNAMIC_SHARED(H, shared);
    __shared__ GemmBarriers bar;
    H* ring = align_1024(shared);
    const GemmTiles tl{(OC + GEMM_BN - 1) / GEMM_BN, (N + GEMM_BM - 1) / GEMM_BM * ((OC + GEMM_BN - 1) / GEMM_BN), (K + GEMM_BK - 1) / GEMM_BK};
    if (threadIdx.x == 0) {
        for (int i = 0; i < GEMM_STAGES; i++) mbar_init(&bar.full[i], 1), mbar_init(&bar.empty[i], 8);
        mbar_init_fence();
    }
    __syncthreads();  // (the barriers are initialized; the only block barrier)
    if (threadIdx.x / 128 == 2) {
        setmaxnreg<40, false>();
        if (threadIdx.x == 256) gemm_produce<TRANS_B>(ring, bar, tl, a_map, b_map);
    } else {
        setmaxnreg<232, true>();
        gemm_consume<H, TRANS_B, EPI>(ring, bar, tl, out, aux, bias, N, OC);
    }
}

// A tensor map of a rows × cols matrix of 16-bit values (row-major) in boxes of 64 columns × box_rows
template <class H> inline CUtensorMap gemm_tensor_map(const H* base, int rows, int cols, uint32_t box_rows) {
    const uint64_t dims[3] = {(uint64_t)cols, (uint64_t)rows, 1}, strides[2] = {cols * sizeof(H), (uint64_t)rows * cols * sizeof(H)};
    const uint32_t box[3] = {GEMM_BK, box_rows, 1};
    return tensor_map_3d_16bit(base, dims, strides, box);
}
// One launch of matmul_wgmma_kernel: out (N × OC) from A (N × K) and W (see the kernel)
template <class H, bool TRANS_B, GemmEpi EPI>
inline void gemm_launch(const Ctx& ctx, H* out, H* aux, const H* bias, const H* A, const H* W, int N, int OC, int K) {
    const CUtensorMap a_map = gemm_tensor_map(A, N, K, GEMM_BM), b_map = TRANS_B ? gemm_tensor_map(W, K, OC, 64) : gemm_tensor_map(W, OC, K, GEMM_BN);
    const long tiles = (long)ceil_div(N, GEMM_BM) * ceil_div(OC, GEMM_BN);
    const int blocks = (int)std::min<long>(tiles, ctx.kernels.matmul_wgmma_blocks > 0 ? ctx.kernels.matmul_wgmma_blocks : gpu_sm_count());
    SHARED_OPT_IN(matmul_wgmma_kernel<H, TRANS_B, EPI>);
    matmul_wgmma_kernel<H, TRANS_B, EPI><<<blocks, 384, matmul_wgmma_shared_bytes(), ctx.stream>>>(out, aux, bias, N, OC, K, a_map, b_map);
    CUDA_LAUNCH_CHECK();
}
// Whether our GEMM runs here for these widths: sm_90a, a 16-bit dtype, rows of 16-byte multiples
// (TMA's strides). Rank 0 says once whether it runs, or why not, so that a run shows it.
template <class floatX> inline bool gemm_runs(int C, int OC, int N) {
    static bool said = false;
    const char* why = !is_half_type<floatX> ? "needs bf16 or fp16" : !gpu_has_wgmma() ? "needs a GPU of compute capability 9.0" : nullptr;
    if (!said && g_rank == 0)
        printf(why ? "matmul: --matmul-wgmma 1 %s: cuBLASLt runs every product\n" : "matmul: the forward and input-gradient products by our GEMM (--matmul-wgmma 1)\n", why);
    said = true;
    return !why && C % 8 == 0 && OC % 8 == 0 && N > 0;
}
// out (and pre, with GELU) = inp·Wᵀ + bias through matmul_wgmma_kernel; false where it cannot run
// here (then nothing was launched).
template <class floatX>
inline bool matmul_wgmma_forward(const Ctx& ctx, floatX* out, floatX* pre, const floatX* inp, const floatX* W, const floatX* bias, int N, int C, int OC) {
    if (!gemm_runs<floatX>(C, OC, N)) return false;
    if constexpr (is_half_type<floatX>) {
        if (pre) gemm_launch<floatX, false, GemmEpi::BiasGelu>(ctx, out, pre, bias, inp, W, N, OC, C);
        else gemm_launch<floatX, false, GemmEpi::Bias>(ctx, out, nullptr, bias, inp, W, N, OC, C);
    }
    return true;
}
// dinp = dout·W, times GELU'(pre_in) where pre_in is given (the layer's input was GELU(pre_in)).
template <class floatX>
inline bool matmul_wgmma_dinp(const Ctx& ctx, floatX* dinp, const floatX* pre_in, const floatX* dout, const floatX* W, int N, int C, int OC) {
    if (!gemm_runs<floatX>(C, OC, N)) return false;
    if constexpr (is_half_type<floatX>) {
        if (pre_in) gemm_launch<floatX, true, GemmEpi::DGelu>(ctx, dinp, const_cast<floatX*>(pre_in), nullptr, dout, W, N, C, OC);
        else gemm_launch<floatX, true, GemmEpi::Bias>(ctx, dinp, nullptr, nullptr, dout, W, N, C, OC);
    }
    return true;
}
