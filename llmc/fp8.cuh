/*
fp8.cuh — 8-bit floats for the transformer blocks' products (--precision fp8).

With --precision fp8 the model is the bf16 model (bf16 parameters and activations, fp32 master
weights, optimizer state, statistics), except that the products of the blocks' linear layers
(qkv, attention projection, fc, fc projection; Llama's gate|up and down) multiply 8-bit floats
on the tensor cores, at twice bf16's rate on Hopper. The classifier's product (the logits, whose
softmax is sensitive to small errors), attention, the norms and the optimizer stay as they were:
the recipe of NVIDIA's Transformer Engine and of the published FP8 GPT and Llama runs.

Formats (the OCP 8-bit floats, what Hopper's tensor cores read):
  E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN; the
        largest number is 448. What the forward multiplies: activations and weights.
  E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like (infinities, NaNs); the
        largest finite number is 57344. What the backward multiplies the gradients in: more
        range, less precision.
fp8_encode rounds to nearest even and saturates at ±largest (the PTX cvt .satfinite rule): a
number too large for the format becomes the largest, never an infinity; NaN stays NaN. It is
integer arithmetic on the fp32 bits, the same function on the host and the GPU, so the CPU
reference and the kernels quantize bit for bit alike (gpucheck_ops also holds it to the GPU's
own cvt instruction).

Scaling: one scale per tensor, from the tensor itself ("current scaling"):
  amax = max |x| over the tensor,   s = 2^⌊log₂(largest / amax)⌋,   q = fp8(x · s)
so the tensor's largest element lands in the format's top binade. A power of two: x·s is exact,
the cast is the only rounding, and the product's dequantization (times 1/s_a · 1/s_b, which
cuBLASLt applies to the fp32 accumulator) is exact too. So the CPU emulation and cuBLASLt differ
only in the order of the fp32 sums, like the bf16 products. Current scaling costs one more read
of each operand (the amax pass) and keeps no state, so resume and checkpoints are unchanged.
Transformer Engine's delayed scaling takes the scale from earlier steps' amaxes instead, saving
that read at the cost of an amax history in the checkpoint and a scale that may lag a spike.
With tensor parallelism each rank scales its own shard (an all-reduce of one number per product
would give the whole tensor's), so tp > 1 rounds differently from tp = 1.

The products. cuBLASLt's FP8 kernels on Hopper take only the "TN" form: both operands with the
summed dimension contiguous (row-major M×K and N×K). The three products of a linear layer
(matmul.cuh) in that form, with D[r, c] = Σ_k X[r, k]·Y[c, k]:
  forward  out (N×OC)  = x (N×C)  · W (OC×C)ᵀ            x, W: E4M3
  dinp     (N×C)       = dout (N×OC) · Wᵀ (C×OC)ᵀ          dout: E5M2, Wᵀ: E4M3
  dW       (OC×C)     += doutᵀ (OC×N) · xᵀ (C×N)ᵀ          doutᵀ: E5M2, xᵀ: E4M3
so the backward quantizes dout both as it is and transposed, and W and x transposed:
fp8_quantize writes either or both in one pass. Scratch: one byte per element of each operand
(N·C + OC·C bytes forward, 2·N·OC + OC·C + N·C backward), made again in every product from the
bf16 tensors (nothing FP8 is kept between forward and backward). Every dimension (N = B·T, C,
OC) must be a multiple of 16: cuBLASLt wants 16-byte leading dimensions of the FP8 matrices.
The bias gradient sums the bf16 dout.

What it costs (arithmetic, not yet a measurement: `make bench` part fp8 and dev/cuda/matmul.cu
v3 time it). Each quantize reads its bf16 tensor twice (the amax, then the cast) and writes a
byte (two with the transpose). A GPT-2 block's products have 7C input features a position (C
each for qkv, attproj and fc, 4C for fcproj) and 9C output features (3C, C, 4C, C): 5 bytes
per input feature forward, 6 per output feature for dout and 5 per input feature for xᵀ
backward, 124·C bytes a position a block. GPT-2 124M at B·T = 131072: ~150 GB a step,
~50 ms at 3 TB/s, against ~57 ms saved if its ~115 ms of block products (the bf16 profile in
dev/gpu_results) ran at twice the rate: about even. 1558M at B·T = 16384: ~52 ms against ~114
ms saved. The known ways to shrink it: the amax from the kernel that makes the tensor (the
LayerNorm, the GELU, the attention output) or from the previous step (delayed scaling), and
the cast fused into that kernel's store, so that most quantizations cost nothing but a byte.

Tests: test/test_ops.cpp (encode/decode over all 256 codes of each format against a decoder
written from the definition above, rounding of ties and saturation, scale, quantize and the FP8
linear against its definition), test/gpucheck_ops.cu (kernels and cuBLASLt against the CPU
reference, encode against the GPU's cvt), test/test_gpu_train.sh (FP8 training on the GPU
against the CPU's; the memory plan with the scratch; the refusal below 8.9), test/test_train.sh
(the FP8 loss curve against fp32's, resume bit for bit), test/test_tp.sh (tp = 2 against one
process), dev/cuda/matmul.cu (v3, v4: the products timed with their quantize passes).
*/
#pragma once
#include <cmath>
#include "common.h"
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

