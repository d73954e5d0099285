/*
data_parallel.h — data parallelism: DDP and ZeRO stages 1, 2 and 3, written once.

dp ranks run the whole model on their own micro-batches and sum their gradients. The stages
differ only in who keeps what (ZeRO, Rajbhandari et al., 2020):

  stage  parameters   gradients                 AdamW m, v   bytes a rank (bf16, Ψ params, N ranks)
  0      replicated   all-reduced               replicated   16Ψ
  1      replicated   reduce-scattered          sharded      4Ψ + 12Ψ/N
  2      replicated   sharded, a unit at a time sharded      2Ψ + 14Ψ/N
  3      sharded      sharded                   sharded      16Ψ/N

Every unit (embeddings, each block, the final LayerNorm) is cut into dp chunks; rank r owns
chunk r. With 16-bit training the fp32 master weights live beside m and v. With NCCL each unit's
reduction starts as soon as its gradient is ready, behind the next unit's backward (--overlap).
The four stages give bit-identical runs without accumulation.

Main functions: dp_init (the storage and the model's pointers), dp_reduce_unit (a unit's gradient
handed over), dp_grad_norm, dp_update, dp_skip_update, dp_get_unit / dp_set_unit (model files).

Tests: test/test_dp.sh (dp = 2, 3, 4, every stage, against one process; memory and bytes
against the tables; overlap; resume; resharding; the emulated GPU with NCCL).
More: docs/parallelism.md.
*/
#pragma once
#include <optional>
#include <vector>
#include "common.h"
#include "comm.h"
#include "model.h"
#include "adamw.cuh"
#include "global_norm.cuh"
#include "profiler.h"

template <class floatX> struct DataParallel : ParamHooks {
    static constexpr bool has_master = !std::is_same_v<floatX, float>;  // a separate fp32 master copy?
    GPT<floatX>* g = nullptr;
    Group* group = nullptr;
    Ctx ctx;
    int zero = 0, N = 1, rank = 0;
    std::vector<Span> units;                  // each unit's place in the full layer-major buffer
    std::vector<ParamRange> ranges;           // the tensors and their weight decay (model.h)
    std::vector<size_t> own_begin, own_end;   // unit-relative range this rank's optimizer updates
    std::vector<size_t> shard_off;            // where unit u's owned range starts in shard buffers
    size_t shard_size = 0;
    size_t max_unit = 0, biggest_chunk = 0;   // the largest unit but the embeddings; the largest chunk
    Buf<floatX> params_full, grads_full;           // stages < 3 / stages < 2   (all on the Ctx's device)
    Buf<floatX> params_shard, grads_shard;         // stage 3 / stages ≥ 2
    Buf<float> m, v;                          // AdamW moments, sharded for stages ≥ 1
    Buf<float> master;                        // fp32 master weights when floatX is not float (m's layout)
    // stage 3: two gather buffers, the unit each holds, and a pending prefetch
    Buf<floatX> slot[2];
    int slot_unit[2] = {-1, -1};
    int last_slot = 1;                        // the slot acquire handed out last
    CommHandle slot_req[2];
    int prev_unit = -1;
    // stages 2-3: gradient working buffers: the embedding unit's, and two for the others (unit u
    // writes unit_grad[u % 2], so that the backward of u − 1 never writes the one being reduced)
    Buf<floatX> emb_grad, unit_grad[2];
    // stages 1-3: unit u's reduce-scatter lands in chunk_tmp[u % 2] (started on the communication
    // stream, finished when the next unit's gradients are ready; dp_reduce_*)
    Buf<floatX> chunk_tmp[2];
    CommHandle reduce_req[2];
    int reduce_unit[2] = {-1, -1};            // the unit whose reduce-scatter is pending there
    // stages 1-2: each unit's parameter all-gather, started after its update, waited for where
    // the unit's parameters are next read (acquire, dp_get_unit) or written (the next update)
    std::vector<CommHandle> gather_req;
    std::vector<char> gather_pending;
    std::vector<floatX> scratch;                   // comm_all_reduce_sum's
    bool last_micro = true;                   // set by the trainer: reduce now (stages 0-1)?
    bool overlap = true;                      // --overlap 0: wait for each transfer at once, no prefetch
    // pipeline parallelism (pipeline.h): the first and last stage hold the embeddings (the
    // classifier is wte); `tied` groups the two, whose gradients are summed at the step's end
    // (dp_grads_finish), so grads_ready(0) leaves unit 0 to it
    Group* tied = nullptr;

    // ---- ParamHooks
    void acquire(int u) override;
    void release(int) override {}
    void grads_ready(int u) override;
};

