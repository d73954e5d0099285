/*
hopper.cuh — the building blocks of the Hopper kernels (sm_90a): warpgroup matrix products
(wgmma), mbarriers, TMA copies, named barriers and setmaxnreg, each a thin wrapper around one
PTX instruction. The emulator (test/simt.h) runs the same calls on the CPU.

  wgmma.mma_async m64nNk16:  D (64 × N, fp32) += A (64 × 16) · B (16 × N)
  A in registers or shared memory, B in shared memory, both through 64-bit descriptors.

Main functions: wgmma_m64k16 (A in registers), wgmma_m64k16_ss (A in shared memory),
wgmma_fence/commit/wait, mbar_init/arrive/wait, tma_load_3d, tma_store_3d (with bulk_commit
and bulk_wait_read), bar_sync/arrive, setmaxnreg, stsm_x4, TileDesc (a tile's descriptors and
k-steps); for clusters of blocks: cluster_rank, cluster_sync, mbar_arrive_cluster,
tma_load_multicast_3d, launch_in_clusters.

Users: flash_attention_hopper.cuh, flash_fused_backward.cuh, matmul_hopper.cuh.
Tests: test/gpucheck_ops.cu (wgmma products bit for bit), test/test_ptxas.sh.
More: docs/kernels.md ("The wgmma kernels").
*/
#pragma once
#include "common.h"

// sm_90a's code runs here: a GPU of compute capability 9.0, or the emulator
inline bool gpu_has_wgmma() {
    static const bool yes = [] {
        int dev = 0, major = 0, minor = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major == 9 && minor == 0;
    }();
    return yes;
}

