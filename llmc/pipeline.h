/*
pipeline.h — pipeline parallelism (--pp, --pp-schedule, --vpp): which blocks each stage holds,
the order in which a stage runs its micro-batches' forwards and backwards, a simulator of those
orders, and the executor that runs one in the trainer.

Stage s of p holds a range of the blocks (stage 0 the embeddings too, stage p − 1 the classifier)
and hands its output activation to stage s + 1:

  F(s, k) needs F(s−1, k)          B(s, k) needs B(s+1, k) and F(s, k)
  idle fraction (the bubble): (p − 1)/(m + p − 1) for gpipe and 1f1b, (p − 1)/(v·m + p − 1) interleaved

gpipe keeps m micro-batches alive on a stage, 1f1b p − s. Interleaving gives each stage v chunks.
Sends go from copies and never wait; receives wait. So a schedule that pp_simulate completes
cannot deadlock here.

Main functions: pp_schedule (a stage's list), pp_simulate (step time, bubble, peaks),
pp_slots (activation slots a chunk needs), pp_train_step (the executor).

Tests: test/test_ops.cpp (every schedule in the simulator, against the formulas),
test/test_pp.sh (the trainer against one process; memory, slots and bytes; the NCCL path on
the emulated GPU). More: docs/parallelism.md.
*/
#pragma once
#include <algorithm>
#include <array>
#include <cstdlib>
#include <list>
#include <memory>
#include <string>
#include <vector>
#include "common.h"
#include "comm.h"
#include "model.h"
#include "data_parallel.h"

enum class PPSchedule { GPipe, OneFOneB, Interleaved };
inline const char* const PP_SCHEDULE_NAMES[] = {"gpipe", "1f1b", "interleaved"};  // --pp-schedule's values

// ----------------------------------------------------------------------------
// a stage's working state: its activation slots and its sends

// The state a model keeps as one stage of a pipeline (model.h's ModelParallel points to it).
// The activations of several micro-batches are alive at once, one set a slot: slot `slot`'s are
// in the model's acts while it runs, the others parked. With the interleaved schedule a stage
// runs one of its chunks at a time (the model's part), and each chunk has slots of its own
// (sized for its blocks). Sends go per way (0: forward, to stage + 1; 1: backward), each from a
// copy of its own, oldest first, reused once its receiver has it; at most send_cap[way] of them
// (pp_send_buffers; 0: no cap).
template <class floatX> struct PipelineStage {
    struct Send { Buf<floatX> copy; CommHandle h; };
    std::list<Send> sends[2];
    std::array<int, 2> send_cap{0, 0};
    std::vector<Activations<floatX>> parked;
    int slot = 0;
    std::vector<int> slots;  // per chunk: how many the schedule keeps (the memory plan counts them)
};

// The model's stage state, made on first use with one slot a chunk and no cap on sends.
template <class floatX> inline PipelineStage<floatX>& pp_stage(GPT<floatX>* g) {
    if (!g->par.stage) {
        g->par.stage = std::make_shared<PipelineStage<floatX>>();
        g->par.stage->slots.assign(g->layout.vpp(), 1);
    }
    return *g->par.stage;
}
// The slots of each chunk (one a chunk for a model that is no stage, or whose stage has no state yet).
template <class floatX> inline std::vector<int> gpt_slots(const GPT<floatX>& g) {
    return g.par.stage ? g.par.stage->slots : std::vector<int>(g.layout.vpp(), 1);
}

