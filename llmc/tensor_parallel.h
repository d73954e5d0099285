/*
tensor_parallel.h — tensor parallelism (Megatron-LM) and sequence parallelism (--tp, --sp).

Each block's attention heads and MLP columns split over the t ranks of the tp group. A column-
parallel layer (rank r: its rows of W) feeds a row-parallel one (rank r: its columns of W), so a
block needs two all-reduces forward (g) and two backward (f):

  x ─ LN ─ qkv (column) ─ attention on NH/t heads ─ proj (row) ─ all-reduce ─ + ─ LN ─ fc (column)
    ─ GELU ─ proj (row) ─ all-reduce ─ +

wte and the classifier are split by vocabulary rows (Vp/t each); the rest is replicated.
With --sp 1 the LayerNorms and residual adds split by position: each all-reduce becomes a
reduce-scatter, and an all-gather comes before each column-parallel layer.

Main functions: sum_rows (the all-reduce, or a reduce-scatter with --sp), gather_rows (the
all-gather), seq_split (a rank's rows), rank_widths (a rank's part of a block), classifier_loss
(the vocabulary-parallel softmax). The model (model.h) calls them; with t = 1 they do nothing.

Tests: test/test_tp.sh (tp = 2 and dp × tp against one process, with and without --sp; memory
and bytes against the formulas; recompute; resume; bf16; the emulated GPU with NCCL).
More: docs/parallelism.md (who holds what, the bytes, sequence parallelism's trades).
*/
#pragma once
#include <vector>
#include "common.h"
#include "comm.h"
#include "gpt_config.h"
#include "layernorm.cuh"
#include "fused_classifier.cuh"

// A model's tensor-parallel state (model.h's ModelParallel holds one).
template <class floatX> struct TensorParallel {
    Group* group = nullptr;        // the tp group (nullptr: whole blocks)
    bool sp = false;               // sequence parallelism over it
    std::vector<floatX> scratch;   // its all-reduces' host scratch (comm.h)
    int size() const { return group ? group->size : 1; }
    int rank() const { return group ? group->rank : 0; }
};

// How a weight or bias is split over the tp ranks (see the header).
enum class TPSplit {
    Replicated,  // every rank holds all of it
    Rows,        // column-parallel: the output features (rows of W, elements of b)
    Cols         // row-parallel: the input features (columns of W)
};

// One contiguous run of a split tensor: full[full_off, +n) = local[local_off, +n).
struct TPPiece { size_t full_off, local_off, n; };

// The runs of a tensor of K columns (a vector: K = 1) that tp rank r of t holds, in its local
// order. Its rows come in groups (group_rows: each group's row count) and Rows splits each group
// on its own: qkv's rows are the q, k and v of every head (NH·hd, NKV·hd, NKV·hd: with grouped
// query attention the k, v groups are smaller), and a rank takes its heads' rows from each.
inline std::vector<TPPiece> tp_pieces(const std::vector<size_t>& group_rows, size_t K, TPSplit split, int t, int r) {
    std::vector<TPPiece> p;
    size_t R = 0;
    for (size_t g : group_rows) R += g;
    if (split == TPSplit::Replicated || t == 1) {
        if (R * K != 0) p.push_back({0, 0, R * K});
    } else if (split == TPSplit::Rows) {
        size_t full = 0, local = 0;  // the group's first row in the whole tensor and in the slice
        for (size_t g : group_rows) {
            const size_t mine = g / t;
            p.push_back({(full + r * mine) * K, local * K, mine * K});
            full += g; local += mine;
        }
    } else {
        const size_t mine = K / t;
        for (size_t i = 0; i < R; i++) p.push_back({i * K + r * mine, i * mine, mine});
    }
    return p;
}

// The widths one tp rank of t holds: of a block (its NH/t heads, its part of the MLP) and of the
// vocabulary. t = 1: the whole model's (Ct = C, Q = qkv's rows, …).
struct RankWidths {
    int C, Ct, NHt, NKVt;  // channels; this rank's attention features, query heads, key/value heads
    int Q, Fc, Hh;         // the rows of its qkv product, of its fc product, its MLP hidden features
    int Vpl;               // its rows of wte (its columns of the logits)
};
inline RankWidths rank_widths(const GPTConfig& c, int t) {
    return {c.channels, c.channels / t, c.num_heads / t, c.kv_heads() / t,
            (int)(c.qkv_rows() / t), (int)(c.fc_rows() / t), c.ffn() / t, c.padded_vocab_size / t};
}

