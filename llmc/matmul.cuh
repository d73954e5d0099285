/*
matmul.cuh — the linear layer, y = x·Wᵀ + b, with W stored (out, in) like torch.nn.Linear.

  forward:  out[n, o]  = Σ_i inp[n, i] · W[o, i] + bias[o]
  backward: dinp[n, i] = Σ_o dout[n, o] · W[o, i]           (written)
            dW[o, i]  += Σ_n dout[n, o] · inp[n, i]         (accumulated)
            dbias[o]  += Σ_n dout[n, o]                     (accumulated)

The CPU reference is blocked loop nests, each output reduced by one thread in a fixed order.
CUDA runs cuBLASLt (column-major, so each product is issued transposed), fp32 compute. The MLP's
GELU rides in cuBLASLt's epilogues (gelu_pre: GELU_AUX_BIAS forward, DGELU backward). With
ctx.fp8 the blocks' products multiply FP8 codes (fp8.cuh) in cuBLASLt's "TN" form.

Main functions: matmul_forward, matmul_backward (the ops), lt_matmul (one cuBLASLt product, its
algorithm cached a shape: --matmul-tune), fp8_linear.

Tests: test/test_ops.cpp (finite differences; FP8 within its rounding), test/gpucheck_ops.cu
(CUDA against the CPU), test/test_gpu_train.sh (--matmul-tune bit-identical to untuned).
More: docs/kernels.md.
*/
#pragma once
#include "common.h"
#include "profiler.h"
#include "gelu.cuh"
#include "fp8.cuh"
#include "autotune.cuh"
#ifdef _OPENMP
#include <omp.h>
#endif

static const int MATMUL_BLOCK = 64;  // weight rows per block: 64 rows × C floats stays in L2

// (fp32; the dtype wrapper matmul_forward gives it fp32 views of bf16 buffers)
inline void matmul_forward_cpu(float* out, const float* inp, const float* W, const float* bias,
                               int N, int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
        int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
        int n = 0;
        for (; n + 4 <= N; n += 4) {  // four input rows at a time share each weight row load
            const float* x0 = inp + (size_t)n * C;
            const float* x1 = x0 + C; const float* x2 = x1 + C; const float* x3 = x2 + C;
            for (int o = o0; o < o1; o++) {
                const float* w = W + (size_t)o * C;
                float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                #pragma omp simd reduction(+:s0, s1, s2, s3)
                for (int i = 0; i < C; i++) {
                    s0 += x0[i] * w[i]; s1 += x1[i] * w[i]; s2 += x2[i] * w[i]; s3 += x3[i] * w[i];
                }
                float bo = bias ? bias[o] : 0.0f;
                out[(size_t)(n + 0) * OC + o] = s0 + bo;
                out[(size_t)(n + 1) * OC + o] = s1 + bo;
                out[(size_t)(n + 2) * OC + o] = s2 + bo;
                out[(size_t)(n + 3) * OC + o] = s3 + bo;
            }
        }
        for (; n < N; n++) {  // leftover rows
            const float* x = inp + (size_t)n * C;
            for (int o = o0; o < o1; o++) {
                const float* w = W + (size_t)o * C;
                float s = 0;
                #pragma omp simd reduction(+:s)
                for (int i = 0; i < C; i++) s += x[i] * w[i];
                out[(size_t)n * OC + o] = s + (bias ? bias[o] : 0.0f);
            }
        }
    }
}

// dbias[o] += Σ_n dout[n, o], rows in order
inline void bias_backward_cpu(float* dbias, const float* dout, int N, int OC) {
    for (int n = 0; n < N; n++) {
        const float* d = dout + (size_t)n * OC;
        #pragma omp simd
        for (int o = 0; o < OC; o++) dbias[o] += d[o];
    }
}

inline void matmul_backward_cpu(float* dinp, float* dW, float* dbias, const float* dout,
                                const float* inp, const float* W, int N, int C, int OC) {
    // dinp = dout · W: each thread owns a range of rows n; the weight matrix streams through
    // in blocks so a block is reused by all of the thread's rows while it is in cache.
    if (dinp) {
        #pragma omp parallel
        {
            int nthreads = 1, tid = 0;
#ifdef _OPENMP
            nthreads = omp_get_num_threads(); tid = omp_get_thread_num();
#endif
            int chunk = (N + nthreads - 1) / nthreads;
            int n0 = tid * chunk < N ? tid * chunk : N, n1 = n0 + chunk < N ? n0 + chunk : N;
            for (size_t k = (size_t)n0 * C; k < (size_t)n1 * C; k++) dinp[k] = 0.0f;
            for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
                int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
                for (int n = n0; n < n1; n++) {
                    float* di = dinp + (size_t)n * C;
                    const float* d = dout + (size_t)n * OC;
                    int o = o0;
                    for (; o + 4 <= o1; o += 4) {  // four weight rows per pass over di
                        const float* w0 = W + (size_t)o * C;
                        const float *w1 = w0 + C, *w2 = w1 + C, *w3 = w2 + C;
                        float d0 = d[o], d1 = d[o + 1], d2 = d[o + 2], d3 = d[o + 3];
                        #pragma omp simd
                        for (int i = 0; i < C; i++) di[i] += d0 * w0[i] + d1 * w1[i] + d2 * w2[i] + d3 * w3[i];
                    }
                    for (; o < o1; o++) {
                        const float* w = W + (size_t)o * C;
                        #pragma omp simd
                        for (int i = 0; i < C; i++) di[i] += d[o] * w[i];
                    }
                }
            }
        }
    }
    // dW += doutᵀ · inp: each thread owns a block of weight rows, inputs stream past them.
    if (dW) {
    #pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += MATMUL_BLOCK) {
        int o1 = o0 + MATMUL_BLOCK < OC ? o0 + MATMUL_BLOCK : OC;
        int n = 0;
        for (; n + 4 <= N; n += 4) {  // four input rows per pass over each dW row
            const float* x0 = inp + (size_t)n * C;
            const float *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
            const float* d = dout + (size_t)n * OC;
            for (int o = o0; o < o1; o++) {
                float d0 = d[o], d1 = d[OC + o], d2 = d[2 * (size_t)OC + o], d3 = d[3 * (size_t)OC + o];
                float* dw = dW + (size_t)o * C;
                #pragma omp simd
                for (int i = 0; i < C; i++) dw[i] += d0 * x0[i] + d1 * x1[i] + d2 * x2[i] + d3 * x3[i];
            }
        }
        for (; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            for (int o = o0; o < o1; o++) {
                float d = dout[(size_t)n * OC + o];
                float* dw = dW + (size_t)o * C;
                #pragma omp simd
                for (int i = 0; i < C; i++) dw[i] += d * x[i];
            }
        }
    }
    }
    if (dbias) bias_backward_cpu(dbias, dout, N, OC);
}

#ifdef LLMC_CUDA
#include <map>
#include <tuple>

// The largest power of two (≤ 256) that divides the address. (It stopped at 4, which promised
// cuBLASLt 4 bytes for a 16-bit matrix at an odd element: a layer's weights in a model of odd
// width C, whose parameters lie back to back. The emulator, which checks each promise, found it.)
inline uint32_t alignment_of(const void* p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}
#include "matmul_hopper.cuh"  // (our GEMM on Hopper: --matmul-wgmma; it uses alignment_of)
// D[:, j] += bias for every column j of a column-major m×n matrix
template <class floatX> __global__ void add_bias_kernel(floatX* D, const floatX* bias, int m, int n, int ldd) {
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        floatX* d = D + (i / m) * ldd + i % m;
        *d = from_f<floatX>(to_f(*d) + to_f(bias[i % m]));
    }
}

