/*
gpucheck_ops — every CUDA op against its CPU reference op, on fresh random inputs at several
shapes (odd sizes included). On a GPU `make gpucheck` runs it (nvcc build); `make test` runs
the same file compiled by g++ against the CPU SIMT emulator (test/simt.h): build/simcheck_ops.

Each output the op writes is poisoned with NaN first; outputs it accumulates into start from the
same random values on both sides. Every op runs in fp32, bf16 and fp16 (the CPU's 16-bit op is
the fp32 op with each output rounded once). The error is max |gpu − cpu| / max(max |cpu|, 1e-6)
an output, against a bound an op:
  fp32: 1e-6 … 1e-5 elementwise, 1e-5 for reductions over C or K, 1e-4 for softmaxes;
  bf16: 1e-2 for outputs stored in bf16 (one ulp after one rounding on each side), fp32 outputs
        their fp32 bound × 10; fp16: 2.5e-3 (the same reasoning at 11 significant bits);
  exact (bound 0): variants that load the same values and run the same products (LayerNorm's,
        the classifier's, flash attention's), the half conversions, FP8's quantize kernels.
FP8's products are held to the CPU's emulation of them (1e-2); the wgmma products alone to a
host product, exactly; the wgmma flash attention to the CPU, and bit for bit across its layouts.
Why each bound is what it is: docs/verification.md ("The bounds").
Prints "ok"/"not ok" lines and a summary. `gpucheck_ops ops` runs all but the Hopper checks,
`gpucheck_ops wgmma` those but the chained backward's (`chain`), the persistent forward's
(`persistent`) and our GEMM's (`gemm`); ops' groups one at a time: fp32,
bf16, fp16 (every op in that dtype), flash (the half conversions and flash variants), fp8.
test/gpucheck.sh runs each group as a process of its own, so that an error that stops one (a
fatal CUDA or cuBLASLt error ends the process) costs only that group's checks.
*/
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>
#include "../llmc/model.h"
#include "../llmc/swiglu.cuh"
#include "../llmc/rope.cuh"
#ifdef __CUDACC__
#include <cuda_fp8.h>
#endif

static int n_pass = 0, n_fail = 0;
static Ctx cpu, gpu;
static Rng rng(1234);

// Random values, exact in bf16 when X is bf16 (so both sides see the same inputs).
template <class X> static std::vector<float> randn(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = to_f(from_f<X>(scale * rng.normal()));
    return v;
}

// a GPU copy of a host vector (or NaN-poisoned when poison), stored as X
template <class X> struct Dev {
    Buf<X> b;
    Dev(const std::vector<float>& h, bool poison = false) {
        b.alloc(gpu, h.size());
        std::vector<X> x = vec_cast<X>(poison ? std::vector<float>(h.size(), NAN) : h);
        ctx_copy(gpu, b.data(), x.data(), h.size() * sizeof(X));
    }
    X* p() { return b.data(); }
    std::vector<float> host() { std::vector<X> h(b.size()); ctx_copy(gpu, h.data(), b.data(), h.size() * sizeof(X)); return vec_widen(h); }
};
using DevF = Dev<float>;

// the largest |got − want| over the largest |want| (at least 1e-6); *finite: got has no inf or NaN
static double max_rel_diff(const std::vector<float>& want, const std::vector<float>& got, bool* finite = nullptr) {
    double err = 0, scale = 1e-6;
    bool fin = true;
    for (size_t i = 0; i < want.size(); i++) {
        if (!std::isfinite(got[i])) fin = false;
        err = std::max(err, (double)std::fabs(got[i] - want[i]));
        scale = std::max(scale, (double)std::fabs(want[i]));
    }
    if (finite) *finite = fin;
    return err / scale;
}
static void compare(const char* op, const char* what, const std::vector<float>& want, const std::vector<float>& got, double bound) {
    bool finite = true;
    double rel = max_rel_diff(want, got, &finite);
    bool ok = finite && rel <= bound;
    printf("%s - %s %s: rel err %.2e <= %.2g%s\n", ok ? "ok" : "not ok", op, what, rel, bound, finite ? "" : " (non-finite: unwritten?)");
    (ok ? n_pass : n_fail)++;
}

// The bound for an output stored as X (fp32 bound given) and for an fp32 side output.
template <class X> static double bx(double fp32_bound) {
    return std::is_same_v<X, float> ? fp32_bound : std::is_same_v<X, bf16> ? 1e-2 : 2.5e-3;
}
template <class X> static double bs(double fp32_bound) { return std::is_same_v<X, float> ? fp32_bound : 10 * fp32_bound; }

// used: the token ids are drawn from [0, used): few distinct ids give long runs of one token
// (several segments of the backward's, in dwte's partial sums). rows > 0: a vocabulary-parallel
// rank's encoder (tensor_parallel.h), its wte the vocabulary's rows [lo, lo + rows) and no wpe.
template <class X> static void check_encoder(int B, int T, int C, int V, int used = 0, int lo = 0, int rows = 0) {
    const bool part = rows > 0;
    if (!part) rows = V;
    char name[128]; snprintf(name, sizeof(name), "%s encoder B=%d T=%d C=%d tokens<%d%s", dtype_name<X>(), B, T, C, used ? used : V / 2,
                             part ? (" wte rows [" + std::to_string(lo) + ", " + std::to_string(lo + rows) + "), no wpe").c_str() : "");
    auto wte = randn<X>((size_t)rows * C), wpe = randn<X>((size_t)T * C), dout = randn<X>((size_t)B * T * C);
    std::vector<int> tok(B * T);
    for (auto& t : tok) t = (int)rng.below(used ? used : V / 2);  // repeats
    std::vector<X> out((size_t)B * T * C), cwte = vec_cast<X>(wte), cwpe = vec_cast<X>(wpe);
    encoder_forward(cpu, out.data(), tok.data(), cwte.data(), part ? nullptr : cwpe.data(), B, T, C, lo, rows);
    Buf<int> dtok; dtok.alloc(gpu, tok.size()); ctx_copy(gpu, dtok.data(), tok.data(), tok.size() * 4);
    Dev<X> gwte(wte), gwpe(wpe), gout(vec_widen(out), true);
    encoder_forward(gpu, gout.p(), dtok.data(), gwte.p(), part ? nullptr : gwpe.p(), B, T, C, lo, rows);
    compare(name, "forward", vec_widen(out), gout.host(), bx<X>(1e-6));
    auto dwte = randn<X>((size_t)rows * C), dwpe = randn<X>((size_t)T * C);
    Dev<X> gdwte(dwte), gdwpe(dwpe), gdout(dout);
    std::vector<X> cdwte = vec_cast<X>(dwte), cdwpe = vec_cast<X>(dwpe), cdout = vec_cast<X>(dout);
    encoder_backward(cpu, cdwte.data(), cdwpe.data(), cdout.data(), tok.data(), B, T, C, (size_t)rows, lo);
    encoder_backward(gpu, gdwte.p(), gdwpe.p(), gdout.p(), tok.data(), B, T, C, (size_t)rows, lo);
    compare(name, "dwte (+=)", vec_widen(cdwte), gdwte.host(), bx<X>(1e-5));
    compare(name, "dwpe (+=)", vec_widen(cdwpe), gdwpe.host(), bx<X>(1e-5));
}

static std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) { a.insert(a.end(), b.begin(), b.end()); return a; }

// LayerNorm, or with rms RMSNorm: the same functions with no mean, bias or bias gradient
// (layernorm.cuh), so every check below runs on both.
template <class X> static void check_layernorm(int N, int C, bool rms = false) {
    char name[80]; snprintf(name, sizeof(name), "%s %s N=%d C=%d", dtype_name<X>(), rms ? "rmsnorm" : "layernorm", N, C);
    auto x = randn<X>((size_t)N * C), w = randn<X>(C), b = randn<X>(C), dout = randn<X>((size_t)N * C);
    std::vector<X> out((size_t)N * C), cx = vec_cast<X>(x), cw = vec_cast<X>(w), cb = vec_cast<X>(b), cdout = vec_cast<X>(dout);
    std::vector<float> mean(N), rstd(N);
    float* const cmean = rms ? nullptr : mean.data();
    const X* const cbias = rms ? nullptr : cb.data();
    layernorm_forward(cpu, out.data(), cmean, rstd.data(), cx.data(), cw.data(), cbias, N, C);
    Dev<X> gx(x), gw(w), gb(b), gout(vec_widen(out), true), gdout(dout);
    DevF gmean(mean, true), grstd(rstd, true);
    float* const gm = rms ? nullptr : gmean.p();
    X* const gbias = rms ? nullptr : gb.p();
    layernorm_forward(gpu, gout.p(), gm, grstd.p(), gx.p(), gw.p(), gbias, N, C);
    compare(name, "forward", vec_widen(out), gout.host(), bx<X>(1e-5));
    if (!rms) compare(name, "mean", mean, gmean.host(), bs<X>(1e-5));
    compare(name, "rstd", rstd, grstd.host(), bs<X>(1e-5));
    auto dx = randn<X>((size_t)N * C), dw = randn<X>(C), db = randn<X>(C);
    Dev<X> gdx(dx), gdw(dw), gdb(db);
    std::vector<X> cdx = vec_cast<X>(dx), cdw = vec_cast<X>(dw), cdb = vec_cast<X>(db);
    X* const cdbias = rms ? nullptr : cdb.data();
    X* const gdbias = rms ? nullptr : gdb.p();
    layernorm_backward(cpu, cdx.data(), cdw.data(), cdbias, cdout.data(), cx.data(), cw.data(), cmean, rstd.data(), N, C);
    layernorm_backward(gpu, gdx.p(), gdw.p(), gdbias, gdout.p(), gx.p(), gw.p(), gm, grstd.p(), N, C);
    compare(name, "dinp (+=)", vec_widen(cdx), gdx.host(), bx<X>(1e-5));
    compare(name, "dw (+=)", vec_widen(cdw), gdw.host(), bx<X>(1e-5));
    compare(name, rms ? "db untouched" : "db (+=)", vec_widen(cdb), gdb.host(), rms ? 0.0 : bx<X>(1e-5));
    // the one-kernel backward and the two-kernel one sum the same rows in the same order: bit-identical
    Dev<X> gdx2(dx), gdw2(dw), gdb2(db);
    gpu.kernels.layernorm_fused = false;
    layernorm_backward(gpu, gdx2.p(), gdw2.p(), rms ? nullptr : gdb2.p(), gdout.p(), gx.p(), gw.p(), gm, grstd.p(), N, C);
    gpu.kernels.layernorm_fused = true;
    compare(name, "backward in one kernel vs two: dinp", gdx2.host(), gdx.host(), 0.0);
    compare(name, "backward in one kernel vs two: dw, db", concat(gdw2.host(), gdb2.host()), concat(gdw.host(), gdb.host()), 0.0);
    // ... and with dinp prefetched in the first pass (kernels.layernorm_prefetch: where the sums are in registers)
    Dev<X> gdx5(dx), gdw5(dw), gdb5(db);
    gpu.kernels.layernorm_prefetch = true;
    layernorm_backward(gpu, gdx5.p(), gdw5.p(), rms ? nullptr : gdb5.p(), gdout.p(), gx.p(), gw.p(), gm, grstd.p(), N, C);
    gpu.kernels.layernorm_prefetch = false;
    compare(name, "backward with dinp prefetched vs not: dinp, dw, db", concat(gdx5.host(), concat(gdw5.host(), gdb5.host())),
            concat(gdx.host(), concat(gdw.host(), gdb.host())), 0.0);
    // the residual add fused with the norm that reads it: res = x + y, out = norm(res)
    auto y = randn<X>((size_t)N * C);
    std::vector<X> res((size_t)N * C), cy = vec_cast<X>(y);
    residual_layernorm_forward(cpu, res.data(), out.data(), cmean, rstd.data(), cx.data(), cy.data(), cw.data(), cbias, N, C);
    Dev<X> gy(y), gres(vec_widen(res), true), gout2(vec_widen(out), true);
    DevF gmean2(mean, true), grstd2(rstd, true);
    residual_layernorm_forward(gpu, gres.p(), gout2.p(), rms ? nullptr : gmean2.p(), grstd2.p(), gx.p(), gy.p(), gw.p(), gbias, N, C);
    compare(name, "residual + forward: res", vec_widen(res), gres.host(), bx<X>(1e-6));
    compare(name, "residual + forward: out", vec_widen(out), gout2.host(), bx<X>(1e-5));
    compare(name, "residual + forward: mean, rstd", concat(rms ? std::vector<float>() : mean, rstd),
            concat(rms ? std::vector<float>() : gmean2.host(), grstd2.host()), bs<X>(1e-5));
    // ... and the same bits as the two ops apart (the sum is rounded to X once, then normalized alike)
    residual_forward(gpu, gres.p(), gx.p(), gy.p(), (size_t)N * C);
    layernorm_forward(gpu, gout.p(), gm, grstd.p(), gres.p(), gw.p(), gbias, N, C);
    compare(name, "residual + forward in one kernel vs two: out", gout.host(), gout2.host(), 0.0);
    compare(name, "residual + forward in one kernel vs two: mean, rstd", concat(rms ? std::vector<float>() : gmean.host(), grstd.host()),
            concat(rms ? std::vector<float>() : gmean2.host(), grstd2.host()), 0.0);
    if (rms) {  // the named entry points are these calls
        Dev<X> gout3(vec_widen(out), true), gres3(vec_widen(res), true), gdx3(dx), gdw3(dw);
        DevF grstd3(rstd, true);
        rmsnorm_forward(gpu, gout3.p(), grstd3.p(), gres.p(), gw.p(), N, C);
        compare(name, "rmsnorm_forward is the call with no mean and bias", gout3.host(), gout.host(), 0.0);
        residual_rmsnorm_forward(gpu, gres3.p(), gout3.p(), grstd3.p(), gx.p(), gy.p(), gw.p(), N, C);
        compare(name, "residual_rmsnorm_forward is the call with no mean and bias", concat(gres3.host(), gout3.host()),
                concat(gres.host(), gout2.host()), 0.0);
        rmsnorm_backward(gpu, gdx3.p(), gdw3.p(), gdout.p(), gx.p(), gw.p(), grstd.p(), N, C);
        Dev<X> gdx4(dx), gdw4(dw);
        layernorm_backward(gpu, gdx4.p(), gdw4.p(), (X*)nullptr, gdout.p(), gx.p(), gw.p(), (const float*)nullptr, grstd.p(), N, C);
        compare(name, "rmsnorm_backward is the call with no mean and bias", concat(gdx3.host(), gdw3.host()),
                concat(gdx4.host(), gdw4.host()), 0.0);
    }
}

// SwiGLU (swiglu.cuh): N rows of [a | b] (2H) → N × H, and the backward into [da | db].
template <class X> static void check_swiglu(size_t N, size_t H) {
    char name[64]; snprintf(name, sizeof(name), "%s swiglu N=%zu H=%zu", dtype_name<X>(), N, H);
    auto x = randn<X>(N * 2 * H, 2.0f), dout = randn<X>(N * H);
    std::vector<X> out(N * H), d(N * 2 * H), cx = vec_cast<X>(x), cdout = vec_cast<X>(dout);
    swiglu_forward(cpu, out.data(), cx.data(), N, H);
    Dev<X> gx(x), gdout(dout), gout(vec_widen(out), true), gd(vec_widen(d), true);
    swiglu_forward(gpu, gout.p(), gx.p(), N, H);
    compare(name, "forward", vec_widen(out), gout.host(), bx<X>(1e-5));
    swiglu_backward(cpu, d.data(), cx.data(), cdout.data(), N, H);
    swiglu_backward(gpu, gd.p(), gx.p(), gdout.p(), N, H);
    compare(name, "backward [da | db]", vec_widen(d), gd.host(), bx<X>(1e-5));
}

// RoPE (rope.cuh), in place on the first `heads` heads of rows of `stride` (the rest untouched),
// the table for positions off, off + 1, ... (a context-parallel rank's are not 0, 1, ...).
template <class X> static void check_rope(int B, int T, int heads, int hd, size_t stride, int off) {
    char name[96]; snprintf(name, sizeof(name), "%s rope B=%d T=%d heads=%d hd=%d stride=%zu", dtype_name<X>(), B, T, heads, hd, stride);
    std::vector<int> pos(T);
    for (int t = 0; t < T; t++) pos[t] = off + t;
    const std::vector<float> table = rope_table(pos.data(), T, hd, 10000.0);
    auto x = randn<X>((size_t)B * T * stride);
    std::vector<X> cx = vec_cast<X>(x);
    Dev<X> gx(x);
    DevF gtable(table);
    rope_forward(cpu, cx.data(), table.data(), B, T, stride, heads, hd);
    rope_forward(gpu, gx.p(), gtable.p(), B, T, stride, heads, hd);
    compare(name, "forward (in place)", vec_widen(cx), gx.host(), bx<X>(1e-6));
    rope_backward(cpu, cx.data(), table.data(), B, T, stride, heads, hd);
    rope_backward(gpu, gx.p(), gtable.p(), B, T, stride, heads, hd);
    compare(name, "backward (in place)", vec_widen(cx), gx.host(), bx<X>(1e-6));
}

