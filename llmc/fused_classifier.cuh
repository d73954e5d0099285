/*
fused_classifier.cuh — softmax, cross-entropy and its gradient, in one pass over the logits.

  p = softmax(logits[:V]),   loss[n] = −log p[target[n]]
  dlogits[v] = dloss · (p[v] − [v == target]) for v < V, 0 for the padding   (over the logits)

The gradient overwrites the logits, so the largest activation exists once. CUDA: a block a row,
two passes in 16-byte packs (an online softmax, then the gradient), fixed-tree reductions.
--classifier-staged copies the row into shared memory first (2: while the block computes the
row before; auto: each timed, kept if faster and of the same bits). With tensor parallelism a
rank holds some columns: classifier_stats gives 3 floats a row, the ranks gather them,
classifier_finish completes the softmax. With --classifier-stats epilogue the LM head's product
gives each row's max and Σ exp per 128 columns, and classifier_from_parts reads the row once.

Main functions: fused_classifier (the op), classifier_stats and classifier_finish
(vocabulary-parallel), classifier_from_parts (the part stats).

Tests: test/test_ops.cpp (finite differences; the vocabulary-parallel pair against the one-pass
op), test/gpucheck_ops.cu (CUDA against the CPU), test/test_gpu_train.sh (--classifier-staged).
More: docs/kernels.md.
*/
#pragma once
#include <cmath>
#include "common.h"
#include "profiler.h"
#include "autotune.cuh"

// The two passes over a row, which the one-pass op and the vocabulary-parallel pair share:
// the max m of its first V elements and Σ exp(x − m) (in double), and the gradient written in
// place, dloss · (exp(x − m − log S) − [v == tgt]), 0 for the padding up to Vp.
template <class floatX> inline void classifier_row_max_sum_cpu(const floatX* row, int V, float* m, double* sum) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = to_f(row[v]) > mx ? to_f(row[v]) : mx;
    double s = 0.0;
    for (int v = 0; v < V; v++) s += expf(to_f(row[v]) - mx);
    *m = mx; *sum = s;
}
template <class floatX> inline void classifier_row_grad_cpu(floatX* row, int V, int Vp, float m, float log_sum, int tgt, float dloss) {
    for (int v = 0; v < V; v++) row[v] = from_f<floatX>(dloss * (expf(to_f(row[v]) - m - log_sum) - (v == tgt ? 1.0f : 0.0f)));
    for (int v = V; v < Vp; v++) row[v] = from_f<floatX>(0.0f);
}

template <class floatX>
inline void fused_classifier_cpu(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        floatX* row = logits + (size_t)n * Vp;
        float m;
        double sum;
        classifier_row_max_sum_cpu(row, V, &m, &sum);
        const float log_sum = (float)log(sum);
        const int tgt = targets[n];
        losses[n] = -(to_f(row[tgt]) - m - log_sum);
        if (dloss != 0.0f) classifier_row_grad_cpu(row, V, Vp, m, log_sum, tgt, dloss);
    }
}