// The GELU in the epilogue: none; forward (D = gelu(x), aux = x, x = the product + bias); or
// backward (D = x ⊙ gelu′(aux), x = the product).
enum class GeluEpi { None, Forward, Backward };

// cuBLASLt's heuristic may have no algorithm with a given epilogue (a shape, an alignment or a
// library version it does not cover: it answers NOT_SUPPORTED or finds none). Then the product
// runs plain and the epilogue's work in our kernels after it: the bias (add_bias_kernel), the
// GELU (gelu_forward on the stored pre-activation) or its derivative (gelu_backward), with a
// note on stderr the first time. ctx.kernels.lt_epilogues = false takes that path for every
// product, so that gpucheck_ops checks it on a GPU, where the heuristic always finds one.
// The bias-gradient epilogue (BGRADB) writes its sums in D's dtype. cuBLASLt 13.1 on an H100
// answered INVALID_VALUE to fp32 sums beside a 16-bit D; that answer counts as none here too.

// FP8 operands (fp8.cuh): A and B hold codes of these formats, and cuBLASLt multiplies the fp32
// accumulator by *a_inv · *b_inv (device pointers: the scales' inverses, as fp8_quantize wrote
// them, each 16-byte aligned: fp8.cuh's Fp8Scales).
// Hopper's FP8 tensor cores keep a narrower accumulator than fp32; by default cuBLASLt promotes it
// to fp32 at intervals along k. fast_accum asks it not to (CUBLASLT_MATMUL_DESC_FAST_ACCUM:
// faster, less exact). ctx.kernels.fp8_fast_accum says for which products (Fp8FastAccum in
// kernel_options.h; Transformer Engine's recipe: the forward's). dev/cuda/matmul.cu v4 times it
// on every product, gpucheck_ops checks it; the emulator sums in fp32 either way.
struct LtFp8 { Fp8Format a, b; const float* a_inv; const float* b_inv; bool fast_accum; };
inline cudaDataType_t lt_fp8_type(Fp8Format f) { return f == Fp8Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
template <class floatX> inline cudaDataType_t lt_type() {
    return std::is_same_v<floatX, float> ? CUDA_R_32F : std::is_same_v<floatX, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}

// --matmul-tune 1 (ctx.kernels.matmul_tune, the trainer's default): cuBLASLt's heuristic ranks
// its candidate algorithms by a model of the GPU, without running them; its first is usually, not
// always, the fastest. So at a product's first call (per shape, options and alignments: the
// cache in Autotuned) of at least matmul_tune_flops (1e10 flops, ~15 µs on an H100: every
// layer's products in a training step of real size), each candidate that runs has its output
// hashed, and those that wrote the bits of the first (the algorithm --matmul-tune 0 runs) are
// timed; the fastest is kept if it beat the first by 2% (the timing's noise). autotune.cuh says
// why only the same bits count: tuning changes the speed, never the numbers. The output: D, and
// the GELU's aux or the bias gradient where the epilogue writes one. A product that accumulates
// (β ≠ 0: dW += …) runs each time on D as it was, copied aside first (a temporary buffer of D's
// size; where it cannot be had, that product is not tuned). A product whose D overlaps an
// operand is not tuned. Rank 0 prints each decision.

// The bytes from p to the last element of a column-major rows×cols matrix with leading dimension ld.
inline size_t lt_span(size_t rows, size_t cols, size_t ld, size_t elem) { return ((cols - 1) * ld + rows) * elem; }
inline bool spans_overlap(const void* a, size_t na, const void* b, size_t nb) {
    const char *x = (const char*)a, *y = (const char*)b;
    return a && b && x < y + nb && y < x + na;
}

// One product as cuBLASLt is asked it: D(m×n) = op(A)·op(B) + β·D with the epilogue; elem_a the
// bytes of an A or B element, elem_d of a D element; what, epi, d_name: its names for messages.
struct LtCall {
    void* D; const void* A; const void* Bm; const void* bias;
    int m, n, k;
    bool transA, transB;
    int lda, ldb, ldd;
    float beta;
    GeluEpi gelu;
    void* aux;
    void* bias_grad;  // (D's dtype)
    const LtFp8* fp8;
    cudaDataType_t dt, dtd;
    size_t elem_a, elem_d;
    const char *what, *epi, *d_name;
    bool epilogue() const { return bias || gelu != GeluEpi::None || bias_grad; }
};
// Its cuBLASLt objects: the operation (epilogue, scales) and the layouts of A, B and D.
struct LtProduct {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    LtProduct() = default;
    LtProduct(const LtProduct&) = delete;
    ~LtProduct() {
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(op);
    }
};
template <class A> inline void lt_set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t what, const A& v) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, what, &v, sizeof(v)));
}
inline void lt_describe(const Ctx& ctx, const LtCall& c, LtProduct* p) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    lt_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, c.transA ? CUBLAS_OP_T : CUBLAS_OP_N);
    lt_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, c.transB ? CUBLAS_OP_T : CUBLAS_OP_N);
    const cublasLtEpilogue_t epi = c.gelu == GeluEpi::Forward ? (c.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                 : c.gelu == GeluEpi::Backward ? CUBLASLT_EPILOGUE_DGELU
                                 : c.bias ? CUBLASLT_EPILOGUE_BIAS : c.bias_grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) lt_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (c.bias) lt_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
    if (c.fp8) {
        lt_set(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, c.fp8->a_inv);
        lt_set(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, c.fp8->b_inv);
        lt_set(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, (int8_t)(c.fp8->fast_accum ? 1 : 0));
    }
    if (c.bias_grad) {  // the sums in D's dtype
        lt_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias_grad);
        lt_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, c.dtd);
    }
    if (c.gelu != GeluEpi::None) {
        lt_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
        lt_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)c.m);
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, c.fp8 ? lt_fp8_type(c.fp8->a) : c.dt, c.transA ? c.k : c.m, c.transA ? c.m : c.k, c.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, c.fp8 ? lt_fp8_type(c.fp8->b) : c.dt, c.transB ? c.n : c.k, c.transB ? c.k : c.n, c.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, c.dtd, c.m, c.n, c.ldd));
}
inline cublasStatus_t lt_run(const Ctx& ctx, const LtCall& c, const LtProduct& p, const cublasLtMatmulAlgo_t& algo) {
    const float alpha = 1.0f;
    return cublasLtMatmul(ctx.lt, p.op, &alpha, c.A, p.la, c.Bm, p.lb, &c.beta, c.D, p.ld, c.D, p.ld, &algo, ctx.workspace,
                          ctx.workspace_size, ctx.stream);
}

// The heuristic's first LT_ALGOS candidates, for the alignments the pointers have (cuBLASLt
// assumes 256 bytes unless told; our unit pointers are not). Refused: none where it answers
// NOT_SUPPORTED (or INVALID_VALUE for the bias-gradient epilogue, as above).
constexpr int LT_ALGOS = 8;
inline int lt_candidates(const Ctx& ctx, const LtCall& c, const LtProduct& p, cublasLtMatmulHeuristicResult_t* heur) {
    const uint32_t align_a = alignment_of(c.A), align_b = alignment_of(c.Bm), align_d = alignment_of(c.D);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.workspace_size,
                                                      sizeof(ctx.workspace_size)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.op, p.la, p.lb, p.ld, p.ld, pref, LT_ALGOS, heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    const bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED || (c.bias_grad && st == CUBLAS_STATUS_INVALID_VALUE);
    if (st != CUBLAS_STATUS_SUCCESS && !refused)
        fatal("cuBLASLt: the algorithm heuristic failed (status %d) for a %dx%dx%d %s matmul%s%s", (int)st, c.m, c.n, c.k, c.what,
              c.epi ? " with the epilogue " : "", c.epi ? c.epi : "");
    return st == CUBLAS_STATUS_SUCCESS ? found : 0;
}