// ----------------------------------------------------------------------------
// sequence parallelism (--sp 1)

// How a forward's N = B·T positions (rows of C features) lie over the tp ranks. Without
// sequence parallelism every rank holds all N rows. With it, rank r holds rows [r·P, r·P + P)
// of the P = ⌈N/t⌉ a rank: the last rank's run past N is padding (zero, see sum_rows), so
// that any B·T splits (sampling runs B = 1, T = any length). A gathered buffer holds t·P rows.
struct SeqSplit {
    size_t N;       // positions in the forward
    size_t P;       // rows this rank holds: N, or ⌈N/t⌉ with sequence parallelism
    size_t whole;   // rows of a gathered buffer: N, or t·P
    bool on;        // sequence parallelism
    int t;          // the tp ranks
};
inline SeqSplit seq_split(size_t N, int t, bool sp) {
    if (!sp || t == 1) return {N, N, N, false, t};
    const size_t P = ceil_div(N, (size_t)t);
    return {N, P, P * t, true, t};
}

// The tensor-parallel buffers of a micro-batch's activations (model.h's Activations holds them):
// every rank's classifier stats (the vocabulary-parallel softmax); with sequence parallelism all
// rows of a LayerNorm output or of a gradient (gathered), and one LayerNorm's parameter gradient.
template <class floatX> struct TPBuffers {
    Buf<float> cls_stats;
    Buf<floatX> whole, ln_grad;
};
template <class floatX, class F> inline void tp_buffers(TPBuffers<floatX>& b, const SeqSplit& s, size_t C, bool head, F&& f) {
    if (s.t > 1) f(b.cls_stats, (head ? 1 : 0) * s.t * s.N * 3);
    if (s.on) { f(b.whole, s.whole * C); f(b.ln_grad, 2 * C); }
}

// What the row operations below need for one forward: the group, how its rows lie, the buffers.
template <class floatX> struct TPRows {
    Group* group;
    SeqSplit s;
    size_t C;
    floatX *whole, *ln_grad;
    std::vector<floatX>* scratch;
};
template <class floatX> inline TPRows<floatX> tp_rows(TensorParallel<floatX>& tp, TPBuffers<floatX>& b, size_t N, size_t C) {
    return {tp.group, seq_split(N, tp.size(), tp.sp), C, b.whole.data(), b.ln_grad.data(), &tp.scratch};
}

// Megatron's f and g: buf ← Σ over the tp ranks of buf, the same bits on every rank. Forward
// it sums the row-parallel layers' partial products; backward, the partial gradients of the
// input the column-parallel layers share. No-op without tensor parallelism.
template <class floatX> inline void sum_over_ranks(const Ctx& ctx, const TPRows<floatX>& r, floatX* buf, size_t n) {
    if (r.s.t == 1) return;
    CommScope prof(ctx, *r.group, "tp all-reduce");
    comm_all_reduce_sum(*r.group, buf, n, r.scratch);
}

// The bias of a row-parallel layer is added once, to tp rank 0's partial product.
template <class floatX> inline const floatX* row_bias(const TPRows<floatX>& r, const floatX* bias) {
    return r.s.t == 1 || r.group->rank == 0 ? bias : nullptr;
}

// All N rows of an activation this rank holds P rows of (Megatron-SP's all-gather before a
// column-parallel layer; its backward's, of the output gradient before a row-parallel one).
// Without sequence parallelism that is `mine` itself; with it, `mine` goes to its place in
// `whole` (t·P·C elements) and the ranks' rows are gathered there.
template <class floatX> inline const floatX* gather_rows(const Ctx& ctx, const TPRows<floatX>& r, const floatX* mine) {
    if (!r.s.on) return mine;
    ctx_copy(ctx, r.whole + (size_t)r.group->rank * r.s.P * r.C, mine, r.s.P * r.C * sizeof(floatX));
    CommScope prof(ctx, *r.group, "tp all-gather");
    comm_all_gather(*r.group, r.whole, r.s.whole * r.C);
    return r.whole;
}