// ---- vocabulary-parallel (see the header)
template <class floatX>
inline void classifier_stats_cpu(const floatX* logits, float* stats, const int* targets, int N, int Vl, int Vpl, int lo) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const floatX* row = logits + (size_t)n * Vpl;
        float m;
        double sum;
        classifier_row_max_sum_cpu(row, Vl, &m, &sum);
        const int t = targets[n] - lo;
        stats[3 * n] = m;
        stats[3 * n + 1] = (float)sum;
        stats[3 * n + 2] = t >= 0 && t < Vl ? to_f(row[t]) : 0.0f;
    }
}
// A row's max M and log S from its parts' pairs (m, s) at st, st + stride, ...; a part without
// real columns (m = −∞, s = 0) adds nothing. The CPU ops and the vocabulary-parallel kernel call it.
HD inline void classifier_combine(const float* st, size_t stride, int parts, float* M, float* log_sum) {
    float mx = -INFINITY;
    for (int r = 0; r < parts; r++) mx = st[r * stride] > mx ? st[r * stride] : mx;
    double S = 0.0;
    for (int r = 0; r < parts; r++)
        if (st[r * stride + 1] > 0.0f) S += (double)st[r * stride + 1] * exp((double)(st[r * stride] - mx));
    *M = mx; *log_sum = (float)log(S);
}
// Row n's target logit from the vocabulary parts' stats ([parts][N][3]): only its own part's is not 0
HD inline float classifier_target(const float* stats, int parts, int N, int n) {
    float tg = 0.0f;
    for (int r = 0; r < parts; r++) tg += stats[3 * ((size_t)r * N + n) + 2];
    return tg;
}
template <class floatX>
inline void classifier_finish_cpu(floatX* logits, float* losses, const float* stats, int parts, const int* targets, int N, int Vl,
                                  int Vpl, int lo, float dloss) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float m, log_sum;
        classifier_combine(stats + 3 * (size_t)n, 3 * (size_t)N, parts, &m, &log_sum);
        losses[n] = -(classifier_target(stats, parts, N, n) - m - log_sum);
        if (dloss != 0.0f) classifier_row_grad_cpu(logits + (size_t)n * Vpl, Vl, Vpl, m, log_sum, targets[n] - lo, dloss);
    }
}

// ---- from the part stats (--classifier-stats epilogue: the LM head's product makes them)
// Part q of a row is its columns [128q, 128q + 128). Its stats: the max m of those below V and
// Σ exp(x − m) over them (−∞ and 0 where it has none), at stats[2·(n·parts + q)]: a row's parts
// lie together, so a block reads them in one go.
constexpr int CLASSIFIER_PART = 128;
HD inline int classifier_parts(int Vp) { return (Vp + CLASSIFIER_PART - 1) / CLASSIFIER_PART; }
template <class floatX> inline void classifier_part_stats_cpu(const floatX* logits, float* stats, int N, int V, int Vp) {
    const int parts = classifier_parts(Vp);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int q = 0; q < parts; q++) {
            const int c0 = q * CLASSIFIER_PART, cols = std::max(0, std::min(CLASSIFIER_PART, V - c0));
            float m;
            double s;
            classifier_row_max_sum_cpu(logits + (size_t)n * Vp + c0, cols, &m, &s);
            stats[2 * ((size_t)n * parts + q)] = m, stats[2 * ((size_t)n * parts + q) + 1] = (float)s;
        }
}
template <class floatX>
inline void classifier_from_parts_cpu(floatX* logits, float* losses, const float* stats, const int* targets, int N, int V, int Vp, float dloss) {
    const int parts = classifier_parts(Vp);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float m, log_sum;
        classifier_combine(stats + 2 * (size_t)n * parts, 2, parts, &m, &log_sum);
        floatX* row = logits + (size_t)n * Vp;
        losses[n] = -(to_f(row[targets[n]]) - m - log_sum);
        if (dloss != 0.0f) classifier_row_grad_cpu(row, V, Vp, m, log_sum, targets[n], dloss);
    }
}