// The 2 floats a quantized tensor comes with: its scale s and 1/s (what the product multiplies by).
struct Fp8Scales { float scale, inv; };

// ----------------------------------------------------------------------------
// quantize: q (R×Cc, row-major) and/or qt (Cc×R, its transpose) = fp8(x·s), s from amax(x);
// scales (device memory on the GPU) get s and 1/s.

template <class T>
inline void fp8_quantize_cpu(uint8_t* q, uint8_t* qt, Fp8Scales* scales, const T* x, int R, int Cc, Fp8Format f) {
    const size_t n = (size_t)R * Cc;
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) amax = std::max(amax, fabsf(to_f(x[i])));  // (NaNs are skipped, as fmaxf does)
    const float s = fp8_scale_for(amax, f);
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            const uint8_t v = fp8_encode(to_f(x[(size_t)r * Cc + c]) * s, f);
            if (q) q[(size_t)r * Cc + c] = v;
            if (qt) qt[(size_t)c * R + r] = v;
        }
    *scales = {s, 1.0f / s};
}

#ifdef LLMC_CUDA
// amax in two launches: per-block maxima (grid-stride, warp_max, then the block's warps through
// shared memory), then one block over those, which writes the scales. max is exact and
// order-free, so the result does not depend on the launch shape.
static const int FP8_AMAX_BLOCKS = 1024;
template <class T, int V> __global__ void __launch_bounds__(256) fp8_amax_partial_kernel(float* partial, const T* x, size_t n) {
    __shared__ float sh[8];
    float m = 0.0f;
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i < n; i += (size_t)gridDim.x * blockDim.x * V) {
        const Pack<T, V> p = load_pack<V>(x + i);  // (n % V == 0)
        for (int k = 0; k < V; k++) m = fmaxf(m, fabsf(to_f(p.v[k])));
    }
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) m = fmaxf(m, sh[w]);
        partial[blockIdx.x] = m;
    }
}
__global__ void __launch_bounds__(256) fp8_scale_kernel(Fp8Scales* scales, const float* partial, int P, Fp8Format f) {
    __shared__ float sh[8];
    float m = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) m = fmaxf(m, partial[i]);
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) m = fmaxf(m, sh[w]);
        const float s = fp8_scale_for(m, f);
        *scales = {s, 1.0f / s};
    }
}
// One block per tile of 32 rows × 8·V columns, 256 threads. V = 16 bytes of x (8 bf16) where
// the rows allow it (Cc and, for the transpose, R multiples of V; aligned pointers), else 1.
// Thread t reads one pack of x (row t/8, columns (t%8)·V…) and stores its V codes as one store to
// q's row; the tile's codes go through shared memory, and thread t then stores V consecutive
// bytes of one qt row (tile column t/(32/V), rows (t%(32/V))·V…). Every row segment of q and qt
// is 32 or 8·V bytes written by consecutive threads.
template <class T, int V> __global__ void __launch_bounds__(256)
fp8_quantize_kernel(uint8_t* q, uint8_t* qt, const Fp8Scales* scales, const T* x, int R, int Cc, Fp8Format f) {
    constexpr int TR = 32, TC = 8 * V, CH = TR / V;  // the tile's rows and columns; V-byte chunks of a qt row
    __shared__ uint8_t tile[TR][TC + 4];
    const float s = scales->scale;
    const int r0 = blockIdx.y * TR, c0 = blockIdx.x * TC;
    {
        const int i = threadIdx.x / 8, j = threadIdx.x % 8 * V, r = r0 + i, c = c0 + j;
        if (r < R && c < Cc) {  // (Cc % V == 0: the pack is whole)
            const Pack<T, V> p = load_pack<V>(x + (size_t)r * Cc + c);
            Pack<uint8_t, V> o;
            for (int k = 0; k < V; k++) o.v[k] = fp8_encode(to_f(p.v[k]) * s, f);
            if (q) store_pack<V>(q + (size_t)r * Cc + c, o);
            for (int k = 0; k < V; k++) tile[i][j + k] = o.v[k];
        }
    }
    if (!qt) return;
    __syncthreads();
    const int jc = threadIdx.x / CH, k0 = threadIdx.x % CH * V, c = c0 + jc, r = r0 + k0;
    if (c < Cc && r < R) {  // (R % V == 0: the chunk is whole)
        Pack<uint8_t, V> o;
        for (int k = 0; k < V; k++) o.v[k] = tile[k0 + k][jc];
        store_pack<V>(qt + (size_t)c * R + r, o);
    }
}
template <class T, int V> inline void fp8_quantize_launch(const Ctx& ctx, uint8_t* q, uint8_t* qt, const Fp8Scales* scales,
                                                          const T* x, int R, int Cc, Fp8Format f) {
    fp8_quantize_kernel<T, V><<<dim3(ceil_div(Cc, 8 * V), ceil_div(R, 32)), 256, 0, ctx.stream>>>(q, qt, scales, x, R, Cc, f);
    CUDA_LAUNCH_CHECK();
}
#endif

