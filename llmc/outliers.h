/*
outliers.h — skipping the update of a step whose loss or gradient norm is an outlier.

Long runs (GPT-2 1558M, or any run at a high learning rate) see rare spikes: one batch whose
loss, or whose gradient, is far above the recent ones. Applying its update can throw the model
off for thousands of steps. With --skip-loss-z Z (and/or --skip-norm-z Z) the trainer compares each
step's loss (gradient norm, before clipping) with the last W steps' (--skip-window, 128):

    z = (x − mean) / std     (mean and population std of the W values before this step)

and when z > Z it drops the step's gradients: the weights and AdamW's moments stay as they were,
while the step still counts (the data moves on, the learning rate follows the schedule). A
non-finite value counts as z = +∞ from the first step; otherwise, until W steps are known, there
is no z and nothing is skipped.
Every step's value enters the window, a skipped one too, so a spike also widens the window's std
for the next W steps (as llm.c's outlier detector does). The window is recomputed from its W
values at each step (no running sums to drift), and it is part of a checkpoint (history.bin), so
a resumed run skips exactly the steps the straight run does. Every rank sees the same (all-
reduced) loss and norm, so every rank makes the same decision without a word exchanged.

Test: test/test_train.sh (a skipped step leaves the weights and moments unchanged byte for byte;
resume), test/test_dp.sh (the ZeRO stages skip alike), test/test_ops.cpp (z of a known window).
*/
#pragma once
#include <cmath>
#include <deque>
#include <limits>

struct OutlierWindow {
    int size = 128;            // W
    std::deque<double> values;  // the last ≤ W values, oldest first
};

// z of x against the window: +∞ for a non-finite x, else NaN while the window holds fewer than W
// values. A window of equal values (std 0) gives +∞ for anything above them and 0 otherwise.
inline double outlier_z(const OutlierWindow& w, double x) {
    if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
    if ((int)w.values.size() < w.size) return std::numeric_limits<double>::quiet_NaN();
    double mean = 0.0, var = 0.0;
    for (double v : w.values) mean += v;
    mean /= w.size;
    for (double v : w.values) var += (v - mean) * (v - mean);
    const double std_dev = std::sqrt(var / w.size);
    if (std_dev == 0.0) return x > mean ? std::numeric_limits<double>::infinity() : 0.0;
    return (x - mean) / std_dev;
}

// Adds this step's value (a non-finite one is left out: it would poison every later z).
inline void outlier_push(OutlierWindow* w, double x) {
    if (!std::isfinite(x)) return;
    w->values.push_back(x);
    while ((int)w->values.size() > w->size) w->values.pop_front();
}
