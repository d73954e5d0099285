/*
planner.h — the memory plan: which micro-batch fits beside the model state, on every rank.

First the state: a state that cannot fit is refused at once (exit 2), with the --zero 3 or the
ranks that would let it fit. Then the micro-batch:

  need(B) = activations(B) · (1 + 1%) + send copies(B) + fp8 scratch(B) + GELU scratch(B)
            + attention scratch(B) + 64 MiB     ≤   free / (ranks sharing it)

A --batch-size that does not fit is refused at start with one that does; --batch-size auto takes
the largest. Every rank plans with its own free memory, then all agree on the smallest.

Main functions: plan_state (the state, before anything is allocated), plan_batch (the micro-batch),
rank_room (what this rank may still be given).

Tests: test/test_gpu_train.sh (the peak is the state plus the predicted activations within 1%;
the refusal; auto), test/test_cli.sh (the host's memory), test/test_dp.sh (ranks with different
GPUs agree), test/test_pp.sh (each stage's send copies). More: docs/training.md.
*/
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "common.h"
#include "comm.h"
#include "data_parallel.h"
#include "model.h"
#include "pipeline.h"

// Does B×T fit on every rank (or, for --batch-size auto, B = 0: which B does)? Returns the B to
// run with, or stops the run with one line. Called once the model state is allocated (state_bytes
// of it) and before the weights are drawn or read (a minute for the largest models). The reserve:
//   - SCRATCH_SHARE for the kernels' scratch, which also grows with B·T (attention's D rows, the
//     column-sum partials): under 0.3% of the activations on the emulated GPU, and
//     test_gpu_train.sh checks that the peak stays within 1%;
//   - SCRATCH_FIXED for what a GPU rounds and loads lazily (cudaMalloc's 2 MiB pages over the ~30
//     activation buffers, the kernels' code on first launch).
// All ranks exchange their numbers (each GPU's free memory differs), then all stop or none do.
// With auto every rank takes the largest B that fits on all of them and divides the step's
// D/(T·dp) sequences (1 always does), so the step is the one asked for, in D/(B·T·dp) micro-batches.
constexpr double SCRATCH_SHARE = 0.01, SCRATCH_FIXED = 64.0 * 1048576;

// What this rank may still be given: the GPU's free memory, or the host's available memory, split
// over the ranks of this node that share it (all of them on the host; on GPUs those with the same
// local rank modulo the GPU count (make_ctx), several when --comm mpi runs more ranks than the
// node has GPUs). bytes ≤ 0 on the host: unknown, no check.
struct Room { double bytes; int sharing; bool by_cgroup; };
inline Room rank_room(const Ctx& ctx, const Mesh& mesh) {
    const bool gpu = ctx.device == Device::CUDA;
    const int n = gpu ? cuda_device_count() : 1, sharing = (mesh.local_size - mesh.local_rank % n + n - 1) / n;
    bool by_cgroup = false;
    const double bytes = gpu ? (double)gpu_free_bytes() : host_available_bytes(&by_cgroup);
    return {bytes / sharing, sharing, by_cgroup};
}
// "rank 3's GPU has 10.0 GiB free (2.5 GiB for each of the 4 ranks that share it)", of the rank
// with the least room (rank < 0: a single process)
inline std::string room_words(const Ctx& ctx, int rank, const Room& r) {
    const bool gpu = ctx.device == Device::CUDA;
    return (rank >= 0 ? "rank " + std::to_string(rank) + "'s " : "the ") + (gpu ? "GPU has " : "host has ") +
           format_bytes(r.bytes * r.sharing) +
           (gpu ? " free" : r.by_cgroup ? " available to this process's memory cgroup" : " available") +
           (r.sharing > 1 ? " (" + format_bytes(r.bytes) + " for each of the " + std::to_string(r.sharing) + " ranks that share it)" : "");
}

// Does the model state (data_parallel.h's dp_memory, from the layout: nothing allocated yet) fit
// on every rank? If not, every rank stops with one line saying what it needs, what there is, and
// what would spread it: --zero 3 (zero3_bytes a rank, the layout at stage 3) where there are
// several data-parallel ranks and that fits, else more ranks. Every rank checks its own room; all
// agree, so all stop or none do.
inline void plan_state(const Ctx& ctx, const DPMemory& mem, int zero, int dp_ranks, double zero3_bytes, Mesh& mesh) {
    const Room room = rank_room(ctx, mesh);
    const bool fits = room.bytes <= 0 && ctx.device != Device::CUDA ? true : mem.total() <= room.bytes;
    enum { FITS, ROOM, SHARING, CGROUP, N };
    std::vector<double> all(N * (size_t)mesh.world, 0.0);
    double* mine = &all[N * (size_t)mesh.rank];
    mine[FITS] = fits; mine[ROOM] = room.bytes; mine[SHARING] = room.sharing; mine[CGROUP] = room.by_cgroup;
    comm_sum_doubles(mesh.world_group, all.data(), (int)all.size());
    int worst = -1;
    for (int r = 0; r < mesh.world; r++)
        if (!all[N * r + FITS] && (worst < 0 || all[N * r + ROOM] < all[N * worst + ROOM])) worst = r;
    if (worst < 0) return;
    const double* w = &all[N * (size_t)worst];
    const Room least{w[ROOM], (int)w[SHARING], w[CGROUP] != 0};
    const std::string spread = zero < 3 && dp_ranks > 1 && zero3_bytes <= least.bytes
        ? "--zero 3 shards it over the " + std::to_string(dp_ranks) + " data-parallel ranks: " + format_bytes(zero3_bytes) + " a rank"
        : "spread it over more ranks (--zero 3 with more data-parallel ranks, --tp, --pp)";
    const std::string working = mem.working > 0 ? ", working buffers " + format_bytes(mem.working) : "";
    usage_error("the model state needs %s a rank (parameters %s, gradients %s, optimizer %s%s at --zero %d), but %s; %s",
                format_bytes(mem.total()).c_str(), format_bytes(mem.params).c_str(), format_bytes(mem.grads).c_str(),
                format_bytes(mem.optimizer).c_str(), working.c_str(), zero, room_words(ctx, mesh.world > 1 ? worst : -1, least).c_str(),
                spread.c_str());
}

