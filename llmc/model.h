/*
model.h — GPT-2 and Llama: configuration, parameter layout, forward and backward, written once.

A chain of ops from llmc/ called through a Ctx; nothing here knows which backend runs them:

  x₀ = wte[tokens] + wpe[0..T)
  for l in 0..L:   x = x + attention(ln1(x) · Wqkvᵀ + bqkv) · Wprojᵀ + bproj
                   x = x + gelu(ln2(x) · Wfcᵀ + bfc) · Wfcprojᵀ + bfcproj
  logits = lnf(x) · wteᵀ,   loss = mean cross-entropy

A Llama swaps four ops: RMSNorm for LayerNorm, RoPE instead of wpe, SwiGLU for GELU, and no
biases. Parameters are laid out layer-major and read in units (the embeddings, each block, the
final norm) through pointers that the storage owner sets (data_parallel.h); ParamHooks tell the
owner when a unit is read, done with, and when its gradient is complete.

Main functions: gpt_build (the layout), gpt_forward, gpt_backward, gpt_mean_loss, gpt_infer
(evaluation), gpt_activation_bytes (what the memory plan counts), unit_file_pieces (where a
unit lies in llm.c's tensor-major model file).

Tests: test/test_vs_pytorch.py (against PyTorch, GPT-2 and Llama), test/test_ops.cpp (finite
differences through the whole model), test/test_train.sh (--recompute bit for bit),
test/test_tp.sh and test/test_pp.sh (the parallel layouts against one process).
More: docs/model.md (sizes, precision, recomputation, the parallel layouts).
*/
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <list>
#include <string>
#include <vector>
#include "common.h"
#include "rand.h"
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

// The two architectures (--model gpt2:… | llama:…). Llama (Touvron et al., 2023) changes the
// block, not the model's plumbing: RMSNorm for LayerNorm (no centering, no bias), no bias in any
// linear layer, no position embedding (RoPE turns q and k instead: rope.cuh), SwiGLU for GELU
// (swiglu.cuh) over H hidden features, and grouped-query attention (NKV ≤ NH key/value heads,
// each shared by NH/NKV query heads). Its classifier is tied to wte (as Llama 3.2's 1B and 3B)
// or a matrix of its own, lm_head (Llama 3 8B, Llama 2).
enum class Arch { GPT2, Llama };

struct GPTConfig {
    Arch arch = Arch::GPT2;
    int max_seq_len = 1024;         // maxT (Llama: only a bound on T, no parameters)
    int vocab_size = 50257;         // V
    int padded_vocab_size = 50304;  // Vp, V rounded up to a multiple of 128
    int num_layers = 12;            // L
    int num_heads = 12;             // NH
    int channels = 768;             // C
    int num_kv_heads = 0;           // NKV (Llama); 0: NH
    int hidden = 0;                 // H, the MLP's hidden features (Llama); 0: 4C
    int rope_theta = 10000;         // θ of RoPE's angles (Llama)
    RopeScaling rope_scaling;       // Llama 3.1's stretch of the slow pairs (rope.cuh); factor 0: none
    bool tied = true;               // the classifier is wte (else lm_head: Llama only)
    bool llama() const { return arch == Arch::Llama; }
    int kv_heads() const { return num_kv_heads ? num_kv_heads : num_heads; }
    int ffn() const { return hidden ? hidden : 4 * channels; }
    int head_dim() const { return channels / num_heads; }
    // the rows of qkv's product (q, k, v features): 3C, or (NH + 2·NKV)·hd with grouped-query attention
    size_t qkv_rows() const { return (size_t)(num_heads + 2 * kv_heads()) * head_dim(); }
    // the rows of the MLP's first product: 4C (GELU's input), or 2H (SwiGLU's [gate | up])
    size_t fc_rows() const { return (llama() ? 2 : 1) * (size_t)ffn(); }
};

inline bool gpt_same_shape(const GPTConfig& a, const GPTConfig& b) {
    return a.arch == b.arch && a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
           a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
           a.channels == b.channels && a.kv_heads() == b.kv_heads() && a.ffn() == b.ffn() &&
           a.tied == b.tied && (!a.llama() || (a.rope_theta == b.rope_theta && a.rope_scaling.factor == b.rope_scaling.factor &&
           (a.rope_scaling.factor == 0 || (a.rope_scaling.low == b.rope_scaling.low && a.rope_scaling.high == b.rope_scaling.high &&
                                           a.rope_scaling.original == b.rope_scaling.original))));
}

// ----------------------------------------------------------------------------
// parameter layout

// The 12 tensors of one block, in llm.c's order. A Llama block has no biases and its norms no
// shift: those tensors are there with no elements, so both architectures share one layout code.
enum BlockTensor { LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB,
                   NUM_BLOCK_TENSORS };
