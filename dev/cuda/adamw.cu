/*
dev/cuda/adamw.cu — the AdamW update: CPU reference vs CUDA versions.
  v1: llmc/adamw.cuh, the trainer's kernel (fp32 state)
Reports max relative error and time and effective bandwidth (reads p, g, m, v and writes p, m,
v: 28 bytes per parameter).
usage: ./build/dev_adamw [N]   (default 124475904, GPT-2 124M)
*/
#include "common.cuh"

int main(int argc, char** argv) {
    dev_init();
    size_t n = argc == 2 ? strtoull(argv[1], nullptr, 10) : 124475904ull;
    printf("# adamw n=%zu\n", n);
    auto p = dev_randn(n), g = dev_randn(n), m = dev_randn(n, 0.01f), v = dev_randn(n, 0.01f);
    for (auto& x : v) x = x * x;
    DevBuf gp(p), gg(g), gm(m), gv(v);
    adamw_update(cpu_ctx, p.data(), g.data(), m.data(), v.data(), nullptr, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
    adamw_update(gpu_ctx, gp.p(), gg.p(), gm.p(), gv.p(), nullptr, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
    printf("v1 rel err: params %.2e, m %.2e, v %.2e\n", rel_err(p, gp.host(), 1e-6), rel_err(m, gm.host(), 1e-6), rel_err(v, gv.host(), 1e-6));
    float ms = time_ms([&] { adamw_update(gpu_ctx, gp.p(), gg.p(), gm.p(), gv.p(), nullptr, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.5f); });
    printf("v1 %8.3f ms  %7.1f GB/s\n", ms, 28.0 * n / ms / 1e6);
    return dev_done();
}