#ifdef LLMC_CUDA
// block-wide reduction of one value per thread (blockDim.x a multiple of 32, ≤ 1024)
template <bool MAX> __device__ inline float block_reduce(float v) {
    __shared__ float shared[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();  // shared[] may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(v) : warp_sum(v);
}

// The two passes over a row, shared by the one-pass kernel and the vocabulary-parallel pair; the
// row moves in packs of P elements (P = 1: one at a time). Thread t reads the packs at
// t·P + k·stride (stride = blockDim.x·P), k = 0, 1, ..., in G groups of `per` packs each.
// exp(z) is computed as 2^(z·LOG2E) on the special function unit (exp2_ftz). Each pass loads a
// thread's next pack before it computes the current one, so two loads are in flight.
template <int G> __device__ inline int classifier_group_packs(int Vp, int P) {  // per: packs a thread a group
    const int stride = blockDim.x * P, packs = (Vp + stride - 1) / stride;
    return (packs + G - 1) / G;
}
// Pass 1: the block's max mb of the first V elements of src and Σ exp(x − mb). Each thread keeps
// a running max m and Σ exp(x − m): a pack whose max pm is larger first rescales the sum by
// exp(m − pm). Fixed-tree block reductions then give the same result on every run.
// WAIT: src is being filled by this thread's cp.async, one commit group per group of packs:
// group g is waited for before it is read, and the padding past V at the end.
template <class floatX, int P, int G = 1, bool WAIT = false>
__device__ inline void classifier_row_max_sum(const floatX* src, int V, int Vp, float* mb, float* sum) {
    const int stride = blockDim.x * P, per = classifier_group_packs<G>(Vp, P);
    float m = -INFINITY, s = 0.0f;
    for (int g = 0; g < G; g++) {
        if constexpr (WAIT) cp_async_wait_pending(G - 1 - g);
        const int k1 = (g + 1) * per;
        Pack<floatX, P> next;
        if ((int)threadIdx.x * P + g * per * stride < V) next = load_pack<P>(src + threadIdx.x * P + g * per * stride);
        for (int k = g * per; k < k1; k++) {
            const int i = threadIdx.x * P + k * stride;
            if (i >= V) break;  // (a pack starting below V ends within Vp)
            const Pack<floatX, P> x = next;
            if (k + 1 < k1 && i + stride < V) next = load_pack<P>(src + i + stride);  // (the next pack's load in flight)
            float z[P], pm = m;
            for (int j = 0; j < P; j++) {
                z[j] = i + j < V ? to_f(x.v[j]) : -INFINITY;  // (exp2 of −∞: 0)
                pm = fmaxf(pm, z[j]);
            }
            if (pm > m) {
                s *= exp2_ftz((m - pm) * LOG2E);
                m = pm;
            }
            for (int j = 0; j < P; j++) s += exp2_ftz((z[j] - m) * LOG2E);
        }
    }
    if constexpr (WAIT) cp_async_wait_all();
    *mb = block_reduce<true>(m);
    *sum = block_reduce<false>(m == -INFINITY ? 0.0f : s * exp2_ftz((m - *mb) * LOG2E));
}
// Pass 2: the gradient of the row's Vp elements (read from src) written to row; padding gets 0.
// Packs that hold neither the target nor padding skip those tests (dloss·(p − 0) = dloss·p).
template <class floatX, int P>
__device__ inline void classifier_row_grad(floatX* row, const floatX* src, int V, int Vp, float mb, float log_sum, int tgt, float dloss) {
    const float c = -log_sum * LOG2E;
    const int stride = blockDim.x * P;
    Pack<floatX, P> next;
    if ((int)threadIdx.x * P < Vp) next = load_pack<P>(src + threadIdx.x * P);
    for (int i = threadIdx.x * P; i < Vp; i += stride) {
        const Pack<floatX, P> x = next;
        if (i + stride < Vp) next = load_pack<P>(src + i + stride);  // (the next pack's load in flight while this one is computed)
        float p[P];
        for (int j = 0; j < P; j++) p[j] = exp2_ftz(fmaf(to_f(x.v[j]) - mb, LOG2E, c));
        Pack<floatX, P> g;
        if (i + P <= V && (unsigned)(tgt - i) >= (unsigned)P)
            for (int j = 0; j < P; j++) g.v[j] = from_f<floatX>(dloss * p[j]);
        else
            for (int j = 0; j < P; j++) {
                const int v = i + j;
                g.v[j] = from_f<floatX>(v < V ? dloss * (p[j] - (v == tgt ? 1.0f : 0.0f)) : 0.0f);
            }
        store_pack<P>(row + i, g);
    }
}

// One block per row, two passes over it (above). The row moves in 16-byte packs of P elements
// where Vp and the pointer allow (P = 1 otherwise); columns ≥ V in a pack are padding.
// STAGED (packs only): each thread first copies its packs of the row into shared memory by
// cp.async (Vp·sizeof(floatX) bytes of dynamic shared memory), in CLASSIFIER_GROUPS commit
// groups, and both passes read them there: the logits leave device memory once instead of
// twice. Pass 1 waits for each group just before it reads it, so it starts on the first packs
// while the rest are in flight. Each thread handles the same packs either way: the same bits.
constexpr int CLASSIFIER_GROUPS = 8;
template <class floatX, int P, bool STAGED = false>
__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    const int n = blockIdx.x;
    floatX* row = logits + (size_t)n * Vp;
    const floatX* src = row;  // where both passes read the row
    constexpr int G = STAGED ? CLASSIFIER_GROUPS : 1;
    if constexpr (STAGED) {
        static_assert(P * sizeof(floatX) == 16, "the staged row moves in 16-byte packs");
        DYNAMIC_SHARED(floatX, srow);
        const int stride = blockDim.x * P, per = classifier_group_packs<G>(Vp, P);
        for (int g = 0; g < G; g++) {
            for (int k = g * per; k < (g + 1) * per; k++) {
                const int i = threadIdx.x * P + k * stride;
                if (i < Vp) cp_async16(srow + i, row + i, 16);
            }
            cp_async_commit();
        }
        src = srow;
    }
    float mb, sum;
    classifier_row_max_sum<floatX, P, G, STAGED>(src, V, Vp, &mb, &sum);  // (its block reductions: a __syncthreads after every wait)
    const float log_sum = logf(sum);
    const int tgt = targets[n];
    if (threadIdx.x == 0) losses[n] = -(to_f(src[tgt]) - mb - log_sum);
    if (dloss == 0.0f) return;
    if constexpr (!STAGED) __syncthreads();  // every thread has read row[tgt] before it is overwritten
    classifier_row_grad<floatX, P>(row, src, V, Vp, mb, log_sum, tgt, dloss);
}
// PIPELINED (--classifier-staged 2): one block an SM walks the rows n, n + grid, ... Each row is
// staged in shared memory as STAGED stages it, in one of two buffers, and the next row's copy is
// issued before this row is computed, so device memory stays busy while the block computes (two
// rows of shared memory: GPT-2's bf16 rows fit on an H100, not on an A100). Each thread copies
// and reads only its own packs, and the thread that holds the target's pack writes the loss: the
// same arithmetic as the one-row kernel, so the same bits.
template <class floatX, int P>
__global__ void fused_classifier_pipelined_kernel(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    static_assert(P * sizeof(floatX) == 16, "the staged row moves in 16-byte packs");
    DYNAMIC_SHARED(floatX, buffers);
    auto stage = [&](int n, floatX* dst) {  // this thread's packs of row n, as one commit group
        const floatX* row = logits + (size_t)n * Vp;
        for (int i = threadIdx.x * P; i < Vp; i += blockDim.x * P) cp_async16(dst + i, row + i, 16);
        cp_async_commit();
    };
    if ((int)blockIdx.x < N) stage(blockIdx.x, buffers);
    for (int n = blockIdx.x, k = 0; n < N; n += gridDim.x, k++) {
        const floatX* src = buffers + (size_t)(k % 2) * Vp;
        __syncthreads();  // row n − grid, in the other buffer, is read
        if (n + (int)gridDim.x < N) {
            stage(n + gridDim.x, buffers + (size_t)((k + 1) % 2) * Vp);
            cp_async_wait_group<1>();  // row n has landed, the next one is in flight
        } else {
            cp_async_wait_all();
        }
        float mb, sum;
        classifier_row_max_sum<floatX, P>(src, V, Vp, &mb, &sum);
        const float log_sum = logf(sum);
        const int tgt = targets[n];
        if (tgt / P % (int)blockDim.x == (int)threadIdx.x) losses[n] = -(to_f(src[tgt]) - mb - log_sum);  // (its own pack)
        if (dloss != 0.0f) classifier_row_grad<floatX, P>(logits + (size_t)n * Vp, src, V, Vp, mb, log_sum, tgt, dloss);
    }
}