inline const char* const BLOCK_TENSOR_NAMES[NUM_BLOCK_TENSORS] = {
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"};

// Each tensor's shape, rows × cols for a weight (out × in, like torch.nn.Linear), rows for a
// vector (cols 0), and how tensor parallelism splits it (tensor_parallel.h): qkv and fc are
// column-parallel (their rows, in groups: qkv's q, k, v, SwiGLU's fc its gate and up), attproj
// and fcproj row-parallel (their columns), the rest replicated.
//            GPT-2          Llama
//   ln1w     C              C            ln1b, qkvb, attprojb, ln2b, fcb, fcprojb: C, …  | none
//   qkvw     3C × C         (NH + 2·NKV)·hd × C
//   attprojw C × C          C × C
//   fcw      4C × C         2H × C
//   fcprojw  C × 4C         C × H
struct BlockTensorShape { size_t rows, cols; TPSplit split; std::vector<size_t> groups; };
inline BlockTensorShape block_tensor_shape(const GPTConfig& c, BlockTensor k) {
    const size_t C = c.channels, hd = c.head_dim(), F = c.fc_rows();
    const size_t q = c.num_heads * hd, kv = (size_t)c.kv_heads() * hd, bias = c.llama() ? 0 : 1;
    const std::vector<size_t> qkv{q, kv, kv}, fc = c.llama() ? std::vector<size_t>{F / 2, F / 2} : std::vector<size_t>{F};
    switch (k) {
        case LN1W: case LN2W: return {C, 0, TPSplit::Replicated, {C}};
        case LN1B: case LN2B: case ATTPROJB: case FCPROJB: return {bias * C, 0, TPSplit::Replicated, {bias * C}};
        case QKVW: return {q + 2 * kv, C, TPSplit::Rows, qkv};
        case QKVB: return {bias * (q + 2 * kv), 0, TPSplit::Rows, bias ? qkv : std::vector<size_t>{0}};
        case ATTPROJW: return {C, C, TPSplit::Cols, {C}};
        case FCW: return {F, C, TPSplit::Rows, fc};
        case FCB: return {bias * F, 0, TPSplit::Rows, bias ? fc : std::vector<size_t>{0}};
        case FCPROJW: return {C, F / (c.llama() ? 2 : 1), TPSplit::Cols, {C}};
        default: return {0, 0, TPSplit::Replicated, {0}};
    }
}

// Elements of tensor k, as one of tp ranks holds it (tp = 1: the whole tensor).
inline size_t block_tensor_size(const GPTConfig& c, BlockTensor k, int tp = 1) {
    const BlockTensorShape s = block_tensor_shape(c, k);
    const size_t n = s.cols ? s.rows * s.cols : s.rows;
    return s.split == TPSplit::Replicated ? n : n / tp;
}
inline bool block_tensor_is_matrix(BlockTensor k) { return k == QKVW || k == ATTPROJW || k == FCW || k == FCPROJW; }

// The layers [first, end) of the vs-th of P pipeline stages (pipeline.h): L split as evenly as
// it goes (the first L mod P stages one more).
struct LayerRange { int first, end; };
inline LayerRange stage_layers(int L, int P, int vs) {
    const int base = L / P, extra = L % P;
    const int first = vs * base + std::min(vs, extra);
    return {first, first + base + (vs < extra ? 1 : 0)};
}

// The parameters one rank holds: all of them, or with tensor parallelism (tp > 1) tp rank
// tp_rank's slice of each block and its Vp/tp rows of wte (the vocabulary-parallel embedding
// and classifier, tensor_parallel.h; of lm_head too, where the classifier has its own); wpe and
// lnf are whole either way. With pipeline parallelism (pp > 1) only its stage's units: its
// blocks, the embeddings on the first stage, lnf (and lm_head) on the last, and where the
// classifier is wte the last stage a copy of the embeddings too (pipeline.h keeps the two
// copies equal). A stage's blocks are one range [first, end), or with
// the interleaved schedule (vpp > 1) vpp chunks of them: chunk k is virtual stage k·pp + stage
// of pp·vpp, so stage 0's first chunk embeds and the last stage's last chunk holds the head.
// The flat buffer holds the units it has in unit order: [embeddings | its blocks | lnf (lm_head)].
struct ParamLayout {
    size_t wte, wpe, blocks, block_size, lnfw, lnfb, lm_head, total;  // (wte, wpe: inside the embeddings' unit;
                                                                       // lnfw, lnfb, lm_head: inside lnf's)
    size_t in_block[NUM_BLOCK_TENSORS];  // offset of each tensor inside a block
    int tp = 1, tp_rank = 0;
    int pp = 1, stage = 0;
    std::vector<LayerRange> chunks;        // its blocks: one range, or vpp of them (increasing)
    bool has_emb = true, has_head = true;  // the embeddings' unit; lnf and the classifier
    int vpp() const { return (int)chunks.size(); }
    int num_blocks() const { int n = 0; for (const LayerRange& r : chunks) n += r.end - r.first; return n; }
    bool has_block(int l) const { for (const LayerRange& r : chunks) if (l >= r.first && l < r.end) return true; return false; }
    int local_block(int l) const { return (int)((block(l) - blocks) / block_size); }  // block l's place among those held
    size_t block(int l) const {  // block l's offset: its place among the blocks held
        size_t i = 0;
        for (const LayerRange& r : chunks) {
            if (l >= r.first && l < r.end) return blocks + (i + (size_t)(l - r.first)) * block_size;
            i += (size_t)(r.end - r.first);
        }
        return blocks + i * block_size;
    }
    bool embeds(int k) const { return stage == 0 && k == 0; }            // chunk k starts from the tokens
    bool heads(int k) const { return has_head && k + 1 == vpp(); }       // chunk k ends with lnf and the classifier
};

inline ParamLayout make_layout(const GPTConfig& c, int tp = 1, int tp_rank = 0, int pp = 1, int stage = 0, int vpp = 1) {
    ParamLayout p;
    size_t C = c.channels;
    p.tp = tp; p.tp_rank = tp_rank;
    p.pp = pp; p.stage = stage;
    for (int k = 0; k < vpp; k++) p.chunks.push_back(stage_layers(c.num_layers, pp * vpp, k * pp + stage));
    p.has_emb = stage == 0 || (c.tied && stage == pp - 1);  // (tied: the last stage's classifier is wte)
    p.has_head = stage == pp - 1;
    p.wte = 0;
    CHECK(c.padded_vocab_size % tp == 0, "make_layout: tp %d does not divide the padded vocabulary %d", tp, c.padded_vocab_size);
    p.wpe = p.wte + (size_t)(c.padded_vocab_size / tp) * C;
    p.blocks = p.has_emb ? p.wpe + (c.llama() ? 0 : (size_t)c.max_seq_len * C) : 0;  // (Llama: no wpe)
    size_t off = 0;
    for (int k = 0; k < NUM_BLOCK_TENSORS; k++) { p.in_block[k] = off; off += block_tensor_size(c, (BlockTensor)k, tp); }
    p.block_size = off;
    p.lnfw = p.blocks + (size_t)p.num_blocks() * p.block_size;
    p.lnfb = p.lnfw + C;
    p.lm_head = p.lnfb + (c.llama() ? 0 : C);  // (Llama: RMSNorm, no lnfb)
    p.total = p.has_head ? p.lm_head + (c.tied ? 0 : (size_t)(c.padded_vocab_size / tp) * C) : p.lnfw;
    return p;
}

// Pointers to one block's tensors, given the block's unit (parameters or gradients); nullptr for
// a tensor with no elements (Llama's biases), which the ops read as "none".
template <class floatX> struct BlockView {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
template <class floatX> inline BlockView<floatX> block_view(const ParamLayout& p, floatX* b) {
    floatX* t[NUM_BLOCK_TENSORS];
    for (int k = 0; k < NUM_BLOCK_TENSORS; k++) {
        const size_t end = k + 1 < NUM_BLOCK_TENSORS ? p.in_block[k + 1] : p.block_size;
        t[k] = end > p.in_block[k] ? b + p.in_block[k] : nullptr;
    }
    return BlockView<floatX>{t[LN1W], t[LN1B], t[QKVW], t[QKVB], t[ATTPROJW], t[ATTPROJB], t[LN2W], t[LN2B], t[FCW], t[FCB], t[FCPROJW], t[FCPROJB]};
}

// One contiguous range of the flat parameter buffer and whether AdamW decays it (2-D weights).
struct ParamRange { size_t offset, size; bool decay; };
inline std::vector<ParamRange> param_ranges(const GPTConfig& c, const ParamLayout& p) {
    std::vector<ParamRange> r;
    auto add = [&](size_t offset, size_t size, bool decay) { if (size) r.push_back({offset, size, decay}); };
    if (p.has_emb) {
        add(p.wte, p.wpe - p.wte, true);
        add(p.wpe, p.blocks - p.wpe, true);
    }
    for (const LayerRange& chunk : p.chunks)
        for (int l = chunk.first; l < chunk.end; l++)
            for (int k = 0; k < NUM_BLOCK_TENSORS; k++)
                add(p.block(l) + p.in_block[k], block_tensor_size(c, (BlockTensor)k, p.tp), block_tensor_is_matrix((BlockTensor)k));
    if (p.has_head) {
        add(p.lnfw, p.lm_head - p.lnfw, false);  // lnfw (and lnfb)
        add(p.lm_head, p.total - p.lm_head, true);
    }
    return r;
}

// ----------------------------------------------------------------------------
// units

inline int gpt_num_units(const GPTConfig& c) { return c.num_layers + 2; }
inline int unit_of_block(int l) { return 1 + l; }
inline int unit_lnf(const GPTConfig& c) { return c.num_layers + 1; }

struct Span { size_t offset, size; };  // elements of the flat layer-major buffer
// (size 0: a unit another pipeline stage holds)
inline Span unit_span(const GPTConfig& c, const ParamLayout& p, int u) {
    if (u == 0) return {p.wte, p.blocks - p.wte};
    if (u <= c.num_layers) return p.has_block(u - 1) ? Span{p.block(u - 1), p.block_size} : Span{p.blocks, 0};
    return {p.lnfw, p.has_head ? p.total - p.lnfw : 0};
}

// The runs of block tensor k that this layout's tp rank holds (tensor_parallel.h): offsets in
// the whole tensor and in the rank's slice of it. One run, the whole tensor, without tp.
inline std::vector<TPPiece> block_tensor_pieces(const GPTConfig& c, const ParamLayout& p, BlockTensor k) {
    const BlockTensorShape s = block_tensor_shape(c, k);
    return tp_pieces(s.groups, s.cols ? s.cols : 1, s.split, p.tp, p.tp_rank);
}

// Where unit u's elements lie in llm.c's tensor-major model file (element offsets after the
// header): piece i is unit[unit_off, unit_off + n) = file[file_off, file_off + n). With tensor
// parallelism a block's split tensors are many pieces (their slices' rows, or runs of columns);
// replicated: every tp rank holds this piece (one of them writes it).
struct FilePiece { size_t file_off, unit_off, n; bool replicated; };
inline std::vector<FilePiece> unit_file_pieces(const GPTConfig& c, const ParamLayout& p, int u) {
    const ParamLayout full = make_layout(c);
    const size_t L = c.num_layers, full_block = full.block_size, emb = full.blocks - full.wte;
    if (unit_span(c, p, u).size == 0) return {};  // another pipeline stage's
    std::vector<FilePiece> pieces;
    auto add = [&](FilePiece f) { if (f.n) pieces.push_back(f); };  // (Llama's tensors of no elements: none)
    if (u == 0) {  // this rank's rows of wte (all of them without tp), then wpe
        const size_t wte_n = p.wpe - p.wte;
        add({(size_t)p.tp_rank * wte_n, 0, wte_n, false});
        add({full.wpe, wte_n, full.blocks - full.wpe, true});
        return pieces;
    }
    if (u == unit_lnf(c)) {  // lnfw (lnfb), then this rank's rows of lm_head (an untied classifier's)
        const size_t norm = full.lm_head - full.lnfw, head_n = p.total - p.lm_head;
        add({emb + L * full_block, 0, norm, true});
        add({emb + L * full_block + norm + (size_t)p.tp_rank * head_n, p.lm_head - p.lnfw, head_n, false});
        return pieces;
    }
    size_t base = emb;  // the first layer of tensor k starts here in the file
    for (int k = 0; k < NUM_BLOCK_TENSORS; k++) {
        const size_t n = block_tensor_size(c, (BlockTensor)k);
        const bool replicated = block_tensor_shape(c, (BlockTensor)k).split == TPSplit::Replicated;
        for (const TPPiece& t : block_tensor_pieces(c, p, (BlockTensor)k))
            add({base + (size_t)(u - 1) * n + t.full_off, p.in_block[k] + t.local_off, t.n, replicated});
        base += L * n;
    }
    return pieces;
}

// The parts of unit u whose gradients this rank counts in the gradient norm (unit-relative):
// all of it, except that only tp rank 0 counts the tensors every tp rank holds a copy of, and
// only the first pipeline stage the embeddings (the last holds a copy).
inline std::vector<Span> unit_norm_spans(const GPTConfig& c, const ParamLayout& p, int u) {
    const Span whole = unit_span(c, p, u);
    if (whole.size == 0 || (u == 0 && p.stage != 0)) return {};
    if (p.tp_rank == 0) return {{0, whole.size}};
    std::vector<Span> spans;
    if (u == 0) return {{0, p.wpe - p.wte}};  // its rows of wte (wpe is replicated)
    if (u == unit_lnf(c)) return {{p.lm_head - p.lnfw, p.total - p.lm_head}};  // its rows of lm_head (lnf is replicated)
    for (int k = 0; k < NUM_BLOCK_TENSORS; k++)
        if (block_tensor_shape(c, (BlockTensor)k).split != TPSplit::Replicated)
            spans.push_back({p.in_block[k], block_tensor_size(c, (BlockTensor)k, p.tp)});
    return spans;
}

// ----------------------------------------------------------------------------
// presets

// "d12"-style depth (GPT-2 shapes at 12/24/36/48; otherwise C = 64·d, NH = d) or "gpt2:124M" etc.;
// "llama:d12"-style depth for a Llama block of the same C, NH (hd = 64) with NKV = NH/2 key/value
// heads (NH when odd) and H = 8C/3 rounded up to a multiple of 128 (the MLP's 8C² parameters
// then match GPT-2's), θ = 10000; "llama:1B" and "llama:3B" for Llama 3.2's shapes (NKV = 8,
// θ = 500000, T up to 8192), "llama:8B" for Llama 3 8B's (NKV = 8, H = 14336, lm_head apart from
// wte). All of them with GPT-2's vocabulary unless --vocab-size says otherwise (128256 for Llama
// 3's own tokenizer, a rank file: tokenizer.h).
// Returns false if the spec is not a preset name (it may then be a model file).
inline bool gpt_preset(const std::string& spec, GPTConfig* c) {
    std::string s = spec;
    if (s == "gpt2:124M") s = "d12";
    else if (s == "gpt2:350M") s = "d24";
    else if (s == "gpt2:774M") s = "d36";
    else if (s == "gpt2:1558M") s = "d48";
    if (s == "llama:1B" || s == "llama:3B" || s == "llama:8B") {
        *c = GPTConfig();
        c->arch = Arch::Llama;
        c->max_seq_len = 8192; c->num_kv_heads = 8; c->hidden = 8192; c->rope_theta = 500000;
        if (s == "llama:1B") { c->num_layers = 16; c->channels = 2048; c->num_heads = 32; }
        else if (s == "llama:3B") { c->num_layers = 28; c->channels = 3072; c->num_heads = 24; }
        else { c->num_layers = 32; c->channels = 4096; c->num_heads = 32; c->hidden = 14336; c->tied = false; }
        return true;
    }
    const bool llama = s.rfind("llama:", 0) == 0;
    if (llama) s = s.substr(6);
    if (s.size() < 2 || s[0] != 'd' || s.find_first_not_of("0123456789", 1) != std::string::npos) return false;
    int d = atoi(s.c_str() + 1);
    if (d < 1 || d > 96) return false;
    *c = GPTConfig();
    c->num_layers = d;
    if (llama) {
        c->arch = Arch::Llama;
        c->channels = 64 * d; c->num_heads = d;
        c->num_kv_heads = d % 2 == 0 ? d / 2 : d;
        c->hidden = (int)ceil_div((size_t)8 * c->channels, (size_t)3 * 128) * 128;
        return true;
    }
    if (d == 12) { c->channels = 768; c->num_heads = 12; }
    else if (d == 24) { c->channels = 1024; c->num_heads = 16; }
    else if (d == 36) { c->channels = 1280; c->num_heads = 20; }
    else if (d == 48) { c->channels = 1600; c->num_heads = 25; }
    else { c->channels = 64 * d; c->num_heads = d; }
    return true;
}

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
// elements. MFU (mfu.h) counts the model's FLOPs, not the rerun: recomputation lowers it.
enum class Recompute { None, Selective, Full };
inline const char* const RECOMPUTE_NAMES[] = {"none", "selective", "full"};  // --recompute's values, in that order
inline const char* recompute_name(Recompute r) { return RECOMPUTE_NAMES[(int)r]; }
// ln1, ln2 and the GELU output, one per block?
inline bool keeps_cheap(Recompute r) { return r == Recompute::None; }
// q/k/v, the attention output and its lse, the residual after attention, the pre-GELU, and the
// LayerNorm statistics, one per block?
inline bool keeps_inner(Recompute r) { return r != Recompute::Full; }

template <class floatX> struct Activations {  // on the Ctx's device, for B·T positions; per-block buffers are [L][...], or one block's (Recompute)
    Buf<floatX> encoded, ln1, qkv, atty, residual2, ln2, fch, fch_gelu, residual3, lnf, logits, scratch;
    Buf<float> ln1_mean, ln1_rstd, lse, ln2_mean, ln2_rstd, lnf_mean, lnf_rstd, losses;  // fp32 statistics
    Buf<float> cls_stats;   // tensor parallelism: every tp rank's classifier stats (fused_classifier.cuh)
    Buf<floatX> whole;      // sequence parallelism: all positions of a LayerNorm output or of the residual
                            // gradient (gathered), and of a row-parallel product (before its reduce-scatter)
    Buf<floatX> ln_grad;    // sequence parallelism: one LayerNorm's parameter gradient from this rank's rows (2C)
    // context parallelism (context_parallel.h): the ring's k, v buffers and fp32 sums, and wpe's rows
    // at this rank's positions (their gradient in the backward)
    Buf<floatX> cp_kv, cp_wpe;
    Buf<float> cp_acc, cp_dkv, cp_D;
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
    HostStage tokens_in, targets_in, losses_out;  // copies the host does not wait for (common.h)
    int B = 0, T = 0, chunk = 0;
    Recompute recompute = Recompute::None;  // what the buffers were sized for (and the chunk's blocks)
    int loss_count = 0;  // positions whose losses the last gpt_forward is copying back (0: it had no targets)
};

// How the owner of the parameters follows the model's use of them (see the header).
struct ParamHooks {
    virtual void acquire(int unit) = 0;      // before the model reads g->params[unit]
    virtual void release(int unit) = 0;      // after it is done reading them
    virtual void grads_ready(int unit) = 0;  // g->grads[unit] is complete for this micro-batch
    virtual ~ParamHooks() = default;
};

// The model's parallel state on this rank, all in one place: the groups that split it, and the
// working state of the pipeline's stages and of context parallelism (tensor_parallel.h,
// pipeline.h, context_parallel.h). Without parallelism every group is nullptr.
template <class floatX> struct ModelParallel {
    Group* tp = nullptr;          // tensor parallelism: the tp group (tensor_parallel.h); none: whole blocks
    bool sp = false;              // sequence parallelism over the tp group (tensor_parallel.h)
    std::vector<floatX> tp_scratch;    // its all-reduces' host scratch (comm.h)
    Group* pp = nullptr;          // pipeline parallelism: the pp group, whose rank is this stage (pipeline.h)
    struct Send { Buf<floatX> copy; CommHandle h; };
    // the stage's sends per way (0: forward, to stage + 1; 1: backward), each from a copy of its
    // own, oldest first, reused once its receiver has it; at most pp_send_cap[way] of them
    // (pipeline.h's pp_send_buffers; 0: no cap)
    std::list<Send> pp_sends[2];
    std::array<int, 2> pp_send_cap{0, 0};
    // the activations of several micro-batches are alive at once, one set a slot; slot `slot`'s
    // are in acts while it runs, the others parked. With the interleaved schedule a stage runs one
    // of its chunks at a time (`chunk`: layout.chunks's), and each chunk has slots of its own
    // (sized for its blocks).
    std::vector<Activations<floatX>> parked;
    int slot = 0, chunk = 0;
    std::vector<int> slots{1};    // per chunk: how many the schedule keeps (the memory plan counts them)
    Group* cp = nullptr;          // context parallelism: the cp group; its rank holds some positions (context_parallel.h)
    bool cp_zigzag = false;       // which ones: --cp-layout zigzag, else contiguous
    int infer_T = 0;              // the sequence length of the last gpt_infer (before padding, with cp)
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
    ModelParallel<floatX> par;    // tp, sp, pp, cp: the groups and their working state
};
// The cp ranks (1 without context parallelism).
template <class floatX> inline int gpt_cp(const GPT<floatX>& g) { return g.par.cp ? g.par.cp->size : 1; }

// tp: the tp group, whose rank this process holds a slice of each block for (nullptr: no
// tensor parallelism; the config's heads must divide over it, which the trainer checks).
// sp: sequence parallelism, the positions of the per-position activations split over tp too.
// pp: the pp group, whose rank is this process's pipeline stage (nullptr: the whole model).
// cp: the cp group, whose rank holds some positions of each sequence (zigzag: which ones).
// vpp: with pp, the stage's chunks (the interleaved schedule; 1 otherwise).
template <class floatX> inline void gpt_build(GPT<floatX>* g, const GPTConfig& c, Group* tp = nullptr, bool sp = false, Group* pp = nullptr,
                                         Group* cp = nullptr, bool zigzag = false, int vpp = 1) {
    g->config = c;
    g->par.cp = cp && cp->size > 1 ? cp : nullptr;
    g->par.cp_zigzag = zigzag;
    g->par.tp = tp;
    g->par.sp = sp && tp && tp->size > 1;
    g->par.pp = pp && pp->size > 1 ? pp : nullptr;
    g->layout = make_layout(c, tp ? tp->size : 1, tp ? tp->rank : 0, pp ? pp->size : 1, pp ? pp->rank : 0, g->par.pp ? vpp : 1);
    g->par.slots.assign(g->layout.vpp(), 1);
    g->par.chunk = 0;
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

// GPT-2 init of unit u into out (its unit_span(u).size elements): weights N(0, 0.02), residual
// projections N(0, 0.02/√(2L)), biases 0, LayerNorm 1/0 (Llama: the same, and it has no biases;
// an untied lm_head N(0, 0.02) like wte). Each tensor (and each block's copy)
// draws from its own stream (rand.h), so a unit's values do not depend on who initializes it;
// a tp rank's block (and wte) is its slice of the whole one's values.
inline void gpt_init_unit(const GPTConfig& c, const ParamLayout& p, int u, uint64_t seed, float* out) {
    if (unit_span(c, p, u).size == 0) return;  // another pipeline stage's
    if (p.tp > 1 && (u == 0 || u == unit_lnf(c))) {  // this rank's rows of the whole wte (lm_head), and wpe (lnf)
        const ParamLayout full = make_layout(c);
        std::vector<float> whole(unit_span(c, full, u).size);  // (unit u of the whole layout, in the file's order)
        gpt_init_unit(c, full, u, seed, whole.data());
        const size_t start = unit_file_pieces(c, full, u)[0].file_off;  // the unit's first element in the file
        for (const FilePiece& f : unit_file_pieces(c, p, u)) std::copy_n(whole.data() + f.file_off - start, f.n, out + f.unit_off);
        return;
    }
    if (p.tp > 1 && u != unit_lnf(c)) {
        const ParamLayout full = make_layout(c);
        std::vector<float> block(full.block_size);
        gpt_init_unit(c, full, u, seed, block.data());
        for (int k = 0; k < NUM_BLOCK_TENSORS; k++)
            for (const TPPiece& t : block_tensor_pieces(c, p, (BlockTensor)k))
                std::copy_n(block.data() + full.in_block[k] + t.full_off, t.n, out + p.in_block[k] + t.local_off);
        return;
    }
    Span s = unit_span(c, p, u);
    std::fill(out, out + s.size, 0.0f);
    auto fill_normal = [&](float* dst, size_t n, float std, uint64_t stream) {
        Rng r(seed, stream);
        for (size_t i = 0; i < n; i++) dst[i] = std * r.normal();
    };
    if (u == 0) {
        fill_normal(out + p.wte, (size_t)c.vocab_size * c.channels, 0.02f, 1);  // padded rows stay 0
        fill_normal(out + p.wpe, p.blocks - p.wpe, 0.02f, 2);  // (Llama: no wpe)
    } else if (u == unit_lnf(c)) {
        for (int i = 0; i < c.channels; i++) out[i] = 1.0f;
        fill_normal(out + p.lm_head - p.lnfw, c.tied ? 0 : (size_t)c.vocab_size * c.channels, 0.02f, 3);  // (padded rows stay 0)
    } else {
        int l = u - 1;
        float proj_std = 0.02f / sqrtf(2.0f * c.num_layers);
        for (int k = 0; k < NUM_BLOCK_TENSORS; k++) {
            float* dst = out + p.in_block[k];
            size_t n = block_tensor_size(c, (BlockTensor)k);
            if (k == LN1W || k == LN2W) std::fill(dst, dst + n, 1.0f);
            else if (k == QKVW || k == FCW) fill_normal(dst, n, 0.02f, 1000 + 100 * l + k);
            else if (k == ATTPROJW || k == FCPROJW) fill_normal(dst, n, proj_std, 1000 + 100 * l + k);
        }
    }
}

// Every activation buffer with its element count for B·T positions: the one list that both
// gpt_ensure_activations (allocating it) and gpt_activation_bytes (planning memory) walk.
// A per-block buffer holds L blocks, or one where --recompute reruns what made it (see Recompute).
// With tensor parallelism (tp > 1) a rank holds its heads' q, k, v, attention output and lse,
// its 4C/tp of the MLP's hidden features (Ct = C/tp, NHt = NH/tp below) and its Vp/tp columns
// of the logits, plus the classifier's stats (Classifier); the rest is whole.
// With sequence parallelism (sp) the rest is split too: the LayerNorm outputs and statistics,
// the residual stream and its gradient hold this rank's P = ⌈B·T/tp⌉ rows (SeqSplit), and one
// gathered buffer holds all of them for the layer that needs them.
// With pipeline parallelism, the blocks of this rank's stage (of its chunk `chunk`, interleaved),
// and the head's buffers on the last (its last chunk).
// With context parallelism (cp > 1) T is this rank's positions, and the ring's buffers are added.
template <class floatX, class F>
inline void gpt_activation_buffers(Activations<floatX>& a, const GPTConfig& c, const ParamLayout& p, int chunk, int B, int T, Recompute r,
                                   bool sp, int cp, F&& f) {
    const int tp = p.tp;
    const LayerRange blocks = p.chunks[chunk];
    const size_t L = blocks.end - blocks.first, C = c.channels, Ct = C / tp, NHt = c.num_heads / tp, BT = (size_t)B * T;
    const size_t Q = c.qkv_rows() / tp, Fc = c.fc_rows() / tp, Hh = c.ffn() / tp;  // qkv's, fc's, the MLP's features
    const size_t head = p.heads(chunk) ? 1 : 0, mean = c.llama() ? 0 : 1;       // (RMSNorm keeps no mean)
    const bool llama = c.llama();
    const size_t Lc = keeps_cheap(r) ? L : 1, Li = keeps_inner(r) ? L : 1;
    const size_t P = sp ? ceil_div(BT, (size_t)tp) : BT, W = sp ? P * tp : BT;  // rows: this rank's, gathered
    f(a.encoded, P * C);
    f(a.ln1, Lc * P * C); f(a.ln1_mean, mean * Li * P); f(a.ln1_rstd, Li * P);      // per block
    f(a.qkv, Li * BT * Q); f(a.atty, Li * BT * Ct); f(a.lse, Li * BT * NHt);
    f(a.residual2, Li * P * C); f(a.ln2, Lc * P * C); f(a.ln2_mean, mean * Li * P); f(a.ln2_rstd, Li * P);
    f(a.fch, Li * BT * Fc); f(a.fch_gelu, Lc * BT * Hh); f(a.residual3, L * P * C);
    f(a.lnf, head * P * C); f(a.lnf_mean, mean * head * P); f(a.lnf_rstd, head * P);  // the head
    f(a.logits, head * BT * c.padded_vocab_size / tp); f(a.losses, head * BT);
    f(a.scratch, P * C);
    f(a.dresidual, P * C); f(a.dbtc, W * C); f(a.dqkv, BT * Q); f(a.dfch, BT * Fc);  // backward scratch
    f(a.dhidden, llama ? BT * Hh : 0); f(a.rope, llama ? (size_t)T * c.head_dim() : 0);
    f(a.tokens, BT); f(a.targets, head * BT);
    if (tp > 1) f(a.cls_stats, head * tp * BT * 3);  // the vocabulary-parallel classifier's
    if (sp) { f(a.whole, W * C); f(a.ln_grad, 2 * C); }
    if (cp > 1) {
        f(a.cp_kv, 2 * BT * (Q - Ct)); f(a.cp_acc, BT * Q); f(a.cp_dkv, 3 * BT * (Q - Ct)); f(a.cp_D, BT * NHt);  // (Q − Ct: k and v)
        f(a.cp_wpe, p.embeds(chunk) && !llama ? (size_t)T * C : 0);
    }
}

template <class floatX> inline void gpt_ensure_activations(const Ctx& ctx, GPT<floatX>* g, int B, int T) {
    Activations<floatX>& a = g->acts;
    if (a.B * a.T >= B * T && a.T >= T && a.logits.dev == ctx.device && a.recompute == g->recompute && a.chunk == g->par.chunk) return;
    gpt_activation_buffers(a, g->config, g->layout, g->par.chunk, B, T, g->recompute, g->par.sp, gpt_cp(*g),
                           [&](auto& buf, size_t n) { buf.alloc(ctx, n); });
    a.tokens_host.assign((size_t)B * T, 0);
    a.B = B; a.T = T; a.recompute = g->recompute; a.chunk = g->par.chunk; a.rope_T = 0;
}

// The bytes gpt_ensure_activations allocates for B·T positions (as Buf rounds them), without
// allocating anything: with the storage owner's bytes, what one rank must hold on its device
// (planner.h plans --batch-size with it). Per position, without recomputation: (16·L·C + 12·C +
// Vp) elements of floatX, (L·(4 + NH) + 3) floats and 2 ints; GPT-2 124M in bf16 needs ~0.415 MB a
// token (Recompute gives the elements with it). A tp rank holds (4 + 12/tp)·C of a block's 16·C,
// and 16·C/tp with sequence parallelism; a pipeline stage its blocks' (one set per slot), or
// with interleaving chunk `chunk`'s.
template <class floatX> inline double gpt_activation_bytes(const GPTConfig& c, const ParamLayout& p, int B, int T, Recompute r,
                                                      bool sp = false, int cp = 1, int chunk = 0) {
    Activations<floatX> none;  // only walked for its buffers' types: nothing is allocated
    double bytes = 0;
    gpt_activation_buffers(none, c, p, chunk, B, T, r, sp && p.tp > 1, cp,
                           [&](auto& buf, size_t n) { bytes += (double)buf.bytes_for(n); });
    return bytes;
}
// ... of a model, all its slots (of every chunk: g.par.slots, or the slots given); T is this rank's
// positions (T/cp with context parallelism)
template <class floatX> inline double gpt_activation_bytes(const GPT<floatX>& g, int B, int T, Recompute r, const std::vector<int>* slots = nullptr) {
    double bytes = 0;
    for (int k = 0; k < g.layout.vpp(); k++)
        bytes += (slots ? *slots : g.par.slots)[k] * gpt_activation_bytes<floatX>(g.config, g.layout, B, T, r, g.par.sp, gpt_cp(g), k);
    return bytes;
}
// The FP8 products' scratch (--precision fp8): matmul.cuh's matmul_forward_fp8 and
// matmul_backward_fp8 keep it, one buffer per operand, each growing to what the largest product
// of a block needs — one byte an element: the forward's input and weight, the backward's dout as
// it is and transposed, Wᵀ and xᵀ; and the scales. Not activations (nothing in it outlives a
// product), but the memory plan counts it beside them. Where cuBLASLt multiplies no FP8 operands
// (matmul.cuh: fp8_products_run found so, ctx.tuned->fp8_dequantize) each product's two operands are
// dequantized into two more buffers, of floatX: the first operand's (x, N·in; dout, N·out; doutᵀ,
// out·N) and the second's (W, out·in; Wᵀ, in·out; xᵀ, in·N), each at the largest of them.
// A block's four products on this rank, as (input, output) widths: qkv C → Q, the attention
// projection Ct → C, fc C → Fc, the fc projection Hh → C (gpt_block_forward's matmuls).
struct ProductWidths { size_t in, out; };
enum BlockProduct { PRODUCT_QKV, PRODUCT_ATTPROJ, PRODUCT_FC, PRODUCT_FCPROJ, NUM_BLOCK_PRODUCTS };
inline std::array<ProductWidths, NUM_BLOCK_PRODUCTS> gpt_block_products(const GPTConfig& c, int tp) {
    const size_t C = c.channels;
    return {{{C, c.qkv_rows() / tp}, {C / tp, C}, {C, c.fc_rows() / tp}, {(size_t)c.ffn() / tp, C}}};
}
template <class floatX> inline double gpt_fp8_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
    if (!g.fp8) return 0;
    const size_t N = (size_t)B * T;
    size_t in = 0, out = 0, w = 0;
    for (const ProductWidths& p : gpt_block_products(g.config, g.layout.tp))
        in = std::max(in, N * p.in), out = std::max(out, N * p.out), w = std::max(w, p.in * p.out);
    auto bytes = [](size_t n) { return (double)Buf<uint8_t>::bytes_for(n); };
    bool dequantize = false;
#ifdef LLMC_CUDA
    dequantize = ctx.tuned && ctx.tuned->fp8_dequantize;
#endif
    const double fallback = dequantize ? (double)Buf<floatX>::bytes_for(std::max(in, out)) + (double)Buf<floatX>::bytes_for(std::max(w, in)) : 0;
    return 2 * bytes(in) + 2 * bytes(w) + 2 * bytes(out) + (double)Buf<Fp8Scales>::bytes_for(2) + (double)Buf<Fp8Scales>::bytes_for(3) +
           fallback;
}
// The GELU backward's fp32 product (matmul.cuh: matmul_backward with gelu_pre), where cuBLASLt's
// DGELU epilogue cannot take it: the fc projection's input width on this rank, ffn/tp, not a
// multiple of 8 (a model file of odd width C; or ctx.kernels.gelu_fusion off). B·T·ffn/tp floats, held
// from the first backward on. Counted on the GPU: the CPU takes that path always, among host
// temporaries of its own (F32View's fp32 copies in bf16) that its plan does not count either.
template <class floatX> inline double gpt_gelu_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
    const size_t Hh = (size_t)g.config.ffn() / g.layout.tp;
    const bool gpu = ctx.device == Device::CUDA;
    bool epilogue = true;
#ifdef LLMC_CUDA
    epilogue = gelu_epilogue_width(ctx.kernels, Hh);
#endif
    if (!gpu || epilogue || g.config.llama() || g.fp8) return 0;  // (Llama: SwiGLU; FP8: the GELU apart, in floatX)
    return (double)Buf<float>::bytes_for((size_t)B * T * Hh);
}
// The fused attention backward's fp32 dQ partial sums (attention.cuh: flash_backward_scratch_bytes),
// on a GPU where it runs: a rank's heads (NH/tp) over its positions, held from the first backward on.
template <class floatX> inline double gpt_attention_scratch_bytes(const Ctx& ctx, const GPT<floatX>& g, int B, int T) {
#ifdef LLMC_CUDA
    const GPTConfig& c = g.config;
    const int tp = g.layout.tp;
    if (ctx.device == Device::CUDA)
        return (double)flash_backward_scratch_bytes<floatX>(ctx.kernels, B, T, c.num_heads / tp * c.head_dim(), c.num_heads / tp, c.kv_heads() / tp);
#endif
    (void)ctx; (void)g; (void)B; (void)T;
    return 0;
}
// "" when every FP8 product of a block takes B·T rows (fp8.cuh: multiples of 16), else why not.
inline std::string gpt_fp8_shape_problem(const GPTConfig& c, int tp, int B, int T) {
    for (const ProductWidths& p : gpt_block_products(c, tp)) {
        const std::string why = fp8_shape_problem(B * T, (int)p.in, (int)p.out);
        if (!why.empty()) return why;
    }
    return "";
}
// The ctx the blocks' linear layers run their products with: FP8 with --precision fp8, else the
// run's own. The classifier's product takes the plain one.
// With delayed scaling (fp8.cuh) each product of each block this rank holds has its own place in
// the scaling state: 4 per block, in the order of gpt_block_products (BlockProduct).
template <class floatX> inline std::array<Ctx, NUM_BLOCK_PRODUCTS> linear_ctx(const Ctx& ctx, GPT<floatX>* g, int l) {
    std::array<Ctx, NUM_BLOCK_PRODUCTS> lin;
    for (int p = 0; p < NUM_BLOCK_PRODUCTS; p++) {
        lin[p] = ctx;
        lin[p].fp8 = g->fp8;
        if (g->fp8_delayed.on) { lin[p].fp8_delayed = &g->fp8_delayed; lin[p].fp8_product = g->layout.local_block(l) * NUM_BLOCK_PRODUCTS + p; }
    }
    return lin;
}
// The tensors of delayed scaling's state on this rank: x, W and dout of each product.
template <class floatX> inline int gpt_fp8_tensors(const GPT<floatX>& g) { return g.layout.num_blocks() * NUM_BLOCK_PRODUCTS * 3; }

// The ring buffers of context_parallel.h, in the activations.
template <class floatX> inline RingBuffers<floatX> gpt_ring_buffers(GPT<floatX>* g, int B, int T) {
    Activations<floatX>& a = g->acts;
    const size_t kv = (size_t)B * T * (g->config.qkv_rows() - g->config.channels) / g->layout.tp;  // k and v
    return {{a.cp_kv.data(), a.cp_kv.data() + kv}, a.cp_acc.data(), {a.cp_dkv.data(), a.cp_dkv.data() + kv, a.cp_dkv.data() + 2 * kv},
            a.cp_D.data()};
}

// How this forward's B·T positions lie over the tp ranks (tensor_parallel.h: all on every rank
// unless sequence parallelism splits them).
template <class floatX> inline SeqSplit gpt_seq_split(const GPT<floatX>& g, int B, int T) { return seq_split((size_t)B * T, g.par.tp, g.par.sp); }
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
    const int tp = g->layout.tp;
    const size_t BT = (size_t)B * T, BTCt = BT * cf.channels / tp, NHt = cf.num_heads / tp;
    const size_t Q = cf.qkv_rows() / tp, Fc = cf.fc_rows() / tp, Hh = cf.ffn() / tp;
    const size_t P = gpt_seq_split(*g, B, T).P, PC = P * cf.channels;
    const int l0 = g->layout.chunks[g->par.chunk].first;  // the running chunk's first block (pipeline.h; 0 without)
    const size_t c = keeps_cheap(g->recompute) ? l - l0 : 0, i = keeps_inner(g->recompute) ? l - l0 : 0;
    const bool mean = !cf.llama();  // (RMSNorm: no mean)
    return BlockActs<floatX>{
        // x, the block's input: the encoder's output (or the previous stage's) for the stage's
        // first block, else the output of block l−1
        l == l0 ? a.encoded.data() : a.residual3.data() + (size_t)(l - 1 - l0) * PC,
        a.ln1.data() + c * PC, a.qkv.data() + i * BT * Q, a.atty.data() + i * BTCt, a.residual2.data() + i * PC,
        a.ln2.data() + c * PC, a.fch.data() + i * BT * Fc, a.fch_gelu.data() + c * BT * Hh,
        mean ? a.ln1_mean.data() + i * P : nullptr, a.ln1_rstd.data() + i * P, a.lse.data() + i * BT * NHt,
        mean ? a.ln2_mean.data() + i * P : nullptr, a.ln2_rstd.data() + i * P};
}