// What the micro-batch plan is asked: B sequences of T (B = 0: auto) on each of dp data-parallel
// ranks, a step of step_tokens tokens, and this rank's pipeline stage (nullptr: none).
struct BatchAsk {
    int B, T, dp;
    long long step_tokens;
    const PPPlan* pp;
    long long sequences() const { return step_tokens / ((long long)T * dp); }  // a step's, on one dp rank
    long long micro_batches(int b) const { return step_tokens / ((long long)b * T * dp); }
    bool divides(int b) const { return step_tokens % ((long long)b * T * dp) == 0; }
    // b splits the step into whole micro-batches, as a stage needs (interleaved: a multiple of p of them)
    bool stage_runs(int b) const { return divides(b) && (pp->kind != PPSchedule::Interleaved || (sequences() / b) % pp->p == 0); }
};

// need(b) of the header: what a micro-batch of b sequences needs beside the model state, with r's
// activations. A stage keeps as many micro-batches' activations (pp_slots) and send copies
// (pp_send_buffers) as its schedule does with m = sequences / b micro-batches.
template <class floatX>
inline double batch_need_bytes(const Ctx& ctx, const GPT<floatX>& g, const BatchAsk& a, Recompute r, int b) {
    const int Tl = a.T / g.par.cp.size();  // (this rank's positions)
    std::vector<int> slots;
    std::array<int, 2> caps{};
    if (a.pp) {
        const int m = (int)(a.sequences() / b);
        slots = pp_slots(a.pp->kind, a.pp->p, a.pp->s, m, a.pp->v);
        caps = pp_send_buffers(a.pp->kind, a.pp->p, a.pp->s, m, a.pp->v);
    }
    return gpt_all_activation_bytes(g, b, Tl, r, a.pp ? &slots : nullptr) * (1 + SCRATCH_SHARE) +
           gpt_send_copy_bytes(g, b, Tl, a.pp ? &caps : nullptr) + gpt_fp8_scratch_bytes(ctx, g, b, Tl) +
           gpt_gelu_scratch_bytes(ctx, g, b, Tl) + gpt_attention_scratch_bytes(ctx, g, b, Tl) + gpt_classifier_scratch_bytes(ctx, g, b, Tl) +
           SCRATCH_FIXED;
}

