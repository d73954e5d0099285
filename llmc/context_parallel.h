/*
context_parallel.h — context parallelism (--cp, --cp-layout): each sequence's positions split
over the c ranks of the cp group, and ring attention (Liu et al., 2023), so that each rank's
queries still see every key before them.

Only attention mixes positions, so a rank runs the whole model on its T/c positions. Its keys
and values go around the ring c − 1 times; at step s rank r holds rank (r − s mod c)'s and merges
its attention over them:

  out = Σ_blocks exp(lse_blk − lse) · out_blk

contiguous: rank r holds [r·T/c, (r+1)·T/c). zigzag: 2c chunks, rank r holds chunks r and
2c−1−r, so every rank does the same causal work. The backward passes k, v around again and
sends each block's dk, dv home. Its sums are fp32 and in ring order: the same bits every run.

Main functions: cp_pieces, cp_take_positions, cp_take_padded (which positions), cp_block (which
pairs of a block see each other), ring_attention_forward, ring_attention_backward.

Tests: test/test_ops.cpp (the ring's blocks against one attention), test/gpucheck_ops.cu (the
block kernels), test/test_cp.sh (cp = 2 and 4, both layouts, with dp, tp, sp and pp, against
one process). More: docs/parallelism.md.
*/
#pragma once
#include <algorithm>
#include <vector>
#include "common.h"
#include "comm.h"
#include "attention.cuh"

// A model's context-parallel state (model.h's ModelParallel holds one).
struct ContextParallel {
    Group* group = nullptr;  // the cp group (nullptr: whole sequences)
    bool zigzag = false;     // which positions a rank holds: --cp-layout zigzag, else contiguous
    int infer_T = 0;         // the sequence length of the last gpt_infer, before padding (inference.h)
    int size() const { return group ? group->size : 1; }
    int rank() const { return group ? group->rank : 0; }
};

// A stretch of a rank's positions: local [local, local + n) are the sequence's [global, global + n).
struct PosPiece { int local, global, n; };
// The positions rank r of c holds of a sequence of c·Tl (zigzag needs Tl even).
inline std::vector<PosPiece> cp_pieces(int c, int r, bool zigzag, int Tl) {
    if (!zigzag) return {{0, r * Tl, Tl}};
    const int h = Tl / 2;
    return {{0, r * h, h}, {h, (2 * c - 1 - r) * h, h}};
}
// The positions of a sequence that c ranks split evenly: T must be a multiple of this.
inline int cp_granule(int c, bool zigzag) { return zigzag ? 2 * c : c; }

// Where this rank's Tl positions are in the sequence (RoPE's angles turn them by it): 0 … Tl − 1
// without context parallelism.
inline std::vector<int> cp_positions(const ContextParallel& cp, int Tl) {
    std::vector<int> pos(Tl);
    for (int t = 0; t < Tl; t++) pos[t] = t;
    if (cp.size() > 1)
        for (const PosPiece& q : cp_pieces(cp.size(), cp.rank(), cp.zigzag, Tl))
            for (int i = 0; i < q.n; i++) pos[q.local + i] = q.global + i;
    return pos;
}

// local (B × Tl) = this rank's positions of full (B × T), for tokens and targets.
inline void cp_take_positions(const int* full, int B, int T, const std::vector<PosPiece>& pieces, int* local) {
    int Tl = 0;
    for (const PosPiece& p : pieces) Tl += p.n;
    for (int b = 0; b < B; b++)
        for (const PosPiece& p : pieces)
            for (int i = 0; i < p.n; i++) local[(size_t)b * Tl + p.local + i] = full[(size_t)b * T + p.global + i];
}

// The length a sequence of T pads to so that the cp ranks split it (sampling's T is any length).
inline int cp_padded(const ContextParallel& cp, int T) {
    const int unit = cp_granule(cp.size(), cp.zigzag);
    return (int)ceil_div(T, unit) * unit;
}
// This rank's positions (B × Tp/c) of B sequences of T tokens, each padded with 0 at its end to
// Tp = cp_padded(cp, T): after every real position, so causal attention keeps the padding apart.
inline std::vector<int> cp_take_padded(const ContextParallel& cp, const int* full, int B, int T) {
    const int Tp = cp_padded(cp, T), Tl = Tp / cp.size();
    std::vector<int> pad((size_t)B * Tp, 0), local((size_t)B * Tl);
    for (int b = 0; b < B; b++) std::copy_n(full + (size_t)b * T, T, pad.begin() + (size_t)b * Tp);
    cp_take_positions(pad.data(), B, Tp, cp_pieces(cp.size(), cp.rank(), cp.zigzag, Tl), local.data());
    return local;
}

