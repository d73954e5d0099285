/*
simt.h — runs the project's CUDA kernels on the CPU, so that `make test` executes them on a
machine without a GPU: a SIMT emulator, the CUDA runtime calls the backend makes, and cuBLASLt's
matmul. It is a test tool, not a backend: slow (every CUDA thread is a fiber), exact in what it
checks, silent about speed.

Use: gpucheck_ops.cu and train_gpt.cu compiled by g++ with this header forced in first
(-include) and -DLLMC_SIMT (build/simcheck_ops, build/train_gpt_simt). The Makefile rewrites each
kernel launch into simt::launch; the inline PTX calls its emulation here (mma_m16n8k16, ldmatrix,
cp_async16, mbarriers, TMA, wgmma_m64k16).

The model, in short: a block's threads are fibers that run one warp at a time to the next
barrier, in thread order or reversed (SIMT_ORDER=reverse), the two legal schedules with the most
skew, so a missing barrier changes a result in one of them. Asynchronous copies and wgmma
products land at the latest moment a GPU may land them. Deadlocks, reads past a buffer, host
pointers in kernels, streams that touch each other's bytes without a wait, a wgmma reading what
cp.async or stmatrix wrote with no fence.proxy.async since, and a warp at two .aligned
instructions at once are reported with the kernel's name. Not modelled: timing, occupancy.

Main parts: launch (blocks, clusters, fibers, barriers), the instruction emulations, cudaMalloc with guard
pages, pinned-memory and stream protection, cuBLASLt (with the backend's epilogues and FP8).

Test: make test (run_tests.sh: "simcheck_ops", both orders); the emulator's own checks in
test/test_simt.cpp. More: docs/emulator.md.
*/
#pragma once
#ifndef LLMC_SIMT
#define LLMC_SIMT 1
#endif
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>
#include <sys/mman.h>
#include <link.h>
#include <unistd.h>
#ifndef __x86_64__
#include <ucontext.h>
#endif

// ---- the CUDA C++ dialect, as g++ sees it
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__  // (no inlining hint: the emulator needs none)
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __grid_constant__

