/*
model.h — GPT-2 and Llama: forward and backward, written once for every backend and layout.

A chain of ops from llmc/ called through a Ctx; nothing here knows which backend runs them:

  x₀ = wte[tokens] + wpe[0..T)
  for l in 0..L:   x = x + attention(ln1(x) · Wqkvᵀ + bqkv) · Wprojᵀ + bproj
                   x = x + gelu(ln2(x) · Wfcᵀ + bfc) · Wfcprojᵀ + bfcproj
  logits = lnf(x) · wteᵀ,   loss = mean cross-entropy

A Llama swaps four ops: RMSNorm for LayerNorm, RoPE instead of wpe, SwiGLU for GELU, and no
biases. The parameters (params.h) are read in units through pointers that their owner sets
(data_parallel.h); ParamHooks tell the owner when a unit is read, done with, and complete.
A parallel layout changes the widths and adds hook calls (gather_rows, sum_rows, the ring).

Main functions: gpt_build, gpt_forward, gpt_backward, gpt_mean_loss, gpt_activation_bytes
(what the memory plan counts). Evaluation: inference.h.

Tests: test/test_vs_pytorch.py (against PyTorch, GPT-2 and Llama), test/test_ops.cpp (finite
differences through the whole model), test/test_train.sh (--recompute bit for bit), and the
parallel layouts against one process (docs/parallelism.md lists their tests).
More: docs/model.md (sizes, precision, recomputation, the parallel layouts).
*/
#pragma once
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>
#include "common.h"
#include "gpt_config.h"
#include "params.h"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "attention.cuh"
#include "gelu.cuh"
#include "swiglu.cuh"
#include "rope.cuh"
#include "fused_classifier.cuh"
#include "adamw.cuh"
#include "global_norm.cuh"
#include "tensor_parallel.h"
#include "context_parallel.h"

// ----------------------------------------------------------------------------
// the model

// Activation checkpointing (--recompute): which of a block's activations the forward keeps, one
// copy per block, for the backward. The rest live in one block-sized buffer that every block
// overwrites, and the backward of block l first reruns the forward ops that made them
// (gpt_block_forward with rerun): the same kernels on the same inputs, so they give back the
// same bits and the training is the same run, only its memory and time differ. Per position,
// of the 16·C elements (and 4 + NH floats of statistics) a block stores:
//   none       keeps everything: no work is repeated
//   selective  drops the LayerNorm outputs ln1, ln2 (C each) and the GELU output (4C), 6·C of
//              the 16·C: the backward reruns two LayerNorms and a GELU, memory-bound ops (cf.
//              llm.c's --recompute 2). The forward's GELU then runs as its own kernel, not in the
//              matmul's epilogue, so that its rerun is the same computation (cuBLASLt's epilogue
//              rounds and approximates differently from gelu.cuh)
//   full       keeps only the block's output (C: it is the next block's input; no statistics)
//              and reruns the whole block forward but its last matmul: 16·C² of the block's
//              72·C² training FLOPs per token (+22%) and one more attention forward
// so that the activations of a micro-batch are, per position (gpt_activation_buffers):
//   none (16·L·C + 12·C + Vp)   selective (10·L·C + 18·C + Vp)   full (L·C + 27·C + Vp)
// elements. GPT-2 in FP8 keeps no GELU output (gelu_in_fp8): 4·L·C less with none, 4·C with the others.
// FP8 with none or selective keeps each product's FP8 operands xᵀ and Wᵀ for the backward
// (fp8_keeps_operands), so no backward reads ln1, ln2 or the activation's output: those are one
// shared buffer, never rerun, and none and selective are the same run. A position then takes
// (10·L·C + 14·C + Vp) elements and 7·L·C bytes; a block's weights take 12·C² bytes more.
// MFU (mfu.h) counts the model's FLOPs, not the rerun: recomputation lowers it.
enum class Recompute { None, Selective, Full };
inline const char* const RECOMPUTE_NAMES[] = {"none", "selective", "full"};  // --recompute's values, in that order
inline const char* recompute_name(Recompute r) { return RECOMPUTE_NAMES[(int)r]; }
// q/k/v, the attention output and its lse, the residual after attention, the pre-GELU, and the
// LayerNorm statistics, one per block?
inline bool keeps_inner(Recompute r) { return r != Recompute::Full; }
// Do the FP8 products keep xᵀ and Wᵀ from the forward for the backward (linear_ctx)? Where the
// inner activations are kept: under full the backward's rerun would not make the fc projection's.
inline bool fp8_keeps_operands(bool fp8, Recompute r) { return fp8 && keeps_inner(r); }
// ln1, ln2 and the GELU output, one per block? (Only products' backwards read them.)
inline bool keeps_cheap(Recompute r, bool fp8) { return r == Recompute::None && !fp8_keeps_operands(fp8, r); }
// Does the backward rerun part of the block forward first?
inline bool reruns(Recompute r, bool fp8) { return r == Recompute::Full || (r == Recompute::Selective && !fp8_keeps_operands(fp8, r)); }

template <class floatX> struct Activations {  // on the Ctx's device, for B·T positions; per-block buffers are [L][...], or one block's (Recompute)
    Buf<floatX> encoded, ln1, qkv, atty, residual2, ln2, fch, fch_gelu, residual3, lnf, logits, scratch;
    Buf<float> ln1_mean, ln1_rstd, lse, ln2_mean, ln2_rstd, lnf_mean, lnf_rstd, losses;  // fp32 statistics
    Buf<uint8_t> fp8_xt, fp8_wt;  // FP8: each block product's xᵀ and Wᵀ, kept for its backward
    Buf<Fp8Scales> fp8_scales;    // and their scales (fp8_keeps_operands)
    TPBuffers<floatX> rows;  // tensor parallelism's: the classifier's stats, gathered rows (tensor_parallel.h)
    RingActs<floatX> ring;   // context parallelism's: the ring's k, v and sums, wpe's rows (context_parallel.h)
    // gradient scratch, reused by every block
    Buf<floatX> dresidual, dbtc, dqkv, dfch;
    // Llama: the gradient of the SwiGLU output; RoPE's angles for these positions (rope_T: the T
    // they are for, 0: none)
    Buf<floatX> dhidden;
    Buf<float> rope;
    std::vector<float> rope_host;
    int rope_T = 0;
    Buf<int> tokens, targets;
    std::vector<int> tokens_host;   // the same tokens in host memory (the encoder backward groups by them)
    PinnedCopy tokens_in, targets_in, losses_out;  // copies the host does not wait for (memory.h)
    int B = 0, T = 0, part = 0;
    Recompute recompute = Recompute::None;  // what the buffers were sized for (and part: which ModelPart's blocks)
    int loss_count = 0;  // positions whose losses the last gpt_forward is copying back (0: it had no targets)
};

