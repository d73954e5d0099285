/*
encoder.cuh — token and position embedding.

  forward:  out[b,t,:] = wte[tok[b,t], :] + wpe[t, :]
  backward: dwte[tok[b,t], :] += dout[b,t,:],   dwpe[t, :] += dout[b,t,:]

The CUDA backward is deterministic without atomics: the host groups the positions by token and
cuts each token's run into segments of 32; a thread sums a segment in order, and a token's
segments are summed in order. So the backward takes the tokens in host memory. With tensor
parallelism a rank embeds only the tokens among its rows of wte; the ranks' outputs sum to the
whole, bit for bit.

Main functions: encoder_forward, encoder_backward.

Tests: test/test_ops.cpp (finite differences; the vocabulary split against the whole),
test/gpucheck_ops.cu (CUDA against the CPU). More: docs/kernels.md.
*/
#pragma once
#include <algorithm>
#include <climits>
#include "common.h"
#include "profiler.h"

// wte: rows [lo, lo + rows) of the vocabulary (all of it: lo = 0); wpe: nullptr adds none
template <class floatX>
inline void encoder_forward_cpu(floatX* out, const int* tok, const floatX* wte, const floatX* wpe, int B, int T, int C, int lo, int rows) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            floatX* o = out + ((size_t)b * T + t) * C;
            const int v = tok[b * T + t] - lo;
            const floatX* te = v >= 0 && v < rows ? wte + (size_t)v * C : nullptr;
            const floatX* pe = wpe ? wpe + (size_t)t * C : nullptr;
            for (int c = 0; c < C; c++) o[c] = from_f<floatX>((te ? to_f(te[c]) : 0.0f) + (pe ? to_f(pe[c]) : 0.0f));
        }
}

// (fp32; the dtype wrapper below gives it fp32 views of bf16 buffers) dwte: rows [lo, lo + rows)
inline void encoder_backward_cpu(float* dwte, float* dwpe, const float* dout, const int* tok,
                                 int B, int T, int C, int lo, int rows) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            const int v = tok[b * T + t] - lo;
            if (dwpe) {
                float* dpe = dwpe + (size_t)t * C;
                for (int c = 0; c < C; c++) dpe[c] += d[c];
            }
            if (v < 0 || v >= rows) continue;
            float* dte = dwte + (size_t)v * C;
            for (int c = 0; c < C; c++) dte[c] += d[c];
        }
}

#ifdef LLMC_CUDA
// one thread per V consecutive channels of a (b, t) row: V = 16 bytes where C and the pointers allow
// (vocabulary-parallel: wte holds rows [lo, lo + rows), and wpe may be nullptr; see the header)
template <class floatX, int V>
__global__ void encoder_forward_kernel(floatX* out, const int* tok, const floatX* wte, const floatX* wpe, int B, int T, int C, int lo, int rows) {
    const size_t n = (size_t)B * T * C / V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t bt = i / (C / V);
        const int c = (int)(i % (C / V)) * V, t = (int)(bt % T), v = tok[bt] - lo;
        Pack<floatX, V> e = {}, p = {}, o;
        if (v >= 0 && v < rows) e = load_pack<V>(wte + (size_t)v * C + c);
        if (wpe) p = load_pack<V>(wpe + (size_t)t * C + c);
        for (int k = 0; k < V; k++) o.v[k] = from_f<floatX>(to_f(e.v[k]) + to_f(p.v[k]));
        store_pack<V>(out + bt * C + c, o);
    }
}
// dwte, deterministic and without atomics, in two stages over the positions grouped by token
// (on the host). A token's positions are cut into segments of at most ENC_SEGMENT, in order, so
// no thread sums thousands of rows one after another (",", " the" and " and" are each ~5% of
// the tokens of English text: 6,500 positions in a 124M step of B·T = 131,072).
// Stage 1, one thread per (segment, V channels): the segment's sum, in position order; a token
// of one segment adds it to dwte at once (slot < 0), else it goes to partial[slot].
// Stage 2, one thread per (token of several segments, channel): its partials in order, into dwte.
constexpr int ENC_SEGMENT = 32;
template <class floatX, int V>
__global__ void encoder_backward_segments_kernel(floatX* dwte, float* partial, const floatX* dout, const int* seg_row, const int* seg_slot,
                                                 const int* seg_start, const int* pos, int C) {
    const int s = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c >= C) return;
    float sum[V] = {};
    for (int k = seg_start[s]; k < seg_start[s + 1]; k++) {
        const Pack<floatX, V> d = load_pack<V>(dout + (size_t)pos[k] * C + c);
        for (int j = 0; j < V; j++) sum[j] += to_f(d.v[j]);
    }
    if (seg_slot[s] < 0) {
        floatX* w = dwte + (size_t)seg_row[s] * C + c;
        Pack<floatX, V> x = load_pack<V>(w);
        for (int j = 0; j < V; j++) x.v[j] = from_f<floatX>(to_f(x.v[j]) + sum[j]);
        store_pack<V>(w, x);
    } else {
        for (int j = 0; j < V; j++) partial[(size_t)seg_slot[s] * C + c + j] = sum[j];
    }
}
template <class floatX>
__global__ void encoder_backward_partials_kernel(floatX* dwte, const float* partial, const int* multi_row, const int* multi_begin, int C) {
    const int m = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = multi_begin[m]; k < multi_begin[m + 1]; k++) s += partial[(size_t)k * C + c];
    floatX* d = dwte + (size_t)multi_row[m] * C + c;
    *d = from_f<floatX>(to_f(*d) + s);
}
template <class floatX>
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    int t = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += to_f(dout[((size_t)b * T + t) * C + c]);
    floatX* d = dwpe + (size_t)t * C + c;
    *d = from_f<floatX>(to_f(*d) + s);
}