// The output of this rank's last block (of the whole model without pipeline parallelism; of the
// running chunk, interleaved), this rank's rows of the residual stream: what pipeline.h hands to
// the next stage, and lnf's input on the last.
template <class floatX> inline floatX* gpt_stage_output(GPT<floatX>* g, int B, int T) {
    const LayerRange r = g->layout.chunks[g->par.chunk];
    return g->acts.residual3.data() + (size_t)(r.end - 1 - r.first) * gpt_seq_split(*g, B, T).P * g->config.channels;
}

// Llama: RoPE's angles for this forward's T positions (on the Ctx's device, rope.cuh), made when
// T changes: positions 0…T−1, or with context parallelism the sequence's positions this rank
// holds (context_parallel.h), so every rank turns its q and k by their true places.
template <class floatX> inline const float* gpt_rope(const Ctx& ctx, GPT<floatX>* g, int T) {
    Activations<floatX>& a = g->acts;
    if (a.rope_T != T) {
        std::vector<int> pos(T);
        for (int t = 0; t < T; t++) pos[t] = t;
        if (g->par.cp)
            for (const PosPiece& q : cp_pieces(g->par.cp->size, g->par.cp->rank, g->par.cp_zigzag, T))
                for (int i = 0; i < q.n; i++) pos[q.local + i] = q.global + i;
        a.rope_host = rope_table(pos.data(), T, g->config.head_dim(), (double)g->config.rope_theta, g->config.rope_scaling);
        ctx_copy(ctx, a.rope.data(), a.rope_host.data(), a.rope_host.size() * sizeof(float));
        a.rope_T = T;
    }
    return a.rope.data();
}
template <class floatX> inline void acquire(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->acquire(u); }
template <class floatX> inline void release(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->release(u); }
template <class floatX> inline void grads_ready(GPT<floatX>* g, int u) { if (g->hooks) g->hooks->grads_ready(u); }