// The vocabulary-parallel pair (one block per row, one element per load: the rows of a rank's
// slice need not be 16-byte aligned). Stats: pass 1; finish: each thread combines the parts
// itself (a few floats), then pass 2.
template <class floatX>
__global__ void classifier_stats_kernel(const floatX* logits, float* stats, const int* targets, int Vl, int Vpl, int lo) {
    const int n = blockIdx.x;
    const floatX* row = logits + (size_t)n * Vpl;
    float mb, sum;
    classifier_row_max_sum<floatX, 1>(row, Vl, Vl, &mb, &sum);
    if (threadIdx.x == 0) {
        const int t = targets[n] - lo;
        stats[3 * n] = mb;
        stats[3 * n + 1] = sum;
        stats[3 * n + 2] = t >= 0 && t < Vl ? to_f(row[t]) : 0.0f;
    }
}
template <class floatX>
__global__ void classifier_finish_kernel(floatX* logits, float* losses, const float* stats, int parts, const int* targets, int N,
                                         int Vl, int Vpl, int lo, float dloss) {
    const int n = blockIdx.x;
    float m, log_sum;
    classifier_combine(stats + 3 * (size_t)n, 3 * (size_t)N, parts, &m, &log_sum);
    if (threadIdx.x == 0) losses[n] = -(classifier_target(stats, parts, N, n) - m - log_sum);
    if (dloss == 0.0f) return;
    floatX* row = logits + (size_t)n * Vpl;
    classifier_row_grad<floatX, 1>(row, row, Vl, Vpl, m, log_sum, targets[n] - lo, dloss);
}
// From the part stats (above): each warp merges the row's parts itself, lane l the parts l,
// l + 32, ..., then the lanes by shuffles. Each pair's merge is symmetric: its two products are
// rounded apart (__fmul_rn is never contracted into an FMA, which would round one of them only),
// so every lane ends with the same M and S, and no block barrier is needed. Then pass 2 alone:
// the row is read once. The thread that holds the target's pack writes the loss before it
// overwrites that pack.
__device__ inline void softmax_merge(float& m, float& s, float m2, float s2) {  // (m, s) and (m2, s2) as one
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;  // (both empty)
    s = __fmul_rn(s, exp2_ftz((m - M) * LOG2E)) + __fmul_rn(s2, exp2_ftz((m2 - M) * LOG2E));
    m = M;
}
template <class floatX, int P>
__global__ void classifier_from_parts_kernel(floatX* logits, float* losses, const float* stats, const int* targets, int V, int Vp, float dloss) {
    const int n = blockIdx.x, parts = classifier_parts(Vp);
    float m = -INFINITY, s = 0.0f;
    for (int q = threadIdx.x % 32; q < parts; q += 32) {
        const float2 st = *reinterpret_cast<const float2*>(stats + 2 * ((size_t)n * parts + q));
        softmax_merge(m, s, st.x, st.y);
    }
    for (int o = 16; o > 0; o /= 2) softmax_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const float log_sum = logf(s);
    floatX* row = logits + (size_t)n * Vp;
    const int tgt = targets[n];
    if (tgt / P % (int)blockDim.x == (int)threadIdx.x) losses[n] = -(to_f(row[tgt]) - m - log_sum);  // (its own pack)
    if (dloss != 0.0f) classifier_row_grad<floatX, P>(row, row, V, Vp, m, log_sum, tgt, dloss);
}

