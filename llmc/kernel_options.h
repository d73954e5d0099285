/*
kernel_options.h — which kernel runs where an op has more than one (GPU only).

Every op call takes a Ctx (common.h), and the Ctx carries one KernelOptions. The trainer sets it
once from its flags (--flash-rows, --flash-wgmma, --flash-backward, --matmul-tune,
--classifier-staged, --bias-grad, --layernorm-prefetch); the playgrounds (dev/cuda) and gpucheck_ops set other fields
to compare the variants. Every variant computes the same function, and most give the same bits.
The ones that do not (flash_fused_backward, classifier_threads, bias_grad) say so below.

An "auto" option is decided by timing at the op's first large call, among variants that write
the same bits (autotune.cuh). Its thresholds come from the environment, read here in one place
(by cuda_ctx_init):
  LLMC_FLASH_TUNE_BLOCKS       flash launches of at least this many blocks are timed (256)
  LLMC_FLASH_TRIAL_SECONDS     a flash layout's first launch in an auto trial may take this long (60)
  LLMC_MATMUL_TUNE_FLOPS       products of at least this many flops are tuned (1e10)
  LLMC_CLASSIFIER_TUNE_ROWS    loss calls of at least this many rows are timed (4096)
  LLMC_LAYERNORM_TUNE_ROWS     LayerNorm backwards of at least this many rows are timed (4096)

Main functions: kernel_options_from_env (the defaults, with those thresholds).
Tests: test/gpucheck_ops.cu (each variant against the CPU op), test/test_gpu_train.sh (each
trainer choice bit-identical to the default). More: docs/kernels.md.
*/
#pragma once
#include <cstdlib>

// dbias's column sums (matmul.cuh): our warp kernel, a thread per column, or cuBLASLt's epilogue
// (its sums in another order, rounded to floatX before they are added: other bits).
enum class BiasGrad { Warps, Columns, Epilogue };
// FP8 products without cuBLASLt's periodic fp32 promotion (matmul.cuh: LtFp8): none, the
// forward's (Transformer Engine's recipe), or every one. Faster, less exact.
enum class Fp8FastAccum { None, Forward, All };

