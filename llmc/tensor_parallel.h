/*
tensor_parallel.h — tensor parallelism (Megatron-LM: Shoeybi et al., 2019): each block's
attention heads and MLP columns split over the t ranks of the tp group; and sequence
parallelism (Korthikanti et al., 2022), which splits the rest of the block by position.

A linear layer y = x·Wᵀ + b (W is out × in, like torch.nn.Linear) can be split two ways:
  column-parallel   rank r keeps the rows of W (and of b) that make its slice of y's features:
                    it computes y_r = x·W_rᵀ + b_r from the whole x; nothing to send
  row-parallel      rank r keeps the columns of W that read its slice of x's features:
                    y = Σ_r x_r·W_rᵀ + b, a sum of partial products: an all-reduce (b added once)
Chaining a column-parallel layer into a row-parallel one needs no communication in between, so
a transformer block needs only two all-reduces forward (Megatron's operator g) and two backward
(operator f, its conjugate):

  attention   qkv    column-parallel: the q, k and v rows of this rank's NH/t heads (3C/t × C)
              attention on those heads alone (they are independent)
              proj   row-parallel: the C/t columns that read those heads (C × C/t)   → all-reduce
  MLP         fc     column-parallel: 4C/t of the 4C hidden features (4C/t × C), GELU on them
              proj   row-parallel (C × 4C/t)                                           → all-reduce
  backward    the gradient of each LayerNorm output is a sum over the ranks' column-parallel
              layers that read it                                                     → all-reduce
A Llama block (model.h) splits the same way: qkv's rows are NH/t query heads and NKV/t key/value
heads (t must divide NKV, so each rank holds whole groups), fc's are H/t of SwiGLU's gate and
the same H/t of its up projection (2 groups), and its RMSNorms are replicated like LayerNorms;
a classifier of its own (lm_head) is vocabulary-parallel as wte is: rank r its Vp/t rows.

The token embedding wte and the classifier, which shares it (weight tying), are
vocabulary-parallel: rank r holds wte's rows [r·Vp/t, (r+1)·Vp/t), its Vp/t of the vocabulary.
  embedding   the rank embeds the tokens among its rows and writes zero for the others; tp rank
              0 adds the position embedding; the sum over the ranks (one more all-reduce) is the
              embedding, bit for bit (x + 0 is exact). Its backward adds each position's
              gradient to the row of its token on the rank that holds it (encoder.cuh)
  classifier  the rank computes the logits of its rows, and the softmax is completed across
              the ranks from 3 floats a row (fused_classifier.cuh: classifier_stats, gathered,
              classifier_finish); its input gradient is a sum over the ranks' columns (one more
              all-reduce), its wte gradient lands in the rank's own rows
So wte's Vp·C parameters, gradient and AdamW state, the B·T·Vp logits and the classifier's
6·Vp·C FLOPs a token all split t ways (GPT-2 124M's wte is 31% of its parameters).
Everything else is replicated on every tp rank: the position embedding, the LayerNorms, the
row-parallel layers' biases and the final LayerNorm. Their inputs and output gradients are the
same bits on every rank (they come out of all-reduces and all-gathers, which give every rank
the same values: comm.h), so their gradients are too, and each rank's AdamW keeps its copy
equal to the others'. The gradient norm counts them once (tp rank 0's copy).

The model (model.h) is written once: its layout gives each split tensor its local shape, and
its forward and backward call tp_sum_rows (below) at the points above; with t = 1 the layout
is GPT-2's and the sums do nothing. Data parallelism composes: the dp group of a rank
is the ranks with its tp index (comm.h's mesh), each holding the same slice; ZeRO shards that
slice.

Per rank, with t tp ranks (Ψ_block = 12C² + 13C):
  parameters         Vp·C/t + maxT·C + L·(12C²/t + 7C/t + 6C) + 2C  (wte and the blocks' C²
                     weights split; wpe, the LayerNorms and 6C of each block's vectors not)
  block activations  (4 + 12/t)·C per position    (ln1, ln2, the two residuals stay whole;
                                                   qkv, the attention output and the MLP's
                                                   hidden features split; model.h's list)
  classifier         Vp/t logits per position, and 3·t floats of stats
  communication      per micro-batch, 4L + 2 all-reduces of B·T·C elements (4 a block, the
                     embedding, and the classifier's input gradient): (4L + 2)·2(t−1)/t·B·T·C·s
                     bytes sent per rank (s: 4 fp32, 2 bf16; --recompute full reruns the
                     attention projection: 5L + 2), and an all-gather of the stats,
                     (t−1)·B·T·12 bytes
The sums are blocking (comm_all_reduce_sum: on the compute stream, in order with the kernels)
because the next op needs them; with NCCL they run beside data parallelism's overlapped
collectives, which are on the dp group's communication stream. NCCL asks that operations on two
communicators be issued in the same order on every rank, which they are here (every rank runs
the same program); frameworks that overlap data-parallel reductions with tensor-parallel
compute run two communicators' kernels at once the same way, but it has not run on GPUs here yet.
A model file is always the whole model: each tp rank writes its own slices into it
(checkpoint.h). AdamW's state is per tp rank; a checkpoint resumes with any --tp (and dp, ZeRO
stage, --sp, pp): checkpoint_load finds each element through the model file's order.

Sequence parallelism (--sp 1). Above, every tp rank runs the LayerNorms and the residual adds
on all B·T positions and holds their activations whole: 4·C a block a position, the part of a
block's 16·C that tensor parallelism does not split. But those ops work on each position alone,
so they can split by position instead: rank r keeps the rows [r·P, r·P + P) of the flattened
B·T positions, P = ⌈B·T/t⌉ (the last rank's tail is padding, kept zero, so any B·T splits). The all-reduce after a row-parallel layer becomes a
reduce-scatter (each rank gets its rows of the sum), and before a column-parallel layer an
all-gather brings every rank all rows of the LayerNorm output:

  forward     LN(my rows) → all-gather → column-parallel … row-parallel → reduce-scatter → + my rows
  backward    the conjugates: the output gradient is all-gathered before the row-parallel
              layer's backward, the input gradient reduce-scattered after the column-parallel's

An all-reduce moves what a reduce-scatter and an all-gather do, so the bytes on the wire stay
about the same, and the per-position activations split t ways. What changes around it:
  - the backward gathers each LayerNorm output again (the forward kept only its rows:
    Megatron-SP's trade of an all-gather for memory), and the residual gradient;
  - each LayerNorm's parameter gradient is now a sum over this rank's rows only: it is
    all-reduced over tp (2C elements, in a scratch buffer of its own: the gradient buffer
    already holds the earlier micro-batches' sums, which must not be summed again);
  - the embedding's sum is a reduce-scatter too; its backward all-gathers the residual
    gradient (a rank's wte rows take the gradient of their tokens wherever they are);
  - the classifier reads lnf's output at every position (gathered; its dlnf reduce-scattered).
The forward computes what tensor parallelism alone does, bit for bit (each row's LayerNorm is
the same arithmetic on either path, and gathers move bits); the LayerNorms' parameter gradients
are summed in another order.
Per rank with sequence parallelism, a micro-batch of N = B·T positions (s bytes an element):
  block activations  16·C/t per position (model.h's list), plus one gathered N·C buffer
  communication      (4L + 2) reduce-scatters of N·C: (4L + 2)·(t−1)/t·N·C·s bytes sent;
                     all-gathers of N·C, 2L + 1 forward (ln1, ln2 a block; lnf) and 4L + 2
                     backward (a block: the residual gradient twice, ln1 and ln2; lnf; the
                     encoder's gradient): (6L + 3)·(t−1)/t·N·C·s, besides the classifier's
                     stats as above; 2L + 1 all-reduces of 2C (the LayerNorms' parameter
                     gradients). --recompute full adds a reduce-scatter and two
                     all-gathers a block (its rerun); selective adds nothing.

Not here yet: overlapping the collectives with the products around them (Megatron overlaps
the sequence-parallel all-gather with the matmul that reads it, chunk by chunk); running them
on GPUs.

Tests: test/test_tp.sh (tp = 2 and dp × tp = 2 × 2 with ZeRO against one process, with and
without --sp; memory and bytes against the formulas above; recompute; resume; bf16; padding;
the emulated GPU with NCCL).
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
template <class T> inline void tp_sum(const Ctx& ctx, Group* tp, T* buf, size_t n, std::vector<T>* scratch) {
    if (!tp || tp->size == 1) return;
    CommScope prof(ctx, *tp, "tp all-reduce");
    comm_all_reduce_sum(*tp, buf, n, scratch);
}

// The bias of a row-parallel layer is added once, to tp rank 0's partial product.
template <class T> inline const T* tp_row_bias(const Group* tp, const T* bias) {
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
template <class T>
inline const T* tp_gather_rows(const Ctx& ctx, Group* tp, const SeqSplit& s, const T* mine, T* whole, size_t C) {
    if (!s.on) return mine;
    ctx_copy(ctx, whole + (size_t)tp->rank * s.P * C, mine, s.P * C * sizeof(T));
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
template <class T>
inline T* tp_sum_rows(const Ctx& ctx, Group* tp, const SeqSplit& s, T* partial, T* mine, size_t C, std::vector<T>* scratch) {
    if (!s.on) { tp_sum(ctx, tp, partial, s.N * C, scratch); return partial; }
    if (s.whole > s.N) ctx_zero(ctx, partial + s.N * C, (s.whole - s.N) * C * sizeof(T));
    CommScope prof(ctx, *tp, "tp reduce-scatter");
    comm_reduce_scatter_sum(*tp, partial, mine, s.whole * C);
    return mine;
}
