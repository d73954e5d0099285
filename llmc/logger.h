/*
logger.h — the step log: one JSON object per line (DESIGN §3.6), appended as steps finish.

Fields: step, loss, lr, grad_norm, tokens_per_s, ms, mfu (null on the CPU backend); "skipped":
true on a step whose update was skipped (--skip-loss-z, --skip-norm-z: outliers.h; an fp16
overflow: loss_scale.h); "loss_scale": S with --precision fp16 (the step's, before any change);
"fp8_saturated": with --fp8-scaling delayed, how many FP8 tensors (of all ranks') passed what
their scale could hold this step, and saturated (fp8.cuh); on
evaluation steps val_loss (with --val-data) and hellaswag_acc, hellaswag_correct, hellaswag_total,
hellaswag_loss (with --hellaswag, llmc/hellaswag.h) and eval_s (the seconds they took, which
ms leaves out); and comm_bytes: the bytes each collective sent per rank this step. A run with
--steps 0 only evaluates: its one line is {"step": 0, and the evaluation's fields}. Floats are
written with 9 significant digits, enough to read back the exact fp32 value: the resume test
compares logs bit for bit; a loss or gradient norm that is not finite (an fp16 overflow, a
divergence) is written as null.
The file is flushed after every line, so a crash loses nothing already logged, and a failed write
stops the run. Resuming drops the lines after the checkpoint's step, rewriting the log through
PATH.tmp and a rename.

Test: test/test_train.sh reads these logs.
*/
#pragma once
#include <cmath>
#include <fstream>
#include <string>
#include <unistd.h>
#include "common.h"

struct Logger { FILE* f = nullptr; std::string path; };

// A write to the log that fails (a full disk) stops the run, naming the file: a run must not go on
// with a log that silently ends mid-line.
inline void logger_check(Logger* lg) {
    if (ferror(lg->f) || fflush(lg->f) != 0)
        fatal("--log-file %s: cannot write (%s)", lg->path.c_str(), errno ? strerror(errno) : "a write failed");
}

// Opens the log. On a resume (keep_through_step ≥ 0) the lines of steps after the checkpoint —
// logged by the interrupted run, about to be run again — are dropped, so every step appears once.
// The kept lines go to PATH.tmp, which then replaces the log in one rename: a crash at any moment
// leaves the old log or the new one, never an empty one.
inline void logger_open(Logger* lg, const std::string& path, long long keep_through_step) {
    if (path.empty()) return;
    lg->path = path;
    if (keep_through_step >= 0) {
        std::string kept, line;
        std::ifstream old(path);
        long long step;
        while (std::getline(old, line))
            if (sscanf(line.c_str(), "{\"step\": %lld", &step) == 1 && step <= keep_through_step) kept += line + "\n";
        const std::string tmp = path + ".tmp";
        FILE* t = fopen_or_die(tmp.c_str(), "w", "--log-file");
        const bool wrote = fputs(kept.c_str(), t) >= 0;
        if (!close_synced(t) || !wrote) fatal("--log-file %s: cannot write (%s)", tmp.c_str(), strerror(errno));
        if (rename(tmp.c_str(), path.c_str()) != 0) fatal("--log-file %s: cannot replace it (%s)", path.c_str(), strerror(errno));
    }
    lg->f = fopen_or_die(path.c_str(), keep_through_step >= 0 ? "a" : "w", "--log-file");
}

// What the evaluations of a step gave (nothing on a step that does not evaluate).
struct EvalLog {
    bool has_val = false;
    float val_loss = 0.0f;
    bool has_hellaswag = false;
    int hellaswag_correct = 0, hellaswag_total = 0;
    double hellaswag_loss = 0.0;
    double seconds = 0.0;  // the wall time the evaluations took (not in the step's ms)
    double hellaswag_acc() const { return (double)hellaswag_correct / hellaswag_total; }
};

inline void logger_eval_fields(FILE* f, const EvalLog& ev) {
    if (ev.has_val) fprintf(f, ", \"val_loss\": %.9g", ev.val_loss);
    if (ev.has_hellaswag)
        fprintf(f, ", \"hellaswag_acc\": %.9g, \"hellaswag_correct\": %d, \"hellaswag_total\": %d, \"hellaswag_loss\": %.9g",
                ev.hellaswag_acc(), ev.hellaswag_correct, ev.hellaswag_total, ev.hellaswag_loss);
    if (ev.has_val || ev.has_hellaswag) fprintf(f, ", \"eval_s\": %.3f", ev.seconds);
}

// A float with 9 significant digits, or null when it is not finite (an overflowing step's
// gradient norm: JSON has no inf or NaN).
inline void logger_number(FILE* f, double x) {
    if (std::isfinite(x)) fprintf(f, "%.9g", x);
    else fprintf(f, "null");
}

// comm_json: the step's bytes per collective on the dp group ({} when there are none).
inline void logger_step(Logger* lg, int step, float loss, float lr, float grad_norm, double tokens_per_s,
                        double ms, double mfu, bool skipped, const EvalLog& ev, const std::string& comm_json,
                        double loss_scale = 0.0, int fp8_saturated = -1) {
    if (!lg->f) return;
    fprintf(lg->f, "{\"step\": %d, \"loss\": ", step);
    logger_number(lg->f, loss);
    fprintf(lg->f, ", \"lr\": %.9g, \"grad_norm\": ", lr);
    logger_number(lg->f, grad_norm);
    fprintf(lg->f, ", \"tokens_per_s\": %.1f, \"ms\": %.3f, ", tokens_per_s, ms);
    if (mfu >= 0) fprintf(lg->f, "\"mfu\": %.4f", mfu); else fprintf(lg->f, "\"mfu\": null");
    if (skipped) fprintf(lg->f, ", \"skipped\": true");
    if (loss_scale > 0) fprintf(lg->f, ", \"loss_scale\": %.9g", loss_scale);
    if (fp8_saturated >= 0) fprintf(lg->f, ", \"fp8_saturated\": %d", fp8_saturated);
    logger_eval_fields(lg->f, ev);
    fprintf(lg->f, ", \"comm_bytes\": %s", comm_json.c_str());
    fprintf(lg->f, "}\n");
    logger_check(lg);
}

// The line of an evaluation-only run (--steps 0).
inline void logger_eval(Logger* lg, int step, const EvalLog& ev) {
    if (!lg->f) return;
    fprintf(lg->f, "{\"step\": %d", step);
    logger_eval_fields(lg->f, ev);
    fprintf(lg->f, "}\n");
    logger_check(lg);
}

inline void logger_close(Logger* lg) {
    if (lg->f && fclose(lg->f) != 0) fatal("--log-file %s: cannot write (%s)", lg->path.c_str(), strerror(errno));
    lg->f = nullptr;
}