// How the owner of the parameters follows the model's use of them (see the header).
struct ParamHooks {
    virtual void acquire(int unit) = 0;      // before the model reads g->params[unit]
    virtual void release(int unit) = 0;      // after it is done reading them
    virtual void grads_ready(int unit) = 0;  // g->grads[unit] is complete for this micro-batch
    virtual ~ParamHooks() = default;
};

// The groups a model is split over, each with its options (see gpt_build).
struct ParallelGroups {
    Group* tp = nullptr;   // tensor parallelism: this rank holds a slice of each block
    bool sp = false;       // sequence parallelism over the tp group
    Group* pp = nullptr;   // pipeline parallelism: this rank is one stage
    int vpp = 1;           // the stage's chunks (the interleaved schedule)
    Group* cp = nullptr;   // context parallelism: this rank holds some positions of each sequence
    bool zigzag = false;   // which ones (--cp-layout)
};

// The model's parallel state on this rank, all in one place; each technique's file says what
// its part holds. Without parallelism every group is nullptr.
template <class floatX> struct PipelineStage;  // pipeline.h
template <class floatX> struct ModelParallel {
    TensorParallel<floatX> tp;   // tensor_parallel.h
    ContextParallel cp;          // context_parallel.h
    Group* pp = nullptr;         // pipeline.h: the pp group, whose rank is this stage
    std::shared_ptr<PipelineStage<floatX>> stage;  // pipeline.h: its activation slots and sends
};

template <class floatX> struct GPT {
    GPTConfig config;
    ParamLayout layout;
    std::vector<floatX*> params, grads;  // per unit, set by the storage owner
    ParamHooks* hooks = nullptr;
    Recompute recompute = Recompute::None;  // --recompute: set before the first forward
    bool fp8 = false;             // --precision fp8: the blocks' products multiply in FP8 (fp8.cuh; floatX is bf16)
    Fp8Delayed fp8_delayed;       // and with --fp8-scaling delayed, their scaling state (linear_ctx)
    Activations<floatX> acts;
    ModelPart part;               // the blocks the next forward and backward run (params.h)
    ModelParallel<floatX> par;
};
// GPT-2 in FP8 never writes GELU's output: its fcproj product's quantizations make it from fch
// (fp8.cuh: Fp8Act), so the model keeps no fch_gelu. (Llama's SwiGLU runs as its own op.)
template <class floatX> inline bool gelu_in_fp8(const GPT<floatX>& g) { return g.fp8 && !g.config.llama(); }

// A model of config c split over the groups given (none: the whole model on this rank). The heads
// must divide over the tp group, which the trainer checks.
template <class floatX> inline void gpt_build(GPT<floatX>* g, const GPTConfig& c, const ParallelGroups& groups = {}) {
    auto size = [](const Group* x) { return x ? x->size : 1; };
    g->config = c;
    g->par = ModelParallel<floatX>();
    g->par.tp.group = groups.tp;
    g->par.tp.sp = groups.sp && size(groups.tp) > 1;
    g->par.cp.group = size(groups.cp) > 1 ? groups.cp : nullptr;
    g->par.cp.zigzag = groups.zigzag;
    g->par.pp = size(groups.pp) > 1 ? groups.pp : nullptr;
    g->layout = make_layout(c, size(groups.tp), groups.tp ? groups.tp->rank : 0, size(groups.pp), groups.pp ? groups.pp->rank : 0,
                            g->par.pp ? groups.vpp : 1);
    g->part = layout_part(g->layout, 0);
    g->params.assign(gpt_num_units(c), nullptr);
    g->grads.assign(gpt_num_units(c), nullptr);
    g->acts = Activations<floatX>();
}

// Points every unit into full (replicated) parameter and gradient buffers.
template <class floatX> inline void gpt_point_units(GPT<floatX>* g, floatX* params, floatX* grads) {
    for (int u = 0; u < gpt_num_units(g->config); u++) {
        size_t off = unit_span(g->config, g->layout, u).offset;
        g->params[u] = params + off;
        g->grads[u] = grads ? grads + off : nullptr;
    }
}

// Ψ: the whole model's parameters (with tensor parallelism a rank holds fewer: g.layout.total).
template <class floatX> inline size_t gpt_num_params(const GPT<floatX>& g) { return make_layout(g.config).total; }

// How this forward's B·T positions lie over the tp ranks (tensor_parallel.h: all on every rank
// unless sequence parallelism splits them).
template <class floatX> inline SeqSplit gpt_seq_split(const GPT<floatX>& g, int B, int T) {
    return seq_split((size_t)B * T, g.par.tp.size(), g.par.tp.sp);
}

// A block's four products on this rank, as (input, output) widths: qkv C → Q, the attention
// projection Ct → C, fc C → Fc, the fc projection Hh → C (gpt_block_forward's matmuls).
struct ProductWidths { size_t in, out; };
enum BlockProduct { PRODUCT_QKV, PRODUCT_ATTPROJ, PRODUCT_FC, PRODUCT_FCPROJ, NUM_BLOCK_PRODUCTS };
inline std::array<ProductWidths, NUM_BLOCK_PRODUCTS> gpt_block_products(const RankWidths& d) {
    const size_t C = d.C;
    return {{{C, (size_t)d.Q}, {(size_t)d.Ct, C}, {C, (size_t)d.Fc}, {(size_t)d.Hh, C}}};
}
// Where product p's kept FP8 operands start within a block's (fp8_keeps_operands): the
// products before it, in bytes of xᵀ for N rows and of Wᵀ; p = NUM_BLOCK_PRODUCTS gives a block's.
struct Fp8KeptAt { size_t xt, wt; };
inline Fp8KeptAt fp8_kept_offsets(const RankWidths& d, size_t N, int p) {
    const std::array<ProductWidths, NUM_BLOCK_PRODUCTS> w = gpt_block_products(d);
    Fp8KeptAt at{0, 0};
    for (int q = 0; q < p; q++) at.xt += N * w[q].in, at.wt += w[q].in * w[q].out;
    return at;
}

