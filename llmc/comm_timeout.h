/*
comm_timeout.h — --comm-timeout: a rank left waiting for its peers ends the run, saying where.

A rank that stops answering (a hung GPU, a dead link, a process stopped by the system) leaves the
others blocked in a collective, and a rented node idles until someone looks. Each collective
call (comm.h), NCCL's setup, and each host wait on the GPU's queue (ctx_sync, pinned_wait: the
queue holds the collectives NCCL runs) is a CommWait. A watchdog thread, started once the flags
are read, looks every 0.1 s. A wait longer than --comm-timeout seconds prints one line (the rank,
what it waits in, the group, the step, the last collective started) and ends the process with
exit 1, NCCL's communicators aborted first (at most 5 s of waiting for that).
The launcher (mpirun, srun) then ends the other ranks.

Main functions: watchdog_start, CommWait (a scope), watchdog_step.
Tests: test/test_dp.sh (a rank stopped with SIGSTOP: the other ends the run within the timeout,
naming the collective, its group and the step; on CPU ranks and on the emulated NCCL; and
NCCL's setup stalled on the emulated NCCL).
More: docs/parallelism.md.
*/
#pragma once
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <unistd.h>
#include "errors.h"

struct Watchdog {
    double timeout = 0;                              // seconds (0: off)
    std::atomic<int> step{0};                        // the step the host is in (0: before the first)
    std::atomic<const char*> waiting{nullptr};       // what the host waits in now (a string that lives on)
    std::atomic<const char*> group{nullptr};         // over which group
    std::atomic<double> since{0};
    std::atomic<const char*> last_op{nullptr}, last_group{nullptr};  // the last collective started
    void (*abort_comms)() = nullptr;                 // comm.h: NCCL's communicators aborted
};
inline Watchdog g_watchdog;

// The host waits in `what` over `group` while this scope lives (the outermost scope counts).
struct CommWait {
    bool outer;
    CommWait(const char* what, const char* group) : outer(g_watchdog.waiting.load() == nullptr) {
        if (group) g_watchdog.last_op = what, g_watchdog.last_group = group;
        if (!outer) return;
        g_watchdog.group = group;
        g_watchdog.since = now_seconds();
        g_watchdog.waiting = what;
    }
    ~CommWait() { if (outer) g_watchdog.waiting = nullptr; }
    CommWait(const CommWait&) = delete;
};
inline void watchdog_step(int step) { g_watchdog.step = step; }

inline void watchdog_run() {
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const char* what = g_watchdog.waiting.load();
        const double waited = now_seconds() - g_watchdog.since.load();
        if (!what || waited < g_watchdog.timeout) continue;
        const char *group = g_watchdog.group.load(), *last = g_watchdog.last_op.load(), *last_group = g_watchdog.last_group.load();
        fflush(stdout);
        const int step = g_watchdog.step.load();
        const std::string when = step > 0 ? "at step " + std::to_string(step) : "before the first step";
        fprintf(stderr, "[rank %d] error: --comm-timeout %g: waited %.0f s in %s%s%s%s %s (the last collective started: %s over %s): "
                "a rank stopped answering; this run ends (resume it from its last checkpoint)\n", g_rank, g_watchdog.timeout, waited,
                what, group ? " over the " : "", group ? group : "", group ? " group" : "", when.c_str(), last ? last : "none",
                last_group ? last_group : "-");
        fflush(stderr);
        if (g_watchdog.abort_comms) {  // (on a thread of its own: an abort that hangs too must not keep the rank alive)
            static std::atomic<bool> aborted{false};
            std::thread([] { g_watchdog.abort_comms(); aborted = true; }).detach();
            for (int i = 0; i < 50 && !aborted; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        _exit(1);
    }
}
// Starts the watchdog (timeout 0 or one process: none).
inline void watchdog_start(double timeout) {
    if (timeout <= 0 || g_world == 1) return;
    g_watchdog.timeout = timeout;
    std::thread(watchdog_run).detach();
}