// ---- wgmma (sm_90a)
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
// descriptor: start address, LBO, SBO (each in 16-byte units, 14 bits), base offset 0, and the
// swizzle mode (0: none, 1: 128 bytes)
template <class H> __device__ inline uint64_t wgmma_desc(const H* tile, uint32_t lbo, uint32_t sbo, uint64_t swizzle = 0) {
    return (uint64_t)((smem_addr(tile) & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | swizzle << 62;
}
// The instructions exist only in the sm_90a build; another GPU's build traps (the host launches
// these kernels only on compute capability 9.0: gpu_has_wgmma).
#if defined(LLMC_SIMT) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_WGMMA 1
#endif
__device__ inline void wgmma_fence() {
#if defined(LLMC_SIMT)
    simt::wgmma_fence();
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
#if defined(LLMC_SIMT)
    simt::fence_proxy_async();  // (the emulator checks that each wgmma's operands were published)
#elif defined(LLMC_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// mbarriers (a barrier object in shared memory): init sets the arrivals that complete a phase;
// a wait for the phase of parity p returns once that phase has completed (at once where the
// barrier is still in the phase before it: a producer's first wait on an empty slot).
// mbar_arrive_on_copies arrives when this thread's cp.async copies so far have landed.
__device__ inline void mbar_init(uint64_t* bar, unsigned count) {
#if defined(LLMC_SIMT)
    simt::mbar_init(bar, count);
#elif defined(LLMC_WGMMA)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
// After the inits, before the block barrier that publishes them: makes them visible to the copy
// engine (TMA's complete_tx) as well as to the threads (CUTLASS's fence_barrier_init).
__device__ inline void mbar_init_fence() {
#if defined(LLMC_SIMT)
    simt::mbar_init_fence();
#elif defined(LLMC_WGMMA)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ inline void mbar_arrive(uint64_t* bar) {
#if defined(LLMC_SIMT)
    simt::mbar_arrive(bar);
#elif defined(LLMC_WGMMA)
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
#endif
}
__device__ inline void mbar_arrive_on_copies(uint64_t* bar) {
#if defined(LLMC_SIMT)
    simt::mbar_arrive_on_copies(bar);
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#endif
}
// arrive, and make the phase also wait for `bytes` of TMA copies (complete_tx)
__device__ inline void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(LLMC_SIMT)
    simt::mbar_arrive_expect_tx(bar, bytes);
#elif defined(LLMC_WGMMA)
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
// TMA: the box of map at coordinates (c0, c1, c2) into shared memory at dst, its bytes completed
// on bar. One thread issues it; the copy engine moves the whole box.
__device__ inline void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
#if defined(LLMC_SIMT)
    const int c[3] = {c0, c1, c2};
    simt::tma_load(dst, map, c, bar);
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(smem_addr(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)) : "memory");
#endif
}
// TMA store: shared memory at src (a box of map, laid out as tma_load_3d writes it) to the
// tensor at coordinates (c0, c1, c2); the parts of the box outside the tensor are not written.
// One thread issues it. It reads src asynchronously: src must have been published to the async
// proxy (fence_proxy_async) before, and may be written again after bulk_wait_read.
__device__ inline void tma_store_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
#if defined(LLMC_SIMT)
    const int c[3] = {c0, c1, c2};
    simt::tma_store(map, src, c);
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 ::"l"((uint64_t)map), "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
#endif
}
// The TMA stores this thread issued since the last commit form a group
__device__ inline void bulk_commit() {
#if defined(LLMC_SIMT)
    simt::bulk_commit();
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Until at most N of this thread's committed groups of TMA stores still read shared memory
template <int N> __device__ inline void bulk_wait_read() {
#if defined(LLMC_SIMT)
    simt::bulk_wait_read(N);
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ inline void mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(LLMC_SIMT)
    simt::mbar_wait(bar, parity);
#elif defined(LLMC_WGMMA)
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
#endif
}
// setmaxnreg (sm_90a): this warpgroup's registers a thread become N (a producer gives some
// back, the computing warpgroups take them). Needs a cap at the kernel's entry:
// __launch_bounds__(threads, 1). The emulator has no register file: it checks only where it runs.
template <int N, bool MORE> __device__ inline void setmaxnreg() {  // MORE: N is above the entry cap
#if defined(LLMC_SIMT)
    simt::aligned_site("setmaxnreg", true);  // (the whole warpgroup at one)
#elif defined(LLMC_WGMMA)
    if constexpr (MORE) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
// Named barriers (bar.sync and bar.arrive with an id of 1-15 and a thread count; 0 is
// __syncthreads'): bar_sync waits until count threads have arrived, bar_arrive only arrives.
__device__ inline void bar_sync(int id, int count) {
#if defined(LLMC_SIMT)
    simt::bar_named(id, count, true);
#elif defined(__CUDA_ARCH__)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}
__device__ inline void bar_arrive(int id, int count) {
#if defined(LLMC_SIMT)
    simt::bar_named(id, count, false);
#elif defined(__CUDA_ARCH__)
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#endif
}
// ---- clusters (sm_90): blocks that run at once on SMs near each other and reach each other's
// shared memory. A block's rank in its cluster (of blocks along x):
__device__ inline int cluster_rank() {
#if defined(LLMC_SIMT)
    return simt::cluster_rank();
#elif defined(LLMC_WGMMA)
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}
// Every thread of the cluster waits here for all the others (barrier.cluster): after mbarrier
// inits that other blocks use, and before a block exits while others may still reach it. Not
// .aligned: a warp's threads may come to it from different branches (a producer warp's one
// copying thread and its idle ones), and .aligned needs the whole warp at the same instruction.
__device__ inline void cluster_sync() {
#if defined(LLMC_SIMT)
    simt::cluster_sync();
#elif defined(LLMC_WGMMA)
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}
// An arrival at the mbarrier at bar's place in the shared memory of the cluster's block rank
__device__ inline void mbar_arrive_cluster(uint64_t* bar, int rank) {
#if defined(LLMC_SIMT)
    simt::mbar_arrive_cluster(bar, rank);
#elif defined(LLMC_WGMMA)
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n"
                 ::"r"(smem_addr(bar)), "r"(rank) : "memory");
#endif
}
// tma_load_3d into each block of the cluster in mask (bit r: rank r): the box lands at dst's
// place in each one's shared memory, and completes its bytes on the mbarrier at bar's place there
__device__ inline void tma_load_multicast_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar, uint16_t mask) {
#if defined(LLMC_SIMT)
    const int c[3] = {c0, c1, c2};
    simt::tma_load_multicast(dst, map, c, bar, mask);
#elif defined(LLMC_WGMMA)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
                 ::"r"(smem_addr(dst)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)), "h"(mask) : "memory");
#endif
}
#if !defined(LLMC_SIMT)
// A launch's configuration with clusters of `cluster` blocks along x (attr: its one attribute)
inline cudaLaunchConfig_t cluster_config(cudaLaunchAttribute& attr, unsigned cluster, dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
    attr = cudaLaunchAttribute{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream, cfg.attrs = &attr, cfg.numAttrs = 1;
    return cfg;
}
#endif
// Launches kernel(args) in clusters of `cluster` blocks along x (grid.x a multiple of it). name:
// the kernel as written (the emulator's reports and opt-ins go by it): KERNEL_AND_NAME gives both.
#define KERNEL_AND_NAME(...) #__VA_ARGS__, __VA_ARGS__
template <class... P, class... A>
inline void launch_in_clusters(const char* name, void (*kernel)(P...), unsigned cluster, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               const A&... args) {
#if defined(LLMC_SIMT)
    simt::launch(name, simt::Cfg{grid, block, smem, stream, cluster}, [&] { kernel(args...); }, args...);
#else
    (void)name;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_config(attr, cluster, grid, block, smem, stream);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
#endif
}
// How many clusters of `cluster` blocks of this kernel can run at once (clusters stay inside a
// GPC: where a GPC's free SMs are odd in number, one of them takes no block). 0: none can.
template <class... P>
inline int gpu_max_clusters(void (*kernel)(P...), unsigned cluster, dim3 block, size_t smem) {
#if defined(LLMC_SIMT)
    (void)kernel, (void)block, (void)smem;
    return gpu_sm_count() / (int)cluster;
#else
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_config(attr, cluster, dim3(cluster), block, smem, nullptr);
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
    return n;
#endif
}
// stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (sm_90): four 8×8 16-bit matrices from the C
// layout's registers (r[i]: row g, columns 2t, 2t+1 of matrix i), each stored to the 8 rows whose
// addresses lanes 8i..8i+7 give; TRANS: stored transposed
template <bool TRANS> __device__ inline void stsm_x4(const uint32_t* r, void* row) {
#if defined(LLMC_SIMT)
    simt::stmatrix(r, 4, TRANS, row);
#elif defined(LLMC_WGMMA)
    if constexpr (TRANS)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)), "r"(r[0]), "r"(r[1]),
                     "r"(r[2]), "r"(r[3]) : "memory");
    else
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row)), "r"(r[0]), "r"(r[1]),
                     "r"(r[2]), "r"(r[3]) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
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
// D (64 × N fp32) += or = A (64 × 16, K-major in shared memory, descriptor) · B (16 × N through a
// descriptor: K-major, or MN-major with TRANS_B). N = 64, 32 (the fused backward's dQ chunks),
// 128 (its dV and dK at head size 128) or 256 (matmul_hopper.cuh's tiles). Each descriptor goes
// in as two 32-bit halves: the k-steps of a product differ in the low half only, so their
// descriptors share one register for the high half (ptxas spilled the fused backward at head
// size 128 with 64-bit operands).
#define LLMC_WGMMA_D128_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
                             "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
                             "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
                             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define LLMC_WGMMA_DESC_HALVES(x) "r"((uint32_t)(x)), "r"((uint32_t)((x) >> 32))