// The optimizer partition: stage 0 updates everything on every rank, stages ≥ 1 one chunk.
template <class floatX> inline int dp_opt_parts(const DataParallel<floatX>& d) { return d.zero == 0 ? 1 : d.N; }

// The layout: each unit's place, the chunk of it this rank owns, and the sizes of the buffers
// that hold them (no memory yet: dp_memory can then say what dp_alloc will take, and the trainer
// refuse a model state that cannot fit before allocating it: planner.h's plan_state).
template <class floatX> inline void dp_layout(DataParallel<floatX>* d, GPT<floatX>* g, Group* group, int zero, const Ctx& ctx) {
    d->g = g; d->group = group; d->zero = zero; d->N = group->size; d->rank = group->rank; d->ctx = ctx;
    const GPTConfig& c = g->config;
    d->ranges = param_ranges(c, g->layout);
    int U = gpt_num_units(c), P = dp_opt_parts(*d), pr = zero == 0 ? 0 : d->rank;
    d->units.resize(U); d->own_begin.resize(U); d->own_end.resize(U); d->shard_off.resize(U);
    d->gather_req.resize(U); d->gather_pending.assign(U, 0);
    size_t off = 0;
    d->max_unit = d->biggest_chunk = 0;
    for (int u = 0; u < U; u++) {
        Span s = unit_span(c, g->layout, u);
        d->units[u] = s;
        d->own_begin[u] = chunk_begin(s.size, P, pr);
        d->own_end[u] = chunk_end(s.size, P, pr);
        d->shard_off[u] = off;
        off += chunk_size(s.size, P);
        if (u > 0) d->max_unit = std::max(d->max_unit, s.size);
        d->biggest_chunk = std::max(d->biggest_chunk, chunk_size(s.size, P));
    }
    d->shard_size = off;
}

// Elements of each buffer the stage keeps (the last four: each of a pair) — the table above.
struct DPSizes { size_t params_full, params_shard, grads_full, grads_shard, moment, master, chunk_tmp, emb_grad, unit_grad, slot; };
template <class floatX> inline DPSizes dp_sizes(const DataParallel<floatX>& d) {
    const size_t total = d.g->layout.total, off = d.shard_size, emb = d.units[0].size;
    const int z = d.zero;
    return {z < 3 ? total : 0, z < 3 ? 0 : off, z < 2 ? total : 0, z < 2 ? 0 : off, off, DataParallel<floatX>::has_master ? off : 0,
            z >= 1 ? d.biggest_chunk : 0, z >= 2 ? emb : 0, z >= 2 ? d.max_unit : 0, z == 3 ? std::max(d.max_unit, emb) : 0};
}

// Allocates dp_sizes' buffers and points the model at them.
template <class floatX> inline void dp_alloc(DataParallel<floatX>* d) {
    const DPSizes n = dp_sizes(*d);
    const Ctx& ctx = d->ctx;
    d->params_full.alloc(ctx, n.params_full); d->params_shard.alloc(ctx, n.params_shard);
    d->grads_full.alloc(ctx, n.grads_full); d->grads_shard.alloc(ctx, n.grads_shard);
    d->m.alloc(ctx, n.moment);
    d->v.alloc(ctx, n.moment);
    d->master.alloc(ctx, n.master);
    for (Buf<floatX>& b : d->chunk_tmp) b.alloc(ctx, n.chunk_tmp);
    d->emb_grad.alloc(ctx, n.emb_grad);
    for (Buf<floatX>& b : d->unit_grad) b.alloc(ctx, n.unit_grad);
    for (Buf<floatX>& b : d->slot) b.alloc(ctx, n.slot);
    GPT<floatX>* g = d->g;
    const int zero = d->zero;
    for (size_t u = 0; u < d->units.size(); u++) {
        g->params[u] = zero < 3 ? d->params_full.data() + d->units[u].offset : nullptr;  // stage 3: set by acquire
        g->grads[u] = zero < 2 ? d->grads_full.data() + d->units[u].offset
                               : (u == 0 ? d->emb_grad.data() : d->unit_grad[u % 2].data());
    }
    g->hooks = d;
}

template <class floatX> inline void dp_init(DataParallel<floatX>* d, GPT<floatX>* g, Group* group, int zero, const Ctx& ctx) {
    dp_layout(d, g, group, zero, ctx);
    dp_alloc(d);
}

// ---- parameters in and out, one full unit at a time

