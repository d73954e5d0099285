/*
encoder.cuh — token + position embedding.

  forward:  out[b,t,:] = wte[tok[b,t], :] + wpe[t, :]
  backward: dwte[tok[b,t], :] += dout[b,t,:]      dwpe[t, :] += dout[b,t,:]

The backward is a scatter-add into dwte; the CPU loop runs (b,t) in order so the sum is
deterministic. Parameter gradients accumulate (+=) so gradient accumulation needs no copy.
Test: test/test_ops.cpp (finite differences of the forward).
*/
#pragma once
#include "common.h"

inline void encoder_forward_cpu(float* out, const int* tok, const float* wte, const float* wpe,
                                int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* te = wte + (size_t)tok[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
        }
}

inline void encoder_backward_cpu(float* dwte, float* dwpe, const float* dout, const int* tok,
                                 int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            float* dte = dwte + (size_t)tok[b * T + t] * C;
            float* dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) { dte[c] += d[c]; dpe[c] += d[c]; }
        }
}

inline void encoder_forward(const Ctx&, float* out, const int* tok, const float* wte,
                            const float* wpe, int B, int T, int C) {
    encoder_forward_cpu(out, tok, wte, wpe, B, T, C);
}
inline void encoder_backward(const Ctx&, float* dwte, float* dwpe, const float* dout,
                             const int* tok, int B, int T, int C) {
    encoder_backward_cpu(dwte, dwpe, dout, tok, B, T, C);
}