template <class floatX>
inline void encoder_backward_cuda(const Ctx& ctx, floatX* dwte, floatX* dwpe, const floatX* dout, const int* tok_host, int B, int T, int C,
                                  int lo, int rows) {
    // group the positions of this wte's tokens by token on the host (stable: each token's in
    // position order), cut each token's run into segments of at most ENC_SEGMENT positions
    const int BT = B * T;
    std::vector<int> order;
    for (int i = 0; i < BT; i++)
        if (tok_host[i] >= lo && tok_host[i] - lo < rows) order.push_back(i);
    const int n = (int)order.size();  // positions whose rows are here (all B·T unless vocabulary-parallel)
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tok_host[a] < tok_host[b]; });
    std::vector<int> seg_row, seg_slot, seg_start, multi_row, multi_begin{0};
    int slot = 0;  // partial sums handed out so far
    for (int i = 0; i < n;) {
        int end = i;
        while (end < n && tok_host[order[end]] == tok_host[order[i]]) end++;
        const int row = tok_host[order[i]] - lo, nseg = (int)ceil_div(end - i, ENC_SEGMENT);
        for (int k = i; k < end; k += ENC_SEGMENT) {
            seg_row.push_back(row);
            seg_slot.push_back(nseg > 1 ? slot++ : -1);
            seg_start.push_back(k);
        }
        if (nseg > 1) { multi_row.push_back(row); multi_begin.push_back(slot); }
        i = end;
    }
    seg_start.push_back(n);
    const int nseg = (int)seg_row.size(), M = (int)multi_row.size();
    // one upload: [seg_row | seg_slot | seg_start | pos | multi_row | multi_begin], without waiting
    // for the GPU (memory.h's PinnedCopy). The buffers are sized for the most any step can need, so
    // one that a queued kernel may still read is never reallocated: nseg ≤ BT, and a token of
    // n > ENC_SEGMENT positions takes ceil(n / ENC_SEGMENT) < 2n / ENC_SEGMENT slots (so M < BT / ENC_SEGMENT).
    std::vector<int> idx;
    for (const std::vector<int>* v : {&seg_row, &seg_slot, &seg_start, &order, &multi_row, &multi_begin})
        idx.insert(idx.end(), v->begin(), v->end());
    static Buf<int> dev_idx;
    static Buf<float> partial_buf;
    static PinnedCopy pinned;
    int* d = gpu_scratch(dev_idx, ctx, 4 * (size_t)BT + 2 + 2 * (size_t)BT / ENC_SEGMENT);  // 3·nseg + 1 + n + 2M + 1
    float* partial = gpu_scratch(partial_buf, ctx, std::max<size_t>(1, (size_t)2 * BT / ENC_SEGMENT) * C);
    pinned_upload(ctx, pinned, d, idx.data(), idx.size() * sizeof(int));
    const int* d_row = d; const int* d_slot = d + nseg; const int* d_start = d + 2 * nseg;
    const int* d_pos = d_start + nseg + 1; const int* d_mrow = d_pos + n; const int* d_mbegin = d_mrow + M;
    constexpr int P = PACK<floatX>;
    if (nseg == 0) {
        // no token of this rank's rows: dwte gets nothing
    } else if (pack_width<floatX>(C, {dwte, dout}) > 1) {
        dim3 grid(nseg, ceil_div(C, 128 * P));
        encoder_backward_segments_kernel<floatX, P><<<grid, 128, 0, ctx.stream>>>(dwte, partial, dout, d_row, d_slot, d_start, d_pos, C);
    } else {
        dim3 grid(nseg, ceil_div(C, 128));
        encoder_backward_segments_kernel<floatX, 1><<<grid, 128, 0, ctx.stream>>>(dwte, partial, dout, d_row, d_slot, d_start, d_pos, C);
    }
    if (M > 0) {
        dim3 grid_m(M, ceil_div(C, 128));
        encoder_backward_partials_kernel<<<grid_m, 128, 0, ctx.stream>>>(dwte, partial, d_mrow, d_mbegin, C);
    }
    if (dwpe) {
        dim3 grid_wpe(ceil_div(C, 128), T);
        encoder_backward_wpe_kernel<<<grid_wpe, 128, 0, ctx.stream>>>(dwpe, dout, B, T, C);
    }
    CUDA_LAUNCH_CHECK();
}
#endif