// Stages 1-2: the compute stream waits for unit u's parameter all-gather, if one is pending.
template <class floatX> inline void dp_params_wait(DataParallel<floatX>* d, int u) {
    if (!d->gather_pending[u]) return;
    CommScope prof(d->ctx, *d->group, "all-gather wait (exposed)");
    comm_wait(&d->gather_req[u]);
    d->gather_pending[u] = 0;
}
// ... for every unit: before the parameters leave the trainer's hands (the end of the run).
template <class floatX> inline void dp_params_wait_all(DataParallel<floatX>* d) {
    for (size_t u = 0; u < d->units.size(); u++) dp_params_wait(d, (int)u);
}

// Pointer to element x (unit-relative, owned by this rank) of unit u in a buffer laid out like
// the optimizer state (full for stage 0, shard otherwise), and in the gradient / parameters.
template <class floatX> inline float* dp_opt_at(DataParallel<floatX>* d, Buf<float>& buf, int u, size_t x) {
    return d->zero == 0 ? buf.data() + d->units[u].offset + x : buf.data() + d->shard_off[u] + (x - d->own_begin[u]);
}
template <class floatX> inline floatX* dp_grad_at(DataParallel<floatX>* d, int u, size_t x) {
    return d->zero < 2 ? d->grads_full.data() + d->units[u].offset + x : d->grads_shard.data() + d->shard_off[u] + (x - d->own_begin[u]);
}
template <class floatX> inline floatX* dp_param_at(DataParallel<floatX>* d, int u, size_t x) {
    return d->zero < 3 ? d->params_full.data() + d->units[u].offset + x : d->params_shard.data() + d->shard_off[u] + (x - d->own_begin[u]);
}

// Stores a full unit's fp32 values (from init or a model file): the working parameters (stages
// < 3 all of them, stage 3 its chunk; rounded to floatX) and, with a separate master, its chunk of
// the master in the optimizer's layout.
template <class floatX> inline void dp_set_unit(DataParallel<floatX>* d, int u, const float* full) {
    const size_t S = d->units[u].size, b = d->own_begin[u], e = d->own_end[u];
    dp_params_wait(d, u);
    const size_t wb = d->zero < 3 ? 0 : b, we = d->zero < 3 ? S : e;  // the working range this rank keeps
    std::vector<floatX> rounded(we - wb);
    for (size_t i = wb; i < we; i++) rounded[i - wb] = from_f<floatX>(full[i]);
    ctx_copy(d->ctx, dp_param_at(d, u, wb), rounded.data(), (we - wb) * sizeof(floatX));
    if (DataParallel<floatX>::has_master) ctx_copy(d->ctx, dp_opt_at(d, d->master, u, b), full + b, (e - b) * sizeof(float));
}

// Writes unit u's full fp32 values into out (host memory): the master where there is one.
// Collective (every dp rank must call) when the values are sharded: stage 3, or a master in
// stages ≥ 1.
template <class floatX> inline void dp_get_unit(DataParallel<floatX>* d, int u, float* out) {
    const size_t S = d->units[u].size, b = d->own_begin[u], e = d->own_end[u];
    dp_params_wait(d, u);
    if constexpr (DataParallel<floatX>::has_master) {
        ctx_copy(d->ctx, out + b, dp_opt_at(d, d->master, u, b), (e - b) * sizeof(float));
        if (d->zero >= 1) comm_all_gather(*d->group, out, S);
    } else {
        ctx_copy(d->ctx, out + (d->zero < 3 ? 0 : b), dp_param_at(d, u, d->zero < 3 ? 0 : b), (d->zero < 3 ? S : e - b) * sizeof(float));
        if (d->zero == 3) comm_all_gather(*d->group, out, S);
    }
}

// ---- stage 3: gather before use, prefetch the next unit

// The unit the model will read after u, given the one before it (model.h's order: forward
// 0, 1..L, L+1, 0 (classifier); backward 0, L+1, L..1; the encoder backward reads none; with an
// untied classifier, in lnf's unit: forward 0, 1..L, L+1; backward L+1, L..1).
// -1 when the step's parameter use ends (no prefetch across the optimizer step).
inline int dp_predict_next(const GPTConfig& c, int u, int prev) {
    const int lnf = c.num_layers + 1;
    if (!c.tied && u == 0) return 1;                            // encoder → block 0
    if (!c.tied && u == lnf) return prev == lnf ? u - 1 : lnf;  // forward → its backward; backward → last block
    if (u == 0) return prev == lnf ? 0 : prev == 0 ? lnf : 1;  // classifier fwd → bwd; cls bwd → lnf; encoder → block 0
    if (u == lnf) return prev == 0 ? u - 1 : 0;                // backward → last block; forward → classifier
    if (prev == u - 1) return u + 1;                           // forward through the blocks (u + 1 = lnf after the last)
    if (prev == u + 1) return u > 1 ? u - 1 : -1;              // backward through the blocks; block 0 ends the step
    return -1;
}