// Every activation buffer with its element count for B·T positions: the one list that both
// gpt_ensure_activations (allocating it) and gpt_activation_bytes (planning memory) walk.
// A per-block buffer holds the part's L blocks, or one where --recompute reruns what made it
// (see Recompute). d: this rank's widths. With tensor parallelism (tensor_parallel.h) a rank
// holds its heads' q, k, v, attention output and lse, its part of the MLP's hidden features
// and its Vpl columns of the logits; the rest is whole. With sequence parallelism (s.on) the
// rest is split too: the LayerNorm outputs and statistics, the residual stream and its
// gradient hold this rank's P rows, and one gathered buffer holds all of them for the layer
// that needs them. With context parallelism T is this rank's positions, and the ring's buffers
// are added.
template <class floatX, class F>
inline void gpt_activation_buffers(Activations<floatX>& a, const GPT<floatX>& g, const ModelPart& part, const SeqSplit& s, int T,
                                   Recompute r, F&& f) {
    const GPTConfig& c = g.config;
    const RankWidths& d = g.layout.widths;
    const size_t L = part.blocks.end - part.blocks.first, C = c.channels, BT = s.N, P = s.P, W = s.whole;  // rows: this rank's, gathered
    const size_t Q = d.Q, Fc = d.Fc, Hh = d.Hh, Ct = d.Ct, NHt = d.NHt;
    const size_t head = part.heads ? 1 : 0, mean = c.llama() ? 0 : 1;  // (RMSNorm keeps no mean)
    const bool llama = c.llama();
    const size_t Lc = keeps_cheap(r, g.fp8) ? L : 1, Li = keeps_inner(r) ? L : 1, Lk = fp8_keeps_operands(g.fp8, r) ? L : 0;
    const Fp8KeptAt kept = fp8_kept_offsets(d, BT, NUM_BLOCK_PRODUCTS);
    f(a.encoded, P * C);
    f(a.ln1, Lc * P * C); f(a.ln1_mean, mean * Li * P); f(a.ln1_rstd, Li * P);      // per block
    f(a.qkv, Li * BT * Q); f(a.atty, Li * BT * Ct); f(a.lse, Li * BT * NHt);
    f(a.residual2, Li * P * C); f(a.ln2, Lc * P * C); f(a.ln2_mean, mean * Li * P); f(a.ln2_rstd, Li * P);
    f(a.fch, Li * BT * Fc); f(a.fch_gelu, (gelu_in_fp8(g) ? 0 : Lc) * BT * Hh); f(a.residual3, L * P * C);
    f(a.fp8_xt, Lk * kept.xt); f(a.fp8_wt, Lk * kept.wt); f(a.fp8_scales, Lk * NUM_BLOCK_PRODUCTS * 2);
    f(a.lnf, head * P * C); f(a.lnf_mean, mean * head * P); f(a.lnf_rstd, head * P);  // the head
    f(a.logits, head * BT * d.Vpl); f(a.losses, head * BT);
    f(a.scratch, P * C);
    f(a.dresidual, P * C); f(a.dbtc, W * C); f(a.dqkv, BT * Q); f(a.dfch, BT * Fc);  // backward scratch
    f(a.dhidden, llama ? BT * Hh : 0); f(a.rope, llama ? (size_t)T * c.head_dim() : 0);
    f(a.tokens, BT); f(a.targets, head * BT);
    tp_buffers(a.rows, s, C, part.heads, f);
    ring_buffers(a.ring, g.par.cp, BT, Q, Ct, NHt, part.embeds && !llama ? (size_t)T * C : 0, f);
}

template <class floatX> inline void gpt_ensure_activations(const Ctx& ctx, GPT<floatX>* g, int B, int T) {
    Activations<floatX>& a = g->acts;
    if (a.B * a.T >= B * T && a.T >= T && a.logits.dev == ctx.device && a.recompute == g->recompute && a.part == g->part.index) return;
    gpt_activation_buffers(a, *g, g->part, gpt_seq_split(*g, B, T), T, g->recompute, [&](auto& buf, size_t n) { buf.alloc(ctx, n); });
    a.tokens_host.assign((size_t)B * T, 0);
    a.B = B; a.T = T; a.recompute = g->recompute; a.part = g->part.index; a.rope_T = 0;
}

// The bytes gpt_ensure_activations allocates for B·T positions of the model's part `part` (as
// Buf rounds them), without allocating anything: with the storage owner's bytes, what one rank
// must hold on its device (planner.h plans --batch-size with it; pipeline.h's
// gpt_all_activation_bytes adds up a stage's slots). T is this rank's positions. Per position,
// without recomputation: (16·L·C + 12·C + Vp) elements of floatX, (L·(4 + NH) + 3) floats and 2
// ints; GPT-2 124M in bf16 needs ~0.415 MB a token (Recompute gives the elements with it). A tp
// rank holds (4 + 12/t)·C of a block's 16·C, and 16·C/t with sequence parallelism.
template <class floatX> inline double gpt_activation_bytes(const GPT<floatX>& g, const ModelPart& part, int B, int T, Recompute r) {
    Activations<floatX> none;  // only walked for its buffers' types: nothing is allocated
    double bytes = 0;
    gpt_activation_buffers(none, g, part, gpt_seq_split(g, B, T), T, r, [&](auto& buf, size_t n) { bytes += (double)buf.bytes_for(n); });
    return bytes;
}
// The FP8 products' scratch (--precision fp8): matmul.cuh's matmul_forward_fp8 and
// matmul_backward_fp8 keep it, one buffer per operand, each growing to what the largest product
// of a block needs — one byte an element: the forward's input and weight, the backward's dout as
// it is and transposed, Wᵀ and xᵀ (but where the activations keep them: fp8_keeps_operands);
// and the scales. Not activations (nothing in it outlives a
// product), but the memory plan counts it beside them. Where cuBLASLt multiplies no FP8 operands
// (matmul.cuh: fp8_products_run found so, ctx.tuned->fp8_dequantize) each product's two operands are
// dequantized into two more buffers, of floatX: the first operand's (x, N·in; dout, N·out; doutᵀ,
// out·N) and the second's (W, out·in; Wᵀ, in·out; xᵀ, in·N), each at the largest of them.
template <class floatX> inline double gpt_fp8_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
    if (!g.fp8) return 0;
    const size_t N = (size_t)B * T;
    size_t in = 0, out = 0, w = 0;
    for (const ProductWidths& p : gpt_block_products(g.layout.widths))
        in = std::max(in, N * p.in), out = std::max(out, N * p.out), w = std::max(w, p.in * p.out);
    auto bytes = [](size_t n) { return (double)Buf<uint8_t>::bytes_for(n); };
    bool dequantize = false;
#ifdef LLMC_CUDA
    dequantize = ctx.tuned && ctx.tuned->fp8_dequantize;
#endif
    const double fallback = dequantize ? (double)Buf<floatX>::bytes_for(std::max(in, out)) + (double)Buf<floatX>::bytes_for(std::max(w, in)) : 0;
    const bool kept = fp8_keeps_operands(g.fp8, g.recompute);  // (then xᵀ, Wᵀ and the forward's scales are activations)
    return (kept ? 1 : 2) * (bytes(in) + bytes(w)) + 2 * bytes(out) + (kept ? 0 : (double)Buf<Fp8Scales>::bytes_for(2)) +
           (double)Buf<Fp8Scales>::bytes_for(3) + fallback;
}
// The GELU backward's fp32 product (matmul.cuh: matmul_backward with gelu_pre), where cuBLASLt's
// DGELU epilogue cannot take it: the fc projection's input width on this rank, Hh, not a
// multiple of 8 (a model file of odd width C; or ctx.kernels.gelu_fusion off). B·T·Hh floats, held
// from the first backward on. Counted on the GPU: the CPU takes that path always, among host
// temporaries of its own (F32View's fp32 copies in bf16) that its plan does not count either.
template <class floatX> inline double gpt_gelu_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
    const size_t Hh = g.layout.widths.Hh;
    const bool gpu = ctx.device == Device::CUDA;
    bool epilogue = true;
