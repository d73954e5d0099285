/*
flash_launch.cuh — which flash attention kernel runs, in which layout, and the choices made by timing.

attention.cuh's ops call flash_forward and flash_backward here. Their kernels: flash_attention.cuh
(mma.sync, 8.x and up), flash_attention_hopper.cuh and flash_fused_backward.cuh (wgmma, 9.0).
Not a header on its own: attention.cuh includes it in its CUDA part.

  forward:   mma.sync (16 or 32 rows a warp)  |  wgmma: plain, or a producer warpgroup with
             ping-pong, swizzled tiles, TMA, 3 computing warpgroups, a block an SM (FLASH_FORWARD_LAYOUTS)
  backward:  two passes (dQ; dK and dV)  |  on 9.0, one fused pass (FusedGrid: which heads split),
             then the sum of the splits' dQ (FLASH_BACKWARD_LAYOUTS: producer, TMA, v30); or
             chained (--flash-backward chain: a block per key block, one dQ sum added in turn)

Each switch is a field of ctx.kernels (kernel_options.h). The autos time their candidates at the
first step-sized launch and keep the fastest that writes the plain kernel's bits; rank 0 prints
each choice. The fused backward's splits are a fixed rule (flash_fused_splits): they set dQ's
order of sums.

Main functions: flash_forward, flash_backward, flash_fused_backward (the ops' entry points);
flash_run_pass (--flash-rows auto, --flash-wgmma auto); flash_layout_trial (the layout autos);
flash_fused_grid (the fused backward's blocks and splits).

Tests: test/gpucheck_ops.cu and its emulator build (each layout against the CPU op, the autos'
bits), test/test_gpu_train.sh (the autos inside training, a layout that hangs). More: docs/kernels.md.
*/
#pragma once
#include "autotune.cuh"
#include "flash_attention.cuh"
#include "flash_attention_hopper.cuh"
#include "flash_fused_backward.cuh"

// The flash kernels run bf16 or fp16 with head size 64 or 128 and 16-byte aligned rows (C % 8 == 0).
// Which kernel runs is ctx.kernels' choice; kernel_options.h says what each field picks.
// The fused backward (--flash-backward fused, the default) runs where the wgmma kernels run, at head
// size 64; fused128 and chain run it at 128 too. Its dQ sums run in another order than the two
// passes', so it is a fixed rule, never a choice by timing (docs/kernels.md, "The fused backward").
// flash_fused_splits > 0 sets the number of splits (tests); 0 lets flash_fused_splits choose.
inline bool flash_fused_backward_runs(const KernelOptions& o, int hs) {
    return o.flash_fused_backward && o.flash && (hs == 64 || (hs == 128 && (o.flash_fused_backward_128 || o.flash_dq_chain))) && o.flash_wgmma_groups == 2 &&
           (o.flash_wgmma || o.flash_wgmma_auto) && gpu_has_wgmma();
}
// Splits of the fused backward's key blocks (each a block of its own) for the heads past the
// GPU's whole waves (one block an SM; flash_fused_grid): the fewest of 1, 2, 4, 8, 16 (at most
// half the key blocks) whose blocks fill the last wave at least 90%, else the fullest. More
// splits mean more partial sums to add up after.
inline int flash_fused_splits(const KernelOptions& o, long kv_heads, int T) {
    if (o.flash_fused_splits > 0) return o.flash_fused_splits;
    const int nkb = ceil_div(T, 128), sms = std::max(1, gpu_sm_count());
    const long last = kv_heads % sms;  // (the last wave's heads)
    if (last == 0) return 1;
    int best = 1;
    double best_fill = 0;
    for (int S = 1; S <= 16 && (S == 1 || S <= nkb / 2); S *= 2) {
        const double waves = (double)last * S / sms, fill = waves / std::ceil(waves);
        if (fill >= 0.9) return S;
        if (fill > best_fill + 1e-9) best = S, best_fill = fill;
    }
    return best;
}
// The fused backward's blocks: the heads of the GPU's whole waves one block each, the rest in S
// splits. Splitting the whole waves' heads too would not shorten the pass (a wave of them takes a
// head's time either way), only add partial sums. flash_fused_full >= 0 sets them (tests).
// flash_dq_chain (--flash-backward chain): a block per key block, all heads alike (FusedGrid::chain).
inline FusedGrid flash_fused_grid(const KernelOptions& o, int B, int NKV, int T) {
    if (o.flash_dq_chain) return {0, (int)ceil_div(T, 128), B * NKV, B, true};
    const int heads = B * NKV, S = flash_fused_splits(o, heads, T), sms = std::max(1, gpu_sm_count());
    const int full = S == 1 ? heads : o.flash_fused_full >= 0 ? std::min(o.flash_fused_full, heads) : heads / sms * sms;
    return {full, S, heads, S == 1 ? 0 : B - full / NKV};  // (the batches from the first split head's)
}
// The fused backward's fp32 partial sums of dQ: the scratch that attention_backward takes (the
// memory plan reserves it), or 0 where the fused backward does not run.
template <class floatX> inline size_t flash_backward_scratch_bytes(const KernelOptions& o, int B, int T, int C, int NH, int NKV) {
    if (!is_half_type<floatX> || !flash_fused_backward_runs(o, C / NH) || C % 8) return 0;
    return fused_partial_floats(flash_fused_grid(o, B, NKV, T), B, (size_t)T * C) * sizeof(float);
}
enum FlashPass { FLASH_FORWARD, FLASH_DKV, FLASH_DQ };  // (autotune.cuh keeps each pass's decisions)
constexpr int FLASH_WGMMA_SAMPLES = 3;
inline const char* flash_pass_name(FlashPass pass) {
    static const char* names[3] = {"forward", "dK/dV pass", "dQ pass"};
    return names[pass];
}

