/*
kernel_helpers.cuh — what the CUDA kernels share: 16-byte packs, warp sums, cp.async, shared memory,
and the fixed-order column sums.

A pack moves 16 bytes in one load or store (pack_width says when rows allow it). cp_async16
copies global to shared memory without registers. DYNAMIC_SHARED and SHARED_OPT_IN give a kernel
its dynamic shared memory, past 48 KB where it asks. column_sum_add adds partial column sums in a
fixed order, so that every bias and LayerNorm gradient is deterministic.

Main functions: load_pack, store_pack, pack_width, warp_sum, warp_max, cp_async16 (and its
groups), exp2_ftz, div_fast, dynamic_shared_ceiling, column_sum_add.

Tests: test/gpucheck_ops.cu (every kernel that uses them), test/test_simt.cpp (the emulator's
cp.async and shared memory). More: docs/kernels.md.
(Included by common.h, after the Ctx it needs.)
*/
#pragma once
#include "cuda_device.h"

#ifdef LLMC_CUDA
// two floats as an H pair (lo in the low half), and stored so at p (two elements of H or float);
// load_pair: the other way
template <class H> __device__ inline uint32_t pack2(float lo, float hi) {  // two floats → an H pair, lo in the low half
    return (uint32_t)from_f<H>(lo).bits | ((uint32_t)from_f<H>(hi).bits << 16);
}
template <class H> __device__ inline void store_pair(H* p, float lo, float hi) { *reinterpret_cast<uint32_t*>(p) = pack2<H>(lo, hi); }
__device__ inline void store_pair(float* p, float lo, float hi) { p[0] = lo; p[1] = hi; }
// an H pair (low half first) as two floats, and the H pair at p (4-byte aligned) by one load
template <class H> __device__ inline float2 unpack2(uint32_t u) { return {to_f(H{(uint16_t)u}), to_f(H{(uint16_t)(u >> 16)})}; }
template <class H> __device__ inline float2 load_pair(const H* p) { return unpack2<H>(*reinterpret_cast<const uint32_t*>(p)); }
// 16-byte vectors: one load or store instruction (LDG.128/STG.128) moves V = 16 / sizeof(E)
// elements, a quarter (fp32) or an eighth (bf16) of the instructions of element-wise access
// for the same bytes. A row of C elements can be read in packs when C is a multiple of V and
// the row's pointer is 16-byte aligned (pack_width checks both at launch; the emulator checks
// every pack's address).
template <class floatX> constexpr int PACK = 16 / (int)sizeof(floatX);
template <class E, int V> struct alignas(sizeof(E) * V) Pack { E v[V]; };
template <int V, class E> __device__ inline Pack<E, V> load_pack(const E* p) {
#ifdef LLMC_SIMT
    if ((uintptr_t)p % sizeof(Pack<E, V>)) fatal("load_pack: address %p is not %zu-byte aligned", (const void*)p, sizeof(Pack<E, V>));
#endif
    return *reinterpret_cast<const Pack<E, V>*>(p);
}
template <int V, class E> __device__ inline void store_pack(E* p, const Pack<E, V>& x) {
#ifdef LLMC_SIMT
    if ((uintptr_t)p % sizeof(Pack<E, V>)) fatal("store_pack: address %p is not %zu-byte aligned", (const void*)p, sizeof(Pack<E, V>));
#endif
    *reinterpret_cast<Pack<E, V>*>(p) = x;
}
// PACK<floatX> when every row (C elements) at each of these pointers starts 16-byte aligned, else 1
template <class floatX> inline int pack_width(size_t C, std::initializer_list<const void*> ptrs) {
    if (C % PACK<floatX>) return 1;
    for (const void* p : ptrs) if ((uintptr_t)p % 16) return 1;
    return PACK<floatX>;
}

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// cp.async.cg.shared.global (sm_80+): 16 bytes from global to shared memory without passing
// through registers; `bytes` < 16 fills the rest with zeros (0: nothing is read). A thread's copies
// are in shared memory after its cp_async_wait_all; a __syncthreads after that shows them to all.
__device__ inline void cp_async16(void* dst, const void* src, unsigned bytes) {
#ifdef LLMC_SIMT
    simt::cp_async16(dst, src, bytes);  // the CPU emulator's: the copy lands at the wait (test/simt.h)
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(bytes) : "memory");
#endif
}
__device__ inline void cp_async_wait_all() {
#ifdef LLMC_SIMT
    simt::cp_async_wait_all();
#else
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// cp.async.commit_group closes a group of this thread's copies so far. cp_async_wait_pending(n)
// waits until at most n of its newest groups are still in flight (the older ones have landed);
// past 7 it waits as for 7: earlier than asked, never later.
__device__ inline void cp_async_commit() {
#ifdef LLMC_SIMT
    simt::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ inline void cp_async_wait_group() {
#ifdef LLMC_SIMT
    simt::cp_async_wait_group(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ inline void cp_async_wait_pending(int n) {
    switch (n) {
        case 0: cp_async_wait_group<0>(); break;
        case 1: cp_async_wait_group<1>(); break;
        case 2: cp_async_wait_group<2>(); break;
        case 3: cp_async_wait_group<3>(); break;
        case 4: cp_async_wait_group<4>(); break;
        case 5: cp_async_wait_group<5>(); break;
        case 6: cp_async_wait_group<6>(); break;
        default: cp_async_wait_group<7>(); break;
    }
}

// exp(z) = 2^(z·LOG2E). exp2_ftz: 2^x by the special function unit's ex2.approx.ftz (relative
// error about 2^-22); a result below 2^-126 (a denormal) becomes 0. exp2f keeps such results at
// three more instructions an element. Its callers sum probabilities of at most 1 (attention,
// the classifier), so 2^-126 lies far below every sum's last bit.
constexpr float LOG2E = 1.4426950408889634f;
__device__ inline float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__) && !defined(LLMC_SIMT)
    float r;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    const float r = exp2f(x);
    return r < 0x1p-126f ? 0.0f : r;  // (the emulator: flushed as on the GPU)
#endif
}
// x / y by a reciprocal's approximation and a product (__fdividef: 2 ulp; 0 where |y| > 2^126)
__device__ inline float div_fast(float x, float y) {
#if defined(__CUDA_ARCH__) && !defined(LLMC_SIMT)
    return __fdividef(x, y);
#else
    return std::fabs(y) > 0x1p126f ? 0.0f * x : x / y;
#endif
}

// Dynamic shared memory: the bytes a launch names as its third <<<>>> argument, for a buffer
// whose size is known only at launch. DYNAMIC_SHARED(E, name) declares E* name pointing at it.
// Past 48 KB a kernel must opt in first: SHARED_OPT_IN(kernel) (written as its launch writes
// it: the emulator matches the text) allows it all it can have, dynamic_shared_ceiling(kernel):
// the device's per-block ceiling, max_shared_per_block() (227 KB on an H100, 163 KB on an A100),
// less the kernel's own static __shared__ arrays. (Asking for the whole ceiling for a kernel
// that has static arrays too is refused: cudaFuncSetAttribute answers "invalid argument".)
// Once per kernel and process.
#ifdef LLMC_SIMT
#define DYNAMIC_SHARED(E, name) E* name = (E*)simt::dynamic_shared()
#define SHARED_OPT_IN(...) simt::shared_opt_in(#__VA_ARGS__, dynamic_shared_ceiling(__VA_ARGS__))
#else
#define DYNAMIC_SHARED(E, name) \
    extern __shared__ __align__(16) unsigned char name##_bytes[]; \
    E* name = (E*)name##_bytes
#define SHARED_OPT_IN(...) do { \
        static const bool opted_ = [] { \
            CUDA_CHECK(cudaFuncSetAttribute(__VA_ARGS__, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic_shared_ceiling(__VA_ARGS__))); \
            return true; \
        }(); \
        (void)opted_; \
    } while (0)
#endif
inline int gpu_sm_count() {  // (the device's streaming multiprocessors)
    static const int n = [] {
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}
inline size_t max_shared_per_block() {
    static const size_t bytes = [] {
        int dev = 0, b = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return (size_t)b;
    }();
    return bytes;
}
// The most dynamic shared memory a launch of `kernel` can have (see SHARED_OPT_IN). The emulator
// does not know a kernel's static arrays, so there it is the device's ceiling.
template <class K> inline size_t dynamic_shared_ceiling(K* kernel) {
#ifdef LLMC_SIMT
    (void)kernel;
    return max_shared_per_block();
#else
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
    return max_shared_per_block() - a.sharedSizeBytes;
#endif
}

// out[c] += Σ_k partial[k·C + c], k = 0 … K−1: the second stage of the deterministic column sums
// (matmul's dbias, LayerNorm's dw and db). A block of 32 warps takes 32 columns, a lane one column;
// warp w sums k = w, w + 32, … in order, then the 32 warps' sums are added in warp order — a fixed
// order, with 32 · 4 loads in flight per column rather than one (C = 768 makes only 24 blocks:
// each needs many loads in flight to read its K rows of partial sums quickly).
static const int COLSUM_WARPS = 32;
template <class floatX> __global__ void __launch_bounds__(32 * COLSUM_WARPS) column_sum_add_kernel(floatX* out, const float* partial, int C, int K) {
    __shared__ float part[COLSUM_WARPS][32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (c < C) {
        constexpr int U = 4;  // a warp's rows loaded before they are added (in order), so that U loads a lane are in flight
        for (int k = w; k < K; k += U * COLSUM_WARPS) {
            float x[U];
            #pragma unroll
            for (int u = 0; u < U; u++) x[u] = k + u * COLSUM_WARPS < K ? partial[(size_t)(k + u * COLSUM_WARPS) * C + c] : 0.0f;
            #pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u * COLSUM_WARPS < K) s += x[u];
        }
    }
    part[w][lane] = s;
    __syncthreads();
    if (w == 0 && c < C) {
        float total = 0.0f;
        for (int u = 0; u < COLSUM_WARPS; u++) total += part[u][lane];
        out[c] = from_f<floatX>(to_f(out[c]) + total);
    }
}
// The end of the column sums' first stage (matmul's dbias, LayerNorm's dw and db): each of a
// block's WARPS warps holds, per lane, V sums of each of NS quantities, for columns
// c0 + lane·V + j. They are added in warp order through shared memory `sh` (NS·WARPS·32·V
// floats), and quantity q's total for column c0 + t goes to out[q·stride + c0 + t]
// (t < 32·V, c0 + t < C). Every thread of the block must call it.
template <int V, int WARPS, int NS>
__device__ inline void block_column_sums(float* sh, const float* const (&sums)[NS], float* out, size_t stride, int c0, int C) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int q = 0; q < NS; q++)
        for (int j = 0; j < V; j++) sh[(q * WARPS + w) * 32 * V + lane * V + j] = sums[q][j];
    __syncthreads();
    for (int t = threadIdx.x; t < 32 * V && c0 + t < C; t += blockDim.x)
        for (int q = 0; q < NS; q++) {
            float total = 0.0f;
            for (int u = 0; u < WARPS; u++) total += sh[(q * WARPS + u) * 32 * V + t];
            out[q * stride + c0 + t] = total;
        }
    __syncthreads();  // the shared sums are read before they are written again
}
template <class floatX> inline void column_sum_add(const Ctx& ctx, floatX* out, const float* partial, int C, int K) {
    column_sum_add_kernel<<<(unsigned)ceil_div(C, 32), 32 * COLSUM_WARPS, 0, ctx.stream>>>(out, partial, C, K);
    CUDA_LAUNCH_CHECK();
}
#endif