// Forward of block l. Every residual add feeds a LayerNorm, so the two run as one op
// (residual_layernorm_forward): res2 = x + attproj(…) with ln2, and the block's output
// res3 = res2 + fcproj(…) with the next LayerNorm, which is block l+1's ln1 or lnf. So block l
// begins by forming its input x = res3 of block l−1 from that block's res2 and the MLP output
// it left in acts.scratch, and the last block's output is formed by gpt_forward with lnf.
// rerun (the backward of a --recompute run): only the ops whose outputs the run did not keep,
// on the kept inputs; x exists already, and the MLP's output is not needed.
// Tensor parallelism (tensor_parallel.h): this rank's Ct = C/tp of the q, k, v and attention
// features (its NH/tp heads) and 4·Ct of the MLP's; the two projections back to C give partial
// sums, which tp_sum_rows adds up over the tp ranks (Megatron's g). With sequence parallelism
// the residual stream and the LayerNorms run on this rank's P rows: each LayerNorm output is
// gathered for the layer that reads it (tp_gather_rows), and the sums are reduce-scatters.
// Without tensor parallelism Ct = C, P = B·T, and the gathers and sums do nothing.
template <class floatX> inline void gpt_block_forward(const Ctx& ctx, GPT<floatX>* g, int l, int B, int T, bool rerun = false) {
    const GPTConfig& c = g->config;
    Activations<floatX>& a = g->acts;
    const int tp = g->layout.tp, C = c.channels, Ct = C / tp, NHt = c.num_heads / tp, NKVt = c.kv_heads() / tp, BT = B * T;
    const int Q = (int)c.qkv_rows() / tp, Fc = (int)c.fc_rows() / tp, Hh = c.ffn() / tp;  // (GPT-2: 3Ct, 4Ct, 4Ct)
    const SeqSplit s = gpt_seq_split(*g, B, T);
    const int P = (int)s.P;                               // rows of the residual stream here
    floatX* part = s.on ? a.whole.data() : a.scratch.data();  // a row-parallel layer's partial products
    BlockView<floatX> w = block_view(g->layout, g->params[unit_of_block(l)]);
    BlockActs<floatX> b = block_acts(g, l, B, T);
    const std::array<Ctx, NUM_BLOCK_PRODUCTS> lin = linear_ctx(ctx, g, l);  // the products' (FP8 with --precision fp8)
    const bool inner = !rerun || !keeps_inner(g->recompute);  // the products and attention run
    // (Llama: the norms are RMSNorms, which the LayerNorm ops are with no mean and no bias: b.*_mean
    // and w.*b are nullptr; the products have no biases either)
    if (l > g->layout.chunks[g->par.chunk].first && !rerun)  // x = res3 of block l−1 = its res2 + its MLP output
        residual_layernorm_forward(ctx, b.x, b.ln1, b.ln1_mean, b.ln1_rstd, block_acts(g, l - 1, B, T).res2, a.scratch.data(),
                                   w.ln1w, w.ln1b, P, C);
    else                  // x is the encoder's output, or was kept
        layernorm_forward(ctx, b.ln1, b.ln1_mean, b.ln1_rstd, b.x, w.ln1w, w.ln1b, P, C);
    if (inner) {
        matmul_forward(lin[PRODUCT_QKV], b.qkv, tp_gather_rows(ctx, g->par.tp, s, b.ln1, a.whole.data(), C), w.qkvw, w.qkvb, BT, C, Q);
        if (c.llama())  // RoPE turns q's and k's heads in place (the kept qkv is the turned one)
            rope_forward(ctx, b.qkv, gpt_rope(ctx, g, T), B, T, (size_t)Q, (c.num_heads + c.kv_heads()) / tp, c.head_dim());
        cp_attention_forward(ctx, g->par.cp, g->par.cp_zigzag, gpt_ring_buffers(g, B, T), b.atty, b.lse, b.qkv, B, T, Ct, NHt, NKVt);
        matmul_forward(lin[PRODUCT_ATTPROJ], part, b.atty, w.attprojw, tp_row_bias(g->par.tp, w.attprojb), BT, Ct, C);
        tp_sum_rows(ctx, g->par.tp, s, part, a.scratch.data(), C, &g->par.tp_scratch);  // → acts.scratch, this rank's rows
        residual_layernorm_forward(ctx, b.res2, b.ln2, b.ln2_mean, b.ln2_rstd, b.x, a.scratch.data(), w.ln2w, w.ln2b, P, C);
    } else {              // selective: res2 was kept
        layernorm_forward(ctx, b.ln2, b.ln2_mean, b.ln2_rstd, b.res2, w.ln2w, w.ln2b, P, C);
    }
    // fch = the activation's input, fch_gelu = its output: GELU(fch), or Llama's SwiGLU over fch's
    // [gate | up]. Selective reruns the activation alone, so it runs apart here too, and SwiGLU
    // always does (the fc product runs whenever `inner` does: selective's rerun is the one run without it)
    const floatX* ln2 = inner ? tp_gather_rows(ctx, g->par.tp, s, b.ln2, a.whole.data(), C) : nullptr;
    if (c.llama()) {
        if (inner) matmul_forward(lin[PRODUCT_FC], b.fch, ln2, w.fcw, w.fcb, BT, C, Fc);
        swiglu_forward(ctx, b.fch_gelu, b.fch, (size_t)BT, (size_t)Hh);
    } else if (g->recompute == Recompute::Selective) {
        if (inner) matmul_forward(lin[PRODUCT_FC], b.fch, ln2, w.fcw, w.fcb, BT, C, Fc);
        gelu_forward(ctx, b.fch_gelu, b.fch, (size_t)BT * Fc);
    } else {
        matmul_forward(lin[PRODUCT_FC], b.fch_gelu, ln2, w.fcw, w.fcb, BT, C, Fc, b.fch);
    }
    if (!rerun) {
        matmul_forward(lin[PRODUCT_FCPROJ], part, b.fch_gelu, w.fcprojw, tp_row_bias(g->par.tp, w.fcprojb), BT, Hh, C);
        tp_sum_rows(ctx, g->par.tp, s, part, a.scratch.data(), C, &g->par.tp_scratch);
    }
    // res3 = res2 + scratch: formed by the next LayerNorm (block l+1's ln1, or lnf)
}