// Slot j of chunk k (0 ≤ j < slots[k]): its number among all of them.
template <class floatX> inline int gpt_slot_id(GPT<floatX>* g, int k, int j) {
    const std::vector<int>& slots = pp_stage(g).slots;
    for (int c = 0; c < k; c++) j += slots[c];
    return j;
}
// Makes slot `id`'s activations the ones the forward and backward use, for chunk `chunk` of
// this stage's blocks (0 without interleaving).
template <class floatX> inline void gpt_use_slot(GPT<floatX>* g, int id, int chunk = 0) {
    PipelineStage<floatX>& st = pp_stage(g);
    g->part = layout_part(g->layout, chunk);
    if (id == st.slot) return;
    if ((int)st.parked.size() <= std::max(id, st.slot)) st.parked.resize(std::max(id, st.slot) + 1);
    std::swap(g->acts, st.parked[st.slot]);  // park the running slot's (moves: nothing is copied)
    std::swap(g->acts, st.parked[id]);
    st.slot = id;
}
// Sends n elements of buf to the stage `dir` (+1 or −1) away round the pp group's ring (comm.h:
// comm_ring_send_start) without waiting for the receiver, from a copy of its own on ctx's device
// (buf may change at once). The way's copies go round in send order: the oldest is reused once
// its receiver has it, else a new one is made while fewer than the cap exist, else the copy
// waits for the oldest's receiver (comm_wait: on the GPU with NCCL the compute stream waits, not
// the host; with MPI the host). gpt_stage_sends_wait waits for them all.
template <class floatX> inline void gpt_stage_send(const Ctx& ctx, GPT<floatX>* g, const floatX* buf, size_t n, int dir) {
    PipelineStage<floatX>& st = pp_stage(g);
    const int way = dir > 0 ? 0 : 1, cap = st.send_cap[way];
    auto& pool = st.sends[way];
    if (pool.empty() || (!comm_send_done(&pool.front().h) && (cap <= 0 || (int)pool.size() < cap))) {
        pool.emplace_back();
    } else {
        comm_wait(&pool.front().h);
        pool.splice(pool.end(), pool, pool.begin());  // the oldest becomes the newest (nothing moves)
    }
    auto& o = pool.back();
    if (o.copy.size() < n) o.copy.alloc(ctx, n);
    ctx_copy(ctx, o.copy.data(), buf, n * sizeof(floatX));
    comm_ring_send_start(*g->par.pp, o.copy.data(), n, dir, &o.h);
}
template <class floatX> inline void gpt_stage_sends_wait(GPT<floatX>* g) {
    for (auto& pool : pp_stage(g).sends)
        for (auto& o : pool) comm_wait(&o.h);
}

// The send copies a stage may keep at their caps (the stage's send_cap, or the caps given), for
// micro-batches of B·T positions (this rank's rows of the residual stream, n elements each):
// what the memory plan counts (planner.h).
template <class floatX> inline double gpt_send_copy_bytes(const GPT<floatX>& g, int B, int T, const std::array<int, 2>* caps = nullptr) {
    const std::array<int, 2> c = caps ? *caps : g.par.stage ? g.par.stage->send_cap : std::array<int, 2>{0, 0};
    return (double)(c[0] + c[1]) * gpt_seq_split(g, B, T).P * g.config.channels * sizeof(floatX);
}

// The activations a rank holds for micro-batches of B·T positions (T: this rank's positions):
// one set, or with pipeline parallelism slots[k] sets of each chunk k (gpt_slots(g), or the
// slots given).
template <class floatX> inline double gpt_all_activation_bytes(const GPT<floatX>& g, int B, int T, Recompute r,
                                                          const std::vector<int>* slots = nullptr) {
    const std::vector<int> n = slots ? *slots : gpt_slots(g);
    double bytes = 0;
    for (int k = 0; k < g.layout.vpp(); k++) bytes += n[k] * gpt_activation_bytes(g, layout_part(g.layout, k), B, T, r);
    return bytes;
}

// ----------------------------------------------------------------------------
// the schedules

// (The layers of virtual stage vs of P = p·v: params.h's stage_layers, L split as evenly as it
// goes, the first L mod P virtual stages one more.)

// One step of a stage's schedule: the forward or backward of micro-batch `micro` through the
// stage's chunk `chunk` (0 without interleaving).
struct PPStep { bool forward; int micro, chunk; };

