/*
loss_scale.h — dynamic loss scaling, for --precision fp16.

fp16's range (2^-24 to 65504) loses most of a long run's weight gradients. So the loss is
multiplied by S before the backward and the gradients divided by S before the update, in fp32:

  dloss' = S·dloss,   norm = ‖g'‖ / S,   θ −= AdamW(g' · clip / S)

S is a power of two, so the scaling rounds nothing. An overflow (a non-finite norm) skips the
update and halves S; --loss-scale-every clean steps in a row double it; an overflow at S = 1
stops the run. S is in the checkpoint. Off (S = 1) for fp32, bf16 and fp8.

Main functions: loss_scale_step (the step's decision), loss_scale_factor, loss_scale_floor_hit.

Tests: test/test_ops.cpp (the rules), test/test_train.sh (fp16 against fp32; overflows at
S = 2^40; resume bit-exact), test/test_gpu_train.sh (fp16 on the GPU). More: docs/training.md.
*/
#pragma once
#include <cmath>
#include <cstdint>

struct LossScale {
    bool on = false;             // --precision fp16
    double scale = 65536.0;      // S (a power of two)
    int64_t every = 2000;        // clean steps before S doubles
    int64_t clean = 0;           // clean steps since the last overflow or doubling
};

// The factor on the loss gradient: S, or 1 when loss scaling is off.
inline float loss_scale_factor(const LossScale& ls) { return ls.on ? (float)ls.scale : 1.0f; }

// The outcome of one step, given the norm of its scaled gradients.
struct LossScaleStep {
    bool overflow = false;       // the update is to be skipped
    double used = 1.0;           // the S this step's gradients carry (divide by it)
};
inline LossScaleStep loss_scale_step(LossScale* ls, double scaled_norm) {
    LossScaleStep r;
    if (!ls->on) return r;
    r.used = ls->scale;
    if (!std::isfinite(scaled_norm)) {
        r.overflow = true;
        ls->scale = ls->scale / 2;  // (the caller stops the run when it was 1: see loss_scale_floor_hit)
        ls->clean = 0;
    } else if (++ls->clean >= ls->every) {
        ls->scale = ls->scale * 2;
        ls->clean = 0;
    }
    return r;
}
// An overflow with S = 1: the gradients are not finite even unscaled (scaling cannot help).
inline bool loss_scale_floor_hit(const LossScaleStep& r) { return r.overflow && r.used <= 1.0; }
