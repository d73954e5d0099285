/*
tensor_parallel.h — tensor parallelism (Megatron-LM: Shoeybi et al., 2019): each block's
attention heads and MLP columns split over the t ranks of the tp group.

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

The classifier is vocabulary-parallel: rank r computes the logits of its Vp/t of the vocabulary
(wte's rows [r·Vp/t, (r+1)·Vp/t)) and the softmax is completed across the ranks from 3 floats a
row (fused_classifier.cuh: classifier_stats, gathered, classifier_finish); its input gradient is
a sum over the ranks' columns (one more all-reduce), and each rank's wte rows' gradient is
gathered by all. So the B·T·Vp logits and the classifier's 6·Vp·C FLOPs a token split t ways.
Everything else is replicated on every tp rank: the embeddings (wte too: the embedding lookup
reads any row), the LayerNorms, the row-parallel layers' biases and the final LayerNorm. Their
inputs and output gradients are the same bits on every rank (they come out of all-reduces and
all-gathers, which give every rank the same values: comm.h), so their gradients are too, and
each rank's AdamW keeps its copy equal to the others'. The gradient norm counts them once (tp
rank 0's copy).

The model (model.h) is written once: its layout gives each split tensor its local shape, and
its block forward and backward call tp_sum (below) at the four points above; with t = 1 the
layout is GPT-2's and tp_sum does nothing. Data parallelism composes: the dp group of a rank
is the ranks with its tp index (comm.h's mesh), each holding the same slice; ZeRO shards that
slice.

Per rank, with t tp ranks (Ψ_block = 12C² + 13C):
  block parameters   12C²/t + 7C/t + 6C           (the C² weights split, 6C of vectors not)
  block activations  (4 + 12/t)·C per position    (ln1, ln2, the two residuals stay whole;
                                                   qkv, the attention output and the MLP's
                                                   hidden features split; model.h's list)
  classifier         Vp/t logits per position, 3·t floats of stats, and a Vp·C buffer for
                     the gathered wte gradient
  communication      per micro-batch, 4L + 1 all-reduces of B·T·C elements (4 a block, and
                     the classifier's input gradient): (4L + 1)·2(t−1)/t·B·T·C·s bytes sent
                     per rank (s: 4 fp32, 2 bf16; --recompute full reruns the attention
                     projection: 5L + 1), and all-gathers of the stats, (t−1)·B·T·12 bytes,
                     and of the wte gradient, (t−1)/t·Vp·C·s
The sums are blocking (comm_all_reduce_sum: on the compute stream, in order with the kernels)
because the next op needs them; with NCCL they run beside data parallelism's overlapped
collectives, which are on the dp group's communication stream. NCCL asks that operations on two
communicators be issued in the same order on every rank, which they are here (every rank runs
the same program); frameworks that overlap data-parallel reductions with tensor-parallel
compute run two communicators' kernels at once the same way, but it has not run on GPUs here yet.
A model file is always the whole model: each tp rank writes its own slices into it
(checkpoint.h). AdamW's state is per tp rank, so a checkpoint resumes with the same --tp (its
dp and ZeRO stage may change).
Not here yet: sequence parallelism (--sp: the replicated LayerNorm and residual activations
split along T, all-reduce → reduce-scatter + all-gather); a vocabulary-parallel embedding (wte
split by rows for the lookup too: its Vp·C parameters, gradient and AdamW state split t ways,
for one all-reduce of B·T·C instead of the wte gradient's all-gather); and gathering the wte
gradient once a step rather than once a micro-batch.

Tests: test/test_tp.sh (tp = 2 and dp × tp = 2 × 2 with ZeRO against one process; memory and
bytes against the formulas above; recompute; resume; bf16; the emulated GPU).
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

// The runs of an R × K tensor (a vector: K = 1) that tp rank r of t holds, in its local order.
// Rows splits each of `groups` equal blocks of rows on its own: qkv's rows are the q, k and v of
// every head, and a rank takes its heads' rows from each of the three.
inline std::vector<TPPiece> tp_pieces(size_t R, size_t K, TPSplit split, int groups, int t, int r) {
    std::vector<TPPiece> p;
    if (split == TPSplit::Replicated || t == 1) {
        p.push_back({0, 0, R * K});
    } else if (split == TPSplit::Rows) {
        const size_t per_group = R / groups, mine = per_group / t;
        for (int j = 0; j < groups; j++) p.push_back({(j * per_group + r * mine) * K, j * mine * K, mine * K});
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