// --matmul-tune: where the product is large enough, D can be rerun (its bytes a whole number of
// 32-bit words, and for β ≠ 0 contiguous) and overlaps no input.
inline bool lt_tunable(const Ctx& ctx, const LtCall& c, int found) {
    const size_t d_bytes = lt_span(c.m, c.n, c.ldd, c.elem_d), aux_bytes = c.gelu != GeluEpi::None ? (size_t)c.m * c.n * c.elem_d : 0;
    return ctx.kernels.matmul_tune && found > 1 && 2.0 * c.m * c.n * c.k >= ctx.kernels.matmul_tune_flops && alignment_of(c.D) >= 4 &&
           d_bytes % 4 == 0 && aux_bytes % 4 == 0 && (c.beta == 0.0f || c.ldd == c.m) &&
           !spans_overlap(c.D, d_bytes, c.A, lt_span(c.transA ? c.k : c.m, c.transA ? c.m : c.k, c.lda, c.elem_a)) &&
           !spans_overlap(c.D, d_bytes, c.Bm, lt_span(c.transB ? c.n : c.k, c.transB ? c.k : c.n, c.ldb, c.elem_a)) &&
           !spans_overlap(c.D, d_bytes, c.aux, aux_bytes) && !spans_overlap(c.D, d_bytes, c.bias, (size_t)c.m * c.elem_d);
}

// The fastest candidate of those that write the first's bits (autotune_pick), its output left in
// D; -1 where it cannot be timed (no room for D's copy, or none ran). Printed.
template <class L>
inline int lt_tune(const Ctx& ctx, const LtCall& c, int found, const L& launch) {
    const size_t d_bytes = lt_span(c.m, c.n, c.ldd, c.elem_d);
    void* saved = nullptr;  // (β ≠ 0: D as it was, for each candidate to start from)
    if (c.beta != 0.0f) {
        if (cudaMalloc(&saved, d_bytes) != cudaSuccess) { cudaGetLastError(); return -1; }  // (no room: the heuristic's first, untimed)
        CUDA_CHECK(cudaMemcpyAsync(saved, c.D, d_bytes, cudaMemcpyDeviceToDevice, ctx.stream));
    }
    std::vector<BitsRegion> outs{{c.D, d_bytes}};
    if (c.gelu == GeluEpi::Forward) outs.push_back({c.aux, (size_t)c.m * c.n * c.elem_d});
    if (c.bias_grad) outs.push_back({c.bias_grad, c.n * c.elem_d});
    auto restore = [&] { if (saved) CUDA_CHECK(cudaMemcpyAsync(c.D, saved, d_bytes, cudaMemcpyDeviceToDevice, ctx.stream)); };
    const AutotunePick t = autotune_pick(ctx, found, restore, launch, outs);
    if (saved) CUDA_CHECK(cudaFree(saved));
    if (t.best >= 0 && g_rank == 0) {
        const std::string kept = t.best == t.first ? std::string("the heuristic's first kept")
                               : "candidate " + std::to_string(t.best + 1) + " of " + std::to_string(found) + " taken";
        printf("matmul: %dx%dx%d %s%s%s%s: %s (--matmul-tune 1: %.3f ms against %.3f ms with the heuristic's first; "
               "%d of the %d others gave the same bits)\n", c.m, c.n, c.k, c.what, c.beta != 0.0f ? " accumulating" : "",
               c.epi ? " with the epilogue " : "", c.epi ? c.epi : "", kept.c_str(), t.ms[t.best], t.ms[t.first], t.same,
               found - t.first - 1);
    }
    return t.best;
}

// Why a product found no algorithm, on stderr: what it asked of cuBLASLt.
inline void lt_note_none(const Ctx& ctx, const LtCall& c, int found) {
    if (found > 0) {
        std::string asked = std::string("op(A) ") + (c.transA ? "T" : "N") + ", op(B) " + (c.transB ? "T" : "N") + ", lda " +
            std::to_string(c.lda) + ", ldb " + std::to_string(c.ldb) + ", ldd " + std::to_string(c.ldd) + ", D " + c.d_name +
            ", alignments A " + std::to_string(alignment_of(c.A)) + " B " + std::to_string(alignment_of(c.Bm)) + " D " +
            std::to_string(alignment_of(c.D));
        if (c.bias) asked += " bias " + std::to_string(alignment_of(c.bias));
        if (c.fp8) asked += ", scale pointers " + std::to_string(alignment_of(c.fp8->a_inv)) + " and " + std::to_string(alignment_of(c.fp8->b_inv));
        asked += ", workspace " + std::to_string(ctx.workspace_size) + " B";
        fprintf(stderr, "note: cuBLASLt refused all %d algorithms its heuristic offered for a %dx%dx%d %s matmul%s%s (NOT_SUPPORTED: %s)%s\n",
                found, c.m, c.n, c.k, c.what, c.epi ? " with the epilogue " : "", c.epi ? c.epi : "", asked.c_str(),
                c.epilogue() ? ": the epilogue runs as a separate kernel" : "");
    } else if (c.epilogue()) {
        fprintf(stderr, "note: cuBLASLt has no algorithm with the %s epilogue for a %dx%dx%d %s matmul: it runs as a "
                "separate kernel\n", c.epi, c.m, c.n, c.k, c.what);
    }
}

// A product's first call: its algorithm chosen (tuned, or the heuristic's first that runs) and
// the product run with it; {false} where none runs.
inline LtAlgo lt_first_call(const Ctx& ctx, const LtCall& c, const LtProduct& p) {
    cublasLtMatmulHeuristicResult_t heur[LT_ALGOS] = {};
    const int found = lt_candidates(ctx, c, p, heur);
    auto launch = [&](int i) {  // the heuristic's i-th candidate; false where cublasLtMatmul refuses it
        const cublasStatus_t r = lt_run(ctx, c, p, heur[i].algo);
        if (r != CUBLAS_STATUS_SUCCESS && r != CUBLAS_STATUS_NOT_SUPPORTED)
            fatal("cuBLASLt: a %dx%dx%d %s matmul failed (status %d)", c.m, c.n, c.k, c.what, (int)r);
        return r == CUBLAS_STATUS_SUCCESS;
    };
    const int tuned = lt_tunable(ctx, c, found) ? lt_tune(ctx, c, found, launch) : -1;
    if (tuned >= 0) return LtAlgo{true, heur[tuned].algo};
    for (int i = 0; i < found; i++)
        if (launch(i)) return LtAlgo{true, heur[i].algo};
    lt_note_none(ctx, c, found);
    return LtAlgo{false, {}};
}