// lt_epilogues = false: cuBLASLt computes plain products and the bias (and GELU) run in our kernels,
// the path taken where its heuristic has no algorithm with the epilogue (matmul.cuh). bg: how the
// backward's dbias column sum runs (matmul.cuh: BiasGrad).
// fp8 (bf16 only): the products in FP8 (ctx.fp8 on both sides; Fast: with cuBLASLt's fast
// accumulation, matmul.cuh's kernels.fp8_fast_accum; Dequantized: the fallback for FP8 products that
// cuBLASLt refuses, matmul.cuh's tuned->fp8_dequantize); N not a multiple of 16: the forward alone (an
// inference's rows, padded inside). On and Fast also check that cuBLASLt's FP8 kernels took every
// product (none fell back to the dequantized ones).
enum class Fp8Mode { Off, On, Fast, Dequantized };
template <class X> static void check_matmul(int N, int C, int OC, bool bias, bool lt_epilogues = true, BiasGrad bg = BiasGrad::Warps,
                                            Fp8Mode fp8 = Fp8Mode::Off) {
    gpu.kernels.lt_epilogues = lt_epilogues;
    gpu.kernels.bias_grad = bg;
    gpu.kernels.fp8_fast_accum = fp8 == Fp8Mode::Fast ? Fp8FastAccum::All : Fp8FastAccum::None;
    gpu.tuned->fp8_dequantize = fp8 == Fp8Mode::Dequantized;
    const long dequantized_before = gpu.tuned->fp8_dequantized_products;
    Ctx c = cpu, g = gpu;
    c.fp8 = g.fp8 = fp8 != Fp8Mode::Off;
    const char* bg_name = bg == BiasGrad::Warps ? "" : bg == BiasGrad::Columns ? ", dbias a thread per column" : ", dbias in the epilogue where cuBLASLt takes it";
    char name[192]; snprintf(name, sizeof(name), "%s matmul N=%d C=%d OC=%d%s%s%s%s", dtype_name<X>(), N, C, OC, bias ? " +bias" : "",
                             lt_epilogues ? "" : " (no cuBLASLt epilogues)", bias ? bg_name : "",
                             fp8 == Fp8Mode::On ? " in fp8" : fp8 == Fp8Mode::Fast ? " in fp8 (fast accumulation)"
                             : fp8 == Fp8Mode::Dequantized ? " in fp8, dequantized (the fallback)" : "");
    auto x = randn<X>((size_t)N * C), W = randn<X>((size_t)OC * C, 0.1f), bv = randn<X>(OC), dout = randn<X>((size_t)N * OC);
    std::vector<X> out((size_t)N * OC), cx = vec_cast<X>(x), cW = vec_cast<X>(W), cbv = vec_cast<X>(bv), cdout = vec_cast<X>(dout);
    matmul_forward(c, out.data(), cx.data(), cW.data(), bias ? cbv.data() : nullptr, N, C, OC);
    Dev<X> gx(x), gW(W), gb(bv), gout(vec_widen(out), true), gdout(dout);
    matmul_forward(g, gout.p(), gx.p(), gW.p(), bias ? gb.p() : nullptr, N, C, OC);
    compare(name, "forward", vec_widen(out), gout.host(), bx<X>(1e-5));
    if (fp8 == Fp8Mode::Off || N % 16 == 0) {
        std::vector<X> dx((size_t)N * C);
        auto dW = randn<X>((size_t)OC * C), db = randn<X>(OC);
        Dev<X> gdx(vec_widen(dx), true), gdW(dW), gdb(db);
        std::vector<X> cdW = vec_cast<X>(dW), cdb = vec_cast<X>(db);
        matmul_backward(c, dx.data(), cdW.data(), bias ? cdb.data() : nullptr, cdout.data(), cx.data(), cW.data(), N, C, OC);
        matmul_backward(g, gdx.p(), gdW.p(), bias ? gdb.p() : nullptr, gdout.p(), gx.p(), gW.p(), N, C, OC);
        compare(name, "dinp", vec_widen(dx), gdx.host(), bx<X>(1e-5));
        compare(name, "dW (+=)", vec_widen(cdW), gdW.host(), bx<X>(1e-5));
        if (bias) compare(name, "dbias (+=)", vec_widen(cdb), gdb.host(), bx<X>(1e-5));
        if (bias && bg == BiasGrad::Epilogue) {  // cuBLASLt's sums must be deterministic too: the same backward again
            Dev<X> gdx2(vec_widen(dx), true), gdW2(dW), gdb2(db);
            matmul_backward(g, gdx2.p(), gdW2.p(), gdb2.p(), gdout.p(), gx.p(), gW.p(), N, C, OC);
            compare(name, "dW again: the same bits", gdW.host(), gdW2.host(), 0.0);
            compare(name, "dbias again: the same bits", gdb.host(), gdb2.host(), 0.0);
        }
    }
    if (fp8 == Fp8Mode::On || fp8 == Fp8Mode::Fast) {
        const long fell_back = gpu.tuned->fp8_dequantized_products - dequantized_before;
        printf("%s - %s: cuBLASLt's FP8 kernels ran every product (%ld fell back to dequantized %s products)\n",
               fell_back ? "not ok" : "ok", name, fell_back, dtype_name<X>());
        (fell_back ? n_fail : n_pass)++;
    }
    gpu.kernels.lt_epilogues = true;
    gpu.kernels.bias_grad = BiasGrad::Warps;
    gpu.kernels.fp8_fast_accum = Fp8FastAccum::None;
    gpu.tuned->fp8_dequantize = false;
}

// Our GEMM on Hopper (--matmul-wgmma; matmul_hopper.cuh) against the CPU ops: the forward
// out = x·Wᵀ + b (with GELU: pre and gelu(pre)) and the input gradient dinp = dout·W (with GELU:
// through GELU's backward at the layer's pre-activation; W read as transposed B; and dbias +=
// dout's column sums from the same tiles). blocks: so few
// that each block runs several tiles and its ring of slots wraps across them. Shapes off the
// tiles' multiples test the zeros TMA copies past the edges (rows, k) and the stores' bounds
// (rows, columns). The kernel must run (the launch returns true): the CPU op is the only
// reference. A group of its own (gemm).
static const char* gemm_layout_name(int layout) {  // (--matmul-wgmma's: 1-3, then 1-3 in clusters of 2)
    static const char* names[] = {"", "", ", ping-pong", ", TMA stores", ", clusters of 2", ", ping-pong in clusters of 2", ", TMA stores in clusters of 2"};
    return names[layout];
}
template <class X> static void check_matmul_wgmma(int N, int C, int OC, bool bias, bool gelu, int blocks, int layout = 1) {
    char name[160]; snprintf(name, sizeof(name), "%s matmul by our GEMM N=%d C=%d OC=%d%s%s, %d blocks%s", dtype_name<X>(), N, C, OC,
                             bias ? " +bias" : "", gelu ? " +GELU" : "", blocks, gemm_layout_name(layout));
    if (!gpu_has_wgmma()) { printf("# skip: %s: not a compute capability 9.0 GPU\n", name); return; }
    auto x = randn<X>((size_t)N * C), W = randn<X>((size_t)OC * C, 0.1f), bv = randn<X>(OC);
    std::vector<X> out((size_t)N * OC), pre((size_t)N * OC), cx = vec_cast<X>(x), cW = vec_cast<X>(W), cb = vec_cast<X>(bv);
    matmul_forward(cpu, out.data(), cx.data(), cW.data(), bias ? cb.data() : nullptr, N, C, OC, gelu ? pre.data() : nullptr);
    Dev<X> gx(x), gW(W), gb(bv), gout(vec_widen(out), true), gpre(vec_widen(pre), true);
    Ctx g = gpu;
    g.kernels.matmul_wgmma = layout, g.kernels.matmul_wgmma_blocks = blocks;
    const bool ran = matmul_wgmma_forward(g, gout.p(), gelu ? gpre.p() : nullptr, gx.p(), gW.p(), bias ? gb.p() : nullptr, N, C, OC);
    printf("%s - %s: the kernel ran\n", ran ? "ok" : "not ok", name);
    (ran ? n_pass : n_fail)++;
    if (!ran) return;
    compare(name, gelu ? "gelu(x·Wᵀ+b)" : "x·Wᵀ+b", vec_widen(out), gout.host(), bx<X>(1e-5));
    if (gelu) compare(name, "pre-activation", vec_widen(pre), gpre.host(), bx<X>(1e-5));
    // a matrix that does not start 16-byte aligned (TMA needs it): the launch refuses, so cuBLASLt runs
    const bool misaligned = matmul_wgmma_forward(g, gout.p(), gelu ? gpre.p() : nullptr, gx.p() + 1, gW.p(), bias ? gb.p() : nullptr, N - 1, C, OC);
    printf("%s - %s: refused with its input 2 bytes off 16-byte alignment\n", misaligned ? "not ok" : "ok", name);
    (misaligned ? n_fail : n_pass)++;
}
// The LM head's product with the classifier's part stats (--classifier-stats epilogue;
// matmul_wgmma_logits): the logits against the CPU product; each part's stats against the CPU's
// from the same logits; then the losses and dlogits of classifier_from_parts against the
// one-pass CPU op. The max must be the same number. The sum of ≤ 128 exps runs in fp32, the CPU's
// in double: ≤ 128 roundings of 6e-8 and ex2.approx's 2 ulps a term, within 1e-5 of it. Every
// layout must write layout 1's bits (a part lies inside one thread's columns either way).
template <class X> static void check_matmul_wgmma_logits(int N, int C, int OC, int V, int blocks) {
    char name[160]; snprintf(name, sizeof(name), "%s LM head by our GEMM with the classifier's stats N=%d C=%d Vp=%d V=%d, %d blocks", dtype_name<X>(),
                             N, C, OC, V, blocks);
    if (!gpu_has_wgmma()) { printf("# skip: %s: not a compute capability 9.0 GPU\n", name); return; }
    const int parts = classifier_parts(OC);
    auto x = randn<X>((size_t)N * C), W = randn<X>((size_t)OC * C, 0.5f);
    std::vector<X> out((size_t)N * OC), cx = vec_cast<X>(x), cW = vec_cast<X>(W);
    matmul_forward(cpu, out.data(), cx.data(), cW.data(), nullptr, N, C, OC);
    Dev<X> gx(x), gW(W);
    std::vector<float> logits1, stats1;  // (layout 1's)
    for (int layout = 1; layout <= GEMM_LAYOUTS; layout++) {
        Dev<X> gout(std::vector<float>((size_t)N * OC), true);
        DevF gstats(std::vector<float>((size_t)N * parts * 2, NAN), true);
        Ctx g = gpu;
        g.kernels.matmul_wgmma = layout, g.kernels.matmul_wgmma_blocks = blocks;
        const bool ran = matmul_wgmma_logits(g, gout.p(), gstats.p(), gx.p(), gW.p(), N, C, OC, V);
        if (!ran) { printf("not ok - %s%s: the kernel ran\n", name, gemm_layout_name(layout)); n_fail++; return; }
        const std::vector<float> logits = gout.host(), stats = gstats.host();
        if (layout > 1) {  // (bit for bit: the empty parts' −∞ included)
            const bool same = logits == logits1 && memcmp(stats.data(), stats1.data(), stats.size() * sizeof(float)) == 0;
            printf("%s - %s%s: logits and stats, layout 1's bits\n", same ? "ok" : "not ok", name, gemm_layout_name(layout));
            (same ? n_pass : n_fail)++;
            continue;
        }
        logits1 = logits, stats1 = stats;
        compare(name, "logits x·Wᵀ", vec_widen(out), logits, bx<X>(1e-5));
        std::vector<X> glog = vec_cast<X>(logits);  // (the GPU's logits, as stored)
        std::vector<float> want((size_t)N * parts * 2);
        classifier_part_stats_cpu(glog.data(), want.data(), N, V, OC);
        int bad = 0;
        for (size_t i = 0; i < want.size(); i += 2) {
            const bool empty = want[i] == -INFINITY;
            bad += empty ? !(stats[i] == -INFINITY && stats[i + 1] == 0.0f) : !(stats[i] == want[i] && std::fabs(stats[i + 1] - want[i + 1]) <= 1e-5 * want[i + 1]);
        }
        printf("%s - %s: each part's max the same, its sum within 1e-5 (%d of %d parts off)\n", bad ? "not ok" : "ok", name, bad, N * parts);
        (bad ? n_fail : n_pass)++;
        // the classifier from these stats, against the one-pass CPU op on the same logits
        std::vector<int> tgt(N);
        for (auto& t : tgt) t = (int)rng.below(V);
        Buf<int> dt; dt.alloc(gpu, N); ctx_copy(gpu, dt.data(), tgt.data(), N * 4);
        std::vector<float> losses(N);
        DevF gloss(losses, true);
        fused_classifier(cpu, glog.data(), losses.data(), tgt.data(), N, V, OC, 1.0f / N);
        classifier_from_parts(gpu, gout.p(), gloss.p(), gstats.p(), dt.data(), N, V, OC, 1.0f / N);
        compare(name, "classifier from the stats: losses", losses, gloss.host(), bs<X>(1e-5));
        compare(name, "classifier from the stats: dlogits (in place)", vec_widen(glog), gout.host(), bx<X>(1e-4));
    }
}

// Our GEMM's GELU by a sigmoid (gelu.cuh: gelu_fast_of, gelu_backward_fast_of) against tanhf's,
// both on the device, at x from −12 to 12 in steps of 2^-10: within 4e-6·max(1, |x|). Either
// formula is a few fp32 ulps from GELU (the emulator, with exact exp2 and division: 4e-7). On a
// GPU ex2.approx and __fdividef add 2 ulps each to s, which the backward multiplies by terms of
// up to 3·|x|. 4e-6 is 32 ulps at 1: 500 times below bf16's half ulp, 100 times below fp16's.
__global__ void gelu_fast_kernel(float* out, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[4 * i] = gelu_of(x[i]), out[4 * i + 1] = gelu_fast_of(x[i]);
    out[4 * i + 2] = gelu_backward_of(x[i], 1.0f), out[4 * i + 3] = gelu_backward_fast_of(x[i], 1.0f);
}
static void check_gelu_fast() {
    std::vector<float> x;
    for (int i = -12 * 1024; i <= 12 * 1024; i++) x.push_back(i / 1024.0f);
    const int n = (int)x.size();
    DevF gx(x), gout(std::vector<float>(4 * x.size()), true);
    gelu_fast_kernel<<<(n + 255) / 256, 256, 0, gpu.stream>>>(gout.p(), gx.p(), n);
    CUDA_LAUNCH_CHECK();
    const std::vector<float> v = gout.host();
    double worst[2] = {0, 0};
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) worst[b] = std::max(worst[b], std::fabs((double)v[4 * i + 2 * b + 1] - v[4 * i + 2 * b]) / std::max(1.0f, std::fabs(x[i])));
    for (int b = 0; b < 2; b++) {
        const bool ok = worst[b] <= 4e-6;  // (NaN fails)
        printf("%s - GELU%s by a sigmoid against tanhf's, x in [-12, 12]: %.2e <= 4e-06 (abs. error over max(1, |x|))\n", ok ? "ok" : "not ok",
               b ? "'s backward" : "", worst[b]);
        (ok ? n_pass : n_fail)++;
    }
}
template <class X> static void check_matmul_wgmma_dinp(int N, int C, int OC, bool gelu, int blocks, int layout = 1) {
    char name[160]; snprintf(name, sizeof(name), "%s dinp by our GEMM N=%d C=%d OC=%d%s, %d blocks%s", dtype_name<X>(), N, C, OC,
                             gelu ? " through the GELU" : "", blocks, gemm_layout_name(layout));
    if (!gpu_has_wgmma()) { printf("# skip: %s: not a compute capability 9.0 GPU\n", name); return; }
    auto x = randn<X>((size_t)N * C), W = randn<X>((size_t)OC * C, 0.1f), dout = randn<X>((size_t)N * OC), pre_in = randn<X>((size_t)N * C);
    auto db = randn<X>(OC);  // (dbias += dout's column sums, made by the producer's warps from the tiles of dout)
    std::vector<X> dx((size_t)N * C), dW((size_t)OC * C), cx = vec_cast<X>(x), cW = vec_cast<X>(W), cdout = vec_cast<X>(dout), cpre = vec_cast<X>(pre_in),
        cdb = vec_cast<X>(db);
    matmul_backward(cpu, dx.data(), dW.data(), cdb.data(), cdout.data(), cx.data(), cW.data(), N, C, OC, gelu ? cpre.data() : nullptr);
    Dev<X> gW(W), gdout(dout), gpre(pre_in), gdx(vec_widen(dx), true), gdb(db);
    Ctx g = gpu;
    g.kernels.matmul_wgmma = layout, g.kernels.matmul_wgmma_blocks = blocks;
    const bool ran = matmul_wgmma_dinp(g, gdx.p(), gelu ? gpre.p() : nullptr, gdout.p(), gW.p(), N, C, OC, gdb.p());
    printf("%s - %s: the kernel ran\n", ran ? "ok" : "not ok", name);
    (ran ? n_pass : n_fail)++;
    if (!ran) return;
    compare(name, gelu ? "(dout·W)·gelu'(pre)" : "dout·W", vec_widen(dx), gdx.host(), bx<X>(1e-5));
    compare(name, "dbias (+=)", vec_widen(cdb), gdb.host(), bx<X>(1e-5));
}

