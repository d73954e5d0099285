/*
dev/cuda/attention.cu — causal attention, forward and backward: CPU reference vs CUDA versions.
  v1, v2: llmc/attention.cuh's online-softmax kernels (one warp a query row), fp32 and bf16 data
  v3-v6: bf16 flash attention on tensor cores by mma.sync (v5: the trainer's default; v6: two
         m-tiles a warp)
  v7-v9: the same by Hopper's wgmma (compute capability 9.0); fused: the backward as one pass
  v11-v22, v28, v29: v7's forward with a producer warpgroup, ping-pong, 128-key tiles, swizzled
         tiles, TMA copies, 3 computing warpgroups; v32-v34: v21, v28 and v22 persistent; v35:
         v28 with 128-key tiles (Q read from shared memory); v36: v35 persistent
  v23-v27, v30: the fused backward with a producer, by TMA, at head size 128, dQ summed by the
         last split; v31: a block per key block, each adding to one dQ sum in its turn
Each version is checked against the CPU op (the bf16 ones against its bf16 form), then timed:
its largest relative error, time and TFLOP/s (causal: 2·B·NH·T²·hs FLOPs forward, 2.5× that
backward). What each version is: docs/playgrounds.md.
usage: ./build/dev_attention [B T C NH [NKV] [time]]   (default GPT-2 124M: 8 1024 768 12)
  DEV_ATTENTION_SKIP=13,14 leaves those versions out.
  NKV: key/value heads (grouped-query attention; default NH).
  "time": only the trainer's bf16 kernels and their defaults' choices, no CPU reference, for long
          sequences (dev/bench/bench_vs_torch.sh); where the fused backward runs, its time by its
          number of splits (1-16), with v30 and v31; a ring attention block's (context parallelism).
For v5 and v6 the backward's time is also split between its two passes (backward_split below).
*/
#include "common.cuh"

// The kernel options of version v (7-9, 11-26, 28, 29, 31-36: the wgmma versions; any other: wgmma off).
static void wgmma_version(int v) {
    KernelOptions& k = gpu_ctx.kernels;
    k.flash_wgmma = v >= 7;
    k.flash_wgmma_groups = v == 8 ? 1 : 2;
    k.flash_wgmma_overlap = v != 9;
    const bool persistent = (v >= 32 && v <= 34) || v == 36;  // (v32-v34: v21, v28, v22 persistent; v36: v35)
    const bool fwd = v <= 22 || persistent || v == 35, bwd = v >= 23 && v <= 26;  // (v23-v26: v7's forward; v28, v29: the forward)
    k.flash_forward_producer = v == 12 || v == 14 ? 3 : (v >= 11 && v <= 16) || (v >= 19 && fwd) || v == 28 || v == 29 ? 2 : 0;
    k.flash_forward_pingpong = v == 13 || v == 14 || v == 16 || (v >= 19 && fwd && v != 33 && v < 35);
    k.flash_forward_keys = (v >= 15 && v <= 17) || v == 20 || v == 22 || v >= 34 ? 128 : 64;
    k.flash_forward_groups = v == 28 || v == 29 || v == 33 || v >= 35 ? 3 : 2;
    k.flash_swizzle = (v >= 18 && fwd) || v == 28;
    k.flash_tma = (v >= 21 && fwd) || v == 28;
    k.flash_forward_persistent = persistent;
    k.flash_fused_backward = bwd || v == 31;
    k.flash_dq_chain = v == 31;
    k.flash_backward_producer = v == 23 || v == 25 ? 3 : v == 24 || v == 26 ? 4 : 0;
    k.flash_backward_tma = v >= 25 && bwd;
}
// DEV_ATTENTION_SKIP="13,14": versions not to run (a GPU call skips the ones its checks failed).
static bool skipped(int v) { return env_lists("DEV_ATTENTION_SKIP", v); }
static const char* WGMMA_VERSION_TAIL[] = {"", "", ", no overlap", "", ", a producer warpgroup, 2 slots", ", a producer warpgroup, 3 slots",
                                           ", a producer warpgroup, 2 slots, ping-pong", ", a producer warpgroup, 3 slots, ping-pong",
                                           ", a producer warpgroup, 2 slots of 128 keys", ", a producer warpgroup, 2 slots of 128 keys, ping-pong",
                                           ", 128 keys a tile", ", swizzled tiles", ", a producer warpgroup, 2 slots, ping-pong, swizzled tiles",
                                           ", a producer warpgroup, 2 slots of 128 keys, ping-pong, swizzled tiles",
                                           ", a producer warpgroup, 2 slots, ping-pong, swizzled tiles by TMA",
                                           ", a producer warpgroup, 2 slots of 128 keys, ping-pong, swizzled tiles by TMA",
                                           "", "", "", "", "",  // (v23-v27: backward versions, no forward line)
                                           ", a producer warpgroup, 2 slots, swizzled tiles by TMA", ", a producer warpgroup, 2 slots",
                                           "", "",  // (v30, v31: backward versions)
                                           ", a producer warpgroup, 2 slots, ping-pong, swizzled tiles by TMA, a block an SM",
                                           ", a producer warpgroup, 2 slots, swizzled tiles by TMA, a block an SM",
                                           ", a producer warpgroup, 2 slots of 128 keys, ping-pong, swizzled tiles by TMA, a block an SM",
                                           ", a producer warpgroup, 2 slots of 128 keys, swizzled tiles by TMA, Q read from shared memory",
                                           ", a producer warpgroup, 2 slots of 128 keys, swizzled tiles by TMA, Q read from shared memory, a block an SM"};
