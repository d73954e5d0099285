/*
params.h — where the parameters live: one rank's flat buffer, llm.c's model file, their init.

The flat buffer is layer-major, in units that ZeRO and the pipeline move and own one at a time:

  unit 0: wte, wpe  |  unit 1 + l: block l's 12 tensors  |  unit L + 1: lnf (and lm_head)

A tp rank holds its slice of each block and Vp/tp rows of wte (tensor_parallel.h); a pipeline
stage holds its blocks only (pipeline.h). ParamLayout says where each tensor is for one rank.

Main functions: make_layout, block_view, unit_span, unit_file_pieces (where a unit lies in llm.c's
tensor-major file), unit_norm_spans, gpt_init_unit.
Tests: test/test_ops.cpp (layouts, file pieces, the tp init split), test/test_tp.sh, test/test_pp.sh.
More: docs/model.md (the layout), docs/parallelism.md (who holds what).
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>
#include "common.h"
#include "rand.h"
#include "gpt_config.h"
#include "tensor_parallel.h"

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
    RankWidths widths;                     // a block's widths and the vocabulary rows on this tp rank
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
    p.widths = rank_widths(c, tp);
    return p;
}

// The part of the model one forward runs: its blocks, whether it starts from the tokens (the
// embedding) and whether it ends with the head (lnf and the classifier). The whole model
// without pipeline parallelism; a stage's blocks, or chunk k of them, with it (pipeline.h).
struct ModelPart { LayerRange blocks; bool embeds, heads; int index; };  // (index: the chunk)
inline ModelPart layout_part(const ParamLayout& p, int k) { return {p.chunks[k], p.embeds(k), p.heads(k), k}; }

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
// initial values

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