// The MLP's matmul with its GELU (matmul.cuh): forward out = gelu(pre), pre = x·Wᵀ + b; backward
// dinp through the GELU of the layer's input. fused: cuBLASLt's GELU epilogues where the shape
// allows (rows % 8 == 0), else the separate GELU kernel, which `fused = false` forces.
template <class X> static void check_matmul_gelu(int N, int C, int OC, bool fused, bool lt_epilogues = true) {
    gpu.kernels.gelu_fusion = fused;
    gpu.kernels.lt_epilogues = lt_epilogues;
    const bool in_epilogue = fused && OC % 8 == 0 && C % 8 == 0;
    char name[128]; snprintf(name, sizeof(name), "%s matmul+gelu N=%d C=%d OC=%d (%s)", dtype_name<X>(), N, C, OC,
                             !in_epilogue ? "separate GELU kernel"
                             : lt_epilogues ? "GELU in the cuBLASLt epilogue" : "epilogue asked for, none found: GELU kernel after");
    auto x = randn<X>((size_t)N * C), W = randn<X>((size_t)OC * C, 0.1f), bv = randn<X>(OC), dout = randn<X>((size_t)N * OC);
    auto pre_in = randn<X>((size_t)N * C);  // backward: the pre-GELU values of this layer's input
    std::vector<X> out((size_t)N * OC), pre((size_t)N * OC), cx = vec_cast<X>(x), cW = vec_cast<X>(W), cb = vec_cast<X>(bv),
        cdout = vec_cast<X>(dout), cpre_in = vec_cast<X>(pre_in);
    matmul_forward(cpu, out.data(), cx.data(), cW.data(), cb.data(), N, C, OC, pre.data());
    Dev<X> gx(x), gW(W), gb(bv), gout(vec_widen(out), true), gpre(vec_widen(pre), true), gdout(dout), gpre_in(pre_in);
    matmul_forward(gpu, gout.p(), gx.p(), gW.p(), gb.p(), N, C, OC, gpre.p());
    compare(name, "forward gelu(x·Wᵀ+b)", vec_widen(out), gout.host(), bx<X>(1e-5));
    compare(name, "forward pre-activation", vec_widen(pre), gpre.host(), bx<X>(1e-5));
    std::vector<X> dx((size_t)N * C);
    auto dW = randn<X>((size_t)OC * C), db = randn<X>(OC);
    Dev<X> gdx(vec_widen(dx), true), gdW(dW), gdb(db);
    std::vector<X> cdW = vec_cast<X>(dW), cdb = vec_cast<X>(db);
    matmul_backward(cpu, dx.data(), cdW.data(), cdb.data(), cdout.data(), cx.data(), cW.data(), N, C, OC, cpre_in.data());
    matmul_backward(gpu, gdx.p(), gdW.p(), gdb.p(), gdout.p(), gx.p(), gW.p(), N, C, OC, gpre_in.p());
    compare(name, "dinp through the GELU", vec_widen(dx), gdx.host(), bx<X>(1e-5));
    compare(name, "dW (+=)", vec_widen(cdW), gdW.host(), bx<X>(1e-5));
    compare(name, "dbias (+=)", vec_widen(cdb), gdb.host(), bx<X>(1e-5));
    gpu.kernels.gelu_fusion = true;
    gpu.kernels.lt_epilogues = true;
}

static const char* fused_words(int B, int T, int NKV) {  // " (flash, wgmma, fused backward, 2 splits)"
    static char w[128];
    const int S = flash_fused_grid(gpu.kernels, B, NKV, T).S;
    snprintf(w, sizeof(w), " (flash, wgmma, fused backward, %d %s%s%s)", S, gpu.kernels.flash_dq_chain ? "key blocks chained" : "split", S > 1 && !gpu.kernels.flash_dq_chain ? "s" : "",
             !gpu.kernels.flash_backward_producer ? "" : gpu.kernels.flash_backward_tma ? ", a producer warpgroup in the backward, swizzled tiles by TMA"
                                                         : ", a producer warpgroup in the backward");
    return w;
}
// the words for the forward with a producer warpgroup or key tiles of 128, as gpu.kernels sets them
static const char* producer_words() {
    const KernelOptions& k = gpu.kernels;
    if (!k.flash_forward_producer) return " (flash, wgmma, 2 warpgroups, 128 keys a tile in the forward)";
    if (k.flash_forward_keys == 128)
        return k.flash_forward_pingpong ? " (flash, wgmma, a producer warpgroup in the forward, 128 keys a tile, ping-pong)"
                                        : " (flash, wgmma, a producer warpgroup in the forward, 128 keys a tile)";
    if (k.flash_forward_groups == 3) return " (flash, wgmma, a producer warpgroup and 3 computing warpgroups in the forward)";
    return k.flash_forward_pingpong ? " (flash, wgmma, a producer warpgroup in the forward, ping-pong)" : " (flash, wgmma, a producer warpgroup in the forward)";
}
// An attention sink, as trained models have: every query of a group shares a direction u with its
// key at position 0 (q += u, k₀ = u), so key 0 scores about √hs above the others (≈ 8 to their
// ≈ N(0, 2)) and most rows find their max in the first key tile and keep it. The flash forwards
// then skip the rescale of O in most later tiles (flash_attention.cuh: rescale_rows).
template <class X> static void add_sink(std::vector<float>& qkv, int B, int T, const QKVLayout& L) {
    const size_t W = L.row();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < L.NH; h += L.group()) {
            const std::vector<float> u = randn<X>(L.hs);
            for (int d = 0; d < L.hs; d++) {
                qkv[(size_t)b * T * W + L.k(h) + d] = u[d];
                for (int t = 0; t < T; t++)
                    for (int g = h; g < h + L.group(); g++) {
                        float& q = qkv[((size_t)b * T + t) * W + (size_t)g * L.hs + d];
                        q = to_f(from_f<X>(q + u[d]));
                    }
            }
        }
}
// NKV < NH: grouped-query attention (the dK/dV pass sums over each key/value head's group).
// sink: with add_sink's inputs.
template <class X> static void check_attention(int B, int T, int C, int NH, int NKV, bool flash = true, bool sink = false) {
    gpu.kernels.flash = flash;  // bf16 with head size 64/128: the tensor-core kernels, unless told not to
    char name[256]; snprintf(name, sizeof(name), "%s attention B=%d T=%d C=%d NH=%d NKV=%d%s", dtype_name<X>(), B, T, C, NH, NKV,
                             !use_flash<X>(gpu.kernels, C, NH) ? "" : flash_fused_backward_runs(gpu.kernels, C / NH) ? fused_words(B, T, NKV)
                             : gpu.kernels.flash_wgmma && gpu_has_wgmma() && (gpu.kernels.flash_forward_producer || gpu.kernels.flash_forward_keys == 128) ? producer_words()
                             : gpu.kernels.flash_wgmma && gpu_has_wgmma() ? (gpu.kernels.flash_wgmma_groups == 2 ?
                             " (flash, wgmma, 2 warpgroups)" : " (flash, wgmma, 1 warpgroup)") : " (flash, tensor cores)");
    if (gpu.kernels.flash_swizzle && gpu.kernels.flash_wgmma && use_flash<X>(gpu.kernels, C, NH))
        strcat(name, gpu.kernels.flash_tma ? ", swizzled tiles by TMA in the forward" : ", swizzled tiles in the forward");
    if (sink) strcat(name, ", an attention sink");
    const size_t W = QKVLayout(C, NH, NKV).row();
    auto qkv = randn<X>((size_t)B * T * W), dout = randn<X>((size_t)B * T * C);
    if (sink) add_sink<X>(qkv, B, T, QKVLayout(C, NH, NKV));
    std::vector<X> out((size_t)B * T * C), dqkv((size_t)B * T * W), cqkv = vec_cast<X>(qkv), cdout = vec_cast<X>(dout);
    std::vector<float> lse((size_t)B * NH * T);
    attention_forward(cpu, out.data(), lse.data(), cqkv.data(), B, T, C, NH, NKV);
    Dev<X> gqkv(qkv), gout(vec_widen(out), true), gdout(dout), gdqkv(vec_widen(dqkv), true);
    DevF glse(lse, true);
    attention_forward(gpu, gout.p(), glse.p(), gqkv.p(), B, T, C, NH, NKV);
    compare(name, "forward", vec_widen(out), gout.host(), bx<X>(1e-4));
    compare(name, "lse", lse, glse.host(), bs<X>(1e-5));
    attention_backward(cpu, dqkv.data(), cdout.data(), cqkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
    attention_backward(gpu, gdqkv.p(), gdout.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, NKV);
    compare(name, "dqkv", vec_widen(dqkv), gdqkv.host(), bx<X>(1e-4));
    gpu.kernels.flash = true;
}

// Ring attention's pieces (context_parallel.h): a block of Tk borrowed keys merged into the running
// fp32 output and lse of query rows [q0, q0 + nq) (accumulating: they start from random values
// on both sides, lse around the magnitude of a real one), its backward accumulating into dq (the
// q columns of an fp32 (B, T, 3C)) and an fp32 dk, dv block; the row dots D; copy_rows.
// Bounds: fp32 softmax sums in another order (1e-4, as attention), ×10 for bf16 inputs (the
// outputs are fp32 on both sides).
template <class X> static void check_attention_block(int B, int T, int Tk, int C, int NH, int NKV, int q0, int nq, int k0, int nk) {
    char name[160]; snprintf(name, sizeof(name), "%s attention block B=%d T=%d Tk=%d C=%d NH=%d NKV=%d q[%d,+%d) k[%d,+%d)%s", dtype_name<X>(), B,
                             T, Tk, C, NH, NKV, q0, nq, k0, nk, use_flash<X>(gpu.kernels, C, NH) ? " (tensor cores)" : "");
    const QKVLayout L(C, NH, NKV);
    const size_t W = L.row(), KV2 = 2 * (size_t)L.kv();
    auto qkv = randn<X>((size_t)B * T * W), kv = randn<X>((size_t)B * Tk * KV2), dout = randn<X>((size_t)B * T * C);
    auto out = randn<X>((size_t)B * T * C), o = randn<float>((size_t)B * T * C), lse = randn<float>((size_t)B * NH * T);
    for (auto& l : lse) l = 2.0f + l;  // (a log-sum-exp over some keys)
    std::vector<X> cqkv = vec_cast<X>(qkv), ckv = vec_cast<X>(kv), cdout = vec_cast<X>(dout), cout_ = vec_cast<X>(out);
    std::vector<float> co = o, clse = lse;
    attention_block_forward(cpu, co.data(), clse.data(), cqkv.data(), ckv.data(), B, T, Tk, C, NH, NKV, q0, nq, k0, nk);
    Dev<X> gqkv(qkv), gkv(kv), gdout(dout), gout(out);
    DevF go(o), glse(lse);
    attention_block_forward(gpu, go.p(), glse.p(), gqkv.p(), gkv.p(), B, T, Tk, C, NH, NKV, q0, nq, k0, nk);
    // The tensor-core kernels (16-bit, head size 64 or 128) round P and dS to X before their
    // products, as flash attention does: the bound of an X output (bx) for o, dq, dk, dv; the
    // warp-per-row kernels keep fp32 throughout: the fp32 side-output bound (bs)
    const double sums = use_flash<X>(gpu.kernels, C, NH) ? bx<X>(1e-4) : bs<X>(1e-4);
    compare(name, "forward o (merged)", co, go.host(), sums);
    compare(name, "forward lse (merged)", clse, glse.host(), bs<X>(1e-5));
    std::vector<float> D((size_t)B * NH * T);
    attention_row_dots(cpu, D.data(), cdout.data(), cout_.data(), B, T, C, NH);
    DevF gD(D, true);
    attention_row_dots(gpu, gD.p(), gdout.p(), gout.p(), B, T, C, NH);
    compare(name, "row dots D", D, gD.host(), bs<X>(1e-5));
    auto dx = randn<float>((size_t)B * T * W), dkv = randn<float>((size_t)B * Tk * KV2);
    std::vector<float> cdx = dx, cdkv = dkv;
    attention_block_backward(cpu, cdx.data(), cdkv.data(), cdout.data(), cqkv.data(), ckv.data(), clse.data(), D.data(), B, T, Tk, C, NH,
                             NKV, q0, nq, k0, nk);
    DevF gdx(dx), gdkv(dkv);
    attention_block_backward(gpu, gdx.p(), gdkv.p(), gdout.p(), gqkv.p(), gkv.p(), glse.p(), gD.p(), B, T, Tk, C, NH, NKV, q0, nq, k0, nk);
    compare(name, "backward dq (+=)", cdx, gdx.host(), sums);
    compare(name, "backward dk, dv (+=)", cdkv, gdkv.host(), sums);
    // copy_rows: k, v out of qkv (X to X), and X rows added into fp32 rows of another pitch
    std::vector<X> ck((size_t)B * T * KV2);
    copy_rows(cpu, ck.data(), KV2, cqkv.data() + C, W, KV2, (size_t)B * T);
    Dev<X> gk(std::vector<float>(ck.size()), true);
    copy_rows(gpu, gk.p(), KV2, gqkv.p() + C, W, KV2, (size_t)B * T);
    compare(name, "copy_rows k, v", vec_widen(ck), gk.host(), 0);
    std::vector<float> cadd = dx;
    copy_rows(cpu, cadd.data() + C, W, ck.data(), KV2, KV2, (size_t)B * T, true);
    DevF gadd(dx);
    copy_rows(gpu, gadd.p() + C, W, gk.p(), KV2, KV2, (size_t)B * T, true);
    compare(name, "copy_rows added", cadd, gadd.host(), 1e-7);
}

// bf16 attention forward and backward on the GPU with the switches as they are: out, lse, dqkv
static void attention_outputs(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH, int NKV,
                              std::vector<float>* res) {
    Dev<bf16> gqkv(qkv), gout(dout, true), gdout(dout), gdqkv(qkv, true);
    DevF glse(std::vector<float>((size_t)B * NH * T), true);
    attention_forward(gpu, gout.p(), glse.p(), gqkv.p(), B, T, C, NH, NKV);
    attention_backward(gpu, gdqkv.p(), gdout.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, NKV);
    res[0] = gout.host(); res[1] = glse.host(); res[2] = gdqkv.host();
}
static void compare_bits(const char* name, const std::vector<float>* want, const std::vector<float>* got) {
    compare(name, "forward", want[0], got[0], 0.0);
    compare(name, "lse", want[1], got[1], 0.0);
    compare(name, "dqkv", want[2], got[2], 0.0);
}

// The flash kernels' variants — B fragments by ldmatrix or by each lane's own loads; tiles staged
// by cp.async while the previous one is used, or through registers before their use; 16 or 32
// rows per warp (query rows in the forward and the dQ pass, keys in the dK/dV pass) — load the
// same values and run the same mma sequence for every row: the outputs must be bit-identical
// (bound 0) to those of the default (ldmatrix, cp.async, 16 rows).
static void check_flash_variants(int B, int T, int C, int NH, int NKV) {
    auto qkv = randn<bf16>((size_t)B * T * QKVLayout(C, NH, NKV).row()), dout = randn<bf16>((size_t)B * T * C);
    auto run = [&](bool ldsm, bool async, std::vector<float>* res, int rows = 16, int dq_rows = 16, int dkv_keys = 16) {
        gpu.kernels.flash_ldmatrix = ldsm; gpu.kernels.flash_async = async; gpu.kernels.flash_forward_rows = rows; gpu.kernels.flash_dq_rows = dq_rows;
        gpu.kernels.flash_dkv_keys = dkv_keys;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, res);
        gpu.kernels.flash_ldmatrix = gpu.kernels.flash_async = true;
        gpu.kernels.flash_forward_rows = gpu.kernels.flash_dq_rows = gpu.kernels.flash_dkv_keys = 16;
    };
    std::vector<float> want[3], got[3];
    run(true, true, want);
    const struct { bool ldsm, async; int rows, dq_rows, dkv_keys; const char* what; } variants[] = {
        {true, false, 16, 16, 16, "ldmatrix, tiles staged through registers"}, {false, true, 16, 16, 16, "per-lane loads, cp.async"},
        {false, false, 16, 16, 16, "per-lane loads, tiles staged through registers"},
        {true, true, 32, 16, 16, "forward with 32 query rows per warp"}, {true, true, 16, 32, 16, "dQ pass with 32 query rows per warp"},
        {false, false, 16, 32, 16, "dQ pass with 32 query rows per warp, per-lane loads, through registers"},
        {true, true, 16, 16, 32, "dK/dV pass with 32 keys per warp"},
        {false, false, 16, 16, 32, "dK/dV pass with 32 keys per warp, per-lane loads, through registers"}};
    for (const auto& v : variants) {
        if ((v.rows == 32 || v.dq_rows == 32 || v.dkv_keys == 32) && C / NH != 64) continue;  // (head size 64 only)
        run(v.ldsm, v.async, got, v.rows, v.dq_rows, v.dkv_keys);
        char name[180]; snprintf(name, sizeof(name), "bf16 flash attention B=%d T=%d C=%d NH=%d NKV=%d, %s vs ldmatrix + cp.async", B, T, C, NH,
                                 NKV, v.what);
        compare_bits(name, want, got);
    }
}

