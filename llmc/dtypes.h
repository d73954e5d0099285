/*
dtypes.h — the three dtypes a run computes in (floatX): float, bf16 and fp16.

bf16 and fp16 are 16-bit patterns. to_f widens one to fp32 exactly; from_f<floatX> rounds an
fp32 to the nearest even, and a NaN stays a NaN. On the GPU both are the CUDA intrinsics; on the
CPU they are the bit operations below, which give the same bits. A 16-bit op on the CPU is its
fp32 op with each output rounded once (memory.h: F32View).

Main functions: to_f, from_f, vec_cast, vec_widen, dtype_name, is_half_type.

Tests: test/test_ops.cpp (bf16 and fp16 rounding against known bit patterns, NaN, overflow).
More: docs/backends.md.
*/
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#include "errors.h"

// ----------------------------------------------------------------------------
// bf16 <-> fp32 (round to nearest even; NaN stays NaN)

#ifdef LLMC_CUDA
#define HD __host__ __device__
#else
#define HD
#endif

inline uint16_t fp32_to_bf16(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float bf16_to_fp32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x;
}

// The bf16 storage type, the same 2 bytes on the host and the GPU (cuBLASLt's CUDA_R_16BF).
struct bf16 { uint16_t bits; };

// fp16 <-> fp32: IEEE binary16, 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite
// 65504, subnormals down to 2^-24. Round to nearest even; past the largest finite value (from
// 65520 up) it is ±inf, as IEEE (and __float2half_rn) say — the overflow dynamic loss scaling
// watches for (train_gpt.cu). NaN stays NaN. Each case is computed and one picked (no branches),
// so the compiler vectorizes the conversion loops (F32View): as fast as bf16's on the CPU.
inline uint16_t fp32_to_fp16(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    // below 2^-14 (subnormal or 0): |x| + 0.5 rounds |x| to a multiple of 2^-24 (0.5's ulp), by
    // the FPU's round to nearest even; the multiple is the code
    float f; memcpy(&f, &a, 4);
    f += 0.5f;
    uint32_t v; memcpy(&v, &f, 4);
    const uint32_t subnormal = v - 0x3f000000u;
    // normal: the exponent rebiased (127 → 15: minus 112 << 23), the 13 dropped bits rounded to
    // nearest even (add 0xfff, and 1 more when the kept part is odd); a carry out of the top
    // binade (from 65520) lands on the inf code
    const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN (quiet) : ≥ 65536 or inf
    return (uint16_t)(sign | (a >= 0x47800000u ? big : a < 0x38800000u ? subnormal : normal));
}
inline float fp16_to_fp32(uint16_t h) {
    // the 15 magnitude bits in fp32's places, the exponent rebiased (+112 << 23); exponent 31
    // (inf, NaN) goes the rest of the way to 255; exponent 0 (subnormal, 0) is made 2^-14·(1 + m/1024)
    // and 2^-14 taken off (exact): m·2^-24
    const uint32_t shifted = (uint32_t)(h & 0x7fffu) << 13, e = shifted & 0x0f800000u;
    uint32_t u = shifted + (112u << 23);
    u += e == 0x0f800000u ? 112u << 23 : 0u;
    u += e == 0 ? 1u << 23 : 0u;
    float x; memcpy(&x, &u, 4);
    x -= e == 0 ? 0x1p-14f : 0.0f;
    uint32_t r; memcpy(&r, &x, 4);
    r |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&x, &r, 4);
    return x;
}

// The fp16 storage type (cuBLASLt's CUDA_R_16F): --precision fp16, with dynamic loss scaling.
struct fp16 { uint16_t bits; };

HD inline float to_f(float x) { return x; }
HD inline float to_f(bf16 x) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)x.bits << 16);
#else
    return bf16_to_fp32(x.bits);
#endif
}
HD inline float to_f(fp16 x) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(x.bits));
#else
    return fp16_to_fp32(x.bits);
#endif
}
template <class floatX> HD inline floatX from_f(float x);
template <> HD inline float from_f<float>(float x) { return x; }
template <> HD inline bf16 from_f<bf16>(float x) {
#ifdef __CUDA_ARCH__
    return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
#else
    return bf16{fp32_to_bf16(x)};
#endif
}
template <> HD inline fp16 from_f<fp16>(float x) {
#ifdef __CUDA_ARCH__
    return fp16{__half_as_ushort(__float2half_rn(x))};
#else
    return fp16{fp32_to_fp16(x)};
#endif
}
// bf16 or fp16: the 16-bit float types, which the tensor-core kernels take (flash_attention.cuh)
template <class floatX> inline constexpr bool is_half_type = std::is_same_v<floatX, bf16> || std::is_same_v<floatX, fp16>;

// Host vectors converted element by element (tests and kernel playgrounds): rounded to floatX once,
// and back. (On every core: a playground's inputs are up to ~10^9 elements.)
template <class floatX> inline std::vector<floatX> vec_cast(const std::vector<float>& v) {
    std::vector<floatX> r(v.size());
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); i++) r[i] = from_f<floatX>(v[i]);
    return r;
}
template <class floatX> inline std::vector<float> vec_widen(const std::vector<floatX>& v) {
    std::vector<float> r(v.size());
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); i++) r[i] = to_f(v[i]);
    return r;
}

enum class DType { FP32, BF16, FP16 };
template <class floatX> inline DType dtype_of();
template <> inline DType dtype_of<float>() { return DType::FP32; }
template <> inline DType dtype_of<bf16>() { return DType::BF16; }
template <> inline DType dtype_of<fp16>() { return DType::FP16; }
template <class floatX> inline const char* dtype_name() {
    return dtype_of<floatX>() == DType::FP32 ? "fp32" : dtype_of<floatX>() == DType::BF16 ? "bf16" : "fp16";
}

// Keeps a parameter out of template argument deduction (a nullptr bias must not decide the dtype).
template <class E> struct NoDeduceT { using type = E; };
template <class E> using NoDeduce = typename NoDeduceT<E>::type;
