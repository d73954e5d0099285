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

Main functions: tp_sum_rows (the all-reduce, or a reduce-scatter with --sp), tp_gather_rows (the
all-gather), seq_split (a rank's rows). The model (model.h) is written once; with t = 1 these do nothing.

Tests: test/test_tp.sh (tp = 2 and dp × tp against one process, with and without --sp; memory
and bytes against the formulas; recompute; resume; bf16; the emulated GPU with NCCL).
More: docs/parallelism.md (who holds what, the bytes, sequence parallelism's trades).
*/
#pragma once
#include <vector>
#include "common.h"
#include "comm.h"

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

// Megatron's f and g: buf ← Σ over the tp ranks of buf, the same bits on every rank. Forward
// it sums the row-parallel layers' partial products; backward, the partial gradients of the
// input the column-parallel layers share. No-op without tensor parallelism.
template <class floatX> inline void tp_sum(const Ctx& ctx, Group* tp, floatX* buf, size_t n, std::vector<floatX>* scratch) {
    if (!tp || tp->size == 1) return;
    CommScope prof(ctx, *tp, "tp all-reduce");
    comm_all_reduce_sum(*tp, buf, n, scratch);
}

// The bias of a row-parallel layer is added once, to tp rank 0's partial product.
template <class floatX> inline const floatX* tp_row_bias(const Group* tp, const floatX* bias) {
    return !tp || tp->rank == 0 ? bias : nullptr;
}

// ----------------------------------------------------------------------------
// sequence parallelism (--sp 1)

// How a forward's N = B·T positions (rows of C features) lie over the tp ranks. Without
// sequence parallelism every rank holds all N rows. With it, rank r holds rows [r·P, r·P + P)
// of the P = ⌈N/t⌉ a rank: the last rank's run past N is padding (zero, see tp_sum_rows), so
// that any B·T splits (sampling runs B = 1, T = any length). A gathered buffer holds t·P rows.
struct SeqSplit {
    size_t N;       // positions in the forward
    size_t P;       // rows this rank holds: N, or ⌈N/t⌉ with sequence parallelism
    size_t whole;   // rows of a gathered buffer: N, or t·P
    bool on;        // sequence parallelism
};
inline SeqSplit seq_split(size_t N, const Group* tp, bool sp) {
    if (!sp || !tp || tp->size == 1) return {N, N, N, false};
    const size_t P = ceil_div(N, (size_t)tp->size);
    return {N, P, P * tp->size, true};
}

// All N rows of an activation this rank holds P rows of (Megatron-SP's all-gather before a
// column-parallel layer; its backward's, of the output gradient before a row-parallel one).
// Without sequence parallelism that is `mine` itself; with it, `mine` goes to its place in
// `whole` (t·P·C elements) and the ranks' rows are gathered there.
template <class floatX>
inline const floatX* tp_gather_rows(const Ctx& ctx, Group* tp, const SeqSplit& s, const floatX* mine, floatX* whole, size_t C) {
    if (!s.on) return mine;
    ctx_copy(ctx, whole + (size_t)tp->rank * s.P * C, mine, s.P * C * sizeof(floatX));
    CommScope prof(ctx, *tp, "tp all-gather");
    comm_all_gather(*tp, whole, s.whole * C);
    return whole;
}

// This rank's rows of Σ over the tp ranks of `partial` (N·C elements written, room for t·P·C):
// a row-parallel layer's partial products (forward), or the partial gradients of the input of
// the column-parallel layers (backward). Without sequence parallelism: Megatron's all-reduce,
// in place, and every rank holds all of it (returns `partial`). With it: a reduce-scatter into
// `mine` (P·C elements, returned), half the bytes of the all-reduce. The rows past N are zeroed
// first, so the padding rows of the residual stream and of its gradient stay exactly zero and
// add nothing to the LayerNorms' parameter gradients, whatever the buffer held before (the rows
// of an earlier forward of more positions; the GPU's allocations are not zeroed per step).
template <class floatX>
inline floatX* tp_sum_rows(const Ctx& ctx, Group* tp, const SeqSplit& s, floatX* partial, floatX* mine, size_t C, std::vector<floatX>* scratch) {
    if (!s.on) { tp_sum(ctx, tp, partial, s.N * C, scratch); return partial; }
    if (s.whole > s.N) ctx_zero(ctx, partial + s.N * C, (s.whole - s.N) * C * sizeof(floatX));
    CommScope prof(ctx, *tp, "tp reduce-scatter");
    comm_reduce_scatter_sum(*tp, partial, mine, s.whole * C);
    return mine;
}
