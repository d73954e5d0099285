/*
cuda_device.h — finding the GPU, saying why it cannot be used, and starting the CUDA backend.

cuda_unusable_reason names what stops this build on this machine's GPU, with the remedy: no GPU
or driver, a driver older than the runtime, compute capability below 8.0, no code in this binary
for the GPU. cuda_ctx_init starts a Ctx on a GPU: its stream, cuBLASLt handle and workspace, and
its Autotuned (autotune.cuh). A build without CUDA has stubs that say there is none.

Main functions: cuda_unusable_reason, cuda_ctx_init, cuda_describe, cuda_device_count,
gpu_free_bytes, grid_for, gpu_scratch.

Tests: test/test_gpu_train.sh (the unusable-GPU cases on the emulator), test/gpucheck_ops.cu.
More: docs/backends.md.
(Included by common.h, after the Ctx it needs.)
*/
#pragma once
#include <algorithm>
#include <string>
#include "memory.h"
#ifdef __CUDACC__
#include <cudaTypedefs.h>  // (CUtensorMap and the type of cuTensorMapEncodeTiled)
#endif

#ifndef LLMC_CUDA
inline int cuda_device_count() { return 0; }
inline std::string cuda_describe() { return "none (a build without CUDA)"; }
inline size_t gpu_free_bytes() { return 0; }
#endif

#ifdef LLMC_CUDA
// Launch geometry for elementwise kernels and the check after every launch.
inline int grid_for(size_t n, int block = 256) { return (int)std::max<size_t>(1, std::min<size_t>(ceil_div(n, block), 65535u * 32u)); }
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// A per-call-site scratch buffer on the GPU that only grows (for small temporaries of the
// kernels: partial sums, index lists). Not thread-safe; the trainer is single-threaded on the host.
template <class floatX> inline floatX* gpu_scratch(Buf<floatX>& b, const Ctx& ctx, size_t n) {
    if (b.size() < n) b.alloc(ctx, n);
    return b.data();
}

inline int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

// An empty kernel: cudaFuncGetAttributes on it says whether this binary holds code that the
// current GPU can run.
__global__ void cuda_probe_kernel() {}