#ifdef LLMC_CUDA
    epilogue = gelu_epilogue_width(ctx.kernels, Hh);
#endif
    if (!gpu || epilogue || g.config.llama() || g.fp8) return 0;  // (Llama: SwiGLU; FP8: the GELU apart, in floatX)
    return (double)Buf<float>::bytes_for((size_t)B * T * Hh);
}
// The fused attention backward's fp32 dQ partial sums (flash_launch.cuh: flash_backward_scratch_bytes),
// on a GPU where it runs: a rank's heads (NHt) over its positions, held from the first backward on.
template <class floatX> inline double gpt_attention_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
#ifdef LLMC_CUDA
    const RankWidths& d = g.layout.widths;
    if (ctx.device == Device::CUDA)
        return (double)flash_backward_scratch_bytes<floatX>(ctx.kernels, B, T, d.NHt * g.config.head_dim(), d.NHt, d.NKVt);
#endif
    (void)ctx; (void)g; (void)B; (void)T;
    return 0;
}
// The classifier's part stats from the LM head's product (--classifier-stats epilogue; matmul.cuh:
// matmul_forward_logits), where our GEMM runs: B·T rows × classifier_parts(Vp) pairs of floats,
// on the stage with the classifier and without tensor parallelism, held from the first forward on.
template <class floatX> inline double gpt_classifier_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA && ctx.kernels.classifier_stats_epilogue && is_half_type<floatX> && gpu_has_wgmma() && g.part.heads &&
        g.layout.widths.Vpl == g.config.padded_vocab_size)
        return (double)Buf<float>::bytes_for((size_t)B * T * classifier_parts(g.config.padded_vocab_size) * 2);
#endif
    (void)ctx; (void)g; (void)B; (void)T;
    return 0;
}
// "" when every FP8 product of a block takes B·T rows (fp8.cuh: multiples of 16), else why not.
inline std::string gpt_fp8_shape_problem(const RankWidths& d, int B, int T) {
    for (const ProductWidths& p : gpt_block_products(d)) {
        const std::string why = fp8_shape_problem(B * T, (int)p.in, (int)p.out);
        if (!why.empty()) return why;
    }
    return "";
}
// The ctx the blocks' linear layers run their products with: FP8 with --precision fp8, else the
// run's own. The classifier's product takes the plain one.
// With delayed scaling (fp8.cuh) each product of each block this rank holds has its own place in
// the scaling state: 4 per block, in the order of gpt_block_products (BlockProduct).
// Where fp8_keeps_operands, each product's forward keeps xᵀ and Wᵀ in the activations, in its
// block's slice of them, for its backward (matmul.cuh: Fp8Kept).
template <class floatX> inline std::array<Ctx, NUM_BLOCK_PRODUCTS> linear_ctx(const Ctx& ctx, GPT<floatX>* g, int l, int B, int T) {
    Activations<floatX>& a = g->acts;
    const size_t BT = (size_t)B * T, i = l - g->part.blocks.first;
    const Fp8KeptAt block = fp8_kept_offsets(g->layout.widths, BT, NUM_BLOCK_PRODUCTS);
    std::array<Ctx, NUM_BLOCK_PRODUCTS> lin;
    for (int p = 0; p < NUM_BLOCK_PRODUCTS; p++) {
        lin[p] = ctx;
        lin[p].fp8 = g->fp8;
        if (g->fp8_delayed.on) { lin[p].fp8_delayed = &g->fp8_delayed; lin[p].fp8_product = g->layout.local_block(l) * NUM_BLOCK_PRODUCTS + p; }
        if (fp8_keeps_operands(g->fp8, g->recompute)) {
            const Fp8KeptAt at = fp8_kept_offsets(g->layout.widths, BT, p);
            lin[p].fp8_kept = {a.fp8_xt.data() + i * block.xt + at.xt, a.fp8_wt.data() + i * block.wt + at.wt,
                               a.fp8_scales.data() + (i * NUM_BLOCK_PRODUCTS + p) * 2};
        }
    }
    return lin;
}
// The tensors of delayed scaling's state on this rank: x, W and dout of each product.
template <class floatX> inline int gpt_fp8_tensors(const GPT<floatX>& g) { return g.layout.num_blocks() * NUM_BLOCK_PRODUCTS * 3; }

// The ring of context_parallel.h, its buffers in the activations (k and v: N·(Q − Ct) elements).
template <class floatX> inline Ring<floatX> gpt_ring(GPT<floatX>* g, int B, int T) {
    const RankWidths& d = g->layout.widths;
    return ring_of(g->par.cp, g->acts.ring, (size_t)B * T * (d.Q - d.Ct));
}
// The row operations of tensor_parallel.h for this forward's B·T positions.
template <class floatX> inline TPRows<floatX> gpt_rows(GPT<floatX>* g, int B, int T) {
    return tp_rows(g->par.tp, g->acts.rows, (size_t)B * T, g->config.channels);
}

// Block l's activations: its slice of each per-block buffer, or the one block-sized buffer that
// every block shares where --recompute does not keep that activation per block (see Recompute).
template <class floatX> struct BlockActs {
    floatX *x, *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
};
// The residual stream, the LayerNorms and their statistics hold this rank's P rows (all B·T
// without sequence parallelism); q, k, v, the attention and the MLP's hidden features all B·T.
template <class floatX> inline BlockActs<floatX> block_acts(GPT<floatX>* g, int l, int B, int T) {
    Activations<floatX>& a = g->acts;
    const GPTConfig& cf = g->config;
    const RankWidths& d = g->layout.widths;
    const size_t BT = (size_t)B * T, BTCt = BT * d.Ct, NHt = d.NHt, Q = d.Q, Fc = d.Fc, Hh = d.Hh;
    const size_t P = gpt_seq_split(*g, B, T).P, PC = P * cf.channels;
    const int l0 = g->part.blocks.first;  // the part's first block (0 without pipeline parallelism)
    const size_t c = keeps_cheap(g->recompute, g->fp8) ? l - l0 : 0, i = keeps_inner(g->recompute) ? l - l0 : 0;
    const bool mean = !cf.llama();  // (RMSNorm: no mean)
    return BlockActs<floatX>{
        // x, the block's input: the encoder's output (or the previous stage's) for the stage's
        // first block, else the output of block l−1
        l == l0 ? a.encoded.data() : a.residual3.data() + (size_t)(l - 1 - l0) * PC,
        a.ln1.data() + c * PC, a.qkv.data() + i * BT * Q, a.atty.data() + i * BTCt, a.residual2.data() + i * PC,
        a.ln2.data() + c * PC, a.fch.data() + i * BT * Fc, gelu_in_fp8(*g) ? nullptr : a.fch_gelu.data() + c * BT * Hh,
        mean ? a.ln1_mean.data() + i * P : nullptr, a.ln1_rstd.data() + i * P, a.lse.data() + i * BT * NHt,
        mean ? a.ln2_mean.data() + i * P : nullptr, a.ln2_rstd.data() + i * P};
}