// Stage s's steps for m micro-batches on p stages, v chunks a stage (interleaved; 1 otherwise).
// Interleaved needs m to be a multiple of p (Megatron's order sends p micro-batches through each
// chunk in turn).
inline std::vector<PPStep> pp_schedule(PPSchedule kind, int p, int s, int m, int v = 1) {
    std::vector<PPStep> out;
    if (kind == PPSchedule::GPipe) {
        for (int k = 0; k < m; k++) out.push_back({true, k, 0});
        for (int k = 0; k < m; k++) out.push_back({false, k, 0});
        return out;
    }
    if (kind == PPSchedule::OneFOneB) v = 1;
    CHECK(kind != PPSchedule::Interleaved || m % p == 0, "interleaved schedule: %d micro-batches is not a multiple of %d stages", m, p);
    // virtual micro-batch i: the forwards take p micro-batches through chunk 0, the same p through
    // chunk 1, …, then the next p; the backwards the same, from the last chunk down
    const int M = m * v;
    auto micro = [&](int i) { return (i / (p * v)) * p + i % p; };
    auto fwd = [&](int i) { return PPStep{true, micro(i), (i / p) % v}; };
    auto bwd = [&](int i) { return PPStep{false, micro(i), v - 1 - (i / p) % v}; };
    const int warm = std::min(M, kind == PPSchedule::OneFOneB ? p - s - 1 : (p - s - 1) * 2 + (v - 1) * p);
    for (int i = 0; i < warm; i++) out.push_back(fwd(i));
    for (int i = 0; i < M - warm; i++) { out.push_back(fwd(warm + i)); out.push_back(bwd(i)); }
    for (int i = M - warm; i < M; i++) out.push_back(bwd(i));
    return out;
}

// The most micro-batch activations (chunks of them, interleaved) a stage's list keeps at once:
// +1 at each forward, −1 at each backward; of chunk `chunk`'s alone (−1: of all chunks).
inline int pp_peak_alive(const std::vector<PPStep>& steps, int chunk = -1) {
    int alive = 0, peak = 0;
    for (const PPStep& st : steps)
        if (chunk < 0 || st.chunk == chunk) { alive += st.forward ? 1 : -1; peak = std::max(peak, alive); }
    return peak;
}

// The result of running a schedule in time.
struct PPTiming {
    bool ok = true;
    std::string why;              // when not ok: the first step found out of order, or the deadlock
    double step_time = 0;         // from the first forward to the last backward
    double bubble = 0;            // the fraction of step_time a stage is idle
    std::vector<int> peak_alive;  // per stage: the most micro-batch activations (chunks) held at once
    // per stage, per way (0: forward, to stage s + 1; 1: backward, to s − 1): the most of its
    // messages sent and not yet taken at once, each of which keeps its send copy (0: none sent)
    std::vector<std::array<int, 2>> peak_sends;
    std::vector<std::array<std::vector<double>, 2>> sent_at;  // per stage, per way: when each message went
};

// Why the p stages' lists of steps cannot be a schedule ("" where they can): each stage must run
// every (chunk, micro-batch) once forward and once backward, and nothing else.
inline std::string pp_steps_problem(const std::vector<std::vector<PPStep>>& steps, int m, int v) {
    for (size_t s = 0; s < steps.size(); s++) {
        std::vector<int> count((size_t)v * m * 2, 0);
        for (const PPStep& st : steps[s]) {
            if (st.micro < 0 || st.micro >= m || st.chunk < 0 || st.chunk >= v) return "a step out of range";
            count[((size_t)st.chunk * m + st.micro) * 2 + st.forward]++;
        }
        for (int c : count) if (c != 1) return "stage " + std::to_string(s) + " does not run every step once";
    }
    return "";
}

// How many send copies a stage holds at most, each way, given when each message was sent and
// taken. Message n of a way is sent while those before it not yet taken still hold their copies
// (one taken at the very moment n is sent has given its copy back): messages j..n, where j is
// the first taken after n was sent (a way's messages are taken, and sent, in order).
inline std::array<int, 2> pp_peak_sends(const std::array<std::vector<double>, 2>& sent, const std::array<std::vector<double>, 2>& taken) {
    std::array<int, 2> peak{0, 0};
    for (int w = 0; w < 2; w++)
        for (size_t n = 0, j = 0; n < sent[w].size(); n++) {
            while (j < n && taken[w][j] <= sent[w][n]) j++;
            peak[w] = std::max(peak[w], (int)(n - j + 1));
        }
    return peak;
}

