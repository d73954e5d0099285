/*
fp8.cuh — 8-bit floats for the transformer blocks' products (--precision fp8).

The model stays the bf16 model; only the blocks' linear layers multiply FP8 on the tensor cores.
E4M3 (largest 448) in the forward, E5M2 (largest 57344) for the gradients. One power-of-two
scale a tensor:

  amax = max |x|,   s = 2^⌊log₂(largest / amax)⌋,   q = fp8(x · s)   (rounded to nearest, saturating)

Current scaling takes amax from the tensor itself; delayed scaling (--fp8-scaling delayed) from
its last H steps (--fp8-amax-history), kept in Fp8Delayed and in checkpoints. cuBLASLt takes
only the "TN" form, so the backward also quantizes dout, W and x transposed.

Main functions: fp8_encode / fp8_decode (integer arithmetic, the same on host and GPU),
fp8_encode2 (two codes; on sm_89+ one conversion instruction that rounds alike),
fp8_quantize (amax, scale, cast, the transpose and dbias's column sums, in one or two passes),
layernorm_forward_fp8 (a LayerNorm that writes codes, not its output: delayed scaling),
fp8_dequantize, and the delayed-scaling state (fp8_delayed_amaxes, fp8_delayed_push, fp8_delayed_saved).

Tests: test/test_ops.cpp (all 256 codes of each format, ties, saturation, the quantize),
test/gpucheck_ops.cu (kernels and cuBLASLt against the CPU), test/test_gpu_train.sh and
test/test_train.sh (FP8 training, resume). More: docs/kernels.md (FP8), docs/performance.md.
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>
#include "common.h"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "profiler.h"

enum class Fp8Format { E4M3, E5M2 };

// The formats' parameters: mantissa bits, exponent bias, the largest finite number and its code.
HD inline int fp8_mantissa_bits(Fp8Format f) { return f == Fp8Format::E4M3 ? 3 : 2; }
HD inline int fp8_bias(Fp8Format f) { return f == Fp8Format::E4M3 ? 7 : 15; }
HD inline float fp8_largest(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }
HD inline uint8_t fp8_largest_code(Fp8Format f) { return f == Fp8Format::E4M3 ? 0x7e : 0x7b; }
inline const char* fp8_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

// x → the format's code: round to nearest even, saturate to ±largest, NaN → NaN (0x7f | sign).
// The value's fp32 significand m (24 bits with the implicit one) times 2^(E−23) is rounded to a
// multiple of the format's quantum 2^(e−M) at the exponent e = max(E, emin) (below emin the
// format's subnormals share emin's quantum): q = m >> shift, rounded. Then the code is
// ((e − emin) << M) + q: q's own leading one, when it has one, adds the 1 that makes the biased
// exponent e − emin + 1, and a rounding that carries q to 2^(M+1) moves to the next binade by
// the same sum.
HD inline uint8_t fp8_encode(float x, Fp8Format f) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;                                    // NaN
    const int M = fp8_mantissa_bits(f), emin = 1 - fp8_bias(f);
    float ax;
    memcpy(&ax, &a, 4);
    if (ax >= fp8_largest(f)) return sign | fp8_largest_code(f);              // saturate (∞ too)
    const int E = (int)(a >> 23) - 127;
    if (E < -127 + 1) return sign;                                            // fp32 zero or subnormal: far below the format's
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const int e = E > emin ? E : emin;
    const int shift = 23 - M + (e - E);
    if (shift > 25) return sign;                                              // less than half the smallest subnormal
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    uint32_t code = ((uint32_t)(e - emin) << M) + q;
    if (code > fp8_largest_code(f)) code = fp8_largest_code(f);
    return sign | (uint8_t)code;
}

// Two codes, lo's in the low byte. A GPU of compute capability 8.9 or more has an instruction
// for it: cvt.rn.satfinite rounds and saturates as fp8_encode does, in one instruction for two
// values instead of some 30 for one (gpucheck_ops' check_fp8_hardware compares the two; only a
// NaN's sign may differ). Elsewhere it is fp8_encode twice.
HD inline uint16_t fp8_encode2(float lo, float hi, Fp8Format f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint16_t q;
    if (f == Fp8Format::E4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(q) : "f"(hi), "f"(lo));
    else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(q) : "f"(hi), "f"(lo));
    return q;
#else
    return (uint16_t)(fp8_encode(lo, f) | fp8_encode(hi, f) << 8);
#endif
}

// code → its value (exact in fp32)
HD inline float fp8_decode(uint8_t c, Fp8Format f) {
    const int M = fp8_mantissa_bits(f), bias = fp8_bias(f);
    const int eb = (c & 0x7f) >> M, man = c & ((1 << M) - 1);
    const float sign = (c & 0x80) ? -1.0f : 1.0f;
    if (f == Fp8Format::E4M3 && (c & 0x7f) == 0x7f) return NAN;
    if (f == Fp8Format::E5M2 && eb == 31) return man ? NAN : sign * INFINITY;
    if (eb == 0) return sign * ldexpf((float)man, 1 - bias - M);
    return sign * ldexpf((float)((1 << M) + man), eb - bias - M);
}

// s = 2^k with k the largest integer such that amax·2^k ≤ largest (see the header); 1 for an
// all-zero tensor or a non-finite amax (the NaNs and infinities then show in the product).
HD inline float fp8_scale_for(float amax, Fp8Format f) {
    if (!(amax > 0.0f) || !(amax <= 3.4e38f)) return 1.0f;
    int k = ilogbf(fp8_largest(f)) - ilogbf(amax);
    if (ldexpf(amax, k) > fp8_largest(f)) k--;
    k = k > 126 ? 126 : k < -126 ? -126 : k;
    return ldexpf(1.0f, k);
}

// The 2 floats a quantized tensor comes with: its scale s and 1/s (what the product multiplies
// by, which cuBLASLt reads through a pointer). 16-byte aligned with 1/s first, so that pointer is
// 16-byte aligned, as the scales of cuBLASLt's samples and of the frameworks are (each its own
// allocation). With 1/s at a 4-byte offset cuBLASLt 13.1 refused every FP8 product on an H100
// (NOT_SUPPORTED from cublasLtMatmul after its heuristic had offered an algorithm); that this was
// the cause is a suspicion, not yet confirmed on a GPU. fp8_scales(s) makes one.
struct alignas(16) Fp8Scales { float inv, scale; };
HD inline Fp8Scales fp8_scales(float s) {
    Fp8Scales r{};
    r.scale = s;
    r.inv = 1.0f / s;
    return r;
}

// Where one quantization takes its scale and leaves the tensor's amax.
struct Fp8Target {
    Fp8Scales* scales;    // current scaling: written (from the tensor's amax); given: read
    float* amax = nullptr;  // nullptr, or *amax = max(*amax, amax of the tensor) (delayed scaling's record)
    bool given = false;   // delayed scaling: the scales are given, and the cast saturates past them
};

// ----------------------------------------------------------------------------
// quantize: q (R×Cc, row-major) and/or qt (Cc×R, its transpose) = fp8(x·s), s from amax(x) or
// given (Fp8Target); the scales and the amax are device memory on the GPU.

// What a quantization reads: x itself, GELU(x), or GELU's backward x·GELU'(pre) (x: the gradient
// at GELU's output). The last two are rounded to floatX, as gelu.cuh's ops round what they write,
// so the codes are those of the ops run apart; the MLP's FP8 products never write them (matmul.cuh).
enum class Fp8Act { None, Gelu, GeluBackward };
template <Fp8Act A, class floatX> HD inline float fp8_source_value(floatX x, floatX pre) {
    if constexpr (A == Fp8Act::Gelu) return to_f(from_f<floatX>(gelu_of(to_f(x))));
    else if constexpr (A == Fp8Act::GeluBackward) return to_f(from_f<floatX>(gelu_backward_of(to_f(pre), to_f(x))));
    else return to_f(x);
}

// column_sums: nullptr, or column_sums[c] += Σ_r x[r, c] (the FP8 backward's dbias, from the same
// read of x), the rows summed first and then added. With act, x is first made as above.
template <class floatX>
inline void fp8_quantize_cpu(uint8_t* q, uint8_t* qt, const Fp8Target& t, const floatX* x, int R, int Cc, Fp8Format f,
                             floatX* column_sums, Fp8Act act, const floatX* pre) {
    const size_t n = (size_t)R * Cc;
    std::vector<floatX> made(act == Fp8Act::None ? 0 : n);
    #pragma omp parallel for
    for (size_t i = 0; i < made.size(); i++)
        made[i] = from_f<floatX>(act == Fp8Act::Gelu ? fp8_source_value<Fp8Act::Gelu>(x[i], x[i])
                                                     : fp8_source_value<Fp8Act::GeluBackward>(x[i], pre[i]));
    if (act != Fp8Act::None) x = made.data();
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) amax = std::max(amax, fabsf(to_f(x[i])));  // (NaNs are skipped, as fmaxf does)
    if (!t.given) { const float own = fp8_scale_for(amax, f); *t.scales = fp8_scales(own); }
    if (t.amax) *t.amax = std::max(*t.amax, amax);
    const float s = t.scales->scale;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            const uint8_t v = fp8_encode(to_f(x[(size_t)r * Cc + c]) * s, f);
            if (q) q[(size_t)r * Cc + c] = v;
            if (qt) qt[(size_t)c * R + r] = v;
        }
    if (!column_sums) return;
    std::vector<float> sums(Cc, 0.0f);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) sums[c] += to_f(x[(size_t)r * Cc + c]);
    for (int c = 0; c < Cc; c++) column_sums[c] = from_f<floatX>(to_f(column_sums[c]) + sums[c]);
}

#ifdef LLMC_CUDA
// amax in two launches: per-block maxima (grid-stride, warp_max, then the block's warps through
// shared memory), then one block over those, which writes the scales (and maxes the amax into
// the record, when there is one). max is exact and order-free, so the result does not depend on
// the launch shape.
static const int FP8_AMAX_BLOCKS = 1024;
// A thread loads FP8_AMAX_LOADS packs (a grid's stride apart) before it takes their max, so that
// several loads a thread are in flight.
constexpr int FP8_AMAX_LOADS = 4;
template <class floatX, int V, Fp8Act A>
__global__ void __launch_bounds__(256) fp8_amax_partial_kernel(float* partial, const floatX* x, const floatX* pre, size_t n) {
    constexpr int U = FP8_AMAX_LOADS;
    constexpr bool GB = A == Fp8Act::GeluBackward;  // (it reads pre too)
    __shared__ float sh[8];
    float m = 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x * V;
    for (size_t i0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i0 < n; i0 += U * stride) {
        Pack<floatX, V> xs[U], gs[GB ? U : 1];
        #pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * stride < n) {  // (n % V == 0)
                xs[u] = load_pack<V>(x + i0 + u * stride);
                if constexpr (GB) gs[u] = load_pack<V>(pre + i0 + u * stride);
            }
        #pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * stride < n)
                for (int k = 0; k < V; k++) m = fmaxf(m, fabsf(fp8_source_value<A>(xs[u].v[k], GB ? gs[u].v[k] : xs[u].v[k])));
    }
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) m = fmaxf(m, sh[w]);
        partial[blockIdx.x] = m;
    }
}
__global__ void __launch_bounds__(256) fp8_scale_kernel(Fp8Scales* scales, float* record, const float* partial, int P, Fp8Format f) {
    __shared__ float sh[8];
    float m = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) m = fmaxf(m, partial[i]);
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) m = fmaxf(m, sh[w]);
        const float s = fp8_scale_for(m, f);
        *scales = fp8_scales(s);
        if (record) *record = fmaxf(*record, m);
    }
}
// A block takes up to FP8_QUANTIZE_TILES tiles of 32 rows × 8·V columns down the rows, 256
// threads. V = 16 bytes of x (8 bf16) where the rows allow it (Cc and, for the transpose, R
// multiples of V; aligned pointers), else 1. Thread t loads its pack of every tile first (row t/8
// of each, columns (t%8)·V…), so that several loads a thread are in flight, then computes them in
// order. It stores each pack's V codes as one store to q's row; a tile's codes go through shared
// memory (two buffers, so one barrier a tile), and thread t then stores V consecutive bytes of one
// qt row (tile column t/(32/V), rows (t%(32/V))·V…). Every row segment of q and qt is 32 or 8·V
// bytes written by consecutive threads.
// With amax (delayed scaling: the scale is given) the block also takes the max |x| of its tiles
// and maxes it into *amax: an atomicMax on the bits, which order non-negative floats as their
// values do (exact and order-free, so deterministic).
// With col_sums the block sums its columns over its tiles: the 4 lanes of a warp that share
// columns add theirs by shuffles, then the 8 warps' sums are added in warp order →
// col_sums[blockIdx.y][c], a fixed order (column_sum_add adds the blocks' rows).
constexpr int FP8_QUANTIZE_TILES = 4;
template <class floatX, int V, Fp8Act A> __global__ void __launch_bounds__(256)
fp8_quantize_kernel(uint8_t* q, uint8_t* qt, const Fp8Scales* scales, float* amax, float* col_sums, const floatX* x, const floatX* pre,
                    int R, int Cc, int tiles, Fp8Format f) {
    constexpr int TR = 32, TC = 8 * V, CH = TR / V, U = FP8_QUANTIZE_TILES;  // the tile's rows and columns; V-byte chunks of a qt row
    constexpr bool GB = A == Fp8Act::GeluBackward;  // (it reads pre too)
    __shared__ uint8_t tile[2][TR][TC + 4];
    __shared__ float warp_part[8][TC];
    const float s = scales->scale;
    const int c0 = blockIdx.x * TC, i = threadIdx.x / 8, j = threadIdx.x % 8 * V, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int c = c0 + j, block_r0 = blockIdx.y * tiles * TR;  // (tile u's first row: block_r0 + u·TR)
    Pack<floatX, V> xs[U], gs[GB ? U : 1];
    #pragma unroll
    for (int u = 0; u < U; u++) {  // every tile's load first
        const int r = block_r0 + u * TR + i;
        if (u < tiles && r < R && c < Cc) {  // (Cc % V == 0: the pack is whole)
            xs[u] = load_pack<V>(x + (size_t)r * Cc + c);
            if constexpr (GB) gs[u] = load_pack<V>(pre + (size_t)r * Cc + c);
        }
    }
    float m = 0.0f, sum[V];
    for (int k = 0; k < V; k++) sum[k] = 0.0f;
    #pragma unroll
    for (int u = 0; u < U; u++) {
        if (u >= tiles) break;  // (the same for the whole block)
        const int r0 = block_r0 + u * TR, r = r0 + i;
        uint8_t (*buf)[TC + 4] = tile[u % 2];
        if (r < R && c < Cc) {
            const Pack<floatX, V>& p = xs[u];
            const Pack<floatX, V>& g = gs[GB ? u : 0];
            float v[V];
            for (int k = 0; k < V; k++) {
                v[k] = fp8_source_value<A>(p.v[k], GB ? g.v[k] : p.v[k]);
                m = fmaxf(m, fabsf(v[k]));
                sum[k] += v[k];
            }
            Pack<uint8_t, V> o;
            for (int k = 0; k < V; k += 2) {  // (V = 1: the second code is not kept)
                const uint16_t two = fp8_encode2(v[k] * s, k + 1 < V ? v[k + 1] * s : 0.0f, f);
                o.v[k] = (uint8_t)two;
                if (k + 1 < V) o.v[k + 1] = (uint8_t)(two >> 8);
            }
            if (q) store_pack<V>(q + (size_t)r * Cc + c, o);
            for (int k = 0; k < V; k++) buf[i][j + k] = o.v[k];
        }
        if (!qt) continue;
        __syncthreads();  // (the next tile writes the other buffer; the one after it waits at the next barrier)
        const int jc = threadIdx.x / CH, k0 = threadIdx.x % CH * V, ct = c0 + jc, rt = r0 + k0;
        if (ct < Cc && rt < R) {  // (R % V == 0: the chunk is whole)
            Pack<uint8_t, V> o;
            for (int k = 0; k < V; k++) o.v[k] = buf[k0 + k][jc];
            store_pack<V>(qt + (size_t)ct * R + rt, o);
        }
    }
    if (amax) {  // (a kernel argument: the whole block takes the branch, or none of it)
        m = warp_max(m);
        if (lane == 0) warp_part[w][0] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int v = 1; v < 8; v++) m = fmaxf(m, warp_part[v][0]);
            atomicMax((unsigned*)amax, __float_as_uint(m));
        }
        __syncthreads();  // warp_part is read before the column sums write it
    }
    if (!col_sums) return;
    for (int k = 0; k < V; k++) {
        sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], 8);
        sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], 16);
        if (lane < 8) warp_part[w][j + k] = sum[k];
    }
    __syncthreads();
    if (threadIdx.x < TC && c0 + (int)threadIdx.x < Cc) {
        float total = 0.0f;
        for (int v = 0; v < 8; v++) total += warp_part[v][threadIdx.x];
        col_sums[(size_t)blockIdx.y * Cc + c0 + threadIdx.x] = total;
    }
}
template <class floatX, int V, Fp8Act A> inline void fp8_quantize_launch(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Target& t,
                                                                     float* col_sums, int row_blocks, const floatX* x, const floatX* pre,
                                                                     int R, int Cc, Fp8Format f) {
    const size_t n = (size_t)R * Cc;
    if (!t.given) {  // current scaling: the amax first, in a pass of its own
        static Buf<float> partial_buf;
        const int blocks = (int)std::max<size_t>(1, std::min<size_t>(FP8_AMAX_BLOCKS, ceil_div(n, 256 * V)));
        float* partial = gpu_scratch(partial_buf, ctx, (size_t)blocks);
        fp8_amax_partial_kernel<floatX, V, A><<<blocks, 256, 0, ctx.stream>>>(partial, x, pre, n);
        CUDA_LAUNCH_CHECK();
        fp8_scale_kernel<<<1, 256, 0, ctx.stream>>>(t.scales, t.amax, partial, blocks, f);
        CUDA_LAUNCH_CHECK();
    }
    if (n == 0) return;
    float* record = t.given ? t.amax : nullptr;  // (current scaling recorded it above)
    const int tiles = (int)ceil_div(R, 32 * row_blocks);  // (≤ FP8_QUANTIZE_TILES: row_blocks was made so)
    const dim3 grid((unsigned)ceil_div(Cc, 8 * V), row_blocks);
    fp8_quantize_kernel<floatX, V, A><<<grid, 256, 0, ctx.stream>>>(q, qt, t.scales, record, col_sums, x, pre, R, Cc, tiles, f);
    CUDA_LAUNCH_CHECK();
}
template <class floatX, int V> inline void fp8_quantize_launch(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Target& t, float* col_sums,
                                                          int row_blocks, const floatX* x, Fp8Act act, const floatX* pre, int R, int Cc,
                                                          Fp8Format f) {
    if (act == Fp8Act::Gelu) fp8_quantize_launch<floatX, V, Fp8Act::Gelu>(ctx, q, qt, t, col_sums, row_blocks, x, pre, R, Cc, f);
    else if (act == Fp8Act::GeluBackward) fp8_quantize_launch<floatX, V, Fp8Act::GeluBackward>(ctx, q, qt, t, col_sums, row_blocks, x, pre, R, Cc, f);
    else fp8_quantize_launch<floatX, V, Fp8Act::None>(ctx, q, qt, t, col_sums, row_blocks, x, pre, R, Cc, f);
}
#endif

// The op: q and/or qt (nullptr: not wanted), with t's scales (and amax record), on ctx's device;
// column_sums += x's column sums where it is not nullptr; with act, of what act makes (see above).
template <class floatX>
inline void fp8_quantize(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Target& t, const floatX* x, int R, int Cc, Fp8Format f,
                         NoDeduce<floatX>* column_sums = nullptr, Fp8Act act = Fp8Act::None, const NoDeduce<floatX>* pre = nullptr) {
    const size_t n = (size_t)R * Cc;
    const double reads = (act == Fp8Act::GeluBackward ? 2 : 1) * (t.given ? 1 : 2) * sizeof(floatX);
    OpScope prof(ctx, 0, (double)n * (reads + (q ? 1 : 0) + (qt ? 1 : 0)), "fp8 quantize%s%s%s%s", act == Fp8Act::Gelu ? " of gelu"
                 : act == Fp8Act::GeluBackward ? " of gelu backward" : "", qt ? "+transpose" : "", column_sums ? "+column sums" : "",
                 t.given ? " (delayed)" : "");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<floatX>;
        // a block takes up to 128 rows (4 tiles), so the column sums' partials are 1/64 of x's bytes
        const int row_blocks = (int)std::max<size_t>(1, ceil_div(R, 32 * FP8_QUANTIZE_TILES));
        static Buf<float> sums_buf;
        float* sums = column_sums ? gpu_scratch(sums_buf, ctx, (size_t)row_blocks * Cc) : nullptr;
        const bool wide = Cc % P == 0 && (!qt || R % P == 0) && (uintptr_t)x % 16 == 0 && (uintptr_t)pre % 16 == 0 &&
                          (uintptr_t)q % P == 0 && (uintptr_t)qt % P == 0;
        if (wide) fp8_quantize_launch<floatX, P>(ctx, q, qt, t, sums, row_blocks, x, act, pre, R, Cc, f);
        else fp8_quantize_launch<floatX, 1>(ctx, q, qt, t, sums, row_blocks, x, act, pre, R, Cc, f);
        if (column_sums && n > 0) column_sum_add(ctx, column_sums, sums, Cc, row_blocks);
        return;
    }
#endif
    fp8_quantize_cpu(q, qt, t, x, R, Cc, f, column_sums, act, pre);
}
// ... with current scaling: scales gets s and 1/s from x's own amax
template <class floatX>
inline void fp8_quantize(const Ctx& ctx, uint8_t* q, uint8_t* qt, Fp8Scales* scales, const floatX* x, int R, int Cc, Fp8Format f) {
    fp8_quantize(ctx, q, qt, Fp8Target{scales}, x, R, Cc, f);
}

// ----------------------------------------------------------------------------
// LayerNorm straight into codes: q = fp8(LayerNorm(x)·s) and qt its transpose, with the scale
// given (delayed scaling), where x is inp, or res = inp + add (formed and written, as
// residual_layernorm_forward does). The codes, the amax record, mean and rstd are those of
// layernorm_forward and then fp8_quantize, but the LayerNorm's output is never written or read
// back: 4 bytes an element less in bf16. The model runs it where an FP8 product is the output's
// only reader (model.h: block_layernorm). E4M3: it is a forward product's x.
// A block takes FP8_LN_ROWS rows, warp w rows w, w + 8, ...: each row as layernorm_forward's
// kernel does it (ln_row_stats, ln_out_pack), its codes stored to q's row and kept in shared
// memory. Then thread t writes 16 rows of one column of qt: 16 consecutive bytes.
constexpr int FP8_LN_ROWS = 32;
inline size_t layernorm_fp8_shared(int C) { return (size_t)FP8_LN_ROWS * (C + 4); }  // (+4: rows apart in the banks)
// Where it runs: N a multiple of 16 (qt's 16-byte chunks), and the block's codes in 99 KB of shared
// memory (an Ada GPU's most: C ≤ 3164). On a GPU also rows of 16-byte packs at every pointer given
// (the op's: C a multiple of 8 for bf16, the pointers 16-byte aligned), with packs switched on.
template <class floatX> inline bool layernorm_fp8_runs(const Ctx& ctx, int N, int C, std::initializer_list<const void*> ptrs) {
    if (N % 16 || layernorm_fp8_shared(C) > 99 * 1024) return false;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) return ctx.kernels.layernorm_packs && pack_width<floatX>(C, ptrs) == PACK<floatX>;
#endif
    return true;
}

template <class floatX>
inline void layernorm_forward_fp8_cpu(uint8_t* q, uint8_t* qt, const Fp8Target& t, float* mean, float* rstd, floatX* res, const floatX* inp,
                                      const floatX* add, const floatX* w, const floatX* b, int N, int C) {
    std::vector<floatX> out((size_t)N * C);
    if (add) residual_forward_cpu(res, inp, add, (size_t)N * C);
    layernorm_forward_cpu(out.data(), mean, rstd, add ? res : inp, w, b, N, C);
    fp8_quantize_cpu(q, qt, t, out.data(), N, C, Fp8Format::E4M3, (floatX*)nullptr, Fp8Act::None, (const floatX*)nullptr);
}

#ifdef LLMC_CUDA
template <class floatX, int V, bool ADD> __global__ void __launch_bounds__(256)
layernorm_fp8_kernel(uint8_t* q, uint8_t* qt, const Fp8Scales* scales, float* amax, float* mean, float* rstd, floatX* res,
                     const floatX* inp, const floatX* add, const floatX* w, const floatX* b, int N, int C) {
    DYNAMIC_SHARED(uint8_t, tile);  // [FP8_LN_ROWS][C + 4]: the block's codes
    __shared__ float warp_part[8];
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, r0 = blockIdx.x * FP8_LN_ROWS, ld = C + 4;
    const float s = scales->scale;
    const bool rms = mean == nullptr;
    float m = 0.0f;  // max |LayerNorm(x)| of the warp's rows
    for (int i = wi; i < FP8_LN_ROWS && r0 + i < N; i += 8) {  // (the whole warp takes a row)
        const size_t off = (size_t)(r0 + i) * C;
        const float2 mr = ln_row_stats<floatX, V, ADD>(res, inp, add, off, C, rms, lane);
        const floatX* x = (ADD ? res : inp) + off;
        for (int c = lane * V; c < C; c += 32 * V) {
            const Pack<floatX, V> op = ln_out_pack<floatX, V>(x, w, b, c, mr.x, mr.y);
            Pack<uint8_t, V> o;
            for (int k = 0; k < V; k += 2) {  // (V is even: 16-byte packs)
                const float v0 = to_f(op.v[k]), v1 = to_f(op.v[k + 1]);
                m = fmaxf(m, fmaxf(fabsf(v0), fabsf(v1)));
                const uint16_t two = fp8_encode2(v0 * s, v1 * s, Fp8Format::E4M3);
                o.v[k] = (uint8_t)two;
                o.v[k + 1] = (uint8_t)(two >> 8);
            }
            store_pack<V>(q + off + c, o);
            for (int k = 0; k < V; k++) tile[i * ld + c + k] = o.v[k];
        }
        if (lane == 0) { if (!rms) mean[r0 + i] = mr.x; rstd[r0 + i] = mr.y; }
    }
    m = warp_max(m);
    if (lane == 0) warp_part[wi] = m;
    __syncthreads();
    if (threadIdx.x == 0 && amax) {  // (an atomicMax on the bits, as fp8_quantize_kernel's: exact, order-free)
        for (int v = 1; v < 8; v++) m = fmaxf(m, warp_part[v]);
        atomicMax((unsigned*)amax, __float_as_uint(m));
    }
    const int H = min(FP8_LN_ROWS, N - r0) / 16;  // 16-row chunks of a column (1 or 2: N % 16 == 0)
    for (int t = threadIdx.x; t < C * H; t += blockDim.x) {
        const int c = t / H, h = t % H;
        Pack<uint8_t, 16> o;
        for (int k = 0; k < 16; k++) o.v[k] = tile[(16 * h + k) * ld + c];
        store_pack<16>(qt + (size_t)c * N + r0 + 16 * h, o);
    }
}
template <class floatX, bool ADD>
inline void layernorm_fp8_launch(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Target& t, float* mean, float* rstd, floatX* res,
                                 const floatX* inp, const floatX* add, const floatX* w, const floatX* b, int N, int C) {
    constexpr int P = PACK<floatX>;  // (the launch rewriting for the emulator wants no nested <>)
    SHARED_OPT_IN(layernorm_fp8_kernel<floatX, P, ADD>);
    layernorm_fp8_kernel<floatX, P, ADD><<<ceil_div(N, FP8_LN_ROWS), 256, layernorm_fp8_shared(C), ctx.stream>>>(q, qt, t.scales, t.amax, mean, rstd, res, inp, add, w, b, N, C);
    CUDA_LAUNCH_CHECK();
}
#endif

// The op (where layernorm_fp8_runs, with a given scale): add == nullptr: LayerNorm(inp), else
// res = inp + add and LayerNorm(res).
template <class floatX>
inline void layernorm_forward_fp8(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Target& t, float* mean, float* rstd, floatX* res,
                                  const floatX* inp, const NoDeduce<floatX>* add, const floatX* w, const floatX* b, int N, int C) {
    if (!t.given || !layernorm_fp8_runs<floatX>(ctx, N, C, {q, qt, res, inp, add, w, b}))
        fatal("layernorm_forward_fp8: needs a given scale, N %% 16 == 0, C ≤ 3164 and, on a GPU, 16-byte packs (N = %d, C = %d)", N, C);
    const double moved = (add ? 3 : 1) * sizeof(floatX) + 2;  // (inp, add → res; the codes and their transpose)
    OpScope prof(ctx, 0, moved * N * C + 8.0 * N, "%slayernorm forward into fp8+transpose", add ? "residual + " : "");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (add) layernorm_fp8_launch<floatX, true>(ctx, q, qt, t, mean, rstd, res, inp, add, w, b, N, C);
        else layernorm_fp8_launch<floatX, false>(ctx, q, qt, t, mean, rstd, res, inp, add, w, b, N, C);
        return;
    }
#endif
    layernorm_forward_fp8_cpu(q, qt, t, mean, rstd, res, inp, add, w, b, N, C);
}

// ----------------------------------------------------------------------------
// dequantize: out = fp8 value of q · (1/s), in floatX (n elements). The codes carry at most 4
// significant bits and 1/s is a power of two, so each value is exact in bf16 (and fp32): it is
// the number the FP8 product multiplies, scaled back. matmul.cuh's fallback for FP8 products
// that cuBLASLt refuses multiplies these.
template <class floatX> inline void fp8_dequantize_cpu(floatX* out, const uint8_t* q, Fp8Format f, float inv, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = from_f<floatX>(fp8_decode(q[i], f) * inv);
}
#ifdef LLMC_CUDA
template <class floatX> __global__ void fp8_dequantize_kernel(floatX* out, const uint8_t* q, Fp8Format f, const Fp8Scales* scales, size_t n) {
    const float inv = scales->inv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<floatX>(fp8_decode(q[i], f) * inv);
}
#endif
template <class floatX> inline void fp8_dequantize(const Ctx& ctx, floatX* out, const uint8_t* q, Fp8Format f, const Fp8Scales* scales, size_t n) {
    OpScope prof(ctx, 0, (double)n * (1 + sizeof(floatX)), "fp8 dequantize");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (n == 0) return;
        fp8_dequantize_kernel<floatX><<<grid_for(n), 256, 0, ctx.stream>>>(out, q, f, scales, n);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    fp8_dequantize_cpu(out, q, f, scales->inv, n);
}

// ----------------------------------------------------------------------------
// Delayed scaling's state (see the header): per tensor, the scale this step quantizes with, the
// step's amax so far, and the amaxes of the last H steps. Tensor i is operand i % 3 (Fp8Operand)
// of product i / 3; the model numbers its products (model.h: linear_ctx).
enum Fp8Operand { FP8_X, FP8_W, FP8_DOUT };  // x and W: E4M3; dout: E5M2
inline Fp8Format fp8_operand_format(int i) { return i % 3 == FP8_DOUT ? Fp8Format::E5M2 : Fp8Format::E4M3; }

struct Fp8Delayed {
    bool on = false;
    int H = 16;                  // --fp8-amax-history: the steps a scale looks back over
    int n = 0;                   // tensors
    long long steps = 0;         // steps recorded (0: none yet, so each quantization scales from its own tensor)
    bool record = false;         // the quantizations running now are a training step's (an evaluation's only read)
    Buf<Fp8Scales> scales;       // [n] on the device: what this step quantizes with
    std::vector<Fp8Scales> host_scales;  // [n] the same, on the host
    Buf<float> amax;             // [n] on the device: this step's max |x| of each tensor so far
    std::vector<float> history;  // [n][H] on the host: tensor i's amax of step k at i·H + k % H (0 before any)
};

inline void fp8_delayed_init(const Ctx& ctx, Fp8Delayed* s, int n, int H) {
    s->on = true; s->n = n; s->H = H; s->steps = 0;
    s->scales.alloc(ctx, n);
    s->amax.alloc(ctx, n);  // (zeroed)
    s->history.assign((size_t)n * H, 0.0f);
}

// Sets each tensor's scale from the max of its history (amaxes are ≥ 0, so the zeros of steps
// not yet recorded change nothing).
inline void fp8_delayed_set_scales(const Ctx& ctx, Fp8Delayed* s) {
    s->host_scales.resize(s->n);
    for (int i = 0; i < s->n; i++) {
        float m = 0.0f;
        for (int k = 0; k < s->H; k++) m = fmaxf(m, s->history[(size_t)i * s->H + k]);
        const float scale = fp8_scale_for(m, fp8_operand_format(i));
        s->host_scales[i] = fp8_scales(scale);
    }
    ctx_copy(ctx, s->scales.data(), s->host_scales.data(), s->n * sizeof(Fp8Scales));
}

// This step's amaxes, on the host (a wait for the device).
inline std::vector<float> fp8_delayed_amaxes(const Ctx& ctx, const Fp8Delayed& s) {
    std::vector<float> a(s.n);
    ctx_copy(ctx, a.data(), s.amax.data(), a.size() * sizeof(float));
    return a;
}
// The step's end: its amaxes (the group's max, from fp8_delayed_amaxes) enter the history, the
// next step's scales follow from it, and the record starts again from 0. Returns how many
// tensors saturated in the step: those whose amax times the scale they were quantized with
// passed the format's largest (0 in the first step, which scaled each tensor from itself).
inline int fp8_delayed_push(const Ctx& ctx, Fp8Delayed* s, const std::vector<float>& amaxes) {
    int saturated = 0;
    if (s->steps > 0)
        for (int i = 0; i < s->n; i++) saturated += amaxes[i] * s->host_scales[i].scale > fp8_largest(fp8_operand_format(i));
    const int slot = (int)(s->steps % s->H);
    for (int i = 0; i < s->n; i++) s->history[(size_t)i * s->H + slot] = amaxes[i];
    s->steps++;
    fp8_delayed_set_scales(ctx, s);
    ctx_zero(ctx, s->amax.data(), (size_t)s->n * sizeof(float));
    return saturated;
}

// The history as a checkpoint keeps it: per tensor, its last min(steps, H) amaxes oldest first;
// and back (a history of another length keeps the newest that fit).
inline std::vector<float> fp8_delayed_saved(const Fp8Delayed& s) {
    const long long m = std::min<long long>(s.steps, s.H);
    std::vector<float> out;
    for (int i = 0; i < s.n; i++)
        for (long long k = s.steps - m; k < s.steps; k++) out.push_back(s.history[(size_t)i * s.H + k % s.H]);
    return out;
}
inline void fp8_delayed_restore(const Ctx& ctx, Fp8Delayed* s, long long steps, const std::vector<float>& saved) {
    const long long m = saved.size() / std::max(s->n, 1), keep = std::min<long long>(m, s->H);
    std::fill(s->history.begin(), s->history.end(), 0.0f);
    s->steps = steps;
    for (int i = 0; i < s->n; i++)
        for (long long k = steps - keep; k < steps; k++) s->history[(size_t)i * s->H + k % s->H] = saved[(size_t)i * m + (k - (steps - m))];
    fp8_delayed_set_scales(ctx, s);
}

// The target of operand o of the product ctx runs (ctx.fp8_delayed, ctx.fp8_product): the op's
// own scratch scales under current scaling (and in delayed scaling's first step, recording),
// else the state's.
inline Fp8Target fp8_target(const Ctx& ctx, Fp8Operand o, Fp8Scales* scratch) {
    Fp8Delayed* s = ctx.fp8_delayed;
    if (!s || !s->on) return {scratch};
    const int i = ctx.fp8_product * 3 + o;
    float* amax = s->record ? s->amax.data() + i : nullptr;
    if (s->steps == 0) return {scratch, amax, false};
    return {s->scales.data() + i, amax, true};
}

// Why this ctx's device cannot multiply in FP8, or "": the CPU emulates it; a GPU needs compute
// capability 8.9 (Ada) or newer, whose tensor cores take FP8.
inline std::string fp8_device_problem(const Ctx& ctx) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        int dev = 0, major = 0, minor = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        if (major * 10 + minor < 89) {
            char why[200];
            snprintf(why, sizeof why, "this GPU (compute capability %d.%d) has no FP8 tensor cores; they came with 8.9 "
                     "(Ada, Hopper: L40, H100) — use --precision bf16", major, minor);
            return why;
        }
    }
#endif
    (void)ctx;
    return "";
}

// The dimensions an FP8 product takes (see the header): "" or what is wrong.
inline std::string fp8_shape_problem(int N, int C, int OC) {
    char why[200] = "";
    if (N % 16 || C % 16 || OC % 16)
        snprintf(why, sizeof why, "an FP8 product needs every dimension a multiple of 16 (cuBLASLt's FP8 kernels), "
                 "and this one is %d rows × %d -> %d", N, C, OC);
    return why;
}