struct uint3 { unsigned x = 0, y = 0, z = 0; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct alignas(8) uint2 { unsigned x, y; };
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
struct alignas(8) float2 { float x, y; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// IEEE single-precision operations that are never contracted into an FMA (-ffp-contract=off
// makes every operation so here)
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
// CUDA's integer min/max take mixed operands
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

namespace simt {

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "simt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    _exit(3);
}

// ---- fibers: a stack and a saved stack pointer each; switch(save, to) stores the callee-saved
// registers on the current stack, saves its pointer in *save and resumes the fiber at `to`.
// The floating-point control words (MXCSR, the x87 control word: rounding mode, flush to zero)
// are not switched: a block's fibers share their OS thread's, which no code here changes.
// (A general-purpose fiber library saves them too, and that was most of a switch's cost.)
#ifdef __x86_64__
extern "C" void simt_switch(void** save, void* to);
asm(R"(
    .pushsection .text
    .weak simt_switch
    .type simt_switch, @function
simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_switch, .-simt_switch
    .popsection
)");
#endif

enum State : uint8_t { READY, AT_WARP, AT_GROUP, AT_BLOCK, AT_MBAR, AT_NAMED, AT_CLUSTER, HELD, DONE };  // (HELD: a cluster's block not yet started)
struct AsyncCopy { void* dst; const void* src; unsigned bytes; };  // a cp.async not yet waited for
struct WgmmaOp {  // issued, not yet computed
    WgmmaOp() {}  // (d_at_issue left unset: wgmma_issue fills the part it uses)
    float* d; uint32_t a[4]; uint64_t desc; int n; bool trans_b, accumulate;
    const uint32_t* a_regs; float d_at_issue[128];  // D's n / 2 registers at issue: to tell registers touched before the wait
    uint64_t desc_a = 0; bool a_shared = false;             // A from shared memory (K-major), not a_regs
    bool fp16 = false;                                      // .f16 inputs (else .bf16)
};
struct BulkStore;  // (a TMA store not yet waited for, below)
struct Fiber {
    void* sp = nullptr;
    uint3 tid{};       // its threadIdx
    uint8_t cta = 0;   // its block's rank in the cluster
    State state = READY;
    unsigned warp_ops = 0;  // warp collectives passed: lanes must agree at each one
    std::vector<AsyncCopy> copies;  // this thread's cp.async in flight: they land at its wait
    std::vector<size_t> copy_groups;  // where each committed group of them ends in copies
    std::vector<WgmmaOp> wgmma;     // its part of the wgmma products in flight (computed at a wait)
    std::vector<size_t> wgmma_groups;  // where each committed group ends in wgmma
    std::vector<BulkStore> stores;      // its TMA stores not yet waited for (they read shared memory at the wait)
    std::vector<size_t> store_groups;   // where each committed group of them ends in stores
    unsigned group_ops = 0;         // warpgroup collectives passed (wgmma waits)
    int wgmma_keep = 0;             // the wait's N: groups that may stay in flight
    bool wgmma_fenced = false;      // a wgmma.fence since its last wgmma wait (or its start)
    const void* mbar = nullptr;     // AT_MBAR: the mbarrier it waits on, for the phase of parity mbar_parity
    unsigned mbar_parity = 0;
    unsigned named = 0, named_gen = 0;  // AT_NAMED: the named barrier it waits at, and that barrier's phase then
    std::vector<uint64_t> sites;    // where it ran each .aligned instruction since its warp's last check (aligned_site)
    std::vector<uint64_t> group_sites;  // the same for those its whole warpgroup must run (wgmma, setmaxnreg)
#ifndef __x86_64__
    ucontext_t uc;
#endif
};
struct WarpSlots {             // what the lanes of a warp exchange, double-buffered by parity
    uint32_t x[2][32];         // shuffles
    uint32_t a[2][32][4], b[2][32][2];  // mma operands
    const void* row[2][32];             // ldmatrix row addresses
    // an mma's A (16×16) and B (16×8) as fp32, decoded once by the first lane past its barrier
    // (the op's warp_ops count, to tell), not by each lane for its own outputs
    float af[2][16][16], bf[2][16][8];
    unsigned mma_decoded[2];
    unsigned sites = 0;  // .aligned instructions its lanes recorded since its last check (check_sites)
};
// A TMA tensor map (cuTensorMapEncodeTiled's, as the emulator keeps it): a tensor of up to 3
// dimensions, dims[0] contiguous, strides in bytes, copied in boxes; swizzle128: the 128-byte swizzle.
struct CUtensorMap {
    const char* base = nullptr; unsigned elem = 0, rank = 0; uint64_t dims[3] = {1, 1, 1}, strides[2] = {0, 0}; unsigned box[3] = {1, 1, 1}; bool swizzle128 = false;
    size_t box_bytes() const { return (size_t)box[0] * box[1] * box[2] * elem; }
};
// The 128-byte swizzle of a byte address: its 16-byte chunk (bits 4-6) XOR its row in 8 (bits 7-9)
inline size_t swizzle128(size_t a) { return a ^ (((a >> 7) & 7) << 4); }
struct BulkCopy { char* dst; CUtensorMap map; int c[3]; };  // a TMA copy in flight, completing bytes on its mbarrier
struct BulkStore { CUtensorMap map; const char* src; int c[3]; };  // a TMA store not yet waited for
struct MBar {  // an mbarrier: arrivals a phase, left, phases completed; transaction bytes still expected and its copies in flight
    unsigned count = 0, pending = 0, phase = 0;
    long tx = 0;
    std::vector<BulkCopy> bulk;
    bool init_fenced = false;  // a fence.mbarrier_init since its init: the copy engine may complete on it
};
struct NamedBar { unsigned count = 0, arrived = 0, phase = 0; };  // bar.sync/bar.arrive id: threads a phase, arrived, phases completed
// A cluster (sm_90) runs as one BlockRun: its blocks' threads are fibers cta_threads apart, each
// block with its own dynamic shared memory (shared[rank]), blockIdx and named barriers.
static const int MAX_CLUSTER = 8;  // (CUDA's portable cluster size)
struct BlockRun {              // one OS thread's block (or cluster of blocks) in flight
    const char* kernel = "";
    const std::function<void()>* fn = nullptr;
    int nthreads = 0, cur = 0;           // (all of the cluster's threads)
    int ctas = 1, cta_threads = 0;       // blocks in the cluster, threads a block
    char* shared[MAX_CLUSTER] = {};      // each block's dynamic shared memory, shared_stride bytes apart
    size_t shared_stride = 0;
    uint3 cta_idx[MAX_CLUSTER] = {};     // each block's blockIdx
    std::vector<Fiber> fibers;
    std::vector<WarpSlots> warps;
    std::unordered_map<const void*, MBar> mbars;  // the cluster's mbarriers, by address
    NamedBar named[MAX_CLUSTER][16];              // each block's named barriers (0 is __syncthreads')
    // the 16-byte chunks of dynamic shared memory that the generic proxy (cp.async, stmatrix)
    // wrote since the last fence.proxy.async: a wgmma must not read them (wgmma_check_proxy)
    std::vector<uint8_t> generic_mark;
    std::vector<uint32_t> generic_chunks;
    char* stacks = nullptr;
    size_t stack_bytes = 0, nstacks = 0;
    void* sched_sp = nullptr;
    uint3* thread_idx = nullptr;  // this OS thread's threadIdx (its address: no TLS wrapper call a switch)
#ifndef __x86_64__
    ucontext_t sched_uc;
#endif
    Fiber& me() { return fibers[cur]; }
};
inline thread_local BlockRun* tl_run = nullptr;
inline bool g_reverse = [] { const char* e = getenv("SIMT_ORDER"); return e && !strcmp(e, "reverse"); }();
static const size_t STACK_BYTES = 128 << 10, PAGE = 4096;

inline thread_local void* tl_dynamic_shared = nullptr;  // the running block's dynamic shared memory (below)
inline thread_local size_t tl_dynamic_bytes = 0;
struct Where { const char* kernel; uint3 block; };  // for the SIGSEGV report (the thread is threadIdx)
inline thread_local Where tl_where{"(host code)", {}};
inline void enter_cta(BlockRun& r, int c) {  // the blockIdx and shared memory of the cluster's block c
    blockIdx = r.cta_idx[c];
    tl_dynamic_shared = r.shared[c];
    tl_where.block = blockIdx;
}
inline void enter_fiber(BlockRun& r, int i) {  // fiber i's threadIdx, blockIdx and shared memory
    r.cur = i;
    *r.thread_idx = r.fibers[i].tid;
    if (r.ctas > 1) enter_cta(r, r.fibers[i].cta);
}
inline void resume(BlockRun& r, int i) {  // scheduler → fiber i, until it blocks or ends
    enter_fiber(r, i);
#ifdef __x86_64__
    simt_switch(&r.sched_sp, r.fibers[i].sp);
#else
    swapcontext(&r.sched_uc, &r.fibers[i].uc);
#endif
}
// The lane of its warp that run_block would resume next after fiber `from`, or -1. Only the
// scheduler makes a fiber READY, so a blocked fiber may resume that lane itself: the same order,
// one switch a lane instead of two.
inline int next_ready_lane(const BlockRun& r, int from) {
    const int first = from / 32 * 32, end = std::min(first + 32, r.nthreads), step = g_reverse ? -1 : 1;
    for (int i = from + step; i >= first && i < end; i += step)
        if (r.fibers[i].state == READY) return i;
    return -1;
}
inline void block_on(State s) {  // fiber → the next lane of its warp, or the scheduler
    BlockRun& r = *tl_run;
    Fiber& me = r.me();
    me.state = s;
    const int next = next_ready_lane(r, r.cur);
    if (next >= 0) enter_fiber(r, next);
#ifdef __x86_64__
    simt_switch(&me.sp, next >= 0 ? r.fibers[next].sp : r.sched_sp);
#else
    swapcontext(&me.uc, next >= 0 ? &r.fibers[next].uc : &r.sched_uc);
#endif
}
inline void fiber_main() {
    BlockRun& r = *tl_run;
    (*r.fn)();
    if (!r.me().copies.empty()) die("%s: a thread ended with cp.async copies it never waited for", r.kernel);
    if (!r.me().wgmma.empty()) die("%s: a thread ended with wgmma products it never waited for", r.kernel);
    if (!r.me().stores.empty()) die("%s: a thread ended with TMA stores it never waited for (they may still read shared memory)", r.kernel);
    block_on(DONE);  // never resumed
    die("a finished fiber was resumed");
}

inline void start_fibers(BlockRun& r) {
    if (r.nstacks < (size_t)r.nthreads) {  // stacks with an inaccessible page below each
        if (r.stacks) munmap(r.stacks, r.nstacks * (STACK_BYTES + PAGE));
        r.nstacks = r.nthreads;
        r.stacks = (char*)mmap(nullptr, r.nstacks * (STACK_BYTES + PAGE), PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r.stacks == MAP_FAILED) die("cannot map fiber stacks");
        for (size_t i = 0; i < r.nstacks; i++) mprotect(r.stacks + i * (STACK_BYTES + PAGE), PAGE, PROT_NONE);
    }
    r.fibers.assign(r.nthreads, Fiber{});
    r.mbars.clear();
    for (auto& cta : r.named) for (NamedBar& b : cta) b = NamedBar{};
    r.warps.resize((r.nthreads + 31) / 32);
    for (WarpSlots& w : r.warps) w.mma_decoded[0] = w.mma_decoded[1] = ~0u, w.sites = 0;  // (op counts restart each block)
    r.thread_idx = &threadIdx;
    for (int i = 0; i < r.nthreads; i++) {
        const unsigned t = (unsigned)(i % r.cta_threads);
        r.fibers[i].tid = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
        r.fibers[i].cta = (uint8_t)(i / r.cta_threads);
        if (r.fibers[i].cta != (g_reverse ? r.ctas - 1 : 0)) r.fibers[i].state = HELD;  // (the first block runs ahead: below)
        char* top = r.stacks + (size_t)(i + 1) * (STACK_BYTES + PAGE);
#ifdef __x86_64__
        // what simt_switch pops: six registers, then fiber_main as the return address, placed
        // so that fiber_main starts with the ABI's stack alignment
        uintptr_t* s = (uintptr_t*)(((uintptr_t)top & ~(uintptr_t)15) - 16);
        s[0] = (uintptr_t)&fiber_main;
        s -= 6;
        for (int k = 0; k < 6; k++) s[k] = 0;
        r.fibers[i].sp = s;
#else
        getcontext(&r.fibers[i].uc);
        r.fibers[i].uc.uc_stack.ss_sp = top - STACK_BYTES;
        r.fibers[i].uc.uc_stack.ss_size = STACK_BYTES;
        r.fibers[i].uc.uc_link = nullptr;
        makecontext(&r.fibers[i].uc, fiber_main, 0);
#endif
    }
}

// ---- .aligned instructions (mma.sync, ldmatrix, stmatrix, wgmma, bar.sync, bar.arrive,
// __syncthreads, setmaxnreg) need the whole warp at the same instruction. Lanes that reach the
// same number of them from two places (two branches) may hang or fault on a GPU; here they would
// go on. So each such instruction records where it runs: the chain of return addresses up its
// fiber's stack (the build keeps frame pointers, and does not merge the equal ends of two
// branches). A warp's lanes must record the same sequence, and a lane that exited a prefix of it.
// That is checked where the lanes meet (warp collectives, wgmma waits, block barriers) and when
// the block ends (check_sites). wgmma and setmaxnreg need the whole warpgroup at one
// instruction, so their sites are checked again over the warpgroup. Where g++ made two copies of
// one line (two chains, the same source lines), the two are one instruction: addr2line tells,
// once for each pair.
struct SiteChain {
    const char* op;
    std::vector<void*> ret;  // its return addresses, innermost first
    uint64_t same = 0;       // another site of the same source lines, found so (0: none)
    std::string text;        // its source lines (site_text), once asked for
    bool lines = false;      // text has line numbers (the build has -g1)
};
inline thread_local std::unordered_map<uint64_t, SiteChain> tl_sites;  // by hash of the chain
struct SiteSeen { uint64_t chain = 0, site = 0; };
inline thread_local SiteSeen tl_site_cache[1024];  // recent chains and their sites (a lookup in tl_sites each time cost ~3%)
__attribute__((noinline)) inline void aligned_site(const char* op, bool warpgroup = false) {
    BlockRun& r = *tl_run;
    const char* lo = r.stacks + (size_t)r.cur * (STACK_BYTES + PAGE) + PAGE;  // (this fiber's stack)
    const char* hi = lo + STACK_BYTES;
    void* ret[24];
    int n = 0;
    uint64_t h = (uint64_t)(uintptr_t)op * 0x9e3779b97f4a7c15ull;
    for (void** fp = (void**)__builtin_frame_address(0); (const char*)fp >= lo && (const char*)(fp + 2) <= hi && n < 24;) {
        ret[n] = fp[1];
        h = (h ^ (uint64_t)(uintptr_t)ret[n++]) * 0x100000001b3ull;
        void** up = (void**)fp[0];
        if (up <= fp) break;
        fp = up;
    }
    SiteSeen& seen = tl_site_cache[h % 1024];
    if (seen.chain != h || !seen.site) {
        auto it = tl_sites.find(h);
        if (it == tl_sites.end()) it = tl_sites.emplace(h, SiteChain{op, std::vector<void*>(ret, ret + n)}).first;
        seen = {h, it->second.same ? it->second.same : h};
    }
    const uint64_t site = seen.site;
    r.warps[r.cur / 32].sites++;
    r.me().sites.push_back(site);
    if (warpgroup) r.me().group_sites.push_back(site);
}
// A site as its instruction and the source lines that lead to it, innermost first: addr2line's
// frames less the emulator's and the C++ library's (line numbers with -g1; without, names)
inline const std::string& site_text(uint64_t h) {
    SiteChain& c = tl_sites.at(h);
    if (!c.text.empty()) return c.text;
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    uintptr_t bias = 0;  // (the executable's load address: addr2line wants addresses in the file)
    dl_iterate_phdr([](dl_phdr_info* info, size_t, void* b) { *(uintptr_t*)b = info->dlpi_addr; return 1; }, &bias);
    std::string cmd = "addr2line -f -C -i -p -e '" + std::string(exe, len > 0 ? (size_t)len : 0) + "'";
    for (void* ret : c.ret) {
        char a[32];
        snprintf(a, sizeof(a), " %#lx", (unsigned long)((uintptr_t)ret - bias - 1));  // (- 1: inside the call)
        cmd += a;
    }
    std::string text = c.op, sep = " at ", cwd = getcwd(exe, sizeof(exe)) ? std::string(exe) + "/" : "";
    if (FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r")) {
        char line[1024];
        while (fgets(line, sizeof(line), p)) {  // "function at file:line", or " (inlined by) function at file:line"
            std::string s(line, strcspn(line, "\n"));
            const size_t at = s.rfind(" at ");
            std::string fn = s.substr(0, at), where = at == std::string::npos ? "??" : s.substr(at + 4);
            if (fn.find("fiber_main") != std::string::npos) break;
            if (fn.rfind(" (inlined by) ", 0) == 0) fn = fn.substr(14);
            if (fn.rfind("simt::", 0) == 0 || fn.rfind("__syncthreads", 0) == 0 || where.rfind("/usr/", 0) == 0)
                continue;  // (the emulator's frames, and the C++ library's)
            if (!cwd.empty() && where.rfind(cwd, 0) == 0) where = where.substr(cwd.size());
            const bool known = where.rfind("??", 0) != 0;
            c.lines |= known;
            text += sep + (known ? where.substr(0, where.find(" (discriminator")) : fn);
            sep = " < ";
        }
        pclose(p);
    }
    return c.text = text;
}
// Whether two sites are one instruction: one chain, or the same source lines (then remembered)
inline bool same_site(uint64_t a, uint64_t b) {
    if (a == b) return true;
    const std::string& ta = site_text(a);
    if (ta != site_text(b) || !tl_sites.at(a).lines) return false;  // (without line numbers, no answer: not the same)
    SiteChain& cb = tl_sites.at(b);
    if (!cb.same) cb.same = a, tl_site_cache[b % 1024] = {};
    return true;
}
// The threads first.. of a warp (32, Fiber::sites) or a warpgroup (128, Fiber::group_sites): the
// live ones' sites alike, an exited one's a prefix of theirs (of the longest where all exited);
// then each starts a new record.
using SiteLog = std::vector<uint64_t> Fiber::*;
[[noreturn]] inline void sites_differ(const BlockRun& r, SiteLog log, int size, int a, int b, size_t i) {
    const std::vector<uint64_t>&sa = r.fibers[a].*log, &sb = r.fibers[b].*log;
    const char* unit = size == 32 ? "warp" : "warpgroup";
    die("%s: threads %d and %d of %s %d, at their .aligned instruction %zu since it last met, are at different instructions "
        "(a GPU needs the whole %s at each one): thread %d: %s; thread %d: %s",
        r.kernel, a % size, b % size, unit, a / size, i + 1, unit, a % size, i < sa.size() ? site_text(sa[i]).c_str() : "none (it went on)",
        b % size, i < sb.size() ? site_text(sb[i]).c_str() : "none (it went on)");
}
inline void check_sites(BlockRun& r, int first, int size, SiteLog log = &Fiber::sites) {
    if (log == &Fiber::sites) {  // (a warp whose lanes recorded nothing since its last check has nothing to compare)
        unsigned& recorded = r.warps[first / 32].sites;
        if (recorded == 0) return;
        recorded = 0;
    }
    const int n = std::min(size, r.nthreads - first);
    int ref = -1;
    for (int l = 0; l < n && ref < 0; l++)
        if (r.fibers[first + l].state != DONE) ref = first + l;
    if (ref < 0)
        for (int l = 0; l < n; l++)
            if (ref < 0 || (r.fibers[first + l].*log).size() > (r.fibers[ref].*log).size()) ref = first + l;
    const std::vector<uint64_t>& s0 = r.fibers[ref].*log;
    for (int l = 0; l < n; l++) {
        const Fiber& f = r.fibers[first + l];
        const std::vector<uint64_t>& s = f.*log;
        const size_t common = std::min(s.size(), s0.size());
        size_t i = 0;
        while (i < common && same_site(s0[i], s[i])) i++;
        if (i < common || s.size() > s0.size() || (f.state != DONE && s.size() < s0.size())) sites_differ(r, log, size, ref, first + l, i);
    }
    for (int l = 0; l < n; l++) (r.fibers[first + l].*log).clear();
}

// Runs one block to completion. Each warp in turn runs as far as it can: its lanes in thread
// order until each blocks, then its warp collective, again and again, until every lane waits at
// __syncthreads or has ended. Then the next warp. When no warp can move, a block barrier that
// every live thread has reached is released. One warp running far ahead of the others is a
// legal schedule on a GPU, and the one that exposes a missing __syncthreads between warps.
inline bool release_warp(BlockRun& r, int w) {  // true if warp w's lanes all reached a collective
    const int n = r.nthreads, lanes = std::min(32, n - w * 32);
    int live = 0, at_warp = 0;
    for (int l = 0; l < lanes; l++) {
        State s = r.fibers[w * 32 + l].state;
        live += s != DONE;
        at_warp += s == AT_WARP;
    }
    if (at_warp == 0 || at_warp < live) return false;
    if (live < 32) die("%s: a warp collective (shuffle/mma) with lanes that exited or do not exist (warp %d)", r.kernel, w);
    for (int l = 1; l < 32; l++)
        if (r.fibers[w * 32 + l].warp_ops != r.fibers[w * 32].warp_ops)
            die("%s: lanes of warp %d reach different warp collectives (divergent shuffle/mma, lane %d)", r.kernel, w, l);
    check_sites(r, w * 32, 32);
    for (int l = 0; l < 32; l++) r.fibers[w * 32 + l].state = READY;
    return true;
}
// A cluster's other blocks start when its first block (in the schedule's order) can go no
// further: the most skew between them, so that a block that reaches another's shared memory
// before that block has set it up (no cluster barrier between) is reported.
inline bool start_held(BlockRun& r) {
    bool any = false;
    for (Fiber& f : r.fibers) if (f.state == HELD) f.state = READY, any = true;
    return any;
}
inline bool release_group(BlockRun& r, int g);  // (with the wgmma emulation, below)
inline bool land_bulk_copies(BlockRun& r);       // (with the TMA emulation, below)
// The block barriers: each block whose live threads all wait at __syncthreads goes on, and the
// cluster's threads when all its live ones wait at the cluster barrier. live: its live threads.
inline bool release_barriers(BlockRun& r, int& live) {
    int live_c[MAX_CLUSTER] = {}, block_c[MAX_CLUSTER] = {}, at_cluster = 0;
    live = 0;
    for (const Fiber& f : r.fibers) {
        live_c[f.cta] += f.state != DONE;
        block_c[f.cta] += f.state == AT_BLOCK;
        at_cluster += f.state == AT_CLUSTER;
    }
    bool moved = false;
    for (int c = 0; c < r.ctas; c++) {
        live += live_c[c];
        if (block_c[c] == 0 || block_c[c] < live_c[c]) continue;
        for (int t = c * r.cta_threads; t < (c + 1) * r.cta_threads; t += 32) check_sites(r, t, 32);
        for (int i = c * r.cta_threads; i < (c + 1) * r.cta_threads; i++)
            if (r.fibers[i].state == AT_BLOCK) r.fibers[i].state = READY;
        moved = true;
    }
    if (!moved && at_cluster > 0 && at_cluster == live) {
        for (Fiber& f : r.fibers) if (f.state == AT_CLUSTER) f.state = READY;
        moved = true;
    }
    return moved;
}
inline void run_block(BlockRun& r) {
    start_fibers(r);
    const int n = r.nthreads, nwarps = (n + 31) / 32;
    for (;;) {
        for (int k = 0; k < nwarps; k++) {
            const int w = g_reverse ? nwarps - 1 - k : k, lanes = std::min(32, n - w * 32);
            do {
                for (int j = 0; j < lanes; j++) {
                    int i = w * 32 + (g_reverse ? lanes - 1 - j : j);
                    if (r.fibers[i].state == READY) resume(r, i);
                }
            } while (release_warp(r, w));
        }
        // A warpgroup whose 128 threads all wait at a wgmma wait goes on: one at a time, the first
        // in the schedule's order, which then runs ahead of the others as far as it can (a product
        // may complete late on a GPU). So a warpgroup that reads what another writes without a
        // barrier between them reads it too early.
        bool moved = false;
        const int groups = (n + 127) / 128;
        for (int k = 0; k < groups && !moved; k++) moved = release_group(r, g_reverse ? groups - 1 - k : k);
        for (Fiber& f : r.fibers)  // and a thread whose mbarrier phase has completed
            if ((f.state == AT_MBAR && (r.mbars.at(f.mbar).phase & 1) != f.mbar_parity) ||
                (f.state == AT_NAMED && r.named[f.cta][f.named].phase != f.named_gen))  // (or whose named barrier's)
                f.state = READY, moved = true;
        if (moved) continue;
        int live = 0;
        if (release_barriers(r, live)) continue;
        if (live > 0 && land_bulk_copies(r)) continue;  // (TMA copies land when no thread can go on)
        if (start_held(r)) continue;
        if (live == 0) {
            for (int t = 0; t < n; t += 32) check_sites(r, t, 32);
            for (int t = 0; t < n && r.cta_threads % 128 == 0; t += 128) check_sites(r, t, 128, &Fiber::group_sites);  // (wgmma needs whole warpgroups)
            for (const auto& [bar, m] : r.mbars)
                if (!m.bulk.empty()) die("%s: the block ended with a TMA copy in flight (no thread waited for its mbarrier), block (%u,%u,%u)",
                                         r.kernel, blockIdx.x, blockIdx.y, blockIdx.z);
            for (int c = 0; c < r.ctas; c++)
                for (int id = 1; id < 16; id++)
                    if (r.named[c][id].arrived)
                        die("%s: the block ended with %u of %u threads arrived at named barrier %d (an arrive no bar.sync met), block (%u,%u,%u)",
                            r.kernel, r.named[c][id].arrived, r.named[c][id].count, id, r.cta_idx[c].x, r.cta_idx[c].y, r.cta_idx[c].z);
            return;
        }
        die("%s: deadlock: threads wait at different barriers (__syncthreads, a collective in divergent code, a cluster barrier, or an mbarrier or named barrier phase that never completes), block (%u,%u,%u)",
            r.kernel, blockIdx.x, blockIdx.y, blockIdx.z);
    }
}

// ---- what the kernels call
inline void syncthreads() { aligned_site("__syncthreads"); block_on(AT_BLOCK); }
inline void warp_barrier() { tl_run->me().warp_ops++; block_on(AT_WARP); }
inline int lane_id() { return tl_run->cur % 32; }
inline WarpSlots& my_warp() { return tl_run->warps[tl_run->cur / 32]; }

template <class T> inline T shfl(unsigned mask, T v, int src_of_lane(int, int), int arg, int width) {
    static_assert(sizeof(T) == 4, "simt: shuffles of 4-byte values only");
    if (mask != 0xffffffffu) die("%s: shuffle with a partial mask is not emulated", tl_run->kernel);
    if (width != 32) die("%s: shuffle with width != 32 is not emulated", tl_run->kernel);
    WarpSlots& w = my_warp();
    const int buf = tl_run->me().warp_ops & 1, lane = lane_id();
    memcpy(&w.x[buf][lane], &v, 4);
    warp_barrier();
    int src = src_of_lane(lane, arg);
    T r;
    memcpy(&r, &w.x[buf][(src >= 0 && src < 32) ? src : lane], 4);
    return r;
}

// __any_sync: whether any lane of the warp passed a true predicate (every lane gets the answer).
inline int vote_any(unsigned mask, int pred) {
    if (mask != 0xffffffffu) die("%s: a vote with a partial mask is not emulated", tl_run->kernel);
    WarpSlots& w = my_warp();
    const int buf = tl_run->me().warp_ops & 1, lane = lane_id(), mine = pred != 0;
    memcpy(&w.x[buf][lane], &mine, 4);
    warp_barrier();
    int any = 0;
    for (int i = 0; i < 32; i++) {
        int p;
        memcpy(&p, &w.x[buf][i], 4);
        any |= p;
    }
    return any;
}

// The 16-bit float in the low (hi = 0) or high half of a register, as fp32: bf16 (fp32's upper
// half), or fp16 (IEEE binary16, decoded here from its definition, apart from common.h's).
inline float half_value(uint32_t reg, int hi, bool fp16) {
    const uint32_t h = hi ? reg >> 16 : reg & 0xffffu;
    if (!fp16) { uint32_t u = h << 16; float x; memcpy(&x, &u, 4); return x; }
    const int e = (h >> 10) & 31, m = h & 1023;
    const float mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(1024 + m), e - 25);
    return (h & 0x8000u) ? -mag : mag;
}
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16.bf16 | f16.f16}.f32 (fp16: the .f16 inputs)
inline void mma_m16n8k16(float* c, const uint32_t* a, const uint32_t* b, bool fp16 = false) {
    aligned_site("mma.sync");
    WarpSlots& w = my_warp();
    const int buf = tl_run->me().warp_ops & 1, lane = lane_id();
    memcpy(w.a[buf][lane], a, 16);
    memcpy(w.b[buf][lane], b, 8);
    warp_barrier();
    const unsigned op = tl_run->me().warp_ops;
    if (w.mma_decoded[buf] != op) {
        for (int row = 0; row < 16; row++)
            for (int k = 0; k < 16; k++) w.af[buf][row][k] = half_value(w.a[buf][(row % 8) * 4 + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2, fp16);
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) w.bf[buf][k][n] = half_value(w.b[buf][n * 4 + (k % 8) / 2][k / 8], k % 2, fp16);
        w.mma_decoded[buf] = op;
    }
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float s = c[e];
        for (int k = 0; k < 16; k++) s += w.af[buf][row][k] * w.bf[buf][k][col];
        c[e] = s;
    }
}

// ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16: lanes 8i..8i+7 give the addresses of
// rows 0..7 of matrix i (8 b16 each, 16-byte aligned, in shared memory); register i of lane l
// gets matrix i's elements (l/4, 2(l%4)) and (l/4, 2(l%4)+1), low half first, or with .trans
// its elements (2(l%4), l/4) and (2(l%4)+1, l/4).
inline bool device_owns(const void* p);
inline void generic_wrote(const void* p, size_t bytes);  // the generic proxy wrote shared memory (below)
// ldmatrix's and stmatrix's first half: each lane checks and posts its row address (lanes
// 8i..8i+7 give matrix i's rows), and the warp meets; returns the slot buffer that holds them.
inline int matrix_rows_exchange(const char* op, int num, const void* row_addr) {
    aligned_site(op);
    WarpSlots& w = my_warp();
    const int buf = tl_run->me().warp_ops & 1, lane = lane_id();
    if (lane < 8 * num) {
        if ((uintptr_t)row_addr % 16) die("%s: %s row address %p is not 16-byte aligned (lane %d)", tl_run->kernel, op, row_addr, lane);
        if (device_owns(row_addr)) die("%s: %s with global memory (lane %d): it uses shared memory only", tl_run->kernel, op, lane);
    }
    w.row[buf][lane] = row_addr;
    warp_barrier();
    return buf;
}
inline void ldmatrix(uint32_t* r, int num, bool trans, const void* row_addr) {
    const int buf = matrix_rows_exchange("ldmatrix", num, row_addr), lane = lane_id();
    WarpSlots& w = my_warp();
    const int g = lane / 4, t = lane % 4;
    auto elem = [&](int i, int row, int col) { uint16_t v; memcpy(&v, (const char*)w.row[buf][8 * i + row] + 2 * col, 2); return (uint32_t)v; };
    for (int i = 0; i < num; i++)
        r[i] = trans ? elem(i, 2 * t, g) | elem(i, 2 * t + 1, g) << 16 : elem(i, g, 2 * t) | elem(i, g, 2 * t + 1) << 16;
}

// stmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16 (sm_90): the other way, lane (g, t)'s
// register i holds elements (g, 2t) and (g, 2t+1) of matrix i, stored to row g (or, .trans, to
// rows 2t and 2t+1 at column g) of the 8 rows whose addresses lanes 8i..8i+7 give. The lanes first
// agree on the addresses, then each writes its elements, then the warp meets again.
inline void stmatrix(const uint32_t* r, int num, bool trans, void* row_addr) {
    const int buf = matrix_rows_exchange("stmatrix", num, row_addr), lane = lane_id();
    WarpSlots& w = my_warp();
    const int g = lane / 4, t = lane % 4;
    auto put = [&](int i, int row, int col, uint32_t v) {
        uint16_t h = (uint16_t)v;
        memcpy((char*)w.row[buf][8 * i + row] + 2 * col, &h, 2);
        generic_wrote((char*)w.row[buf][8 * i + row] + 2 * col, 2);
    };
    for (int i = 0; i < num; i++) {
        if (trans) put(i, 2 * t, g, r[i]), put(i, 2 * t + 1, g, r[i] >> 16);
        else put(i, g, 2 * t, r[i]), put(i, g, 2 * t + 1, r[i] >> 16);
    }
    warp_barrier();
}

// cp.async.cg.shared.global [dst], [src], 16, bytes: 16 bytes from global to shared memory, the
// last 16 − bytes of them zeros (bytes = 0: no read, all zeros), asynchronously: the data is
// in shared memory only after this thread's cp.async.wait_all. Here every copy waits until then
// (the latest a GPU may land it), so a kernel that reads the tile after a __syncthreads but
// without the wait reads the old contents, and its test fails.
inline void cp_async16(void* dst, const void* src, unsigned bytes) {
    if ((uintptr_t)dst % 16 || (bytes && (uintptr_t)src % 16))
        die("%s: cp.async with an address that is not 16-byte aligned", tl_run->kernel);
    if (device_owns(dst)) die("%s: cp.async into global memory: it writes shared memory only", tl_run->kernel);
    if (bytes > 16 || (bytes && !device_owns(src))) die("%s: cp.async from outside device memory or of more than 16 bytes", tl_run->kernel);
    tl_run->me().copies.push_back({dst, src, bytes});
}
inline void land_copies(size_t n) {  // this thread's first n copies land
    Fiber& f = tl_run->me();
    for (size_t i = 0; i < n; i++) {
        memcpy(f.copies[i].dst, f.copies[i].src, f.copies[i].bytes);
        memset((char*)f.copies[i].dst + f.copies[i].bytes, 0, 16 - f.copies[i].bytes);
        generic_wrote(f.copies[i].dst, 16);
    }
    f.copies.erase(f.copies.begin(), f.copies.begin() + n);
    for (size_t& e : f.copy_groups) e -= std::min(e, n);
    while (!f.copy_groups.empty() && f.copy_groups.front() == 0) f.copy_groups.erase(f.copy_groups.begin());
}
inline void cp_async_wait_all() { land_copies(tl_run->me().copies.size()); }
// cp.async.commit_group closes a group of this thread's copies; cp.async.wait_group n waits
// until at most the n newest committed groups are in flight: the older ones land, and copies not
// yet committed stay in flight (as the PTX ISA says).
inline void cp_async_commit() {
    Fiber& f = tl_run->me();
    f.copy_groups.push_back(f.copies.size());  // (an empty group is complete at once)
}
inline void cp_async_wait_group(int n) {
    const std::vector<size_t>& g = tl_run->me().copy_groups;
    if ((int)g.size() > n) land_copies(g[g.size() - 1 - n]);
}

// mbarrier (a shared-memory barrier object, sm_80/sm_90): init sets the arrivals a phase needs;
// each arrive counts one, and the last one of a phase completes it. A wait for the phase of
// parity p returns once that phase has completed (at once if the barrier's current phase has the
// other parity: the first wait of a producer on an empty slot). cp.async.mbarrier.arrive.noinc
// arrives when the thread's cp.async copies have landed: here they land at that instruction.
inline MBar& mbar_of(const void* bar, const char* op) {
    auto it = tl_run->mbars.find(bar);
    if (it == tl_run->mbars.end()) die("%s: mbarrier %s on a barrier never initialized (mbarrier.init)", tl_run->kernel, op);
    return it->second;
}
inline void mbar_init(void* bar, unsigned count) {
    BlockRun& r = *tl_run;
    if ((uintptr_t)bar % 8 || device_owns(bar)) die("%s: mbarrier.init on an address that is not 8-byte aligned shared memory", r.kernel);
    if (r.ctas > 1 && ((const char*)bar < (const char*)tl_dynamic_shared || (const char*)bar >= (const char*)tl_dynamic_shared + tl_dynamic_bytes))
        die("%s: a cluster's mbarrier outside dynamic shared memory (the emulator gives the cluster's blocks one static __shared__)", r.kernel);
    if (count == 0 || count >= (1u << 20)) die("%s: mbarrier.init with count %u (1 to 2^20 - 1)", tl_run->kernel, count);
    tl_run->mbars[bar] = MBar{count, count, 0};
}
// fence.mbarrier_init: the inits so far are visible to the copy engine too (TMA's complete_tx),
// not only to the threads a barrier reaches. A TMA copy on a barrier with no such fence since its
// init is reported (tma_load). Any thread's fence counts for every init (lenient).
inline void mbar_init_fence() {
    for (auto& [bar, m] : tl_run->mbars) m.init_fenced = true;
}
inline void mbar_complete_if_done(MBar& m) {  // a phase completes at its last arrival once no transaction bytes are expected
    if (m.pending == 0 && m.tx == 0) m.phase++, m.pending = m.count;
}
inline void mbar_arrive(void* bar) {
    MBar& m = mbar_of(bar, "arrive");
    if (m.pending == 0) die("%s: an mbarrier arrival past the phase's count (its copies' bytes are still expected)", tl_run->kernel);
    m.pending--;
    mbar_complete_if_done(m);
}
// mbarrier.arrive.expect_tx: the phase also waits for `bytes` more of its copies' transactions
inline void mbar_arrive_expect_tx(void* bar, unsigned bytes) {
    mbar_of(bar, "arrive.expect_tx").tx += bytes;
    mbar_arrive(bar);
}
inline void mbar_arrive_on_copies(void* bar) { cp_async_wait_all(); mbar_arrive(bar); }
inline void mbar_wait(void* bar, unsigned parity) {
    const MBar& m = mbar_of(bar, "wait");
    if ((m.phase & 1) != (parity & 1)) return;
    Fiber& f = tl_run->me();
    f.mbar = bar, f.mbar_parity = parity & 1;
    block_on(AT_MBAR);
}

// Named barriers (bar.sync id, n and bar.arrive id, n; id 1-15, 0 is __syncthreads'): a phase
// completes when n threads have arrived; bar.sync waits for that, bar.arrive does not. Every
// thread of a phase must name the same n, and a block must not end with a phase half full.
inline void bar_named(unsigned id, unsigned n, bool wait) {
    BlockRun& r = *tl_run;
    if (id == 0 || id >= 16) die("%s: named barrier %u (1 to 15 here; 0 is __syncthreads')", r.kernel, id);
    if (n == 0 || n % 32 || n > (unsigned)r.cta_threads) die("%s: named barrier %u for %u threads (a multiple of 32, at most the block's)", r.kernel, id, n);
    aligned_site(wait ? "bar.sync" : "bar.arrive");
    NamedBar& b = r.named[r.me().cta][id];
    if (b.arrived == 0) b.count = n;
    else if (b.count != n) die("%s: threads give named barrier %u different thread counts (%u and %u)", r.kernel, id, b.count, n);
    if (++b.arrived == b.count) { b.arrived = 0, b.phase++; return; }
    if (!wait) return;
    Fiber& f = r.me();
    f.named = id, f.named_gen = b.phase;
    block_on(AT_NAMED);
}

// ---- launches
struct Cfg { dim3 grid, block; size_t smem = 0; void* stream = nullptr; unsigned cluster = 1; };  // (cluster: blocks along x)

inline const char* pinned_fault(const void* addr);  // the report for a page-locked buffer in flight, or null
inline const char* side_fault(const void* addr);    // ... for device memory another stream's work still uses
inline void side_enter(const void* stream, const char* op);  // an operation of that stream starts (below)
inline bool track_write(const void* addr);          // a launch's first write to a page: noted, the page opened
inline void on_segv(int, siginfo_t* si, void*) {
    const Where& w = tl_where;
    char msg[512];
    const char* pinned = pinned_fault(si->si_addr);
    if (!pinned) pinned = side_fault(si->si_addr);
    if (!pinned && track_write(si->si_addr)) return;  // the write runs again, now allowed
    int len = pinned ? snprintf(msg, sizeof(msg), "simt: %s\n", pinned)
                     : snprintf(msg, sizeof(msg), "simt: invalid memory access (past a buffer's end?) in %s, block (%u,%u,%u), thread (%u,%u,%u)\n",
                                w.kernel, w.block.x, w.block.y, w.block.z, threadIdx.x, threadIdx.y, threadIdx.z);
    if (write(2, msg, len) < 0) {}
    _exit(3);
}
// The handler runs on a stack of its own (a fiber's may be the one that overflowed); each OS
// thread needs one.
inline bool use_signal_stack() {
    stack_t ss;
    ss.ss_sp = malloc(1 << 16); ss.ss_size = 1 << 16; ss.ss_flags = 0;
    return sigaltstack(&ss, nullptr) == 0;
}
inline bool g_segv_installed = [] {
    use_signal_stack();
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_ONSTACK | SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    return true;
}();

