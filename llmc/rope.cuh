/*
rope.cuh — rotary position embeddings (RoPE, Llama's), in place on the q and k heads of qkv.

A head's channels are pairs (x₀, x₁); at position t pair i turns by a = t·θ^(−2i/hd):

  forward:  y₀ = x₀·cos a − x₁·sin a,   y₁ = x₀·sin a + x₁·cos a
  backward: the rotation by −a

So q at t and k at u meet as q·R(u − t)k: attention sees their distance. Llama 3.1's scaling
stretches the slow pairs (RopeScaling). The angles are a table computed in double on the host
and rounded once, so the CPU and the GPU turn by the same numbers.

Main functions: rope_table, rope_forward, rope_backward.

Tests: test/test_ops.cpp (finite differences; q·k depends on the distance alone),
test/gpucheck_ops.cu (CUDA against the CPU). More: docs/kernels.md.
*/
#pragma once
#include <cmath>
#include <vector>
#include "common.h"
#include "profiler.h"

// Llama 3.1's frequency scaling (the header's formula); factor 0: none.
struct RopeScaling { int factor = 0, low = 1, high = 4, original = 8192; };

// Pair i's frequency θ^(−2i/hd), scaled as the header says.
inline double rope_frequency(int i, int hd, double theta, const RopeScaling& s) {
    const double f = std::pow(theta, -2.0 * i / hd);
    if (s.factor == 0) return f;
    const double wavelen = 2 * M_PI / f;
    if (wavelen < (double)s.original / s.high) return f;
    if (wavelen > (double)s.original / s.low) return f / s.factor;
    const double m = ((double)s.original / wavelen - s.low) / (double)(s.high - s.low);
    return (1 - m) * f / s.factor + m * f;
}

// cos and sin of every angle, [t][i][2] for the T positions pos[0..T) and the hd/2 pairs.
inline std::vector<float> rope_table(const int* pos, int T, int hd, double theta, const RopeScaling& scaling = {}) {
    std::vector<float> table((size_t)T * hd);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double a = pos[t] * rope_frequency(i, hd, theta, scaling);
            table[((size_t)t * hd / 2 + i) * 2] = (float)std::cos(a);
            table[((size_t)t * hd / 2 + i) * 2 + 1] = (float)std::sin(a);
        }
    return table;
}

// Pair (x₀, x₁) turned by the angle whose cos and sin are cs[0], cs[1], backward: by its negative.
HD inline void rope_turn(float x0, float x1, const float* cs, bool backward, float* y0, float* y1) {
    const float c = cs[0], s = backward ? -cs[1] : cs[1];
    *y0 = x0 * c - x1 * s;
    *y1 = x0 * s + x1 * c;
}

template <class floatX> inline void rope_cpu(floatX* x, const float* table, int B, int T, size_t stride, int heads, int hd, bool backward) {
    #pragma omp parallel for
    for (int r = 0; r < B * T; r++) {
        const int t = r % T;
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                floatX* p = x + (size_t)r * stride + (size_t)h * hd + 2 * i;
                float y0, y1;
                rope_turn(to_f(p[0]), to_f(p[1]), table + ((size_t)t * hd / 2 + i) * 2, backward, &y0, &y1);
                p[0] = from_f<floatX>(y0);
                p[1] = from_f<floatX>(y1);
            }
    }
}

#ifdef LLMC_CUDA
// one thread per pair: memory-bound (each pair read and written once, its table entry read)
template <class floatX> __global__ void rope_kernel(floatX* x, const float* table, int B, int T, size_t stride, int heads, int hd, bool backward) {
    const size_t pairs = (size_t)heads * hd / 2, n = (size_t)B * T * pairs;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const size_t r = k / pairs, in_row = k % pairs;
        const int t = (int)(r % T), h = (int)(in_row / (hd / 2)), i = (int)(in_row % (hd / 2));
        floatX* p = x + r * stride + (size_t)h * hd + 2 * i;
        float y0, y1;
        rope_turn(to_f(p[0]), to_f(p[1]), table + ((size_t)t * hd / 2 + i) * 2, backward, &y0, &y1);
        p[0] = from_f<floatX>(y0);
        p[1] = from_f<floatX>(y1);
    }
}
#endif

// x: B·T rows of stride elements, the first `heads` heads of hd turned in place; table: rope_table's
// (on the Ctx's device). backward: the gradient (the opposite turn).
template <class floatX>
inline void rope(const Ctx& ctx, floatX* x, const float* table, int B, int T, size_t stride, int heads, int hd, bool backward) {
    OpScope prof(ctx, 0, 2.0 * B * T * heads * hd * sizeof(floatX), backward ? "rope backward" : "rope forward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        rope_kernel<<<grid_for((size_t)B * T * heads * hd / 2), 256, 0, ctx.stream>>>(x, table, B, T, stride, heads, hd, backward);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    rope_cpu(x, table, B, T, stride, heads, hd, backward);
}
template <class floatX> inline void rope_forward(const Ctx& ctx, floatX* qkv, const float* table, int B, int T, size_t stride, int heads, int hd) {
    rope(ctx, qkv, table, B, T, stride, heads, hd, false);
}
template <class floatX> inline void rope_backward(const Ctx& ctx, floatX* dqkv, const float* table, int B, int T, size_t stride, int heads, int hd) {
    rope(ctx, dqkv, table, B, T, stride, heads, hd, true);
}
