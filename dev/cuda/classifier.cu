/*
dev/cuda/classifier.cu — the fused classifier (softmax + cross-entropy + dlogits in place):
CPU reference vs CUDA versions.
  v1: llmc/fused_classifier.cuh (one block per row, three passes over the row)
Reports max relative error and time and effective bandwidth (the logits are read twice and
written once: 12·N·Vp bytes).
usage: ./build/dev_classifier [N V Vp]   (default 8192 50257 50304)
*/
#include "common.cuh"

int main(int argc, char** argv) {
    dev_init();
    int N = 8192, V = 50257, Vp = 50304;
    if (argc == 4) { N = atoi(argv[1]); V = atoi(argv[2]); Vp = atoi(argv[3]); }
    printf("# fused classifier N=%d V=%d Vp=%d\n", N, V, Vp);
    auto logits = dev_randn((size_t)N * Vp, 3.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)dev_rng.below(V);
    Buf<int> gt; gt.alloc(gpu_ctx, N); ctx_copy(gpu_ctx, gt.data(), tgt.data(), N * 4);
    std::vector<float> losses(N), grad = logits;
    fused_classifier(cpu_ctx, grad.data(), losses.data(), tgt.data(), N, V, Vp, 1.0f / N);
    DevBuf glog(logits), gloss(losses);
    fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N);
    printf("v1 rel err: losses %.2e, dlogits %.2e\n", rel_err(losses, gloss.host(), 1e-5), rel_err(grad, glog.host(), 1e-4));
    DevBuf fresh(logits);
    float ms = time_ms([&] { ctx_copy(gpu_ctx, glog.p(), fresh.p(), logits.size() * 4); fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N); }, 10);
    float copy = time_ms([&] { ctx_copy(gpu_ctx, glog.p(), fresh.p(), logits.size() * 4); }, 10);
    float k = ms - copy;
    printf("v1 %8.3f ms  %7.1f GB/s (restoring the logits before each launch is subtracted)\n", k, 12.0 * N * Vp / k / 1e6);
    return dev_done();
}