inline bool device_owns(const void* p);
// Dynamic shared memory: a block's buffer (launch_blocks), and the kernels' opt-ins past the
// default 48 KB, by the kernel's name as its launch writes it (SHARED_OPT_IN in common.h)
static const size_t SHARED_DEFAULT = 48 << 10, SHARED_MAX = 227 << 10;  // an H100's per-block limits
// The async proxy (sm_90). wgmma reads its shared-memory operands through the async proxy, so
// what the generic proxy wrote there (cp.async, stmatrix, stores) must be published to it first:
// a fence.proxy.async on a causality path from the write to the wgmma (the PTX ISA's memory
// model, "proxy-preserved base causality order"). The emulator notes the chunks that cp.async
// and stmatrix write, a fence.proxy.async by any of the block's threads clears them all, and the
// warpgroup's last thread to issue a wgmma checks that its operands hold none (wgmma_check_proxy).
// TMA writes through the async proxy and needs no fence. Plain stores are not seen.
// A vector access of global memory in inline PTX (red.v2, ld.v2): the address must be device
// memory and aligned to the vector's bytes, else a GPU stops with a misaligned address.
inline void check_vector_global(const void* p, size_t bytes, const char* op) {
    if ((uintptr_t)p % bytes || !device_owns(p)) die("%s: %s on an address that is not %zu-byte aligned device memory", tl_run->kernel, op, bytes);
}
// (The marks cover the cluster's blocks: chunk c is byte 16c from the first block's shared memory.)
inline size_t cta_chunk0(const BlockRun& r) { return (size_t)((const char*)tl_dynamic_shared - r.shared[0]) / 16; }  // (the running block's)
inline void generic_wrote(const void* p, size_t bytes) {
    BlockRun& r = *tl_run;
    const char* base = (const char*)tl_dynamic_shared;
    if (!base || (const char*)p < base || (const char*)p >= base + tl_dynamic_bytes) return;  // (static __shared__: no wgmma reads it)
    const size_t off = (const char*)p - base, c0 = cta_chunk0(r);
    for (size_t c = c0 + off / 16; c < c0 + (off + bytes + 15) / 16 && c < r.generic_mark.size(); c++)
        if (!r.generic_mark[c]) r.generic_mark[c] = 1, r.generic_chunks.push_back((uint32_t)c);
}
inline void fence_proxy_async() {  // (the running block's writes)
    BlockRun& r = *tl_run;
    const size_t lo = cta_chunk0(r), hi = lo + r.shared_stride / 16;
    size_t kept = 0;
    for (uint32_t c : r.generic_chunks)
        if (c >= lo && c < hi) r.generic_mark[c] = 0;
        else r.generic_chunks[kept++] = c;
    r.generic_chunks.resize(kept);
}
inline void* dynamic_shared() {
    if (!tl_dynamic_shared) die("%s: uses dynamic shared memory, but its launch gave it none", tl_run ? tl_run->kernel : "?");
    return tl_dynamic_shared;
}
inline size_t shared_opt_in(const char* kernel, size_t bytes) {  // bytes > 0: records; returns the opt-in
    static std::mutex mu;
    static std::map<std::string, size_t> opted;
    std::lock_guard<std::mutex> lock(mu);
    if (bytes > SHARED_MAX) die("%s: an opt-in to %zu bytes of shared memory, past the %zu a block may have", kernel, bytes, SHARED_MAX);
    if (bytes) opted[kernel] = bytes;
    auto it = opted.find(kernel);
    return it == opted.end() ? 0 : it->second;
}
// ---- wgmma (sm_90a): warpgroup matrix products, from the PTX ISA ("Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate"). A warpgroup is threads 128g..128g+127 of the block.
// wgmma.mma_async.m64nNk16.f32.{bf16.bf16 | f16.f16}: D (64 × N fp32) = A·B (+ D):
//   A 64×16 in registers: warp w of the group holds rows 16w..16w+15 as mma.m16n8k16's A
//     fragment; or from shared memory through a descriptor like B's, K-major: element (m, k) at
//     byte 16·(m%8) + SBO·(m/8) + 2·(k%8) + LBO·(k/8) (wgmma_m64k16_ss);
//   B 16×N from shared memory, through the descriptor: start address (bits 0-13), leading byte
//     offset LBO (16-29) and stride byte offset SBO (32-45), each in 16-byte units; base offset
//     (49-51) must be 0, and the swizzle mode (62-63) 0 (none: "interleaved") or 1 (128 bytes),
//     the two emulated. The canonical layouts, T = 8 bf16 (16 bytes), element (k, n) at byte
//       none, K-major  (trans_b 0): 16·(n%8) + SBO·(n/8) + 2·(k%8) + LBO·(k/8)
//       none, MN-major (trans_b 1):  2·(n%8) + SBO·(n/8) + 16·(k%8) + LBO·(k/8)
//     ("((8,m),(T,2k)):((1T,SBO),(1,LBO))" and "((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))");
//       128 B, K-major:  128·(n%8) + SBO·(n/8) + 2·k
//       128 B, MN-major:   2·(n%64) + LBO·(n/64) + 128·(k%8) + SBO·(k/8)
//     ("((8,m),(T,2k)):((8T,SBO),(1,T))" and "((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))"), each then
//     swizzled: address bits 4-6 XOR bits 7-9. That needs the pattern's 1024 bytes to start at a
//     multiple of 1024 (else a base offset): the emulator reports a start with bits 7-9 set.
//   D: thread (warp w, lane l) holds d[4j + e] = row 16w + l/4 + 8·(e/2), column 8j + 2·(l%4) + e%2.
// Each thread's issue only records it; the products are computed when the warpgroup's 128
// threads all reach a wgmma.wait_group N, for every committed group but the newest N, in issue
// order, reading shared memory then: the latest a GPU may read A and B there and write D. So a
// kernel that reads D before its wait, or overwrites an operand's tile before it, gets wrong
// results here; one that writes the A or D registers of a product before its wait is reported
// (A is taken at the issue, D is compared with its value then). A product may accumulate into
// the D of one still in flight if both have the same shape (the PTX ISA orders such products):
// its D must be as that product found it, and at its wait as the products before it left it.
// The descriptor's address is a shared-memory window address (shared_offset): the block's
// dynamic shared memory, where a kernel's wgmma operands live, starts at g_shared_bias. An
// operand that cp.async or stmatrix wrote after the last fence.proxy.async is reported
// (wgmma_check_proxy), and so is a product with no wgmma.fence since the thread's last wgmma
// wait (wgmma_fence).
// A GPU puts dynamic shared memory after the kernel's static shared variables, and promises it
// only 16-byte alignment. So the emulator's window starts it at SIMT_SHARED_BIAS bytes (default
// 16): a kernel that assumes more (a swizzled or TMA tile not moved up to a multiple of 1024,
// align_1024, or the extra 1 KB that move takes) fails here as it would on a GPU.
inline const size_t g_shared_bias = [] {
    const char* e = getenv("SIMT_SHARED_BIAS");
    const long b = e ? atol(e) : 16;
    if (b < 0 || b % 16 || b >= 1024) die("SIMT_SHARED_BIAS=%s: a multiple of 16 below 1024", e);
    return (size_t)b;
}();
inline uint32_t shared_offset(const void* p) {  // p's shared-memory window address
    const char* base = (const char*)dynamic_shared();
    if ((const char*)p < base || (const char*)p >= base + tl_dynamic_bytes)
        die("%s: a shared-memory address outside the block's dynamic shared memory (the emulator's wgmma descriptors address only it)", tl_run->kernel);
    return (uint32_t)((const char*)p - base + g_shared_bias);
}
// TMA (cp.async.bulk.tensor, sm_90): tensor_map_encode checks what cuTensorMapEncodeTiled checks
// of the emulated maps. tma_load copies the box at coordinates c into shared memory at dst
// (box order, dims[0] fastest; zeros outside the tensor; with the 128-byte swizzle, each
// 16-byte chunk's address bits 4-6 XOR bits 7-9), and completes its bytes on mbarrier bar. The
// copy lands late: when every thread of the block is blocked (land_bulk_copies), the latest a
// GPU may land it. So a kernel that reads a tile before waiting for its barrier reads old data.
inline bool tensor_map_encode(CUtensorMap* m, unsigned elem, unsigned rank, const void* base, const uint64_t* dims, const uint64_t* strides,
                              const unsigned* box, bool swizzle128) {
    if (rank < 1 || rank > 3 || (uintptr_t)base % 16) return false;
    *m = CUtensorMap{};
    m->base = (const char*)base, m->elem = elem, m->rank = rank, m->swizzle128 = swizzle128;
    for (unsigned i = 0; i < rank; i++) {
        if (dims[i] == 0 || box[i] == 0 || box[i] > 256) return false;
        m->dims[i] = dims[i], m->box[i] = box[i];
        if (i > 0 && (strides[i - 1] % 16 || strides[i - 1] < dims[i - 1] * elem)) return false;
        if (i > 0) m->strides[i - 1] = strides[i - 1];
    }
    return (box[0] * elem) % 16 == 0 && (!swizzle128 || box[0] * elem <= 128);
}
// What a TMA copy or store (what: "copy", "store") needs: an encoded map of device memory, and a box
// in the dynamic shared memory at smem, 1024-byte aligned with the swizzle (128 without)
inline void tma_check(const char* what, const CUtensorMap* map, const void* smem) {
    if (map->rank == 0) die("%s: a TMA %s with a tensor map never encoded", tl_run->kernel, what);
    if (!device_owns(map->base)) die("%s: a TMA %s with a tensor outside device memory", tl_run->kernel, what);
    const size_t off = shared_offset(smem);
    if (off % (map->swizzle128 ? 1024 : 128) || off - g_shared_bias + map->box_bytes() > tl_dynamic_bytes)
        die("%s: a TMA %s at shared byte %zu: not %s-byte aligned or past the dynamic shared memory", tl_run->kernel, what, off,
            map->swizzle128 ? "1024" : "128");
}
inline void tma_enqueue(void* dst, const CUtensorMap* map, const int* c, void* bar) {  // (checked)
    MBar& m = mbar_of(bar, "complete_tx");
    if (!m.init_fenced)
        die("%s: a TMA copy completes on an mbarrier with no fence.mbarrier_init since its init (the copy engine may not see the init)", tl_run->kernel);
    m.bulk.push_back({(char*)dst, *map, {c[0], c[1], c[2]}});
}
inline void tma_load(void* dst, const CUtensorMap* map, const int* c, void* bar) {
    if (device_owns(dst)) die("%s: a TMA copy into global memory: it writes shared memory only", tl_run->kernel);
    tma_check("copy", map, dst);
    tma_enqueue(dst, map, c, bar);
}
// fn(s, g) for each element of the box of m at coordinates c: s its byte in shared memory (from
// the box's start, swizzled where m is), g its address in the tensor (null outside the tensor)
template <class F> inline void for_box(const CUtensorMap& m, const int* c, F fn) {
    size_t off = 0;
    for (unsigned z = 0; z < m.box[2]; z++)
        for (unsigned y = 0; y < m.box[1]; y++)
            for (unsigned x = 0; x < m.box[0]; x++, off += m.elem) {
                const long g[3] = {(long)c[0] + x, (long)c[1] + y, (long)c[2] + z};
                const bool in = g[0] >= 0 && g[1] >= 0 && g[2] >= 0 && (uint64_t)g[0] < m.dims[0] && (uint64_t)g[1] < m.dims[1] &&
                                (uint64_t)g[2] < m.dims[2];
                fn(m.swizzle128 ? swizzle128(off) : off, in ? m.base + g[2] * m.strides[1] + g[1] * m.strides[0] + g[0] * m.elem : nullptr);
            }
}
inline void land_bulk_copy(const BulkCopy& b) {
    for_box(b.map, b.c, [&](size_t s, const char* g) {
        if (g) memcpy(b.dst + s, g, b.map.elem);
        else memset(b.dst + s, 0, b.map.elem);
    });
}
inline bool land_bulk_copies(BlockRun& r) {  // every TMA copy in flight lands; true if there was one
    bool landed = false;
    for (auto& [bar, m] : r.mbars) {
        for (const BulkCopy& b : m.bulk) {
            land_bulk_copy(b);
            m.tx -= (long)b.map.box_bytes();
            landed = true;
        }
        m.bulk.clear();
        mbar_complete_if_done(m);
    }
    return landed;
}

// TMA stores (cp.async.bulk.tensor, shared to global, bulk groups): tma_store records the box
// that src holds (laid out as tma_load writes it), bulk_commit closes this thread's group, and
// bulk_wait_read(n) leaves at most n groups in flight. The stores read shared memory and write
// the tensor at that wait, the latest a GPU may read: so a kernel that writes src again before
// its wait stores the new values. What the generic proxy (stmatrix) wrote there since the last
// fence.proxy.async is reported: the copy engine reads through the async proxy.
inline void tma_store(const CUtensorMap* map, const void* src, const int* c) {
    tma_check("store", map, src);
    tl_run->me().stores.push_back({*map, (const char*)src, {c[0], c[1], c[2]}});
}
inline void bulk_commit() { tl_run->me().store_groups.push_back(tl_run->me().stores.size()); }
inline void run_bulk_store(BlockRun& r, const BulkStore& s) {
    const CUtensorMap& m = s.map;
    const size_t first = (size_t)(s.src - r.shared[0]) / 16;
    for (size_t c = first; c < first + (m.box_bytes() + 15) / 16; c++)
        if (r.generic_mark[c])
            die("%s: a TMA store reads shared byte %zu, which stmatrix or cp.async wrote after the last fence.proxy.async", r.kernel, 16 * c);
    for_box(m, s.c, [&](size_t from, const char* g) { if (g) memcpy((char*)g, s.src + from, m.elem); });  // (nothing outside the tensor)
}
inline void bulk_wait_read(int n) {
    BlockRun& r = *tl_run;
    Fiber& f = r.me();
    const int groups = (int)f.store_groups.size();
    if (groups <= n) return;
    const size_t upto = f.store_groups[groups - n - 1];
    for (size_t i = 0; i < upto; i++) run_bulk_store(r, f.stores[i]);
    f.stores.erase(f.stores.begin(), f.stores.begin() + upto);
    f.store_groups.erase(f.store_groups.begin(), f.store_groups.begin() + (groups - n));
    for (size_t& e : f.store_groups) e -= upto;
}

// Clusters (sm_90): the blocks of a cluster run at once and reach each other's shared memory.
// cluster_map is mapa: the address at p's offset in block rank's shared memory. A remote mbarrier
// arrival and a multicast TMA copy (one box into the same offset of each block in mask, each
// completing its bytes on the mbarrier at bar's offset there) go through it. cluster_sync is
// barrier.cluster's arrive and wait. A block must not be reached after all its threads exited
// (its shared memory is gone on a GPU): that is reported.
inline int cluster_rank() { return tl_run->me().cta; }
inline char* cluster_map(const void* p, int rank, const char* op) {
    BlockRun& r = *tl_run;
    const char* base = (const char*)tl_dynamic_shared;
    if (!base || (const char*)p < base || (const char*)p >= base + tl_dynamic_bytes)
        die("%s: %s at an address outside the block's dynamic shared memory", r.kernel, op);
    if (rank < 0 || rank >= r.ctas) die("%s: %s to block %d of a cluster of %d", r.kernel, op, rank, r.ctas);
    bool alive = false;
    for (int i = rank * r.cta_threads; i < (rank + 1) * r.cta_threads && !alive; i++) alive = r.fibers[i].state != DONE;
    if (!alive) die("%s: %s reaches block %d of the cluster after all its threads exited (a cluster barrier before the exit keeps its shared memory)",
                    r.kernel, op, rank);
    return r.shared[rank] + ((const char*)p - base);
}
inline void mbar_arrive_cluster(void* bar, int rank) { mbar_arrive(cluster_map(bar, rank, "a remote mbarrier arrival")); }
inline void tma_load_multicast(void* dst, const CUtensorMap* map, const int* c, void* bar, unsigned mask) {
    tma_check("copy", map, dst);
    if (mask == 0 || mask >> tl_run->ctas) die("%s: a multicast TMA copy to blocks 0x%x of a cluster of %d", tl_run->kernel, mask, tl_run->ctas);
    for (int rank = 0; rank < tl_run->ctas; rank++)
        if (mask >> rank & 1) tma_enqueue(cluster_map(dst, rank, "a multicast TMA copy"), map, c, cluster_map(bar, rank, "a multicast TMA copy"));
}
inline void cluster_sync() { block_on(AT_CLUSTER); }

