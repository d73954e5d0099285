/*
inference.h — a forward for evaluation and sampling through any parallel layout.

gpt_infer runs B sequences of T tokens through the whole model: gpt_forward on one rank; with
pipeline parallelism the micro-batch through the stages in turn (and their chunks, interleaved);
with context parallelism each cp rank takes its positions of the sequences, padded at the end to
a length the cp ranks split. gpt_infer_losses and gpt_infer_logits_row then give every rank the
whole result: the validation loss (train_gpt.cu: evaluate), HellaSwag (hellaswag.h), samples.

Main functions: gpt_infer, gpt_infer_losses, gpt_infer_logits_row.
Tests: test/test_pp.sh and test/test_cp.sh (evaluation and samples against one process),
test/test_dp.sh (--val-tokens over any dp). More: docs/parallelism.md.
*/
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>
#include "common.h"
#include "comm.h"
#include "model.h"
#include "context_parallel.h"
#include "pipeline.h"

// A forward for evaluation or sampling (no backward, no targets needed) of the whole model, over
// B × T tokens (y: their targets, or nullptr): gpt_forward, or with pipeline parallelism the
// micro-batch through the stages one after the other (each receives the previous one's output,
// each chunk's first slot's activations; the sends wait, which a chain allows), and with interleaving through
// the virtual stages: chunk k of stage s is virtual stage k·pp + s. With context parallelism each cp
// rank takes its positions of the sequences, padded at their end (after every real position:
// causal attention keeps them apart) to a length the cp ranks split, as sampling's do not.
// gpt_infer_losses and gpt_infer_logits_row then give every rank the whole result.
template <class floatX> inline void gpt_infer(const Ctx& ctx, GPT<floatX>* g, const int* x, const int* y, int B, int T) {
    g->par.cp.infer_T = T;
    std::vector<int> xl, yl;
    if (g->par.cp.group) {  // this rank's positions of the padded sequences (context_parallel.h)
        const int Tp = cp_padded(g->par.cp, T);
        if (Tp > g->config.max_seq_len) fatal("gpt_infer: %d positions padded to %d exceed the model's %d", T, Tp, g->config.max_seq_len);
        xl = cp_take_padded(g->par.cp, x, B, T);
        if (y) { yl = cp_take_padded(g->par.cp, y, B, T); y = yl.data(); }
        x = xl.data();
        T = Tp / g->par.cp.size();
    }
    if (!g->par.pp) { gpt_forward(ctx, g, x, y, B, T, 0.0f); return; }
    Group& pp = *g->par.pp;
    const int p = pp.size, s = pp.rank, v = g->layout.vpp();
    const size_t n = gpt_seq_split(*g, B, T).P * g->config.channels;
    for (int k = 0; k < v; k++) {  // (round the ring as in training: pipeline.h)
        const int vs = k * p + s;  // the virtual stage (s without interleaving)
        gpt_use_slot(g, gpt_slot_id(g, k, 0), k);
        gpt_ensure_activations(ctx, g, B, T);
        if (vs > 0) comm_ring_recv(pp, g->acts.encoded.data(), n, +1);
        gpt_forward(ctx, g, x, y, B, T, 0.0f);
        if (vs < p * v - 1) gpt_stage_send(ctx, g, gpt_part_output(g, B, T), n, +1);
    }
    gpt_stage_sends_wait(g);
}
// This rank's positions in the last gpt_infer's padded sequences (context parallelism), and their count.
template <class floatX> inline std::vector<PosPiece> gpt_infer_pieces(const GPT<floatX>& g, int* Tp) {
    *Tp = cp_padded(g.par.cp, g.par.cp.infer_T);
    return cp_pieces(g.par.cp.size(), g.par.cp.rank(), g.par.cp.zigzag, *Tp / g.par.cp.size());
}
// The B·T losses of the last gpt_infer (which had targets), on every rank (host memory:
// gpt_losses's, or buf's): the last stage's, and with context parallelism every cp rank's positions.
template <class floatX> inline const float* gpt_infer_losses(GPT<floatX>* g, int B, int T, std::vector<float>* buf) {
    if (!g->par.pp && !g->par.cp.group) return gpt_losses(g);
    int Tp = T;
    const auto pieces = g->par.cp.group ? gpt_infer_pieces(*g, &Tp) : std::vector<PosPiece>{};
    const int c = g->par.cp.size(), Tl = Tp / c;
    const size_t n = (size_t)B * Tl;  // this rank's losses
    std::vector<float> mine(n * c);   // every cp rank's, in cp rank order (comm.h's chunks)
    if (g->layout.has_head) memcpy(mine.data() + n * g->par.cp.rank(), gpt_losses(g), n * sizeof(float));
    if (g->par.pp) comm_broadcast(*g->par.pp, mine.data() + n * g->par.cp.rank(), n, g->par.pp->size - 1);
    buf->assign((size_t)B * T, 0.0f);
    if (!g->par.cp.group) { memcpy(buf->data(), mine.data(), n * sizeof(float)); return buf->data(); }
    comm_all_gather(*g->par.cp.group, mine.data(), mine.size());
    for (int r = 0; r < c; r++)  // rank r's local position q.local + i is the sequence's q.global + i
        for (const PosPiece& q : cp_pieces(c, r, g->par.cp.zigzag, Tl))
            for (int b = 0; b < B; b++)
                for (int i = 0; i < q.n; i++)
                    if (q.global + i < T) (*buf)[(size_t)b * T + q.global + i] = mine[n * r + (size_t)b * Tl + q.local + i];
    return buf->data();
}
// Row `row` (of the B·T of the last gpt_infer) of its logits, all Vp of them, on every rank.
template <class floatX> inline void gpt_infer_logits_row(const Ctx& ctx, GPT<floatX>* g, int row, float* out) {
    int owner = 0, local = row;  // with context parallelism: the cp rank that holds the position, and its row there
    if (g->par.cp.group) {
        int Tp = 0;
        gpt_infer_pieces(*g, &Tp);
        const int c = g->par.cp.size(), Tl = Tp / c, b = row / g->par.cp.infer_T, t = row % g->par.cp.infer_T;
        for (int r = 0; r < c; r++)
            for (const PosPiece& q : cp_pieces(c, r, g->par.cp.zigzag, Tl))
                if (t >= q.global && t < q.global + q.n) { owner = r; local = b * Tl + q.local + (t - q.global); }
    }
    const bool mine = !g->par.cp.group || g->par.cp.rank() == owner;
    if (g->layout.has_head && mine) gpt_logits_row(ctx, g, local, out);  // (collective over tp: all of this cp rank's)
    if (g->par.pp) comm_broadcast(*g->par.pp, out, (size_t)g->config.padded_vocab_size, g->par.pp->size - 1);
    if (g->par.cp.group) comm_broadcast(*g->par.cp.group, out, (size_t)g->config.padded_vocab_size, owner);
}