// The backward of a LayerNorm over this rank's rows: dinp += …, and the gradients of its weight
// and bias (dw, db) += sums over the rows. With sequence parallelism the rows are P of the B·T
// positions, so those sums are partial: they are made apart (acts.ln_grad), summed over the tp
// ranks, then added, and every tp rank adds the same gradient to its copy of the LayerNorm.
template <class floatX>
inline void gpt_layernorm_backward(const Ctx& ctx, GPT<floatX>* g, const SeqSplit& s, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                                   const floatX* inp, const floatX* w, const float* mean, const float* rstd) {
    const int C = g->config.channels;
    if (!s.on) { layernorm_backward(ctx, dinp, dw, db, dout, inp, w, mean, rstd, (int)s.P, C); return; }
    floatX* part = g->acts.ln_grad.data();
    const size_t n = (db ? 2 : 1) * (size_t)C;  // (RMSNorm: no bias, db = nullptr)
    ctx_zero(ctx, part, n * sizeof(floatX));
    layernorm_backward(ctx, dinp, part, db ? part + C : nullptr, dout, inp, w, mean, rstd, (int)s.P, C);
    tp_sum(ctx, g->par.tp, part, n, &g->par.tp_scratch);
    add_inplace(ctx, dw, part, C);
    if (db) add_inplace(ctx, db, part + C, C);
}