// The byte of element (k, c) of a 16-row K-major (k fastest in a core matrix row) or MN-major
// operand in the block's dynamic shared memory, through its descriptor (the layouts above: window
// addresses, swizzled as such). In every layout, 8 elements along the fast dimension from a
// multiple of 8 (k for K-major, c for MN-major) are one aligned 16-byte chunk: bytes = 16 checks
// the whole chunk (wgmma_operand_chunks).
inline size_t wgmma_operand_offset(const BlockRun& r, uint64_t desc, bool mn_major, int k, int c, const char* which, size_t bytes = 2) {
    const int swizzle = (int)(desc >> 62);
    if (swizzle > 1 || ((desc >> 49) & 7) != 0) die("%s: a wgmma descriptor with a 64- or 32-byte swizzle or a base offset (not emulated)", r.kernel);
    const size_t start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4, sbo = ((desc >> 32) & 0x3fff) << 4;
    if (swizzle && (start & 0x380))
        die("%s: a 128-byte swizzled wgmma operand whose 1024-byte pattern does not start at a multiple of 1024 (byte %zu)", r.kernel, start);
    size_t off = start + (swizzle ? (mn_major ? 2 * (c % 64) + lbo * (c / 64) + 128 * (k % 8) + sbo * (k / 8) : 128 * (c % 8) + sbo * (c / 8) + 2 * k)
                                  : (mn_major ? 2 * (c % 8) + sbo * (c / 8) + 16 * (k % 8) + lbo * (k / 8)
                                              : 16 * (c % 8) + sbo * (c / 8) + 2 * (k % 8) + lbo * (k / 8)));
    if (swizzle) off = swizzle128(off);
    if (off < g_shared_bias || off - g_shared_bias + bytes > tl_dynamic_bytes)
        die("%s: wgmma reads %s outside the block's dynamic shared memory (window byte %zu; it holds %zu from %zu)", r.kernel, which, off,
            tl_dynamic_bytes, g_shared_bias);
    return off - g_shared_bias;
}
// f(k, c) at the first element of each such chunk of a 16 × cols operand
template <class F> inline void wgmma_operand_chunks(bool mn_major, int cols, F f) {
    for (int k = 0; k < 16; k += mn_major ? 1 : 8)
        for (int c = 0; c < cols; c += mn_major ? 8 : 1) f(k, c);
}
// At the warpgroup's last issue of its newest product (the others issued it before): none of
// the product's operand bytes may be one the generic proxy wrote since the last fence.proxy.async.
inline void wgmma_check_proxy(BlockRun& r) {
    const int first = r.cur / 128 * 128;
    const size_t n = r.me().wgmma.size(), c0 = cta_chunk0(r);
    if (r.fibers[first].wgmma.size() < n || r.fibers[first + 127].wgmma.size() < n) return;  // (the common case at once: either is the last to issue)
    for (int j = 0; j < 128; j++)
        if (r.fibers[first + j].wgmma.size() < n) return;  // (a thread of the warpgroup has yet to issue it)
    const WgmmaOp& op = r.me().wgmma.back();
    auto check = [&](uint64_t desc, bool mn_major, int cols, const char* which) {
        wgmma_operand_chunks(mn_major, cols, [&](int k, int c) {
            const size_t off = wgmma_operand_offset(r, desc, mn_major, k, c, which, 16);
            if (r.generic_mark[c0 + off / 16])
                die("%s: a wgmma reads %s at shared byte %zu, which cp.async or stmatrix wrote after the last fence.proxy.async "
                    "(the tensor cores read through the async proxy: the write needs a fence before the wgmma)", r.kernel, which, off);
        });
    };
    if (op.a_shared) check(op.desc_a, false, 64, "A");
    check(op.desc, op.trans_b, op.n, "B");
}
inline void wgmma_issue(float* d, const uint32_t* a, uint64_t desc, int n, bool trans_b, bool accumulate, bool fp16, bool a_shared, uint64_t desc_a) {
    BlockRun& r = *tl_run;
    if (r.cur % r.cta_threads / 128 * 128 + 128 > r.cta_threads)  // (a block may have warps past its warpgroups: a producer's)
        die("%s: wgmma by a warpgroup of fewer than 128 threads (block of %d threads)", r.kernel, r.cta_threads);
    if (!r.me().wgmma_fenced)
        die("%s: a wgmma issued with no wgmma.fence since the thread's last wgmma wait or its start (thread %d: "
            "its A and D registers are ordinary registers until the fence)", r.kernel, r.cur);
    for (auto it = r.me().wgmma.rbegin(); it != r.me().wgmma.rend(); ++it)  // the newest product in flight on the same D
        if (it->d == d) {
            if (it->n != n || it->fp16 != fp16) die("%s: a wgmma accumulates into the D registers of a product in flight of another shape (thread %d)", r.kernel, r.cur);
            if (memcmp(d, it->d_at_issue, it->n / 2 * sizeof(float)))
                die("%s: thread %d wrote the D registers of a wgmma product before the wait_group that completes it", r.kernel, r.cur);
            break;
        }
    if (n < 8 || n > 256 || n % 8) die("%s: a wgmma with N = %d (8 to 256, a multiple of 8)", r.kernel, n);
    aligned_site("wgmma.mma_async", true);
    WgmmaOp& op = r.me().wgmma.emplace_back();
    op.d = d, memcpy(op.a, a, sizeof(op.a)), op.desc = desc, op.n = n, op.trans_b = trans_b, op.accumulate = accumulate, op.a_regs = a;
    memcpy(op.d_at_issue, d, n / 2 * sizeof(float));
    op.fp16 = fp16, op.a_shared = a_shared, op.desc_a = desc_a;
    wgmma_check_proxy(r);
}
inline void wgmma_m64k16(float* d, const uint32_t* a, uint64_t desc, int n, bool trans_b, bool accumulate, bool fp16 = false) {
    wgmma_issue(d, a, desc, n, trans_b, accumulate, fp16, false, 0);
}
inline void wgmma_m64k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int n, bool trans_b, bool accumulate, bool fp16 = false) {
    static const uint32_t none[4] = {0, 0, 0, 0};
    wgmma_issue(d, none, desc_b, n, trans_b, accumulate, fp16, true, desc_a);
}
inline void wgmma_commit() {
    aligned_site("wgmma.commit_group", true);
    Fiber& f = tl_run->me();
    if (f.wgmma_groups.empty() ? !f.wgmma.empty() : f.wgmma_groups.back() < f.wgmma.size()) f.wgmma_groups.push_back(f.wgmma.size());
}
// wgmma.fence: the registers written so far may be a product's A and D. The emulator asks for one
// between a thread's last wgmma wait (after which it reads D) and its next product, as the PTX ISA
// does wherever the registers were touched in between, and before its first.
inline void wgmma_fence() { aligned_site("wgmma.fence", true); tl_run->me().wgmma_fenced = true; }
inline void wgmma_wait(int keep) {
    aligned_site("wgmma.wait_group", true);
    Fiber& f = tl_run->me();
    f.wgmma_fenced = false;
    f.wgmma_keep = keep;
    f.group_ops++;
    block_on(AT_GROUP);
}
// SIMT_WGMMA_REVERSE=1: each product's 16 terms added in the other order (k from 15 down), as a GPU
// whose wgmma rounds its sums otherwise than its mma.sync would: what --flash-wgmma auto's test
// of the bits must catch (test_gpu_train). By default the order is mma_m16n8k16's.
inline const bool g_wgmma_reverse = [] { const char* e = getenv("SIMT_WGMMA_REVERSE"); return e && atoi(e) != 0; }();
inline void wgmma_compute(BlockRun& r, int first, size_t i) {  // op i of threads first..first+127
    const WgmmaOp& op0 = r.fibers[first].wgmma[i];
    for (int j = 1; j < 128; j++) {
        const WgmmaOp& o = r.fibers[first + j].wgmma[i];
        if (o.desc != op0.desc || o.n != op0.n || o.trans_b != op0.trans_b || o.accumulate != op0.accumulate ||
            o.a_shared != op0.a_shared || o.desc_a != op0.desc_a || o.fp16 != op0.fp16)
            die("%s: the threads of a warpgroup issued different wgmma (descriptor, shape or flags differ, thread %d)", r.kernel, first + j);
    }
    const char* base = (const char*)dynamic_shared();
    // an operand from shared memory, a chunk of 8 elements at a time, into M (16 × cols: M[k * kstride + c * cstride])
    auto gather = [&](uint64_t desc, bool mn_major, int cols, const char* which, float* M, int kstride, int cstride) {
        wgmma_operand_chunks(mn_major, cols, [&](int k, int c) {
            uint16_t v[8]; memcpy(v, base + wgmma_operand_offset(r, desc, mn_major, k, c, which, 16), 16);
            for (int e = 0; e < 8; e++) M[(k + (mn_major ? 0 : e)) * kstride + (c + (mn_major ? e : 0)) * cstride] = half_value(v[e], 0, op0.fp16);
        });
    };
    const int N = op0.n;
    float A[64 * 16], B[16 * 256];
    if (op0.a_shared) gather(op0.desc_a, false, 64, "A", A, 1, 16);
    else
        for (int row = 0; row < 64; row++)
            for (int k = 0; k < 16; k++) {
                const int rr = row % 16, lane = (rr % 8) * 4 + (k % 8) / 2;
                A[row * 16 + k] = half_value(r.fibers[first + 32 * (row / 16) + lane].wgmma[i].a[rr / 8 + 2 * (k / 8)], k % 2, op0.fp16);
            }
    gather(op0.desc, op0.trans_b, N, "B", B, N, 1);
    // D (64 × N) from the threads' registers (thread j's registers 4nt + 2h and + 1 hold row
    // 16w + g + 8h, columns 8nt + 2t and + 1: a pair), then the sums, 8 columns of a row side by
    // side in a vector (each sum over k in the order above, multiply then add: the same bits as
    // one sum at a time), then back.
    float D[64 * 256];
    auto pair = [N](int j, int nt, int h) { return (16 * (j / 32) + j % 32 / 4 + 8 * h) * N + 8 * nt + 2 * (j % 4); };
    if (!op0.accumulate) std::fill(D, D + 64 * N, 0.0f);
    else
        for (int j = 0; j < 128; j++)
            for (int nt = 0; nt < N / 8; nt++)
                for (int h = 0; h < 2; h++) memcpy(&D[pair(j, nt, h)], &r.fibers[first + j].wgmma[i].d[4 * nt + 2 * h], 2 * sizeof(float));
    if (g_wgmma_reverse) {  // (k from 15 down: A's columns and B's rows in reverse)
        for (int row = 0; row < 64; row++) std::reverse(A + row * 16, A + row * 16 + 16);
        for (int k = 0; k < 8; k++) std::swap_ranges(B + k * N, B + k * N + N, B + (15 - k) * N);
    }
    typedef float Float8 __attribute__((vector_size(32)));
    for (int row = 0; row < 64; row++)
        for (int c = 0; c < N; c += 8) {
            Float8 sum, b;
            memcpy(&sum, &D[row * N + c], sizeof(sum));
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) {
                memcpy(&b, &B[k * N + c], sizeof(b));
                sum += A[row * 16 + k] * b;
            }
            memcpy(&D[row * N + c], &sum, sizeof(sum));
        }
    for (int j = 0; j < 128; j++) {
        float* d = r.fibers[first + j].wgmma[i].d;
        for (int nt = 0; nt < N / 8; nt++)
            for (int h = 0; h < 2; h++) memcpy(&d[4 * nt + 2 * h], &D[pair(j, nt, h)], 2 * sizeof(float));
        std::vector<WgmmaOp>& ops = r.fibers[first + j].wgmma;  // later products on the same D find it so at their wait
        for (size_t k = i + 1; k < ops.size(); k++)
            if (ops[k].d == d) memcpy(ops[k].d_at_issue, d, ops[k].n / 2 * sizeof(float));
    }
}
inline bool release_group(BlockRun& r, int g) {  // true if warpgroup g's threads all waited and go on
    const int first = g * 128, n = std::min(128, r.nthreads - first);
    int live = 0, at = 0;
    for (int j = 0; j < n; j++) {
        State st = r.fibers[first + j].state;
        live += st != DONE;
        at += st == AT_GROUP;
    }
    if (at == 0 || at < live) return false;
    if (live < 128) die("%s: a wgmma wait with threads of the warpgroup that exited or do not exist (warpgroup %d)", r.kernel, g);
    if (r.ctas > 1) enter_cta(r, r.fibers[first].cta);  // (its operands are in its block's shared memory)
    const Fiber& f0 = r.fibers[first];
    for (int j = 1; j < 128; j++) {
        const Fiber& f = r.fibers[first + j];
        if (f.group_ops != f0.group_ops || f.wgmma_keep != f0.wgmma_keep || f.wgmma.size() != f0.wgmma.size() || f.wgmma_groups != f0.wgmma_groups)
            die("%s: the threads of warpgroup %d reach different wgmma waits or issued different products (thread %d)", r.kernel, g, first + j);
    }
    for (int t = first; t < first + 128; t += 32) check_sites(r, t, 32);
    check_sites(r, first, 128, &Fiber::group_sites);
    const size_t groups = f0.wgmma_groups.size(), keep = (size_t)f0.wgmma_keep;
    if (groups > keep) {
        const size_t ops = f0.wgmma_groups[groups - keep - 1];  // the products of the groups that complete
        for (int j = 0; j < 128; j++)  // their registers as they were issued (a GPU reads A and writes D any time until the wait)
            for (size_t i = 0; i < ops; i++) {
                const WgmmaOp& o = r.fibers[first + j].wgmma[i];
                if (!o.a_shared && memcmp(o.a, o.a_regs, sizeof(o.a)))
                    die("%s: thread %d wrote the A registers of a wgmma product before the wait_group that completes it", r.kernel, first + j);
                if (memcmp(o.d_at_issue, o.d, o.n / 2 * sizeof(float)))
                    die("%s: thread %d wrote the D registers of a wgmma product before the wait_group that completes it", r.kernel, first + j);
            }
        for (size_t i = 0; i < ops; i++) wgmma_compute(r, first, i);
        for (int j = 0; j < 128; j++) {
            Fiber& f = r.fibers[first + j];
            f.wgmma.erase(f.wgmma.begin(), f.wgmma.begin() + ops);
            f.wgmma_groups.erase(f.wgmma_groups.begin(), f.wgmma_groups.begin() + (groups - keep));
            for (size_t& e : f.wgmma_groups) e -= ops;
        }
    }
    for (int j = 0; j < 128; j++) r.fibers[first + j].state = READY;
    return true;
}