// The faster of 16 and 32 rows a warp for one pass (launch(rows) queues it), printed.
template <class F>
inline int flash_tune_rows(const Ctx& ctx, FlashPass pass, int B, int T, const F& launch) {
    static const char* what[3] = {"query rows a warp in the forward", "keys a warp in the dK/dV pass", "query rows a warp in the dQ pass"};
    float ms[2];
    const int rows = 16 << autotune_faster(ctx, [&](int v) { launch(16 << v); }, ms);
    if (g_rank == 0)
        printf("flash attention: %d %s (--flash-rows auto, timed at B=%d T=%d: %.3f ms with 16, %.3f ms with 32)\n",
               rows, what[pass], B, T, ms[0], ms[1]);
    return rows;
}

// --flash-wgmma auto's decision for one pass, printed.
inline void flash_print_wgmma_trial(const AutotuneTrial& t, FlashPass pass, int B, int T) {
    if (g_rank != 0) return;
    printf("flash attention: %s in the %s (--flash-wgmma auto, timed at B=%d T=%d: %.3f ms with mma.sync, %.3f ms with wgmma; ",
           t.kept ? "wgmma" : "mma.sync", flash_pass_name(pass), B, T, t.ms_default, t.ms_candidate);
    if (t.same) printf("the same bits at its first %d launches)\n", t.samples);
    else printf("the bits differ at launch %d: mma.sync kept)\n", t.samples);
}

