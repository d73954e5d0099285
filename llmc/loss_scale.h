/*
loss_scale.h — dynamic loss scaling, for --precision fp16.

Why. fp16 has 5 exponent bits: its finite values run from 2^-24 (the smallest subnormal) to
65504. Activations fit; gradients often do not: ∂loss/∂logits is (p − y)/(B·T), and the weight
gradients of a long run are mostly far below 2^-14, where fp16 first loses bits and then flushes
them to zero. bf16 has fp32's exponent range and never needs this; fp16 has 3 more mantissa
bits and needs it.

The idea (Micikevicius et al., "Mixed Precision Training", 2018; torch.cuda.amp.GradScaler):
multiply the loss by S before the backward, so that every gradient is S times larger and sits
inside fp16's range, and divide the weight gradients by S before the update, in fp32:

    dloss' = S·dloss                  (the classifier's ∂loss/∂logits: fused_classifier)
    g'     = S·g                      (every gradient the backward writes, in fp16)
    norm   = ‖g'‖ / S                 (global_norm, in double; what clipping and the log see)
    θ     −= AdamW(g' · clip / S)     (adamw's grad scale: the fp32 master update is S-free)

S is a power of two, so the scaling itself rounds nothing (short of overflow or subnormals).

Dynamic. No S suits a whole run: gradients shrink as training goes on. So S starts high
(--loss-scale, 2^16) and moves:
  - an overflow — a non-finite gradient norm, i.e. some fp16 gradient became inf or NaN — means
    S was too high: the step's update is skipped (weights and moments untouched: dp_skip_update,
    the data and the schedule move on) and S is halved;
  - after --loss-scale-every (2000) steps in a row without one, S is doubled.
Every rank sees the same all-reduced norm (data_parallel.h), so every rank decides the same. An
overflow at S = 1 means the gradients overflow fp16 unscaled: the run stops and says to use bf16.
S and the count of clean steps are part of a checkpoint (history.bin), so a resumed run scales,
skips and grows exactly as the straight run does.

Off (S = 1, nothing skipped) for fp32, bf16 and fp8.

Test: test/test_ops.cpp (the rules: halve and skip, grow after N clean steps, the S = 1 stop),
test/test_train.sh (fp16 within 2e-2 of fp32; a start at S = 2^40 overflows, halves its way down
and trains; resume bit-exact with S mid-run), test/test_gpu_train.sh (fp16 on the GPU kernels).
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
