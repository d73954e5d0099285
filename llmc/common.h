/*
common.h — the few things every file needs: errors, the op context, memory, dtypes, kernel helpers.

Every op in llmc/ takes a Ctx first, then plain pointers and sizes:

  layernorm_forward(ctx, out, mean, rstd, inp, w, b, N, C)

The op's body alone looks at ctx.device: it runs the CPU loop, or launches the CUDA kernel beside
it. The model and the parallel strategies never look at the device.

Errors: usage_error (a bad command line, exit 2), fatal and CHECK (bad data or I/O, exit 1),
always one line that says what and where. Memory: Buf<T> on the Ctx's device, ctx_copy,
ctx_zero, op_scratch, HostStage (page-locked transfers that never drain the GPU's queue).
Dtypes: float, bf16, fp16, converted with round-to-nearest-even (to_f, from_f<T>); a 16-bit op on
the CPU is its fp32 op with each output rounded once (F32View).

Main pieces: Ctx, usage_error, fatal, Buf, ctx_copy, F32View, HostStage, Pack, grid_for,
cuda_unusable_reason (why a GPU cannot be used, and what to do).

Test: test/test_ops.cpp (everything here, bf16 and fp16 rounding), test/gpucheck_ops.cu (the
kernel helpers in every kernel). More: docs/backends.md.
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
#include "kernel_options.h"

// ----------------------------------------------------------------------------
// errors

inline int g_rank = 0, g_world = 1;        // this process in the world (set by comm.h)
inline void (*g_leave_collectively)() = nullptr;  // comm.h: finalize MPI when all ranks exit

[[noreturn]] inline void die_with(int code, bool collective, const char* fmt, va_list ap) {
    fflush(stdout);
    if (!collective || g_rank == 0) {
        if (g_world > 1 && !collective) fprintf(stderr, "[rank %d] ", g_rank);
        fprintf(stderr, "error: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
    }
    if (collective && g_leave_collectively) g_leave_collectively();
    exit(code);
}
[[noreturn]] inline void usage_error(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); die_with(2, true, fmt, ap);
}
[[noreturn]] inline void fatal(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); die_with(1, false, fmt, ap);
}
inline void print0(const char* fmt, ...) {
    if (g_rank != 0) return;
    va_list ap; va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
}
#define CHECK(cond, ...) do { if (!(cond)) fatal(__VA_ARGS__); } while (0)

// ----------------------------------------------------------------------------
// files: every open/read/write checked, with the file name in the message

inline FILE* fopen_or_die(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (!f) fatal("cannot open '%s' (%s): %s", path, mode, strerror(errno));
    return f;
}
inline void fread_or_die(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    size_t got = fread(dst, size, n, f);
    if (got != n) fatal("'%s' is truncated: expected %zu more bytes, got %zu", path, size * n, size * got);
}
inline void fwrite_or_die(const void* src, size_t size, size_t n, FILE* f, const char* path) {
    if (fwrite(src, size, n, f) != n) fatal("cannot write '%s': %s", path, strerror(errno));
}
inline long long file_size_or_die(const char* path) {
    FILE* f = fopen_or_die(path, "rb");
    fseek(f, 0, SEEK_END);
    long long n = ftell(f);
    fclose(f);
    return n;
}

// ----------------------------------------------------------------------------
// devices and the op context

enum class Device { CPU, CUDA };

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

struct Profiler;  // profiler.h: per-op times, when --profile asks for them
struct Fp8Delayed;  // (fp8.cuh)
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
    KernelOptions kernels = kernel_options_from_env();  // which kernel runs where there are several (GPU)
    Autotuned* tuned = nullptr;  // (GPU) shared by every copy: set by cuda_ctx_init
    bool fp8 = false;  // matmul_forward/backward multiply in FP8 (fp8.cuh): the model sets it for the blocks' layers
    Fp8Delayed* fp8_delayed = nullptr;  // and with --fp8-scaling delayed, the scaling state,
    int fp8_product = 0;                // and which of its products this is (model.h: linear_ctx)
};

// ----------------------------------------------------------------------------
// bf16 <-> fp32 (round to nearest even; NaN stays NaN)

#ifdef LLMC_CUDA
#define HD __host__ __device__
#else
#define HD
#endif

inline uint16_t fp32_to_bf16(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float bf16_to_fp32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x;
}

// The bf16 storage type, the same 2 bytes on the host and the GPU (cuBLASLt's CUDA_R_16BF).
struct bf16 { uint16_t bits; };

// fp16 <-> fp32: IEEE binary16, 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite
// 65504, subnormals down to 2^-24. Round to nearest even; past the largest finite value (from
// 65520 up) it is ±inf, as IEEE (and __float2half_rn) say — the overflow dynamic loss scaling
// watches for (train_gpt.cu). NaN stays NaN. Each case is computed and one picked (no branches),
// so the compiler vectorizes the conversion loops (F32View): as fast as bf16's on the CPU.
inline uint16_t fp32_to_fp16(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    // below 2^-14 (subnormal or 0): |x| + 0.5 rounds |x| to a multiple of 2^-24 (0.5's ulp), by
    // the FPU's round to nearest even; the multiple is the code
    float f; memcpy(&f, &a, 4);
    f += 0.5f;
    uint32_t v; memcpy(&v, &f, 4);
    const uint32_t subnormal = v - 0x3f000000u;
    // normal: the exponent rebiased (127 → 15: minus 112 << 23), the 13 dropped bits rounded to
    // nearest even (add 0xfff, and 1 more when the kept part is odd); a carry out of the top
    // binade (from 65520) lands on the inf code
    const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN (quiet) : ≥ 65536 or inf
    return (uint16_t)(sign | (a >= 0x47800000u ? big : a < 0x38800000u ? subnormal : normal));
}
inline float fp16_to_fp32(uint16_t h) {
    // the 15 magnitude bits in fp32's places, the exponent rebiased (+112 << 23); exponent 31
    // (inf, NaN) goes the rest of the way to 255; exponent 0 (subnormal, 0) is made 2^-14·(1 + m/1024)
    // and 2^-14 taken off (exact): m·2^-24
    const uint32_t shifted = (uint32_t)(h & 0x7fffu) << 13, e = shifted & 0x0f800000u;
    uint32_t u = shifted + (112u << 23);
    u += e == 0x0f800000u ? 112u << 23 : 0u;
    u += e == 0 ? 1u << 23 : 0u;
    float x; memcpy(&x, &u, 4);
    x -= e == 0 ? 0x1p-14f : 0.0f;
    uint32_t r; memcpy(&r, &x, 4);
    r |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&x, &r, 4);
    return x;
}

// The fp16 storage type (cuBLASLt's CUDA_R_16F): --precision fp16, with dynamic loss scaling.
struct fp16 { uint16_t bits; };

HD inline float to_f(float x) { return x; }
HD inline float to_f(bf16 x) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)x.bits << 16);
#else
    return bf16_to_fp32(x.bits);
#endif
}
HD inline float to_f(fp16 x) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(x.bits));
#else
    return fp16_to_fp32(x.bits);
#endif
}
template <class floatX> HD inline floatX from_f(float x);
template <> HD inline float from_f<float>(float x) { return x; }
template <> HD inline bf16 from_f<bf16>(float x) {
#ifdef __CUDA_ARCH__
    return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
#else
    return bf16{fp32_to_bf16(x)};
#endif
}
template <> HD inline fp16 from_f<fp16>(float x) {
#ifdef __CUDA_ARCH__
    return fp16{__half_as_ushort(__float2half_rn(x))};
#else
    return fp16{fp32_to_fp16(x)};
#endif
}
// bf16 or fp16: the 16-bit float types, which the tensor-core kernels take (flash_attention.cuh)
template <class floatX> inline constexpr bool is_half_type = std::is_same_v<floatX, bf16> || std::is_same_v<floatX, fp16>;

// Host vectors converted element by element (tests and kernel playgrounds): rounded to T once,
// and back. (On every core: a playground's inputs are up to ~10^9 elements.)
template <class floatX> inline std::vector<floatX> vec_cast(const std::vector<float>& v) {
    std::vector<floatX> r(v.size());
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); i++) r[i] = from_f<floatX>(v[i]);
    return r;
}
template <class floatX> inline std::vector<float> vec_widen(const std::vector<floatX>& v) {
    std::vector<float> r(v.size());
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < v.size(); i++) r[i] = to_f(v[i]);
    return r;
}

enum class DType { FP32, BF16, FP16 };
template <class floatX> inline DType dtype_of();
template <> inline DType dtype_of<float>() { return DType::FP32; }
template <> inline DType dtype_of<bf16>() { return DType::BF16; }
template <> inline DType dtype_of<fp16>() { return DType::FP16; }
template <class floatX> inline const char* dtype_name() {
    return dtype_of<floatX>() == DType::FP32 ? "fp32" : dtype_of<floatX>() == DType::BF16 ? "bf16" : "fp16";
}

// Keeps a parameter out of template argument deduction (a nullptr bias must not decide the dtype).
template <class E> struct NoDeduceT { using type = E; };
template <class E> using NoDeduce = typename NoDeduceT<E>::type;

// ----------------------------------------------------------------------------
// time

inline double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------
// 64-byte aligned vectors. Every buffer of the model is one, so vectorized loops see the same
// alignment in every run: reductions are then bit-identical from run to run (resume relies on it).

template <class E> struct AlignedAlloc {
    using value_type = E;
    AlignedAlloc() = default;
    template <class U> AlignedAlloc(const AlignedAlloc<U>&) {}
    E* allocate(size_t n) {
        size_t bytes = ceil_div(n * sizeof(E), 64) * 64;
        void* p = aligned_alloc(64, bytes ? bytes : 64);
        if (!p) fatal("out of memory allocating %zu bytes", n * sizeof(E));
        return (E*)p;
    }
    void deallocate(E* p, size_t) { free(p); }
    template <class U> bool operator==(const AlignedAlloc<U>&) const { return true; }
    template <class U> bool operator!=(const AlignedAlloc<U>&) const { return false; }
};
template <class E> using avec = std::vector<E, AlignedAlloc<E>>;

// An fp32 view of n elements of a host buffer of floatX, for running the fp32 CPU reference of an op
// on floatX data. For float it is the buffer itself (no copy: the fp32 path is untouched). For bf16
// it is a widened copy (if `read`), and store() rounds it back once: the op's result, to bf16.
template <class floatX> struct F32View {
    float* p;
    avec<float> tmp;
    floatX* dst;
    size_t n;
    F32View(const floatX* src, size_t count, bool read = true) : p(nullptr), dst(const_cast<floatX*>(src)), n(count) {
        if constexpr (std::is_same_v<floatX, float>) { p = dst; (void)read; }
        else {
            if (!src) return;
            tmp.resize(count);
            if (read) for (size_t i = 0; i < count; i++) tmp[i] = to_f(src[i]);
            p = tmp.data();
        }
    }
    void store() {
        if constexpr (!std::is_same_v<floatX, float>) if (dst) for (size_t i = 0; i < n; i++) dst[i] = from_f<floatX>(tmp[i]);
    }
};

// ----------------------------------------------------------------------------
// memory on the Ctx's device

inline bool g_cuda_active = false;  // set once the CUDA backend is initialized

inline bool is_device_ptr(const void* p) {
#ifdef LLMC_CUDA
    if (!g_cuda_active || !p) return false;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return false; }
    return a.type == cudaMemoryTypeDevice;
#else
    (void)p; return false;
#endif
}

// dst ← src (bytes), host or device on either side. With host memory on a side it is complete
// when it returns (the host may read dst, or reuse src). Device to device it is only queued on
// ctx's stream, whose later work sees it: waiting would drain the GPU's queue in the middle of a
// step (ZeRO's per-unit copies); another stream must wait for it with an event (comm.h).
inline void ctx_copy(const Ctx& ctx, void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
#ifdef LLMC_CUDA
    const bool dst_dev = is_device_ptr(dst), src_dev = is_device_ptr(src);
    if (ctx.device == Device::CUDA || dst_dev || src_dev) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream));
        if (!(dst_dev && src_dev)) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        return;
    }
#endif
    (void)ctx;
    memcpy(dst, src, bytes);
}

// Waits for the work queued on the ctx (a no-op on the CPU, where every op is synchronous).
inline void ctx_sync(const Ctx& ctx) {
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
#endif
    (void)ctx;
}

inline void ctx_zero(const Ctx& ctx, void* p, size_t bytes) {
    if (bytes == 0) return;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx.stream)); return; }
#endif
    (void)ctx;
    memset(p, 0, bytes);
}

// Copies the host does not wait for. ctx_copy to or from the host waits for the whole stream:
// inside a micro-step that drains the GPU's queue, which then idles while the host launches the
// next kernels. A HostStage is a page-locked host buffer and an event: stage_upload copies host bytes into it
// and queues the copy to the device; stage_download queues a copy from the device into it, and
// stage_wait waits for that copy alone (not for the work queued after it) before the host reads.
// The next use of a stage first waits for its last copy, since the copy engine reads or writes
// the buffer after the call has returned; in a training loop that copy is long done by then.
// On the CPU the stage is plain memory and every copy is complete when it returns.
// Checked by every training on the emulator (test/simt.h), which protects a page-locked buffer
// from its asynchronous copy until the host waits for it: a missing wait faults there.
struct HostStage {
    void* host = nullptr;
    size_t cap = 0;
    Device dev = Device::CPU;
#ifdef LLMC_CUDA
    cudaEvent_t done = nullptr;
    bool pending = false;  // a copy into or out of `host` may still be running
#endif
    HostStage() = default;
    HostStage(const HostStage&) = delete;
    HostStage& operator=(const HostStage&) = delete;
    HostStage(HostStage&& o) noexcept { *this = std::move(o); }
    HostStage& operator=(HostStage&& o) noexcept {
        if (this != &o) {
            release();
            host = o.host; cap = o.cap; dev = o.dev; o.host = nullptr; o.cap = 0;
#ifdef LLMC_CUDA
            done = o.done; pending = o.pending; o.done = nullptr; o.pending = false;
#endif
        }
        return *this;
    }
    ~HostStage() { release(); }
    void release() {  // (unchecked: a static stage may outlive the CUDA runtime at exit)
#ifdef LLMC_CUDA
        if (dev == Device::CUDA) {
            if (done) { cudaEventSynchronize(done); cudaEventDestroy(done); }
            if (host) cudaFreeHost(host);
            done = nullptr; pending = false; host = nullptr; cap = 0;
            return;
        }
#endif
        free(host); host = nullptr; cap = 0;
    }
};

// Waits for the stage's last copy; its host buffer may then be read (after a download) or reused.
inline const void* stage_wait(HostStage& s) {
#ifdef LLMC_CUDA
    if (s.pending) { CUDA_CHECK(cudaEventSynchronize(s.done)); s.pending = false; }
#endif
    return s.host;
}

// The stage's host buffer, at least `bytes` long, on ctx's device kind, free to write.
inline void* stage_reserve(const Ctx& ctx, HostStage& s, size_t bytes) {
    stage_wait(s);
    if (s.cap >= bytes && s.dev == ctx.device) return s.host;
    s.release();
    s.dev = ctx.device;
    size_t alloc = std::max<size_t>(64, ceil_div(bytes, 64) * 64);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        if (cudaMallocHost(&s.host, alloc) != cudaSuccess) fatal("out of page-locked host memory allocating %zu bytes", alloc);
        CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
        s.cap = alloc;
        return s.host;
    }
#endif
    s.host = aligned_alloc(64, alloc);
    if (!s.host) fatal("out of memory allocating %zu bytes", alloc);
    s.cap = alloc;
    return s.host;
}

// dst (on ctx's device) ← src (host), without waiting; src may be reused as soon as it returns.
inline void stage_upload(const Ctx& ctx, HostStage& s, void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        memcpy(stage_reserve(ctx, s, bytes), src, bytes);
        CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, ctx.stream));
        CUDA_CHECK(cudaEventRecord(s.done, ctx.stream));
        s.pending = true;
        return;
    }
#endif
    (void)s;
    memcpy(dst, src, bytes);
}

// stage ← src (on ctx's device), without waiting; stage_wait(s) then returns the bytes.
inline void stage_download(const Ctx& ctx, HostStage& s, const void* src, size_t bytes) {
    void* h = stage_reserve(ctx, s, bytes);
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        CUDA_CHECK(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, ctx.stream));
        CUDA_CHECK(cudaEventRecord(s.done, ctx.stream));
        s.pending = true;
        return;
    }
#endif
    memcpy(h, src, bytes);
}

// A size for people: "1.50 GiB", "26.6 MiB".
inline std::string format_bytes(double bytes) {
    char s[32];
    if (bytes >= 1073741824.0) snprintf(s, sizeof s, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(s, sizeof s, "%.1f MiB", bytes / 1048576.0);
    return s;
}

// A number from a cgroup file: its first one (memory.max, memory.current), or with key the one
// on the line "key N" (memory.stat). -1 where the file or the key is missing, or for "max".
inline double cgroup_number(const std::string& path, const char* key = nullptr) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return -1;
    char line[256], name[128];
    double v = -1, x;
    while (fgets(line, sizeof line, f)) {
        if (!key) { if (sscanf(line, "%lf", &x) == 1) v = x; break; }
        if (sscanf(line, "%127s %lf", name, &x) == 2 && strcmp(name, key) == 0) { v = x; break; }
    }
    fclose(f);
    return v;
}

// What this process's memory cgroup (a container's limit, a Slurm job's --mem) still lets it
// allocate before the kernel kills it: the limit less what the cgroup holds, not counting the
// file cache the kernel drops first (inactive_file); the tightest of the cgroup and its parents.
// -1 where no limit applies. root: where cgroupfs is mounted; self: the text of /proc/self/cgroup
// (arguments, so that test_ops runs it on made-up trees).
//   cgroup v2: the line "0::PATH"; ROOT/PATH and each parent: memory.max ("max": none),
//              memory.current, memory.stat's inactive_file.
//   cgroup v1: the line "N:…memory…:PATH"; ROOT/memory/PATH (or, in a container that sees only
//              its own, ROOT/memory): memory.limit_in_bytes (~2^63: none) and memory.stat's
//              hierarchical_memory_limit (the parents'), memory.usage_in_bytes, total_inactive_file.
inline double cgroup_room_bytes(const std::string& root, const std::string& self) {
    std::string v2_path, v1_path;
    bool v1 = false;
    for (size_t pos = 0; pos < self.size();) {
        size_t end = self.find('\n', pos);
        if (end == std::string::npos) end = self.size();
        const std::string line = self.substr(pos, end - pos);
        pos = end + 1;
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
        else if (("," + controllers + ",").find(",memory,") != std::string::npos) { v1 = true; v1_path = path; }
    }
    double room = -1;
    auto tighten = [&](double limit, double used, double cache) {
        if (limit < 0 || limit >= 1e18 || used < 0) return;  // no limit here
        const double r = std::max(0.0, limit - (used - std::max(cache, 0.0)));
        room = room < 0 ? r : std::min(room, r);
    };
    if (v1) {
        std::string dir = root + "/memory" + (v1_path == "/" ? "" : v1_path);
        if (cgroup_number(dir + "/memory.limit_in_bytes") < 0) dir = root + "/memory";
        double limit = cgroup_number(dir + "/memory.limit_in_bytes");
        const double parents = cgroup_number(dir + "/memory.stat", "hierarchical_memory_limit");
        if (parents >= 0 && (limit < 0 || parents < limit)) limit = parents;
        tighten(limit, cgroup_number(dir + "/memory.usage_in_bytes"), cgroup_number(dir + "/memory.stat", "total_inactive_file"));
    } else if (!v2_path.empty()) {
        for (std::string p = v2_path;;) {  // the cgroup, then each parent up to the mount's root
            const std::string dir = root + (p == "/" ? "" : p);
            tighten(cgroup_number(dir + "/memory.max"), cgroup_number(dir + "/memory.current"),
                    cgroup_number(dir + "/memory.stat", "inactive_file"));
            if (p == "/" || p.empty()) break;
            p = p.substr(0, p.rfind('/'));
            if (p.empty()) p = "/";
        }
    }
    return room;
}

// The host memory this process can still be given: /proc/meminfo's MemAvailable (free memory
// plus the page cache Linux can drop), or less where its memory cgroup allows less
// (*by_cgroup then says so); 0 where neither is known. LLMC_HOST_MEMORY=<bytes> in the
// environment caps it (plan as if no more were available: a node shared with other jobs, or a
// test that needs the same number in two runs, which MemAvailable, moving by the second, is not).
inline double host_available_bytes(bool* by_cgroup = nullptr) {
    double cap = -1;
    if (const char* env = getenv("LLMC_HOST_MEMORY")) {
        char* end = nullptr;
        cap = strtod(env, &end);
        if (end == env || *end != 0 || cap <= 0) usage_error("LLMC_HOST_MEMORY=%s: expected a number of bytes greater than 0", env);
    }
    double kib = 0;
    char line[256];
    if (FILE* f = fopen("/proc/meminfo", "r")) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
        fclose(f);
    }
    std::string self;
    if (FILE* f = fopen("/proc/self/cgroup", "r")) {
        while (fgets(line, sizeof line, f)) self += line;
        fclose(f);
    }
    const double cgroup = cgroup_room_bytes("/sys/fs/cgroup", self), meminfo = kib * 1024;
    const bool tighter = cgroup >= 0 && (meminfo <= 0 || cgroup < meminfo);
    if (by_cgroup) *by_cgroup = tighter;
    const double room = tighter ? cgroup : meminfo;
    return cap > 0 && (room <= 0 || cap < room) ? cap : room;
}

inline size_t g_gpu_bytes = 0, g_gpu_bytes_peak = 0;  // Buf's GPU memory now, and its high-water mark

// An owned, zero-initialized array of n elements E on a device. Move-only.
template <class E> struct Buf {
    E* ptr = nullptr;
    size_t n = 0;
    Device dev = Device::CPU;
    Buf() = default;
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    Buf(Buf&& o) noexcept : ptr(o.ptr), n(o.n), dev(o.dev) { o.ptr = nullptr; o.n = 0; }
    Buf& operator=(Buf&& o) noexcept {
        if (this != &o) { release(); ptr = o.ptr; n = o.n; dev = o.dev; o.ptr = nullptr; o.n = 0; }
        return *this;
    }
    ~Buf() { release(); }
    void release() {
        if (!ptr) return;
#ifdef LLMC_CUDA
        if (dev == Device::CUDA) { cudaFree(ptr); g_gpu_bytes -= bytes_for(n); } else
#endif
        free(ptr);
        ptr = nullptr; n = 0;
    }
    void alloc(const Ctx& ctx, size_t count) {
        release();
        dev = ctx.device; n = count;
        if (count == 0) return;
        size_t bytes = bytes_for(count);
#ifdef LLMC_CUDA
        if (dev == Device::CUDA) {
            if (cudaMalloc((void**)&ptr, bytes) != cudaSuccess) {
                size_t free_b = 0, total = 0;
                cudaMemGetInfo(&free_b, &total);
                fatal("out of GPU memory allocating %s (%s of %s free; this process holds %s)", format_bytes(bytes).c_str(),
                      format_bytes(free_b).c_str(), format_bytes(total).c_str(), format_bytes(g_gpu_bytes).c_str());
            }
            CUDA_CHECK(cudaMemset(ptr, 0, bytes));
            g_gpu_bytes += bytes;
            g_gpu_bytes_peak = std::max(g_gpu_bytes_peak, g_gpu_bytes);
            return;
        }
#endif
        ptr = (E*)aligned_alloc(64, bytes);
        if (!ptr) fatal("out of memory allocating %s", format_bytes(bytes).c_str());
        memset(ptr, 0, bytes);
    }
    E* data() const { return ptr; }
    size_t size() const { return n; }
    static size_t bytes_for(size_t count) { return ceil_div(count * sizeof(E), 64) * 64; }  // what alloc(count) takes
    size_t bytes() const { return ptr ? bytes_for(n) : 0; }                                   // what this one holds
};

// A per-call-site scratch buffer on the ctx's device that only grows (moved to the other device
// when a ctx of that one asks: tests run an op on both). Not thread-safe, like gpu_scratch.
template <class floatX> inline floatX* op_scratch(Buf<floatX>& b, const Ctx& ctx, size_t n) {
    if (b.size() < n || b.dev != ctx.device) b.alloc(ctx, n);
    return b.data();
}

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

// 16-byte vectors: one load or store instruction (LDG.128/STG.128) moves V = 16 / sizeof(T)
// elements, a quarter (fp32) or an eighth (bf16) of the instructions of element-wise access
// for the same bytes. A row of C elements can be read in packs when C is a multiple of V and
// the row's pointer is 16-byte aligned (pack_width checks both at launch; the emulator checks
// every pack's address).
template <class floatX> constexpr int PACK = 16 / (int)sizeof(floatX);
template <class E, int V> struct alignas(sizeof(E) * V) Pack { E v[V]; };
template <int V, class E> __device__ inline Pack<E, V> load_pack(const E* p) {
#ifdef LLMC_SIMT
    if ((uintptr_t)p % sizeof(Pack<E, V>)) fatal("load_pack: address %p is not %zu-byte aligned", (const void*)p, sizeof(Pack<E, V>));
#endif
    return *reinterpret_cast<const Pack<E, V>*>(p);
}
template <int V, class E> __device__ inline void store_pack(E* p, const Pack<E, V>& x) {
#ifdef LLMC_SIMT
    if ((uintptr_t)p % sizeof(Pack<E, V>)) fatal("store_pack: address %p is not %zu-byte aligned", (const void*)p, sizeof(Pack<E, V>));
#endif
    *reinterpret_cast<Pack<E, V>*>(p) = x;
}
// PACK<floatX> when every row (C elements) at each of these pointers starts 16-byte aligned, else 1
template <class floatX> inline int pack_width(size_t C, std::initializer_list<const void*> ptrs) {
    if (C % PACK<floatX>) return 1;
    for (const void* p : ptrs) if ((uintptr_t)p % 16) return 1;
    return PACK<floatX>;
}

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// cp.async.cg.shared.global (sm_80+): 16 bytes from global to shared memory without passing
// through registers; `bytes` < 16 fills the rest with zeros (0: nothing is read). A thread's copies
// are in shared memory after its cp_async_wait_all; a __syncthreads after that shows them to all.
__device__ inline void cp_async16(void* dst, const void* src, unsigned bytes) {
#ifdef LLMC_SIMT
    simt::cp_async16(dst, src, bytes);  // the CPU emulator's: the copy lands at the wait (test/simt.h)
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(bytes) : "memory");
#endif
}
__device__ inline void cp_async_wait_all() {
#ifdef LLMC_SIMT
    simt::cp_async_wait_all();
#else
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Dynamic shared memory: the bytes a launch names as its third <<<>>> argument, for a buffer
// whose size is known only at launch. DYNAMIC_SHARED(E, name) declares E* name pointing at it.
// Past 48 KB a kernel must opt in first: SHARED_OPT_IN(kernel) (written as its launch writes
// it: the emulator matches the text) allows it all it can have, dynamic_shared_ceiling(kernel):
// the device's per-block ceiling, max_shared_per_block() (227 KB on an H100, 163 KB on an A100),
// less the kernel's own static __shared__ arrays. (Asking for the whole ceiling for a kernel
// that has static arrays too is refused: cudaFuncSetAttribute answers "invalid argument".)
// Once per kernel and process.
#ifdef LLMC_SIMT
#define DYNAMIC_SHARED(E, name) E* name = (E*)simt::dynamic_shared()
#define SHARED_OPT_IN(...) simt::shared_opt_in(#__VA_ARGS__, dynamic_shared_ceiling(__VA_ARGS__))
#else
#define DYNAMIC_SHARED(E, name) \
    extern __shared__ __align__(16) unsigned char name##_bytes[]; \
    E* name = (E*)name##_bytes
#define SHARED_OPT_IN(...) do { \
        static const bool opted_ = [] { \
            CUDA_CHECK(cudaFuncSetAttribute(__VA_ARGS__, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic_shared_ceiling(__VA_ARGS__))); \
            return true; \
        }(); \
        (void)opted_; \
    } while (0)
#endif
inline size_t max_shared_per_block() {
    static const size_t bytes = [] {
        int dev = 0, b = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return (size_t)b;
    }();
    return bytes;
}
// The most dynamic shared memory a launch of `kernel` can have (see SHARED_OPT_IN). The emulator
// does not know a kernel's static arrays, so there it is the device's ceiling.
template <class K> inline size_t dynamic_shared_ceiling(K* kernel) {
#ifdef LLMC_SIMT
    (void)kernel;
    return max_shared_per_block();
#else
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
    return max_shared_per_block() - a.sharedSizeBytes;
#endif
}

// out[c] += Σ_k partial[k·C + c], k = 0 … K−1: the second stage of the deterministic column sums
// (matmul's dbias, LayerNorm's dw and db). A block of 32 warps takes 32 columns, a lane one column;
// warp w sums k = w, w + 32, … in order, then the 32 warps' sums are added in warp order — a fixed
// order, with 32 loads in flight per column rather than one (C = 768 makes only 24 blocks: each
// needs many loads in flight to read its K rows of partial sums quickly).
static const int COLSUM_WARPS = 32;
template <class floatX> __global__ void __launch_bounds__(32 * COLSUM_WARPS) column_sum_add_kernel(floatX* out, const float* partial, int C, int K) {
    __shared__ float part[COLSUM_WARPS][32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (c < C)
        for (int k = w; k < K; k += COLSUM_WARPS) s += partial[(size_t)k * C + c];
    part[w][lane] = s;
    __syncthreads();
    if (w == 0 && c < C) {
        float total = 0.0f;
        for (int u = 0; u < COLSUM_WARPS; u++) total += part[u][lane];
        out[c] = from_f<floatX>(to_f(out[c]) + total);
    }
}
// The end of the column sums' first stage (matmul's dbias, LayerNorm's dw and db): each of a
// block's WARPS warps holds, per lane, V sums of each of NS quantities, for columns
// c0 + lane·V + j. They are added in warp order through shared memory `sh` (NS·WARPS·32·V
// floats), and quantity q's total for column c0 + t goes to out[q·stride + c0 + t]
// (t < 32·V, c0 + t < C). Every thread of the block must call it.
template <int V, int WARPS, int NS>
__device__ inline void block_column_sums(float* sh, const float* const (&sums)[NS], float* out, size_t stride, int c0, int C) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int q = 0; q < NS; q++)
        for (int j = 0; j < V; j++) sh[(q * WARPS + w) * 32 * V + lane * V + j] = sums[q][j];
    __syncthreads();
    for (int t = threadIdx.x; t < 32 * V && c0 + t < C; t += blockDim.x)
        for (int q = 0; q < NS; q++) {
            float total = 0.0f;
            for (int u = 0; u < WARPS; u++) total += sh[(q * WARPS + u) * 32 * V + t];
            out[q * stride + c0 + t] = total;
        }
    __syncthreads();  // the shared sums are read before they are written again
}
template <class floatX> inline void column_sum_add(const Ctx& ctx, floatX* out, const float* partial, int C, int K) {
    column_sum_add_kernel<<<(unsigned)ceil_div(C, 32), 32 * COLSUM_WARPS, 0, ctx.stream>>>(out, partial, C, K);
    CUDA_LAUNCH_CHECK();
}
#endif

#ifdef LLMC_CUDA
#include "autotune.cuh"  // (cuda_ctx_init makes each GPU's Autotuned)
#endif