// The output of the part's last block (the model's last block without pipeline parallelism), this
// rank's rows of the residual stream: what pipeline.h hands to the next stage, lnf's input on the last.
template <class floatX> inline floatX* gpt_part_output(GPT<floatX>* g, int B, int T) {
    const LayerRange r = g->part.blocks;
    return g->acts.residual3.data() + (size_t)(r.end - 1 - r.first) * gpt_seq_split(*g, B, T).P * g->config.channels;
}

// Llama: RoPE's angles for this forward's T positions (on the Ctx's device, rope.cuh), made when
// T changes: positions 0…T−1, or with context parallelism the sequence's positions this rank
// holds (context_parallel.h), so every rank turns its q and k by their true places.
template <class floatX> inline const float* gpt_rope(const Ctx& ctx, GPT<floatX>* g, int T) {
    Activations<floatX>& a = g->acts;
    if (a.rope_T != T) {
        const std::vector<int> pos = cp_positions(g->par.cp, T);
        a.rope_host = rope_table(pos.data(), T, g->config.head_dim(), (double)g->config.rope_theta, g->config.rope_scaling);
        ctx_copy(ctx, a.rope.data(), a.rope_host.data(), a.rope_host.size() * sizeof(float));
        a.rope_T = T;
    }
    return a.rope.data();
}
template <class floatX> inline void acquire(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->acquire(u); }
template <class floatX> inline void release(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->release(u); }
template <class floatX> inline void grads_ready(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->grads_ready(u); }

// Whether product lin's forward keeps its FP8 operands xᵀ and Wᵀ for its backward (fp8_keeps_operands).
inline bool kept_operands(const Ctx& lin) { return lin.fp8_kept.xt != nullptr; }
// The LayerNorm before a product lin: out = LayerNorm(inp), or with add: res = inp + add and
// out = LayerNorm(res). FP8 with kept operands and delayed scaling, once its scales are given
// (fp8.cuh): the LayerNorm writes the product's x codes and xᵀ itself (layernorm_forward_fp8),
// in out's place, since no one else reads out. Returns whether it did. Not with sequence
// parallelism, where the product reads out gathered from the ranks.
template <class floatX>
inline bool block_layernorm(const Ctx& ctx, const Ctx& lin, const TPRows<floatX>& rows, floatX* out, float* mean, float* rstd,
                            NoDeduce<floatX>* res, const floatX* inp, const NoDeduce<floatX>* add, const floatX* w, const floatX* b, int P, int C) {
    uint8_t* xt = lin.fp8_kept.xt;
    const Fp8Target t = fp8_target(lin, FP8_X, nullptr);
    if (kept_operands(lin) && !rows.s.on && t.given && layernorm_fp8_runs<floatX>(ctx, P, C, {out, xt, res, inp, add, w, b})) {
        layernorm_forward_fp8(ctx, (uint8_t*)out, xt, t, mean, rstd, res, inp, add, w, b, P, C);
        return true;
    }
    if (add) residual_layernorm_forward(ctx, res, out, mean, rstd, inp, add, w, b, P, C);
    else layernorm_forward(ctx, out, mean, rstd, inp, w, b, P, C);
    return false;
}
// The product of that LayerNorm's output x: the output as gathered (gather_rows), or with codes,
// the output's place, where block_layernorm left the codes.
template <class floatX>
inline void ln_product_forward(const Ctx& lin, bool codes, floatX* out, const floatX* x, const floatX* W, const floatX* bias, int N, int C, int OC) {
    if (codes) matmul_forward_fp8_codes(lin, out, (const uint8_t*)x, W, bias, N, C, OC);
    else matmul_forward(lin, out, x, W, bias, N, C, OC);
}