// ctx.kernels.classifier_staged: 1, the STAGED kernel where the row fits in a block's shared
// memory (GPT-2's bf16 row is 98 KB: two blocks per H100 SM); 2, the PIPELINED one where two rows
// fit. classifier_staged_auto (--classifier-staged auto, the trainer's default): at the first
// call with dlogits of at least classifier_tune_rows rows (a B·T of real size), each kernel that
// fits runs on a copy of its first CLASSIFIER_TUNE_SLICE rows (the kernel writes in place, so each
// run starts from the rows copied again), is timed and has its outputs hashed (autotune.cuh's
// rule): a staged kernel is kept if it was faster by 2% and wrote the same bits, which it should
// (each thread handles the same packs every way). The slice, 4096 rows, is 8 waves of the
// unstaged kernel's rows in flight on an H100 and 16 of the staged one's: as the whole call, many
// rows per SM, so whether pass 2 finds the row in L2 is as it is there. Rank 0 prints the decision.
constexpr int CLASSIFIER_TUNE_SLICE = 4096;
// classifier_threads: the block (a row) size of the one-pass kernels, a multiple of 32 ≤ 1024.
// With 512, four blocks fit an SM: 528 rows in flight on an H100, 52 MB of GPT-2 bf16 rows,
// more than its 50 MB L2, which may be why pass 2's re-read seems to miss it (the header). 1024
// keeps half as many in flight (dev/cuda/classifier.cu v4 times it). Other sizes sum the row in
// another order: results differ in the last bits, within the same bounds.
template <class floatX, int P> inline size_t classifier_staged_ceiling() {  // (asked of the device once)
    static const size_t bytes = dynamic_shared_ceiling(fused_classifier_kernel<floatX, P, true>);
    return bytes;
}
template <class floatX, int P> inline size_t classifier_pipelined_ceiling() {
    static const size_t bytes = dynamic_shared_ceiling(fused_classifier_pipelined_kernel<floatX, P>);
    return bytes;
}
#endif