// The op: q and/or qt (nullptr: not wanted) and the scales, on ctx's device.
template <class T>
inline void fp8_quantize(const Ctx& ctx, uint8_t* q, uint8_t* qt, Fp8Scales* scales, const T* x, int R, int Cc, Fp8Format f) {
    const size_t n = (size_t)R * Cc;
    OpScope prof(ctx, 0, (double)n * (2 * sizeof(T) + (q ? 1 : 0) + (qt ? 1 : 0)), "fp8 quantize%s", qt ? "+transpose" : "");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        static Buf<float> partial_buf;
        constexpr int P = PACK<T>;
        const bool packs = pack_width<T>(n, {x}) > 1;
        const int blocks = (int)std::max<size_t>(1, std::min<size_t>(FP8_AMAX_BLOCKS, ceil_div(n, 256 * (packs ? P : 1))));
        float* partial = gpu_scratch(partial_buf, ctx, (size_t)blocks);
        if (packs) fp8_amax_partial_kernel<T, P><<<blocks, 256, 0, ctx.stream>>>(partial, x, n);
        else fp8_amax_partial_kernel<T, 1><<<blocks, 256, 0, ctx.stream>>>(partial, x, n);
        CUDA_LAUNCH_CHECK();
        fp8_scale_kernel<<<1, 256, 0, ctx.stream>>>(scales, partial, blocks, f);
        CUDA_LAUNCH_CHECK();
        if (n == 0) return;
        const bool wide = Cc % P == 0 && (!qt || R % P == 0) && (uintptr_t)x % 16 == 0 && (uintptr_t)q % P == 0 && (uintptr_t)qt % P == 0;
        if (wide) fp8_quantize_launch<T, P>(ctx, q, qt, scales, x, R, Cc, f);
        else fp8_quantize_launch<T, 1>(ctx, q, qt, scales, x, R, Cc, f);
        return;
    }
#endif
    fp8_quantize_cpu(q, qt, scales, x, R, Cc, f);
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