// Runs the p stages' lists of steps (steps[s]: stage s's, v chunks a stage) with a forward taking
// t_F and a backward t_B per micro-batch per stage (t_F/v and t_B/v a chunk), each stage one step
// at a time in its order, each step as soon as its stage is free and its inputs exist. Each
// step's start is the latest of those times, so the order the loop finds them in does not
// matter; a pass that places no step while some remain is a deadlock.
// Sends: a message is sent at the end of the step that makes it and taken at the start of the
// step that needs it (a stage takes each way's messages in the order they were sent: test_ops).
// Without caps they are buffered: a stage never waits for the receiver. With caps (per stage,
// per way: how many send copies it may keep, gpt_stage_send, above) the n-th message of a way
// needs the copy of message n − cap, so it waits, and its stage with it, until that one is taken.
inline PPTiming pp_simulate_steps(const std::vector<std::vector<PPStep>>& steps, int m, int v, double t_F, double t_B,
                                  const std::vector<std::array<int, 2>>& caps = {}) {
    const int p = (int)steps.size(), V = p * v;  // stages, virtual stages
    PPTiming r;
    r.why = pp_steps_problem(steps, m, v);
    if (!r.why.empty()) { r.ok = false; return r; }
    // done_F[vs][k], done_B[vs][k]: when virtual stage vs finished micro-batch k (< 0: not yet)
    std::vector<std::vector<double>> done_F(V, std::vector<double>(m, -1)), done_B = done_F;
    std::vector<size_t> next(p, 0);
    std::vector<double> free_at(p, 0.0);
    // per stage and way: when each of its messages was sent, and when each was taken
    std::vector<std::array<std::vector<double>, 2>> sent(p), taken(p);
    std::vector<bool> took(p, false);  // the stage's next step took its message and waits to send
    for (bool placed = true; placed;) {
        placed = false;
        for (int s = 0; s < p; s++) {
            while (next[s] < steps[s].size()) {
                const PPStep st = steps[s][next[s]];
                const int vs = st.chunk * p + s, k = st.micro;
                double a = 0.0, b = 0.0;  // when its inputs were made (< 0: not yet)
                if (st.forward) a = vs == 0 ? 0.0 : done_F[vs - 1][k];
                else { a = done_F[vs][k]; b = vs == V - 1 ? 0.0 : done_B[vs + 1][k]; }
                if (a < 0 || b < 0) break;
                // the message it takes (from stage s − 1's forward way, or s + 1's backward), the
                // way it sends on (−1: none), and for a capped way the message whose copy it reuses
                const int from = st.forward ? (vs > 0 ? (s + p - 1) % p : -1) : (vs < V - 1 ? (s + 1) % p : -1);
                const int way = st.forward ? (vs < V - 1 ? 0 : -1) : (vs > 0 ? 1 : -1);
                const double start = std::max({free_at[s], a, b});
                if (from >= 0 && !took[s]) { taken[from][st.forward ? 0 : 1].push_back(start); took[s] = true; }
                double copy_free = 0.0;  // (the step takes its message and runs; only its send waits)
                if (way >= 0 && !caps.empty()) {
                    const long reuse = (long)sent[s][way].size() - caps[s][way];
                    if (reuse >= 0 && (long)taken[s][way].size() <= reuse) break;  // not taken yet
                    if (reuse >= 0) copy_free = taken[s][way][reuse];
                }
                took[s] = false;
                free_at[s] = std::max(start + (st.forward ? t_F : t_B) / v, copy_free);
                if (way >= 0) sent[s][way].push_back(free_at[s]);
                (st.forward ? done_F : done_B)[vs][k] = free_at[s];
                next[s]++;
                placed = true;
            }
        }
    }
    for (int s = 0; s < p; s++)
        if (next[s] < steps[s].size()) {
            r.ok = false;
            r.why = "deadlock: stage " + std::to_string(s) + " waits at its step " + std::to_string(next[s]);
            return r;
        }
    r.step_time = *std::max_element(free_at.begin(), free_at.end());
    r.bubble = 1.0 - m * (t_F + t_B) / r.step_time;
    for (int s = 0; s < p; s++) r.peak_alive.push_back(pp_peak_alive(steps[s]));
    for (int s = 0; s < p; s++) r.peak_sends.push_back(pp_peak_sends(sent[s], taken[s]));
    r.sent_at = sent;
    return r;
}