// A pointer argument of a kernel must be device memory: a host pointer is an illegal access on a
// GPU, but host memory is readable here, so it is refused at the launch.
template <class A> inline void check_arg(const char* kernel, int i, const A& a) {
    if constexpr (std::is_pointer_v<A>)
        if (a && !device_owns((const void*)a)) die("%s: argument %d is not device memory (a host pointer passed to a kernel)", kernel, i);
}
inline void launch_blocks(const char* kernel, const Cfg& cfg, const std::function<void()>& fn);
inline void writes_arm(const void* stream);                       // before a kernel or matmul (below)
inline void writes_disarm(const void* stream, const char* op);    // after it
template <class... A> inline void launch(const char* kernel, const Cfg& cfg, const std::function<void()>& fn, const A&... args) {
    int i = 0;
    (check_arg(kernel, i++, args), ...);
    launch_blocks(kernel, cfg, fn);
}
// SIMT_COUNT_LAUNCHES=NAME: at exit, how many launches had NAME in the kernel's name (a test's
// proof that a flag reached the kernel it names).
inline std::atomic<long> g_named_launches{0};
inline const char* g_count_launches = getenv("SIMT_COUNT_LAUNCHES");
struct NamedLaunchReport {
    ~NamedLaunchReport() {
        if (g_count_launches) fprintf(stderr, "simt: %ld launches of %s\n", g_named_launches.load(), g_count_launches);
    }
};
inline NamedLaunchReport g_named_launch_report;
// A test sets g_late: then late() makes the calling thread's block wait 2 ms there, so that blocks
// on other host threads overtake it. Kernels call it where an order between blocks must hold
// whatever the timing (the chained dQ's first store of a tile).
inline std::atomic<bool> g_late{false};
inline void late() { if (g_late) usleep(2000); }
// A test sets g_reverse_blocks: then launches hand out their blocks last blockIdx first (CUDA
// promises no order), so that a kernel that relies on blockIdx order waits for ever.
inline std::atomic<bool> g_reverse_blocks{false};
// SIMT_HANG_KERNEL=NAME: a launch of a kernel with NAME in its name hangs, as far as the host's
// polls can tell: from then on cudaEventQuery says "not ready" (the blocking waits still return).
inline const char* g_hang_kernel = getenv("SIMT_HANG_KERNEL");
inline std::atomic<bool> g_hung{false};
inline void launch_blocks(const char* kernel, const Cfg& cfg, const std::function<void()>& fn) {
    if (g_count_launches && strstr(kernel, g_count_launches)) g_named_launches++;
    if (g_hang_kernel && strstr(kernel, g_hang_kernel)) g_hung = true;
    const long nthreads = (long)cfg.block.x * cfg.block.y * cfg.block.z;
    const long nblocks = (long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    if (nthreads < 1 || nthreads > 1024) die("%s: %ld threads per block (1 to 1024 allowed)", kernel, nthreads);
    if (cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 2147483647u || nblocks < 1)
        die("%s: grid (%u, %u, %u) out of CUDA's limits", kernel, cfg.grid.x, cfg.grid.y, cfg.grid.z);
    if (cfg.smem > SHARED_DEFAULT && cfg.smem > shared_opt_in(kernel, 0))
        die("%s: %zu bytes of dynamic shared memory, past the default %zu, and the kernel has not opted in to them (cudaFuncSetAttribute)",
            kernel, cfg.smem, SHARED_DEFAULT);
    const unsigned cs = cfg.cluster;
    if (cs < 1 || cs > (unsigned)MAX_CLUSTER || cfg.grid.x % cs || (cs > 1 && nthreads % 128))
        die("%s: clusters of %u blocks for a grid of %u along x and blocks of %ld threads (1 to %d blocks, dividing the grid; blocks of whole warpgroups)",
            kernel, cs, cfg.grid.x, nthreads, MAX_CLUSTER);
    const size_t stride = (cfg.smem + 15) / 16 * 16;
    side_enter(cfg.stream, kernel);
    writes_arm(cfg.stream);
    #pragma omp parallel if (nblocks > 1)
    {
        static thread_local BlockRun run;
        static thread_local bool alt = use_signal_stack();
        (void)alt;
        run.kernel = kernel; run.fn = &fn; run.nthreads = (int)(nthreads * cs);
        run.ctas = (int)cs, run.cta_threads = (int)nthreads, run.shared_stride = stride;
        tl_run = &run;
        static thread_local std::vector<uint4> dyn;  // the blocks' dynamic shared memory
        dyn.resize(cs * stride / 16);
        for (unsigned c = 0; c < cs; c++) run.shared[c] = cfg.smem ? (char*)dyn.data() + c * stride : nullptr;
        tl_dynamic_shared = run.shared[0];
        tl_dynamic_bytes = cfg.smem;
        blockDim = cfg.block; gridDim = cfg.grid;
        #pragma omp for schedule(dynamic, 1)
        for (long k = 0; k < nblocks / (long)cs; k++) {  // (a cluster at a time)
            const long first = (g_reverse_blocks ? nblocks / (long)cs - 1 - k : k) * (long)cs;
            for (unsigned c = 0; c < cs; c++) {
                const long i = first + c;
                run.cta_idx[c] = {(unsigned)(i % cfg.grid.x), (unsigned)(i / cfg.grid.x % cfg.grid.y), (unsigned)(i / ((long)cfg.grid.x * cfg.grid.y))};
            }
            enter_cta(run, 0);
            tl_where.kernel = kernel;
            if (cfg.smem) memset(dyn.data(), 0xff, cs * stride);
            run.generic_mark.assign(cs * stride / 16, 0);
            run.generic_chunks.clear();
            run_block(run);
        }
        tl_where = Where{"(host code)", {}};
        tl_run = nullptr;
    }
    writes_disarm(cfg.stream, kernel);
}

// ---- device memory: host pages, each buffer's (256-rounded) end against an inaccessible page
// The emulated GPU holds SIMT_GPU_MEMORY bytes (default 80 GiB, an H100's): cudaMalloc past it
// fails as a GPU's does, and cudaMemGetInfo reports what is left, so the trainer's memory
// planning and its out-of-memory errors run in make test.
struct Alloc { char* map; size_t map_bytes; size_t bytes; };
inline size_t device_body(size_t bytes) { return (bytes + 255) / 256 * 256; }  // what a buffer takes
inline std::mutex g_alloc_mu;
inline std::map<uintptr_t, Alloc> g_allocs;  // by start address
inline size_t g_device_used = 0;             // the device_body of the buffers in g_allocs
inline const size_t g_device_capacity = [] {
    const char* e = getenv("SIMT_GPU_MEMORY");
    return e && *e ? (size_t)strtoull(e, nullptr, 10) : (size_t)80 << 30;
}();
inline void* device_alloc(size_t bytes) {
    size_t body = device_body(bytes), pages = (body + PAGE - 1) / PAGE * PAGE;
    {
        std::lock_guard<std::mutex> lock(g_alloc_mu);
        if (g_device_used + body > g_device_capacity) return nullptr;
        g_device_used += body;
    }
    char* m = (char*)mmap(nullptr, pages + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { std::lock_guard<std::mutex> lock(g_alloc_mu); g_device_used -= body; return nullptr; }
    mprotect(m + pages, PAGE, PROT_NONE);
    char* p = m + pages - body;
    memset(p, 0xff, body);  // fresh device memory is garbage (here: NaN), not zeros
    std::lock_guard<std::mutex> lock(g_alloc_mu);
    g_allocs[(uintptr_t)p] = Alloc{m, pages + PAGE, bytes};
    return p;
}
// the entry of an address-keyed map with the greatest start <= a (end() if none): the buffer
// that may hold a, once a is checked against its end
template <class M> inline typename M::iterator floor_entry(M& m, uintptr_t a) {
    auto it = m.upper_bound(a);
    return it == m.begin() ? m.end() : std::prev(it);
}
inline bool device_owns(const void* p) {
    std::lock_guard<std::mutex> lock(g_alloc_mu);
    auto it = floor_entry(g_allocs, (uintptr_t)p);
    return it != g_allocs.end() && (uintptr_t)p < it->first + it->second.bytes;
}
inline void device_free(void* p) {
    std::lock_guard<std::mutex> lock(g_alloc_mu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end()) die("cudaFree of a pointer cudaMalloc did not return");
    munmap(it->second.map, it->second.map_bytes);
    g_device_used -= device_body(it->second.bytes);
    g_allocs.erase(it);
}

// ---- page-locked host memory and the asynchronous copies that use it
// cudaMemcpyAsync returns before the copy engine has read (host → device) or written (device →
// host) the host side, and the host may touch that memory again only after a wait that covers
// the copy: cudaEventSynchronize on an event recorded after it, or a stream or device sync (a
// synchronous cudaMemcpy and cudaFree wait too). Every copy is done at once here, so a missing
// wait would change nothing; instead the page-locked buffer is protected from the copy until
// such a wait: read-only after an upload (the host must not overwrite what the GPU may not have
// read yet), inaccessible after a download (it must not read what may not have arrived). A host
// access in between faults, and the SIGSEGV handler names the buffer and the missing wait.
// Every noted operation (these copies, and the streams' below) takes the next place in one queue
// order, g_seq; an event recorded on a stream covers that stream's operations up to its place.
inline unsigned long g_seq = 0;
struct Pinned {
    size_t map_bytes;
    unsigned long seq = 0;          // the buffer's last copy (0: none in flight)
    const void* stream = nullptr;   // the copy's stream
    bool download = false;          // it wrote the buffer (else read it)
};
inline std::map<uintptr_t, Pinned>& pinned() { static auto* m = new std::map<uintptr_t, Pinned>; return *m; }
inline std::map<uintptr_t, Pinned>::iterator pinned_find(const void* p) {  // the buffer holding p, or end()
    auto it = floor_entry(pinned(), (uintptr_t)p);
    return it != pinned().end() && (uintptr_t)p < it->first + it->second.map_bytes ? it : pinned().end();
}
inline void pinned_settle(std::map<uintptr_t, Pinned>::iterator it) {  // its copy is waited for
    if (it->second.seq) mprotect((void*)it->first, it->second.map_bytes, PROT_READ | PROT_WRITE);
    it->second.seq = 0;
}
// the host has waited for `stream`'s work up to place `upto` (stream null: the legacy default
// stream, which also follows every other stream's work queued before it)
inline void pinned_settle(const void* stream, unsigned long upto) {
    for (auto it = pinned().begin(); it != pinned().end(); ++it)
        if (it->second.seq && it->second.seq <= upto && (!stream || it->second.stream == stream)) pinned_settle(it);
}
inline void pinned_settle_all() { pinned_settle(nullptr, ~0ul); }

// ---- streams: the bytes one stream's queued work uses while another stream runs
// A GPU runs two streams' work in any interleaving unless one waits for the other
// (cudaStreamWaitEvent on an event recorded in the other, or a host sync). The trainer runs
// NCCL's collectives and their copies on a communication stream while the compute stream goes
// on (comm.h), so a missing wait there is a race that the in-order emulation cannot show by
// itself. Here each copy, memset and NCCL call notes the device bytes it reads or writes, with
// its stream and its place in the queue, until a wait orders it before the other streams' later
// work. While an operation of another stream runs (a kernel, a copy, a matmul, a collective)
// those pages are protected: read-only where the queued work only reads them, inaccessible where
// it writes them. Touching them faults, and the handler names the operation and both streams.
// Pages only partly inside a range stay open (a race missed, never one invented). Kernels do not
// say which bytes they use; their writes are learnt page by page below ("kernels' writes").
struct Side { uintptr_t b, e; bool writes; const void* stream; unsigned long seq; };
inline std::vector<Side> g_side;
inline const void* g_side_running = nullptr;  // the stream whose operation runs now
inline const char* g_side_op = "(host code)";  // and what it is, for the report
inline bool g_side_dirty = false;             // protections to recompute (a range was released)
inline int stream_id(const void* s);
inline void side_protect(const Side& r, int prot) {
    uintptr_t b = (r.b + PAGE - 1) / PAGE * PAGE, e = r.e / PAGE * PAGE;
    if (e > b) mprotect((void*)b, e - b, prot);
}
struct Written { const void* stream; unsigned long seq; const char* op; };
inline std::unordered_map<uintptr_t, Written> g_written;  // kernels' writes not yet waited for, by page (below)
// a wait: the work that done(stream, place) selects is ordered before everything queued from now on
inline void side_release_if(const std::function<bool(const void*, unsigned long)>& done) {
    for (size_t i = 0; i < g_side.size();)
        if (done(g_side[i].stream, g_side[i].seq)) {
            side_protect(g_side[i], PROT_READ | PROT_WRITE);
            g_side.erase(g_side.begin() + i);
            g_side_dirty = true;
        } else i++;
    for (auto it = g_written.begin(); it != g_written.end();)
        it = done(it->second.stream, it->second.seq) ? g_written.erase(it) : std::next(it);
}
inline void side_release_all() { side_release_if([](const void*, unsigned long) { return true; }); }
// an operation of `stream` starts: the other streams' queued bytes are closed to it, its own open
inline void side_enter(const void* stream, const char* op) {
    g_side_op = op;
    if (!stream) side_release_all();  // the legacy default stream waits for every other stream's work
    if (stream == g_side_running && !g_side_dirty) return;
    g_side_running = stream; g_side_dirty = false;
    for (const Side& r : g_side) if (r.stream != stream && !r.writes) side_protect(r, PROT_READ);
    for (const Side& r : g_side) if (r.stream != stream && r.writes) side_protect(r, PROT_NONE);
    for (const Side& r : g_side) if (r.stream == stream) side_protect(r, PROT_READ | PROT_WRITE);
}
// after an operation of the running stream: it read or wrote [p, p + n) (noted once per range);
// a page wholly inside that a kernel of another stream wrote, with no wait since, is a race
inline void side_note(const void* stream, const void* p, size_t n, bool writes) {
    if (!n || !stream || !device_owns(p)) return;
    const uintptr_t b = (uintptr_t)p, e = b + n;
    for (uintptr_t page = (b + PAGE - 1) / PAGE * PAGE; page + PAGE <= e && !g_written.empty(); page += PAGE) {
        auto it = g_written.find(page);
        if (it != g_written.end() && it->second.stream != stream)
            die("%s on stream %d %s device memory at %#lx that %s on stream %d wrote, and the stream did not wait for "
                "it: it must wait first (cudaStreamWaitEvent on an event recorded after that work, or a host sync)",
                g_side_op, stream_id(stream), writes ? "overwrote" : "read", (unsigned long)page, it->second.op,
                stream_id(it->second.stream));
    }
    for (Side& r : g_side)
        if (r.b == b && r.e == e && r.stream == stream) { r.writes |= writes; r.seq = ++g_seq; return; }
    g_side.push_back({b, e, writes, stream, ++g_seq});
}
inline const char* side_fault(const void* addr) {
    for (const Side& r : g_side) {
        if ((uintptr_t)addr < r.b || (uintptr_t)addr >= r.e || r.stream == g_side_running) continue;
        static char msg[480];
        const char* op = strcmp(tl_where.kernel, "(host code)") ? tl_where.kernel : g_side_op;
        snprintf(msg, sizeof(msg), "%s on stream %d touched device memory at %p that work queued on stream %d (a copy, a matmul or "
                 "an NCCL collective) may still be %s: the stream must wait for that work first (cudaStreamWaitEvent on an event "
                 "recorded after it, or a host sync)", op, stream_id(g_side_running), addr, stream_id(r.stream),
                 r.writes ? "writing" : "reading");
        return msg;
    }
    return nullptr;
}

// ---- kernels' writes, for the other streams
// A copy, memset or collective says which bytes it uses; a kernel does not. So the other half of
// the races between streams — a collective or copy on one stream that reads or overwrites what a
// kernel (or matmul) of another stream wrote, with no wait between them; on a GPU a missing
// nccl_stream_waits_compute, DDP's all-reduce summing gradients the backward may still be
// writing — is found by learning which pages each kernel writes. While two streams or more
// exist, device memory is made read-only before each kernel and cuBLASLt matmul; the first write
// to a page faults, and the handler notes the page and makes it writable (one fault per page per
// launch, which is why one stream alone does not pay for it). After the launch each noted page
// remembers its writer (stream, place in g_seq, name) until a wait releases it, as the ranges
// above are released; a copy, memset or collective of another stream whose range wholly holds
// such a page is reported by side_note, with both operations named. A page is the unit, so a
// page only partly inside a range is not checked (a race missed, never one invented).
// Reads: a matmul notes the matrices it read as a copy notes its source (cublasLtMatmul), so a
// collective of another stream overwriting a weight that a queued matmul may still read (a ZeRO-3
// gather into a parameter buffer, without waiting) faults. Reads by the hand-written kernels are
// not learnt: a collective overwriting what only such a kernel reads is not caught.
inline bool g_track = false;              // set when the second stream is created
inline std::atomic<bool> g_armed{false};    // a launch runs with device memory read-only
constexpr size_t MAX_DIRTY = 1 << 18;       // pages one launch may write (1 GiB)
inline uintptr_t g_dirty[MAX_DIRTY];        // the pages it wrote (a page twice if two threads raced to it)
inline std::atomic<size_t> g_ndirty{0};
inline void protect_device_memory(int prot) {  // every buffer's pages, not the guard page after it
    for (auto& [start, a] : g_allocs) mprotect(a.map, a.map_bytes - PAGE, prot);
}
inline void writes_arm(const void* stream) {
    if (!g_track || !stream) return;  // (the legacy default stream waits for all: nothing to learn)
    protect_device_memory(PROT_READ);
    for (const Side& r : g_side) if (r.stream != stream && r.writes) side_protect(r, PROT_NONE);  // still closed
    g_ndirty = 0;
    g_armed = true;
}
// in the SIGSEGV handler (async-signal-safe: no locks, no allocation; g_allocs does not change
// during a launch)
inline bool track_write(const void* addr) {
    if (!g_armed) return false;
    const uintptr_t a = (uintptr_t)addr;
    auto it = floor_entry(g_allocs, a);
    if (it == g_allocs.end()) return false;
    const uintptr_t map = (uintptr_t)it->second.map, page = a / PAGE * PAGE;
    if (a < map || a >= map + it->second.map_bytes - PAGE) return false;  // outside its pages, or the guard page
    const size_t i = g_ndirty++;
    if (i < MAX_DIRTY) g_dirty[i] = page;
    mprotect((void*)page, PAGE, PROT_READ | PROT_WRITE);
    return true;
}
inline void writes_disarm(const void* stream, const char* op) {
    if (!g_armed) return;
    g_armed = false;
    protect_device_memory(PROT_READ | PROT_WRITE);
    const size_t n = g_ndirty;
    if (n > MAX_DIRTY) die("%s wrote more than %zu pages: too many for the emulator to follow (MAX_DIRTY)", op, MAX_DIRTY);
    const unsigned long seq = ++g_seq;
    for (size_t i = 0; i < n; i++) g_written[g_dirty[i]] = Written{stream, seq, op};
    g_side_dirty = true;
    side_enter(stream, op);  // the ranges' protections, which the above undid
}
}  // namespace simt
using simt::CUtensorMap;  // (the CUDA driver API's name)

inline void __syncthreads() { simt::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt::warp_barrier(); }
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return simt::shfl(mask, v, [](int lane, int m) { return lane ^ m; }, lane_mask, width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return simt::shfl(mask, v, [](int lane, int d) { return lane + d; }, (int)delta, width);
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return simt::shfl(mask, v, [](int, int s) { return s; }, src, width);
}
inline int __any_sync(unsigned mask, int pred) { return simt::vote_any(mask, pred); }
inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
// atomicMax on a 32-bit word (fp8.cuh's amax record): the blocks of a launch run on several
// threads here, so it is a real atomic, a compare-and-swap loop. (A max is exact and order-free,
// so the result does not depend on the blocks' order.)
inline unsigned atomicMax(unsigned* p, unsigned v) {
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
// atomicAdd on a 32-bit word (the fused attention backward's count of finished splits). It also
// orders memory, acquire and release: on a GPU the kernel's __threadfence calls around it do.
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
// atomicExch on a 32-bit word (the chained attention backward's ticket, set back to 0)
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> inline T __ldcg(const T* p) { return *p; }  // (a load that skips L1: the emulator has none)

// ---- the CUDA runtime calls of the backend (every call completes before it returns)
enum cudaError_t {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
    cudaErrorNoKernelImageForDevice = 209, cudaErrorNotReady = 600
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered, cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged };
struct cudaPointerAttributes { cudaMemoryType type; int device; void* devicePointer; void* hostPointer; };
typedef struct CUstream_st* cudaStream_t;
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
        default: return "emulated CUDA error";
    }
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// The GPUs a rented node may have that this build cannot use, for the tests of
// cuda_unusable_reason (common.h), each set by a variable (unset: a usable H100-like GPU):
//   SIMT_DRIVER_VERSION=12040  a driver for CUDA 12.4 under a CUDA 13.0 runtime: too old
//   SIMT_COMPUTE_CAPABILITY=7.0  the compute capability the device reports (default 9.0)
//   SIMT_NO_KERNEL_IMAGE=1     the binary holds no code for the device
namespace simt {
inline int env_int(const char* name, int otherwise) { const char* e = getenv(name); return e && *e ? atoi(e) : otherwise; }
inline const int g_driver_version = env_int("SIMT_DRIVER_VERSION", 0), g_runtime_version = g_driver_version ? 13000 : 0;
inline int g_cc_major = 9, g_cc_minor = 0;
inline const bool g_cc_read = [] {
    const char* e = getenv("SIMT_COMPUTE_CAPABILITY");
    if (e && *e && sscanf(e, "%d.%d", &g_cc_major, &g_cc_minor) != 2) die("SIMT_COMPUTE_CAPABILITY: expected MAJOR.MINOR, got '%s'", e);
    return true;
}();
}  // namespace simt
inline cudaError_t cudaGetDeviceCount(int* n) {
    if (simt::g_driver_version && simt::g_driver_version / 1000 < simt::g_runtime_version / 1000) return cudaErrorInsufficientDriver;
    *n = 1;
    return cudaSuccess;
}
struct cudaFuncAttributes { int binaryVersion, ptxVersion; };
template <class F> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
    if (simt::env_int("SIMT_NO_KERNEL_IMAGE", 0)) return cudaErrorNoKernelImageForDevice;
    a->binaryVersion = a->ptxVersion = simt::g_cc_major * 10 + simt::g_cc_minor;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
// Work that really is asynchronous here: test/simt_nccl.h's ncclSend outside a group starts the
// transfer and leaves it in flight on its stream (a send that does not wait for its receiver,
// pipeline.h's), to be finished by the waits that cover that stream's place: settle(stream,
// upto, block) finishes (block) or tests those queued on `stream` (null: on any) up to place
// `upto`, and says whether none is left.
namespace simt { inline bool (*g_settle)(const void* stream, unsigned long upto, bool block) = nullptr; }
// each stream its own object (numbered from 1; 0 is the legacy default stream), for simt::g_side
struct CUstream_st { int id; };
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
    static int n = 0;
    *s = new CUstream_st{++n};
    if (n >= 2) simt::g_track = true;  // from now on kernels' writes are learnt (simt.h, "kernels' writes")
    return cudaSuccess;
}
inline int simt::stream_id(const void* s) { return s ? ((const CUstream_st*)s)->id : 0; }
// Calls after which the host has waited for all queued GPU work (a stream or device sync, a
// synchronous cudaMemcpy, cudaFree): on a GPU each drains the queue, and the GPU idles until the
// host launches again. Everything is synchronous here, so they are only counted; with
// SIMT_COUNT_WAITS set the count is printed at exit (test_gpu_train.sh checks that a step's
// count does not grow with its micro-steps). Waiting for an event is not counted: it waits
// only for the work queued before the event.
namespace simt {
inline std::atomic<long> g_full_waits{0};
struct FullWaitReport {
    ~FullWaitReport() {
        if (getenv("SIMT_COUNT_WAITS")) fprintf(stderr, "simt: the host waited for all queued GPU work %ld times\n", g_full_waits.load());
    }
};
inline FullWaitReport g_full_wait_report;
}  // namespace simt
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    simt::g_full_waits++;
    if (simt::g_settle) simt::g_settle(s, ~0ul, true);
    simt::pinned_settle(s, ~0ul);
    simt::side_release_if([s](const void* stream, unsigned long) { return !s || stream == s; });
    return cudaSuccess;
}
// events time the (synchronous) emulation by the host clock: meaningless as GPU timings, there
// so that the dev/cuda playgrounds run on the emulator too
// (an event also marks its stream's place in simt::g_seq: waiting for it covers the page-locked
// copies and the noted device bytes of that stream queued before it)
struct CUevent_st { double t = 0; const void* stream = nullptr; unsigned long seq = 0; };
typedef CUevent_st* cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st; return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); e->t = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    e->stream = s; e->seq = simt::g_seq;
    return cudaSuccess;
}
// the work of e's stream queued before e is done, for whoever waits (a stream or the host)
inline void simt_event_waited(cudaEvent_t e) {
    if (simt::g_settle) simt::g_settle(e->stream, e->seq, true);
    simt::side_release_if([e](const void* stream, unsigned long seq) { return (!e->stream || stream == e->stream) && seq <= e->seq; });
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {  // the host waits: its copies too
    simt::pinned_settle(e->stream, e->seq);
    simt_event_waited(e);
    return cudaSuccess;
}
// done when the work queued before e is (a send in flight may not be: cudaErrorNotReady)
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (simt::g_hung) return cudaErrorNotReady;  // (SIMT_HANG_KERNEL)
    if (simt::g_settle && !simt::g_settle(e->stream, e->seq, false)) return cudaErrorNotReady;
    return cudaEventSynchronize(e);  // (the host now knows that work is done: as after a wait)
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) { simt_event_waited(e); return cudaSuccess; }
enum { cudaEventDisableTiming = 2, cudaStreamNonBlocking = 1 };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->t - a->t); return cudaSuccess; }
// what cuda_describe reads: the emulator names itself and reports no architecture or versions
struct cudaDeviceProp {
    char name[256] = "CPU SIMT emulator (test/simt.h)";
    int major = 0, minor = 0, multiProcessorCount = 0;
    size_t totalGlobalMem = 0;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    *p = cudaDeviceProp{};
    p->totalGlobalMem = simt::g_device_capacity;
    return cudaSuccess;
}
// The compute capability is 9.0 where a kernel asks (the emulator runs sm_90a's wgmma;
// SIMT_COMPUTE_CAPABILITY sets another); the shared-memory opt-in ceiling an H100's.
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
                      cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    switch (a) {
        case cudaDevAttrComputeCapabilityMajor: *v = simt::g_cc_major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = simt::g_cc_minor; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)simt::SHARED_MAX; break;
        case cudaDevAttrMultiProcessorCount: *v = simt::env_int("SIMT_SM_COUNT", 132); break;  // (an H100's; SIMT_SM_COUNT: fewer, so persistent grids loop)
        default: simt::die("cudaDeviceGetAttribute: attribute %d is not emulated", (int)a);
    }
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) { *v = simt::g_driver_version; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = simt::g_runtime_version; return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() {
    simt::g_full_waits++;
    if (simt::g_settle) simt::g_settle(nullptr, ~0ul, true);
    simt::pinned_settle_all(); simt::side_release_all();
    return cudaSuccess;
}
template <class T> inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    *p = (T*)simt::device_alloc(bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> lock(simt::g_alloc_mu);
    *total = simt::g_device_capacity;
    *free_bytes = simt::g_device_capacity - simt::g_device_used;
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    simt::g_full_waits++;
    simt::pinned_settle_all();
    simt::side_release_all();
    if (p) simt::device_free(p);
    return cudaSuccess;
}
// page-locked host memory: whole pages of its own, so that a copy in flight can protect it
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    size_t map_bytes = (std::max<size_t>(bytes, 1) + simt::PAGE - 1) / simt::PAGE * simt::PAGE;
    void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
    simt::pinned()[(uintptr_t)m] = simt::Pinned{map_bytes};
    *p = m;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
    auto it = simt::pinned().find((uintptr_t)p);
    if (it == simt::pinned().end()) simt::die("cudaFreeHost of a pointer cudaMallocHost did not return");
    munmap(p, it->second.map_bytes);
    simt::pinned().erase(it);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) { simt::side_release_all(); memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s = nullptr) {
    simt::side_enter(s, "cudaMemsetAsync");
    memset(p, v, n);
    simt::side_note(s, p, n, true);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
    simt::g_full_waits++;
    simt::pinned_settle_all();
    simt::side_release_all();
    memmove(d, s, n);
    return cudaSuccess;
}
// done at once; a page-locked host side is then protected until a wait covers this copy
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t stream = nullptr) {
    simt::side_enter(stream, "cudaMemcpyAsync");
    auto& m = simt::pinned();
    auto it = simt::pinned_find(d);
    const bool download = it != m.end();
    if (!download) it = simt::pinned_find(s);
    if (it != m.end()) mprotect((void*)it->first, it->second.map_bytes, PROT_READ | PROT_WRITE);  // (copies queued in order)
    memmove(d, s, n);
    if (it != m.end()) {
        it->second.seq = ++simt::g_seq;
        it->second.stream = stream;
        it->second.download = download;
        mprotect((void*)it->first, it->second.map_bytes, download ? PROT_NONE : PROT_READ);
    }
    simt::side_note(stream, s, n, false);
    simt::side_note(stream, d, n, true);
    return cudaSuccess;
}
inline const char* simt::pinned_fault(const void* addr) {
    auto it = pinned_find(addr);
    if (it == pinned().end() || !it->second.seq) return nullptr;
    static char msg[400];
    snprintf(msg, sizeof(msg), "the host touched page-locked memory at %p while an asynchronous copy %s it may still be running "
             "(cudaMemcpyAsync returns before the copy is done: wait first, with cudaEventSynchronize on an event recorded "
             "after the copy, or a stream or device sync)", addr, it->second.download ? "into" : "out of");
    return msg;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    memset(a, 0, sizeof(*a));
    a->type = simt::device_owns(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    return cudaSuccess;
}

// ---- cuBLASLt: the matmul with its layouts, transposes, bias epilogue and alignment contract
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14, CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_BGRADB = 512
};
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18, CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
};
struct SimtLtDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int32_t bias_type = -1;  // -1: D's type
    void* aux = nullptr;
    int64_t aux_ld = 0;
    const float* scale[2] = {nullptr, nullptr};  // A's and B's (device pointers; nullptr: 1)
};
struct SimtLtLayout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; };
struct SimtLtPref { uint32_t align[4] = {256, 256, 256, 256}; };  // A, B, C, D
struct cublasLtMatmulAlgo_t { uint32_t align[4]; int index; };  // (index: the heuristic's rank of it)
struct cublasLtMatmulHeuristicResult_t { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; };
typedef void* cublasLtHandle_t;
typedef SimtLtDesc* cublasLtMatmulDesc_t;
typedef SimtLtLayout* cublasLtMatrixLayout_t;
typedef SimtLtPref* cublasLtMatmulPreference_t;