// Versions that run at head size 64 only (two m-tiles a warp; the fused backward's; 3 warpgroups)
static bool head_size_64_only(int v) { return v == 6 || (v >= 23 && v <= 30) || v == 33 || v >= 35; }

// The flash backward's time split between its two passes, with each pass's own tensor-core
// FLOPs: the dK/dV pass computes 4 products (Sᵀ, dPᵀ, dV, dK), the dQ pass 3 (S, dP, dQ) — 7
// against the 5 of a single pass with atomic dQ updates; this says what the deterministic split
// costs. The dQ pass runs first and computes D = rowsum(dout∘out) (attention.cuh), so it is timed
// alone; the dK/dV pass is the rest of the whole backward's time. Run alone, the dK/dV pass needs
// the D kernel before it: that run less the pass is the kernel the dQ pass's D replaces.
static void backward_split(const std::function<void()>& backward, double flops_fwd, float ms_all) {
    gpu_ctx.kernels.flash_backward_passes = 2;
    const float q = time_ms(backward);
    gpu_ctx.kernels.flash_backward_passes = 1;
    const float kv_alone = time_ms(backward);
    gpu_ctx.kernels.flash_backward_passes = 3;
    const float kv = std::max(1e-6f, ms_all - q);
    printf("  backward split: dK/dV pass %.3f ms (%.1f TFLOP/s), dQ pass with D %.3f ms (%.1f TFLOP/s); a D kernel instead ~%.3f ms\n",
           kv, 2.0 * flops_fwd / kv / 1e9, q, 1.5 * flops_fwd / q / 1e9, std::max(0.0f, kv_alone - kv));
}