// pp_simulate_steps of a schedule's lists.
inline PPTiming pp_simulate(PPSchedule kind, int p, int m, int v = 1, double t_F = 1.0, double t_B = 2.0,
                            const std::vector<std::array<int, 2>>& caps = {}) {
    if (kind != PPSchedule::Interleaved) v = 1;
    std::vector<std::vector<PPStep>> steps(p);
    for (int s = 0; s < p; s++) steps[s] = pp_schedule(kind, p, s, m, v);
    return pp_simulate_steps(steps, m, v, t_F, t_B, caps);
}

// How many send copies stage s keeps per way (0: forward, 1: backward;
// gpt_stage_send, planned by planner.h): the most messages of that way in flight at once when
// the schedule runs in time as above (t_B = 2·t_F), + 1 for a transfer the timeline takes as
// instant, which may still be running when the next copy is due; 0 on a way it does not send.
// With them the timeline above runs unchanged (test_ops), so no stage waits for a copy there;
// and since a stage's messages go in its list's order whatever the timing, a run that completes
// under one timing with these caps completes under all: the caps cannot deadlock a real run.
// LLMC_PP_SEND_COPIES=N sets every cap a stage sends on to N instead (test_pp.sh: at 1 each
// send after the first waits for the one before it, and the run is the same); caps the
// simulator cannot complete the schedule with are refused, since the run would deadlock.
inline std::array<int, 2> pp_send_buffers(PPSchedule kind, int p, int s, int m, int v = 1) {
    const PPTiming t = pp_simulate(kind, p, m, v);
    const char* e = getenv("LLMC_PP_SEND_COPIES");
    int forced = 0;
    if (e && *e) {
        char* end = nullptr;
        forced = (int)strtol(e, &end, 10);
        if (*end != 0 || forced < 1) usage_error("LLMC_PP_SEND_COPIES=%s: expected a number of send copies a way, at least 1", e);
    }
    std::vector<std::array<int, 2>> caps = t.peak_sends;
    for (auto& c : caps)
        for (int& n : c) n = n > 0 ? (forced ? forced : n + 1) : 0;
    if (forced && !pp_simulate(kind, p, m, v, 1.0, 2.0, caps).ok)
        usage_error("LLMC_PP_SEND_COPIES=%s: the %s schedule (pp %d, %d micro-batches) deadlocks with that few send copies", e,
                    PP_SCHEDULE_NAMES[(int)kind], p, m);
    return caps[s];
}

// A stage's schedule, for the memory plan (planner.h: what it keeps depends on the micro-batches
// a step, which the micro-batch's size decides).
struct PPPlan { PPSchedule kind; int p, s, v; };

// The bubble the header's formulas give.
inline double pp_bubble_formula(PPSchedule kind, int p, int m, int v = 1) {
    if (kind != PPSchedule::Interleaved) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}

// How many micro-batches' activations of each of its chunks stage s's schedule keeps at once:
// its slots (v chunks with interleaving, one otherwise), which PipelineStage keeps per chunk.
inline std::vector<int> pp_slots(PPSchedule kind, int p, int s, int m, int v = 1) {
    if (kind != PPSchedule::Interleaved) v = 1;
    const std::vector<PPStep> steps = pp_schedule(kind, p, s, m, v);
    std::vector<int> slots;
    for (int k = 0; k < v; k++) slots.push_back(pp_peak_alive(steps, k));
    return slots;
}

// ----------------------------------------------------------------------------
// the executor