// wte: the vocabulary's rows [lo, lo + rows) (default: all of it); wpe: nullptr adds none.
template <class floatX>
inline void encoder_forward(const Ctx& ctx, floatX* out, const int* tok, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            int lo = 0, int rows = INT_MAX) {
    // bytes: the B·T rows of wte, T rows of wpe, the tokens; the output
    OpScope prof(ctx, 0, (2.0 * B * T + T) * C * sizeof(floatX) + 4.0 * B * T, "encoder forward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<floatX>;  // (the launch rewriting for the emulator wants no nested <>)
        if (pack_width<floatX>(C, {out, wte, wpe ? wpe : wte}) > 1)
            encoder_forward_kernel<floatX, P><<<grid_for((size_t)B * T * C / P), 256, 0, ctx.stream>>>(out, tok, wte, wpe, B, T, C, lo, rows);
        else
            encoder_forward_kernel<floatX, 1><<<grid_for((size_t)B * T * C), 256, 0, ctx.stream>>>(out, tok, wte, wpe, B, T, C, lo, rows);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    encoder_forward_cpu(out, tok, wte, wpe, B, T, C, lo, rows);
}
// tok_host: the tokens in host memory. dwte: V rows, the vocabulary's [lo, lo + V). dwpe: nullptr for none.
template <class floatX>
inline void encoder_backward(const Ctx& ctx, floatX* dwte, floatX* dwpe, const floatX* dout, const int* tok_host, int B, int T, int C,
                             size_t V, int lo = 0) {
    // bytes: dout; the touched rows of dwte (≤ B·T) and dwpe read and written
    OpScope prof(ctx, 0, (3.0 * B * T + 2.0 * T) * C * sizeof(floatX), "encoder backward");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { encoder_backward_cuda(ctx, dwte, dwpe, dout, tok_host, B, T, C, lo, (int)V); return; }
#endif
    F32View<floatX> te(dwte, V * C), pe(dwpe, dwpe ? (size_t)T * C : 0), d(dout, (size_t)B * T * C);
    encoder_backward_cpu(te.p, pe.p, d.p, tok_host, B, T, C, lo, (int)V);
    te.store(); pe.store();
}
