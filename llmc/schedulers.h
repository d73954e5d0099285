/*
schedulers.h — the learning rate as a function of the optimizer step.

For step s = 0, 1, … (the first step is 0), peak rate lr, warmup W, total steps N and
floor lr_min = final_lr_frac · lr:
  warmup    s < W:  lr · (s+1)/W
  then, with progress p = (s − W)/(N − W) in [0, 1):
  cosine    lr_min + ½(1 + cos πp)(lr − lr_min)
  linear    lr − p·(lr − lr_min)
  constant  lr
  wsd       warmup-stable-decay: lr until the last cooldown_frac of the steps, then linear
            to lr_min over them
Test: test/test_ops.cpp (values at the boundaries).
*/
#pragma once
#include <cmath>
#include <string>

struct LRSchedule {
    std::string kind = "cosine";
    float lr = 3e-4f, final_lr_frac = 0.0f, cooldown_frac = 0.2f;
    int warmup = 0, total = 1;
};

inline float lr_at(const LRSchedule& s, int step) {
    if (step < s.warmup) return s.lr * (step + 1) / s.warmup;
    float lo = s.lr * s.final_lr_frac;
    float p = s.total > s.warmup ? (float)(step - s.warmup) / (float)(s.total - s.warmup) : 0.0f;
    if (s.kind == "cosine") return lo + 0.5f * (1.0f + cosf((float)M_PI * p)) * (s.lr - lo);
    if (s.kind == "linear") return s.lr - p * (s.lr - lo);
    if (s.kind == "wsd") {
        float start = 1.0f - s.cooldown_frac;  // progress at which the cooldown begins
        if (p < start) return s.lr;
        return s.lr - (p - start) / s.cooldown_frac * (s.lr - lo);
    }
    return s.lr;  // constant
}
