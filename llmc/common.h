/*
common.h — the op context (Ctx), and the headers every file needs.

Every op in llmc/ takes a Ctx first, then plain pointers and sizes:

  layernorm_forward(ctx, out, mean, rstd, inp, w, b, N, C)

The op's body alone looks at ctx.device: it runs the CPU loop, or launches the CUDA kernel beside
it. The model and the parallel strategies never look at the device. ctx.kernels says which kernel
runs where there are several (kernel_options.h).

This file includes the rest, each with one job: errors.h (errors, files, time), comm_timeout.h
(the watchdog of waits on other ranks), dtypes.h (float, bf16, fp16), memory.h (buffers and
copies), host_memory.h (the host's room), cuda_device.h (the GPU), kernel_helpers.cuh (what
kernels share), autotune.cuh (choices made by timing).

Main pieces: Ctx, Device, LLMC_CUDA (the CUDA backend is compiled), CUDA_CHECK.

Tests: test/test_ops.cpp, test/gpucheck_ops.cu. More: docs/backends.md.
*/
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <algorithm>
#include <chrono>
#include <string>
#include <type_traits>
#include <vector>

// LLMC_CUDA: the CUDA backend is compiled. By nvcc (__CUDACC__), or by g++ under test/simt.h
// (LLMC_SIMT), which runs the same kernels on CPU fibers so that `make test` executes them.
#if defined(__CUDACC__) || defined(LLMC_SIMT)
#define LLMC_CUDA 1
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#endif
#ifdef LLMC_CUDA
#define CUDA_CHECK(call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) fatal("CUDA error at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(e_)); } while (0)
#define CUBLAS_CHECK(call) do { cublasStatus_t s_ = (call); \
    if (s_ != CUBLAS_STATUS_SUCCESS) fatal("cuBLAS error %d at %s:%d", (int)s_, __FILE__, __LINE__); } while (0)
#endif

#include "errors.h"
#include "comm_timeout.h"
#include "dtypes.h"
#include "kernel_options.h"

// ----------------------------------------------------------------------------
// devices and the op context

enum class Device { CPU, CUDA };

struct Profiler;  // profiler.h: per-op times, when --profile asks for them
struct Fp8Delayed;  // (fp8.cuh)
struct Fp8Scales;   // (fp8.cuh)
// Where an FP8 product's forward leaves its input and weight quantized and transposed (xᵀ, Wᵀ)
// with their scales (scales[0]: x's, scales[1]: W's), for its backward to multiply (matmul.cuh).
struct Fp8Kept { uint8_t* xt = nullptr; uint8_t* wt = nullptr; Fp8Scales* scales = nullptr; };
struct Autotuned;  // (autotune.cuh: what a GPU's run has chosen by timing)
struct Ctx {
    Device device = Device::CPU;
#ifdef LLMC_CUDA
    cudaStream_t stream = 0;
    cublasLtHandle_t lt = nullptr;
    void* workspace = nullptr;     // cuBLASLt workspace
    size_t workspace_size = 0;
#endif
    Profiler* prof = nullptr;
    KernelOptions kernels;       // which kernel runs where there are several (GPU; cuda_ctx_init reads its thresholds)
    Autotuned* tuned = nullptr;  // (GPU) shared by every copy: set by cuda_ctx_init
    bool fp8 = false;  // matmul_forward/backward multiply in FP8 (fp8.cuh): the model sets it for the blocks' layers
    Fp8Delayed* fp8_delayed = nullptr;  // and with --fp8-scaling delayed, the scaling state,
    int fp8_product = 0;                // and which of its products this is (model.h: linear_ctx)
    Fp8Kept fp8_kept;                   // and where its forward keeps xᵀ and Wᵀ (nullptr: nowhere)
};

#include "memory.h"
#include "host_memory.h"
#include "cuda_device.h"
#include "kernel_helpers.cuh"
#ifdef LLMC_CUDA
#include "autotune.cuh"  // (cuda_ctx_init makes each GPU's Autotuned)
#endif