// The wgmma products the flash kernels are made of, alone, on one warpgroup: c = A·Mᵀ with A in
// registers and with A from shared memory (K-major operands: the descriptor's LBO and SBO for
// K-major), and acc = P·V (V MN-major: the transpose bit and the other reading of LBO and SBO).
// Where the attention checks fail on a GPU, these say which reading of the PTX ISA is wrong.
template <int D>
__global__ void wgmma_products_kernel(float* amt, float* amt_ss, float* pv, const bf16* A, const bf16* M, const bf16* P, const bf16* V) {
    DYNAMIC_SHARED(bf16, tiles);  // M, A and V as 64-row tiles in the core-matrix layout
    stage_tile_cm<D, 128>(tiles, M, D, 0, 64, threadIdx.x);
    stage_tile_cm<D, 128>(tiles + 64 * D, A, D, 0, 64, threadIdx.x);
    stage_tile_cm<D, 128>(tiles + 128 * D, V, D, 0, 64, threadIdx.x);
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    auto store = [&](float* dst, int n, const float (*c)[4]) {  // the C layout: warp w rows 16w + g (+8), n-tile j
        for (int j = 0; j < n / 8; j++)
            for (int e = 0; e < 4; e++) dst[(16 * w + g + 8 * (e / 2)) * n + 8 * j + 2 * t + e % 2] = c[j][e];
    };
    uint32_t af[D / 16][4], pf[4][4];
    for (int kc = 0; kc < D / 16; kc++) load_a_rows(af[kc], A, D, 16 * w, 64, 16 * kc);
    for (int kc = 0; kc < 4; kc++) load_a_rows(pf[kc], P, 64, 16 * w, 64, 16 * kc);
    float c[8][4], acc[D / 8][4];
    wgmma_issue_amt<D>(c, af, tiles);
    wgmma_complete();
    wgmma_hold<32>(&c[0][0]);
    store(amt, 64, c);
    wgmma_issue_ss<D>(c, tiles + 64 * D, tiles);
    wgmma_complete();
    wgmma_hold<32>(&c[0][0]);
    store(amt_ss, 64, c);
    for (int j = 0; j < D / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    wgmma_issue_pm<D>(acc, pf, tiles + 128 * D);
    wgmma_complete();
    wgmma_hold<D / 2>(&acc[0][0]);
    store(pv, D, acc);
}
// The fused backward's dQ finish (red_sum_f32x2) adds as red_add_f32x2 does: x then red(+y) at
// one place, x then red_sum(y) at another, for pairs of every kind (subnormal, zero, large, mixed
// signs). red_sum assumes red's f32 add rounds to nearest and flushes subnormals: on a GPU this
// is the check of that assumption. Each thread owns its pair, as each dQ element has one owner.
__global__ void red_sum_kernel(float* by_red, float* by_sum, const float* x, const float* y, int n) {
    const int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 1 >= n) return;
    by_red[i] = x[i], by_red[i + 1] = x[i + 1], by_sum[i] = x[i], by_sum[i + 1] = x[i + 1];
    red_add_f32x2(by_red + i, y[i], y[i + 1]);
    const float2 v = red_sum_f32x2(by_sum + i, y[i], y[i + 1]);
    by_sum[i] = v.x, by_sum[i + 1] = v.y;
}
static void check_red_sum() {
    if (!gpu_has_wgmma()) { printf("# skip: dQ's finishing add against red: not a compute capability 9.0 GPU\n"); return; }
    std::vector<float> x, y;
    const float kinds[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-39f, -3e-39f, 1.17549435e-38f, -1.17549435e-38f, 1e-30f, 1.0f, -1.0f, 1.5e38f, -1.5e38f};
    for (float a : kinds)
        for (float b : kinds) x.push_back(a), y.push_back(b);
    while (x.size() < 20000) {  // random pairs over many binades, half of them near the subnormal range
        const bool tiny = rng.uniform() < 0.5;
        auto r = [&] { return (float)((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(1.0 + rng.uniform(), (int)rng.below(60) - (tiny ? 150 : 30))); };
        x.push_back(r()), y.push_back(r());
    }
    const int n = (int)x.size();
    DevF gx(x), gy(y), by_red(x, true), by_sum(x, true);
    red_sum_kernel<<<(n / 2 + 255) / 256, 256, 0, gpu.stream>>>(by_red.p(), by_sum.p(), gx.p(), gy.p(), n);
    CUDA_LAUNCH_CHECK();
    const std::vector<float> want = by_red.host(), got = by_sum.host();
    int diff = 0;
    for (int i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) && diff++ < 5) printf("#   %.9g + %.9g: red %.9g, red_sum %.9g\n", x[i], y[i], want[i], got[i]);
    printf("%s - dQ's finishing add (red_sum_f32x2) gives red.global.add's bits on %d pairs (subnormals, zeros, large; %d differ)\n",
           diff ? "not ok" : "ok", n, diff);
    (diff ? n_fail : n_pass)++;
}
// Inputs are multiples of 1/2 in [−4, 4]: every product and every partial sum (|·| ≤ 4·4·128) is
// exact in fp32, whatever the tensor cores' order: bound 0.
template <int D> static void check_wgmma_products() {
    if (!gpu_has_wgmma()) { printf("# skip: wgmma products (head size %d): not a compute capability 9.0 GPU\n", D); return; }
    auto vals = [&](size_t n) {
        std::vector<float> v(n);
        for (auto& x : v) x = std::round(rng.normal() * 3.0f) * 0.5f, x = std::max(-4.0f, std::min(4.0f, x));
        return v;
    };
    auto A = vals(64 * D), M = vals(64 * D), P = vals(64 * 64), V = vals(64 * D);
    std::vector<float> want_amt(64 * 64, 0.0f), want_pv(64 * D, 0.0f);
    for (int r = 0; r < 64; r++) {
        for (int n = 0; n < 64; n++)
            for (int k = 0; k < D; k++) want_amt[r * 64 + n] += A[r * D + k] * M[n * D + k];
        for (int n = 0; n < D; n++)
            for (int k = 0; k < 64; k++) want_pv[r * D + n] += P[r * 64 + k] * V[k * D + n];
    }
    Dev<bf16> gA(A), gM(M), gP(P), gV(V);
    DevF amt(want_amt, true), amt_ss(want_amt, true), pv(want_pv, true);
    wgmma_products_kernel<D><<<1, 128, 3 * 64 * D * sizeof(bf16), gpu.stream>>>(amt.p(), amt_ss.p(), pv.p(), gA.p(), gM.p(), gP.p(), gV.p());
    CUDA_LAUNCH_CHECK();
    char name[64]; snprintf(name, sizeof(name), "wgmma products, head size %d:", D);
    compare(name, "A·Mᵀ, A in registers, M K-major", want_amt, amt.host(), 0.0);
    compare(name, "A·Mᵀ, A and M K-major in shared memory", want_amt, amt_ss.host(), 0.0);
    compare(name, "P·V, P in registers, V MN-major", want_pv, pv.host(), 0.0);
}

// The flash kernels with wgmma (compute capability 9.0 only: the forward and both backward
// passes) against the CPU, with one warpgroup of 64 rows a block and with two sharing each tile.
static void check_flash_wgmma(int B, int T, int C, int NH, int NKV) {
    if (!gpu_has_wgmma()) { printf("# skip: wgmma attention B=%d T=%d C=%d NH=%d: not a compute capability 9.0 GPU\n", B, T, C, NH); return; }
    for (int groups : {1, 2}) {
        gpu.kernels.flash_wgmma = true; gpu.kernels.flash_wgmma_groups = groups;
        check_attention<bf16>(B, T, C, NH, NKV);
        check_attention<fp16>(B, T, C, NH, NKV);  // (wgmma's .f16 form)
    }
    check_attention<bf16>(B, T, C, NH, NKV, true, true);  // (most tiles keep the max: add_sink)
    gpu.kernels.flash_swizzle = true;  // (fp16: its own kernels; bf16's are compared bit for bit below)
    check_attention<fp16>(B, T, C, NH, NKV);
    gpu.kernels.flash_forward_producer = 2; gpu.kernels.flash_tma = true;  // (and by TMA)
    check_attention<fp16>(B, T, C, NH, NKV);
    if (C / NH == 64) {  // (3 computing warpgroups, by TMA: fp16 against the CPU)
        gpu.kernels.flash_forward_groups = 3;
        check_attention<fp16>(B, T, C, NH, NKV);
        gpu.kernels.flash_forward_groups = 2;
    }
    gpu.kernels.flash_swizzle = gpu.kernels.flash_tma = false;
    gpu.kernels.flash_forward_producer = 2;
    check_attention<bf16>(B, T, C, NH, NKV);
    check_attention<bf16>(B, T, C, NH, NKV, true, true);
    // key tiles of 128 (other bits than 64: only against the CPU), with and without ping-pong
    gpu.kernels.flash_forward_keys = 128;
    check_attention<bf16>(B, T, C, NH, NKV);
    check_attention<fp16>(B, T, C, NH, NKV);
    gpu.kernels.flash_forward_pingpong = true;
    check_attention<bf16>(B, T, C, NH, NKV);
    check_attention<bf16>(B, T, C, NH, NKV, true, true);
    gpu.kernels.flash_forward_pingpong = false;
    gpu.kernels.flash_forward_producer = 0;  // (the forward without a producer, key tiles of 128)
    check_attention<bf16>(B, T, C, NH, NKV);
    gpu.kernels.flash_forward_keys = 64;
    // Bit-identical (bound 0) to the run with 2 warpgroups and overlapped products: each product
    // waited for as soon as it is issued (the same operations in the same order: a difference is a
    // register the pipeline reads or writes too early), and 1 warpgroup a block (each row's tiles
    // and products are the same).
    auto qkv = randn<bf16>((size_t)B * T * QKVLayout(C, NH, NKV).row()), dout = randn<bf16>((size_t)B * T * C);
    std::vector<float> want[3], got[3];
    attention_outputs(qkv, dout, B, T, C, NH, NKV, want);
    // The forward with a producer warpgroup (2 and 3 slots, with and without ping-pong) too: the
    // same products in the same order. And with swizzled tiles (the same values elsewhere in
    // shared memory), copied by TMA too. (Persistent: check_flash_persistent.)
    const struct { int groups; bool overlap; int producer; bool pingpong, swizzle, tma; const char* what; } variants[] = {
        {2, false, 0, false, false, false, "each product waited for"}, {1, true, 0, false, false, false, "1 warpgroup a block"},
        {2, true, 2, false, false, false, "the forward with a producer warpgroup, 2 slots"},
        {2, true, 3, false, false, false, "the forward with a producer warpgroup, 3 slots"},
        {2, true, 2, true, false, false, "the forward with a producer warpgroup, 2 slots, ping-pong"},
        {2, true, 3, true, false, false, "the forward with a producer warpgroup, 3 slots, ping-pong"},
        {2, false, 2, true, false, false, "the forward with a producer warpgroup, ping-pong, each product waited for"},
        {2, true, 0, false, true, false, "the forward with swizzled tiles"}, {1, true, 0, false, true, false, "1 warpgroup a block, swizzled tiles"},
        {2, true, 2, true, true, false, "the forward with a producer warpgroup, 2 slots, ping-pong, swizzled tiles"},
        {2, true, 3, false, true, false, "the forward with a producer warpgroup, 3 slots, swizzled tiles"},
        {2, true, 2, false, true, true, "the forward with a producer warpgroup, 2 slots, swizzled tiles by TMA"},
        {2, true, 3, true, true, true, "the forward with a producer warpgroup, 3 slots, ping-pong, swizzled tiles by TMA"}};
    for (const auto& v : variants) {
        gpu.kernels.flash_wgmma_groups = v.groups; gpu.kernels.flash_wgmma_overlap = v.overlap;
        gpu.kernels.flash_forward_producer = v.producer; gpu.kernels.flash_forward_pingpong = v.pingpong;
        gpu.kernels.flash_swizzle = v.swizzle; gpu.kernels.flash_tma = v.tma;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        char name[256]; snprintf(name, sizeof(name), "bf16 wgmma attention B=%d T=%d C=%d NH=%d NKV=%d, %s vs 2 warpgroups overlapped", B, T, C,
                                 NH, NKV, v.what);
        compare_bits(name, want, got);
    }
    // 3 computing warpgroups and a producer (head size 64: 192 query rows a block): each row's
    // products as in 2 warpgroups, so the same bits; 2 or 3 slots, TMA too.
    const struct { int slots; bool tma; const char* what; } three[] = {{2, false, "2 slots"}, {3, false, "3 slots"},
                                                                         {2, true, "2 slots, swizzled tiles by TMA"}};
    for (const auto& v : three) {
        if (C / NH != 64) break;
        gpu.kernels.flash_wgmma_groups = 2; gpu.kernels.flash_wgmma_overlap = true; gpu.kernels.flash_forward_pingpong = false;
        gpu.kernels.flash_forward_producer = v.slots; gpu.kernels.flash_forward_groups = 3; gpu.kernels.flash_swizzle = gpu.kernels.flash_tma = v.tma;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        char name[256]; snprintf(name, sizeof(name), "bf16 wgmma attention B=%d T=%d C=%d NH=%d NKV=%d, the forward with 3 computing warpgroups, %s, vs 2 warpgroups overlapped",
                                 B, T, C, NH, NKV, v.what);
        compare_bits(name, want, got);
    }
    gpu.kernels.flash_forward_groups = 2;
    // Key tiles of 128: the producer and ping-pong change only who copies and when each warpgroup
    // issues, and swizzled tiles only where the values sit, so each gives the plain forward's bits.
    gpu.kernels.flash_wgmma_groups = 2; gpu.kernels.flash_wgmma_overlap = true; gpu.kernels.flash_forward_keys = 128;
    gpu.kernels.flash_forward_producer = 0; gpu.kernels.flash_forward_pingpong = false;
    gpu.kernels.flash_swizzle = gpu.kernels.flash_tma = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, want);
    const struct { int producer; bool pingpong, swizzle, tma; const char* what; int groups = 2; } wide[] = {
        {2, false, false, false, "a producer"}, {2, true, false, false, "a producer and ping-pong"}, {0, false, true, false, "swizzled tiles"},
        {2, true, true, false, "a producer, ping-pong and swizzled tiles"}, {2, true, true, true, "a producer, ping-pong and swizzled tiles by TMA"},
        {2, false, true, true, "3 computing warpgroups (Q read from shared memory), swizzled tiles by TMA", 3}};
    for (const auto& v : wide) {
        if (v.groups == 3 && C / NH != 64) break;
        gpu.kernels.flash_forward_groups = v.groups;
        gpu.kernels.flash_forward_producer = v.producer; gpu.kernels.flash_forward_pingpong = v.pingpong; gpu.kernels.flash_swizzle = v.swizzle;
        gpu.kernels.flash_tma = v.tma;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        char name[256]; snprintf(name, sizeof(name), "bf16 wgmma attention B=%d T=%d C=%d NH=%d NKV=%d, key tiles of 128: %s vs none", B, T,
                                 C, NH, NKV, v.what);
        compare_bits(name, want, got);
    }
    gpu.kernels.flash_forward_producer = 0; gpu.kernels.flash_forward_keys = 64; gpu.kernels.flash_forward_pingpong = false;
    gpu.kernels.flash_swizzle = gpu.kernels.flash_tma = false; gpu.kernels.flash_forward_groups = 2;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, want);  // (the 2 warpgroups' bits again, for the note below)
    // Not a check, a fact for the log: whether the wgmma kernels give the mma.sync kernels' bits.
    // The two add the same products in the same order (16 at a time: keys, queries or head
    // channels), so they agree where the tensor cores' two instructions round their 16-product
    // sums alike. Where they do, --flash-wgmma could be chosen per pass by timing, as --flash-rows
    // is, without two runs of the trainer ever differing; where not, only by a fixed default.
    gpu.kernels.flash_wgmma = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    const char* what[3] = {"forward", "lse", "dqkv"};
    printf("# bf16 wgmma attention B=%d T=%d C=%d NH=%d NKV=%d against mma.sync (the default), for the log, not a check:", B, T, C, NH, NKV);
    for (int o = 0; o < 3; o++) {
        const bool same = want[o].size() == got[o].size() && !memcmp(want[o].data(), got[o].data(), want[o].size() * sizeof(float));
        if (same) printf(" %s bit-identical%s", what[o], o < 2 ? "," : "\n");
        else printf(" %s differs (rel %.2e)%s", what[o], max_rel_diff(want[o], got[o]), o < 2 ? "," : "\n");
    }
    gpu.kernels.flash_wgmma = false; gpu.kernels.flash_wgmma_groups = 2; gpu.kernels.flash_wgmma_overlap = true;
    gpu.kernels.flash_forward_producer = 0; gpu.kernels.flash_forward_pingpong = false; gpu.kernels.flash_forward_keys = 64;
    gpu.kernels.flash_swizzle = gpu.kernels.flash_tma = false;
}

// The persistent producer forward (--flash-forward-persistent; v32-v34, v36): 3 to 5 blocks, each
// running several blocks of query rows in turn (the snake's rounds, the ring's phases and the
// turns over items), bit-identical to the forward with a block an item of the same key tiles.
// A group of its own (persistent): on a GPU a hang there costs only these versions.
static void check_flash_persistent(int B, int T, int C, int NH, int NKV) {
    if (!gpu_has_wgmma()) { printf("# skip: persistent attention B=%d T=%d C=%d NH=%d: not a compute capability 9.0 GPU\n", B, T, C, NH); return; }
    struct Case { int keys, groups, slots; bool pingpong, swizzle, tma; int blocks; const char* what; };
    const Case cases[] = {
        {64, 2, 2, true, true, true, 3, "2 slots, ping-pong, swizzled tiles by TMA (v32)"},
        {64, 2, 3, false, false, false, 5, "3 slots"},
        {64, 2, 2, true, true, false, 4, "2 slots, ping-pong, swizzled tiles"},
        {64, 3, 2, false, true, true, 3, "3 computing warpgroups, swizzled tiles by TMA (v33)"},
        {128, 2, 2, true, true, true, 3, "128 keys a tile, ping-pong, swizzled tiles by TMA (v34)"},
        {128, 3, 2, false, true, true, 3, "3 computing warpgroups, 128 keys a tile, Q read from shared memory, by TMA (v36)"}};
    auto qkv = randn<bf16>((size_t)B * T * QKVLayout(C, NH, NKV).row()), dout = randn<bf16>((size_t)B * T * C);
    std::vector<float> want[3], got[3];
    KernelOptions& k = gpu.kernels;
    k.flash_wgmma = true; k.flash_wgmma_groups = 2; k.flash_wgmma_overlap = true;
    for (const Case& c : cases) {
        if (c.groups == 3 && C / NH != 64) continue;
        k.flash_forward_keys = c.keys;  // the forward with a block an item and these key tiles
        k.flash_forward_producer = 0; k.flash_forward_groups = 2; k.flash_forward_pingpong = k.flash_swizzle = k.flash_tma = k.flash_forward_persistent = false;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, want);
        k.flash_forward_producer = c.slots; k.flash_forward_groups = c.groups; k.flash_forward_pingpong = c.pingpong;
        k.flash_swizzle = c.swizzle; k.flash_tma = c.tma; k.flash_forward_persistent = true; k.flash_forward_blocks = c.blocks;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        char name[256];
        snprintf(name, sizeof(name), "bf16 persistent attention B=%d T=%d C=%d NH=%d NKV=%d, %d persistent blocks, %s, vs a block an item", B, T, C, NH, NKV,
                 c.blocks, c.what);
        compare_bits(name, want, got);
    }
    k.flash_wgmma = false; k.flash_forward_keys = 64; k.flash_forward_producer = 0; k.flash_forward_groups = 2;
    k.flash_forward_pingpong = k.flash_swizzle = k.flash_tma = k.flash_forward_persistent = false; k.flash_forward_blocks = 0;
}