// One flash pass, by ctx.kernels: wgmma() where flash_wgmma asks or auto kept it, else mma(rows)
// with this pass's rows a warp. --flash-rows auto times 16 against 32 rows first, where the pass has
// both (head size 64, `both`). --flash-wgmma auto runs both kernels at the pass's first
// FLASH_WGMMA_SAMPLES large launches and hashes what each wrote (outs: every buffer the pass
// writes). A choice made by timing must not change what a run computes, so wgmma is kept only
// where it was faster and wrote mma.sync's bits every time (docs/kernels.md).
template <class M, class W>
inline void flash_run_pass(const Ctx& ctx, FlashPass pass, bool both, int rows, long blocks, int B, int T, const M& mma,
                           const W& wgmma, std::initializer_list<BitsRegion> outs) {
    const KernelOptions& o = ctx.kernels;
    Autotuned& tuned = *ctx.tuned;
    const bool big = blocks >= o.flash_tune_blocks, hopper = gpu_has_wgmma();
    if (hopper && o.flash_wgmma) { wgmma(); return; }
    if (both && o.flash_rows_auto && !tuned.flash_rows[pass] && big) tuned.flash_rows[pass] = flash_tune_rows(ctx, pass, B, T, mma);
    if (o.flash_rows_auto && tuned.flash_rows[pass]) rows = tuned.flash_rows[pass];
    if (hopper && o.flash_wgmma_auto) {
        AutotuneTrial& t = tuned.flash_wgmma[pass];
        if (!t.decided && big) {  // a sample: wgmma, then mma.sync (whose output stays)
            if (autotune_trial(ctx, &t, FLASH_WGMMA_SAMPLES, wgmma, [&] { mma(rows); }, outs)) flash_print_wgmma_trial(t, pass, B, T);
            return;
        }
        if (t.kept) { wgmma(); return; }
    }
    mma(rows);
}
template <class floatX> inline bool use_flash(const KernelOptions& o, int C, int NH) {
    int hs = C / NH;
    return is_half_type<floatX> && o.flash && (hs == 64 || hs == 128) && C % 8 == 0;
}
// Calls f(D, LDSM, ASYNC) with std::integral_constant arguments (so that f can name a kernel
// instance) for head size hs and the options above.
template <class F> inline void flash_dispatch(const KernelOptions& o, int hs, const F& f) {
    auto with = [&](auto d) {
        using std::true_type, std::false_type;
        if (o.flash_ldmatrix) o.flash_async ? f(d, true_type{}, true_type{}) : f(d, true_type{}, false_type{});
        else o.flash_async ? f(d, false_type{}, true_type{}) : f(d, false_type{}, false_type{});
    };
    if (hs == 64) with(std::integral_constant<int, 64>{});
    else with(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, hs> (64 or 128: the flash kernels' head sizes).
template <class F> inline void with_head_size(int hs, const F& f) {
    if (hs == 64) f(std::integral_constant<int, 64>{});
    else f(std::integral_constant<int, 128>{});
}
// Calls f with std::integral_constant<int, flash_wgmma_groups> (1 or 2: warpgroups a block).
template <class F> inline void wgmma_groups_dispatch(const KernelOptions& o, const F& f) {
    if (o.flash_wgmma_groups == 1) f(std::integral_constant<int, 1>{});
    else f(std::integral_constant<int, 2>{});
}
// The wgmma forward: G warpgroups of 64 rows a block, key tiles of BN, swizzled tiles (SW) or not.
template <class floatX, int HS, int G, int BN, bool SW>
inline void flash_forward_wgmma_launch(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    SHARED_OPT_IN(flash_forward_wgmma_kernel<floatX, HS, G, BN, SW>);
    const size_t shared = 4 * BN * HS * sizeof(floatX) + (SW ? 1024 : 0);  // (room to align the swizzled tiles)
    flash_forward_wgmma_kernel<floatX, HS, G, BN, SW><<<dim3(L.NH, B, ceil_div(T, 64 * G)), 128 * G, shared, ctx.stream>>>(out, lse, qkv, T, L, ctx.kernels.flash_wgmma_overlap);
    CUDA_LAUNCH_CHECK();
}
// The forward with a producer warpgroup (flash_forward_producer slots a ring: 2 or 3): 2
// warpgroups of 64 rows a block and the producer's; flash_forward_pingpong: the two take turns;
// flash_forward_keys: key tiles of 64, or of 128 (with 2 slots); SW: swizzled tiles; TMA: copied
// by TMA, through a tensor map of qkv as B × T × its row (boxes of 64 columns × BN rows).
// A tensor map of a B × T × W array of 16-bit values (W: a row's elements) for TMA boxes of 64
// columns × `rows` rows, 128-byte swizzled, zeros past T
template <class floatX> inline CUtensorMap flash_tensor_map(const floatX* base, size_t W, int T, int B, uint32_t rows) {
    const uint64_t dims[3] = {W, (uint64_t)T, (uint64_t)B}, strides[2] = {W * sizeof(floatX), T * W * sizeof(floatX)};
    const uint32_t box[3] = {64, rows, 1};
    return tensor_map_3d_16bit(base, dims, strides, box);
}
// NWG computing warpgroups (2, or 3 at head size 64: flash_forward_groups). A block for each
// block of 64·NWG query rows, or flash_forward_persistent: a block an SM (flash_forward_blocks),
// each running several in turn.
template <class floatX, int HS, int S, bool PINGPONG, int BN, bool SW, bool TMA, int NWG = 2>
inline void flash_forward_producer_launch(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    SHARED_OPT_IN(flash_forward_wgmma_producer_kernel<floatX, HS, S, PINGPONG, BN, SW, TMA, NWG>);
    const size_t shared = (2 * S * BN + 2 * 64 * NWG) * HS * sizeof(floatX) + (SW ? 1024 : 0);  // (K, V slots; 2 Q slots)
    CUtensorMap map{};
    if constexpr (TMA) map = flash_tensor_map(qkv, L.row(), T, B, forward_tma_box(64 * NWG, BN));
    const KernelOptions& k = ctx.kernels;
    const long items = (long)L.NH * B * ceil_div(T, 64 * NWG);
    const long blocks = k.flash_forward_persistent ? std::min<long>(items, k.flash_forward_blocks > 0 ? k.flash_forward_blocks : gpu_sm_count()) : items;
    flash_forward_wgmma_producer_kernel<floatX, HS, S, PINGPONG, BN, SW, TMA, NWG><<<(unsigned)blocks, 128 * (NWG + 1), shared, ctx.stream>>>(out, lse, qkv, T, B, L, k.flash_wgmma_overlap, map);
    CUDA_LAUNCH_CHECK();
}
template <class floatX, int HS, bool SW, bool TMA>
inline void flash_forward_producer(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const KernelOptions& k = ctx.kernels;
    const bool three = k.flash_forward_producer == 3, pingpong = k.flash_forward_pingpong, wide = k.flash_forward_keys == 128;
    if (wide && three) fatal("flash attention: key tiles of 128 in the producer forward need 2 slots (flash_forward_producer = 2)");
    if (k.flash_forward_groups == 3) {  // 192 query rows a block, 160 registers a thread: 64 keys a tile, 128 only with Q read from shared memory
        if (HS != 64 || pingpong || (wide && (!TMA || three)))
            fatal("flash attention: 3 computing warpgroups in the forward need head size 64 and no ping-pong; with key tiles of 128, 2 slots by TMA");
        if constexpr (TMA)  // (Q read from its slot by the tensor cores: 160 registers hold 128 keys; by cp.async the producer spills)
            if (wide) return flash_forward_producer_launch<floatX, 64, 2, false, 128, SW, TMA, 3>(ctx, out, lse, qkv, B, T, L);
        if (three) flash_forward_producer_launch<floatX, 64, 3, false, 64, SW, TMA, 3>(ctx, out, lse, qkv, B, T, L);
        else flash_forward_producer_launch<floatX, 64, 2, false, 64, SW, TMA, 3>(ctx, out, lse, qkv, B, T, L);
        return;
    }
    if (wide && pingpong) flash_forward_producer_launch<floatX, HS, 2, true, 128, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (wide) flash_forward_producer_launch<floatX, HS, 2, false, 128, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (three && pingpong) flash_forward_producer_launch<floatX, HS, 3, true, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (three) flash_forward_producer_launch<floatX, HS, 3, false, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else if (pingpong) flash_forward_producer_launch<floatX, HS, 2, true, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
    else flash_forward_producer_launch<floatX, HS, 2, false, 64, SW, TMA>(ctx, out, lse, qkv, B, T, L);
}
// The wgmma forward the options name (a producer or not, key tiles, warpgroups, swizzled tiles, TMA)
template <class floatX, int HS, bool SW>
inline void flash_forward_wgmma(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const KernelOptions& k = ctx.kernels;
    if (k.flash_tma && !(SW && k.flash_forward_producer)) fatal("flash attention: TMA copies need the producer forward and swizzled tiles");
    if constexpr (SW)
        if (k.flash_tma) return flash_forward_producer<floatX, HS, true, true>(ctx, out, lse, qkv, B, T, L);
    if (k.flash_forward_producer) return flash_forward_producer<floatX, HS, SW, false>(ctx, out, lse, qkv, B, T, L);
    if (k.flash_forward_keys == 128 && k.flash_wgmma_groups == 2) return flash_forward_wgmma_launch<floatX, HS, 2, 128, SW>(ctx, out, lse, qkv, B, T, L);
    wgmma_groups_dispatch(k, [&](auto groups) { flash_forward_wgmma_launch<floatX, HS, decltype(groups)::value, 64, SW>(ctx, out, lse, qkv, B, T, L); });
}
// --flash-forward-producer auto (flash_forward_producer_auto): the wgmma forward's layouts that
// compute the plain forward's bits, each run and timed at the first launch of flash_tune_blocks
// blocks or more. The fastest of the plain layout's bits is kept (autotune_pick). Until that
// launch the plain layout runs. The key tiles stay as the options set them (128 keys give other
// bits). The names match dev/cuda/attention.cu's versions.
struct FlashForwardLayout {
    const char* name;
    int producer, groups;  // producer: its slots (0: no producer warpgroup); groups: computing warpgroups
    bool pingpong, swizzle, tma, persistent = false;
};
constexpr FlashForwardLayout FLASH_FORWARD_LAYOUTS[] = {  // name, producer slots, warpgroups, ping-pong, swizzled, TMA, persistent
    {"v7 plain", 0, 2, false, false, false},
    {"v18 swizzled", 0, 2, false, true, false},
    {"v11 producer 2", 2, 2, false, false, false},
    {"v12 producer 3", 3, 2, false, false, false},
    {"v13 producer 2 ping-pong", 2, 2, true, false, false},
    {"v14 producer 3 ping-pong", 3, 2, true, false, false},
    {"v19 v13 swizzled", 2, 2, true, true, false},
    {"v21 v19 by TMA", 2, 2, true, true, true},
    {"v21 without ping-pong", 2, 2, false, true, true},
    {"v28 3 warpgroups by TMA", 2, 3, false, true, true},
    {"v29 3 warpgroups", 2, 3, false, false, false},
    {"v32 v21 persistent", 2, 2, true, true, true, true},
    {"v32 without ping-pong", 2, 2, false, true, true, true},
    {"v33 v28 persistent", 2, 3, false, true, true, true},
};
// k with layout f in place of its own, or false where f cannot run there (3 slots, or 3 warpgroups
// by cp.async, with key tiles of 128; 3 warpgroups at head size 128)
inline bool flash_forward_layout_options(KernelOptions* k, const FlashForwardLayout& f, int hs) {
    if (k->flash_forward_keys == 128 && (f.producer == 3 || (f.groups == 3 && !f.tma))) return false;
    if (hs != 64 && f.groups == 3) return false;
    k->flash_forward_producer = f.producer, k->flash_forward_groups = f.groups;
    k->flash_forward_pingpong = f.pingpong, k->flash_swizzle = f.swizzle, k->flash_tma = f.tma, k->flash_forward_persistent = f.persistent;
    if (f.producer || f.groups == 3) k->flash_wgmma_groups = 2;
    return true;
}
// An auto trial over a table of layouts (run(v) runs layout v, or says it cannot): the fastest of
// the first's bits is kept (autotune_pick), its output stays, and rank 0 prints every time as
// "flash attention: WHAT NAME (FLAG auto, timed at B= T=: name ms, ...)". Returns the index kept.
// A layout's first launch that fails, or takes over flash_trial_seconds (it hangs), ends the run
// in one line that names it: a layout that cannot run on some GPU must not hang a run.
template <class Layout, int N, class R>
inline int flash_layout_trial(const Ctx& ctx, const Layout (&layouts)[N], const R& run, const std::vector<BitsRegion>& outs, const char* what,
                              const char* flag, int B, int T) {
    bool waited[N] = {}, ran[N] = {};
    auto run_watched = [&](int v) {
        if (!run(v)) return false;
        ran[v] = true;
        if (waited[v]) return true;
        waited[v] = true;
        const cudaError_t r = gpu_wait_at_most(ctx, ctx.kernels.flash_trial_seconds);
        if (r == cudaErrorNotReady)
            fatal("flash attention: %s %s did not finish in %g s in %s auto's trial (it hangs here): run with %s 0", what, layouts[v].name,
                  ctx.kernels.flash_trial_seconds, flag, flag);
        if (r != cudaSuccess) fatal("flash attention: %s %s failed in %s auto's trial: %s (run with %s 0)", what, layouts[v].name, flag, cudaGetErrorString(r), flag);
        return true;
    };
    const AutotunePick t = autotune_pick(ctx, N, [] {}, run_watched, outs);
    if (g_rank == 0) {
        printf("flash attention: %s %s (%s auto, timed at B=%d T=%d:", what, t.best >= 0 ? layouts[t.best].name : "none", flag, B, T);
        std::string other, idle;  // (layouts of other bits; layouts that do not apply here)
        for (int v = 0; v < N; v++) {
            std::string& to = ran[v] ? other : idle;
            if (!std::isnan(t.ms[v])) printf("%s %s %.3f ms", v == t.first ? "" : ",", layouts[v].name, t.ms[v]);
            else to += std::string(to.empty() ? "" : ", ") + layouts[v].name;
        }
        printf("%s%s%s%s)\n", other.empty() ? "" : "; other bits: ", other.c_str(), idle.empty() ? "" : "; not for this shape: ", idle.c_str());
    }
    return std::max(t.best, 0);
}
// The wgmma forward in the layout ctx.kernels names
template <class floatX, int HS>
inline void flash_forward_wgmma_in(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    if (ctx.kernels.flash_swizzle) flash_forward_wgmma<floatX, HS, true>(ctx, out, lse, qkv, B, T, L);
    else flash_forward_wgmma<floatX, HS, false>(ctx, out, lse, qkv, B, T, L);
}
// The same, or with --flash-forward-producer auto the layout its trial kept (the plain one before it)
template <class floatX, int HS>
inline void flash_forward_wgmma_layout(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    if (!ctx.kernels.flash_forward_producer_auto) return flash_forward_wgmma_in<floatX, HS>(ctx, out, lse, qkv, B, T, L);
    int& kept = ctx.tuned->flash_forward_layout;
    auto run = [&](int v) {
        Ctx c = ctx;
        if (!flash_forward_layout_options(&c.kernels, FLASH_FORWARD_LAYOUTS[v], HS)) return false;
        flash_forward_wgmma_in<floatX, HS>(c, out, lse, qkv, B, T, L);
        return true;
    };
    if (kept < 0 && (long)L.NH * B * (long)ceil_div(T, 64) >= ctx.kernels.flash_tune_blocks) {  // the trial (its output: the kept layout's)
        kept = flash_layout_trial(ctx, FLASH_FORWARD_LAYOUTS, run, {{out, (size_t)B * T * L.C * sizeof(floatX)}, {lse, (size_t)B * L.NH * T * sizeof(float)}},
                                  ctx.kernels.flash_forward_keys == 128 ? "the forward's layout (key tiles of 128)" : "the forward's layout",
                                  "--flash-forward-producer", B, T);
        return;
    }
    run(std::max(kept, 0));
}
// grid (NH, B, row tiles) (the dK/dV pass: NKV key/value heads): the tile index is the slowest, so
// the blocks with the most work (the last query tiles; for dK/dV the first key tiles) start first
// and the short ones fill the tail
template <class floatX>
inline void flash_forward(const Ctx& ctx, floatX* out, float* lse, const floatX* qkv, int B, int T, const QKVLayout& L) {
    const int NH = L.NH;
    if constexpr (is_half_type<floatX>)
        flash_dispatch(ctx.kernels, L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            auto fwd_wgmma = [&] {
                constexpr int HS = decltype(d)::value;  // (D itself is not a constant in here)
                flash_forward_wgmma_layout<floatX, HS>(ctx, out, lse, qkv, B, T, L);
            };
            auto fwd = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_forward_kernel<floatX, D, LD, A, 2><<<dim3(NH, B, ceil_div(T, 128)), 128, 0, ctx.stream>>>(out, lse, qkv, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_forward_kernel<floatX, D, LD, A, 1><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(out, lse, qkv, T, L);
                CUDA_LAUNCH_CHECK();
            };
            flash_run_pass(ctx, FLASH_FORWARD, D == 64, ctx.kernels.flash_forward_rows, (long)NH * B * ceil_div(T, 64), B, T, fwd, fwd_wgmma,
                           {{out, (size_t)B * T * L.C * sizeof(floatX)}, {lse, (size_t)B * NH * T * sizeof(float)}});
        });
}
// dQ's scale, 1/√hs (the same float wherever dQ is finished)
inline float flash_dq_scale(const QKVLayout& L) { return rsqrtf((float)L.hs); }
// The fused pass with a producer warpgroup, SLOTS query-tile slots, its tiles copied by TMA or not
template <class floatX, int SLOTS, bool TMA, bool LAST, bool CHAIN>
inline void flash_fused_producer_launch(const Ctx& ctx, FusedGrid g, float* part, floatX* dqkv, const float* Dv, const floatX* dout,
                                        const floatX* qkv, const float* lse, int B, int T, const QKVLayout& L, bool dq_finish, unsigned* dq_done) {
    SHARED_OPT_IN(flash_backward_fused_wgmma_producer_kernel<floatX, 64, SLOTS, TMA, LAST, CHAIN>);
    const size_t smem = fused_tiles_elems(64, 8, SLOTS) * sizeof(floatX) + (TMA ? 1024 : 0);
    CUtensorMap qkv_map{}, dout_map{};
    if constexpr (TMA) qkv_map = flash_tensor_map(qkv, L.row(), T, B, 64), dout_map = flash_tensor_map(dout, L.C, T, B, 64);
    flash_backward_fused_wgmma_producer_kernel<floatX, 64, SLOTS, TMA, LAST, CHAIN><<<fused_blocks(g), 384, smem, ctx.stream>>>(dqkv, part, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap, dq_finish, flash_dq_scale(L), dq_done, g, qkv_map, dout_map);
}
// The fused backward (head size 64 or 128): D, the fused pass (FusedGrid: the last wave's heads
// into S splits' fp32 partial sums of dQ), then their sum (a head of one block: the pass finishes
// its dQ itself, dq_finish; flash_dq_last_split: the last split done with a query tile sums it,
// counted in dq_done). flash_backward_producer (3 or 4 query-tile slots; head size 64): the pass
// with a producer warpgroup (the same bits); flash_backward_tma: its tiles swizzled and copied by
// TMA. flash_dq_chain: a block per key block, dQ added to one sum in turn (FusedGrid::chain, CHAIN).
template <class floatX, int D, bool LAST, bool CHAIN>
inline void flash_fused_pass(const Ctx& ctx, FusedGrid g, float* part, floatX* dqkv, const float* Dv, const floatX* dout, const floatX* qkv,
                             const float* lse, int T, const QKVLayout& L, bool dq_finish, unsigned* dq_done) {
    SHARED_OPT_IN(flash_backward_fused_wgmma_kernel<floatX, D, LAST, CHAIN>);
    const size_t smem = fused_tiles_elems(D, 4, 3) * sizeof(floatX);
    flash_backward_fused_wgmma_kernel<floatX, D, LAST, CHAIN><<<fused_blocks(g), 256, smem, ctx.stream>>>(dqkv, part, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap, dq_finish, flash_dq_scale(L), dq_done, g);
}
// dQ of key/value heads [h0, h1), from their partial sums (flash_dq_sum_kernel)
template <class floatX>
inline void flash_dq_sum(const Ctx& ctx, floatX* dqkv, const float* part, const FusedGrid& g, int T, const QKVLayout& L, int h0, int h1) {
    if (h1 <= h0) return;
    const size_t head_float4s = (size_t)T * L.group() * L.hs / 4;  // (4 float4s a thread: dq_sum_rows loads them at once)
    flash_dq_sum_kernel<floatX><<<dim3(ceil_div(head_float4s, 4 * 256), h1 - h0), 256, 0, ctx.stream>>>(dqkv, part, g, T, L, h0, flash_dq_scale(L));
    CUDA_LAUNCH_CHECK();
}
template <class floatX>
inline void flash_fused_backward_in(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out,
                                    const float* lse, int B, int T, const QKVLayout& L) {
    const int C = L.C, NH = L.NH;
    const FusedGrid g = flash_fused_grid(ctx.kernels, B, L.NKV, T);
    const int slots = L.hs == 64 ? ctx.kernels.flash_backward_producer : 0;
    const bool last_split = g.S > 1 && ctx.kernels.flash_dq_last_split && L.hs == 64 && !g.chain;  // (at 128 the kernel would spill registers)
    if (L.hs == 128) flash_row_dots_kernel<floatX, 128><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(Dv, dout, out, T, L);
    else flash_row_dots_kernel<floatX, 64><<<dim3(NH, B, ceil_div(T, 64)), 128, 0, ctx.stream>>>(Dv, dout, out, T, L);
    CUDA_LAUNCH_CHECK();
    static Buf<float> part_buf;
    float* part = gpu_scratch(part_buf, ctx, fused_partial_floats(g, B, (size_t)T * C));
    if (slots != 0 && slots != 3 && slots != 4) fatal("flash attention: the producer backward takes 3 or 4 slots, not %d", slots);
    if (ctx.kernels.flash_backward_tma && !ctx.kernels.flash_backward_producer) fatal("flash attention: TMA copies in the backward need its producer (flash_backward_producer 3 or 4)");
    const bool tma = ctx.kernels.flash_backward_tma && slots;
    const bool finish = ctx.kernels.flash_dq_in_kernel;  // (a head of one block: the pass writes its dQ itself)
    static Buf<unsigned> done_buf;  // (zeros when allocated; a tile's last split, or chained its key block 0, sets its count back to 0)
    const size_t counts = g.chain ? chain_counts(B, L.NH, T) + 1 : last_split ? (size_t)B * L.NKV * ceil_div(T, 64) : 0;  // (chained: and the ticket)
    unsigned* done = counts ? gpu_scratch(done_buf, ctx, counts) : nullptr;
    auto launch = [&](auto last, auto chain) {  // (whether each tile's last split sums it; whether chained: constants of the kernels)
        constexpr bool LAST = decltype(last)::value, CHAIN = decltype(chain)::value;
        if (slots == 3 && tma) flash_fused_producer_launch<floatX, 3, true, LAST, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 3) flash_fused_producer_launch<floatX, 3, false, LAST, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 4 && tma) flash_fused_producer_launch<floatX, 4, true, LAST, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (slots == 4) flash_fused_producer_launch<floatX, 4, false, LAST, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, B, T, L, finish, done);
        else if (L.hs == 128) flash_fused_pass<floatX, 128, false, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, T, L, finish, done);
        else flash_fused_pass<floatX, 64, LAST, CHAIN>(ctx, g, part, dqkv, Dv, dout, qkv, lse, T, L, finish, done);
    };
    if (g.chain) launch(std::false_type{}, std::true_type{});
    else if (last_split) launch(std::true_type{}, std::false_type{});
    else launch(std::false_type{}, std::false_type{});
    CUDA_LAUNCH_CHECK();
    if (!finish) flash_dq_sum(ctx, dqkv, part, g, T, L, 0, g.full);  // the heads of one block
    if (!last_split && !g.chain) flash_dq_sum(ctx, dqkv, part, g, T, L, g.full, g.heads);  // the split ones
}
// --flash-backward-producer auto (flash_backward_producer_auto): the fused backward at head size
// 64 without a producer, and with one of 3 or 4 slots, its tiles copied by cp.async or by TMA;
// with several splits, each also with dQ summed by the last split (v30, flash_dq_last_split).
// All compute the same bits. Each is run and timed at the first launch of flash_tune_blocks
// blocks or more, and the fastest of the first's bits is kept (autotune_pick), as in the forward.
struct FlashBackwardLayout { const char* name; int slots; bool tma, last_split; };
constexpr FlashBackwardLayout FLASH_BACKWARD_LAYOUTS[] = {
    {"fused", 0, false, false}, {"v23 producer 3", 3, false, false}, {"v24 producer 4", 4, false, false},
    {"v25 v23 by TMA", 3, true, false}, {"v26 v24 by TMA", 4, true, false}, {"v30 last split sums", 0, false, true},
    {"v30 + v23", 3, false, true}, {"v30 + v24", 4, false, true}, {"v30 + v25", 3, true, true}, {"v30 + v26", 4, true, true},
};
// The fused backward in the layout ctx.kernels names, or (auto) the layout its trial kept
template <class floatX>
inline void flash_fused_backward(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out,
                                 const float* lse, int B, int T, const QKVLayout& L) {
    if (!ctx.kernels.flash_backward_producer_auto || L.hs != 64) return flash_fused_backward_in(ctx, dqkv, Dv, dout, qkv, out, lse, B, T, L);
    int& kept = ctx.tuned->flash_backward_layout;
    const FusedGrid g = flash_fused_grid(ctx.kernels, B, L.NKV, T);
    auto run = [&](int v) {
        const FlashBackwardLayout& l = FLASH_BACKWARD_LAYOUTS[v];
        Ctx c = ctx;
        c.kernels.flash_backward_producer = l.slots, c.kernels.flash_backward_tma = l.tma, c.kernels.flash_dq_last_split = l.last_split;
        flash_fused_backward_in(c, dqkv, Dv, dout, qkv, out, lse, B, T, L);
        return true;
    };
    if (kept < 0 && fused_blocks(g) >= ctx.kernels.flash_tune_blocks) {  // the trial (its output: the kept layout's)
        auto trial_run = [&](int v) { return !(FLASH_BACKWARD_LAYOUTS[v].last_split && (g.S == 1 || g.chain)) && run(v); };  // (one split, or chained: v30 is the layout without it)
        kept = flash_layout_trial(ctx, FLASH_BACKWARD_LAYOUTS, trial_run, {{dqkv, (size_t)B * T * L.row() * sizeof(floatX)}},
                                  "the fused backward's layout", "--flash-backward-producer", B, T);
        return;
    }
    run(std::max(kept, 0));
}
template <class floatX>
inline void flash_backward(const Ctx& ctx, floatX* dqkv, float* Dv, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse,
                           int B, int T, const QKVLayout& L) {
    const int NH = L.NH, NKV = L.NKV;
    if constexpr (is_half_type<floatX>)
        flash_dispatch(ctx.kernels, L.hs, [&](auto d, auto ldsm, auto async) {
            constexpr int D = decltype(d)::value;
            constexpr bool LD = decltype(ldsm)::value, A = decltype(async)::value;
            // wgmma: 64·G keys or queries a block; shared memory 2·G + 6 tiles (dK/dV), 5 (dQ)
            auto dq_wgmma = [&] {
                wgmma_groups_dispatch(ctx.kernels, [&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;  // (D itself is not a constant in here)
                    SHARED_OPT_IN(flash_backward_dq_wgmma_kernel<floatX, HS, G>);
                    flash_backward_dq_wgmma_kernel<floatX, HS, G><<<dim3(NH, B, ceil_div(T, 64 * G)), 128 * G, 5 * 64 * HS * sizeof(floatX), ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L, ctx.kernels.flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
            };
            auto dkv_wgmma = [&] {
                wgmma_groups_dispatch(ctx.kernels, [&](auto groups) {
                    constexpr int HS = decltype(d)::value, G = decltype(groups)::value;
                    SHARED_OPT_IN(flash_backward_dkv_wgmma_kernel<floatX, HS, G>);
                    flash_backward_dkv_wgmma_kernel<floatX, HS, G><<<dim3(NKV, B, ceil_div(T, 64 * G)), 128 * G, (2 * G + 6) * 64 * HS * sizeof(floatX), ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L, ctx.kernels.flash_wgmma_overlap);
                });
                CUDA_LAUNCH_CHECK();
            };
            const dim3 kv_grid(NKV, B, ceil_div(T, 64)), q_grid(NH, B, ceil_div(T, 64));
            auto dkv = [&](int keys) {
                if constexpr (D == 64)
                    if (keys == 32) {  // 2 warps × 32 keys: 64 threads a block
                        flash_backward_dkv_kernel<floatX, D, LD, A, 2><<<kv_grid, 64, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dkv_kernel<floatX, D, LD, A, 1><<<kv_grid, 128, 0, ctx.stream>>>(dqkv, dout, qkv, lse, Dv, T, L);
                CUDA_LAUNCH_CHECK();
            };
            auto dq = [&](int rows) {
                if constexpr (D == 64)
                    if (rows == 32) {
                        flash_backward_dq_kernel<floatX, D, LD, A, 2><<<dim3(NH, B, ceil_div(T, 128)), 128, 0, ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L);
                        CUDA_LAUNCH_CHECK();
                        return;
                    }
                flash_backward_dq_kernel<floatX, D, LD, A, 1><<<q_grid, 128, 0, ctx.stream>>>(dqkv, Dv, dout, qkv, out, lse, T, L);
                CUDA_LAUNCH_CHECK();
            };
            const long blocks = (long)B * ceil_div(T, 64);
            const BitsRegion dqkv_bits{dqkv, (size_t)B * T * L.row() * sizeof(floatX)}, D_bits{Dv, (size_t)B * NH * T * sizeof(float)};
            if (ctx.kernels.flash_backward_passes & 2)  // (first: it computes D)
                flash_run_pass(ctx, FLASH_DQ, D == 64, ctx.kernels.flash_dq_rows, NH * blocks, B, T, dq, dq_wgmma, {dqkv_bits, D_bits});
            if (ctx.kernels.flash_backward_passes & 1)
                flash_run_pass(ctx, FLASH_DKV, D == 64, ctx.kernels.flash_dkv_keys, NKV * blocks, B, T, dkv, dkv_wgmma, {dqkv_bits});
        });
}