// Which of rank r's queries see which of rank o's keys (o ≠ r), both holding Tl positions: rows
// [q0, q0 + nq) of r's queries, [k0, k0 + nk) of o's keys, all visible (nq = 0: none).
struct CPBlock { int q0, nq, k0, nk; };
inline CPBlock cp_block(bool zigzag, int r, int o, int Tl) {
    if (!zigzag) return o < r ? CPBlock{0, Tl, 0, Tl} : CPBlock{0, 0, 0, 0};
    const int h = Tl / 2;
    return o < r ? CPBlock{0, Tl, 0, h}   // o's first chunk is before both of r's; its second after both
                 : CPBlock{h, h, 0, Tl};  // r's second chunk is after both of o's; r's first before both
}

// The ring's buffers in a micro-batch's activations (model.h's Activations holds them), for N
// positions with qkv rows of Q features (Ct of them q) and NHt query heads: k, v to lend and the
// ones borrowed; the fp32 running output (N·Ct) or gradient (N·Q); three dk, dv blocks (two going
// home in turn, one coming home); D; and wpe's rows at this rank's positions (wpe_n elements).
template <class floatX> struct RingActs {
    Buf<floatX> kv, wpe;
    Buf<float> acc, dkv, D;
};
template <class floatX, class F>
inline void ring_buffers(RingActs<floatX>& a, const ContextParallel& cp, size_t N, size_t Q, size_t Ct, size_t NHt, size_t wpe_n, F&& f) {
    if (cp.size() == 1) return;
    f(a.kv, 2 * N * (Q - Ct)); f(a.acc, N * Q); f(a.dkv, 3 * N * (Q - Ct)); f(a.D, N * NHt);  // (Q − Ct: k and v)
    f(a.wpe, wpe_n);
}

// What ring attention needs for one forward: the group, the layout, and pointers into RingActs.
// (KV = NKV·hs: the key/value heads' width; C with NKV = NH.)
template <class floatX> struct Ring {
    Group* group;  // nullptr or one rank: plain attention
    bool zigzag;
    floatX* kv[2];
    float* acc;
    float* dkv[3];
    float* D;
};
// kv_n: the elements of one block of k and v (N·2·KV).
template <class floatX> inline Ring<floatX> ring_of(const ContextParallel& cp, RingActs<floatX>& a, size_t kv_n) {
    return {cp.size() > 1 ? cp.group : nullptr, cp.zigzag, {a.kv.data(), a.kv.data() + kv_n}, a.acc.data(),
            {a.dkv.data(), a.dkv.data() + kv_n, a.dkv.data() + 2 * kv_n}, a.D.data()};
}

// wpe's rows at this rank's T positions: with context parallelism copied into a.wpe, which then
// stands for wpe; without, wpe itself. For a gradient, wpe_rows_back copies the rows back.
template <class floatX>
inline floatX* wpe_rows(const Ctx& ctx, const ContextParallel& cp, RingActs<floatX>& a, floatX* wpe, int T, size_t C) {
    if (cp.size() == 1) return wpe;
    for (const PosPiece& q : cp_pieces(cp.size(), cp.rank(), cp.zigzag, T))
        ctx_copy(ctx, a.wpe.data() + q.local * C, wpe + q.global * C, q.n * C * sizeof(floatX));
    return a.wpe.data();
}
template <class floatX>
inline void wpe_rows_back(const Ctx& ctx, const ContextParallel& cp, RingActs<floatX>& a, floatX* wpe, int T, size_t C) {
    if (cp.size() == 1) return;
    for (const PosPiece& q : cp_pieces(cp.size(), cp.rank(), cp.zigzag, T))
        ctx_copy(ctx, wpe + q.global * C, a.wpe.data() + q.local * C, q.n * C * sizeof(floatX));
}

// The ring's k, v exchanges: start(s) begins moving the block rank r holds at step s − 1 (its own
// at s = 1) to rank r + 1 while rank r − 1's arrives, in buffer s % 2 (the other buffer is the one
// being sent: its block's attention has run). Started on NCCL's communication stream, so the
// block in hand computes meanwhile; with MPI done at once.
template <class floatX> struct KVRing {
    Group& cp;
    const Ring<floatX>& rb;
    size_t n;  // elements of a block
    CommHandle h;
    void start(const Ctx& ctx, int s) {
        const int c = cp.size, r = cp.rank;
        CommScope prof(ctx, cp, "cp ring send k, v");
        comm_sendrecv_start(cp, rb.kv[(s - 1) % 2], n, (r + 1) % c, rb.kv[s % 2], (r - 1 + c) % c, &h);
    }
    const floatX* wait(const Ctx& ctx, int s) {  // rank r − s's k, v
        CommScope prof(ctx, cp, "cp ring wait (exposed)");
        comm_wait(&h);
        return rb.kv[s % 2];
    }
};