// The fused backward's grid on a GPU of 132 SMs (an H100 or H200, and the emulator's): the heads
// of its whole waves one block each, the last wave's split (flash_fused_grid), at GPT-2's shapes;
// and its partial sums of dQ, in T·C floats (split 0 for every batch, the others for the batches
// of split heads).
static void check_fused_grid() {
    if (gpu_sm_count() != 132) { printf("# skip: the fused backward's grid: the table is for 132 SMs, not %d\n", gpu_sm_count()); return; }
    struct Case { int B, NKV, T, S, full, partial_TCs; const char* what; };
    const Case cases[] = {
        {64, 12, 1024, 1, 768, 64, "124M, B = 64: 5.8 waves of whole heads"},
        {16, 25, 1024, 4, 396, 16 + 3, "1558M, B = 16: 3 whole waves, 4 heads in 4 splits, all in the last batch"},
        {32, 25, 1024, 4, 792, 32 + 3, "1558M, B = 32: 6 whole waves, 8 heads in 4 splits (a rule over all heads chose 2)"},
        {33, 12, 1024, 1, 396, 33, "3 whole waves, nothing left"},
        {16, 12, 1024, 2, 132, 16 + 5, "124M, B = 16: 1 whole wave, 60 heads in 2 splits, in the last 5 batches"},
        {8, 12, 2048, 4, 0, 8 * 4, "T = 2048, B = 8: every head split"},
        {2, 12, 8192, 16, 0, 2 * 16, "T = 8192, B = 2: every head split"},
    };
    for (const Case& c : cases) {
        const FusedGrid g = flash_fused_grid(gpu.kernels, c.B, c.NKV, c.T);
        const float TCs = (float)(fused_partial_floats(g, c.B, (size_t)c.T * 768) / ((size_t)c.T * 768));
        char name[200]; snprintf(name, sizeof(name), "the fused backward's grid, B=%d NKV=%d T=%d (%s)", c.B, c.NKV, c.T, c.what);
        compare(name, "splits, heads of one block, partial sums", {(float)c.S, (float)c.full, (float)c.partial_TCs}, {(float)g.S, (float)g.full, TCs}, 0.0);
    }
}

// The fused backward with its first heads one block each and the others split
// (flash_fused_full): each head's dQ bit-identical to the run that gives every head its number of
// blocks (by_splits[S]: the outputs with S splits). S = 2: the pass alone, and every dQ by the
// sum kernel; S = 3: a producer by TMA, and dQ summed by the last split (head size 64 only).
static void check_fused_mixed_grid(int B, int T, int C, int NH, int NKV, const std::vector<float>& qkv, const std::vector<float>& dout,
                                   const std::vector<float>& qkv2, const std::vector<float>& dout2, const std::vector<float>* const* by_splits) {
    const bool producer = C / NH == 64;
    const size_t W = QKVLayout(C, NH, NKV).row();
    std::vector<float> got[3], other[3];
    char name[180];
    const int heads = B * NKV, GD = C / NKV;  // (head i = b·NKV + kh: batch b's rows, the GD columns of kh's query heads)
    gpu.kernels.flash_fused_full = heads / 2;  // the first heads one block each, the others split
    for (int S : {2, 3}) {
        std::vector<float> want[3] = {by_splits[S][0], by_splits[S][1], by_splits[S][2]};
        for (int i = 0; i < heads / 2; i++)  // (a head of one block: the bits of the run with one split)
            for (int t = 0; t < T; t++) {
                const size_t at = ((size_t)(i / NKV) * T + t) * W + (size_t)(i % NKV) * GD;
                std::copy(by_splits[1][2].begin() + at, by_splits[1][2].begin() + at + GD, want[2].begin() + at);
            }
        for (int v = 0; v < 2; v++) {
            if (S == 3 && !producer) break;
            gpu.kernels.flash_fused_splits = S;
            gpu.kernels.flash_dq_in_kernel = !(S == 2 && v == 1);
            gpu.kernels.flash_backward_producer = S == 3 && v == 0 ? 3 : 0;
            gpu.kernels.flash_backward_tma = S == 3 && v == 0;
            gpu.kernels.flash_dq_last_split = S == 3 && v == 1;
            if (gpu.kernels.flash_dq_last_split) attention_outputs(qkv2, dout2, B, T, C, NH, NKV, other);
            attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
            snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, %d of %d heads in %d splits%s vs each head's own run",
                     B, T, C, NH, NKV, heads - heads / 2, heads, S,
                     S == 2 ? (v ? ", dQ by the sum kernel" : "") : v ? ", dQ summed by the last split" : ", a producer warpgroup in the backward, swizzled tiles by TMA,");
            compare_bits(name, want, got);
        }
    }
    gpu.kernels.flash_fused_full = -1;
    gpu.kernels.flash_dq_in_kernel = true; gpu.kernels.flash_dq_last_split = false;
    gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
}

// Two backwards' dqkv (rows of W: dQ in the first C columns, then dK and dV): dK and dV bit for
// bit, dQ within bf16's bound (the same products, dQ's sums in another order)
static void compare_dkv_dq(const char* name, const std::vector<float>& want, const std::vector<float>& got, int B, int T, int C, size_t W) {
    auto columns = [&](const std::vector<float>& x, size_t c0, size_t c1) {  // columns [c0, c1) of every row
        std::vector<float> r;
        for (size_t row = 0; row < (size_t)B * T; row++) r.insert(r.end(), x.begin() + row * W + c0, x.begin() + row * W + c1);
        return r;
    };
    compare(name, "dK, dV (bit for bit)", columns(want, C, W), columns(got, C, W), 0.0);
    compare(name, "dQ (its sums in another order)", columns(want, 0, C), columns(got, 0, C), bx<bf16>(1e-4));
}
// The chained fused backward (--flash-backward chain, head size 64 or 128: a block per key block,
// dQ added to one sum in turn): against the CPU op; two runs bit-identical, after a run on other
// inputs (a count not set back to zero would show); with a producer warpgroup (by TMA or not;
// head size 64) bit-identical to without; dK and dV bit-identical to the fused pass's with splits
// (fused: its outputs), dQ within bf16's bound of them (its sums in another order). On the
// emulator also with blocks held back and with blocks started last blockIdx first.
static void check_fused_chain(int B, int T, int C, int NH, int NKV, const std::vector<float>& qkv, const std::vector<float>& dout,
                              const std::vector<float>& qkv2, const std::vector<float>& dout2, const std::vector<float>* fused) {
    const size_t W = QKVLayout(C, NH, NKV).row();
    gpu.kernels.flash_dq_chain = true;
    check_attention<bf16>(B, T, C, NH, NKV);
    std::vector<float> chained[3], got[3], other[3];
    char name[180];
    attention_outputs(qkv2, dout2, B, T, C, NH, NKV, other);
    attention_outputs(qkv, dout, B, T, C, NH, NKV, chained);
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, key blocks chained, two runs", B, T, C, NH, NKV);
    compare_bits(name, chained, got);
#ifdef LLMC_SIMT  // the emulator's blocks as a GPU might run them: each tile's first key block late
    const int threads = omp_get_max_threads();  // (blocks on other threads overtake the late one: two at least)
    omp_set_num_threads(std::max(2, threads));
    simt::g_late = true;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    simt::g_late = false;
    omp_set_num_threads(threads);
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, key blocks chained, each tile's first late", B, T, C, NH, NKV);
    compare_bits(name, chained, got);
    simt::g_reverse_blocks = true;  // (the chain's order comes from tickets, not from blockIdx)
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    simt::g_reverse_blocks = false;
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, key blocks chained, blocks started last first", B, T, C, NH, NKV);
    compare_bits(name, chained, got);
#endif
    for (int tma : {0, 1}) {
        if (C / NH != 64) break;  // (the producer kernels: head size 64)
        gpu.kernels.flash_backward_producer = 3; gpu.kernels.flash_backward_tma = tma;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, key blocks chained, a producer warpgroup%s vs none",
                 B, T, C, NH, NKV, tma ? ", swizzled tiles by TMA," : "");
        compare_bits(name, chained, got);
    }
    gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
    gpu.kernels.flash_dq_chain = false;
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, key blocks chained vs in splits", B, T, C, NH, NKV);
    compare_dkv_dq(name, fused[2], chained[2], B, T, C, W);
}

// The chained backward's checks (the group "chain", a process of its own: a chain that hangs
// costs only them), with the fused pass's outputs at 2 splits to hold its dK and dV to
static void check_flash_chain(int B, int T, int C, int NH, int NKV) {
    if (!gpu_has_wgmma()) { printf("# skip: chained backward B=%d T=%d C=%d NH=%d: not a compute capability 9.0 GPU\n", B, T, C, NH); return; }
    gpu.kernels.flash_wgmma = true; gpu.kernels.flash_wgmma_groups = 2; gpu.kernels.flash_fused_backward = true;
    gpu.kernels.flash_fused_backward_128 = C / NH == 128;  // (the splits' run to compare with)
    gpu.kernels.flash_fused_splits = 2;
    const size_t W = QKVLayout(C, NH, NKV).row();
    auto qkv = randn<bf16>((size_t)B * T * W), dout = randn<bf16>((size_t)B * T * C);
    auto qkv2 = randn<bf16>(qkv.size()), dout2 = randn<bf16>(dout.size());
    std::vector<float> fused[3];
    attention_outputs(qkv, dout, B, T, C, NH, NKV, fused);
    gpu.kernels.flash_fused_backward_128 = false;  // (chain alone runs the fused pass at 128)
    check_fused_chain(B, T, C, NH, NKV, qkv, dout, qkv2, dout2, fused);
    gpu.kernels.flash_wgmma = false; gpu.kernels.flash_fused_splits = 0; gpu.kernels.flash_fused_backward = false;
}

// The fused backward (flash_backward_fused_wgmma_kernel: head size 64 or 128, compute capability
// 9.0) against the CPU op with 1, 2 and 3 splits of the key blocks (3: the snake order's turn); two
// runs bit-identical (dQ's sums in a fixed order); bit-identical with each product waited for; its
// dK and dV bit-identical to the two wgmma passes' (the same products in the same order; the
// second warpgroup's extra first tile adds exact zeros), its dQ within bf16's bound of theirs.
// The producer backward (head size 64 only) against the CPU op and bit-identical to the above.
// With one split, dQ written by the pass itself is bit-identical to its sum kernel's; with 2 and
// 3, so is dQ summed, a query tile at a time, by the last split done with it (flash_dq_last_split,
// head size 64).
static void check_flash_fused(int B, int T, int C, int NH, int NKV) {
    if (!gpu_has_wgmma()) { printf("# skip: fused backward B=%d T=%d C=%d NH=%d: not a compute capability 9.0 GPU\n", B, T, C, NH); return; }
    gpu.kernels.flash_wgmma = true; gpu.kernels.flash_wgmma_groups = 2; gpu.kernels.flash_fused_backward = true;
    gpu.kernels.flash_fused_backward_128 = true;
    const bool producer = C / NH == 64;
    for (int S : {1, 2, 3}) {
        gpu.kernels.flash_fused_splits = S;
        check_attention<bf16>(B, T, C, NH, NKV);
        if (S == 2) check_attention<fp16>(B, T, C, NH, NKV);
    }
    if (producer) {
        gpu.kernels.flash_backward_producer = 3;  // the producer backward against the CPU op too (fp16: its other wgmma type)
        check_attention<fp16>(B, T, C, NH, NKV);
        gpu.kernels.flash_backward_tma = true;    // (and by TMA)
        check_attention<fp16>(B, T, C, NH, NKV);
        gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
    }
    gpu.kernels.flash_fused_splits = 2;
    const size_t W = QKVLayout(C, NH, NKV).row();
    auto qkv = randn<bf16>((size_t)B * T * W), dout = randn<bf16>((size_t)B * T * C);
    std::vector<float> fused[3], got[3];
    attention_outputs(qkv, dout, B, T, C, NH, NKV, fused);
    char name[180]; snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, two runs", B, T, C, NH, NKV);
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    compare_bits(name, fused, got);
    gpu.kernels.flash_wgmma_overlap = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    gpu.kernels.flash_wgmma_overlap = true;
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, each product waited for vs overlapped", B, T, C, NH, NKV);
    compare_bits(name, fused, got);
    for (int tma : {0, 1})  // with a producer warpgroup (its tiles by TMA or not): the same products in the same order
        for (int slots : {3, 4}) {
            if (!producer) break;
            gpu.kernels.flash_backward_producer = slots; gpu.kernels.flash_backward_tma = tma;
            attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
            snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, a producer warpgroup in the backward, %d slots%s, vs none",
                     B, T, C, NH, NKV, slots, tma ? ", swizzled tiles by TMA" : "");
            compare_bits(name, fused, got);
        }
    gpu.kernels.flash_fused_splits = 1;  // one split: dQ finished in the pass, against its sum kernel
    gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
    std::vector<float> fused1[3];
    gpu.kernels.flash_dq_in_kernel = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, fused1);
    gpu.kernels.flash_dq_in_kernel = true;
    for (int slots : {0, 3}) {
        if (slots && !producer) break;
        gpu.kernels.flash_backward_producer = slots;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, 1 split, dQ written by the pass%s vs by the sum kernel",
                 B, T, C, NH, NKV, slots ? " with a producer warpgroup" : "");
        compare_bits(name, fused1, got);
    }
    gpu.kernels.flash_fused_splits = 3;  // (and where a split has several key blocks, or none)
    std::vector<float> fused3[3];
    gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, fused3);
    for (int tma : {0, 1}) {
        if (!producer) break;
        gpu.kernels.flash_backward_producer = 3; gpu.kernels.flash_backward_tma = tma;
        attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
        snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, 3 splits, a producer warpgroup in the backward%s vs none",
                 B, T, C, NH, NKV, tma ? ", swizzled tiles by TMA," : "");
        compare_bits(name, fused3, got);
    }
    gpu.kernels.flash_dq_last_split = true;  // several splits: each tile's dQ summed by its last split, against the sum kernel
    auto qkv2 = randn<bf16>(qkv.size()), dout2 = randn<bf16>(dout.size());
    std::vector<float> other[3];
    for (int S : {2, 3})
        for (int slots : {0, 0, 4}) {  // (twice without a producer: each launch sets its counts back to zero)
            if (!producer) break;  // (head size 64 only: at 128 the sum kernel runs)
            gpu.kernels.flash_fused_splits = S;
            gpu.kernels.flash_backward_producer = slots; gpu.kernels.flash_backward_tma = slots != 0;
            attention_outputs(qkv2, dout2, B, T, C, NH, NKV, other);  // (a split that sums too early finds these partial sums)
            attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
            snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d, %d splits, dQ summed by the last split%s vs by the sum kernel",
                     B, T, C, NH, NKV, S, slots ? " with a producer warpgroup by TMA" : "");
            compare_bits(name, S == 2 ? fused : fused3, got);
        }
    gpu.kernels.flash_dq_last_split = false;
    gpu.kernels.flash_backward_producer = 0; gpu.kernels.flash_backward_tma = false;
    const std::vector<float>* by_splits[4] = {nullptr, fused1, fused, fused3};
    check_fused_mixed_grid(B, T, C, NH, NKV, qkv, dout, qkv2, dout2, by_splits);
    gpu.kernels.flash_fused_splits = 2;
    gpu.kernels.flash_fused_backward = false;
    attention_outputs(qkv, dout, B, T, C, NH, NKV, got);
    snprintf(name, sizeof(name), "bf16 fused backward B=%d T=%d C=%d NH=%d NKV=%d vs the two wgmma passes", B, T, C, NH, NKV);
    compare_dkv_dq(name, got[2], fused[2], B, T, C, W);
    gpu.kernels.flash_wgmma = false; gpu.kernels.flash_fused_splits = 0; gpu.kernels.flash_fused_backward_128 = false;
}

