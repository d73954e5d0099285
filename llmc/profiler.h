/*
profiler.h — where a training step's time goes, op by op (--profile 1).

Every op opens an OpScope naming itself and its work: FLOPs, or the bytes it must move at least.
On the CPU the scope reads the clock; on a GPU it records CUDA events, read once at the end of
the step. Only the outermost scope counts. profile_report prints a row an op:

  calls/step   ms/step   % of step   TFLOP/s = flops / time   GB/s = bytes / time

Communication has rows of its own (CommScope); "other" is host work and gaps between kernels.

Main functions: OpScope, CommScope, profile_step_begin, profile_step_end, profile_report.

Tests: test/test_train.sh (the rows' calls per step are the model's, and they add up to no more
than the step), test/test_dp.sh (the communication rows). More: docs/training.md.
*/
#pragma once
#include <algorithm>
#include <cstdarg>
#include <map>
#include <string>
#include <vector>
#include "common.h"

struct Profiler {
    bool active = false;  // set by the trainer around the part of a step it measures
    int depth = 0;        // open scopes (only the outermost one is recorded)
    struct Row { double ms = 0, flops = 0, bytes = 0; long calls = 0; };
    std::map<std::string, Row> rows;  // accumulated over the measured steps
    int steps = 0;
    double step_ms = 0;  // the measured steps' wall time
    // this step's scopes, resolved at step_end
    struct Open { std::string name; double flops, bytes, t0, t1; };
    std::vector<Open> open;
#ifdef LLMC_CUDA
    std::vector<cudaEvent_t> events;  // 2 per scope, reused from step to step
#endif
    bool cuda = false;
};

// Opens a record for an op if profiling is active and no other scope is open; returns its index.
inline int profile_begin(const Ctx& ctx, std::string name, double flops, double bytes) {
    Profiler* p = ctx.prof;
    if (!p || !p->active || p->depth++ > 0) return -1;
    const int i = (int)p->open.size();
    p->open.push_back({std::move(name), flops, bytes, 0.0, 0.0});
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        p->cuda = true;
        while (p->events.size() < 2 * p->open.size()) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreate(&e));
            p->events.push_back(e);
        }
        CUDA_CHECK(cudaEventRecord(p->events[2 * i], ctx.stream));
        return i;
    }
#endif
    p->open[i].t0 = now_seconds();
    return i;
}
inline void profile_end(const Ctx& ctx, int i) {
    Profiler* p = ctx.prof;
    if (!p || !p->active) return;
    p->depth--;
    if (i < 0) return;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { CUDA_CHECK(cudaEventRecord(p->events[2 * i + 1], ctx.stream)); return; }
#endif
    p->open[i].t1 = now_seconds();
}

// RAII: OpScope s(ctx, flops, bytes, "matmul forward %d->%d", C, OC); — the name is formatted only
// when profiling is on.
struct OpScope {
    const Ctx& ctx;
    int index = -1;
    bool on = false;
    __attribute__((format(printf, 5, 6))) OpScope(const Ctx& c, double flops, double bytes, const char* fmt, ...) : ctx(c) {
        if (!c.prof || !c.prof->active) return;
        char name[96];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(name, sizeof(name), fmt, ap);
        va_end(ap);
        on = true;
        index = profile_begin(c, name, flops, bytes);
    }
    // bytes known only when the work is done (a collective's, from its counters)
    void add_bytes(double b) { if (index >= 0) ctx.prof->open[index].bytes += b; }
    ~OpScope() { if (on) profile_end(ctx, index); }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
};

inline void profile_step_begin(Profiler* p) {
    if (!p) return;
    p->open.clear();
    p->depth = 0;
    p->active = true;
}
// Ends a measured step of wall time step_ms: waits for the GPU's events and adds this step's
// scopes to the rows.
inline void profile_step_end(Profiler* p, double step_ms) {
    if (!p || !p->active) return;
    p->active = false;
#ifdef LLMC_CUDA
    if (p->cuda && !p->open.empty()) {
        CUDA_CHECK(cudaEventSynchronize(p->events[2 * p->open.size() - 1]));
        for (size_t i = 0; i < p->open.size(); i++) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, p->events[2 * i], p->events[2 * i + 1]));
            p->open[i].t0 = 0; p->open[i].t1 = ms / 1000.0;
        }
    }
#endif
    for (const Profiler::Open& o : p->open) {
        Profiler::Row& r = p->rows[o.name];
        r.ms += (o.t1 - o.t0) * 1000.0;
        r.flops += o.flops;
        r.bytes += o.bytes;
        r.calls++;
    }
    p->steps++;
    p->step_ms += step_ms;
}

// The table, slowest op first; peak_flops > 0 (the device's dense peak) is printed beside it.
inline void profile_report(const Profiler& p, FILE* out, double peak_flops = 0) {
    if (p.steps == 0) return;
    std::vector<std::pair<std::string, Profiler::Row>> rows(p.rows.begin(), p.rows.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    const double step = p.step_ms / p.steps;
    fprintf(out, "profile: %d step%s, %.2f ms per step\n", p.steps, p.steps == 1 ? "" : "s", step);
    if (peak_flops > 0) fprintf(out, "  (this device's dense peak: %.0f TFLOP/s)\n", peak_flops / 1e12);
    fprintf(out, "  %-36s %10s %10s %8s %9s %9s\n", "op", "calls/step", "ms/step", "% step", "TFLOP/s", "GB/s");
    double covered = 0;
    for (const auto& [name, r] : rows) {
        const double ms = r.ms / p.steps;
        covered += ms;
        char tf[16] = "", gb[16] = "";  // (3 significant digits: a CPU's rates are small)
        if (r.flops > 0 && r.ms > 0) snprintf(tf, sizeof(tf), "%.3g", r.flops / (r.ms / 1000.0) / 1e12);
        if (r.bytes > 0 && r.ms > 0) snprintf(gb, sizeof(gb), "%.3g", r.bytes / (r.ms / 1000.0) / 1e9);
        fprintf(out, "  %-36s %10.1f %10.3f %7.1f%% %9s %9s\n", name.c_str(), (double)r.calls / p.steps, ms, 100.0 * ms / step, tf, gb);
    }
    fprintf(out, "  %-36s %10s %10.3f %7.1f%%\n", "other (host, gaps)", "", step - covered, 100.0 * (step - covered) / step);
}