// D(m×n) = α·op(A)·op(B) + β·D with the epilogue, through cuBLASLt; false (nothing queued) when
// it has no algorithm for it. A and B are floatX (or FP8: fp8), D, bias and aux TD (floatX, or
// float for an fp32 result of 16-bit operands). bias_grad (TD, n): the BGRADB epilogue,
// bias_grad[j] = Σ_p op(B)[p, j] (written, not added). The algorithm that ran at a product's
// first call is kept per dtypes, shape, options and alignments (Autotuned), and so is the
// answer that none did.
template <class floatX, class TD = floatX>
inline bool lt_matmul(const Ctx& ctx, TD* D, const void* A, const void* Bm, const NoDeduce<TD>* bias, int m, int n, int k, bool transA,
                      bool transB, int lda, int ldb, int ldd, float beta, GeluEpi gelu, NoDeduce<TD>* aux, NoDeduce<TD>* bias_grad = nullptr,
                      const LtFp8* fp8 = nullptr) {
    const char* epi = gelu == GeluEpi::Forward ? (bias ? "bias+GELU" : "GELU") : gelu == GeluEpi::Backward ? "GELU backward"
                    : bias_grad ? "bias-gradient" : bias ? "bias" : nullptr;
    const LtCall c{D, A, Bm, bias, m, n, k, transA, transB, lda, ldb, ldd, beta, gelu, aux, bias_grad, fp8, lt_type<floatX>(),
                   lt_type<TD>(), fp8 ? 1 : sizeof(floatX), sizeof(TD), fp8 ? "fp8" : dtype_name<floatX>(), epi, dtype_name<TD>()};
    if (bias_grad && (bias || gelu != GeluEpi::None)) fatal("lt_matmul: the bias-gradient epilogue goes alone");
    if (c.epilogue() && (!ctx.kernels.lt_epilogues || (bias && alignment_of(bias) < 16) || (bias_grad && alignment_of(bias_grad) < 16)))
        return false;  // (it wants an aligned bias)
    const LtKey key{(int)c.dt, (int)c.dtd, m, n, k, transA, transB, lda, ldb, ldd, bias != nullptr, beta != 0.0f, (int)gelu,
                    alignment_of(A), alignment_of(Bm), alignment_of(D), bias_grad != nullptr,
                    fp8 ? 1 + 4 * fp8->fast_accum + 2 * (int)fp8->a + (int)fp8->b : 0};
    LtProduct p;
    lt_describe(ctx, c, &p);
    std::map<LtKey, LtAlgo>& algos = ctx.tuned->lt_algos;
    auto it = algos.find(key);
    if (it == algos.end()) return algos.emplace(key, lt_first_call(ctx, c, p)).first->second.any;  // (it ran the product)
    if (it->second.any) {
        const cublasStatus_t st = lt_run(ctx, c, p, it->second.algo);
        if (st != CUBLAS_STATUS_SUCCESS) fatal("cuBLASLt: a %dx%dx%d %s matmul failed (status %d)", m, n, k, c.what, (int)st);
    }
    return it->second.any;
}

// D(m×n) = α·op(A)·op(B) + β·D (+ bias[m] per column) (then the GELU forward epilogue, aux m×n
// with leading dimension m), column-major, T matrices, fp32 accumulate: in one cuBLASLt call where
// it has an algorithm for the whole of it, else the plain product and our kernels (see above).
// (The GELU's backward epilogue is matmul_backward's, whose fallback keeps the product in fp32.)
// fp8: A and B are FP8 (see LtFp8). True: queued. False, nothing queued, only for FP8 operands
// that cuBLASLt has no algorithm for even without the epilogue (fp8_linear then multiplies their
// dequantized values); any other product it refuses is fatal.
template <class floatX>
inline bool cublaslt_gemm(const Ctx& ctx, floatX* D, const void* A, const void* Bm, const floatX* bias,
                          int m, int n, int k, bool transA, bool transB, int lda, int ldb, int ldd, float beta,
                          GeluEpi gelu = GeluEpi::None, floatX* aux = nullptr, const LtFp8* fp8 = nullptr) {
    if (gelu == GeluEpi::Backward) fatal("cublaslt_gemm: the DGELU epilogue is matmul_backward's");
    if (gelu != GeluEpi::None && (ldd != m || beta != 0.0f)) fatal("cublaslt_gemm: a GELU epilogue needs ldd = m and β = 0");
    if (lt_matmul<floatX>(ctx, D, A, Bm, bias, m, n, k, transA, transB, lda, ldb, ldd, beta, gelu, aux, nullptr, fp8)) return true;
    if (!bias && gelu == GeluEpi::None) {
        if (fp8) return false;
        fatal("cuBLASLt has no algorithm for a %dx%dx%d %s matmul (CUBLASLT_LOG_LEVEL=2 in the environment shows its reason)",
              m, n, k, dtype_name<floatX>());
    }
    const size_t mn = (size_t)m * n;
    if (gelu == GeluEpi::Forward) {  // aux = the product + bias, D = gelu(aux)
        if (!cublaslt_gemm<floatX>(ctx, aux, A, Bm, bias, m, n, k, transA, transB, lda, ldb, m, 0.0f, GeluEpi::None, nullptr, fp8)) return false;
        gelu_forward(ctx, D, (const floatX*)aux, mn);
    } else {  // the bias alone
        if (!cublaslt_gemm<floatX>(ctx, D, A, Bm, nullptr, m, n, k, transA, transB, lda, ldb, ldd, beta, GeluEpi::None, nullptr, fp8)) return false;
        add_bias_kernel<<<grid_for(mn), 256, 0, ctx.stream>>>(D, bias, m, n, ldd);
        CUDA_LAUNCH_CHECK();
    }
    return true;
}