// Why this build cannot run on this machine's GPU number `index` (modulo the GPU count), or ""
// when it can (that GPU is then the current device). *present says whether there is a GPU at all
// (a driver that is too old counts: there is one, this build cannot use it). The cases a rented
// node meets, each with what to do:
//   no GPU, or no NVIDIA driver
//   a driver older than the CUDA runtime this binary links (cudaErrorInsufficientDriver)
//   compute capability below 8.0: the kernels use bf16 tensor cores (mma.sync), ldmatrix and
//     cp.async, which Ampere brought
//   no code in this binary for the GPU: the Makefile builds SASS for sm_80 (which runs on every
//     8.x GPU) and sm_90a, and sm_80 PTX that the driver compiles for newer GPUs (Blackwell) at
//     the first launch; a build with another NVCC_GENCODE, or a driver that cannot compile
//     that PTX, leaves a GPU without code
inline std::string cuda_unusable_reason(int index, bool* present = nullptr) {
    char why[512];
    bool present_ = false;
    if (!present) present = &present_;
    int n = 0, driver = 0, runtime = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    // (without any NVIDIA driver, cudaGetDeviceCount also says "insufficient driver": version 0)
    *present = (e == cudaSuccess && n > 0) || (e == cudaErrorInsufficientDriver && driver > 0);
    if (e == cudaErrorInsufficientDriver && driver > 0) {
        snprintf(why, sizeof why, "the NVIDIA driver supports CUDA up to %d.%d, but this build's CUDA runtime is %d.%d: "
                 "update the driver, or rebuild with a CUDA toolkit no newer than %d.%d",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
        return why;
    }
    if (e != cudaSuccess || n == 0) {
        snprintf(why, sizeof why, "no usable GPU on this machine: %s",
                 e == cudaErrorInsufficientDriver ? "no NVIDIA driver" : e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none");
        return why;
    }
    index %= n;
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index);
    cudaDeviceProp p;
    const char* name = cudaGetDeviceProperties(&p, index) == cudaSuccess ? p.name : "unknown";
    if (major < 8) {
        snprintf(why, sizeof why, "GPU %d (%s) has compute capability %d.%d, and the CUDA kernels need 8.0 or newer: "
                 "Ampere (A100, RTX 30xx) and later, for bf16 tensor cores and cp.async", index, name, major, minor);
        return why;
    }
    cudaFuncAttributes attr;
    cudaError_t f = cudaSetDevice(index);
    if (f == cudaSuccess) f = cudaFuncGetAttributes(&attr, cuda_probe_kernel);
    cudaGetLastError();
    if (f != cudaSuccess) {
        snprintf(why, sizeof why, "this binary has no code that GPU %d (%s, compute capability %d.%d) can run (%s); rebuild it "
                 "on this machine with make clean && make, which adds this GPU's architecture", index, name, major, minor,
                 cudaGetErrorString(f));
        return why;
    }
    return "";
}

// Makes ctx the CUDA context of GPU `index`: its stream, cuBLASLt handle and workspace.
inline Autotuned* autotuned_new();  // (autotune.cuh, included at the end of this file)
inline void cuda_ctx_init(Ctx* ctx, int index) {
    ctx->device = Device::CUDA;
    CUDA_CHECK(cudaSetDevice(index));
    CUDA_CHECK(cudaStreamCreate(&ctx->stream));
    CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
    ctx->workspace_size = 32u << 20;
    if (cudaMalloc(&ctx->workspace, ctx->workspace_size) != cudaSuccess) {  // the first allocation: say why, in one line
        cudaGetLastError();
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        fatal("GPU %d has %s free of %s, less than the %s cuBLASLt workspace the CUDA backend allocates first (other processes hold the rest?)",
              index, format_bytes((double)free_bytes).c_str(), format_bytes((double)total).c_str(), format_bytes((double)ctx->workspace_size).c_str());
    }
    ctx->tuned = autotuned_new();
    ctx->kernels = kernel_options_from_env();  // (the thresholds of its choices made by timing)
    g_cuda_active = true;
}

// The bytes the current GPU has free (cudaMemGetInfo: after this process's allocations so far,
// and every other process's on the same GPU).
inline size_t gpu_free_bytes() {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

// The current GPU and the CUDA libraries in one line, for the start of a run (a benchmark log
// then says what it ran on): name, architecture, SMs, memory; driver, runtime, cuBLASLt.
inline std::string cuda_describe() {
    int dev = 0, drv = 0, rt = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "unknown GPU";
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    const size_t lt = cublasLtGetVersion();  // major·10000 + minor·100 + patch
    char s[512];
    snprintf(s, sizeof s, "%s, sm_%d%d, %d SMs, %.1f GiB; CUDA driver %d.%d, runtime %d.%d, cuBLASLt %zu.%zu.%zu", p.name,
             p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, drv / 1000, drv % 1000 / 10,
             rt / 1000, rt % 1000 / 10, lt / 10000, lt / 100 % 100, lt % 100);
    return s;
}

// A TMA tensor map (sm_90) of a 3-D tensor of 16-bit values: dims[0] contiguous, strides in
// bytes of dims 1 and 2, copied in boxes of box[0] × box[1] × box[2] with the 128-byte swizzle,
// zeros outside the tensor. The driver's encoder comes through the runtime (no link to libcuda).
inline CUtensorMap tensor_map_3d_16bit(const void* base, const uint64_t dims[3], const uint64_t strides[2], const uint32_t box[3]) {
    CUtensorMap map;
#ifdef LLMC_SIMT
    const bool ok = simt::tensor_map_encode(&map, 2, 3, base, dims, strides, box, true);
#else
    static const auto encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
#else
        CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found));
#endif
        if (!fn || found != cudaDriverEntryPointSuccess) fatal("TMA: this driver has no cuTensorMapEncodeTiled (a CUDA 12 driver or newer has it)");
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    const cuuint32_t unit[3] = {1, 1, 1};
    const bool ok = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
#endif
    if (!ok)
        fatal("TMA: no tensor map for %llu x %llu x %llu values (strides %llu, %llu bytes) in boxes of %u x %u x %u", (unsigned long long)dims[0],
              (unsigned long long)dims[1], (unsigned long long)dims[2], (unsigned long long)strides[0], (unsigned long long)strides[1], box[0],
              box[1], box[2]);
    return map;
}
#endif