// This rank's rows of Σ over the tp ranks of `partial` (N·C elements written, room for t·P·C):
// a row-parallel layer's partial products (forward), or the partial gradients of the input of
// the column-parallel layers (backward). Without sequence parallelism: Megatron's all-reduce,
// in place, and every rank holds all of it (returns `partial`). With it: a reduce-scatter into
// `mine` (P·C elements, returned), half the bytes of the all-reduce. The rows past N are zeroed
// first, so the padding rows of the residual stream and of its gradient stay exactly zero and
// add nothing to the LayerNorms' parameter gradients, whatever the buffer held before (the rows
// of an earlier forward of more positions; the GPU's allocations are not zeroed per step).
template <class floatX> inline floatX* sum_rows(const Ctx& ctx, const TPRows<floatX>& r, floatX* partial, floatX* mine) {
    const SeqSplit& s = r.s;
    if (!s.on) { sum_over_ranks(ctx, r, partial, s.N * r.C); return partial; }
    if (s.whole > s.N) ctx_zero(ctx, partial + s.N * r.C, (s.whole - s.N) * r.C * sizeof(floatX));
    CommScope prof(ctx, *r.group, "tp reduce-scatter");
    comm_reduce_scatter_sum(*r.group, partial, mine, s.whole * r.C);
    return mine;
}

// The backward of a LayerNorm over this rank's rows: dinp += …, and the gradients of its weight
// and bias (dw, db) += sums over the rows. With sequence parallelism the rows are P of the B·T
// positions, so those sums are partial: they are made apart (ln_grad), summed over the tp
// ranks, then added, and every tp rank adds the same gradient to its copy of the LayerNorm.
template <class floatX>
inline void rows_layernorm_backward(const Ctx& ctx, const TPRows<floatX>& r, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                                    const floatX* inp, const floatX* w, const float* mean, const float* rstd) {
    const int C = (int)r.C;
    if (!r.s.on) { layernorm_backward(ctx, dinp, dw, db, dout, inp, w, mean, rstd, (int)r.s.P, C); return; }
    floatX* part = r.ln_grad;
    const size_t n = (db ? 2 : 1) * (size_t)C;  // (RMSNorm: no bias, db = nullptr)
    ctx_zero(ctx, part, n * sizeof(floatX));
    layernorm_backward(ctx, dinp, part, db ? part + C : nullptr, dout, inp, w, mean, rstd, (int)r.s.P, C);
    sum_over_ranks(ctx, r, part, n);
    add_inplace(ctx, dw, part, C);
    if (db) add_inplace(ctx, db, part + C, C);
}

// ----------------------------------------------------------------------------
// the vocabulary-parallel embedding and classifier

// The vocabulary a tp rank's wte holds, and so the classifier's columns it computes: tp rank r
// holds wte's rows [lo, lo + Vp/t), Vl of them real tokens; it embeds those tokens, computes
// their logits, its part of the softmax (fused_classifier.cuh: stats, gathered, finish), and its
// rows' gradient. Without tensor parallelism, one part: all Vp rows and columns.
struct VocabSlice { int parts, lo, Vpl, Vl; };
inline VocabSlice vocab_slice(const GPTConfig& c, int t, int r) {
    const int Vpl = c.padded_vocab_size / t, lo = r * Vpl;
    return {t, lo, Vpl, std::max(0, std::min(Vpl, c.vocab_size - lo))};
}

// The losses of N positions and, with dloss ≠ 0, ∂loss/∂logits in place of this rank's logits
// (N × k.Vpl). One part: fused_classifier. Several: each rank its columns' stats, gathered,
// then each the losses (all the same) and its columns' gradient.
template <class floatX>
inline void classifier_loss(const Ctx& ctx, const TPRows<floatX>& r, float* stats, floatX* logits, float* losses, const int* targets, int N,
                            const VocabSlice& k, int V, int Vp, float dloss) {
    if (k.parts == 1) { fused_classifier(ctx, logits, losses, targets, N, V, Vp, dloss); return; }
    classifier_stats(ctx, logits, stats + (size_t)r.group->rank * N * 3, targets, N, k.Vl, k.Vpl, k.lo);
    { CommScope prof(ctx, *r.group, "tp all-gather"); comm_all_gather(*r.group, stats, (size_t)k.parts * N * 3); }
    classifier_finish(ctx, logits, losses, stats, k.parts, targets, N, k.Vl, k.Vpl, k.lo, dloss);
}