// dbias[o] += Σ_n dout[n, o], in two stages: partial sums over chunks of rows, then the chunks
// added in a fixed order (common.h: column_sum_add), so the result is deterministic. Three ways to
// run it (ctx.kernels.bias_grad; dev/cuda/matmul.cu times each):
//   Warps (default): block (x, k) takes rows [k·R, (k+1)·R) and 32·V columns. Its 8 warps split the
//       rows (warp w: rows w, w + 8, ...), each lane V adjacent columns read as one 16-byte pack
//       per row (a warp reads 512 contiguous bytes of a row); then the 8 warps' sums are added in
//       warp order through shared memory. R = 128 rows, more past 128K rows so that K ≤ 1024:
//       at N = 131072 and OC = 768 that is 3 × 1024 blocks of 256 threads, enough loads in flight
//       to keep memory busy.
//   Columns (the first version): one thread per column pack over N/256 rows, 256 chunks. At
//       OC = 768 that is 96 threads a chunk, 24K in all: too few loads in flight to keep memory
//       busy (Little's law). An inference, not yet a measurement: in the H100 step profile the
//       768-wide backwards took ~0.19 ms each beyond their two products at cuBLASLt's rate.
//   Epilogue: cuBLASLt's BGRADB epilogue on the dW product, which reads dout anyway, so dout
//       is not read a second time. The sums come out in floatX (cuBLASLt refused fp32 sums
//       beside a 16-bit D), then they are added to dbias. So a 16-bit dbias that was not zero
//       is rounded twice, where the kernels round it once. cuBLASLt also sums in its own order:
//       other bits than the kernels'. Where the heuristic has no algorithm for it, the Warps
//       kernel runs.
// V = 1 where OC or the pointer does not allow packs.
// (BiasGrad: kernel_options.h)
static const int BIAS_WARPS = 8;
template <class floatX, int V> __global__ void __launch_bounds__(32 * BIAS_WARPS)
column_sum_partial_warps(float* partial, const floatX* dout, int N, int OC, int rows_per_chunk) {
    __shared__ float sh[BIAS_WARPS * 32 * V];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, k = blockIdx.y;
    const int o0 = blockIdx.x * 32 * V, o = o0 + lane * V;
    float s[V];
    for (int j = 0; j < V; j++) s[j] = 0.0f;
    if (o < OC) {
        constexpr int U = 4;  // a warp's rows loaded before they are added (in row order), so that U loads a lane are in flight
        const int r1 = min(N, (k + 1) * rows_per_chunk);
        for (int n = k * rows_per_chunk + w; n < r1; n += U * BIAS_WARPS) {
            Pack<floatX, V> x[U];
            #pragma unroll
            for (int u = 0; u < U; u++)
                if (n + u * BIAS_WARPS < r1) x[u] = load_pack<V>(dout + (size_t)(n + u * BIAS_WARPS) * OC + o);
            #pragma unroll
            for (int u = 0; u < U; u++)
                if (n + u * BIAS_WARPS < r1)
                    for (int j = 0; j < V; j++) s[j] += to_f(x[u].v[j]);
        }
    }
    block_column_sums<V, BIAS_WARPS, 1>(sh, {s}, partial + (size_t)k * OC, 0, o0, OC);  // (common.h)
}
template <class floatX, int V> __global__ void column_sum_partial_columns(float* partial, const floatX* dout, int N, int OC, int rows_per_chunk) {
    const int o = (blockIdx.x * blockDim.x + threadIdx.x) * V, k = blockIdx.y;
    if (o >= OC) return;
    float s[V];
    for (int j = 0; j < V; j++) s[j] = 0.0f;
    const int r1 = min(N, (k + 1) * rows_per_chunk);
    for (int n = k * rows_per_chunk; n < r1; n++) {
        const Pack<floatX, V> x = load_pack<V>(dout + (size_t)n * OC + o);
        for (int j = 0; j < V; j++) s[j] += to_f(x.v[j]);
    }
    for (int j = 0; j < V; j++) partial[(size_t)k * OC + o + j] = s[j];
}
template <class floatX, int V> inline void column_sum_partial(const Ctx& ctx, float* partial, const floatX* dout, int N, int OC, int K, int rows) {
    if (ctx.kernels.bias_grad == BiasGrad::Columns)
        column_sum_partial_columns<floatX, V><<<dim3(ceil_div(OC, 128 * V), K), 128, 0, ctx.stream>>>(partial, dout, N, OC, rows);
    else
        column_sum_partial_warps<floatX, V><<<dim3(ceil_div(OC, 32 * V), K), 32 * BIAS_WARPS, 0, ctx.stream>>>(partial, dout, N, OC, rows);
    CUDA_LAUNCH_CHECK();
}
// dbias += the column sums of dout (N × OC), by the kernels above
template <class floatX> inline void bias_grad_kernels(const Ctx& ctx, floatX* dbias, const floatX* dout, int N, int OC) {
    const int rows = ctx.kernels.bias_grad == BiasGrad::Columns ? (int)ceil_div(N, 256) : std::max(128, (int)ceil_div(N, 1024));
    const int K = (int)ceil_div(N, rows);
    static Buf<float> partial_buf;
    float* partial = gpu_scratch(partial_buf, ctx, (size_t)K * OC);
    constexpr int P = PACK<floatX>;
    if (pack_width<floatX>(OC, {dout}) > 1) column_sum_partial<floatX, P>(ctx, partial, dout, N, OC, K, rows);
    else column_sum_partial<floatX, 1>(ctx, partial, dout, N, OC, K, rows);
    column_sum_add(ctx, dbias, partial, OC, K);
}

// The GELU goes into the epilogue when its aux matrix (rows of `rows` elements) is one cuBLASLt
// takes: rows a multiple of 8 and 16-byte aligned pointers (and a bias the epilogue can read).
// gelu_epilogue_width: the part the options and shapes alone decide (the memory plan asks it: model.h).
inline bool gelu_epilogue_width(const KernelOptions& o, size_t rows) { return o.gelu_fusion && rows % 8 == 0; }
template <class floatX> inline bool gelu_fusable(const Ctx& ctx, int rows, const floatX* aux, const floatX* D, const floatX* bias) {
    return gelu_epilogue_width(ctx.kernels, rows) && alignment_of(aux) >= 16 && alignment_of(D) >= 16 && (!bias || alignment_of(bias) >= 16);
}

template <class floatX>
inline void matmul_forward_cuda(const Ctx& ctx, floatX* out, const floatX* inp, const floatX* W, const floatX* bias, int N, int C, int OC) {
    if (gemm_wanted(ctx, false) && matmul_wgmma_forward(ctx, out, (floatX*)nullptr, inp, W, bias, N, C, OC)) return;
    cublaslt_gemm<floatX>(ctx, out, W, inp, bias, OC, N, C, true, false, C, C, OC, 0.0f);
}
template <class floatX>
inline void matmul_backward_cuda(const Ctx& ctx, floatX* dinp, floatX* dW, floatX* dbias, const floatX* dout, const floatX* inp, const floatX* W,
                                 int N, int C, int OC) {
    if (dinp && gemm_wanted(ctx, false) && matmul_wgmma_dinp(ctx, dinp, (const floatX*)nullptr, dout, W, N, C, OC, dbias))
        dbias = nullptr;  // (our GEMM added dout's column sums to it)
    else if (dinp)
        cublaslt_gemm<floatX>(ctx, dinp, W, dout, nullptr, C, N, OC, false, false, C, OC, C, 0.0f);
    if (dbias && ctx.kernels.bias_grad == BiasGrad::Epilogue) {  // dW and dbias's column sums in one product
        static Buf<floatX> sums_buf;
        floatX* sums = gpu_scratch(sums_buf, ctx, (size_t)OC);
        if (lt_matmul<floatX>(ctx, dW, inp, dout, nullptr, C, OC, N, false, true, C, OC, C, 1.0f, GeluEpi::None, nullptr, sums)) {
            add_bias_kernel<<<grid_for(OC), 256, 0, ctx.stream>>>(dbias, sums, OC, 1, OC);  // dbias += sums (one column)
            CUDA_LAUNCH_CHECK();
            return;
        }
    }
    cublaslt_gemm<floatX>(ctx, dW, inp, dout, nullptr, C, OC, N, false, true, C, OC, C, 1.0f);
    if (dbias) bias_grad_kernels(ctx, dbias, dout, N, OC);
}
#endif

// ----------------------------------------------------------------------------
// FP8 products (ctx.fp8): fp8.cuh has the formats, the scaling and why every product takes the
// "TN" form D[r, c] = Σ_k X[r, k]·Y[c, k].

// D = sx⁻¹·sy⁻¹·(X·Yᵀ) + bias (+ D if accumulate): X (R×K) and Y (Cc×K) FP8 codes, x_inv and
// y_inv their scales' inverses; exact fp8 products summed in fp32, D rounded to floatX once (the
// CPU reference: the codes decoded, then the fp32 loops of matmul_forward_cpu).
template <class floatX>
inline void fp8_linear_cpu(floatX* D, const uint8_t* X, Fp8Format fx, float x_inv, const uint8_t* Y, Fp8Format fy, float y_inv,
                           const floatX* bias, int R, int K, int Cc, bool accumulate) {
    float vx[256], vy[256];
    for (int c = 0; c < 256; c++) { vx[c] = fp8_decode((uint8_t)c, fx); vy[c] = fp8_decode((uint8_t)c, fy); }
    avec<float> xf((size_t)R * K), yf((size_t)Cc * K), prod((size_t)R * Cc);
    for (size_t i = 0; i < xf.size(); i++) xf[i] = vx[X[i]];
    for (size_t i = 0; i < yf.size(); i++) yf[i] = vy[Y[i]];
    matmul_forward_cpu(prod.data(), xf.data(), yf.data(), nullptr, R, K, Cc);
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            const size_t i = (size_t)r * Cc + c;
            float v = prod[i] * x_inv * y_inv;  // (powers of two: exact)
            if (accumulate) v += to_f(D[i]);
            if (bias) v += to_f(bias[c]);
            D[i] = from_f<floatX>(v);
        }
}