// Forward of block l. Every residual add feeds a LayerNorm, so the two run as one op
// (residual_layernorm_forward): res2 = x + attproj(…) with ln2, and the block's output
// res3 = res2 + fcproj(…) with the next LayerNorm, which is block l+1's ln1 or lnf. So block l
// begins by forming its input x = res3 of block l−1 from that block's res2 and the MLP output
// it left in acts.scratch, and the last block's output is formed by gpt_forward with lnf.
// rerun (the backward of a --recompute run): only the ops whose outputs the run did not keep,
// on the kept inputs; x exists already, and the MLP's output is not needed.
// Tensor parallelism (tensor_parallel.h): this rank's Ct of the q, k, v and attention features
// (its NHt heads) and Hh of the MLP's; the two projections back to C give partial sums, which
// sum_rows adds up over the ranks (Megatron's g). With sequence parallelism the residual stream
// and the LayerNorms run on this rank's P rows: each LayerNorm output is gathered for the layer
// that reads it (gather_rows), and the sums are reduce-scatters. Without tensor parallelism
// Ct = C, P = B·T, and the gathers and sums do nothing.
template <class floatX> inline void gpt_block_forward(const Ctx& ctx, GPT<floatX>* g, int l, int B, int T, bool rerun = false) {
    const GPTConfig& c = g->config;
    Activations<floatX>& a = g->acts;
    const RankWidths& d = g->layout.widths;
    const int C = c.channels, BT = B * T, Q = d.Q, Fc = d.Fc, Hh = d.Hh;  // (GPT-2 without parallelism: 3C, 4C, 4C)
    const TPRows<floatX> rows = gpt_rows(g, B, T);
    const int P = (int)rows.s.P;                                   // rows of the residual stream here
    floatX* part = rows.s.on ? rows.whole : a.scratch.data();    // a row-parallel layer's partial products
    BlockView<floatX> w = block_view(g->layout, g->params[unit_of_block(l)]);
    BlockActs<floatX> b = block_acts(g, l, B, T);
    const std::array<Ctx, NUM_BLOCK_PRODUCTS> lin = linear_ctx(ctx, g, l, B, T);  // the products' (FP8 with --precision fp8)
    const bool inner = !rerun || !keeps_inner(g->recompute);  // the products and attention run
    // (Llama: the norms are RMSNorms, which the LayerNorm ops are with no mean and no bias: b.*_mean
    // and w.*b are nullptr; the products have no biases either)
    // ln1 of x = res3 of block l−1 = its res2 + its MLP output, formed here (add1); or of x, the
    // encoder's output or kept. ln1_codes, ln2_codes: the LayerNorm wrote its product's FP8 codes
    // in its output's place (block_layernorm).
    const bool add1 = l > g->part.blocks.first && !rerun;
    const bool ln1_codes = block_layernorm(ctx, lin[PRODUCT_QKV], rows, b.ln1, b.ln1_mean, b.ln1_rstd, add1 ? b.x : nullptr,
                                           add1 ? block_acts(g, l - 1, B, T).res2 : b.x, add1 ? a.scratch.data() : nullptr, w.ln1w, w.ln1b, P, C);
    bool ln2_codes;
    if (inner) {
        ln_product_forward(lin[PRODUCT_QKV], ln1_codes, b.qkv, ln1_codes ? b.ln1 : gather_rows(ctx, rows, b.ln1), w.qkvw, w.qkvb, BT, C, Q);
        if (c.llama())  // RoPE turns q's and k's heads in place (the kept qkv is the turned one)
            rope_forward(ctx, b.qkv, gpt_rope(ctx, g, T), B, T, (size_t)Q, d.NHt + d.NKVt, c.head_dim());
        ring_attention_forward(ctx, gpt_ring(g, B, T), b.atty, b.lse, b.qkv, B, T, d.Ct, d.NHt, d.NKVt);
        matmul_forward(lin[PRODUCT_ATTPROJ], part, b.atty, w.attprojw, row_bias(rows, w.attprojb), BT, d.Ct, C);
        sum_rows(ctx, rows, part, a.scratch.data());  // → acts.scratch, this rank's rows
        ln2_codes = block_layernorm(ctx, lin[PRODUCT_FC], rows, b.ln2, b.ln2_mean, b.ln2_rstd, b.res2, b.x, a.scratch.data(), w.ln2w, w.ln2b, P, C);
    } else {              // selective: res2 was kept
        ln2_codes = block_layernorm(ctx, lin[PRODUCT_FC], rows, b.ln2, b.ln2_mean, b.ln2_rstd, nullptr, b.res2, nullptr, w.ln2w, w.ln2b, P, C);
    }
    // fch = the activation's input, fch_gelu = its output: GELU(fch), or Llama's SwiGLU over fch's
    // [gate | up]. Selective reruns the activation alone, so it runs apart here too, and SwiGLU
    // always does (the fc product runs whenever `inner` does: selective's rerun is the one run without it)
    const floatX* ln2 = !inner ? nullptr : ln2_codes ? b.ln2 : gather_rows(ctx, rows, b.ln2);  // (or its codes)
    if (c.llama()) {
        if (inner) ln_product_forward(lin[PRODUCT_FC], ln2_codes, b.fch, ln2, w.fcw, w.fcb, BT, C, Fc);
        swiglu_forward(ctx, b.fch_gelu, b.fch, (size_t)BT, (size_t)Hh);
    } else if (g->fp8) {  // FP8: the fcproj product's quantizations make GELU(fch); no one writes it
        if (inner) ln_product_forward(lin[PRODUCT_FC], ln2_codes, b.fch, ln2, w.fcw, w.fcb, BT, C, Fc);
    } else if (g->recompute == Recompute::Selective) {
        if (inner) matmul_forward(lin[PRODUCT_FC], b.fch, ln2, w.fcw, w.fcb, BT, C, Fc);
        gelu_forward(ctx, b.fch_gelu, b.fch, (size_t)BT * Fc);
    } else {
        matmul_forward(lin[PRODUCT_FC], b.fch_gelu, ln2, w.fcw, w.fcb, BT, C, Fc, b.fch);
    }
    if (!rerun) {
        const bool fp8_gelu = gelu_in_fp8(*g);
        matmul_forward(lin[PRODUCT_FCPROJ], part, fp8_gelu ? b.fch : b.fch_gelu, w.fcprojw, row_bias(rows, w.fcprojb), BT, Hh, C, nullptr,
                       fp8_gelu);
        sum_rows(ctx, rows, part, a.scratch.data());
    }
    // res3 = res2 + scratch: formed by the next LayerNorm (block l+1's ln1, or lnf)
}

// A LayerNorm output as a product's backward reads it: gathered (sequence parallelism), or
// nullptr where the product's forward kept its FP8 operands. That backward reads only those,
// and the buffer then holds another block's output (see Recompute).
template <class floatX> inline const floatX* product_input(const Ctx& ctx, const Ctx& lin, const TPRows<floatX>& rows, const floatX* x) {
    return kept_operands(lin) ? nullptr : gather_rows(ctx, rows, x);
}

// Backward of block l. On entry acts.dresidual holds ∂loss/∂(block output); on exit it holds
// ∂loss/∂(block input). Parameter gradients are accumulated into the block's gradient unit.
// With --recompute, the activations the forward did not keep are made again first. With tensor
// parallelism the gradient of each LayerNorm's output comes back from this rank's heads or MLP
// features only: sum_rows adds the ranks' parts (Megatron's f) before the LayerNorm's
// backward. With sequence parallelism dresidual holds this rank's rows: it is gathered before
// each projection's backward, and each LayerNorm output again before the product that read it
// (the forward kept only this rank's rows: Megatron-SP's trade of an all-gather for memory).
template <class floatX> inline void gpt_block_backward(const Ctx& ctx, GPT<floatX>* g, int l, int B, int T) {
    const GPTConfig& c = g->config;
    Activations<floatX>& a = g->acts;
    const RankWidths& d = g->layout.widths;
    const int C = c.channels, BT = B * T, Q = d.Q, Fc = d.Fc, Hh = d.Hh;  // (GPT-2 without parallelism: 3C, 4C, 4C)
    const TPRows<floatX> rows = gpt_rows(g, B, T);
    BlockView<floatX> w = block_view(g->layout, g->params[unit_of_block(l)]);
    BlockView<floatX> dw = block_view(g->layout, g->grads[unit_of_block(l)]);
    const std::array<Ctx, NUM_BLOCK_PRODUCTS> lin = linear_ctx(ctx, g, l, B, T);  // the products' (FP8 with --precision fp8)
    if (reruns(g->recompute, g->fp8)) gpt_block_forward(ctx, g, l, B, T, true);
    BlockActs<floatX> b = block_acts(g, l, B, T);
    floatX* dres = a.dresidual.data();
    // MLP: res3 = res2 + fcproj(act(fc(ln2(res2)))), act = GELU (through which the fcproj
    // product's backward takes dfch at once) or Llama's SwiGLU (its own op, from dhidden)
    const floatX* dmlp = gather_rows(ctx, rows, dres);
    if (c.llama()) {
        const floatX* hidden = kept_operands(lin[PRODUCT_FCPROJ]) ? nullptr : b.fch_gelu;
        matmul_backward(lin[PRODUCT_FCPROJ], a.dhidden.data(), dw.fcprojw, dw.fcprojb, dmlp, hidden, w.fcprojw, BT, Hh, C);
        swiglu_backward(ctx, a.dfch.data(), b.fch, a.dhidden.data(), (size_t)BT, (size_t)Hh);
    } else if (g->fp8) {  // FP8: dfch holds the product before GELU's backward, which the fc product's quantization takes
        matmul_backward(lin[PRODUCT_FCPROJ], a.dfch.data(), dw.fcprojw, dw.fcprojb, dmlp, b.fch, w.fcprojw, BT, Hh, C, nullptr, true);
    } else {
        matmul_backward(lin[PRODUCT_FCPROJ], a.dfch.data(), dw.fcprojw, dw.fcprojb, dmlp, b.fch_gelu, w.fcprojw, BT, Hh, C, b.fch);
    }
    matmul_backward(lin[PRODUCT_FC], a.dbtc.data(), dw.fcw, dw.fcb, a.dfch.data(), product_input(ctx, lin[PRODUCT_FC], rows, b.ln2), w.fcw, BT,
                    C, Fc, nullptr,
                    false, gelu_in_fp8(*g) ? b.fch : nullptr);
    floatX* dln2 = sum_rows(ctx, rows, a.dbtc.data(), a.scratch.data());
    rows_layernorm_backward(ctx, rows, dres, dw.ln2w, dw.ln2b, dln2, b.res2, w.ln2w, b.ln2_mean, b.ln2_rstd);
    // attention: res2 = x + attproj(attention(qkv(ln1(x)))) (Llama: the attention of the turned
    // rows, whose gradient then goes back through the turn)
    matmul_backward(lin[PRODUCT_ATTPROJ], a.dbtc.data(), dw.attprojw, dw.attprojb, gather_rows(ctx, rows, dres), b.atty, w.attprojw, BT,
                    d.Ct, C);
    ring_attention_backward(ctx, gpt_ring(g, B, T), a.dqkv.data(), a.dbtc.data(), b.qkv, b.atty, b.lse, B, T, d.Ct, d.NHt, d.NKVt);
    if (c.llama()) rope_backward(ctx, a.dqkv.data(), gpt_rope(ctx, g, T), B, T, (size_t)Q, d.NHt + d.NKVt, c.head_dim());
    matmul_backward(lin[PRODUCT_QKV], a.dbtc.data(), dw.qkvw, dw.qkvb, a.dqkv.data(), product_input(ctx, lin[PRODUCT_QKV], rows, b.ln1), w.qkvw,
                    BT, C, Q);
    floatX* dln1 = sum_rows(ctx, rows, a.dbtc.data(), a.scratch.data());
    rows_layernorm_backward(ctx, rows, dres, dw.ln1w, dw.ln1b, dln1, b.x, w.ln1w, b.ln1_mean, b.ln1_rstd);
}

