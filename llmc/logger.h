/*
logger.h — the step log: one JSON object per line (DESIGN §3.6), appended as steps finish.

Fields: step, loss, lr, grad_norm, tokens_per_s, ms, mfu (null on the CPU backend),
val_loss on evaluation steps, and comm_bytes: the bytes each collective sent per rank this step. Floats are written with 9 significant digits, enough to read
back the exact fp32 value: the resume test compares logs bit for bit.
The file is flushed after every line, so a crash loses nothing already logged; resuming drops
the lines after the checkpoint's step (they are about to be logged again).

Test: test/test_train.sh reads these logs.
*/
#pragma once
#include <string>
#include "common.h"

struct Logger { FILE* f = nullptr; };

// Opens the log. On a resume (keep_through_step ≥ 0) the lines of steps after the checkpoint —
// logged by the interrupted run, about to be run again — are dropped, so every step appears once.
inline void logger_open(Logger* lg, const std::string& path, long long keep_through_step) {
    if (path.empty()) return;
    std::string kept;
    if (keep_through_step >= 0) {
        if (FILE* old = fopen(path.c_str(), "r")) {
            char line[4096];
            long long step;
            while (fgets(line, sizeof(line), old))
                if (sscanf(line, "{\"step\": %lld", &step) == 1 && step <= keep_through_step) kept += line;
            fclose(old);
        }
    }
    lg->f = fopen(path.c_str(), "w");
    if (!lg->f) fatal("--log-file: cannot open '%s' for writing: %s", path.c_str(), strerror(errno));
    fputs(kept.c_str(), lg->f);
}

// comm_json: the step's bytes per collective on the dp group ({} when there are none).
inline void logger_step(Logger* lg, int step, float loss, float lr, float grad_norm, double tokens_per_s,
                        double ms, double mfu, bool has_val, float val_loss, const std::string& comm_json) {
    if (!lg->f) return;
    fprintf(lg->f, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.1f, \"ms\": %.3f, ",
            step, loss, lr, grad_norm, tokens_per_s, ms);
    if (mfu >= 0) fprintf(lg->f, "\"mfu\": %.4f", mfu); else fprintf(lg->f, "\"mfu\": null");
    if (has_val) fprintf(lg->f, ", \"val_loss\": %.9g", val_loss);
    fprintf(lg->f, ", \"comm_bytes\": %s", comm_json.c_str());
    fprintf(lg->f, "}\n");
    fflush(lg->f);
}

inline void logger_close(Logger* lg) { if (lg->f) fclose(lg->f); lg->f = nullptr; }