template <class X> static void check_elementwise(size_t N) {
    char name[64]; snprintf(name, sizeof(name), "%s elementwise N=%zu", dtype_name<X>(), N);
    auto x = randn<X>(N, 2.0f), y = randn<X>(N), dout = randn<X>(N);
    std::vector<X> out(N), d(N), cx = vec_cast<X>(x), cy = vec_cast<X>(y), cdout = vec_cast<X>(dout);
    gelu_forward(cpu, out.data(), cx.data(), N);
    Dev<X> gx(x), gy(y), gout(vec_widen(out), true), gdout(dout), gd(vec_widen(d), true);
    gelu_forward(gpu, gout.p(), gx.p(), N);
    compare(name, "gelu forward", vec_widen(out), gout.host(), bx<X>(1e-5));
    gelu_backward(cpu, d.data(), cx.data(), cdout.data(), N);
    gelu_backward(gpu, gd.p(), gx.p(), gdout.p(), N);
    compare(name, "gelu backward", vec_widen(d), gd.host(), bx<X>(1e-5));
    residual_forward(cpu, out.data(), cx.data(), cy.data(), N);
    Dev<X> gres(vec_widen(out), true);
    residual_forward(gpu, gres.p(), gx.p(), gy.p(), N);
    compare(name, "residual", vec_widen(out), gres.host(), bx<X>(1e-6));
    add_inplace(cpu, cx.data(), cy.data(), N);
    add_inplace(gpu, gx.p(), gy.p(), N);
    compare(name, "add_inplace", vec_widen(cx), gx.host(), bx<X>(1e-6));
}

template <class X> static void check_classifier(int N, int V, int Vp) {
    char name[80]; snprintf(name, sizeof(name), "%s fused_classifier N=%d V=%d Vp=%d", dtype_name<X>(), N, V, Vp);
    auto logits = randn<X>((size_t)N * Vp, 4.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)rng.below(V);
    Buf<int> dt; dt.alloc(gpu, N); ctx_copy(gpu, dt.data(), tgt.data(), N * 4);
    std::vector<float> losses(N);
    std::vector<X> clog = vec_cast<X>(logits);
    Dev<X> glog(logits);
    DevF gloss(losses, true);
    fused_classifier(cpu, clog.data(), losses.data(), tgt.data(), N, V, Vp, 1.0f / N);
    fused_classifier(gpu, glog.p(), gloss.p(), dt.data(), N, V, Vp, 1.0f / N);
    compare(name, "losses", losses, gloss.host(), bs<X>(1e-5));
    compare(name, "dlogits (in place)", vec_widen(clog), glog.host(), bx<X>(1e-4));
    // the row staged in shared memory (where it fits and moves in packs), and staged by a block
    // an SM while it computes the row before: each thread reads the same elements in the same
    // order, so the same bits as above
    for (int staged : {1, 2}) {
        Dev<X> glog2(logits);
        DevF gloss2(losses, true);
        gpu.kernels.classifier_staged = staged;
        fused_classifier(gpu, glog2.p(), gloss2.p(), dt.data(), N, V, Vp, 1.0f / N);
        gpu.kernels.classifier_staged = 0;
        const char* how = staged == 1 ? "row staged in shared memory vs not" : "rows staged by a block an SM, the next in flight, vs not";
        compare(name, (std::string(how) + ": losses").c_str(), gloss.host(), gloss2.host(), 0.0);
        compare(name, (std::string(how) + ": dlogits").c_str(), glog.host(), glog2.host(), 0.0);
    }
}

// The vocabulary-parallel pair (tensor parallelism): part q of `parts` of the columns, its stats
// and then (from every part's CPU stats, as the gather would give them) its losses and gradient.
template <class X> static void check_classifier_vp(int N, int V, int Vp, int parts) {
    const int Vpl = Vp / parts;
    auto logits = randn<X>((size_t)N * Vp, 4.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)rng.below(V);
    Buf<int> dt; dt.alloc(gpu, N); ctx_copy(gpu, dt.data(), tgt.data(), N * 4);
    std::vector<std::vector<float>> slice(parts, std::vector<float>((size_t)N * Vpl));
    std::vector<float> stats((size_t)parts * N * 3);
    for (int q = 0; q < parts; q++) {
        for (int n = 0; n < N; n++)
            for (int v = 0; v < Vpl; v++) slice[q][(size_t)n * Vpl + v] = logits[(size_t)n * Vp + q * Vpl + v];
        const int lo = q * Vpl, Vl = std::max(0, std::min(Vpl, V - lo));
        std::vector<X> c = vec_cast<X>(slice[q]);
        classifier_stats(cpu, c.data(), stats.data() + (size_t)q * N * 3, tgt.data(), N, Vl, Vpl, lo);
    }
    for (int q = 0; q < parts; q++) {
        char name[100];
        snprintf(name, sizeof(name), "%s vocabulary-parallel classifier N=%d V=%d Vp=%d part %d/%d", dtype_name<X>(), N, V, Vp, q, parts);
        const int lo = q * Vpl, Vl = std::max(0, std::min(Vpl, V - lo));
        Dev<X> glog(slice[q]);
        DevF gstats(std::vector<float>((size_t)N * 3), true);
        classifier_stats(gpu, glog.p(), gstats.p(), dt.data(), N, Vl, Vpl, lo);
        std::vector<float> want(stats.begin() + (size_t)q * N * 3, stats.begin() + (size_t)(q + 1) * N * 3);
        compare(name, "stats (max, sum, target logit)", want, gstats.host(), 1e-5);  // fp32 sums in another order
        std::vector<X> c = vec_cast<X>(slice[q]);
        std::vector<float> losses(N);
        classifier_finish(cpu, c.data(), losses.data(), stats.data(), parts, tgt.data(), N, Vl, Vpl, lo, 1.0f / N);
        DevF gall(stats), gloss(losses, true);
        classifier_finish(gpu, glog.p(), gloss.p(), gall.p(), parts, dt.data(), N, Vl, Vpl, lo, 1.0f / N);
        compare(name, "losses", losses, gloss.host(), bs<X>(1e-5));
        compare(name, "dlogits (in place)", vec_widen(c), glog.host(), bx<X>(1e-4));
    }
}

template <class X> static void check_adamw_norm(size_t n) {
    char name[64]; snprintf(name, sizeof(name), "%s adamw+norm n=%zu", dtype_name<X>(), n);
    auto p = randn<float>(n), g = randn<X>(n), m = randn<float>(n, 0.1f), v = randn<float>(n, 0.1f);
    for (auto& x : v) x = x * x;
    std::vector<X> cg = vec_cast<X>(g), ccopy(n);
    DevF gp(p), gm(m), gv(v);
    Dev<X> gg(g), gcopy(std::vector<float>(n), true);
    constexpr bool copy = !std::is_same_v<X, float>;  // bf16: the update also writes the working copy
    DecayRuns decay;  // weight decay on two runs of the span, as for a block's matrices
    decay.add(n / 7, n / 3); decay.add(n / 2, n / 2 + 1);
    adamw_update(cpu, p.data(), cg.data(), m.data(), v.data(), copy ? ccopy.data() : nullptr, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, decay, 5, 0.7f);
    adamw_update(gpu, gp.p(), gg.p(), gm.p(), gv.p(), copy ? gcopy.p() : nullptr, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, decay, 5, 0.7f);
    compare(name, "params", p, gp.host(), 1e-6);
    compare(name, "m", m, gm.host(), 1e-6);
    compare(name, "v", v, gv.host(), 1e-6);
    if (copy) compare(name, "bf16 working copy", vec_widen(ccopy), gcopy.host(), 1e-2);
    // in two pieces (one launch each, one copy back)
    double a = global_norm_squared<X>(cpu, {{cg.data(), n / 3}, {cg.data() + n / 3, n - n / 3}}),
           b = global_norm_squared<X>(gpu, {{gg.p(), n / 3}, {gg.p() + n / 3, n - n / 3}});
    compare(name, "norm squared", {(float)a}, {(float)b}, 1e-6);
    // in 200 pieces (three launches of at most NORM_PIECES), of 0 to 2000 elements at odd offsets
    std::vector<NormPiece<X>> cp, gp2;
    for (size_t i = 0, at = 0; i < 200 && at < n; i++) {
        const size_t len = std::min(n - at, (size_t)(i * 37 % 2001));
        cp.push_back({cg.data() + at, len});
        gp2.push_back({gg.p() + at, len});
        at += len + i % 3;
    }
    compare(name, "norm squared, 200 pieces", {(float)global_norm_squared<X>(cpu, cp)}, {(float)global_norm_squared<X>(gpu, gp2)}, 1e-6);
}