inline size_t cublasLtGetVersion() { return 0; }
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { static char dummy; *h = &dummy; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t scale) {
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new SimtLtDesc; return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA: if (n != sizeof(d->ta)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->ta, v, n); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: if (n != sizeof(d->tb)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->tb, v, n); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: if (n != sizeof(d->epi)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->epi, v, n); break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (n != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias, v, n); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: if (n != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux, v, n); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (n != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->aux_ld, v, n); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->bias_type, v, n); break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: if (n != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->scale[0], v, n); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: if (n != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&d->scale[1], v, n); break;
        case CUBLASLT_MATMUL_DESC_FAST_ACCUM: if (n != sizeof(int8_t)) return CUBLAS_STATUS_INVALID_VALUE; break;  // (fp32 sums either way)
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;  // column-major: ld ≥ rows
    *l = new SimtLtLayout{t, rows, cols, ld}; return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new SimtLtPref; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return n == sizeof(size_t) || n == 8 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (a < CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || a > CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], v, n);
    return CUBLAS_STATUS_SUCCESS;
}
// It offers two algorithms (the same arithmetic), as cuBLASLt offers several; SIMT_LT_ALGOS=N
// offers N (up to the number asked for), and with SIMT_LT_ALGO_REVERSE=1 the odd-numbered ones
// (the 2nd, the 4th, …) add the products along k in the reverse order, rounding otherwise, as
// another tiling may: --matmul-tune must then not take them (matmul.cuh).
// SIMT_LT_NO_EPILOGUES=1: the heuristic has no algorithm for any epilogue (it answers
// NOT_SUPPORTED, as cuBLASLt does), so that the backend's fallback for that case runs in tests.
// The bias gradient (BGRADB) into an fp32 vector beside a 16-bit D: INVALID_VALUE, as cuBLASLt
// 13.1 answered on an H100.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t p,
                                                     int requested, cublasLtMatmulHeuristicResult_t* res, int* found) {
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    static const bool no_epilogues = getenv("SIMT_LT_NO_EPILOGUES") && strcmp(getenv("SIMT_LT_NO_EPILOGUES"), "0");
    *found = 0;
    if (no_epilogues && d->epi != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epi == CUBLASLT_EPILOGUE_BGRADB && d->bias_type == CUDA_R_32F && ld->type != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
    static const int offered = getenv("SIMT_LT_ALGOS") && atoi(getenv("SIMT_LT_ALGOS")) > 0 ? atoi(getenv("SIMT_LT_ALGOS")) : 2;
    const int n = requested < offered ? requested : offered;
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof(res[i]));
        memcpy(res[i].algo.align, p->align, sizeof(p->align));
        res[i].algo.index = i;
    }
    *found = n;
    return CUBLAS_STATUS_SUCCESS;
}
namespace simt {
// An 8-bit float from its definition (OCP FP8): E4M3 = 1.4.3, bias 7, S.1111.111 NaN, no
// infinities; E5M2 = 1.5.2, bias 15, IEEE-like. Written apart from llmc/fp8.cuh's fp8_decode.
inline float fp8_value(uint8_t c, cudaDataType_t t) {
    const bool e4 = t == CUDA_R_8F_E4M3;
    const int mbits = e4 ? 3 : 2, ebits = e4 ? 4 : 5, bias = e4 ? 7 : 15;
    const int mant = c & ((1 << mbits) - 1), ex = (c >> mbits) & ((1 << ebits) - 1);
    const double sgn = (c & 0x80) ? -1.0 : 1.0;
    if (e4 && ex == 15 && mant == 7) return NAN;
    if (!e4 && ex == 31) return mant ? NAN : (float)(sgn * INFINITY);
    const double frac = ex ? 1.0 + mant / (double)(1 << mbits) : mant / (double)(1 << mbits);
    return (float)(sgn * frac * pow(2.0, (ex ? ex : 1) - bias));
}
inline size_t lt_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 1; }
// fp16 code of v, rounded to nearest even: v's multiple of the quantum (2^(e−10) in the binade
// [2^e, 2^(e+1)), 2^-24 below 2^-14) by the FPU's own rounding, past 65504 ±inf (from
// definitions, apart from common.h's bit arithmetic)
inline uint16_t fp16_code(float v) {
    if (std::isnan(v)) return 0x7e00;
    const uint16_t s = std::signbit(v) ? 0x8000 : 0;
    const double a = std::fabs((double)v);
    if (std::isinf(a)) return s | 0x7c00;
    int e;
    std::frexp(a, &e);  // a = m·2^e, m in [0.5, 1): binade 2^(e−1)
    const int q = std::max(e - 1 - 10, -24);
    const double y = std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);  // (round to nearest even)
    if (y > 65504.0) return s | 0x7c00;
    if (y < 0x1p-14) return s | (uint16_t)std::ldexp(y, 24);
    const double m = std::frexp(y, &e);
    return s | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((2 * m - 1) * 1024);
}
inline float lt_read(const void* base, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2) return fp8_value(((const uint8_t*)base)[i], t);
    if (t == CUDA_R_32F) return ((const float*)base)[i];
    if (t == CUDA_R_16F) return half_value(((const uint16_t*)base)[i], 0, true);
    uint32_t u = (uint32_t)((const uint16_t*)base)[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
inline void lt_write(void* base, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) { ((float*)base)[i] = v; return; }
    if (t == CUDA_R_16F) { ((uint16_t*)base)[i] = fp16_code(v); return; }
    uint32_t u; memcpy(&u, &v, 4);  // round to nearest even (NaN stays NaN)
    if ((u & 0x7fffffffu) > 0x7f800000u) u = (u | 0x400000u);
    else u += 0x7fffu + ((u >> 16) & 1u);
    ((uint16_t*)base)[i] = (uint16_t)(u >> 16);
}
// cuBLASLt's GELU is the tanh approximation (GPT-2's): ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
inline float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
inline float gelu_tanh_grad(float x) {
    float th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}
}  // namespace simt
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void* alpha, const void* A, cublasLtMatrixLayout_t la,
                                     const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C, cublasLtMatrixLayout_t lc,
                                     void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    using simt::die;
    // SIMT_LT_REFUSE=N: the heuristic's first N algorithms are refused (NOT_SUPPORTED, nothing
    // done), as cuBLASLt may refuse one its heuristic offered, so that the backend's trying the
    // next (N = 1) and its answer to a refusal of all (N = 2) run in tests
    static const int refuse = getenv("SIMT_LT_REFUSE") ? atoi(getenv("SIMT_LT_REFUSE")) : 0;
    if (algo->index < refuse) return CUBLAS_STATUS_NOT_SUPPORTED;
    // SIMT_LT_REFUSE_FP8=1: every algorithm refused for FP8 operands (as cuBLASLt 13.1 did on an
    // H100), so that the backend's dequantized products (matmul.cuh: fp8_linear) run in tests
    static const bool refuse_fp8 = getenv("SIMT_LT_REFUSE_FP8") && strcmp(getenv("SIMT_LT_REFUSE_FP8"), "0");
    if (refuse_fp8 && (la->type == CUDA_R_8F_E4M3 || la->type == CUDA_R_8F_E5M2)) return CUBLAS_STATUS_NOT_SUPPORTED;
    simt::side_enter(stream, "cublasLtMatmul");
    const bool ta = op->ta == CUBLAS_OP_T, tb = op->tb == CUBLAS_OP_T;
    const size_t m = ld->rows, n = ld->cols, k = ta ? la->rows : la->cols;
    if ((ta ? la->cols : la->rows) != m) die("cublasLtMatmul: A's layout (%lu × %lu, %s) does not give op(A) the %zu rows of D", (unsigned long)la->rows, (unsigned long)la->cols, ta ? "T" : "N", m);
    if ((tb ? lb->rows : lb->cols) != n || (tb ? lb->cols : lb->rows) != k)
        die("cublasLtMatmul: B's layout (%lu × %lu, %s) does not match op(A) (%zu × %zu) and D (%zu × %zu)", (unsigned long)lb->rows, (unsigned long)lb->cols, tb ? "T" : "N", m, k, m, n);
    if (lc->rows != m || lc->cols != n) die("cublasLtMatmul: C's layout differs from D's");
    const bool fp8 = la->type == CUDA_R_8F_E4M3 || la->type == CUDA_R_8F_E5M2;
    if (lc->type != ld->type) die("cublasLtMatmul: C's and D's types differ (not emulated)");
    if (fp8) {  // cuBLASLt's FP8 rules on Hopper (sm_90)
        if (lb->type != CUDA_R_8F_E4M3 && lb->type != CUDA_R_8F_E5M2) die("cublasLtMatmul: A is FP8 and B is not");
        if (la->type == CUDA_R_8F_E5M2 && lb->type == CUDA_R_8F_E5M2) die("cublasLtMatmul: E5M2 × E5M2 has no FP8 kernel");
        if (!ta || tb) die("cublasLtMatmul: FP8 takes only the TN form (A transposed, B not)");
        if (ld->type != CUDA_R_16BF && ld->type != CUDA_R_32F) die("cublasLtMatmul: an FP8 product's D is emulated in bf16 or fp32 only");
        if (la->ld % 16 || lb->ld % 16) die("cublasLtMatmul: FP8 matrices need leading dimensions that are multiples of 16");
        if (op->epi != CUBLASLT_EPILOGUE_DEFAULT && op->epi != CUBLASLT_EPILOGUE_BIAS) die("cublasLtMatmul: epilogue %d with FP8 not emulated", (int)op->epi);
    } else if (la->type != lb->type) die("cublasLtMatmul: mixed operand types are not emulated");
    if (!fp8 && (op->scale[0] || op->scale[1])) die("cublasLtMatmul: A/B scale pointers are emulated for FP8 operands only");
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->align[i]) die("cublasLtMatmul: matrix %c is less aligned than the %u bytes promised to the heuristic", "ABCD"[i], algo->align[i]);
    const bool has_bias = op->epi == CUBLASLT_EPILOGUE_BIAS || op->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool gelu_fwd = op->epi == CUBLASLT_EPILOGUE_GELU_AUX || op->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool gelu_bwd = op->epi == CUBLASLT_EPILOGUE_DGELU;
    const bool bgradb = op->epi == CUBLASLT_EPILOGUE_BGRADB;  // bias[j] = Σ_p op(B)[p, j], written
    if (!has_bias && !gelu_fwd && !gelu_bwd && !bgradb && op->epi != CUBLASLT_EPILOGUE_DEFAULT) die("cublasLtMatmul: epilogue %d not emulated", (int)op->epi);
    if ((has_bias || bgradb) && !op->bias) die("cublasLtMatmul: bias epilogue without a bias pointer");
    if ((gelu_fwd || gelu_bwd) && (!op->aux || op->aux_ld < (int64_t)m))
        die("cublasLtMatmul: GELU epilogue without an aux matrix of leading dimension >= %zu", m);
    const float al = *(const float*)alpha * (op->scale[0] ? *op->scale[0] : 1.0f) * (op->scale[1] ? *op->scale[1] : 1.0f),
                be = *(const float*)beta;
    const cudaDataType_t ta_t = la->type, tb_t = lb->type, to = ld->type, tbias = op->bias_type < 0 ? to : (cudaDataType_t)op->bias_type;
    if (op->bias_type >= 0 && !bgradb) die("cublasLtMatmul: a bias data type is emulated only for the bias gradient");
    if (bgradb && (uintptr_t)op->bias % 16) die("cublasLtMatmul: the bias gradient vector is not 16-byte aligned");
    // op(A) as rows of k (m of them) and op(B) as columns of k (n of them), fp32
    std::vector<float> a(m * k), b(n * k);
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++) a[i * k + p] = simt::lt_read(A, ta_t, ta ? p + i * la->ld : i + p * la->ld);
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++) b[j * k + p] = simt::lt_read(B, tb_t, tb ? j + p * lb->ld : p + j * lb->ld);
    static const bool reverse = getenv("SIMT_LT_ALGO_REVERSE") && strcmp(getenv("SIMT_LT_ALGO_REVERSE"), "0");
    const bool backwards = reverse && algo->index % 2 == 1;
    simt::writes_arm(stream);  // D's and aux's pages, learnt as a kernel's are
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            const float *ai = &a[i * k], *bj = &b[j * k];
            float s = 0.0f;
            if (backwards)
                for (size_t p = k; p-- > 0;) s += ai[p] * bj[p];
            else {
                #pragma omp simd reduction(+ : s)
                for (size_t p = 0; p < k; p++) s += ai[p] * bj[p];
            }
            float v = al * s;
            if (be != 0.0f) v += be * simt::lt_read(C, lc->type, i + j * lc->ld);
            if (has_bias) v += simt::lt_read(op->bias, to, i);
            const size_t aux_i = i + j * op->aux_ld;
            if (gelu_fwd) {  // aux = the GELU's input, D = GELU(it), in fp32, each stored once
                simt::lt_write(op->aux, to, aux_i, v);
                v = simt::gelu_tanh(v);
            }
            if (gelu_bwd) v *= simt::gelu_tanh_grad(simt::lt_read(op->aux, to, aux_i));
            simt::lt_write(D, to, i + j * ld->ld, v);
        }
    if (bgradb)
        for (size_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (size_t p = 0; p < k; p++) s += b[j * k + p];
            simt::lt_write(const_cast<void*>(op->bias), tbias, j, s);
        }
    simt::writes_disarm(stream, "cublasLtMatmul");
    if (simt::g_track) {  // what it read, for the other streams: each whole matrix (a strided one's gaps are not read)
        auto read = [&](const void* p, size_t rows, size_t cols, int64_t ldim, cudaDataType_t type) {
            if (p && ldim == (int64_t)rows) simt::side_note(stream, p, rows * cols * simt::lt_size(type), false);
        };
        read(A, la->rows, la->cols, la->ld, la->type);
        read(B, lb->rows, lb->cols, lb->ld, lb->type);
        if (be != 0.0f && C != D) read(C, m, n, lc->ld, lc->type);
        if (has_bias) read(op->bias, m, 1, m, to);
        if (gelu_bwd) read(op->aux, m, n, op->aux_ld, to);
    }
    return CUBLAS_STATUS_SUCCESS;
}
