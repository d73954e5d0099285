/*
dev/cuda/layernorm.cu — LayerNorm forward and backward: CPU reference vs CUDA versions.
  v1: llmc/layernorm.cuh (warp per row; parameter gradients by a two-stage reduction)
Reports max relative error and time and effective bandwidth (bytes that must move: forward
reads x and writes out, 8·N·C bytes; backward reads dout and x, read-modify-writes dinp: 16·N·C).
usage: ./build/dev_layernorm [N C]   (default 8192 768)
*/
#include "common.cuh"

int main(int argc, char** argv) {
    dev_init();
    int N = 8192, C = 768;
    if (argc == 3) { N = atoi(argv[1]); C = atoi(argv[2]); }
    printf("# layernorm N=%d C=%d\n", N, C);
    auto x = dev_randn((size_t)N * C), w = dev_randn(C), b = dev_randn(C), dout = dev_randn((size_t)N * C);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    layernorm_forward(cpu_ctx, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    layernorm_backward(cpu_ctx, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    DevBuf gx(x), gw(w), gb(b), gdout(dout), gout(out), gmean(mean), grstd(rstd), gdx(std::vector<float>(dx.size(), 0.0f)),
        gdw(std::vector<float>(C, 0.0f)), gdb(std::vector<float>(C, 0.0f));
    layernorm_forward(gpu_ctx, gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C);
    layernorm_backward(gpu_ctx, gdx.p(), gdw.p(), gdb.p(), gdout.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C);
    printf("v1 rel err: out %.2e, dinp %.2e, dw %.2e, db %.2e\n", rel_err(out, gout.host(), 1e-5), rel_err(dx, gdx.host(), 1e-5),
           rel_err(dw, gdw.host(), 1e-5), rel_err(db, gdb.host(), 1e-5));
    float f = time_ms([&] { layernorm_forward(gpu_ctx, gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C); });
    float bk = time_ms([&] { layernorm_backward(gpu_ctx, gdx.p(), gdw.p(), gdb.p(), gdout.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C); });
    printf("v1 forward  %8.3f ms  %7.1f GB/s\n", f, 8.0 * N * C / f / 1e6);
    printf("v1 backward %8.3f ms  %7.1f GB/s\n", bk, 16.0 * N * C / bk / 1e6);
    return dev_done();
}