// Puts my chunk of unit u into slot s and starts the all-gather (async unless wait).
template <class floatX> inline void dp_gather_into(DataParallel<floatX>* d, int s, int u, bool wait) {
    CommScope prof(d->ctx, *d->group, "all-gather parameters");
    comm_wait(&d->slot_req[s]);
    floatX* buf = d->slot[s].data();
    ctx_copy(d->ctx, buf + d->own_begin[u], d->params_shard.data() + d->shard_off[u], (d->own_end[u] - d->own_begin[u]) * sizeof(floatX));
    comm_all_gather_start(*d->group, buf, d->units[u].size, &d->slot_req[s]);
    d->slot_unit[s] = u;
    if (wait) comm_wait(&d->slot_req[s]);
}

template <class floatX> inline void DataParallel<floatX>::acquire(int u) {
    if (zero < 3) return dp_params_wait(this, u);
    int s = slot_unit[0] == u ? 0 : slot_unit[1] == u ? 1 : -1;
    if (s < 0) {  // not there: gather now, keeping a pending prefetch, else the unit used last
        s = slot_req[0].active ? 1 : slot_req[1].active ? 0 : 1 - last_slot;
        dp_gather_into(this, s, u, true);
    } else {
        CommScope prof(ctx, *group, "all-gather wait (exposed)");
        comm_wait(&slot_req[s]);
    }
    g->params[u] = slot[s].data();
    last_slot = s;
    int next = dp_predict_next(g->config, u, prev_unit);
    prev_unit = u;
    if (overlap && next >= 0 && next != u && slot_unit[1 - s] != next && units[next].size > 0)  // (not another pipeline stage's)
        dp_gather_into(this, 1 - s, next, false);
}

// ---- gradients

// Stages 1-3: reduce-scatter unit u's gradient into chunk_tmp[u % 2] (NCCL: on the
// communication stream, while the backward of the next unit runs).
template <class floatX> inline void dp_reduce_start(DataParallel<floatX>* d, int u) {
    CommScope prof(d->ctx, *d->group, "reduce-scatter gradients");
    const int p = u % 2;
    const floatX* grad = d->zero < 2 ? d->grads_full.data() + d->units[u].offset : d->g->grads[u];
    comm_reduce_scatter_sum_start(*d->group, grad, d->chunk_tmp[p].data(), d->units[u].size, &d->reduce_req[p]);
    d->reduce_unit[p] = u;
}
// ... and finish it (on the compute stream, after waiting for it): stage 1 puts my chunk in
// place in the full gradient; stages 2-3 add it to my gradient shard (accumulation) and clear
// the unit's working buffer for its next use.
template <class floatX> inline void dp_reduce_finish(DataParallel<floatX>* d, int p) {
    const int u = d->reduce_unit[p];
    if (u < 0) return;
    { CommScope prof(d->ctx, *d->group, "reduce-scatter wait (exposed)"); comm_wait(&d->reduce_req[p]); }
    const size_t n = d->own_end[u] - d->own_begin[u];
    if (d->zero == 1) ctx_copy(d->ctx, d->grads_full.data() + d->units[u].offset + d->own_begin[u], d->chunk_tmp[p].data(), n * sizeof(floatX));
    else {
        add_inplace(d->ctx, d->grads_shard.data() + d->shard_off[u], d->chunk_tmp[p].data(), n);
        ctx_zero(d->ctx, d->g->grads[u], d->units[u].size * sizeof(floatX));
    }
    d->reduce_unit[p] = -1;
}