// Attention over the whole sequence of this rank's queries (qkv: B × Tl × (C + 2·KV), this rank's
// positions, NH query and NKV key/value heads; out, lse as attention.cuh's). Without a cp group
// in rb: plain attention.
template <class floatX>
inline void ring_attention_forward(const Ctx& ctx, const Ring<floatX>& rb, floatX* out, float* lse, const floatX* qkv, int B, int Tl, int C,
                                   int NH, int NKV) {
    if (!rb.group) { attention_forward(ctx, out, lse, qkv, B, Tl, C, NH, NKV); return; }
    Group* cp = rb.group;
    const bool zigzag = rb.zigzag;
    const int c = cp->size, r = cp->rank;
    const QKVLayout L = qkv_layout(C, NH, NKV);
    const size_t N = (size_t)B * Tl, KV2 = 2 * (size_t)L.kv();  // a position's k and v
    KVRing<floatX> ring{*cp, rb, N * KV2, {}};
    copy_rows(ctx, rb.kv[0], KV2, qkv + C, L.row(), KV2, N);  // this rank's k, v, to lend
    ring.start(ctx, 1);
    attention_forward(ctx, out, lse, qkv, B, Tl, C, NH, NKV);  // the local keys: causal in local order (header)
    copy_rows(ctx, rb.acc, C, out, C, C, N);                   // the running output, in fp32
    for (int s = 1; s < c; s++) {
        const floatX* kv = ring.wait(ctx, s);
        if (s + 1 < c) ring.start(ctx, s + 1);
        const CPBlock k = cp_block(zigzag, r, (r - s + c) % c, Tl);
        attention_block_forward(ctx, rb.acc, lse, qkv, kv, B, Tl, Tl, C, NH, NKV, k.q0, k.nq, k.k0, k.nk);
    }
    copy_rows(ctx, out, C, rb.acc, C, C, N);
}

// Its backward: dqkv (written, like attention_backward's) from dout and the forward's out and lse.
// Each borrowed block's dk, dv go home while the next block computes (NCCL; with MPI at once):
// the exchange of step s is waited for, and its share added, at step s + 1.
template <class floatX>
inline void ring_attention_backward(const Ctx& ctx, const Ring<floatX>& rb, floatX* dqkv, const floatX* dout, const floatX* qkv,
                                    const floatX* out, const float* lse, int B, int Tl, int C, int NH, int NKV) {
    if (!rb.group) { attention_backward(ctx, dqkv, dout, qkv, out, lse, B, Tl, C, NH, NKV); return; }
    Group* cp = rb.group;
    const bool zigzag = rb.zigzag;
    const int c = cp->size, r = cp->rank;
    const QKVLayout L = qkv_layout(C, NH, NKV);
    const size_t N = (size_t)B * Tl, KV2 = 2 * (size_t)L.kv(), W = L.row();
    KVRing<floatX> ring{*cp, rb, N * KV2, {}};
    copy_rows(ctx, rb.kv[0], KV2, qkv + C, W, KV2, N);
    ring.start(ctx, 1);
    attention_backward(ctx, dqkv, dout, qkv, out, lse, B, Tl, C, NH, NKV);  // the local keys' share
    copy_rows(ctx, rb.acc, W, dqkv, W, W, N);                               // dq, dk, dv summed in fp32
    attention_row_dots(ctx, rb.D, dout, out, B, Tl, C, NH);
    CommHandle home;
    auto arrived = [&] {  // the last exchange's share of my keys' dk, dv (from rank r + s)
        { CommScope prof(ctx, *cp, "cp ring wait (exposed)"); comm_wait(&home); }
        copy_rows(ctx, rb.acc + C, W, rb.dkv[2], KV2, KV2, N, true);
    };
    for (int s = 1; s < c; s++) {
        const int o = (r - s + c) % c;
        const floatX* kv = ring.wait(ctx, s);
        if (s + 1 < c) ring.start(ctx, s + 1);
        const CPBlock k = cp_block(zigzag, r, o, Tl);
        float* dkv = rb.dkv[s % 2];  // (the other one may still be on its way home)
        ctx_zero(ctx, dkv, N * KV2 * sizeof(float));
        attention_block_backward(ctx, rb.acc, dkv, dout, qkv, kv, lse, rb.D, B, Tl, Tl, C, NH, NKV, k.q0, k.nq, k.k0, k.nk);
        if (s > 1) arrived();
        CommScope prof(ctx, *cp, "cp ring send dk, dv home");
        comm_sendrecv_start(*cp, dkv, N * KV2, o, rb.dkv[2], (r + s) % c, &home);
    }
    arrived();
    copy_rows(ctx, dqkv, W, rb.acc, W, W, N);
}
