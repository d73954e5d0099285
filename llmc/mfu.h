/*
mfu.h — model FLOPs utilization: the fraction of the GPU's dense bf16 peak a run achieves.

  FLOPs per token (training) = 6·Ψ + 6·L·C·T
      6Ψ: forward 2Ψ and backward 4Ψ multiply-adds through every weight (PaLM's appendix B);
      6·L·C·T: attention's QKᵀ and PV, forward and backward, with the causal half skipped
      (a Llama's the same: its NH query heads of hd are C features, however many k, v heads).
  MFU = tokens/s · FLOPs per token / peak
Peaks (dense bf16 with fp32 accumulation, per GPU, from NVIDIA's datasheets; the sparse figures
there are twice these): H100 SXM 989 TFLOP/s, H100 NVL 835, H100 PCIe 756, H200 and GH200 989,
H800 989, B200 2250, GB200 2500, A100 312, L40S 362, A10 125, L4 121. The words of the device's
name pick one (gpu_peak_flops_named). Unknown GPUs and the CPU report no MFU (null in the log).
Test: test/test_ops.cpp (the FLOPs formula on GPT-2 124M; the peaks of a few names).
*/
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "common.h"
#include "model.h"

inline double flops_per_token(const GPTConfig& c, int T, size_t num_params) {
    return 6.0 * (double)num_params + 6.0 * c.num_layers * c.channels * (double)T;
}

// Dense bf16 peak in FLOP/s of the GPU that cudaGetDeviceProperties names `name` ("NVIDIA H100
// 80GB HBM3", "NVIDIA A100-SXM4-80GB", ...), or -1 when unknown. The name is cut into words at
// spaces and dashes, and the first row whose words are all among them wins ("H100 PCIe" before
// "H100"); whole words, so that an A100 is no A10 and an L40 no L4.
inline double gpu_peak_flops_named(const std::string& name) {
    static const struct { const char* words; double peak; } rows[] = {
        {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989e12}, {"H200", 989e12}, {"GH200", 989e12},
        {"H800", 989e12}, {"B200", 2250e12}, {"GB200", 2500e12}, {"A100", 312e12}, {"L40S", 362e12},
        {"A10", 125e12}, {"L4", 121e12},
    };
    auto words_of = [](const std::string& s) {
        std::vector<std::string> w(1);
        for (char c : s) {
            if (c == ' ' || c == '-') { if (!w.back().empty()) w.emplace_back(); }
            else w.back() += c;
        }
        return w;
    };
    const std::vector<std::string> have = words_of(name);
    for (const auto& r : rows) {
        bool all = true;
        for (const std::string& w : words_of(r.words)) all = all && std::find(have.begin(), have.end(), w) != have.end();
        if (all) return r.peak;
    }
    return -1;
}

// Dense bf16 peak of the current GPU in FLOP/s, or -1 when unknown (or on the CPU).
inline double gpu_peak_flops(const Ctx& ctx) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
        return gpu_peak_flops_named(p.name);
    }
#endif
    (void)ctx;
    return -1;
}