// Unit u's gradient over dp (the backward hands over the units in model.h's order): stage 0
// starts its all-reduce; stages 1-3 start its reduce-scatter and finish the previous unit's,
// whose transfer had this unit's backward to hide behind. The embedding unit, last, finishes both.
template <class floatX> inline void dp_reduce_unit(DataParallel<floatX>* d, int u) {
    if (d->zero < 2 && !d->last_micro) return;  // accumulate locally; reduce once per step
    if (d->zero == 0) {
        CommScope prof(d->ctx, *d->group, "all-reduce gradients");
        comm_all_reduce_sum_start(*d->group, d->grads_full.data() + d->units[u].offset, d->units[u].size, &d->scratch);  // NCCL: overlaps the backward
        if (!d->overlap) comm_join(*d->group);  // the backward waits for it
        return;
    }
    const int p = u % 2;
    dp_reduce_start(d, u);
    if (!d->overlap) dp_reduce_finish(d, p);
    dp_reduce_finish(d, 1 - p);
    if (u == 0) dp_reduce_finish(d, p);
}
// The backward calls this for units L+1, L, ..., 1, 0. With pipeline parallelism the first and
// last stage hold the embeddings (tied): dp_grads_finish reduces them once the two stages'
// parts are summed.
template <class floatX> inline void DataParallel<floatX>::grads_ready(int u) {
    if (u == 0 && tied && tied->size > 1) return;
    dp_reduce_unit(this, u);
}

// Pipeline parallelism, after each backward of a stage: the reduce-scatters still pending
// finished (its backward ended with a block, not the embeddings, whose grads_ready finishes
// both): before the next backward writes the working buffers (stages 2-3) or takes a slot.
template <class floatX> inline void dp_reduces_finish(DataParallel<floatX>* d) {
    if (d->zero >= 1) { dp_reduce_finish(d, 0); dp_reduce_finish(d, 1); }
}
// ... and after its last backward of the step, the embeddings' gradient of the first and the
// last stage (tied: the encoder's and the classifier's parts of wte's) summed between the two and
// reduced over dp as grads_ready would have. The two sum their parts accumulated over the step's
// micro-batches: in the full gradient (stages 0-1) or the embeddings' working buffer, which
// grads_ready(0) left alone (stages 2-3).
template <class floatX> inline void dp_grads_finish(DataParallel<floatX>* d) {
    dp_reduces_finish(d);  // (before unit 0 takes a slot)
    if (d->tied && d->tied->size > 1 && d->units[0].size > 0) {
        { CommScope prof(d->ctx, *d->tied, "all-reduce tied embeddings");
          comm_all_reduce_sum(*d->tied, d->g->grads[0], d->units[0].size, &d->scratch); }
        dp_reduce_unit(d, 0);  // (last_micro is set: the stage's last backward has run)
    }
}

template <class floatX> inline void dp_zero_grad(DataParallel<floatX>* d) {
    const double bytes = (double)sizeof(floatX) * (d->grads_full.size() + d->grads_shard.size() + d->emb_grad.size() +
                                              d->unit_grad[0].size() + d->unit_grad[1].size());
    OpScope prof(d->ctx, 0, bytes, "zero gradients");
    for (Buf<floatX>* b : {&d->grads_full, &d->grads_shard, &d->emb_grad, &d->unit_grad[0], &d->unit_grad[1]})
        ctx_zero(d->ctx, b->data(), b->size() * sizeof(floatX));
}

// ‖g‖: each rank sums the squares of its dp chunk of every unit, the partial sums are added in
// rank order. Every stage holds (at least) its chunk of the reduced gradient, so the norm is
// the same number in every stage. With tensor parallelism each tp rank sums its slice, the
// tensors every tp rank holds a copy of counted on tp rank 0 alone (params.h: unit_norm_spans),
// and the tp ranks' sums are added in rank order too.
template <class floatX> inline float dp_grad_norm(DataParallel<floatX>* d) {
    if (d->zero == 0) {  // DDP's per-unit all-reduces, if asynchronous (NCCL)
        CommScope prof(d->ctx, *d->group, "all-reduce wait (exposed)");
        comm_join(*d->group);
    }
    const GPT<floatX>& g = *d->g;
    std::vector<NormPiece<floatX>> pieces;
    for (size_t u = 0; u < d->units.size(); u++) {
        size_t S = d->units[u].size, b = chunk_begin(S, d->N, d->rank), e = chunk_end(S, d->N, d->rank);
        for (const Span& sp : unit_norm_spans(g.config, g.layout, (int)u)) {  // ∩ my chunk
            const size_t x0 = std::max(b, sp.offset), x1 = std::min(e, sp.offset + sp.size);
            if (x1 > x0) pieces.push_back({dp_grad_at(d, (int)u, x0), x1 - x0});
        }
    }
    double s = global_norm_squared(d->ctx, pieces);
    CommScope prof(d->ctx, *d->group, "loss and norm sums");
    comm_sum_doubles(*d->group, &s, 1);
    if (g.par.tp.group) comm_sum_doubles(*g.par.tp.group, &s, 1);
    if (g.par.pp) comm_sum_doubles(*g.par.pp, &s, 1);  // pipeline stages: each its units (the embeddings once)
    return (float)sqrt(s);
}