// FP8 products that cuBLASLt refuses (every algorithm its heuristic offered: on an H100 with
// cuBLASLt 13.1 it once refused them all, for a reason not yet known) are not fatal: their codes
// are dequantized (fp8.cuh: exact values in floatX) and multiplied as a floatX product. The same sums the
// FP8 kernels make (exact products of the same numbers, fp32 accumulation, in another order),
// without their speed, and with (R + Cc)·K elements of floatX as scratch. ctx.tuned->fp8_dequantize
// = true takes that path for every FP8 product: set where the trainer's one small product before
// its memory plan was refused (fp8_products_run, below: the plan then counts the scratch), or by
// gpucheck_ops to check the path on a GPU. A product refused without it (its shape alone) falls
// back too, with a note that its scratch is unplanned. ctx.tuned->fp8_dequantized_products counts
// the products that took the path, so that a check can say whether cuBLASLt's FP8 kernels ran.

// The op. sx, sy: the Fp8Scales fp8_quantize wrote (device memory on the GPU, where cuBLASLt
// reads the inverses). On the GPU: Dᵀ (Cc×R, column-major) = Y · Xᵀ, A = Y transposed and B = X,
// the TN form; the bias in the epilogue, or after it (cublaslt_gemm). kind: which of a linear
// layer's products this is; dW's accumulates into D. (C, OC: the layer's, for the profile's name.)
enum class Fp8Product { Forward, Dinp, DW };
template <class floatX>
inline void fp8_linear(const Ctx& ctx, floatX* D, const uint8_t* X, Fp8Format fx, const Fp8Scales* sx, const uint8_t* Y, Fp8Format fy,
                       const Fp8Scales* sy, const NoDeduce<floatX>* bias, int R, int K, int Cc, Fp8Product kind, int C, int OC) {
    static const char* names[] = {"forward", "backward dinp", "backward dW"};
    OpScope prof(ctx, 2.0 * R * K * Cc, 0, "matmul fp8 %s %d->%d", names[(int)kind], C, OC);  // (the dequantizations too, where they run)
    const bool accumulate = kind == Fp8Product::DW;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const float beta = accumulate ? 1.0f : 0.0f;
        const Fp8FastAccum fa = ctx.kernels.fp8_fast_accum;
        const bool fast = fa == Fp8FastAccum::All || (fa == Fp8FastAccum::Forward && kind == Fp8Product::Forward);
        const LtFp8 f{fy, fx, &sy->inv, &sx->inv, fast};
        if (!ctx.tuned->fp8_dequantize && cublaslt_gemm<floatX>(ctx, D, Y, X, bias, Cc, R, K, true, false, K, K, Cc, beta, GeluEpi::None, nullptr, &f))
            return;
        static bool noted = false;
        if (!ctx.tuned->fp8_dequantize && !noted) {  // (fp8_products_run accepted a small one: this shape alone is refused)
            noted = true;
            fprintf(stderr, "note: FP8 products that cuBLASLt has no algorithm for run as %s products of their dequantized values: "
                    "the same numbers, not FP8's speed, and scratch the memory plan does not count (a %dx%dx%d one refused)\n",
                    dtype_name<floatX>(), Cc, R, K);
        }
        static Buf<floatX> xd_buf, yd_buf;
        floatX* xd = op_scratch(xd_buf, ctx, (size_t)R * K);
        floatX* yd = op_scratch(yd_buf, ctx, (size_t)Cc * K);
        fp8_dequantize(ctx, xd, X, fx, sx, (size_t)R * K);
        fp8_dequantize(ctx, yd, Y, fy, sy, (size_t)Cc * K);
        cublaslt_gemm<floatX>(ctx, D, yd, xd, bias, Cc, R, K, true, false, K, K, Cc, beta);
        ctx.tuned->fp8_dequantized_products++;
        return;
    }
#endif
    fp8_linear_cpu(D, X, fx, sx->inv, Y, fy, sy->inv, bias, R, K, Cc, accumulate);
}

// Does cuBLASLt multiply FP8 operands here? The trainer asks once, before its memory plan, with
// one small product of the forward's kind (64×64×64, E4M3 × E4M3, scales in device memory as
// fp8_quantize leaves them). Where it is refused (cuBLASLt once refused every FP8 product on an
// H100: docs/kernels.md), ctx.tuned->fp8_dequantize sends every FP8 product through the fallback above from
// the start, a note says so, and the plan counts the fallback's scratch (model.h:
// gpt_fp8_scratch_bytes) instead of meeting it unplanned at the first product. (A shape refused
// later, the small one taken, still falls back, with the note above.) The CPU: always true.
template <class floatX> inline bool fp8_products_run(const Ctx& ctx) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        const int n = 64;
        Buf<uint8_t> x, y;
        Buf<Fp8Scales> scales;  // (zeros: any scale will do for asking; the product is dropped)
        Buf<floatX> d;
        x.alloc(ctx, (size_t)n * n); y.alloc(ctx, (size_t)n * n); scales.alloc(ctx, 2); d.alloc(ctx, (size_t)n * n);
        const LtFp8 f{Fp8Format::E4M3, Fp8Format::E4M3, &scales.data()[1].inv, &scales.data()[0].inv, false};
        const bool runs = cublaslt_gemm<floatX>(ctx, d.data(), y.data(), x.data(), nullptr, n, n, n, true, false, n, n, n, 0.0f,
                                           GeluEpi::None, nullptr, &f);
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // (before the buffers go)
        if (!runs) {
            ctx.tuned->fp8_dequantize = true;
            fprintf(stderr, "note: FP8 products that cuBLASLt has no algorithm for run as %s products of their dequantized values: "
                    "the same numbers, not FP8's speed; here it refused a %dx%dx%d one, so every FP8 product does, and the "
                    "memory plan counts their scratch\n", dtype_name<floatX>(), n, n, n);
        }
        return runs;
    }
#endif
    (void)ctx;
    return true;
}

inline void fp8_check_shape(int N, int C, int OC) {
    const std::string why = fp8_shape_problem(N, C, OC);
    if (!why.empty()) fatal("--precision fp8: %s", why.c_str());
}