// FP8 (fp8.cuh). The quantize kernels against the CPU's: the same codes, the transpose and the
// scales, bit for bit (bound 0: the same encode on the same bf16 values, and amax is exact), the
// outputs poisoned with NaN codes first. The products with ctx.fp8 against the CPU's: both sides
// quantize the same bf16 inputs to the same codes, so only the fp32 summation order differs, and
// the outputs are bf16: the bf16 bound, 1e-2.
// The quantize's column sums (dbias, added to a bf16 vector): the GPU adds 128-row blocks' sums
// and then the blocks, the CPU row after row, so the fp32 sums differ by their rounding and the
// bf16 results by at most one unit in the last place: |got − want| ≤ 2⁻⁷·|want| (bf16 keeps 8
// significant bits). A row left out or added twice moves most columns past that.
static size_t column_sums_off(const std::vector<bf16>& want, const Buf<bf16>& got_dev) {
    std::vector<bf16> got(want.size());
    ctx_copy(gpu, got.data(), got_dev.data(), got.size() * sizeof(bf16));
    size_t off = 0;
    for (size_t c = 0; c < want.size(); c++) {
        const float w = to_f(want[c]), g = to_f(got[c]);
        off += !(std::fabs(g - w) <= std::ldexp(std::fabs(w), -7));
    }
    return off;
}
static void check_fp8_quantize(int R, int Cc, Fp8Format f, float scale) {
    char name[128];
    snprintf(name, sizeof name, "fp8 %s quantize %dx%d (x%g)", fp8_name(f), R, Cc, scale);
    const std::vector<bf16> x = vec_cast<bf16>(randn<bf16>((size_t)R * Cc, scale));
    const size_t n = x.size();
    std::vector<uint8_t> q(n), qt(n);
    std::vector<bf16> sums = vec_cast<bf16>(randn<bf16>((size_t)Cc, scale));
    Buf<bf16> gx, gsums; gx.alloc(gpu, n); gsums.alloc(gpu, Cc);
    ctx_copy(gpu, gsums.data(), sums.data(), Cc * sizeof(bf16));
    Fp8Scales sc{};
    fp8_quantize(cpu, q.data(), qt.data(), Fp8Target{&sc}, x.data(), R, Cc, f, sums.data());
    Buf<uint8_t> gq, gqt; gq.alloc(gpu, n); gqt.alloc(gpu, n);
    Buf<Fp8Scales> gsc; gsc.alloc(gpu, 1);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(bf16));
    CUDA_CHECK(cudaMemset(gq.data(), 0x7f, n)); CUDA_CHECK(cudaMemset(gqt.data(), 0x7f, n));
    fp8_quantize(gpu, gq.data(), gqt.data(), Fp8Target{gsc.data()}, gx.data(), R, Cc, f, gsums.data());
    std::vector<uint8_t> hq(n), hqt(n);
    Fp8Scales hsc{};
    ctx_copy(gpu, hq.data(), gq.data(), n); ctx_copy(gpu, hqt.data(), gqt.data(), n); ctx_copy(gpu, &hsc, gsc.data(), sizeof hsc);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += (hq[i] != q[i]) + (hqt[i] != qt[i]);
    const size_t off = column_sums_off(sums, gsums);
    const bool ok = diff == 0 && hsc.scale == sc.scale && hsc.inv == sc.inv && off == 0;
    printf("%s - %s: codes, transpose and scale bit for bit the CPU's, column sums within a bf16 unit (%zu codes differ; scale %g vs %g; "
           "%zu of %d sums off)\n", ok ? "ok" : "not ok", name, diff, hsc.scale, sc.scale, off, Cc);
    (ok ? n_pass : n_fail)++;
}
// The dequantize kernel (the fallback's, matmul.cuh) against the CPU's: every code of the format
// (twice, and a tail) times a scale's inverse, bit for bit, into bf16 and fp32.
template <class X> static void check_fp8_dequantize(Fp8Format f, float s) {
    char name[128];
    snprintf(name, sizeof name, "fp8 %s dequantize into %s (1/s = %g)", fp8_name(f), dtype_name<X>(), 1.0f / s);
    const size_t n = 2 * 256 + 7;
    std::vector<uint8_t> q(n);
    for (size_t i = 0; i < n; i++) q[i] = (uint8_t)(i * 37 % 256);
    const Fp8Scales sc = fp8_scales(s);
    std::vector<X> want(n);
    fp8_dequantize(cpu, want.data(), q.data(), f, &sc, n);
    Buf<uint8_t> gq; gq.alloc(gpu, n);
    Buf<Fp8Scales> gsc; gsc.alloc(gpu, 1);
    ctx_copy(gpu, gq.data(), q.data(), n);
    ctx_copy(gpu, gsc.data(), &sc, sizeof sc);
    Dev<X> gout(std::vector<float>(n), true);
    fp8_dequantize(gpu, gout.p(), gq.data(), f, gsc.data(), n);
    const std::vector<float> got = gout.host(), w = vec_widen(want);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += !(got[i] == w[i] || (std::isnan(got[i]) && std::isnan(w[i])));
    printf("%s - %s: bit for bit the CPU's (%zu of %zu differ)\n", diff ? "not ok" : "ok", name, diff, n);
    (diff ? n_fail : n_pass)++;
}
// Delayed scaling's quantize (given: the scales are given, 4x what the tensor's amax gives, so a
// part saturates; the kernel maxes its tiles' amaxes into the record with atomicMax) and current
// scaling's with a record (the scale kernel maxes it in): codes, transpose and record bit for bit
// the CPU's. The record starts at 0.5 (below the amax) or at 1e9 (above it: it stays).
static void check_fp8_quantize_record(int R, int Cc, Fp8Format f, bool given, float record0) {
    char name[160];
    snprintf(name, sizeof name, "fp8 %s quantize %dx%d, %s, record from %g", fp8_name(f), R, Cc,
             given ? "delayed (a given scale, past which it saturates)" : "current scaling", record0);
    const std::vector<bf16> x = vec_cast<bf16>(randn<bf16>((size_t)R * Cc, 1.0f));
    const size_t n = x.size();
    float amax = 0;
    for (bf16 v : x) amax = std::max(amax, std::fabs(to_f(v)));
    const float s = 4 * fp8_scale_for(amax, f);
    std::vector<uint8_t> q(n), qt(n);
    Fp8Scales sc = fp8_scales(s);
    float rec = record0;
    std::vector<bf16> sums = vec_cast<bf16>(randn<bf16>((size_t)Cc, 1.0f));
    Buf<bf16> gx, gsums; gx.alloc(gpu, n); gsums.alloc(gpu, Cc);
    ctx_copy(gpu, gsums.data(), sums.data(), Cc * sizeof(bf16));
    fp8_quantize(cpu, q.data(), qt.data(), Fp8Target{&sc, &rec, given}, x.data(), R, Cc, f, sums.data());
    Buf<uint8_t> gq, gqt; gq.alloc(gpu, n); gqt.alloc(gpu, n);
    Buf<Fp8Scales> gsc; gsc.alloc(gpu, 1);
    Buf<float> grec; grec.alloc(gpu, 1);
    const Fp8Scales sc0 = fp8_scales(s);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(bf16));
    ctx_copy(gpu, gsc.data(), &sc0, sizeof sc0);
    ctx_copy(gpu, grec.data(), &record0, sizeof(float));
    CUDA_CHECK(cudaMemset(gq.data(), 0x7f, n)); CUDA_CHECK(cudaMemset(gqt.data(), 0x7f, n));
    fp8_quantize(gpu, gq.data(), gqt.data(), Fp8Target{gsc.data(), grec.data(), given}, gx.data(), R, Cc, f, gsums.data());
    std::vector<uint8_t> hq(n), hqt(n);
    Fp8Scales hsc{};
    float hrec = 0;
    ctx_copy(gpu, hq.data(), gq.data(), n); ctx_copy(gpu, hqt.data(), gqt.data(), n);
    ctx_copy(gpu, &hsc, gsc.data(), sizeof hsc); ctx_copy(gpu, &hrec, grec.data(), sizeof(float));
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += (hq[i] != q[i]) + (hqt[i] != qt[i]);
    const size_t off = column_sums_off(sums, gsums);
    const bool ok = diff == 0 && hsc.scale == sc.scale && hrec == rec && rec == std::max(record0, amax) && off == 0;
    printf("%s - %s: codes, transpose, scale and record bit for bit the CPU's, column sums within a bf16 unit (%zu codes differ; "
           "record %g vs %g, amax %g; %zu of %d sums off)\n", ok ? "ok" : "not ok", name, diff, hrec, rec, amax, off, Cc);
    (ok ? n_pass : n_fail)++;
}
// The bytes of a device buffer's first m elements, on the host (to compare two results bit for bit).
template <class B> static std::vector<uint8_t> device_bytes(const B& buf, size_t m) {
    std::vector<uint8_t> h(m * sizeof(*buf.data()));
    ctx_copy(gpu, h.data(), buf.data(), h.size());
    return h;
}
// The MLP's GELU inside the quantization (fp8.cuh: Fp8Act; the FP8 model never writes GELU's
// output or its backward): codes, transpose, scale, record and column sums bit for bit those of
// the GPU's own gelu op followed by the plain quantization, since both make each value with
// gelu.cuh's functions and round it to bf16 the same way. (Against the CPU the GELU differs by
// tanhf's last bits: the products' checks hold that within bf16's bound.)
static void check_fp8_quantize_gelu(int R, int Cc, Fp8Format f, Fp8Act act, bool given) {
    char name[160];
    snprintf(name, sizeof name, "fp8 %s quantize of %s %dx%d, %s", fp8_name(f), act == Fp8Act::Gelu ? "gelu(x)" : "gelu's backward",
             R, Cc, given ? "delayed" : "current scaling");
    const size_t n = (size_t)R * Cc;
    const std::vector<bf16> x = vec_cast<bf16>(randn<bf16>(n, 2.0f)), pre = vec_cast<bf16>(randn<bf16>(n, 2.0f));
    const std::vector<bf16> sums0 = vec_cast<bf16>(randn<bf16>((size_t)Cc, 1.0f));
    Buf<bf16> gx, gpre, made, gsums[2];
    gx.alloc(gpu, n); gpre.alloc(gpu, n); made.alloc(gpu, n);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(bf16)); ctx_copy(gpu, gpre.data(), pre.data(), n * sizeof(bf16));
    Buf<uint8_t> gq[2], gqt[2];
    Buf<Fp8Scales> gsc[2];
    Buf<float> grec[2];
    const Fp8Scales sc0 = fp8_scales(8.0f);
    const float rec0 = 0.5f;
    for (int k = 0; k < 2; k++) {  // k = 0: the ops apart; 1: fused
        gq[k].alloc(gpu, n); gqt[k].alloc(gpu, n); gsc[k].alloc(gpu, 1); grec[k].alloc(gpu, 1); gsums[k].alloc(gpu, Cc);
        ctx_copy(gpu, gsc[k].data(), &sc0, sizeof sc0); ctx_copy(gpu, grec[k].data(), &rec0, sizeof(float));
        ctx_copy(gpu, gsums[k].data(), sums0.data(), Cc * sizeof(bf16));
        const Fp8Target t{gsc[k].data(), grec[k].data(), given};
        if (k == 0) {
            if (act == Fp8Act::Gelu) gelu_forward(gpu, made.data(), gx.data(), n);
            else gelu_backward(gpu, made.data(), gpre.data(), gx.data(), n);
            fp8_quantize(gpu, gq[k].data(), gqt[k].data(), t, made.data(), R, Cc, f, gsums[k].data());
        } else {
            fp8_quantize(gpu, gq[k].data(), gqt[k].data(), t, gx.data(), R, Cc, f, gsums[k].data(), act, gpre.data());
        }
    }
    size_t diff = 0;
    for (auto bytes : {std::make_pair(device_bytes(gq[0], n), device_bytes(gq[1], n)),
                       std::make_pair(device_bytes(gqt[0], n), device_bytes(gqt[1], n)),
                       std::make_pair(device_bytes(gsc[0], 1), device_bytes(gsc[1], 1)),
                       std::make_pair(device_bytes(grec[0], 1), device_bytes(grec[1], 1)),
                       std::make_pair(device_bytes(gsums[0], Cc), device_bytes(gsums[1], Cc))})
        for (size_t i = 0; i < bytes.first.size(); i++) diff += bytes.first[i] != bytes.second[i];
    const std::vector<uint8_t> rec = device_bytes(grec[1], 1);
    float r = 0; memcpy(&r, rec.data(), 4);
    const bool ok = diff == 0 && r > rec0;  // (the record moved: the values were seen)
    printf("%s - %s: codes, transpose, scale, record and column sums bit for bit the unfused ops' (%zu bytes differ; record %g)\n",
           ok ? "ok" : "not ok", name, diff, r);
    (ok ? n_pass : n_fail)++;
}
// LayerNorm straight into codes (fp8.cuh: layernorm_forward_fp8): codes, transpose, record, mean,
// rstd and res bit for bit those of the GPU's own LayerNorm followed by the quantization, since
// both compute each row the same way (ln_row_stats, ln_out_pack) and round it to bf16 before the
// code. Outputs are poisoned first (NaN codes), so a code not written is seen. The scale is 4
// times the one the amax gives, so some values saturate.
static void check_fp8_layernorm(int N, int C, bool add, bool rms) {
    char name[160];
    snprintf(name, sizeof name, "fp8 e4m3 %slayernorm%s into codes %dx%d, delayed", add ? "residual + " : "", rms ? " (RMSNorm)" : "", N, C);
    const size_t n = (size_t)N * C;
    const std::vector<bf16> x = vec_cast<bf16>(randn<bf16>(n, 2.0f)), y = vec_cast<bf16>(randn<bf16>(n, 1.0f));
    const std::vector<bf16> w = vec_cast<bf16>(randn<bf16>((size_t)C, 1.0f)), b = vec_cast<bf16>(randn<bf16>((size_t)C, 0.5f));
    Buf<bf16> gx, gy, gw, gb, out, res[2];
    gx.alloc(gpu, n); gy.alloc(gpu, n); gw.alloc(gpu, C); gb.alloc(gpu, C); out.alloc(gpu, n);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(bf16)); ctx_copy(gpu, gy.data(), y.data(), n * sizeof(bf16));
    ctx_copy(gpu, gw.data(), w.data(), C * sizeof(bf16)); ctx_copy(gpu, gb.data(), b.data(), C * sizeof(bf16));
    Buf<uint8_t> gq[2], gqt[2];
    Buf<Fp8Scales> gsc[2];
    Buf<float> grec[2], mean[2], rstd[2];
    const Fp8Scales sc0 = fp8_scales(4 * fp8_scale_for(4.0f, Fp8Format::E4M3));
    const float rec0 = 0.5f;
    for (int k = 0; k < 2; k++) {  // k = 0: the ops apart; 1: into codes
        gq[k].alloc(gpu, n); gqt[k].alloc(gpu, n); gsc[k].alloc(gpu, 1); grec[k].alloc(gpu, 1);
        mean[k].alloc(gpu, N); rstd[k].alloc(gpu, N); res[k].alloc(gpu, n);
        ctx_copy(gpu, gsc[k].data(), &sc0, sizeof sc0); ctx_copy(gpu, grec[k].data(), &rec0, sizeof(float));
        CUDA_CHECK(cudaMemset(gq[k].data(), 0x7f, n)); CUDA_CHECK(cudaMemset(gqt[k].data(), 0x7f, n));
        const Fp8Target t{gsc[k].data(), grec[k].data(), true};
        float* m = rms ? nullptr : mean[k].data();
        const bf16* bias = rms ? nullptr : gb.data();
        if (k == 0) {
            if (add) residual_layernorm_forward(gpu, res[k].data(), out.data(), m, rstd[k].data(), gx.data(), gy.data(), gw.data(), bias, N, C);
            else layernorm_forward(gpu, out.data(), m, rstd[k].data(), gx.data(), gw.data(), bias, N, C);
            fp8_quantize(gpu, gq[k].data(), gqt[k].data(), t, out.data(), N, C, Fp8Format::E4M3);
        } else {
            layernorm_forward_fp8(gpu, gq[k].data(), gqt[k].data(), t, m, rstd[k].data(), add ? res[k].data() : nullptr, gx.data(),
                                  add ? gy.data() : nullptr, gw.data(), bias, N, C);
        }
    }
    size_t diff = 0;
    std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> pairs = {
        {device_bytes(gq[0], n), device_bytes(gq[1], n)}, {device_bytes(gqt[0], n), device_bytes(gqt[1], n)},
        {device_bytes(grec[0], 1), device_bytes(grec[1], 1)}, {device_bytes(rstd[0], N), device_bytes(rstd[1], N)}};
    if (!rms) pairs.push_back({device_bytes(mean[0], N), device_bytes(mean[1], N)});
    if (add) pairs.push_back({device_bytes(res[0], n), device_bytes(res[1], n)});
    for (const auto& p : pairs)
        for (size_t i = 0; i < p.first.size(); i++) diff += p.first[i] != p.second[i];
    const std::vector<uint8_t> q = device_bytes(gq[1], n), rec = device_bytes(grec[1], 1);
    size_t saturated = 0;
    for (uint8_t c : q) saturated += (c & 0x7f) == fp8_largest_code(Fp8Format::E4M3);
    float r = 0; memcpy(&r, rec.data(), 4);
    const bool ok = diff == 0 && r > rec0 && saturated > 0;  // (the record moved, and some values saturated)
    printf("%s - %s: codes, transpose, record, statistics%s bit for bit the ops apart (%zu bytes differ; record %g; %zu codes saturated)\n",
           ok ? "ok" : "not ok", name, add ? " and res" : "", diff, r, saturated);
    (ok ? n_pass : n_fail)++;
}
#ifdef __CUDACC__
// The GPU's own conversion (cvt.rn.satfinite.{e4m3,e5m2}x2.f32, sm_89+) against fp8_encode: the
// library's (__nv_cvt_float_to_fp8), and fp8_encode2, which the quantize kernel runs (its pairs'
// byte order too). On the emulator fp8_encode2 is fp8_encode twice.
__global__ void fp8_cvt_kernel(uint8_t* hw, uint8_t* pairs, uint8_t* ours, const float* x, int n, Fp8Format f) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    hw[i] = (uint8_t)__nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
    pairs[i] = (uint8_t)(fp8_encode2(x[i & ~1], x[i | 1], f) >> (i & 1 ? 8 : 0));  // (n is even)
    ours[i] = fp8_encode(x[i], f);
}
static void check_fp8_hardware(Fp8Format f) {
    char name[160];
    snprintf(name, sizeof name, "fp8 %s: fp8_encode is the GPU's cvt.rn.satfinite, one value or two (fp8_encode2), on 200000 "
             "values (all binades, ties, saturation, subnormals, zeros, NaN)", fp8_name(f));
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major * 10 + minor < 89) { printf("# skip - %s: compute capability %d.%d has no FP8 conversion\n", name, major, minor); return; }
    std::vector<float> x;
    for (int c = 0; c < 256; c++) {  // every code's value, its neighbours' midpoints and a hair off them
        const float v = fp8_decode((uint8_t)c, f), w = fp8_decode((uint8_t)(c + 1), f);
        x.push_back(v);
        if (std::isfinite(v) && std::isfinite(w) && (c & 0x7f) != 0x7f) {
            const float mid = (v + w) / 2;
            x.push_back(mid); x.push_back(std::nextafter(mid, 0.0f)); x.push_back(std::nextafter(mid, 2 * mid));
        }
    }
    x.push_back(1e30f); x.push_back(-1e30f); x.push_back(NAN); x.push_back(0.0f); x.push_back(-0.0f);
    while (x.size() < 200000)
        x.push_back((float)((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(1.0 + rng.uniform(), (int)rng.below(44) - 22)));
    x.push_back(-NAN); x.push_back(1.0f);  // (a NaN beside a number in one pair)
    if (x.size() % 2) x.push_back(0.0f);    // (fp8_encode2 takes pairs)
    const int n = (int)x.size();
    Buf<float> gx; gx.alloc(gpu, n);
    Buf<uint8_t> hw, pairs, ours; hw.alloc(gpu, n); pairs.alloc(gpu, n); ours.alloc(gpu, n);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(float));
    fp8_cvt_kernel<<<(n + 255) / 256, 256, 0, gpu.stream>>>(hw.data(), pairs.data(), ours.data(), gx.data(), n, f);
    CUDA_LAUNCH_CHECK();
    std::vector<uint8_t> a(n), a2(n), b(n);
    ctx_copy(gpu, a.data(), hw.data(), n); ctx_copy(gpu, a2.data(), pairs.data(), n); ctx_copy(gpu, b.data(), ours.data(), n);
    int diff = 0;
    for (int i = 0; i < n; i++)
        for (const uint8_t got : {a[i], a2[i]})
            if (got != b[i] && !((got & 0x7f) == 0x7f && (b[i] & 0x7f) == 0x7f && std::isnan(x[i]))) {  // (a NaN's sign may differ)
                if (diff++ < 5) printf("#   x = %.9g: cvt 0x%02x, fp8_encode 0x%02x\n", x[i], got, b[i]);
            }
    printf("%s - %s (%d differ)\n", diff ? "not ok" : "ok", name, diff);
    (diff ? n_fail : n_pass)++;
}
#endif
// The device's 16-bit conversions (from_f / to_f: __float2half_rn, __half2float; and bf16's)
// against the host's bit arithmetic (common.h), bit for bit: every code decoded, and encoded
// from every code's value, each midpoint between neighbours and the fp32 values either side of
// it, overflow edges, NaN and 200000 random values across the range. (The emulator runs the
// host's functions on both sides; on a GPU the device's are its own instructions.)
template <class H> __global__ void half_convert_kernel(uint16_t* enc, float* dec, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 65536) dec[i] = to_f(H{(uint16_t)i});
    if (i < n) enc[i] = from_f<H>(x[i]).bits;
}
template <class H> static void check_half_conversion() {
    std::vector<float> x;
    for (uint32_t c = 0; c < 0x7c00; c++) {  // (positive finite codes; negated below)
        const float v = to_f(H{(uint16_t)c}), w = to_f(H{(uint16_t)(c + 1)});
        x.push_back(v);
        if (std::isfinite(w)) {
            const float mid = (float)(((double)v + w) / 2);
            x.push_back(mid); x.push_back(std::nextafter(mid, 0.0f)); x.push_back(std::nextafter(mid, INFINITY));
        }
    }
    if (std::is_same_v<H, bf16>) x.resize(std::min(x.size(), (size_t)120000));  // (bf16's codes run to 0x7f80; these reach far)
    for (float e : {65504.0f, 65519.99f, 65520.0f, 1e30f, INFINITY, NAN, 0.0f, 0x1p-25f, 0x1p-26f, 3.4e38f}) x.push_back(e);
    while (x.size() < 400000) x.push_back((float)((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(1.0 + rng.uniform(), (int)rng.below(60) - 30)));
    const size_t half = x.size();
    for (size_t i = 0; i < half; i++) x.push_back(-x[i]);
    const int n = (int)x.size();
    Buf<float> gx, gdec; Buf<uint16_t> genc;
    gx.alloc(gpu, n); gdec.alloc(gpu, 65536); genc.alloc(gpu, n);
    ctx_copy(gpu, gx.data(), x.data(), n * sizeof(float));
    half_convert_kernel<H><<<(std::max(n, 65536) + 255) / 256, 256, 0, gpu.stream>>>(genc.data(), gdec.data(), gx.data(), n);
    CUDA_LAUNCH_CHECK();
    std::vector<uint16_t> enc(n); std::vector<float> dec(65536);
    ctx_copy(gpu, enc.data(), genc.data(), n * sizeof(uint16_t)); ctx_copy(gpu, dec.data(), gdec.data(), 65536 * sizeof(float));
    int diff = 0;
    for (int i = 0; i < n; i++) {
        const uint16_t want = from_f<H>(x[i]).bits;
        const bool both_nan = std::isnan(x[i]) && std::isnan(to_f(H{enc[i]}));  // (a NaN's payload may differ)
        if (enc[i] != want && !both_nan && diff++ < 5) printf("#   x = %.9g: device 0x%04x, host 0x%04x\n", x[i], enc[i], want);
    }
    for (uint32_t c = 0; c < 65536; c++) {
        const float want = to_f(H{(uint16_t)c});
        if (memcmp(&want, &dec[c], 4) && !(std::isnan(want) && std::isnan(dec[c])) && diff++ < 5)
            printf("#   code 0x%04x: device %.9g, host %.9g\n", c, dec[c], want);
    }
    printf("%s - %s: the device's conversions are the host's bit for bit (%d values encoded, all 65536 codes decoded; %d differ)\n",
           diff ? "not ok" : "ok", dtype_name<H>(), n, diff);
    (diff ? n_fail : n_pass)++;
}

static void check_fp8() {
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        check_fp8_quantize(13, 37, f, 1.0f);     // odd sizes: partial tiles both ways
        check_fp8_quantize(256, 768, f, 1e-3f);  // whole tiles, 16-byte packs; a small scale (s > 1)
        check_fp8_quantize(1000, 100, f, 1e3f);  // s < 1; rows past one tile column
        check_fp8_quantize(4096, 2304, f, 1.0f); // 9.4M elements: the amax over 1024 blocks; 16-byte packs
        check_fp8_quantize(45, 64, f, 1.0f);     // rows packable, the transpose's not (45 % 8): one element a thread
        check_fp8_quantize_record(13, 37, f, true, 0.5f);     // delayed, one element a thread, partial tiles
        check_fp8_quantize_record(1024, 768, f, true, 0.5f);  // delayed, packs, 768 blocks' atomicMax
        check_fp8_quantize_record(1024, 768, f, true, 1e9f);  // a record above the amax stays
        check_fp8_quantize_record(1000, 100, f, false, 0.5f); // current scaling, recording through the scale kernel
        for (Fp8Act act : {Fp8Act::Gelu, Fp8Act::GeluBackward}) {
            check_fp8_quantize_gelu(256, 768, f, act, true);   // delayed: one pass; packs
            check_fp8_quantize_gelu(45, 37, f, act, false);    // current scaling: the amax pass makes the values too; one a thread
        }
#ifdef __CUDACC__
        check_fp8_hardware(f);
#endif
        check_fp8_dequantize<bf16>(f, 1024.0f);
        check_fp8_dequantize<float>(f, 0.125f);
    }
    check_fp8_layernorm(64, 64, false, false);   // two blocks of 32 rows
    check_fp8_layernorm(48, 200, true, false);   // the residual add; a last block of 16 rows; 200 = 8·25 channels
    check_fp8_layernorm(96, 64, true, true);     // RMSNorm
    check_fp8_layernorm(1024, 768, true, false); // 32 blocks' atomicMax; lanes with 3 packs a row
    const BiasGrad W = BiasGrad::Warps;
    check_matmul<bf16>(48, 32, 80, true, true, W, Fp8Mode::On);
    check_matmul<bf16>(256, 768, 2304, true, true, W, Fp8Mode::On);    // GPT-2's qkv
    check_matmul<bf16>(128, 3072, 768, false, true, W, Fp8Mode::On);   // its fc projection (no bias)
    check_matmul<bf16>(64, 96, 208, true, false, W, Fp8Mode::On);      // cuBLASLt without epilogues: the bias kernel after
    check_matmul<bf16>(45, 96, 208, true, true, W, Fp8Mode::On);       // forward of 45 rows: padded to 48 with zero rows
    check_matmul<bf16>(256, 768, 2304, true, true, W, Fp8Mode::Fast);  // fast accumulation (k = 768, 2304, 256): the switch's
                                                                        // plumbing; dev/cuda/matmul.cu v4 reports its error at GPT-2's sizes
    check_matmul<bf16>(256, 768, 2304, true, true, W, Fp8Mode::Dequantized);  // the fallback for products cuBLASLt refuses
    check_matmul<bf16>(45, 96, 208, true, true, W, Fp8Mode::Dequantized);     // ... with padded rows
}