// The vocabulary this rank's wte holds, and so the classifier's columns it computes: all of it,
// or with tensor parallelism its slice (tensor_parallel.h: the vocabulary-parallel classifier).
template <class floatX> inline VocabSlice gpt_vocab(const GPT<floatX>& g) {
    return vocab_slice(g.config, g.par.tp.size(), g.par.tp.rank());
}

// The classifier's weights (given the units' parameters) or their gradient (given the gradients'):
// this rank's rows of wte where it is tied, else of lm_head, in lnf's unit; and that unit.
template <class floatX> inline int gpt_classifier_unit(const GPT<floatX>& g) { return g.config.tied ? 0 : unit_lnf(g.config); }
template <class floatX> inline floatX* gpt_classifier(const GPT<floatX>& g, const std::vector<floatX*>& units) {
    const ParamLayout& p = g.layout;
    return g.config.tied ? units[0] + p.wte : units[unit_lnf(g.config)] + (p.lm_head - p.lnfw);
}

// wpe's rows at this rank's T positions (context_parallel.h: copied where a rank holds some of
// the positions; wpe itself otherwise), and for a gradient, the rows copied back.
template <class floatX> inline floatX* gpt_wpe_rows(const Ctx& ctx, GPT<floatX>* g, floatX* wpe, int T) {
    if (g->config.llama()) return nullptr;  // (no position embedding: RoPE)
    return wpe_rows(ctx, g->par.cp, g->acts.ring, wpe, T, (size_t)g->config.channels);
}

// Forward over B×T tokens. With targets, the per-position losses are on their way to the host
// when it returns, and gpt_mean_loss gives their mean; with dloss ≠ 0 the logits buffer is left
// holding ∂loss/∂logits (scaled by dloss) for gpt_backward. Without targets, the logits are left
// for sampling. On a GPU nothing here waits for the GPU: a training loop calls gpt_forward,
// gpt_backward, then gpt_mean_loss, which waits only for the loss copy queued before the
// backward, so the GPU's queue never runs dry inside a step.
template <class floatX>
inline void gpt_forward(const Ctx& ctx, GPT<floatX>* g, const int* tokens, const int* targets, int B, int T, float dloss) {
    const GPTConfig& c = g->config;
    if (T > c.max_seq_len) fatal("sequence length %d exceeds the model's maximum %d", T, c.max_seq_len);
    gpt_ensure_activations(ctx, g, B, T);
    Activations<floatX>& a = g->acts;
    const int C = c.channels, BT = B * T;
    const TPRows<floatX> rows = gpt_rows(g, B, T);
    const ParamLayout& p = g->layout;
    const int l0 = g->part.blocks.first, l1 = g->part.blocks.end;  // the part's blocks (all L without pipeline parallelism)
    memcpy(a.tokens_host.data(), tokens, BT * sizeof(int));
    pinned_upload(ctx, a.tokens_in, a.tokens.data(), tokens, BT * sizeof(int));
    // The embedding. With tensor parallelism it is vocabulary-parallel: this rank's wte holds the
    // rows [k.lo, k.lo + k.Vpl), it embeds the tokens among them (zero for the others) and rank
    // 0 adds wpe, so the embeddings are partial sums, added up like a row-parallel layer's.
    // A later pipeline stage starts from the previous stage's output instead, which pipeline.h
    // has put in acts.encoded.
    const VocabSlice k = gpt_vocab(*g);
    if (g->part.embeds) {
        floatX* emb = rows.s.on ? rows.whole : a.encoded.data();
        acquire(g, 0);
        encoder_forward(ctx, emb, a.tokens.data(), g->params[0] + p.wte, row_bias(rows, gpt_wpe_rows(ctx, g, g->params[0] + p.wpe, T)),
                        B, T, C, k.lo, k.Vpl);
        sum_rows(ctx, rows, emb, a.encoded.data());  // → acts.encoded, this rank's rows
        release(g, 0);
    }
    for (int l = l0; l < l1; l++) {
        acquire(g, unit_of_block(l));
        gpt_block_forward(ctx, g, l, B, T);
        release(g, unit_of_block(l));
    }
    floatX* last = gpt_part_output(g, B, T);  // the last block's output
    a.loss_count = 0;
    if (!g->part.heads) {  // a part before the model's last: its output, for the next one (pipeline.h)
        residual_forward(ctx, last, block_acts(g, l1 - 1, B, T).res2, a.scratch.data(), rows.s.P * C);
        return;
    }
    acquire(g, unit_lnf(c));  // (the last block's output is formed here, with lnf)
    floatX* lnf = g->params[unit_lnf(c)];
    const bool ln = !c.llama();  // (Llama: RMSNorm, no mean, no bias)
    residual_layernorm_forward(ctx, last, a.lnf.data(), ln ? a.lnf_mean.data() : nullptr, a.lnf_rstd.data(),
                               block_acts(g, l1 - 1, B, T).res2, a.scratch.data(), lnf, ln ? lnf + C : nullptr, (int)rows.s.P, C);
    const int cu = gpt_classifier_unit(*g);  // the tied embedding (this rank's rows of wte), or lm_head in lnf's unit
    if (cu != unit_lnf(c)) { release(g, unit_lnf(c)); acquire(g, cu); }
    const floatX* x = gather_rows(ctx, rows, a.lnf.data());
    const float* part_stats = targets && k.parts == 1 ? matmul_forward_logits(ctx, a.logits.data(), x, gpt_classifier(*g, g->params), BT, C, k.Vpl,
                                                                              c.vocab_size) : nullptr;  // (--classifier-stats epilogue)
    if (!part_stats) matmul_forward(ctx, a.logits.data(), x, gpt_classifier(*g, g->params), nullptr, BT, C, k.Vpl);  // (its columns of the logits)
    release(g, cu);
    a.loss_count = targets ? BT : 0;
    if (!targets) return;
    for (int i = 0; i < BT; i++)
        if (targets[i] < 0 || targets[i] >= c.vocab_size)
            fatal("target token %d at position %d is outside the model's vocabulary (V=%d)", targets[i], i, c.vocab_size);
    pinned_upload(ctx, a.targets_in, a.targets.data(), targets, BT * sizeof(int));
    if (part_stats) classifier_from_parts(ctx, a.logits.data(), a.losses.data(), part_stats, a.targets.data(), BT, c.vocab_size, k.Vpl, dloss);
    else
        classifier_loss(ctx, rows, a.rows.cls_stats.data(), a.logits.data(), a.losses.data(), a.targets.data(), BT, k, c.vocab_size,
                        c.padded_vocab_size, dloss);
    pinned_download(ctx, a.losses_out, a.losses.data(), BT * sizeof(float));
}