struct KernelOptions {
    // flash attention (flash_launch.cuh)
    bool flash = true;                 // false: the warp-per-row kernels
    bool flash_ldmatrix = true;        // false: per-lane shared-memory loads
    bool flash_async = true;           // false: tiles staged through registers (no cp.async)
    int flash_forward_rows = 16;       // query rows a warp in the forward: 16, or 32 (head size 64)
    int flash_dq_rows = 16;            // query rows a warp in the dQ pass: 16 or 32
    int flash_dkv_keys = 16;           // keys a warp in the dK/dV pass: 16 or 32
    bool flash_rows_auto = false;      // --flash-rows auto: time 16 and 32 per pass, keep the faster
    bool flash_wgmma = false;          // wgmma kernels on compute capability 9.0
    bool flash_wgmma_auto = false;     // --flash-wgmma auto: wgmma where faster and of the same bits
    bool flash_wgmma_overlap = true;   // false: wait for each wgmma at once (same bits; a check)
    int flash_wgmma_groups = 2;        // warpgroups a block: 1 or 2
    int flash_forward_producer = 0;    // 2 or 3: the wgmma forward with a producer warpgroup and that many slots (2 others)
    bool flash_forward_producer_auto = false;  // --flash-forward-producer auto: the wgmma forward's layouts of its bits timed once, the fastest kept
    bool flash_forward_pingpong = false;  // with a producer: its two computing warpgroups take turns to issue products
    int flash_forward_groups = 2;      // with a producer: its computing warpgroups, 2, or 3 at head size 64 (192 query rows a block; key tiles of 128 by TMA only)
    int flash_forward_keys = 64;       // the wgmma forward's key tiles: 64 or 128 (2 warpgroups; a producer: 2 slots)
    bool flash_forward_persistent = false;  // with a producer: a block an SM, each running several query blocks
    int flash_forward_blocks = 0;      // the persistent grid's blocks (0: one an SM; tests)
    bool flash_swizzle = false;        // the wgmma forward's K and V tiles 128-byte swizzled, copied a whole line per 8 threads
    bool flash_tma = false;            // with flash_swizzle and a producer: one thread copies each tile by TMA
    int flash_backward_passes = 3;     // bit 0: the dK/dV pass, bit 1: the dQ pass (timing one alone)
    bool flash_fused_backward = false; // one fused backward pass at head size 64 (dQ in another order)
    bool flash_fused_backward_128 = false;  // with it, the fused pass at head size 128 too
    int flash_fused_splits = 0;        // its key-block splits (0: flash_fused_splits chooses)
    int flash_fused_full = -1;         // heads of one block before the split ones (-1: the GPU's whole waves; tests)
    bool flash_dq_in_kernel = true;    // with one split, the fused pass writes dQ itself (false: the sum kernel does; same bits)
    bool flash_dq_last_split = false;  // with several, the last split done with a query tile sums its dQ (false: the sum kernel; same bits)
    bool flash_dq_chain = false;       // a block per key block, dQ added to one sum in a fixed order (other bits; head size 64 or 128)
    int flash_backward_producer = 0;   // 3 or 4: the fused backward with a producer warpgroup and that many query-tile slots
    bool flash_backward_tma = false;   // with flash_backward_producer: its tiles swizzled, one thread copies each by TMA
    bool flash_backward_producer_auto = false;  // --flash-backward-producer auto: the fused backward's layouts timed once, the fastest kept
    long flash_tune_blocks = 256;
    double flash_trial_seconds = 60;   // a layout's first launch in an auto trial that takes longer: a hang, the run ends
    // matmuls (matmul.cuh)
    bool matmul_tune = false;          // --matmul-tune: time cuBLASLt's candidates (same bits only)
    double matmul_tune_flops = 1e10;
    bool lt_epilogues = true;          // false: bias and GELU in our kernels after a plain product
    Fp8FastAccum fp8_fast_accum = Fp8FastAccum::None;  // FP8 products without fp32 promotion (Hopper)
    bool gelu_fusion = true;           // the GELU in the matmul's epilogue where cuBLASLt takes it
    BiasGrad bias_grad = BiasGrad::Warps;
    int matmul_wgmma = 0;              // --matmul-wgmma 1-6: the forward and dinp products by our GEMM on sm_90a (its layout; other bits)
    bool matmul_wgmma_auto = false;    // --matmul-wgmma auto: its layout chosen by timing for each product's shape (the same bits)
    bool matmul_wgmma_gelu_only = false;  // --matmul-wgmma-products gelu: our GEMM only where a GELU is in the epilogue
    int matmul_wgmma_blocks = 0;       // its blocks (0: one an SM; tests set a few, so that each runs several tiles)
    // the loss kernel (fused_classifier.cuh)
    int classifier_staged = 0;           // the row staged in shared memory where it fits: 0 no, 1 yes, 2 with the next row's copy in flight
    bool classifier_staged_auto = false; // --classifier-staged auto: the fastest of 0, 1, 2 (the same bits)
    int classifier_threads = 512;        // a row's block size (another size sums in another order)
    long classifier_tune_rows = 4096;
    bool classifier_stats_epilogue = false;  // --classifier-stats epilogue: the LM head's product by our GEMM gives the softmax's stats (other bits)
    // LayerNorm (layernorm.cuh)
    bool layernorm_packs = true;       // false: one element a load
    bool layernorm_fused = true;       // false: the backward as two kernels (same bits)
    bool layernorm_prefetch = false;   // the fused backward loads dinp in its first pass
    bool layernorm_prefetch_auto = false;  // --layernorm-prefetch auto: with and without, timed once, the faster kept (the same bits)
    long layernorm_tune_rows = 4096;
};

inline KernelOptions kernel_options_from_env() {
    KernelOptions o;
    auto env = [](const char* name, double dflt) {
        const char* e = getenv(name);
        return e && atof(e) > 0 ? atof(e) : dflt;
    };
    o.flash_tune_blocks = (long)env("LLMC_FLASH_TUNE_BLOCKS", 256);
    o.flash_trial_seconds = env("LLMC_FLASH_TRIAL_SECONDS", 60);
    o.matmul_tune_flops = env("LLMC_MATMUL_TUNE_FLOPS", 1e10);
    o.classifier_tune_rows = (long)env("LLMC_CLASSIFIER_TUNE_ROWS", 4096);
    o.layernorm_tune_rows = (long)env("LLMC_LAYERNORM_TUNE_ROWS", 4096);
    return o;
}