#ifdef LLMC_CUDA
// --classifier-staged auto's trial (above): the kernel kept (0 unstaged, 1 staged, 2 pipelined).
// launch(kernel, rows, losses, n) runs a kernel on n rows, or says false where it does not fit.
template <class floatX, class L> inline int classifier_tune_staged(const Ctx& ctx, const floatX* logits, int N, int Vp, const L& launch) {
    const int R = std::min(N, CLASSIFIER_TUNE_SLICE);
    const size_t bytes = (size_t)R * Vp * sizeof(floatX);
    bool room = true;
    const AutotunePick t = autotune_pick_on_copy(ctx, 3, logits, bytes, R * sizeof(float), [&](int v, void* rows) {
        return launch(v, (floatX*)rows, (float*)((char*)rows + bytes), R);  // (the R losses after the rows)
    }, &room);
    if (!room) {
        if (g_rank == 0) printf("classifier: the unstaged kernel (--classifier-staged auto: no room for the %zu bytes of its trial)\n", bytes);
        return 0;
    }
    static const char* names[] = {"unstaged", "staged", "pipelined"};
    if (g_rank == 0) {
        std::string times;
        for (int v = 0; v < 3; v++) {
            char one[64];
            snprintf(one, sizeof(one), "%s%.3f ms %s", times.empty() ? "" : ", ", t.ms[v], names[v]);
            if (!std::isnan(t.ms[v])) times += one;
        }
        printf("classifier: the %s kernel (--classifier-staged auto, timed on %d rows of %d: %s%s)\n", names[t.best], R, Vp, times.c_str(),
               t.same ? "; the same bits" : "; a kernel whose bits differed was left out");
    }
    return t.best;
}
#endif

template <class floatX>
inline void fused_classifier(const Ctx& ctx, floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    OpScope prof(ctx, 0, 2.0 * N * Vp * sizeof(floatX) + 8.0 * N, "classifier (loss, dlogits)");  // logits in, dlogits out
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<floatX>;
        const size_t row_bytes = (size_t)Vp * sizeof(floatX);
        const bool packs = pack_width<floatX>(Vp, {logits}) > 1;
        const bool fits[3] = {true, packs && row_bytes <= classifier_staged_ceiling<floatX, P>(),
                              packs && 2 * row_bytes <= classifier_pipelined_ceiling<floatX, P>()};
        auto launch = [&](int kernel, floatX* rows, float* loss, int n) {  // (0 unstaged, 1 staged, 2 pipelined)
            constexpr int Q = PACK<floatX>;  // (P itself, named in here, nvcc would want captured)
            const int threads = ctx.kernels.classifier_threads;
            if (!fits[kernel]) return false;
            if (kernel == 1) {
                SHARED_OPT_IN(fused_classifier_kernel<floatX, Q, true>);
                fused_classifier_kernel<floatX, Q, true><<<n, threads, row_bytes, ctx.stream>>>(rows, loss, targets, V, Vp, dloss);
            } else if (kernel == 2) {
                const int blocks = std::min(n, gpu_sm_count());  // (one an SM: two rows of shared memory each)
                SHARED_OPT_IN(fused_classifier_pipelined_kernel<floatX, Q>);
                fused_classifier_pipelined_kernel<floatX, Q><<<blocks, threads, 2 * row_bytes, ctx.stream>>>(rows, loss, targets, n, V, Vp, dloss);
            } else {
                fused_classifier_kernel<floatX, Q><<<n, threads, 0, ctx.stream>>>(rows, loss, targets, V, Vp, dloss);
            }
            CUDA_LAUNCH_CHECK();
            return true;
        };
        const KernelOptions& o = ctx.kernels;
        int& kept = ctx.tuned->classifier_staged;  // (−1: not decided yet)
        if (fits[1] && o.classifier_staged_auto && kept < 0 && N >= o.classifier_tune_rows && dloss != 0.0f)
            kept = classifier_tune_staged<floatX>(ctx, logits, N, Vp, launch);
        const int kernel = o.classifier_staged_auto ? std::max(kept, 0) : o.classifier_staged;
        if (packs) launch(fits[kernel] ? kernel : 0, logits, losses, N);
        else
            fused_classifier_kernel<floatX, 1><<<N, ctx.kernels.classifier_threads, 0, ctx.stream>>>(logits, losses, targets, V, Vp, dloss);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    fused_classifier_cpu(logits, losses, targets, N, V, Vp, dloss);
}