// The per-position losses of the last gpt_forward (which must have had targets), on the host:
// B·T floats, row-major. Waits for the loss copy alone, not for what was queued after it.
template <class floatX> inline const float* gpt_losses(GPT<floatX>* g) {
    CHECK(g->acts.loss_count > 0, "gpt_losses: the last gpt_forward had no targets");
    return (const float*)pinned_wait(g->acts.losses_out);
}

// Row `row` of the last gpt_forward's logits, all Vp of them, into out (host memory, fp32). With
// a vocabulary-parallel classifier each rank holds Vpl of them: gathered (a collective).
template <class floatX> inline void gpt_logits_row(const Ctx& ctx, GPT<floatX>* g, int row, float* out) {
    const int Vp = g->config.padded_vocab_size;
    const VocabSlice k = gpt_vocab(*g);
    std::vector<floatX> host(Vp);  // (gathered in host memory: through MPI, which every mesh has)
    ctx_copy(ctx, host.data() + k.lo, g->acts.logits.data() + (size_t)row * k.Vpl, k.Vpl * sizeof(floatX));
    if (k.parts > 1) comm_all_gather(*g->par.tp.group, host.data(), (size_t)Vp);
    for (int v = 0; v < Vp; v++) out[v] = to_f(host[v]);
}

// Their mean, summed in a fixed order in double.
template <class floatX> inline float gpt_mean_loss(GPT<floatX>* g) {
    Activations<floatX>& a = g->acts;
    const float* losses = gpt_losses(g);
    double sum = 0.0;
    for (int i = 0; i < a.loss_count; i++) sum += losses[i];
    return (float)(sum / a.loss_count);
}

// Backward of the last gpt_forward (which must have had targets and dloss ≠ 0).
// Gradients are *accumulated* into g->grads: the owner zeroes them once per optimizer step.
// Units become ready in the order lnf, block L−1, …, block 0, embeddings.
template <class floatX> inline void gpt_backward(const Ctx& ctx, GPT<floatX>* g, int B, int T) {
    const GPTConfig& c = g->config;
    Activations<floatX>& a = g->acts;
    const int C = c.channels, BT = B * T;
    const TPRows<floatX> rows = gpt_rows(g, B, T);
    const ParamLayout& p = g->layout;
    const VocabSlice k = gpt_vocab(*g);
    const int l0 = g->part.blocks.first, l1 = g->part.blocks.end;  // the part's blocks (all L without pipeline parallelism)
    if (g->part.heads) {
        floatX* last = gpt_part_output(g, B, T);
        // lnf's output at every position (with sequence parallelism gathered again: the forward's
        // gathered copy is not assumed to have survived)
        const floatX* lnf_out = gather_rows(ctx, rows, a.lnf.data());
        const int cu = gpt_classifier_unit(*g);  // the tied embedding: its gradient goes to this rank's rows of wte (or lm_head)
        acquire(g, cu);
        matmul_backward(ctx, a.dbtc.data(), gpt_classifier(*g, g->grads), nullptr, a.logits.data(), lnf_out, gpt_classifier(*g, g->params),
                        BT, C, k.Vpl);
        if (cu != unit_lnf(c)) { release(g, cu); acquire(g, unit_lnf(c)); }
        // ∂loss/∂(lnf's output), this rank's rows: with tensor parallelism a sum over the ranks' columns
        floatX* dx = sum_rows(ctx, rows, a.dbtc.data(), a.scratch.data());
        ctx_zero(ctx, a.dresidual.data(), rows.s.P * C * sizeof(floatX));
        floatX *lnf = g->params[unit_lnf(c)], *dlnf = g->grads[unit_lnf(c)];
        const bool ln = !c.llama();  // (Llama: RMSNorm, no mean, no bias)
        rows_layernorm_backward(ctx, rows, a.dresidual.data(), dlnf, ln ? dlnf + C : nullptr, dx, last, lnf,
                                ln ? a.lnf_mean.data() : nullptr, a.lnf_rstd.data());
        release(g, unit_lnf(c));
        grads_ready(g, unit_lnf(c));
    }  // (else acts.dresidual holds ∂loss/∂(this part's output), which pipeline.h put there)
    for (int l = l1 - 1; l >= l0; l--) {
        acquire(g, unit_of_block(l));
        gpt_block_backward(ctx, g, l, B, T);
        release(g, unit_of_block(l));
        grads_ready(g, unit_of_block(l));
    }
    if (g->part.embeds) {
        // the encoder's backward reads no parameters: no acquire. It runs on every position's
        // gradient (with sequence parallelism gathered): each rank adds to its rows of wte the
        // positions of their tokens, and every rank's wpe gradient is the whole one, the same bits.
        floatX* dwpe = gpt_wpe_rows(ctx, g, g->grads[0] + p.wpe, T);  // (context parallelism: this rank's positions' rows, copied)
        encoder_backward(ctx, g->grads[0] + p.wte, dwpe, gather_rows(ctx, rows, a.dresidual.data()), a.tokens_host.data(), B, T, C,
                         (size_t)k.Vpl, k.lo);
        if (dwpe) wpe_rows_back(ctx, g->par.cp, a.ring, g->grads[0] + p.wpe, T, (size_t)C);
    }  // (else acts.dresidual now holds ∂loss/∂(this part's input), for the previous one)
    if (g->part.embeds || (g->part.heads && c.tied)) grads_ready(g, 0);
}
