/*
dev/cuda/attention.cu — causal attention, forward and backward: CPU reference vs CUDA versions.
  v1: llmc/attention.cuh's fp32 online-softmax kernels (one warp per query row; backward split
      into dq and dk/dv passes, no atomics)
Reports each version's max relative error against the CPU op and its time and TFLOP/s
(causal attention: 2·B·NH·T²·hs FLOPs forward — QKᵀ and PV over the lower triangle — and
2.5× that for the backward).
usage: ./build/dev_attention [B T C NH]   (default GPT-2 124M: 8 1024 768 12)
*/
#include "common.cuh"

int main(int argc, char** argv) {
    dev_init();
    int B = 8, T = 1024, C = 768, NH = 12;
    if (argc == 5) { B = atoi(argv[1]); T = atoi(argv[2]); C = atoi(argv[3]); NH = atoi(argv[4]); }
    printf("# attention B=%d T=%d C=%d NH=%d (head size %d)\n", B, T, C, NH, C / NH);
    auto qkv = dev_randn((size_t)B * T * 3 * C), dout = dev_randn((size_t)B * T * C);
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv((size_t)B * T * 3 * C);
    attention_forward(cpu_ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH);
    attention_backward(cpu_ctx, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    DevBuf gqkv(qkv), gout(out), glse(lse), gdout(dout), gdqkv(dqkv);
    double flops_fwd = 2.0 * B * NH * (double)T * T * (C / NH);  // 4·T²/2·hs per head
    Version fwd[] = {{"v1 fp32 warp-per-row", [&] { attention_forward(gpu_ctx, gout.p(), glse.p(), gqkv.p(), B, T, C, NH); }}};
    Version bwd[] = {{"v1 fp32 dq + dkv passes", [&] { attention_backward(gpu_ctx, gdqkv.p(), gdout.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH); }}};
    for (auto& v : fwd) {
        float ms = time_ms(v.run);
        printf("forward  %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", v.name, rel_err(out, gout.host()), ms, flops_fwd / ms / 1e9);
    }
    for (auto& v : bwd) {
        float ms = time_ms(v.run);
        printf("backward %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", v.name, rel_err(dqkv, gdqkv.host()), ms, 2.5 * flops_fwd / ms / 1e9);
    }
}