// The vocabulary-parallel pair (see the header): stats of this rank's columns into stats (N × 3),
// then, once every part's stats are in all_stats ([parts][N][3]), the losses and the gradient.
template <class floatX>
inline void classifier_stats(const Ctx& ctx, const floatX* logits, float* stats, const int* targets, int N, int Vl, int Vpl, int lo) {
    OpScope prof(ctx, 0, 1.0 * N * Vpl * sizeof(floatX) + 16.0 * N, "classifier stats (vocabulary-parallel)");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        classifier_stats_kernel<<<N, 512, 0, ctx.stream>>>(logits, stats, targets, Vl, Vpl, lo);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    classifier_stats_cpu(logits, stats, targets, N, Vl, Vpl, lo);
}
template <class floatX>
inline void classifier_finish(const Ctx& ctx, floatX* logits, float* losses, const float* all_stats, int parts, const int* targets,
                              int N, int Vl, int Vpl, int lo, float dloss) {
    OpScope prof(ctx, 0, 2.0 * N * Vpl * sizeof(floatX) + (12.0 * parts + 8) * N, "classifier (loss, dlogits; vocabulary-parallel)");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        classifier_finish_kernel<<<N, 512, 0, ctx.stream>>>(logits, losses, all_stats, parts, targets, N, Vl, Vpl, lo, dloss);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    classifier_finish_cpu(logits, losses, all_stats, parts, targets, N, Vl, Vpl, lo, dloss);
}

// The losses and, with dloss ≠ 0, dlogits in place, from the rows' part stats (N × parts × 2
// floats, above; the LM head's product made them: matmul.cuh, matmul_forward_logits)
template <class floatX>
inline void classifier_from_parts(const Ctx& ctx, floatX* logits, float* losses, const float* stats, const int* targets, int N, int V, int Vp,
                                  float dloss) {
    OpScope prof(ctx, 0, (dloss != 0.0f ? 2.0 * N * Vp * sizeof(floatX) : 0.0) + (8.0 * classifier_parts(Vp) + 8) * N,
                 "classifier (loss, dlogits; from the part stats)");
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        constexpr int P = PACK<floatX>;
        if (pack_width<floatX>(Vp, {logits}) > 1)
            classifier_from_parts_kernel<floatX, P><<<N, ctx.kernels.classifier_threads, 0, ctx.stream>>>(logits, losses, stats, targets, V, Vp, dloss);
        else
            classifier_from_parts_kernel<floatX, 1><<<N, ctx.kernels.classifier_threads, 0, ctx.stream>>>(logits, losses, stats, targets, V, Vp, dloss);
        CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    classifier_from_parts_cpu(logits, losses, stats, targets, N, V, Vp, dloss);
}