#define LLMC_WGMMA_D16_TEXT "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
template <class H, int N, bool TRANS_B> __device__ inline void wgmma_m64k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma from shared memory: N = 32, 64, 128 or 256");
    static_assert(is_half_type<H>, "wgmma: bf16 or fp16 inputs");
#if defined(LLMC_SIMT)
    simt::wgmma_m64k16_ss(d, desc_a, desc_b, N, TRANS_B, accumulate, std::is_same_v<H, fp16>);
#elif defined(LLMC_WGMMA)
#define LLMC_WGMMA_SS64(TY)                                                                                             \
    asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%32, %33};\nmov.b64 db, {%34, %35};\nsetp.ne.b32 p, %36, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " LLMC_WGMMA_D32_TEXT ", da, db, p, 1, 1, 0, %37;\n}\n" \
                 : LLMC_WGMMA_D32(d, 0)                                                                             \
                 : LLMC_WGMMA_DESC_HALVES(desc_a), LLMC_WGMMA_DESC_HALVES(desc_b), "r"(accumulate ? 1 : 0), "n"(TRANS_B ? 1 : 0))
#define LLMC_WGMMA_SS32(TY)                                                                                             \
    asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%16, %17};\nmov.b64 db, {%18, %19};\nsetp.ne.b32 p, %20, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " " LLMC_WGMMA_D16_TEXT ", da, db, p, 1, 1, 0, %21;\n}\n" \
                 : LLMC_WGMMA_D8(d, 0), LLMC_WGMMA_D8(d, 8)                                                         \
                 : LLMC_WGMMA_DESC_HALVES(desc_a), LLMC_WGMMA_DESC_HALVES(desc_b), "r"(accumulate ? 1 : 0), "n"(TRANS_B ? 1 : 0))
