/*
dev/cuda/classifier.cu — the fused classifier (softmax + cross-entropy + dlogits in place):
CPU reference vs CUDA versions, in fp32 and bf16.
  v1: the first kernel (kept here): one block per row, three passes over it (max, normalizer,
      gradient), one element per load
  v2: llmc/fused_classifier.cuh: two passes (max and normalizer together by online softmax,
      a pack's max first, then the gradient), 16-byte packs, exp as exp2_ftz
  v3: v2 with the row copied into shared memory (cp.async, 8 commit groups) and both passes
      reading it there (gpu_ctx.kernels.classifier_staged): the logits cross device memory twice
      (in, out), not three times; pass 1 waits for each group as it reaches it; v2's bits
  v4: v2 with 1024 threads a row (classifier_threads): two rows an SM in flight, not four (26 MB
      of GPT-2 rows on an H100, under its 50 MB L2), so pass 2 may find the row there; other bits
  v5: v2 as it was before exp2_ftz (kept here, the anchor of v2's and v3's ratios): expf for
      each element, and a running max updated element by element; v3 then waited for the whole
      row before pass 1
  v6: v3 by one block an SM walking its rows (gpu_ctx.kernels.classifier_staged = 2): two row
      buffers, the next row copied in while the block computes this one, so that device memory
      is busy during the compute too; v2's bits
  v7: classifier_from_parts: each 128 columns' max and Σ exp given (--classifier-stats epilogue:
      the LM head's product; here the CPU, before timing), so one pass over the row (other bits)
Reports max relative error and time and effective bandwidth over the bytes that must move (the
logits read once and written once: 2·N·Vp·sizeof(T); a version reading them more often shows a
lower number).
usage: ./build/dev_classifier [N V Vp]   (default 8192 50257 50304)
*/
#include "common.cuh"

// v1 (see the header); block_reduce is the library's
template <class floatX>
__global__ void classifier_v1_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    int n = blockIdx.x;
    floatX* row = logits + (size_t)n * Vp;
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, to_f(row[v]));
    m = block_reduce<true>(m);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(to_f(row[v]) - m);
    float log_sum = logf(block_reduce<false>(s));
    int tgt = targets[n];
    if (threadIdx.x == 0) losses[n] = -(to_f(row[tgt]) - m - log_sum);
    if (dloss == 0.0f) return;
    __syncthreads();
    for (int v = threadIdx.x; v < Vp; v += blockDim.x)
        row[v] = from_f<floatX>(v < V ? dloss * (expf(to_f(row[v]) - m - log_sum) - (v == tgt ? 1.0f : 0.0f)) : 0.0f);
}

// v5 (see the header)
template <class floatX, int P>
__global__ void classifier_v5_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    floatX* row = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x * P; i < V; i += blockDim.x * P) {
        const Pack<floatX, P> x = load_pack<P>(row + i);
        for (int j = 0; j < P && i + j < V; j++) {
            const float z = to_f(x.v[j]);
            if (z > m) { s = s * expf(m - z) + 1.0f; m = z; }
            else s += expf(z - m);
        }
    }
    const float mb = block_reduce<true>(m);
    const float log_sum = logf(block_reduce<false>(m == -INFINITY ? 0.0f : s * expf(m - mb)));
    const int tgt = targets[blockIdx.x];
    if (threadIdx.x == 0) losses[blockIdx.x] = -(to_f(row[tgt]) - mb - log_sum);
    if (dloss == 0.0f) return;
    __syncthreads();
    for (int i = threadIdx.x * P; i < Vp; i += blockDim.x * P) {
        const Pack<floatX, P> x = load_pack<P>(row + i);
        Pack<floatX, P> g;
        for (int j = 0; j < P; j++) {
            const int v = i + j;
            g.v[j] = from_f<floatX>(v < V ? dloss * (expf(to_f(x.v[j]) - mb - log_sum) - (v == tgt ? 1.0f : 0.0f)) : 0.0f);
        }
        store_pack<P>(row + i, g);
    }
}