// One optimizer step's forwards and backwards on this rank's stage, in its schedule's order (m
// micro-batches; gpipe, 1f1b, or interleaved over the stage's v chunks). next_batch(x, y) gives
// the next micro-batch's tokens and targets: every stage reads the same batches, in order, when
// a micro-batch's first forward here runs (stage 0 embeds the tokens, the last scores the
// targets). Between virtual stages go this rank's rows of the residual stream (B·T·C elements,
// or its sequence-parallel rows): forward a chunk's output, backward its input's gradient.
// Chunk k of stage s is virtual stage k·p + s, so its neighbours are stages s ± 1 (mod p:
// stage p − 1's chunk k hands on to stage 0's chunk k + 1). They go round the pp group's ring
// (comm.h), forward messages to rank + 1, backward ones to rank − 1. Sends do not wait for the
// receiver (each from a copy of its own, gpt_stage_send, above: the schedules assume buffered
// sends, pp_simulate), receives do. The two ways are matched apart: between two stages both may
// go the same way (p = 2, interleaved), whatever order the two lists mix them in; within a way
// both lists go in the same order (pp_schedule's virtual micro-batches are the same on every
// stage; test_ops checks every channel of every schedule it runs). Micro-batch k's activations of chunk c
// live in one of chunk c's slots (gpt_use_slot) from its forward to its backward. After the last
// backward, the tied embeddings' gradients are summed (dp_grads_finish). Returns the sum of the
// micro-batches' mean losses, on every stage.
template <class floatX, class NextBatch>
inline double pp_train_step(const Ctx& ctx, GPT<floatX>* g, DataParallel<floatX>* d, PPSchedule kind, int m, int B, int T, float dloss,
                            NextBatch&& next_batch) {
    Group& pp = *g->par.pp;
    const int p = pp.size, s = pp.rank, v = g->layout.vpp(), V = p * v;
    const size_t n = gpt_seq_split(*g, B, T).P * g->config.channels, BT = (size_t)B * T;
    std::vector<int> x(m * BT), y(m * BT);  // the step's micro-batches, read at their first forward
    // per chunk: its free slots, the slot of each micro-batch, the forwards run, the backwards left
    std::vector<std::vector<int>> free_slots(v), slot_of(v, std::vector<int>(m, -1));
    std::vector<int> forwards(v, 0), backwards_left(v, m);
    for (int k = 0; k < v; k++)
        for (int j = pp_stage(g).slots[k] - 1; j >= 0; j--) free_slots[k].push_back(gpt_slot_id(g, k, j));
    auto send = [&](const floatX* buf, int dir) { CommScope prof(ctx, pp, "pp send"); gpt_stage_send(ctx, g, buf, n, dir); };
    auto recv = [&](floatX* buf, int dir) { CommScope prof(ctx, pp, "pp receive (waits)"); comm_ring_recv(pp, buf, n, dir); };
    double loss_sum = 0.0;
    for (const PPStep& st : pp_schedule(kind, p, s, m, v)) {
        const int k = st.chunk, vs = k * p + s;  // the chunk, and its virtual stage
        int* const xk = x.data() + st.micro * BT;
        int* const yk = y.data() + st.micro * BT;
        if (st.forward) {
            CHECK(st.micro == forwards[k]++ && !free_slots[k].empty(), "pipeline: forwards out of order, or no free slot");
            slot_of[k][st.micro] = free_slots[k].back();
            free_slots[k].pop_back();
            gpt_use_slot(g, slot_of[k][st.micro], k);
            if (k == 0) next_batch(xk, yk);  // (chunk 0's forwards come first, in micro-batch order)
            gpt_ensure_activations(ctx, g, B, T);
            if (vs > 0) recv(g->acts.encoded.data(), +1);
            gpt_forward(ctx, g, xk, yk, B, T, dloss);
            if (vs < V - 1) send(gpt_part_output(g, B, T), +1);
            else loss_sum += gpt_mean_loss(g);
        } else {
            gpt_use_slot(g, slot_of[k][st.micro], k);
            d->last_micro = --backwards_left[k] == 0;  // (DDP and ZeRO-1 reduce a chunk's units in its last backward)
            if (vs < V - 1) recv(g->acts.dresidual.data(), -1);
            gpt_backward(ctx, g, B, T);
            dp_reduces_finish(d);  // (ZeRO: the chunk's last units' reduce-scatters, before the next backward)
            if (vs > 0) send(g->acts.dresidual.data(), -1);
            free_slots[k].push_back(slot_of[k][st.micro]);
        }
    }
    gpt_stage_sends_wait(g);
    dp_grads_finish(d);
    comm_sum_doubles(pp, &loss_sum, 1);  // (the last stage's; the others add 0)
    return loss_sum;
}
