/*
mfu.h — model FLOPs utilization: the fraction of the GPU's dense bf16 peak a run achieves.

  FLOPs per token (training) = 6·Ψ + 6·L·C·T
      6Ψ: forward 2Ψ and backward 4Ψ multiply-adds through every weight (PaLM's appendix B);
      6·L·C·T: attention's QKᵀ and PV, forward and backward, with the causal half skipped.
  MFU = tokens/s · FLOPs per token / peak
Peaks (dense bf16, per GPU, NVIDIA's datasheets): H100 SXM 989 TFLOP/s, H100 NVL 835, H100 PCIe
756, H200 989, A100 312. Unknown GPUs and the CPU report no MFU (null in the log).
Test: test/test_ops.cpp (the FLOPs formula on GPT-2 124M).
*/
#pragma once
#include <cstring>
#include "common.h"
#include "model.h"

inline double flops_per_token(const GPTConfig& c, int T, size_t num_params) {
    return 6.0 * (double)num_params + 6.0 * c.num_layers * c.channels * (double)T;
}

// Dense bf16 peak of the current GPU in FLOP/s, or -1 when unknown (or on the CPU).
inline double gpu_peak_flops(const Ctx& ctx) {
#ifdef __CUDACC__
    if (ctx.device == Device::CUDA) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
        if (strstr(p.name, "H100") && strstr(p.name, "PCIe")) return 756e12;
        if (strstr(p.name, "H100") && strstr(p.name, "NVL")) return 835e12;
        if (strstr(p.name, "H100") || strstr(p.name, "H200")) return 989e12;
        if (strstr(p.name, "A100")) return 312e12;
    }
#endif
    (void)ctx;
    return -1;
}
