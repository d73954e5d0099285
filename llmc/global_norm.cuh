/*
global_norm.cuh — the squared L2 norm of the gradient, and the clipping factor from it.

  norm² = Σ_i g_i²      (summed in double over fixed chunks of 2^16, chunks summed in order)
  clip factor = max_norm / norm  if norm > max_norm > 0, else 1

The op returns the *squared* sum of the elements it is given, so a parallel layout can add the
partial sums of its shards (an all-reduce) before the square root. The chunking is fixed, not
per thread, so the result does not depend on the thread count.

Test: test/test_ops.cpp (against a plain double loop).
*/
#pragma once
#include <cmath>
#include "common.h"

inline double global_norm_squared_cpu(const float* g, size_t n) {
    const size_t chunk = 1 << 16;
    size_t nchunks = ceil_div(n, chunk);
    std::vector<double> part(nchunks, 0.0);
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        double s = 0.0;
        size_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (size_t i = c * chunk; i < end; i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (double p : part) total += p;
    return total;
}

inline double global_norm_squared(const Ctx&, const float* g, size_t n) {
    return global_norm_squared_cpu(g, n);
}

inline float grad_clip_factor(float norm, float max_norm) {
    return (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
}