// The forward's product once x's codes xq exist (made with target tx): W's quantization (and Wᵀ's,
// where ctx.fp8_kept says; w_scratch: its scales under current scaling), then out = x·Wᵀ + b.
template <class floatX>
inline void fp8_forward_product(const Ctx& ctx, floatX* out, const uint8_t* xq, const Fp8Target& tx, const floatX* W, const floatX* bias,
                                int N, int C, int OC, Fp8Scales* w_scratch) {
    static Buf<uint8_t> wq_buf;
    uint8_t* wq = op_scratch(wq_buf, ctx, (size_t)OC * C);
    const Fp8Target tw = fp8_target(ctx, FP8_W, w_scratch);
    fp8_quantize(ctx, wq, ctx.fp8_kept.wt, tw, W, OC, C, Fp8Format::E4M3);
    fp8_linear(ctx, out, xq, Fp8Format::E4M3, tx.scales, wq, Fp8Format::E4M3, tw.scales, bias, N, C, OC, Fp8Product::Forward, C, OC);
}
// out = x·Wᵀ + b with x and W in E4M3. Rows past a multiple of 16 (an inference's: a prompt of
// any length, hellaswag's rows; training's B·T is checked at start) are padded with zero rows,
// whose outputs are made in a scratch and dropped.
// Where ctx.fp8_kept says (model.h: linear_ctx), the same passes also write xᵀ and Wᵀ there, and
// the scales with them, for the backward: it then reads x and W no more.
template <class floatX>
inline void matmul_forward_fp8(const Ctx& ctx, floatX* out, const floatX* inp, const floatX* W, const floatX* bias, int N, int C, int OC,
                               Fp8Act inp_act) {
    const int Np = (int)ceil_div(N, 16) * 16;
    fp8_check_shape(Np, C, OC);
    static Buf<uint8_t> xq_buf;
    static Buf<Fp8Scales> scales_buf;
    static Buf<floatX> padded_buf;
    uint8_t* xq = op_scratch(xq_buf, ctx, (size_t)Np * C);
    const Fp8Kept& kept = ctx.fp8_kept;
    Fp8Scales* sc = kept.xt ? kept.scales : op_scratch(scales_buf, ctx, 2);
    const Fp8Target tx = fp8_target(ctx, FP8_X, &sc[0]);
    fp8_quantize(ctx, xq, kept.xt, tx, inp, N, C, Fp8Format::E4M3, nullptr, inp_act);
    if (Np > N) ctx_zero(ctx, xq + (size_t)N * C, (size_t)(Np - N) * C);
    floatX* dst = Np > N ? op_scratch(padded_buf, ctx, (size_t)Np * OC) : out;
    fp8_forward_product(ctx, dst, xq, tx, W, bias, Np, C, OC, &sc[1]);
    if (Np > N) ctx_copy(ctx, out, dst, (size_t)N * OC * sizeof(floatX));
}
// The same where x's codes xq and xᵀ (in ctx.fp8_kept) were made already, with delayed scaling's
// given scale: by the LayerNorm before the product (fp8.cuh: layernorm_forward_fp8).
template <class floatX>
inline void matmul_forward_fp8_codes(const Ctx& ctx, floatX* out, const uint8_t* xq, const floatX* W, const floatX* bias, int N, int C, int OC) {
    fp8_check_shape(N, C, OC);  // (N a multiple of 16: no padded rows)
    const Fp8Target tx = fp8_target(ctx, FP8_X, nullptr);
    if (!tx.given || !ctx.fp8_kept.xt) fatal("matmul_forward_fp8_codes: x's codes need a given scale and kept operands");
    fp8_forward_product(ctx, out, xq, tx, W, bias, N, C, OC, &ctx.fp8_kept.scales[1]);
}
// dinp = dout·W (written), dW += doutᵀ·x, dbias += Σ_n dout: dout in E5M2, W and x in E4M3.
// inp_act: x is GELU(inp) (fp8.cuh: Fp8Act); dout_pre: dout is GELU's backward of the given dout at dout_pre.
// Where the forward kept xᵀ and Wᵀ (ctx.fp8_kept) they are multiplied as they are, the same codes
// with the same scales as quantizing x and W again would give; inp and W are then not read.
template <class floatX>
inline void matmul_backward_fp8(const Ctx& ctx, floatX* dinp, floatX* dW, floatX* dbias, const floatX* dout, const floatX* inp, const floatX* W,
                                int N, int C, int OC, Fp8Act inp_act, const floatX* dout_pre) {
    fp8_check_shape(N, C, OC);
    static Buf<uint8_t> dq_buf, dqt_buf, wt_buf, xt_buf;
    static Buf<Fp8Scales> scales_buf;
    const Fp8Kept& kept = ctx.fp8_kept;
    if (!kept.xt && !inp) fatal("matmul_backward (fp8): no input given, and its forward kept no xᵀ");
    Fp8Scales* sc = op_scratch(scales_buf, ctx, 3);
    Fp8Scales* kept_sc = kept.xt ? kept.scales : sc + 1;  // x's and W's: the forward's, or [1] and [2] here
    uint8_t* dq = dinp ? op_scratch(dq_buf, ctx, (size_t)N * OC) : nullptr;  // dout (N×OC)
    uint8_t* dqt = dW ? op_scratch(dqt_buf, ctx, (size_t)N * OC) : nullptr;  // doutᵀ (OC×N)
    const Fp8Target td = fp8_target(ctx, FP8_DOUT, &sc[0]), tx = fp8_target(ctx, FP8_X, &kept_sc[0]), tw = fp8_target(ctx, FP8_W, &kept_sc[1]);
    const Fp8Act dout_act = dout_pre ? Fp8Act::GeluBackward : Fp8Act::None;
    fp8_quantize(ctx, dq, dqt, td, dout, N, OC, Fp8Format::E5M2, dbias, dout_act, dout_pre);  // (and dbias += dout's column sums)
    if (dinp) {
        uint8_t* wt = kept.wt;  // Wᵀ (C×OC)
        if (!wt) fp8_quantize(ctx, nullptr, wt = op_scratch(wt_buf, ctx, (size_t)OC * C), tw, W, OC, C, Fp8Format::E4M3);
        fp8_linear(ctx, dinp, dq, Fp8Format::E5M2, td.scales, wt, Fp8Format::E4M3, tw.scales, nullptr, N, OC, C, Fp8Product::Dinp, C, OC);
    }
    if (dW) {
        uint8_t* xt = kept.xt;  // xᵀ (C×N)
        if (!xt) fp8_quantize(ctx, nullptr, xt = op_scratch(xt_buf, ctx, (size_t)N * C), tx, inp, N, C, Fp8Format::E4M3, nullptr, inp_act);
        fp8_linear(ctx, dW, dqt, Fp8Format::E5M2, td.scales, xt, Fp8Format::E4M3, tx.scales, nullptr, OC, N, C, Fp8Product::DW, C, OC);
    }
}

