/*
memory.h — memory on the Ctx's device: buffers, copies, pinned host copies, 64-byte aligned vectors.

Buf<E> owns n zero-initialized elements on the CPU or the GPU; op_scratch and gpu_scratch are
per-call-site buffers that only grow. ctx_copy copies between host and device (complete when it
returns, if a side is the host); a PinnedCopy copies without draining the GPU's queue. avec is a
64-byte aligned std::vector, so that vectorized loops see the same alignment in every run and
sums are bit-identical run to run. F32View runs a 16-bit op's fp32 CPU loop and rounds once.

Main pieces: Buf, op_scratch, ctx_copy, ctx_zero, ctx_sync, PinnedCopy (pinned_upload,
pinned_download, pinned_wait), avec, F32View.

Tests: test/test_ops.cpp, every training on the emulator (test/simt.h checks each staged copy
is waited for). More: docs/backends.md.
(Included by common.h, after the Ctx it needs.)
*/
#pragma once
#include <cstdlib>
#include <cstring>
#include <vector>
#include "errors.h"
#include "dtypes.h"

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
    CommWait wait_("a wait for the GPU's queue (its collectives too)", nullptr);  // (--comm-timeout: comm_timeout.h)
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
// next kernels. A PinnedCopy is a page-locked host buffer and an event: pinned_upload copies host bytes into it
// and queues the copy to the device; pinned_download queues a copy from the device into it, and
// pinned_wait waits for that copy alone (not for the work queued after it) before the host reads.
// The next use of a PinnedCopy first waits for its last copy, since the copy engine reads or writes
// the buffer after the call has returned; in a training loop that copy is long done by then.
// On the CPU the buffer is plain memory and every copy is complete when it returns.
// Checked by every training on the emulator (test/simt.h), which protects a page-locked buffer
// from its asynchronous copy until the host waits for it: a missing wait faults there.
struct PinnedCopy {
    void* host = nullptr;
    size_t cap = 0;
    Device dev = Device::CPU;
#ifdef LLMC_CUDA
    cudaEvent_t done = nullptr;
    bool pending = false;  // a copy into or out of `host` may still be running
#endif
    PinnedCopy() = default;
    PinnedCopy(const PinnedCopy&) = delete;
    PinnedCopy& operator=(const PinnedCopy&) = delete;
    PinnedCopy(PinnedCopy&& o) noexcept { *this = std::move(o); }
    PinnedCopy& operator=(PinnedCopy&& o) noexcept {
        if (this != &o) {
            release();
            host = o.host; cap = o.cap; dev = o.dev; o.host = nullptr; o.cap = 0;
#ifdef LLMC_CUDA
            done = o.done; pending = o.pending; o.done = nullptr; o.pending = false;
#endif
        }
        return *this;
    }
    ~PinnedCopy() { release(); }
    void release() {  // (unchecked: a static PinnedCopy may outlive the CUDA runtime at exit)
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

// Waits for the last copy; its host buffer may then be read (after a download) or reused.
inline const void* pinned_wait(PinnedCopy& s) {
#ifdef LLMC_CUDA
    CommWait wait_("a wait for the GPU's queue (its collectives too)", nullptr);  // (--comm-timeout: comm_timeout.h)
    if (s.pending) { CUDA_CHECK(cudaEventSynchronize(s.done)); s.pending = false; }
#endif
    return s.host;
}

// The host buffer, at least `bytes` long, on ctx's device kind, free to write.
inline void* pinned_reserve(const Ctx& ctx, PinnedCopy& s, size_t bytes) {
    pinned_wait(s);
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
inline void pinned_upload(const Ctx& ctx, PinnedCopy& s, void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
#ifdef LLMC_CUDA
    if (ctx.device == Device::CUDA) {
        memcpy(pinned_reserve(ctx, s, bytes), src, bytes);
        CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, ctx.stream));
        CUDA_CHECK(cudaEventRecord(s.done, ctx.stream));
        s.pending = true;
        return;
    }
#endif
    (void)s;
    memcpy(dst, src, bytes);
}

// s.host ← src (on ctx's device), without waiting; pinned_wait(s) then returns the bytes.
inline void pinned_download(const Ctx& ctx, PinnedCopy& s, const void* src, size_t bytes) {
    void* h = pinned_reserve(ctx, s, bytes);
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