#define LLMC_WGMMA_SS256(TY)                                                                                            \
    asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%128, %129};\nmov.b64 db, {%130, %131};\nsetp.ne.b32 p, %132, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " LLMC_WGMMA_D128_TEXT ", da, db, p, 1, 1, 0, %133;\n}\n" \
                 : LLMC_WGMMA_D32(d, 0), LLMC_WGMMA_D32(d, 32), LLMC_WGMMA_D32(d, 64), LLMC_WGMMA_D32(d, 96)                  \
                 : LLMC_WGMMA_DESC_HALVES(desc_a), LLMC_WGMMA_DESC_HALVES(desc_b), "r"(accumulate ? 1 : 0), "n"(TRANS_B ? 1 : 0))
#define LLMC_WGMMA_SS128(TY)                                                                                            \
    asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nmov.b64 da, {%64, %65};\nmov.b64 db, {%66, %67};\nsetp.ne.b32 p, %68, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " LLMC_WGMMA_D64_TEXT ", da, db, p, 1, 1, 0, %69;\n}\n" \
                 : LLMC_WGMMA_D32(d, 0), LLMC_WGMMA_D32(d, 32)                                                      \
                 : LLMC_WGMMA_DESC_HALVES(desc_a), LLMC_WGMMA_DESC_HALVES(desc_b), "r"(accumulate ? 1 : 0), "n"(TRANS_B ? 1 : 0))
    if constexpr (std::is_same_v<H, bf16>) {
        if constexpr (N == 256) LLMC_WGMMA_SS256("bf16");
        else if constexpr (N == 128) LLMC_WGMMA_SS128("bf16");
        else if constexpr (N == 64) LLMC_WGMMA_SS64("bf16");
        else LLMC_WGMMA_SS32("bf16");
    } else {
        if constexpr (N == 256) LLMC_WGMMA_SS256("f16");
        else if constexpr (N == 128) LLMC_WGMMA_SS128("f16");
        else if constexpr (N == 64) LLMC_WGMMA_SS64("f16");
        else LLMC_WGMMA_SS32("f16");
    }
#undef LLMC_WGMMA_SS64
#undef LLMC_WGMMA_SS32
#undef LLMC_WGMMA_SS128
#undef LLMC_WGMMA_SS256
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
// p moved up to the next multiple of 1024 bytes of the shared-memory window (a kernel with
// swizzled tiles asks for 1 KB more)
template <class H> __device__ inline H* align_1024(H* p) { return p + ((1024 - (smem_addr(p) & 1023)) & 1023) / sizeof(H); }
// A tile's descriptors (ROWS × D, either layout) and each k-step's offset in 16-byte units.
// Read as K-major B, k runs along a row: S = Q·Kᵀ. Read as MN-major B, k runs down the rows:
// O = P·V. Swizzled, a k-step of 16 columns moves 32 bytes inside a panel's rows (the tensor
// cores swizzle the sum), and 4 of them reach the next panel; 16 rows are 2048 bytes.
template <int D, int ROWS, bool SW> struct TileDesc {
    template <class H> __device__ static uint64_t k_major(const H* t) { return SW ? wgmma_desc(t, 16, 1024, 1) : wgmma_desc(t, 128, 16 * D); }
    template <class H> __device__ static uint64_t mn_major(const H* t) { return SW ? wgmma_desc(t, ROWS * 128, 1024, 1) : wgmma_desc(t, 16 * D, 128); }
    __host__ __device__ static constexpr int k_step(int kc) { return SW ? kc % 4 * 2 + kc / 4 * ROWS * 8 : kc * 16; }
    __host__ __device__ static constexpr int mn_step(int kc) { return SW ? kc * 128 : kc * 2 * D; }
};