template <class floatX> static void run(int N, int V, int Vp) {
    const char* dt = std::is_same_v<floatX, float> ? "fp32" : "bf16";
    auto logits = dev_randn((size_t)N * Vp, 3.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)dev_rng.below(V);
    Buf<int> gt; gt.alloc(gpu_ctx, N); ctx_copy(gpu_ctx, gt.data(), tgt.data(), N * 4);
    // the CPU op on the same T values (for bf16: the fp32 op with each output rounded once)
    std::vector<floatX> clog = vec_cast<floatX>(logits);
    std::vector<float> losses(N);
    fused_classifier(cpu_ctx, clog.data(), losses.data(), tgt.data(), N, V, Vp, 1.0f / N);
    const std::vector<float> want = vec_widen(clog);
    const std::vector<floatX> start = vec_cast<floatX>(logits);
    DevBuf<floatX> fresh(start), glog(start);
    DevBuf gloss(losses);
    const double lbound = std::is_same_v<floatX, float> ? 1e-5 : 1e-4, gbound = std::is_same_v<floatX, float> ? 1e-4 : 1e-2;
    std::vector<float> stats((size_t)N * classifier_parts(Vp) * 2);  // (v7's input)
    classifier_part_stats_cpu(start.data(), stats.data(), N, V, Vp);
    DevBuf gstats(stats);
    Version versions[] = {
        {"v1 three passes, 1 element/load", [&] { classifier_v1_kernel<<<N, 512, 0, gpu_ctx.stream>>>(glog.p(), gloss.p(), gt.data(), V, Vp, 1.0f / N); }},
        {"v2 online softmax, 16-byte packs", [&] { fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N); }},
        {"v3 v2, the row staged in shared memory", [&] {
            gpu_ctx.kernels.classifier_staged = 1;
            fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N);
            gpu_ctx.kernels.classifier_staged = 0;
        }},
        {"v4 v2, 1024 threads a row", [&] {
            gpu_ctx.kernels.classifier_threads = 1024;
            fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N);
            gpu_ctx.kernels.classifier_threads = 512;
        }},
        {"v6 v3, a block an SM, the next row in flight", [&] {
            gpu_ctx.kernels.classifier_staged = 2;
            fused_classifier(gpu_ctx, glog.p(), gloss.p(), gt.data(), N, V, Vp, 1.0f / N);
            gpu_ctx.kernels.classifier_staged = 0;
        }},
        {"v7 from the part stats, one pass", [&] {
            classifier_from_parts(gpu_ctx, glog.p(), gloss.p(), gstats.p(), gt.data(), N, V, Vp, 1.0f / N);
        }},
        {"v5 v2 with expf (before exp2_ftz)", [&] {
            constexpr int P = PACK<floatX>;
            if (Vp % P)
                classifier_v5_kernel<floatX, 1><<<N, 512, 0, gpu_ctx.stream>>>(glog.p(), gloss.p(), gt.data(), V, Vp, 1.0f / N);
            else
                classifier_v5_kernel<floatX, P><<<N, 512, 0, gpu_ctx.stream>>>(glog.p(), gloss.p(), gt.data(), V, Vp, 1.0f / N);
        }},
    };
    auto restore = [&] { ctx_copy(gpu_ctx, glog.p(), fresh.p(), start.size() * sizeof(floatX)); };
    std::vector<double> err_l, err_g, ms;
    for (auto& v : versions) {
        restore();
        v.run();
        err_l.push_back(rel_err(losses, gloss.host(), lbound));
        err_g.push_back(rel_err(want, glog.host(), gbound));
        ms.push_back(time_ms([&] { restore(); v.run(); }, 10) - time_ms(restore, 10));
    }
    for (size_t k = 0; k < ms.size(); k++)  // (the last, v5, is the kernel before exp2_ftz)
        printf("%s %-38s rel err: losses %.2e, dlogits %.2e  %8.3f ms  %7.1f GB/s  v5 / it %.3f\n", dt, versions[k].name, err_l[k],
               err_g[k], ms[k], 2.0 * N * Vp * sizeof(floatX) / ms[k] / 1e6, ms.back() / ms[k]);
}

int main(int argc, char** argv) {
    dev_init();
    int N = 8192, V = 50257, Vp = 50304;
    if (argc == 4) { N = atoi(argv[1]); V = atoi(argv[2]); Vp = atoi(argv[3]); }
    printf("# fused classifier N=%d V=%d Vp=%d (restoring the logits before each launch is subtracted)\n", N, V, Vp);
    run<float>(N, V, Vp);
    run<bf16>(N, V, Vp);
    return dev_done();
}