// The largest micro-batch of at most `most` sequences that fits in room with r's activations (0:
// none). need grows with b, so a binary search finds it. On a pipeline stage need is not monotone
// (m, and with it the slots, shrink as b grows): there every b that can run is tried, largest
// first. room ≤ 0 on the host: the memory is unknown, so there is no check.
template <class floatX>
inline int largest_batch(const Ctx& ctx, const GPT<floatX>& g, const BatchAsk& a, Recompute r, int most, double room) {
    const bool unknown = ctx.device != Device::CUDA && room <= 0;
    if (a.pp) {
        for (int b = most; b >= 1; b--)
            if (a.stage_runs(b) && (unknown || batch_need_bytes(ctx, g, a, r, b) <= room)) return b;
        return 0;
    }
    if (unknown) return most;
    int lo = 0, hi = most;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (batch_need_bytes(ctx, g, a, r, mid) <= room) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// What every rank agrees on: the smallest of each rank's largest micro-batches, and the numbers of
// the rank with the least room, which speaks for all.
struct BatchAgreed {
    int fits, divides, fits_full;  // fits with the run's activations; also splits the step; fits with --recompute full
    double need, state;            // the worst rank's need for the B asked (1 for auto), and its model state
    std::string where;             // room_words of the worst rank
};

// Stops every rank with one line: what a micro-batch needs, what there is, and which B would fit.
[[noreturn]] inline void refuse_batch(const BatchAsk& a, bool step_given, Recompute recompute, const BatchAgreed& w) {
    const bool automatic = a.B == 0;
    // where keeping fewer activations (model.h: Recompute) would let more fit: how many
    // (the search stops at the B asked for: there full fits it whole)
    const std::string with_full = recompute == Recompute::Full || w.fits_full <= w.fits ? ""
        : "; or keep fewer activations: with --recompute full, " + std::string(!automatic && w.fits_full >= a.B ? "" : "up to ") +
              "--batch-size " + std::to_string(w.fits_full) + " fits";
    std::string advice;
    if (w.fits == 0)
        advice = "not even --batch-size 1 fits: use a shorter --seq-len, or spread the model state over more ranks with --zero";
    else if (w.divides == 0)
        advice = "at most --batch-size " + std::to_string(w.fits) + " fits";
    else
        advice = "--batch-size " + std::to_string(w.divides) +
                 (step_given ? "" : " --total-batch-tokens " + std::to_string(a.step_tokens)) + " fits, with the step's " +
                 std::to_string(a.step_tokens) + " tokens in " + std::to_string(a.micro_batches(w.divides)) + " micro-batches" +
                 (w.fits > w.divides ? " (at most --batch-size " + std::to_string(w.fits) + " fits)" : "");
    usage_error("--batch-size %s --seq-len %d: a micro-batch %sneeds %s of activations and scratch, but %s after the model "
                "state (%s of parameters, gradients and optimizer); %s%s", automatic ? "auto" : std::to_string(a.B).c_str(), a.T,
                automatic ? "of 1 " : "", format_bytes(w.need).c_str(), w.where.c_str(), format_bytes(w.state).c_str(), advice.c_str(),
                with_full.c_str());
}

// Every rank's numbers on every rank (each GPU's free memory differs), then what all agree on.
inline BatchAgreed batch_agree(const Ctx& ctx, Mesh& mesh, int fits, int divides, int fits_full, double need, const Room& room,
                               double state_bytes, int most) {
    enum { FITS, DIVIDES, NEED, ROOM, STATE, SHARING, CGROUP, FITS_FULL, N };
    std::vector<double> all(N * (size_t)mesh.world, 0.0);
    double* mine = &all[N * (size_t)mesh.rank];
    mine[FITS] = fits; mine[DIVIDES] = divides; mine[NEED] = need; mine[ROOM] = room.bytes; mine[STATE] = state_bytes;
    mine[SHARING] = room.sharing; mine[CGROUP] = room.by_cgroup; mine[FITS_FULL] = fits_full;
    comm_sum_doubles(mesh.world_group, all.data(), (int)all.size());
    int worst = 0, divides_all = most, fits_full_all = most;
    for (int r = 0; r < mesh.world; r++) {
        if (all[N * r + FITS] < all[N * worst + FITS]) worst = r;
        divides_all = std::min(divides_all, (int)all[N * r + DIVIDES]);
        fits_full_all = std::min(fits_full_all, (int)all[N * r + FITS_FULL]);
    }
    const double* w = &all[N * (size_t)worst];
    const Room least{w[ROOM], (int)w[SHARING], w[CGROUP] != 0};
    return {(int)w[FITS], divides_all, fits_full_all, w[NEED], w[STATE], room_words(ctx, mesh.world > 1 ? worst : -1, least)};
}

// pp: this rank's pipeline stage (nullptr: none). Only a b that splits the step into whole
// micro-batches can run on a stage, so those are the b it tries.
template <class floatX>
inline int plan_batch(const Ctx& ctx, const GPT<floatX>& g, int B, int T, int dp, long long step_tokens,
                      bool step_given, double state_bytes, Mesh& mesh, long long data_most, const PPPlan* pp = nullptr) {
    const BatchAsk a{B, T, dp, step_tokens, pp};
    const bool automatic = B == 0;
    comm_barrier(mesh.world_group);  // every rank's model state allocated: the host's memory then shows all of it
    const Room here = rank_room(ctx, mesh);
    // the largest micro-batch that fits here (up to the B asked for, or for auto the whole step in
    // one, if the data holds that many sequences), and the largest that also splits the step's tokens
    const int most = automatic ? (int)std::min({a.sequences(), data_most, 1LL << 20}) : B;
    const int fits = largest_batch(ctx, g, a, g.recompute, most, here.bytes);
    const int fits_full = largest_batch(ctx, g, a, Recompute::Full, most, here.bytes);  // (for the advice)
    int divides = fits;
    while (divides > 0 && !a.divides(divides)) divides--;
    const double need = batch_need_bytes(ctx, g, a, g.recompute, std::max(B, 1));
    const BatchAgreed w = batch_agree(ctx, mesh, fits, divides, fits_full, need, here, state_bytes, most);
    if (automatic && w.divides > 0) {
        const std::string data_note = data_most < a.sequences() ? "; the data holds at most B=" + std::to_string(data_most) : "";
        print0("batch: --batch-size auto: B=%d, the largest that fits (%s of activations and scratch; %s after the model "
               "state%s) and splits the step's %lld tokens into %lld micro-batch(es)\n", w.divides,
               format_bytes(batch_need_bytes(ctx, g, a, g.recompute, w.divides)).c_str(), w.where.c_str(), data_note.c_str(),
               step_tokens, a.micro_batches(w.divides));
        return w.divides;
    }
    if (!automatic && w.fits >= B) return B;
    refuse_batch(a, step_given, g.recompute, w);
}