template <class X> static void check_all() {
    check_encoder<X>(2, 7, 13, 50);
    check_encoder<X>(4, 64, 768, 50257);
    check_encoder<X>(4, 64, 200, 50257, 3);  // ~85 positions per token: 3 segments each
    check_encoder<X>(3, 40, 100, 50, 2);     // ~60 positions per token: 2 segments; bf16 C = 100: one element per load
    check_encoder<X>(4, 64, 200, 1000, 600, 300, 250);  // vocabulary-parallel: some tokens in this rank's rows
    check_encoder<X>(4, 64, 200, 1000, 3, 1, 1);        // one row, ~85 positions: 3 segments
    check_encoder<X>(2, 7, 13, 50, 20, 25, 25);         // none of the tokens in this rank's rows
    check_layernorm<X>(7, 13);
    check_layernorm<X>(256, 768);
    check_layernorm<X>(300, 200);  // bf16 packs: lanes past C, a last chunk of 12 rows
    check_layernorm<X>(40, 1024);  // the widest rows of the one-kernel backward (32 channels per lane)
    check_layernorm<X>(40, 1600);  // GPT-2 1558M's width: the one-kernel backward, its sums in shared memory
    check_layernorm<X>(20, 1288);  // ... with an odd number of packs a row (161 bf16, 322 fp32) in its sums' planes
    check_layernorm<X>(9, 4096);   // too wide for those: the two-kernel backward
    check_layernorm<X>(40001, 24); // chunks of 40 rows (ln_chunk_rows), the last of 1; 1001 partial rows
    check_layernorm<X>(7, 13, true);    // RMSNorm: the same shapes' paths (one lane a channel,
    check_layernorm<X>(300, 200, true); // packs with lanes past C, sums in registers, in shared
    check_layernorm<X>(40, 1600, true); // memory, two kernels)
    check_layernorm<X>(9, 4096, true);
    check_swiglu<X>(7, 13);
    check_swiglu<X>(256, 2048);
    check_rope<X>(2, 7, 3, 4, 20, 0);       // the v part of a row (past 3·4) untouched
    check_rope<X>(2, 64, 12, 64, 3 * 384, 1000);  // q and k of 6 heads each of 64 (GQA-free), positions from 1000
    check_rope<X>(1, 33, 3, 128, 3 * 128 + 2 * 128 / 2, 5);
    check_matmul<X>(9, 11, 70, true);
    check_matmul<X>(256, 768, 2304, true);
    check_matmul<X>(128, 3072, 768, false);
    check_matmul_gelu<X>(64, 96, 384, true);    // fused both ways
    check_matmul_gelu<X>(64, 96, 384, false);
    check_matmul_gelu<X>(9, 12, 70, true);      // OC % 8 != 0: the separate kernel
    check_matmul<X>(40, 96, 200, true, false);  // cuBLASLt without epilogues: bias kernel,
    check_matmul_gelu<X>(64, 96, 384, true, false);  // GELU kernels after the plain products
    check_matmul<X>(300, 40, 72, true);  // dbias: 3 chunks of rows, the last of 44; lanes past OC
    check_matmul<X>(300, 40, 70, true);  // bf16 OC = 70: one element per load, 3 column blocks
    check_matmul<X>(300, 40, 72, true, true, BiasGrad::Columns);
    check_matmul<X>(300, 40, 72, true, true, BiasGrad::Epilogue);  // cuBLASLt's BGRADB, its sums in X
    check_matmul<X>(64, 96, 200, true, false, BiasGrad::Epilogue);  // none found: the kernels
    check_attention<X>(2, 9, 12, 3, 3);
    check_attention<X>(2, 128, 768, 12, 12);
    check_attention<X>(1, 64, 256, 2, 2);   // head size 128
    check_attention<X>(2, 100, 768, 12, 12);  // T not a multiple of the tiles
    check_attention<X>(1, 200, 512, 4, 4);   // head size 128, T not a multiple of the tiles
    check_attention<X>(2, 100, 768, 12, 12, false);  // bf16: the warp-per-row kernels too
    check_attention<X>(2, 9, 24, 6, 2);       // grouped-query: groups of 3
    check_attention<X>(2, 100, 768, 12, 4);   // llama:d12's heads (3 to a key/value head), T not a multiple of the tiles
    check_attention<X>(1, 200, 512, 4, 1);    // head size 128, one key/value head for all 4
    check_attention<X>(2, 100, 768, 12, 4, false);  // bf16: the warp-per-row kernels with groups
    check_attention<X>(1, 300, 256, 4, 2, true, true);  // an attention sink (add_sink): 5 key tiles a row at most
    check_attention<X>(1, 320, 512, 4, 4, true, true);  // head size 128, a sink
    check_attention_block<X>(2, 9, 9, 12, 3, 3, 0, 9, 0, 9);         // contiguous cp: all rows, all keys
    check_attention_block<X>(2, 64, 64, 768, 12, 12, 0, 64, 0, 32);    // zigzag, o < r: the first chunk's keys
    check_attention_block<X>(1, 50, 50, 256, 2, 2, 25, 25, 0, 50);    // zigzag, o > r: the second chunk's queries; head size 128
    check_attention_block<X>(2, 30, 30, 768, 12, 4, 0, 30, 0, 15);    // grouped-query: the ring's k, v of 4 heads
    check_attention_block<X>(1, 200, 150, 256, 4, 2, 30, 130, 10, 140);  // several tiles each way, the last ones short; groups of 2
    check_attention_block<X>(1, 100, 120, 512, 4, 4, 0, 100, 20, 90);      // head size 128, keys from inside the buffer
    check_elementwise<X>(1);
    check_elementwise<X>(100003);
    check_classifier<X>(3, 37, 40);      // packs, V inside the last one
    check_classifier<X>(5, 30, 33);      // Vp odd: one element per load
    check_classifier<X>(64, 50257, 50304);
    check_classifier<X>(300, 250, 256);  // 300 rows: the pipelined kernel's blocks walk 2 or 3 rows each
    check_classifier_vp<X>(5, 37, 40, 2);      // the last part's padding inside it
    check_classifier_vp<X>(4, 50257, 50304, 4);
    check_adamw_norm<X>(17);
    check_adamw_norm<X>(1000003);
    check_adamw_norm<X>(1000004);  // (4 elements a thread; the decay runs start and end inside a thread's 4)
}

// usage: gpucheck_ops [all | ops | wgmma | chain | persistent | gemm]: every check (the default),
// or the groups apart — ops, the kernels the trainer runs by default; wgmma, the Hopper flash
// attention behind --flash-wgmma 1; chain and persistent, its layouts whose blocks wait for
// others or loop; gemm, our GEMM (--matmul-wgmma). test/gpucheck.sh runs them as parts, so that
// a fault there leaves the default path's result whole and names itself.
int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // (line by line: where a hang ends the run, its log names the checks that passed)
    const std::string group = argc > 1 ? argv[1] : "all";
    const char* groups[] = {"all", "ops", "fp32", "bf16", "fp16", "flash", "fp8", "wgmma", "chain", "persistent", "gemm"};
    if (std::find(std::begin(groups), std::end(groups), group) == std::end(groups)) {
        fprintf(stderr, "gpucheck_ops: unknown group '%s' (all, ops, or one of ops' fp32 bf16 fp16 flash fp8, or wgmma, chain, persistent, gemm)\n", group.c_str());
        return 2;
    }
    auto in = [&](const char* g) { return group == "all" || group == g || (group == "ops" && strcmp(g, "wgmma") && strcmp(g, "chain") && strcmp(g, "persistent") && strcmp(g, "gemm")); };
    const std::string why = cuda_unusable_reason(0);
    if (!why.empty()) { printf("not ok - gpucheck_ops: %s\n", why.c_str()); return 1; }
    cuda_ctx_init(&gpu, 0);
    if (in("fp32")) check_all<float>();
    if (in("bf16")) check_all<bf16>();
    if (in("fp16")) check_all<fp16>();
    if (in("flash")) {
        check_half_conversion<bf16>();
        check_half_conversion<fp16>();
        check_flash_variants(2, 100, 768, 12, 12);  // head size 64
        check_flash_variants(1, 300, 256, 4, 4);    // head size 64, 3 blocks of 128 query rows (the last one short)
        check_flash_variants(1, 200, 512, 4, 4);    // head size 128
        check_flash_variants(1, 300, 256, 4, 2);    // grouped-query, head size 64
    }
    if (in("fp8")) check_fp8();
    if (in("wgmma")) {
        check_wgmma_products<64>();
        check_wgmma_products<128>();
        check_red_sum();
        check_flash_wgmma(2, 100, 768, 12, 12);  // head size 64, T not a multiple of the tiles
        check_flash_wgmma(1, 300, 256, 4, 4);    // head size 64: 3 blocks of 128 rows, the last short (a warpgroup with no rows)
        check_flash_wgmma(1, 200, 512, 4, 4);    // head size 128
        check_flash_wgmma(1, 300, 256, 4, 2);    // grouped-query: a later head's first tile masked (the second warpgroup)
        check_flash_wgmma(2, 100, 768, 12, 4);   // llama:d12's groups of 3
        check_fused_grid();
        check_flash_fused(2, 100, 768, 12, 12);  // T not a multiple of the tiles
        check_flash_fused(1, 300, 256, 4, 4);    // 3 key blocks, the last short; 3 splits: one each
        check_flash_fused(2, 520, 256, 4, 2);    // grouped-query; 5 key blocks (3 splits: 2, 2, 1)
        check_flash_fused(1, 300, 512, 4, 4);    // head size 128 (--flash-backward fused128): 3 key blocks, the last short
        check_flash_fused(1, 200, 512, 4, 2);    // head size 128, grouped-query
    }
    if (in("chain")) {  // --flash-backward chain
        check_flash_chain(2, 100, 768, 12, 12);  // one key block
        check_flash_chain(1, 300, 256, 4, 4);    // 3 key blocks, the last short
        check_flash_chain(2, 520, 256, 4, 2);    // grouped-query; 5 key blocks
        check_flash_chain(1, 300, 512, 4, 4);    // head size 128: 3 key blocks, the last short
        check_flash_chain(1, 400, 512, 4, 2);    // head size 128, grouped-query; 4 key blocks
    }
    if (in("persistent")) {  // --flash-forward-persistent
        check_flash_persistent(2, 100, 768, 12, 12);  // 24 items, one block of rows a head
        check_flash_persistent(1, 300, 256, 4, 4);    // 3 blocks of 128 rows a head, the last short
        check_flash_persistent(1, 200, 512, 4, 4);    // head size 128
        check_flash_persistent(2, 520, 256, 4, 2);    // grouped-query; 5 blocks of 128 rows, 3 of 192
    }
    if (in("gemm")) {  // --matmul-wgmma
        check_gelu_fast();
        check_matmul_wgmma<bf16>(256, 128, 512, true, true, 3);    // 4 tiles on 3 blocks: block 0 runs two
        check_matmul_wgmma<bf16>(128, 768, 256, true, false, 1);   // 12 k-slices: the ring of 4 slots wraps 3 times
        check_matmul_wgmma<bf16>(200, 200, 264, true, true, 2);    // rows, k and columns off the tiles' multiples
        check_matmul_wgmma<bf16>(64, 64, 512, false, false, 2);    // no bias (the LM head's)
        check_matmul_wgmma<bf16>(2200, 64, 512, true, false, 5);   // 18 row tiles: bands of 16 and 2 (the last row tile short)
        check_matmul_wgmma<fp16>(130, 136, 256, true, true, 2);    // fp16
        check_matmul_wgmma_dinp<bf16>(256, 512, 128, true, 3);     // 4 tiles on 3 blocks, through the GELU
        check_matmul_wgmma_dinp<bf16>(128, 256, 768, false, 1);    // 12 k-slices: the ring wraps 3 times
        check_matmul_wgmma_dinp<bf16>(200, 264, 200, true, 2);     // rows, k and columns off the tiles' multiples
        check_matmul_wgmma_dinp<fp16>(130, 256, 136, true, 2);     // fp16
        // ping-pong (--matmul-wgmma 2): tiles of 128 × 128, each warpgroup every other one
        check_matmul_wgmma<bf16>(384, 128, 256, true, true, 2, 2);     // 6 tiles on 2 blocks: 3 a block, 2 and 1 a warpgroup
        check_matmul_wgmma<bf16>(128, 768, 384, true, false, 1, 2);    // 3 tiles, 12 k-slices each: the ring of 6 wraps 6 times
        check_matmul_wgmma<bf16>(200, 200, 264, true, true, 3, 2);     // rows, k and columns off the tiles' multiples
        check_matmul_wgmma<bf16>(64, 64, 128, false, false, 2, 2);     // one tile: the second warpgroup has none
        check_matmul_wgmma<bf16>(2200, 64, 384, true, false, 7, 2);    // 18 row tiles × 3: bands of 16 and 2
        check_matmul_wgmma_dinp<bf16>(256, 512, 128, true, 3, 2);      // through the GELU
        check_matmul_wgmma_dinp<fp16>(200, 264, 200, false, 2, 2);     // fp16, off the multiples
        // TMA stores (--matmul-wgmma 3): layout 1, the outputs through a stage in shared memory
        check_matmul_wgmma<bf16>(256, 128, 512, true, true, 3, 3);     // 4 tiles on 3 blocks, pre and GELU: two passes a tile
        check_matmul_wgmma<bf16>(128, 768, 512, true, false, 1, 3);    // 2 tiles, 12 k-slices: the ring of 3 wraps 8 times, the stage reused
        check_matmul_wgmma<bf16>(200, 200, 264, true, true, 2, 3);     // rows, k and columns off the tiles' multiples: TMA's bounds
        check_matmul_wgmma<bf16>(64, 64, 192, false, false, 1, 3);     // 192 columns: the last panel of 64 outside, not stored
        check_matmul_wgmma<fp16>(130, 136, 256, true, true, 2, 3);     // fp16
        check_matmul_wgmma_dinp<bf16>(256, 512, 128, true, 3, 3);      // through the GELU (pre read, dinp staged)
        check_matmul_wgmma_dinp<bf16>(200, 264, 200, false, 2, 3);     // off the multiples, dbias
        // clusters (--matmul-wgmma 4): layout 1 on tiles of 256 rows, each block 128 of them and half of B
        check_matmul_wgmma<bf16>(768, 768, 512, true, true, 4, 4);     // 6 tiles on 2 clusters; 12 k-slices: the ring wraps 3 times a tile
        check_matmul_wgmma<bf16>(200, 200, 264, true, true, 2, 4);     // off the multiples: the second block's rows end at 200
        check_matmul_wgmma<bf16>(100, 64, 512, false, false, 2, 4);    // the second block's rows all past N (zeros copied, none stored)
        check_matmul_wgmma<bf16>(4200, 64, 512, true, false, 6, 4);    // 17 tiles of 256 rows: bands of 16 and 1
        check_matmul_wgmma<fp16>(130, 136, 256, true, true, 2, 4);     // fp16
        check_matmul_wgmma_dinp<bf16>(640, 512, 1024, true, 4, 4);     // through the GELU; the last tile's second block past N: no dbias
                                                                        // rows there (its sums' buffer, grown here to 5 rows, ends at row 5)
        check_matmul_wgmma_dinp<fp16>(200, 264, 200, false, 2, 4);     // fp16, off the multiples, dbias
        // ping-pong in clusters (--matmul-wgmma 5): tiles of 256 × 128, each block 128 rows and one 64-row half of B
        check_matmul_wgmma<bf16>(768, 768, 256, true, true, 4, 5);     // 6 tiles on 2 clusters: 3 a block, 2 and 1 a warpgroup
        check_matmul_wgmma<bf16>(200, 200, 264, true, true, 2, 5);     // off the multiples
        check_matmul_wgmma_dinp<bf16>(640, 256, 1024, true, 4, 5);     // through the GELU, the last tile's second block past N (no dbias rows)
        // TMA stores in clusters (--matmul-wgmma 6)
        check_matmul_wgmma<bf16>(768, 768, 512, true, true, 4, 6);     // 6 tiles on 2 clusters, two passes a tile
        check_matmul_wgmma<bf16>(200, 200, 192, true, true, 2, 6);     // off the multiples, the last panel of 64 columns outside
        check_matmul_wgmma_dinp<fp16>(200, 264, 200, false, 2, 6);     // fp16, dbias
        // the LM head with the classifier's stats, every layout
        check_matmul_wgmma_logits<bf16>(200, 64, 392, 390, 2);     // rows and columns off the tiles; V inside the last part
        check_matmul_wgmma_logits<bf16>(64, 128, 392, 250, 1);     // two parts past V (−∞, 0); one block runs every tile
        check_matmul_wgmma_logits<fp16>(130, 64, 256, 256, 2);     // fp16, no padding
    }
    printf("# gpucheck_ops %s: %d passed, %d failed\n", group.c_str(), n_pass, n_fail);
    return n_fail ? 1 : 0;
}
