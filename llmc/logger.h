/*
logger.h — the step log: one JSON object per line (DESIGN §3.6), appended as steps finish.

Fields: step, loss, lr, grad_norm, tokens_per_s, ms, mfu (null on the CPU backend), and
val_loss on evaluation steps. Floats are written with 9 significant digits, enough to read
back the exact fp32 value: the resume test compares logs bit for bit.
The file is flushed after every line, so a crash loses nothing already logged.

Test: test/test_train.sh reads these logs.
*/
#pragma once
#include <string>
#include "common.h"

struct Logger { FILE* f = nullptr; };

inline void logger_open(Logger* lg, const std::string& path, bool append) {
    if (path.empty()) return;
    lg->f = fopen(path.c_str(), append ? "a" : "w");
    if (!lg->f) fatal("--log-file: cannot open '%s' for writing: %s", path.c_str(), strerror(errno));
}

inline void logger_step(Logger* lg, int step, float loss, float lr, float grad_norm, double tokens_per_s,
                        double ms, double mfu, bool has_val, float val_loss) {
    if (!lg->f) return;
    fprintf(lg->f, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.1f, \"ms\": %.3f, ",
            step, loss, lr, grad_norm, tokens_per_s, ms);
    if (mfu >= 0) fprintf(lg->f, "\"mfu\": %.4f", mfu); else fprintf(lg->f, "\"mfu\": null");
    if (has_val) fprintf(lg->f, ", \"val_loss\": %.9g", val_loss);
    fprintf(lg->f, "}\n");
    fflush(lg->f);
}

inline void logger_close(Logger* lg) { if (lg->f) fclose(lg->f); lg->f = nullptr; }
