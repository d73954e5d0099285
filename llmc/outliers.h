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
reduced) loss and norm, so every rank decides alike. divergence_check stops a diverged run.

Test: test/test_train.sh (a skipped step leaves the weights and moments unchanged byte for byte;
resume), test/test_dp.sh (the ZeRO stages skip alike), test/test_ops.cpp (z of a known window),
test/test_cli.sh (divergence_check's stops and warning).
*/
#pragma once
#include <cmath>
#include <deque>
#include <limits>
#include "common.h"

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

// Divergence is never silent (docs/training.md). divergence_check runs before each step's update,
// with its loss and norm (the same on every rank) and whether the update is skipped, and whether
// an outlier z skipped it. It stops the run on a non-finite loss or norm of an applied update, and
// after max_skipped outlier skips in a row; it names, once, a loss over 1.5 times the first step's.
struct Divergence {
    int max_skipped = 16;                    // --max-skipped-steps (0: never stop for skips)
    bool loss_z = false, norm_z = false;     // --skip-loss-z, --skip-norm-z given (for the advice)
    int in_a_row = 0;                        // outlier skips in a row
    float first_loss = NAN;                  // this run's first step's
    bool warned = false;
};
inline void divergence_check(Divergence* d, int step, float loss, float norm, bool skipped, bool outlier) {
    if (!skipped && !std::isfinite(loss))
        run_failed("step %d: the loss is %g (diverged); lower --lr or check the data%s", step, std::fabs(loss),
                   d->loss_z || d->norm_z ? "" : ", or skip such steps' updates with --skip-norm-z");
    if (!skipped && !std::isfinite(norm))
        run_failed("step %d: the gradient norm is %g (diverged); lower --lr%s", step, std::fabs(norm),
                   d->norm_z ? "" : ", or skip such steps' updates with --skip-norm-z");
    d->in_a_row = outlier ? d->in_a_row + 1 : 0;
    if (d->max_skipped > 0 && d->in_a_row >= d->max_skipped)
        run_failed("step %d: the last %d steps' updates were all skipped (--skip-loss-z / --skip-norm-z): the run has stopped "
                   "learning; the weights are those of step %d. Lower --lr, or raise the z bounds (--max-skipped-steps 0: go on)",
                   step, d->in_a_row, step - d->in_a_row);
    if (std::isnan(d->first_loss)) d->first_loss = loss;
    if (!d->warned && loss > 1.5f * d->first_loss) {  // (said once; the run goes on)
        d->warned = true;
        print0("warning: step %d: the loss %g is over 1.5 times the first step's (%g): the run may be diverging; "
               "a lower --lr, or --skip-loss-z, may help\n", step, loss, d->first_loss);
    }
}