// Backward of block l. On entry acts.dresidual holds ∂loss/∂(block output); on exit it holds
// ∂loss/∂(block input). Parameter gradients are accumulated into the block's gradient unit.
// With --recompute, the activations the forward did not keep are made again first. With tensor
// parallelism the gradient of each LayerNorm's output comes back from this rank's heads or MLP
// features only: tp_sum_rows adds the ranks' parts (Megatron's f) before the LayerNorm's
// backward. With sequence parallelism dresidual holds this rank's rows: it is gathered before
// each projection's backward, and each LayerNorm output again before the product that read it
// (the forward kept only this rank's rows: Megatron-SP's trade of an all-gather for memory).
template <class floatX> inline void gpt_block_backward(const Ctx& ctx, GPT<floatX>* g, int l, int B, int T) {
    const GPTConfig& c = g->config;
    Activations<floatX>& a = g->acts;
    const int tp = g->layout.tp, C = c.channels, Ct = C / tp, NHt = c.num_heads / tp, NKVt = c.kv_heads() / tp, BT = B * T;
    const int Q = (int)c.qkv_rows() / tp, Fc = (int)c.fc_rows() / tp, Hh = c.ffn() / tp;  // (GPT-2: 3Ct, 4Ct, 4Ct)
    const SeqSplit s = gpt_seq_split(*g, B, T);
    BlockView<floatX> w = block_view(g->layout, g->params[unit_of_block(l)]);
    BlockView<floatX> dw = block_view(g->layout, g->grads[unit_of_block(l)]);
    const std::array<Ctx, NUM_BLOCK_PRODUCTS> lin = linear_ctx(ctx, g, l);  // the products' (FP8 with --precision fp8)
    if (g->recompute != Recompute::None) gpt_block_forward(ctx, g, l, B, T, true);
    BlockActs<floatX> b = block_acts(g, l, B, T);
    floatX *dres = a.dresidual.data(), *whole = a.whole.data();
    // MLP: res3 = res2 + fcproj(act(fc(ln2(res2)))), act = GELU (through which the fcproj
    // product's backward takes dfch at once) or Llama's SwiGLU (its own op, from dhidden)
    const floatX* dmlp = tp_gather_rows(ctx, g->par.tp, s, dres, whole, C);
    if (c.llama()) {
        matmul_backward(lin[PRODUCT_FCPROJ], a.dhidden.data(), dw.fcprojw, dw.fcprojb, dmlp, b.fch_gelu, w.fcprojw, BT, Hh, C);
        swiglu_backward(ctx, a.dfch.data(), b.fch, a.dhidden.data(), (size_t)BT, (size_t)Hh);
    } else {
        matmul_backward(lin[PRODUCT_FCPROJ], a.dfch.data(), dw.fcprojw, dw.fcprojb, dmlp, b.fch_gelu, w.fcprojw, BT, Hh, C, b.fch);
    }
    matmul_backward(lin[PRODUCT_FC], a.dbtc.data(), dw.fcw, dw.fcb, a.dfch.data(), tp_gather_rows(ctx, g->par.tp, s, b.ln2, whole, C), w.fcw,
                    BT, C, Fc);
    floatX* dln2 = tp_sum_rows(ctx, g->par.tp, s, a.dbtc.data(), a.scratch.data(), C, &g->par.tp_scratch);
    gpt_layernorm_backward(ctx, g, s, dres, dw.ln2w, dw.ln2b, dln2, b.res2, w.ln2w, b.ln2_mean, b.ln2_rstd);
    // attention: res2 = x + attproj(attention(qkv(ln1(x)))) (Llama: the attention of the turned
    // rows, whose gradient then goes back through the turn)
    matmul_backward(lin[PRODUCT_ATTPROJ], a.dbtc.data(), dw.attprojw, dw.attprojb, tp_gather_rows(ctx, g->par.tp, s, dres, whole, C), b.atty,
                    w.attprojw, BT, Ct, C);
    cp_attention_backward(ctx, g->par.cp, g->par.cp_zigzag, gpt_ring_buffers(g, B, T), a.dqkv.data(), a.dbtc.data(), b.qkv, b.atty,
                          b.lse, B, T, Ct, NHt, NKVt);
    if (c.llama()) rope_backward(ctx, a.dqkv.data(), gpt_rope(ctx, g, T), B, T, (size_t)Q, (c.num_heads + c.kv_heads()) / tp, c.head_dim());
    matmul_backward(lin[PRODUCT_QKV], a.dbtc.data(), dw.qkvw, dw.qkvb, a.dqkv.data(), tp_gather_rows(ctx, g->par.tp, s, b.ln1, whole, C), w.qkvw,
                    BT, C, Q);
    floatX* dln1 = tp_sum_rows(ctx, g->par.tp, s, a.dbtc.data(), a.scratch.data(), C, &g->par.tp_scratch);
    gpt_layernorm_backward(ctx, g, s, dres, dw.ln1w, dw.ln1b, dln1, b.x, w.ln1w, b.ln1_mean, b.ln1_rstd);
}