// With gelu_pre: gelu_pre = inp·Wᵀ + b and out = gelu(gelu_pre) (see the header): in the
// cuBLASLt epilogue where it can be, else the matmul and then the GELU op.
// inp_gelu (FP8 alone): the layer's input is GELU(inp), made by the quantization (fp8.cuh: Fp8Act).
template <class floatX>
inline void matmul_forward(const Ctx& ctx, floatX* out, const floatX* inp, const floatX* W, const NoDeduce<floatX>* bias, int N, int C, int OC,
                           NoDeduce<floatX>* gelu_pre = nullptr, bool inp_gelu = false) {
    if (inp_gelu && !ctx.fp8) fatal("matmul_forward: inp_gelu is for FP8 products");
    if (ctx.fp8) {  // (the quantizations and the product are timed as ops of their own)
        matmul_forward_fp8<floatX>(ctx, gelu_pre ? gelu_pre : out, inp, W, bias, N, C, OC, inp_gelu ? Fp8Act::Gelu : Fp8Act::None);
        if (gelu_pre) gelu_forward(ctx, out, gelu_pre, (size_t)N * OC);
        return;
    }
    OpScope prof(ctx, 2.0 * N * C * OC, 0, "matmul%s forward %d->%d", gelu_pre ? "+gelu" : "", C, OC);
    if (gelu_pre) {
#ifdef LLMC_CUDA
        if (ctx.device == Device::CUDA && gemm_wanted(ctx, true) && matmul_wgmma_forward(ctx, out, gelu_pre, inp, W, bias, N, C, OC)) return;
        if (ctx.device == Device::CUDA && gelu_fusable(ctx, OC, gelu_pre, out, bias)) {
            cublaslt_gemm<floatX>(ctx, out, W, inp, bias, OC, N, C, true, false, C, C, OC, 0.0f, GeluEpi::Forward, gelu_pre);
            return;
        }
#endif
        matmul_forward<floatX>(ctx, gelu_pre, inp, W, bias, N, C, OC);
        gelu_forward(ctx, out, gelu_pre, (size_t)N * OC);
        return;
    }
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { matmul_forward_cuda<floatX>(ctx, out, inp, W, bias, N, C, OC); return; }
#endif
    F32View<floatX> o(out, (size_t)N * OC, false), x(inp, (size_t)N * C), w(W, (size_t)OC * C), b(bias, OC);
    matmul_forward_cpu(o.p, x.p, w.p, b.p, N, C, OC);
    o.store();
}
// The LM head's product with the classifier's part stats (--classifier-stats epilogue): logits =
// inp·Wᵀ, and for each row and each 128 columns the max and Σ exp of those below V, from our
// GEMM's epilogue (fused_classifier.cuh: classifier_from_parts reads them). Null where that does
// not run: not asked, not a GPU of compute capability 9.0, not bf16 or fp16. Then nothing ran.
template <class floatX>
inline const float* matmul_forward_logits(const Ctx& ctx, floatX* logits, const floatX* inp, const floatX* W, int N, int C, int Vp, int V) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA && ctx.kernels.classifier_stats_epilogue && !ctx.fp8 && gemm_runs<floatX>(ctx, C, Vp, N, {logits, inp, W}, true)) {
        OpScope prof(ctx, 2.0 * N * C * Vp, 0, "matmul forward %d->%d with the classifier's stats", C, Vp);
        static Buf<float> stats_buf;
        float* stats = gpu_scratch(stats_buf, ctx, (size_t)N * classifier_parts(Vp) * 2);
        if (matmul_wgmma_logits(ctx, logits, stats, inp, W, N, C, Vp, V)) return stats;
    }
#endif
    (void)ctx, (void)logits, (void)inp, (void)W, (void)N, (void)C, (void)Vp, (void)V;
    return nullptr;
}
// dinp = dout·W in fp32, whatever floatX is (the product that a GELU's gradient multiplies next)
template <class floatX>
inline void matmul_dinp_f32(const Ctx& ctx, float* dinp, const floatX* dout, const floatX* W, int N, int C, int OC) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (!lt_matmul<floatX, float>(ctx, dinp, W, dout, nullptr, C, N, OC, false, false, C, OC, C, 0.0f, GeluEpi::None, nullptr))
            fatal("cuBLASLt has no algorithm for a %dx%dx%d %s matmul with an fp32 result", C, N, OC, dtype_name<floatX>());
        return;
    }
#endif
    F32View<floatX> d(dout, (size_t)N * OC), w(W, (size_t)OC * C);
    matmul_backward_cpu(dinp, nullptr, nullptr, d.p, nullptr, w.p, N, C, OC);
}
// With gelu_pre: dinp = (dout·W) ⊙ gelu′(gelu_pre), the gradient through the GELU before this
// layer, rounded to floatX once: in the cuBLASLt epilogue (DGELU) where it can be, else (the rows or
// pointers do not allow it, or cuBLASLt has no algorithm for it) the product in fp32
// (matmul_dinp_f32) and then the GELU op. (Rounding the product to floatX first and then the GELU's
// result again would differ from the epilogue, and between devices whose sums run in another
// order, by up to two roundings: 1.1% seen in bf16 on an H100. FP8's products write T, so its
// path does round twice, within FP8's own, looser bound.)
// FP8 alone: inp_gelu, the layer's input is GELU(inp); dout_gelu_pre, its output gradient is
// dout ⊙ gelu′(dout_gelu_pre). The quantizations make both (fp8.cuh: Fp8Act), so neither is written.
template <class floatX>
inline void matmul_backward(const Ctx& ctx, floatX* dinp, floatX* dW, NoDeduce<floatX>* dbias, const floatX* dout, const floatX* inp, const floatX* W,
                            int N, int C, int OC, const NoDeduce<floatX>* gelu_pre = nullptr, bool inp_gelu = false,
                            const NoDeduce<floatX>* dout_gelu_pre = nullptr) {
    if ((inp_gelu || dout_gelu_pre) && !ctx.fp8) fatal("matmul_backward: inp_gelu and dout_gelu_pre are for FP8 products");
    if (ctx.fp8) {
        matmul_backward_fp8<floatX>(ctx, dinp, dW, dbias, dout, inp, W, N, C, OC, inp_gelu ? Fp8Act::Gelu : Fp8Act::None, dout_gelu_pre);
        if (gelu_pre && dinp) gelu_backward(ctx, dinp, gelu_pre, dinp, (size_t)N * C);
        return;
    }
    OpScope prof(ctx, ((dinp ? 2.0 : 0.0) + (dW ? 2.0 : 0.0)) * N * C * OC, 0, "matmul backward%s %d->%d",
                 gelu_pre && dinp ? "+dgelu" : "", C, OC);
    if (gelu_pre && dinp) {
#ifdef LLMC_CUDA
        if (ctx.device == Device::CUDA && gemm_wanted(ctx, true) && matmul_wgmma_dinp(ctx, dinp, gelu_pre, dout, W, N, C, OC, dbias)) {
            matmul_backward<floatX>(ctx, nullptr, dW, nullptr, dout, inp, W, N, C, OC);  // dW (our GEMM made dbias)
            return;
        }
        if (ctx.device == Device::CUDA && gelu_fusable(ctx, C, gelu_pre, dinp, (const floatX*)nullptr) &&
            lt_matmul<floatX>(ctx, dinp, W, dout, nullptr, C, N, OC, false, false, C, OC, C, 0.0f, GeluEpi::Backward, const_cast<floatX*>(gelu_pre))) {
            matmul_backward<floatX>(ctx, nullptr, dW, dbias, dout, inp, W, N, C, OC);  // dW, dbias
            return;
        }
#endif
        static Buf<float> prod_buf;
        float* prod = op_scratch(prod_buf, ctx, (size_t)N * C);
        matmul_dinp_f32<floatX>(ctx, prod, dout, W, N, C, OC);
        gelu_backward(ctx, dinp, gelu_pre, (const float*)prod, (size_t)N * C);
        matmul_backward<floatX>(ctx, nullptr, dW, dbias, dout, inp, W, N, C, OC);  // dW, dbias
        return;
    }
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { matmul_backward_cuda<floatX>(ctx, dinp, dW, dbias, dout, inp, W, N, C, OC); return; }
#endif
    F32View<floatX> di(dinp, (size_t)N * C, false), dw(dW, (size_t)OC * C), db(dbias, OC), d(dout, (size_t)N * OC),
        x(inp, (size_t)N * C), w(W, (size_t)OC * C);
    matmul_backward_cpu(di.p, dw.p, db.p, d.p, x.p, w.p, N, C, OC);
    di.store(); dw.store(); db.store();
}