// ZeRO-3 at the end of a step: waits for a prefetch still in flight and empties both gather
// slots, so the next forward gathers every unit afresh. (Other stages: nothing to do.)
template <class floatX> inline void dp_slots_reset(DataParallel<floatX>* d) {
    if (d->zero != 3) return;
    CommScope prof(d->ctx, *d->group, "all-gather wait (exposed)");
    for (int s = 0; s < 2; s++) { comm_wait(&d->slot_req[s]); d->slot_unit[s] = -1; }
    d->prev_unit = -1;
}

// AdamW on this rank's part of each unit; stages 1-2 then start the unit's all-gather (NCCL: on
// the communication stream, while the next units update and the next forward runs up to the
// unit). One update per unit: its part is contiguous in every buffer, and the tensors that decay
// are runs in it.
template <class floatX>
inline void dp_update(DataParallel<floatX>* d, float lr, float beta1, float beta2, float eps, float wd, int t, float grad_scale) {
    for (size_t u = 0; u < d->units.size(); u++) {
        if (d->units[u].size == 0) continue;  // another pipeline stage's
        const size_t base = d->units[u].offset, x0 = d->own_begin[u], x1 = d->own_end[u];
        dp_params_wait(d, (int)u);  // (the last step's gather, if nothing has read the unit since)
        if (x1 > x0) {
            DecayRuns decay;  // the 2-D weights inside my part, relative to its start
            for (const ParamRange& r : d->ranges) {
                size_t b = std::max(r.offset, base + x0), e = std::min(r.offset + r.size, base + x1);
                if (r.decay && e > b) decay.add(b - base - x0, e - base - x0);
            }
            float* theta;  // the fp32 master of my part, and the working copy to rewrite (if separate)
            floatX* copy;
            if constexpr (DataParallel<floatX>::has_master) { theta = dp_opt_at(d, d->master, (int)u, x0); copy = dp_param_at(d, (int)u, x0); }
            else { theta = dp_param_at(d, (int)u, x0); copy = nullptr; }
            adamw_update(d->ctx, theta, dp_grad_at(d, (int)u, x0), dp_opt_at(d, d->m, (int)u, x0), dp_opt_at(d, d->v, (int)u, x0),
                         copy, x1 - x0, lr, beta1, beta2, eps, wd, decay, t, grad_scale);
        }
        if (d->zero == 1 || d->zero == 2) {  // (every rank, owner of a part or not: it is collective)
            { CommScope prof(d->ctx, *d->group, "all-gather parameters");
              comm_all_gather_start(*d->group, d->params_full.data() + base, d->units[u].size, &d->gather_req[u]); }
            d->gather_pending[u] = 1;
            if (!d->overlap) dp_params_wait(d, (int)u);
        }
    }
    dp_slots_reset(d);  // the gathered copies are stale now
}

// A step whose update is skipped (--skip-loss-z, --skip-norm-z: outliers.h): its gradients are
// dropped and the weights and AdamW's moments stay as they are. Stages 1-2 have nothing to
// gather (their full parameters are unchanged); ZeRO-3 forgets its gathered units as after an
// update, so every step leaves the same state behind.
template <class floatX> inline void dp_skip_update(DataParallel<floatX>* d) { dp_slots_reset(d); }

// Bytes this rank holds, by kind (the ZeRO table), and the working buffers outside it: all the
// storage owner holds on the Ctx's device, as Buf allocates it (known from the layout, before
// dp_alloc; test_dp.sh holds it to the tables and to the allocator's count).
struct DPMemory {
    double params, grads, optimizer, working;
    double total() const { return params + grads + optimizer + working; }
};
template <class floatX> inline DPMemory dp_memory(const DataParallel<floatX>& d) {
    const DPSizes n = dp_sizes(d);
    auto b = [](size_t count) { return (double)Buf<floatX>::bytes_for(count); };
    auto f = [](size_t count) { return (double)Buf<float>::bytes_for(count); };
    return {b(n.params_full) + b(n.params_shard), b(n.grads_full) + b(n.grads_shard), 2 * f(n.moment) + f(n.master),
            2 * b(n.slot) + b(n.emb_grad) + 2 * b(n.unit_grad) + 2 * b(n.chunk_tmp)};
}
