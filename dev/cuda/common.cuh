/*
dev/cuda/common.cuh — what every kernel playground here shares: a GPU context, random inputs,
a comparison against the CPU reference op, and a timer.

A playground (llm.c's dev/cuda idea) runs the CPU reference of one op, then each CUDA version
of it (a table of name → launcher, so a new attempt is one more row), checks each against the
reference (a result over its bound makes the exit status 1) and times it over repeated
launches with CUDA events. Build all: `make dev-cuda`; run one: ./build/dev_attention (needs a
GPU). The same playgrounds build for the CPU SIMT emulator (make build/simt_dev_attention):
their checks run there, their timings mean nothing; make test runs them at small shapes.
*/
#pragma once
#include <cmath>
#include <functional>
#include <vector>
#include "../../llmc/model.h"

static Ctx cpu_ctx, gpu_ctx;
static Rng dev_rng(7);

inline void dev_init() {
    const std::string why = cuda_unusable_reason(0);
    if (!why.empty()) { fprintf(stderr, "error: %s\n", why.c_str()); exit(2); }
    cuda_ctx_init(&gpu_ctx, 0);
    setvbuf(stdout, nullptr, _IOLBF, 0);  // (line by line: where a time limit ends the run, its log keeps what was printed)
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("# %s\n", p.name);
}

// n standard normals times scale, on every core: in chunks of 2^20, chunk c from its own stream
// of the seed (rand.h), so the values do not depend on the thread count; each call takes the
// next streams. (One stream drew ~2·10^9 normals for the playgrounds, about 40 s of a GPU
// session on one core.)
inline std::vector<float> dev_randn(size_t n, float scale = 1.0f) {
    static uint64_t next_stream = 1;  // (stream 0 is dev_rng's)
    const size_t chunk = size_t(1) << 20, chunks = ceil_div(n, chunk);
    const uint64_t first = next_stream;
    next_stream += chunks;
    std::vector<float> v(n);
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        Rng r(7, first + c);
        for (size_t i = c * chunk; i < std::min(n, (c + 1) * chunk); i++) v[i] = scale * r.normal();
    }
    return v;
}

template <class X = float> struct DevBuf {  // a GPU copy of a host vector of X; host() reads it back widened to fp32
    Buf<X> b;
    explicit DevBuf(const std::vector<X>& h) { b.alloc(gpu_ctx, h.size()); set(h); }
    void set(const std::vector<X>& h) { ctx_copy(gpu_ctx, b.data(), h.data(), h.size() * sizeof(X)); }
    X* p() { return b.data(); }
    std::vector<float> host(size_t n = SIZE_MAX) {  // (its first n elements)
        std::vector<X> h(std::min(n, b.size()));
        ctx_copy(gpu_ctx, h.data(), b.data(), h.size() * sizeof(X));
        return vec_widen(h);
    }
};

// max |got − want| / max |want|; over `bound` it is reported and the playground exits with 1
// (dev_done). The bounds are gpucheck_ops' (test/gpucheck_ops.cu says why each). A NaN where
// the reference has a number (an element never written, from a poisoned buffer) is an infinite error.
inline int dev_failures = 0;
inline double rel_err(const std::vector<float>& want, const std::vector<float>& got, double bound) {
    double e = 0, s = 1e-12;
    #pragma omp parallel for reduction(max : e, s) schedule(static)
    for (size_t i = 0; i < want.size(); i++) {
        double d = std::fabs((double)got[i] - want[i]);
        if (std::isnan(d)) d = std::isnan(want[i]) ? 0.0 : INFINITY;  // (a NaN wanted is not checked)
        e = std::max(e, d);
        s = std::max(s, (double)std::fabs(want[i]));
    }
    if (!(e / s <= bound)) { dev_failures++; fprintf(stderr, "error: relative error %.2e over the bound %.0e\n", e / s, bound); }
    return e / s;
}
inline int dev_done() {
    if (dev_failures) fprintf(stderr, "error: %d result(s) over their bound\n", dev_failures);
    return dev_failures ? 1 : 0;
}

// average milliseconds of fn over reps launches (after one warm-up)
inline float time_ms(const std::function<void()>& fn, int reps = 20) {
    fn();
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a, gpu_ctx.stream);
    for (int i = 0; i < reps; i++) fn();
    cudaEventRecord(b, gpu_ctx.stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a); cudaEventDestroy(b);
    return ms / reps;
}

// Whether version v is in the environment variable var's list ("13,14"): the versions a GPU
// call leaves out (DEV_ATTENTION_SKIP) or runs alone (DEV_MATMUL_ONLY)
inline bool env_lists(const char* var, int v) {
    for (const char* s = getenv(var); s && *s; s = strchr(s, ',') ? strchr(s, ',') + 1 : "")
        if (atoi(s) == v) return true;
    return false;
}

struct Version { const char* name; std::function<void()> run; };