int main(int argc, char** argv) {
    dev_init();
    int B = 8, T = 1024, C = 768, NH = 12, NKV = 0;
    if (argc >= 5) { B = atoi(argv[1]); T = atoi(argv[2]); C = atoi(argv[3]); NH = atoi(argv[4]); }
    const bool time_only = argc >= 6 && !strcmp(argv[argc - 1], "time");
    if (argc >= 6 && strcmp(argv[5], "time")) NKV = atoi(argv[5]);
    if (NKV <= 0) NKV = NH;
    if (NH % NKV) { fprintf(stderr, "dev_attention: NKV %d must divide NH %d\n", NKV, NH); return 2; }
    const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH);  // a position's [q | k | v] row
    printf("# attention B=%d T=%d C=%d NH=%d NKV=%d (head size %d)\n", B, T, C, NH, NKV, C / NH);
    double flops_fwd = 2.0 * B * NH * (double)T * T * (C / NH);  // 4·T²/2·hs per head
    if (time_only) {
        Buf<bf16> q, o, d, dq;
        Buf<float> l;
        q.alloc(gpu_ctx, (size_t)B * T * W); dq.alloc(gpu_ctx, (size_t)B * T * W);
        o.alloc(gpu_ctx, (size_t)B * T * C); d.alloc(gpu_ctx, (size_t)B * T * C); l.alloc(gpu_ctx, (size_t)B * NH * T);
        std::vector<bf16> r(q.size());
        for (size_t i = 0; i < r.size(); i++) r[i] = from_f<bf16>((float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
        ctx_copy(gpu_ctx, q.data(), r.data(), r.size() * 2);
        ctx_copy(gpu_ctx, d.data(), r.data(), d.size() * 2);
        const char* name = use_flash<bf16>(gpu_ctx.kernels, C, NH) ? "v5 bf16 flash cp.async" : "v2 bf16 warp-per-row";
        float msf = time_ms([&] { attention_forward(gpu_ctx, o.data(), l.data(), q.data(), B, T, C, NH, NKV); });
        float msb = time_ms([&] { attention_backward(gpu_ctx, dq.data(), d.data(), q.data(), o.data(), l.data(), B, T, C, NH, NKV); });
        printf("forward  %-28s %8.3f ms  %6.2f TFLOP/s\n", name, msf, flops_fwd / msf / 1e9);
        printf("backward %-28s %8.3f ms  %6.2f TFLOP/s\n", name, msb, 2.5 * flops_fwd / msb / 1e9);
        auto bwd = [&] { attention_backward(gpu_ctx, dq.data(), d.data(), q.data(), o.data(), l.data(), B, T, C, NH, NKV); };
        if (use_flash<bf16>(gpu_ctx.kernels, C, NH)) backward_split(bwd, flops_fwd, msb);
        if (use_flash<bf16>(gpu_ctx.kernels, C, NH) && C / NH == 64) {  // v6: 32 rows (keys) per warp in the forward and both passes
            gpu_ctx.kernels.flash_forward_rows = gpu_ctx.kernels.flash_dq_rows = gpu_ctx.kernels.flash_dkv_keys = 32;
            float f32 = time_ms([&] { attention_forward(gpu_ctx, o.data(), l.data(), q.data(), B, T, C, NH, NKV); }), b32 = time_ms(bwd);
            printf("  with 32 rows per warp (v6): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n",
                   f32, flops_fwd / f32 / 1e9, b32, 2.5 * flops_fwd / b32 / 1e9);
            backward_split(bwd, flops_fwd, b32);
            gpu_ctx.kernels.flash_forward_rows = gpu_ctx.kernels.flash_dq_rows = gpu_ctx.kernels.flash_dkv_keys = 16;
        }
        if (use_flash<bf16>(gpu_ctx.kernels, C, NH)) {
            // what the trainer runs by default: --flash-rows auto (head size 64: each pass timed
            // with 16 and 32 rows a warp at its first launch, the faster kept) and --flash-wgmma auto
            // (compute capability 9.0: each pass's first launches run with wgmma and mma.sync,
            // wgmma kept where faster and of the same bits); the choices are printed
            gpu_ctx.kernels.flash_rows_auto = gpu_ctx.kernels.flash_wgmma_auto = gpu_ctx.kernels.flash_fused_backward = true;
            autotune_forget(gpu_ctx);
            auto fwd = [&] { attention_forward(gpu_ctx, o.data(), l.data(), q.data(), B, T, C, NH, NKV); };
            for (int i = 0; i < FLASH_WGMMA_SAMPLES; i++) fwd(), bwd();  // (the launches that decide)
            float fa = time_ms(fwd), ba = time_ms(bwd);
            const bool fused = flash_fused_backward_runs(gpu_ctx.kernels, C / NH);
            printf("  with --flash-rows auto --flash-wgmma auto --flash-backward fused (the trainer's defaults%s): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n",
                   fused ? "; the fused backward ran" : "; the two backward passes ran", fa, flops_fwd / fa / 1e9, ba, 2.5 * flops_fwd / ba / 1e9);
            if (fused) {  // the fused backward by its number of splits (a fixed rule picks it: it sets dQ's sum order)
                const FusedGrid rule = flash_fused_grid(gpu_ctx.kernels, B, NKV, T);  // (S splits for the heads past the whole waves)
                char rule_words[64] = "none";
                if (rule.S > 1) snprintf(rule_words, sizeof(rule_words), "%d for the last %d of %d heads", rule.S, rule.heads - rule.full, rule.heads);
                printf("  the fused backward by its splits, each for the heads past the whole waves (the rule's: %s; v30: each tile's last split sums its dQ, not the sum kernel):", rule_words);
                for (int S = 1; S <= 16 && S <= (int)ceil_div(T, 128); S *= 2) {
                    gpu_ctx.kernels.flash_fused_splits = S;
                    printf("%s S=%d %.3f ms", S > 1 ? "," : "", S, time_ms(bwd));
                    if (S > 1 && flash_fused_grid(gpu_ctx.kernels, B, NKV, T).full > 0) {  // (the whole waves' heads one block each; here every head split)
                        gpu_ctx.kernels.flash_fused_full = 0;
                        printf(" (every head split %.3f ms)", time_ms(bwd));
                        gpu_ctx.kernels.flash_fused_full = -1;
                    }
                    if (S == 1 || skipped(30)) continue;
                    gpu_ctx.kernels.flash_dq_last_split = true;
                    printf(" (v30 %.3f ms)", time_ms(bwd));
                    gpu_ctx.kernels.flash_dq_last_split = false;
                }
                printf("\n");
                gpu_ctx.kernels.flash_fused_splits = 0;
                if (C / NH == 64 && !skipped(31)) {  // v31: a block per key block, dQ added to one sum in turn (other bits)
                    gpu_ctx.kernels.flash_dq_chain = true;
                    const float bc = time_ms(bwd);
                    gpu_ctx.kernels.flash_backward_producer = 3; gpu_ctx.kernels.flash_backward_tma = true;
                    const float bct = time_ms(bwd);
                    gpu_ctx.kernels.flash_backward_producer = 0; gpu_ctx.kernels.flash_backward_tma = false;
                    gpu_ctx.kernels.flash_dq_chain = false;
                    printf("  with --flash-backward chain (v31: a block per key block, each adding to one dQ sum in its turn): backward %.3f ms (%.1f TFLOP/s), "
                           "with v25's producer by TMA %.3f ms; chained / fused time %.2f\n", bc, 2.5 * flops_fwd / bc / 1e9, bct, std::min(bc, bct) / ba);
                }
                // the same run with the two passes (--flash-backward split), for the ratio
                gpu_ctx.kernels.flash_fused_backward = false;
                for (int i = 0; i < FLASH_WGMMA_SAMPLES; i++) bwd();
                const float bs = time_ms(bwd);
                printf("  with --flash-backward split (the two passes, else the same): backward %.3f ms (%.1f TFLOP/s); fused / split time %.2f\n",
                       bs, 2.5 * flops_fwd / bs / 1e9, ba / bs);
            } else {
                backward_split(bwd, flops_fwd, ba);
            }
            if (!fused && C / NH == 128 && gpu_has_wgmma() && !skipped(27)) {  // v27: the fused pass at head size 128 (fused128)
                gpu_ctx.kernels.flash_fused_backward_128 = true;
                for (int i = 0; i < FLASH_WGMMA_SAMPLES; i++) bwd();
                const float bf = time_ms(bwd);
                printf("  with --flash-backward fused128 (the fused pass at head size 128, else the same): backward %.3f ms (%.1f TFLOP/s); fused / split time %.2f\n",
                       bf, 2.5 * flops_fwd / bf / 1e9, bf / ba);
                gpu_ctx.kernels.flash_fused_backward_128 = false;
                if (!skipped(31)) {  // v31 at head size 128: the fused pass with a block per key block (other bits)
                    gpu_ctx.kernels.flash_dq_chain = true;
                    for (int i = 0; i < FLASH_WGMMA_SAMPLES; i++) bwd();
                    const float bc = time_ms(bwd);
                    gpu_ctx.kernels.flash_dq_chain = false;
                    printf("  with --flash-backward chain (v31 at head size 128: the fused pass, a block per key block, each adding to one dQ sum in its turn): "
                           "backward %.3f ms (%.1f TFLOP/s); chained / split time %.2f, chained / fused128 time %.2f\n", bc, 2.5 * flops_fwd / bc / 1e9, bc / ba, bc / bf);
                }
            }
            gpu_ctx.kernels.flash_rows_auto = gpu_ctx.kernels.flash_wgmma_auto = gpu_ctx.kernels.flash_fused_backward = false;
            autotune_forget(gpu_ctx);
            gpu_ctx.kernels.flash_forward_rows = gpu_ctx.kernels.flash_dq_rows = gpu_ctx.kernels.flash_dkv_keys = 16;
        }
        // v7-v9, v11-v26, v28, v29, v32-v36: wgmma, 2 or 1 warpgroups a block, overlapped or not, a
        // producer, swizzled tiles, TMA, persistent (v11-v22, v28, v29, v32-v36: only the forward
        // changes, its time alone; v23-v26: only the fused backward, its time alone)
        if (use_flash<bf16>(gpu_ctx.kernels, C, NH) && gpu_has_wgmma())
            for (int v : {7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 32, 33, 34, 35, 36}) {
                if (skipped(v) || (head_size_64_only(v) && C / NH != 64)) continue;
                wgmma_version(v);
                if (v >= 23 && v <= 26) {
                    const float bw = time_ms(bwd);
                    printf("  with the fused backward and a producer warpgroup in it, %d slots%s (v%d): backward %.3f ms (%.1f TFLOP/s)\n",
                           gpu_ctx.kernels.flash_backward_producer, v >= 25 ? ", swizzled tiles by TMA" : "", v, bw, 2.5 * flops_fwd / bw / 1e9);
                    wgmma_version(0);
                    continue;
                }
                float fw = time_ms([&] { attention_forward(gpu_ctx, o.data(), l.data(), q.data(), B, T, C, NH, NKV); });
                printf("  with wgmma, %d computing warpgroup(s) a block%s (v%d): forward %.3f ms (%.1f TFLOP/s)",
                       v >= 28 ? gpu_ctx.kernels.flash_forward_groups : gpu_ctx.kernels.flash_wgmma_groups, WGMMA_VERSION_TAIL[v - 7], v, fw,
                       flops_fwd / fw / 1e9);
                if (v < 11) {
                    const float bw = time_ms(bwd);
                    printf(", backward %.3f ms (%.1f TFLOP/s)\n", bw, 2.5 * flops_fwd / bw / 1e9);
                    backward_split(bwd, flops_fwd, bw);
                } else {
                    printf("\n");
                }
                wgmma_version(0);
            }
        {   // a ring attention block (context parallelism, cp = 2 zigzag: T/2 queries over T/2 borrowed
            // keys, all visible), on the tensor cores (16-bit, head size 64/128) and warp-per-row
            const int h = T / 2, KV2 = (int)(W - C);
            Buf<bf16> kv; Buf<float> ob, dx, dkv, D;
            kv.alloc(gpu_ctx, (size_t)B * h * KV2); ob.alloc(gpu_ctx, (size_t)B * T * C); D.alloc(gpu_ctx, (size_t)B * NH * T);
            dx.alloc(gpu_ctx, (size_t)B * T * W); dkv.alloc(gpu_ctx, (size_t)B * h * KV2);
            ctx_copy(gpu_ctx, kv.data(), r.data(), kv.size() * 2);
            ctx_zero(gpu_ctx, ob.data(), ob.bytes()); ctx_zero(gpu_ctx, D.data(), D.bytes());
            const double bflops = 4.0 * B * h * (double)h * C;  // Q·Kᵀ and P·V over the whole block
            for (bool tc : {true, false}) {
                if (tc && !use_flash<bf16>(gpu_ctx.kernels, C, NH)) continue;
                gpu_ctx.kernels.flash = tc;
                attention_forward(gpu_ctx, o.data(), l.data(), q.data(), B, T, C, NH, NKV);  // (a finite lse to merge into)
                float fw = time_ms([&] { attention_block_forward(gpu_ctx, ob.data(), l.data(), q.data(), kv.data(), B, T, h, C, NH, NKV, h, h, 0, h); });
                float bw = time_ms([&] { attention_block_backward(gpu_ctx, dx.data(), dkv.data(), d.data(), q.data(), kv.data(), l.data(), D.data(), B, T, h, C, NH, NKV, h, h, 0, h); });
                printf("  ring block %d x %d keys (cp = 2), %s: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", h, h,
                       tc ? "tensor cores" : "warp-per-row", fw, bflops / fw / 1e9, bw, 2.5 * bflops / bw / 1e9);
            }
            gpu_ctx.kernels.flash = true;
        }
        return 0;
    }
    auto qkv = dev_randn((size_t)B * T * W), dout = dev_randn((size_t)B * T * C);
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv((size_t)B * T * W);
    attention_forward(cpu_ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    attention_backward(cpu_ctx, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
    DevBuf gqkv(qkv), gout(out), glse(lse), gdout(dout), gdqkv(dqkv);
    Version fwd[] = {{"v1 fp32 warp-per-row", [&] { attention_forward(gpu_ctx, gout.p(), glse.p(), gqkv.p(), B, T, C, NH, NKV); }}};
    Version bwd[] = {{"v1 fp32 dq + dkv passes", [&] { attention_backward(gpu_ctx, gdqkv.p(), gdout.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH, NKV); }}};
    for (auto& v : fwd) {
        float ms = time_ms(v.run);
        printf("forward  %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", v.name, rel_err(out, gout.host(), 1e-4), ms, flops_fwd / ms / 1e9);
    }
    for (auto& v : bwd) {
        float ms = time_ms(v.run);
        printf("backward %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", v.name, rel_err(dqkv, gdqkv.host(), 1e-4), ms, 2.5 * flops_fwd / ms / 1e9);
    }

    // bf16: the same inputs rounded to bf16, against the CPU's bf16 op
    std::vector<bf16> bqkv = vec_cast<bf16>(qkv), bdout = vec_cast<bf16>(dout), bout(out.size()), bdqkv(dqkv.size());
    attention_forward(cpu_ctx, bout.data(), lse.data(), bqkv.data(), B, T, C, NH, NKV);
    attention_backward(cpu_ctx, bdqkv.data(), bdout.data(), bqkv.data(), bout.data(), lse.data(), B, T, C, NH, NKV);
    DevBuf<bf16> g_qkv(bqkv), g_out(bout), g_dout(bdout), g_dqkv(bdqkv);
    auto want_out = vec_widen(bout), want_dqkv = vec_widen(bdqkv);
    const char* names[] = {"", "", "v2 bf16 warp-per-row", "v3 bf16 flash per-lane loads", "v4 bf16 flash ldmatrix", "v5 bf16 flash cp.async",
                           "v6 v5 + 32 rows/warp", "v7 wgmma, 2 warpgroups", "v8 wgmma, 1 warpgroup",
                           "v9 wgmma, no overlap", "v10 (removed)", "v11 wgmma, producer, 2 slots", "v12 wgmma, producer, 3 slots",
                           "v13 v11 + ping-pong", "v14 v12 + ping-pong", "v15 v11, 128 keys a tile", "v16 v13, 128 keys a tile",
                           "v17 v7, 128 keys a tile", "v18 v7, swizzled tiles", "v19 v13, swizzled tiles", "v20 v16, swizzled tiles",
                           "v21 v19, by TMA", "v22 v20, by TMA", "v23 fused bwd, producer, 3", "v24 fused bwd, producer, 4",
                           "v25 v23 by TMA", "v26 v24 by TMA", "", "v28 v21, 3 warpgroups", "v29 v11, 3 warpgroups", "",
                           "v31 fused bwd, chained", "v32 v21, persistent", "v33 v28, persistent", "v34 v22, persistent",
                           "v35 v28, 128 keys a tile", "v36 v35, persistent"};
    for (int v = 2; v <= 36; v++) {
        if (v == 10 || v == 27 || v == 30 || skipped(v)) continue;  // (v27, v30: "time" mode only)
        const bool flash = v >= 3;
        gpu_ctx.kernels.flash = flash;
        gpu_ctx.kernels.flash_ldmatrix = v >= 4;
        gpu_ctx.kernels.flash_async = v >= 5;
        gpu_ctx.kernels.flash_forward_rows = gpu_ctx.kernels.flash_dq_rows = gpu_ctx.kernels.flash_dkv_keys = v == 6 ? 32 : 16;
        wgmma_version(v);
        const char* name = names[v];
        if (v >= 7 && !gpu_has_wgmma()) { printf("%s: compute capability 9.0 only\n", name); continue; }
        if (flash && !use_flash<bf16>(gpu_ctx.kernels, C, NH)) { printf("%s: not for head size %d\n", name, C / NH); continue; }
        if (head_size_64_only(v) && C / NH != 64) { printf("%s: head size 64 only\n", name); continue; }
        auto f = [&] { attention_forward(gpu_ctx, g_out.p(), glse.p(), g_qkv.p(), B, T, C, NH, NKV); };
        auto b = [&] { attention_backward(gpu_ctx, g_dqkv.p(), g_dout.p(), g_qkv.p(), g_out.p(), glse.p(), B, T, C, NH, NKV); };
        float msf = time_ms(f);
        printf("forward  %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", name, rel_err(want_out, g_out.host(), 1e-2), msf, flops_fwd / msf / 1e9);
        float msb = time_ms(b);
        printf("backward %-28s rel err %.2e  %8.3f ms  %6.2f TFLOP/s\n", name, rel_err(want_dqkv, g_dqkv.host(), 1e-2), msb, 2.5 * flops_fwd / msb / 1e9);
        if (v >= 5 && v <= 22) backward_split(b, flops_fwd, msb);  // (v23-v26, v31: one fused pass)
    }
    gpu_ctx.kernels.flash = gpu_ctx.kernels.flash_ldmatrix = gpu_ctx.kernels.flash_async = true;
    gpu_ctx.kernels.flash_forward_rows = gpu_ctx.kernels.flash_dq_rows = gpu_ctx.kernels.flash_dkv_keys = 16;
    wgmma_version(0);
    return dev_done();
}
