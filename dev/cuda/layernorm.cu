/*
dev/cuda/layernorm.cu — LayerNorm forward and backward, and the residual add: CPU reference vs
CUDA versions, in fp32 and bf16.
  v1: llmc/layernorm.cuh with one element a load
  v2: the same kernels moving 16-byte packs
  v3: v2 with the backward in one kernel (dout and x read once; the sums in registers up to
      C = 1024, in shared memory up to 3632: run with C = 1600 for GPT-2 1558M's)
  v4: v3 with the residual add and the LayerNorm after it in one kernel: the trainer's
  v5: v4 with the one-kernel backward prefetching dinp in its first pass (C ≤ 1024)
All three ops are memory-bound, so each line reports bandwidth over the bytes that must move:
forward 2·N·C·s, backward 4·N·C·s, residual 3·N·C·s, residual + forward 4·N·C·s (s = the element
size). The bf16 versions are checked against the CPU's bf16 op. Details: docs/playgrounds.md.
usage: ./build/dev_layernorm [N C]   (default GPT-2 124M at B=16, T=1024: 16384 768)
*/
#include "common.cuh"

template <class X> static void run(int N, int C) {
    const double s = sizeof(X), NC = (double)N * C;
    const double bound = std::is_same_v<X, float> ? 1e-5 : 1e-2;  // gpucheck_ops' bounds
    // inputs exact in X, so both sides see the same values
    auto x = vec_cast<X>(dev_randn((size_t)N * C)), w = vec_cast<X>(dev_randn(C)), b = vec_cast<X>(dev_randn(C));
    auto dout = vec_cast<X>(dev_randn((size_t)N * C)), dx0 = vec_cast<X>(dev_randn((size_t)N * C)), y = vec_cast<X>(dev_randn((size_t)N * C));
    std::vector<X> out((size_t)N * C), dx = dx0, dw(C, from_f<X>(0.0f)), db(C, from_f<X>(0.0f)), res((size_t)N * C);
    std::vector<float> mean(N), rstd(N);
    layernorm_forward(cpu_ctx, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    layernorm_backward(cpu_ctx, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    residual_forward(cpu_ctx, res.data(), x.data(), y.data(), (size_t)N * C);
    std::vector<X> out2((size_t)N * C);  // res+fwd: res = x + y, out2 = LayerNorm(res)
    std::vector<float> mean2(N), rstd2(N);
    residual_layernorm_forward(cpu_ctx, res.data(), out2.data(), mean2.data(), rstd2.data(), x.data(), y.data(), w.data(), b.data(), N, C);
    DevBuf<X> gx(x), gw(w), gb(b), gdout(dout), gout(out), gdx(dx0), gdw(dw), gdb(db), gy(y), gres(res), gres2(res), gout2(out2);
    DevBuf gmean(mean), grstd(rstd), gmean2(mean2), grstd2(rstd2);
    const char* names[] = {"", "v1 one element per load", "v2 16-byte packs", "v3 one-kernel backward", "v4 residual fused",
                           "v5 v4, dinp prefetched"};
    for (int v = 1; v <= 5; v++) {
        gpu_ctx.kernels.layernorm_packs = v >= 2;
        gpu_ctx.kernels.layernorm_fused = v >= 3;
        gpu_ctx.kernels.layernorm_prefetch = v >= 5;
        const char* name = names[v];
        gdx.set(dx0); gdw.set(std::vector<X>(C, from_f<X>(0.0f))); gdb.set(std::vector<X>(C, from_f<X>(0.0f)));
        auto f = [&] { layernorm_forward(gpu_ctx, gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C); };
        auto bk = [&] { layernorm_backward(gpu_ctx, gdx.p(), gdw.p(), gdb.p(), gdout.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C); };
        auto r = [&] { residual_forward(gpu_ctx, gres.p(), gx.p(), gy.p(), (size_t)N * C); };
        auto rf = [&] {
            if (v >= 4) {
                residual_layernorm_forward(gpu_ctx, gres2.p(), gout2.p(), gmean2.p(), grstd2.p(), gx.p(), gy.p(), gw.p(), gb.p(), N, C);
            } else {
                residual_forward(gpu_ctx, gres2.p(), gx.p(), gy.p(), (size_t)N * C);
                layernorm_forward(gpu_ctx, gout2.p(), gmean2.p(), grstd2.p(), gres2.p(), gw.p(), gb.p(), N, C);
            }
        };
        f(); bk(); r(); rf();  // once for the check (the backward accumulates into dinp, dw, db)
        double e_out = rel_err(vec_widen(out), gout.host(), bound), e_dx = rel_err(vec_widen(dx), gdx.host(), bound);
        double e_dw = rel_err(vec_widen(dw), gdw.host(), bound), e_db = rel_err(vec_widen(db), gdb.host(), bound);
        double e_res = rel_err(vec_widen(res), gres.host(), bound), e_rf = rel_err(vec_widen(out2), gout2.host(), bound);
        e_rf = std::max(e_rf, rel_err(vec_widen(res), gres2.host(), bound));
        float mf = time_ms(f), mb = time_ms(bk), mr = time_ms(r), mrf = time_ms(rf);
        printf("%s %-24s forward  rel err %.2e  %8.3f ms %7.1f GB/s\n", dtype_name<X>(), name, e_out, mf, 2 * NC * s / mf / 1e6);
        printf("%s %-24s backward rel err %.2e (dinp) %.2e (dw) %.2e (db)  %8.3f ms %7.1f GB/s\n", dtype_name<X>(), name,
               e_dx, e_dw, e_db, mb, 4 * NC * s / mb / 1e6);
        printf("%s %-24s residual rel err %.2e  %8.3f ms %7.1f GB/s\n", dtype_name<X>(), name, e_res, mr, 3 * NC * s / mr / 1e6);
        printf("%s %-24s res+fwd  rel err %.2e  %8.3f ms %7.1f GB/s\n", dtype_name<X>(), name, e_rf, mrf, 4 * NC * s / mrf / 1e6);
    }
    gpu_ctx.kernels.layernorm_packs = gpu_ctx.kernels.layernorm_fused = true;
    gpu_ctx.kernels.layernorm_prefetch = false;
}

int main(int argc, char** argv) {
    dev_init();
    int N = 16384, C = 768;
    if (argc == 3) { N = atoi(argv[1]); C = atoi(argv[2]); }
    printf("# layernorm N=%d C=%d\n", N, C);
    run<float>(N, C);
    run<bf16>(N, C);
    return dev_done();
}