// The vocabulary this rank's wte holds, and so the classifier's columns it computes. With tensor
// parallelism both are vocabulary-parallel (tensor_parallel.h): tp rank r holds wte's rows
// [lo, lo + Vp/tp), Vl of them real tokens; it embeds those tokens, computes their logits, its
// part of the softmax (fused_classifier.cuh: stats, gathered, finish), and its rows' gradient.
// Without, one part: all Vp rows and columns, and fused_classifier.
struct Classifier { int parts, lo, Vpl, Vl; };
template <class floatX> inline Classifier classifier_slice(const GPT<floatX>& g) {
    const int parts = g.layout.tp, Vp = g.config.padded_vocab_size, Vpl = Vp / parts, lo = g.layout.tp_rank * Vpl;
    return {parts, lo, Vpl, std::max(0, std::min(Vpl, g.config.vocab_size - lo))};
}

// The classifier's weights (given the units' parameters) or their gradient (given the gradients'):
// this rank's rows of wte where it is tied, else of lm_head, in lnf's unit; and that unit.
template <class floatX> inline int gpt_classifier_unit(const GPT<floatX>& g) { return g.config.tied ? 0 : unit_lnf(g.config); }
template <class floatX> inline floatX* gpt_classifier(const GPT<floatX>& g, const std::vector<floatX*>& units) {
    const ParamLayout& p = g.layout;
    return g.config.tied ? units[0] + p.wte : units[unit_lnf(g.config)] + (p.lm_head - p.lnfw);
}

// wpe's rows at this rank's T positions (context parallelism: copied into acts.cp_wpe, which
// then stands for wpe; without, wpe itself), and for a gradient, the rows copied back.
template <class floatX> inline floatX* gpt_wpe_rows(const Ctx& ctx, GPT<floatX>* g, floatX* wpe, int T) {
    if (g->config.llama()) return nullptr;  // (no position embedding: RoPE)
    if (!g->par.cp) return wpe;
    const size_t C = g->config.channels;
    for (const PosPiece& q : cp_pieces(g->par.cp->size, g->par.cp->rank, g->par.cp_zigzag, T))
        ctx_copy(ctx, g->acts.cp_wpe.data() + q.local * C, wpe + q.global * C, q.n * C * sizeof(floatX));
    return g->acts.cp_wpe.data();
}
template <class floatX> inline void gpt_wpe_rows_back(const Ctx& ctx, GPT<floatX>* g, floatX* wpe, int T) {
    const size_t C = g->config.channels;
    for (const PosPiece& q : cp_pieces(g->par.cp->size, g->par.cp->rank, g->par.cp_zigzag, T))
        ctx_copy(ctx, wpe + q.global * C, g->acts.cp_wpe.data() + q.local * C, q.n * C * sizeof(floatX));
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
    const SeqSplit s = gpt_seq_split(*g, B, T);
    const ParamLayout& p = g->layout;
    const int l0 = p.chunks[g->par.chunk].first, l1 = p.chunks[g->par.chunk].end;  // the running chunk's blocks (all L without pp)
    memcpy(a.tokens_host.data(), tokens, BT * sizeof(int));
    stage_upload(ctx, a.tokens_in, a.tokens.data(), tokens, BT * sizeof(int));
    // The embedding. With tensor parallelism it is vocabulary-parallel: this rank's wte holds the
    // rows [k.lo, k.lo + k.Vpl), it embeds the tokens among them (zero for the others) and tp rank
    // 0 adds wpe, so the embeddings are partial sums, added up like a row-parallel layer's.
    // A later pipeline stage starts from the previous stage's output instead, which pipeline.h
    // has put in acts.encoded.
    const Classifier k = classifier_slice(*g);
    if (p.embeds(g->par.chunk)) {
        floatX* emb = s.on ? a.whole.data() : a.encoded.data();
        acquire(g, 0);
        encoder_forward(ctx, emb, a.tokens.data(), g->params[0] + p.wte, tp_row_bias(g->par.tp, gpt_wpe_rows(ctx, g, g->params[0] + p.wpe, T)),
                        B, T, C, k.lo, k.Vpl);
        tp_sum_rows(ctx, g->par.tp, s, emb, a.encoded.data(), C, &g->par.tp_scratch);  // → acts.encoded, this rank's rows
        release(g, 0);
    }
    for (int l = l0; l < l1; l++) {
        acquire(g, unit_of_block(l));
        gpt_block_forward(ctx, g, l, B, T);
        release(g, unit_of_block(l));
    }
    floatX* last = gpt_stage_output(g, B, T);  // the last block's output
    a.loss_count = 0;
    if (!p.heads(g->par.chunk)) {  // a chunk before the model's last: its output, for the next virtual stage (pipeline.h)
        residual_forward(ctx, last, block_acts(g, l1 - 1, B, T).res2, a.scratch.data(), s.P * C);
        return;
    }
    acquire(g, unit_lnf(c));  // (the last block's output is formed here, with lnf)
    floatX* lnf = g->params[unit_lnf(c)];
    const bool ln = !c.llama();  // (Llama: RMSNorm, no mean, no bias)
    residual_layernorm_forward(ctx, last, a.lnf.data(), ln ? a.lnf_mean.data() : nullptr, a.lnf_rstd.data(),
                               block_acts(g, l1 - 1, B, T).res2, a.scratch.data(), lnf, ln ? lnf + C : nullptr, (int)s.P, C);
    const int cu = gpt_classifier_unit(*g);  // the tied embedding (this rank's rows of wte), or lm_head in lnf's unit
    if (cu != unit_lnf(c)) { release(g, unit_lnf(c)); acquire(g, cu); }
    matmul_forward(ctx, a.logits.data(), tp_gather_rows(ctx, g->par.tp, s, a.lnf.data(), a.whole.data(), C), gpt_classifier(*g, g->params),
                   nullptr, BT, C, k.Vpl);  // (its columns of the logits)
    release(g, cu);
    a.loss_count = targets ? BT : 0;
    if (!targets) return;
    for (int i = 0; i < BT; i++)
        if (targets[i] < 0 || targets[i] >= c.vocab_size)
            fatal("target token %d at position %d is outside the model's vocabulary (V=%d)", targets[i], i, c.vocab_size);
    stage_upload(ctx, a.targets_in, a.targets.data(), targets, BT * sizeof(int));
    if (k.parts == 1) {
        fused_classifier(ctx, a.logits.data(), a.losses.data(), a.targets.data(), BT, c.vocab_size, c.padded_vocab_size, dloss);
    } else {  // each rank its columns' stats, gathered, then each its losses (all the same) and its columns' gradient
        float* stats = a.cls_stats.data();
        classifier_stats(ctx, a.logits.data(), stats + (size_t)g->par.tp->rank * BT * 3, a.targets.data(), BT, k.Vl, k.Vpl, k.lo);
        { CommScope prof(ctx, *g->par.tp, "tp all-gather"); comm_all_gather(*g->par.tp, stats, (size_t)k.parts * BT * 3); }
        classifier_finish(ctx, a.logits.data(), a.losses.data(), stats, k.parts, a.targets.data(), BT, k.Vl, k.Vpl, k.lo, dloss);
    }
    stage_download(ctx, a.losses_out, a.losses.data(), BT * sizeof(float));
}

// The per-position losses of the last gpt_forward (which must have had targets), on the host:
// B·T floats, row-major. Waits for the loss copy alone, not for what was queued after it.
template <class floatX> inline const float* gpt_losses(GPT<floatX>* g) {
    CHECK(g->acts.loss_count > 0, "gpt_losses: the last gpt_forward had no targets");
    return (const float*)stage_wait(g->acts.losses_out);
}

// Row `row` of the last gpt_forward's logits, all Vp of them, into out (host memory, fp32). With
// a vocabulary-parallel classifier each tp rank holds Vp/tp of them: gathered (collective over tp).
template <class floatX> inline void gpt_logits_row(const Ctx& ctx, GPT<floatX>* g, int row, float* out) {
    const int Vp = g->config.padded_vocab_size;
    const Classifier k = classifier_slice(*g);
    std::vector<floatX> host(Vp);  // (gathered in host memory: through MPI, which every mesh has)
    ctx_copy(ctx, host.data() + k.lo, g->acts.logits.data() + (size_t)row * k.Vpl, k.Vpl * sizeof(floatX));
    if (k.parts > 1) comm_all_gather(*g->par.tp, host.data(), (size_t)Vp);
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
    const SeqSplit s = gpt_seq_split(*g, B, T);
    const ParamLayout& p = g->layout;
    const int l0 = p.chunks[g->par.chunk].first, l1 = p.chunks[g->par.chunk].end;  // the running chunk's blocks (all L without pp)
    if (p.heads(g->par.chunk)) {
        floatX* last = gpt_stage_output(g, B, T);
        const Classifier k = classifier_slice(*g);
        // lnf's output at every position (with sequence parallelism gathered again: the forward's
        // gathered copy is not assumed to have survived)
        const floatX* lnf_out = tp_gather_rows(ctx, g->par.tp, s, a.lnf.data(), a.whole.data(), C);
        const int cu = gpt_classifier_unit(*g);  // the tied embedding: its gradient goes to this rank's rows of wte (or lm_head)
        acquire(g, cu);
        matmul_backward(ctx, a.dbtc.data(), gpt_classifier(*g, g->grads), nullptr, a.logits.data(), lnf_out, gpt_classifier(*g, g->params),
                        BT, C, k.Vpl);
        if (cu != unit_lnf(c)) { release(g, cu); acquire(g, unit_lnf(c)); }
        // ∂loss/∂(lnf's output), this rank's rows: with tensor parallelism a sum over the ranks' columns
        floatX* dx = tp_sum_rows(ctx, g->par.tp, s, a.dbtc.data(), a.scratch.data(), C, &g->par.tp_scratch);
        ctx_zero(ctx, a.dresidual.data(), s.P * C * sizeof(floatX));
        floatX *lnf = g->params[unit_lnf(c)], *dlnf = g->grads[unit_lnf(c)];
        const bool ln = !c.llama();  // (Llama: RMSNorm, no mean, no bias)
        gpt_layernorm_backward(ctx, g, s, a.dresidual.data(), dlnf, ln ? dlnf + C : nullptr, dx, last, lnf,
                               ln ? a.lnf_mean.data() : nullptr, a.lnf_rstd.data());
        release(g, unit_lnf(c));
        grads_ready(g, unit_lnf(c));
    }  // (else acts.dresidual holds ∂loss/∂(this pipeline stage's output), which pipeline.h put there)
    for (int l = l1 - 1; l >= l0; l--) {
        acquire(g, unit_of_block(l));
        gpt_block_backward(ctx, g, l, B, T);
        release(g, unit_of_block(l));
        grads_ready(g, unit_of_block(l));
    }
    if (p.embeds(g->par.chunk)) {
        // the encoder's backward reads no parameters: no acquire. It runs on every position's
        // gradient (with sequence parallelism gathered): each tp rank adds to its rows of wte the
        // positions of their tokens, and every rank's wpe gradient is the whole one, the same bits.
        const Classifier k = classifier_slice(*g);
        floatX* dwpe = gpt_wpe_rows(ctx, g, g->grads[0] + p.wpe, T);  // (with cp: this rank's positions' rows, copied)
        encoder_backward(ctx, g->grads[0] + p.wte, dwpe, tp_gather_rows(ctx, g->par.tp, s, a.dresidual.data(), a.whole.data(), C),
                         a.tokens_host.data(), B, T, C, (size_t)k.Vpl, k.lo);
        if (g->par.cp && dwpe) gpt_wpe_rows_back(ctx, g, g->grads[0] + p.wpe, T);
    }  // (else acts.dresidual now holds ∂loss/∂(this stage's input), for the previous stage)
    if (p.embeds(g->par.chunk) || (p.heads(g->par.chunk) && c.tied)) grads_ready(g, 0);
}
