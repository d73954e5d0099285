/*
train_gpt — trains a GPT-2 or Llama model. main reads top to bottom, one named phase a line:

  parse_run_config (every flag) → output_dir_claim → choose_model → validate_layout
  → open_run_data → the backend (threads, device, collectives, dtype) → run_training<floatX>:
      build_model, plan_micro_batch (does it fit? llmc/planner.h), load_weights, the summary;
      each step: train_step (forward and backward over the micro-batches, norm, clip, AdamW or
      a skipped update), log_step; once in a while run_evals, print_sample, save_checkpoint;
      on SIGTERM, SIGUSR1 or SIGINT (with --output-dir): a checkpoint, then exit

Gradient accumulation: total_batch_tokens / (B·T·dp) micro-batches a step, each backward scaled
by 1/(B·T·accum·dp), so the sum over dp is the mean loss's gradient.
The same source builds with g++ (the CPU backend) and nvcc. Every op is called through a Ctx
(llmc/common.h); this file never touches a backend.
With --steps 0 the model is only evaluated.

Run ./train_gpt --help for the flags. Tests: test/ (the README's table).
More: docs/training.md, docs/model.md.
*/
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "llmc/common.h"
#include "llmc/model.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/hellaswag.h"
#include "llmc/comm.h"
#include "llmc/data_parallel.h"
#include "llmc/pipeline.h"
#include "llmc/inference.h"
#include "llmc/checkpoint.h"
#include "llmc/outliers.h"
#include "llmc/loss_scale.h"
#include "llmc/schedulers.h"
#include "llmc/logger.h"
#include "llmc/mfu.h"
#include "llmc/profiler.h"
#include "llmc/planner.h"

// ----------------------------------------------------------------------------
// command line: one table gives every flag, its default and its help

struct FlagDef { const char* name; const char* def; const char* help; bool is_switch; };
static const FlagDef FLAGS[] = {
    {"device", "auto", "cpu | cuda (auto: cuda when a usable GPU exists, else cpu)", false},
    {"model", "d12", "d12-style depth (d1..d96), gpt2:124M|350M|774M|1558M, llama:d12-style depth, llama:1B|3B|8B, or a model file", false},
    {"vocab-size", "0", "a preset's vocabulary V, for token shards from another tokenizer (0: GPT-2's 50257; Llama 3's tokenizer: 128256), at most 2^20; its rows are padded to Vp, a multiple of 128. A model file has its own", false},
    {"train-data", "data/kjv_train_*.bin", "token shards to train on (glob)", false},
    {"val-data", "data/kjv_val_*.bin", "token shards for validation (glob; empty = none)", false},
    {"tokenizer", "data/gpt2_tokenizer.bin", "tokenizer file, for --prompt and samples: llm.c's GPT-2 file, or a tiktoken rank file such as Llama 3's original/tokenizer.model (llmc/tokenizer.h)", false},
    {"batch-size", "4", "micro-batch size B per rank; one whose activations cannot fit in the GPU's (or host's) memory is refused at start, naming one that does. auto (with --total-batch-tokens D): the largest B that fits, that the data holds, and that splits D into whole micro-batches (with --pp-schedule interleaved, a multiple of --pp of them; on --resume: the checkpoint's B)", false},
    {"seq-len", "1024", "sequence length T (at most the model's maxT)", false},
    {"total-batch-tokens", "-1", "tokens per optimizer step; grad accumulation = D/(B*T*dp) (-1: B*T*dp)", false},
    {"steps", "20", "optimizer steps to run (total, counting those before a resume; 0: only evaluate the model)", false},
    {"lr", "3e-4", "peak learning rate", false},
    {"warmup-steps", "0", "linear warmup steps", false},
    {"lr-schedule", "cosine", "cosine | linear | constant | wsd", false},
    {"final-lr-frac", "0.0", "final learning rate as a fraction of --lr", false},
    {"cooldown-frac", "0.2", "wsd: fraction of the steps spent decaying", false},
    {"weight-decay", "0.0", "AdamW weight decay (2-D weights only)", false},
    {"beta1", "0.9", "AdamW beta1", false},
    {"beta2", "0.95", "AdamW beta2", false},
    {"eps", "1e-8", "AdamW epsilon", false},
    {"grad-clip", "1.0", "clip the global gradient norm to this (0 = off)", false},
    {"skip-loss-z", "0", "skip the update of a step whose loss lies more than Z standard deviations above the mean of the last --skip-window steps' (llmc/outliers.h: a spike's gradients dropped, the step still counted) (0: never)", false},
    {"skip-norm-z", "0", "the same for the gradient norm (before clipping); a non-finite norm is skipped from the first step (0: never)", false},
    {"max-skipped-steps", "16", "stop the run (exit 1) when this many steps in a row had their update skipped by --skip-loss-z or --skip-norm-z: it has stopped learning (0: never)", false},
    {"skip-window", "128", "the steps of history --skip-loss-z and --skip-norm-z judge a step against (the window is kept in checkpoints)", false},
    {"seed", "1337", "seed for initialization, shuffling and sampling", false},
    {"shuffle", "0", "0 | 1: visit the training batches in a per-epoch random order", false},
    {"precision", "auto", "fp32 | bf16 | fp16 | fp8 (auto: bf16 on cuda, fp32 on cpu; bf16 and fp16 on the CPU emulate the GPU's rounding; fp16: with dynamic loss scaling, llmc/loss_scale.h; fp8: bf16 with the blocks' products in FP8, E4M3/E5M2 with per-tensor scales)", false},
    {"fp8-scaling", "current", "fp8: current (each tensor scaled from its own amax, an extra read of it) | delayed (from its amaxes of the last --fp8-amax-history steps, Transformer Engine's recipe: one pass, a tensor past its history saturates; the history is kept in checkpoints) (llmc/fp8.cuh)", false},
    {"fp8-amax-history", "16", "fp8 with --fp8-scaling delayed: the steps each scale looks back over", false},
    {"fp8-fast-accum", "none", "fp8 on a GPU: none | forward | all: which FP8 products skip cuBLASLt's periodic promotion of the tensor cores' accumulator to fp32 (faster, less exact). forward is Transformer Engine's recipe; the CPU and the emulator sum in fp32 either way", false},
    {"loss-scale", "65536", "fp16: the first loss scale S (a power of two): the loss gradient is multiplied by S and the weight gradients divided by it; a step whose gradients overflow is skipped and halves S", false},
    {"loss-scale-every", "2000", "fp16: S doubles after this many steps in a row without an overflow", false},
    {"recompute", "none", "activation checkpointing: none | selective (each block's backward reruns its LayerNorms and GELU: 10·C of its 16·C activations a position kept) | full (each block's backward reruns its forward: C of 16·C kept, +22% of the block's FLOPs); the same training, less memory (llmc/model.h)", false},
    {"zero", "0", "ZeRO stage: 0 (DDP) | 1 (optimizer) | 2 (+gradients) | 3 (+parameters) sharded over dp", false},
    {"tp", "1", "tensor-parallel degree: each block's attention heads and MLP features split over tp ranks (Megatron-style, llmc/tensor_parallel.h), and the vocabulary of the embedding and classifier (wte); must divide the heads and the padded vocabulary; dp = world/tp", false},
    {"sp", "0", "0 | 1: sequence parallelism (needs --tp > 1): the LayerNorms, the residual stream and their activations split over the tp ranks by position too (Megatron-SP: the tp all-reduces become reduce-scatters and all-gathers)", false},
    {"pp", "1", "pipeline-parallel degree: the blocks split into pp stages, one a rank, the step's micro-batches (--total-batch-tokens / (B*T*dp)) flowing through them (llmc/pipeline.h); at most the model's layers", false},
    {"pp-schedule", "1f1b", "gpipe (every forward, then every backward: m micro-batches' activations alive) | 1f1b (one forward, one backward: at most pp) | interleaved (1f1b over vpp chunks a stage, Megatron's order; needs --vpp >= 2 and m a multiple of pp); gpipe and 1f1b idle (pp-1)/(m+pp-1) of a step, interleaved (pp-1)/(vpp*m+pp-1)", false},
    {"vpp", "1", "chunks of blocks a pipeline stage holds with --pp-schedule interleaved (virtual stages; chunk k of stage s is virtual stage k*pp+s); pp*vpp at most the model's layers", false},
    {"cp", "1", "context-parallel degree: each sequence's positions split over cp ranks, attention over all of them by ring attention (llmc/context_parallel.h); gradients summed over dp x cp; --seq-len must divide (zigzag: by 2*cp); dp = world/(tp*pp*cp)", false},
    {"cp-layout", "contiguous", "contiguous (rank r: positions [r*T/cp, (r+1)*T/cp)) | zigzag (rank r: chunks r and 2cp-1-r of 2cp: the same causal attention work on every rank)", false},
    {"output-dir", "", "directory for checkpoints (empty: none); with it, SIGTERM, SIGUSR1 (Slurm: --signal=USR1@300) or SIGINT stop the run after the current step with a checkpoint, exit code 128 + the signal", false},
    {"checkpoint-every", "0", "write a checkpoint every N steps (and at the end) (0: only at the end)", false},
    {"keep-checkpoints", "0", "keep only the newest N checkpoints in --output-dir, deleting older ones (0: keep all)", false},
    {"resume", "0", "continue from the newest checkpoint in --output-dir", true},
    {"val-every", "0", "evaluate (--val-data, --hellaswag) every N steps (and at the end) (0: only at the end)", false},
    {"val-steps", "20", "validation micro-batches (of B×T per rank) per evaluation: val-steps·B·T·dp tokens (capped by the data)", false},
    {"val-tokens", "0", "tokens each evaluation reads instead: the first ⌊N/T⌋ sequences of --val-data, however B and dp split them, so runs with another B or dp (--batch-size auto, resharded resumes, other model sizes) report the same validation set (capped by the data; 0: --val-steps)", false},
    {"hellaswag", "", "multiple-choice eval file (llm.c's hellaswag_val.bin format; ./tokenize --hellaswag writes it): its accuracy at each evaluation, each ending scored by its mean token loss", false},
    {"sample-every", "0", "print a sample every N steps (and at the end) (0: never)", false},
    {"gen-tokens", "64", "tokens to generate per sample", false},
    {"prompt", "", "text the samples start from (after the tokenizer's document token: <|endoftext|>, Llama 3's <|begin_of_text|>)", false},
    {"temperature", "1.0", "sampling temperature (> 0)", false},
    {"top-k", "0", "sample from the k most likely tokens (0: all)", false},
    {"log-file", "", "write one JSON line per step here", false},
    {"save-model", "", "write the final model to this llm.c model file", false},
    {"save-precision", "fp32", "fp32 | bf16: dtype of --save-model", false},
    {"threads", "0", "CPU threads per rank (0: all cores, or OMP_NUM_THREADS)", false},
    {"comm", "auto", "auto | mpi | nccl: collectives on GPU buffers (auto: nccl when every rank has its own GPU)", false},
    {"comm-stats", "0", "print the bytes each collective sent per step (also in the JSON log)", true},
    {"comm-timeout", "1800", "seconds a rank may wait in one collective (or on the GPU's queue) before it ends the run, naming the collective, its group and the step: a rank that stopped answering must not idle the node all night (llmc/comm_timeout.h) (0: wait forever)", false},
    {"profile", "0", "0 | 1: time every op of the steps after the first (CUDA events on a GPU) and print, at the end, where a step's time goes: ms, % of the step, TFLOP/s, GB/s per op and per kind of communication", false},
    {"overlap", "1", "0 | 1: overlap each unit's gradient all-reduce (DDP) or reduce-scatter (ZeRO), ZeRO-1/2's parameter all-gathers and ZeRO-3's prefetch with compute (NCCL); 0 waits for each at once, to measure what overlap saves (same results)", false},
    {"flash-rows", "auto", "auto | 16 | 32: rows per warp in the 16-bit (bf16, fp16) flash attention kernels at head size 64 (queries in the forward and the dQ pass, keys in the dK/dV pass); 32 feeds each fragment read from shared memory to two tensor-core ops, at more registers per thread; the same results either way. auto: each pass times both at its first launch of a training step's size and keeps the faster (printed)", false},
    {"matmul-tune", "1", "0 | 1: on a GPU, each matmul of at least 1e10 flops (every layer's, at a real size) runs, at its first call, each algorithm cuBLASLt's heuristic offers for it, and keeps the fastest of those that wrote the same bits as the heuristic's first (by 2%: timing noise); so the results are those of 0, which takes the heuristic's first untimed (each decision printed)", false},
    {"matmul-wgmma", "0", "0 | 1 | 2 | 3 | 4 | 5 | 6 | auto: on a compute capability 9.0 GPU, every forward product and input-gradient product in bf16 or fp16 (with --precision fp8: those not in FP8) by our own GEMM (llmc/matmul_hopper.cuh: TMA, a producer warpgroup, wgmma, a block an SM; bias, GELU and its backward in the epilogue; the bias gradients from the tiles it reads anyway) instead of cuBLASLt's; the weight gradients stay cuBLASLt's. 1: both computing warpgroups on one tile of 128 x 256 at a time; 2: each its own tiles of 128 x 128, taking turns (ping-pong), so that one's epilogue runs under the other's products. 3: as 1, but the outputs go through shared memory and TMA stores (whole rows of 128 bytes, issued by one thread). 4, 5, 6: as 1, 2, 3, in clusters of 2 blocks on tiles one under the other, each copying half of the weights' slice for both (multicast): less read from L2. auto: for each product's shape, at its first large call, the fastest of 1 to 6 (printed), which write the same bits. Its sums run in another order, so its bits differ from 0's (within a rounding)", false},
    {"matmul-wgmma-products", "all", "all | gelu: with --matmul-wgmma 1 to 6 or auto, which products our GEMM makes. all: every forward and input-gradient product. gelu: only those with a GELU in the epilogue (the MLP's first product forward, its second's input gradient), where cuBLASLt's epilogue costs the most; cuBLASLt makes the others", false},
    {"classifier-staged", "auto", "auto | 0 | 1 | 2: on a GPU, whether the loss kernel (softmax, cross-entropy and dlogits in one pass over a row of logits) first copies its row into shared memory, reading device memory once instead of twice (where the row fits: GPT-2's 98 KB in bf16). 2: one block an SM walks its rows, copying in the next row while it computes this one (where two rows fit). auto: at its first call of 4096 rows or more it runs each way on a copy of 4096 rows, hashing what each wrote, and keeps the fastest of those that wrote the same bits (printed); the results are the same every way", false},
    {"classifier-stats", "kernel", "kernel | epilogue: on a GPU, where the softmax's max and sum of exponentials of each row of logits come from. kernel: the loss kernel reads the row for them, then again for the gradient. epilogue: the LM head's product runs on our own GEMM (llmc/matmul_hopper.cuh; a compute capability 9.0 GPU, bf16 or fp16; the layout of --matmul-wgmma, else the fastest of its six by timing at the first large call, printed: they write the same bits), whose epilogue also writes each row's max and sum for every 128 columns; the loss kernel then reads each row once. Its sums run in another order, so its bits differ from kernel's (within a rounding)", false},
    {"layernorm-prefetch", "auto", "auto | 0 | 1: on a GPU, whether the LayerNorm backward (where its sums fit in registers: widths up to 1024 in 16 bits, GPT-2 124M and 350M) loads the input gradient it adds to in its first pass, beside dout and x, so that each row waits for memory once instead of twice. auto: at its first call of 4096 rows or more it runs both ways on copies, hashing what each wrote, and keeps the faster of those that wrote the same bits (printed); the results are the same every way", false},
    {"bias-grad", "kernel", "kernel | epilogue: on a GPU, how a linear layer's bias gradient (the column sums of its output's gradient) is made. kernel: by our column-sum kernels, which read that gradient once more. epilogue: by cuBLASLt's bias-gradient epilogue on the weight-gradient product, which reads it anyway (where cuBLASLt has none for a shape, the kernels run). epilogue sums in another order and rounds the sums to the dtype before adding them to the gradient, so its bits differ from kernel's (within a rounding)", false},
    {"flash-backward", "fused", "fused | split | fused128 | chain: on a compute capability 9.0 GPU with the wgmma kernels (--flash-wgmma auto or 1) at head size 64, the attention backward as one fused pass that computes S and dP once (5 products; dQ summed in fp32 in a fixed order, deterministic) or as two passes (dQ, then dK and dV: 7 products). The two give the same dK and dV bits, and dQ within bf16 rounding of each other. fused128: the fused pass at head size 128 too (not yet timed on a GPU). chain: the fused pass with a block per key block, which add to one dQ sum in turn, at head size 64 and 128 (dQ's bits differ from fused; not yet timed on a GPU). Elsewhere ignored", false},
    {"flash-forward-producer", "0", "0 | 2 | 3 | auto: on a compute capability 9.0 GPU where the wgmma forward runs (--flash-wgmma 1, or auto where it keeps wgmma), the forward with a producer warpgroup: it copies the Q, K and V tiles in through rings of slots (mbarriers; 2 or 3 for K and V), and the two other warpgroups only compute (the same bits as 0); auto times the forward's layouts of these bits once (a producer or not, its slots, ping-pong, swizzled tiles, TMA, 3 computing warpgroups, a block an SM) and keeps the fastest; elsewhere ignored", false},
    {"flash-backward-producer", "0", "0 | 3 | 4 | auto: on a compute capability 9.0 GPU where the fused backward runs (--flash-backward fused, head size 64), the fused backward with a producer warpgroup: it copies every tile in through rings of slots (mbarriers; 3 or 4 query tiles), and the two other warpgroups only compute (the same bits as 0); auto times 0, 3 and 4, the producers by cp.async and by TMA, once, and keeps the fastest; elsewhere ignored", false},
    {"flash-forward-pingpong", "0", "0 | 1: with --flash-forward-producer 2 or 3, its two computing warpgroups take turns to issue their products (named barriers), so that one's softmax runs while the other's products run (the same bits as 0)", false},
    {"flash-forward-persistent", "0", "0 | 1: with --flash-forward-producer 2 or 3, a block an SM that runs several blocks of query rows in turn, its producer copying the next one's tiles while this one computes (the same bits as 0)", false},
    {"flash-forward-groups", "2", "2 | 3: with --flash-forward-producer 2 or 3, the forward's computing warpgroups a block: 3 puts 192 query rows in a block (12 computing warps an SM instead of 8, each K and V tile shared by more rows), at head size 64 with key tiles of 64 and without ping-pong (the same bits as 2)", false},
    {"flash-forward-keys", "64", "64 | 128: the wgmma forward's key tiles (with --flash-forward-producer 0 or 2): 128 halves its softmax steps but gives other bits than 64 (so use it with --flash-wgmma 1: auto keeps the forward whose bits equal mma.sync's)", false},
    {"flash-wgmma", "auto", "auto | 0 | 1: on a compute capability 9.0 GPU (H100, H200), whether the 16-bit (bf16, fp16) flash attention kernels issue warpgroup MMA (wgmma, 64 rows per warpgroup, two warpgroups a block) instead of mma.sync; elsewhere ignored. auto: each pass runs both ways at its first launches of a training step's size (its bits hashed) and keeps wgmma where it was faster and wrote the same bits every time (printed)", false},
};

static void print_help() {
    printf("usage: train_gpt [--flag value]...\n\nTrains GPT-2 on token shards. Flags (default in brackets):\n");
    for (const FlagDef& f : FLAGS)
        printf("  --%-20s %s%s%s%s\n", f.name, f.help, f.is_switch ? "" : " [", f.is_switch ? "" : f.def, f.is_switch ? "" : "]");
    printf("  --%-20s %s\n", "help", "show this message");
}

struct Flags {
    std::map<std::string, std::string> v;  // every flag's value: the default where not given
    std::set<std::string> named;           // the flags the command line gave
    bool given(const char* name) const { return named.count(name) > 0; }
    const std::string& str(const char* name) const { return v.at(name); }
    // word (if given): a value the flag also takes instead of a number, e.g. "auto"; it reads as 0
    long long integer(const char* name, long long lo, long long hi, const char* word = nullptr) const {
        const std::string& s = v.at(name); char* end;
        if (word && s == word) return 0;
        long long x = strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end || x < lo || x > hi)
            usage_error("--%s: expected an integer in [%lld, %lld]%s%s%s, got '%s'", name, lo, hi, word ? " or '" : "",
                        word ? word : "", word ? "'" : "", s.c_str());
        return x;
    }
    float real(const char* name, double lo, double hi) const {
        const std::string& s = v.at(name); char* end;
        double x = strtod(s.c_str(), &end);
        if (s.empty() || *end || !(x >= lo && x <= hi)) usage_error("--%s: expected a number in [%g, %g], got '%s'", name, lo, hi, s.c_str());
        return (float)x;
    }
    const std::string& choice(const char* name, std::initializer_list<const char*> options) const {
        const std::string& s = v.at(name);
        std::string all;
        for (const char* o : options) { if (s == o) return s; all += all.empty() ? "" : " | "; all += o; }
        usage_error("--%s: expected one of %s, got '%s'", name, all.c_str(), s.c_str());
    }
};

// Every rank runs the same command: the same flags and the same build of the trainer. A rank
// with other flags, or a node with an older build, would train something else or wait forever
// in a collective. Instead the run stops at once and names the first rank that differs.
// The build is LLMC_BUILD_ID, the CRC of the sources and flags (the Makefile's build_id); the
// environment variable LLMC_BUILD_ID stands for it in tests.
#ifndef LLMC_BUILD_ID
#define LLMC_BUILD_ID 0  // (built without the Makefile: not compared)
#endif
static void refuse_other_commands(Group& world, int argc, char** argv) {
    if (world.size == 1) return;
    uint32_t line = 0;  // (each flag with its '\0': "a b" is not "ab")
    for (int i = 1; i < argc; i++) line = crc32c(line, argv[i], strlen(argv[i]) + 1);
    const char* id = getenv("LLMC_BUILD_ID");
    const double flags = line, build = id ? atof(id) : (double)LLMC_BUILD_ID;
    const int r = comm_first_differing(world, &flags, 1);
    if (r >= 0) usage_error("rank %d was started with other flags than rank 0: every rank must run the same command line", r);
    const int b = comm_first_differing(world, &build, 1);
    if (b >= 0)
        usage_error("rank %d runs another build of the trainer than rank 0 (other sources or build flags): every node "
                    "needs the same build", b);
}

static Flags parse_flags(int argc, char** argv) {
    Flags f;
    for (const FlagDef& d : FLAGS) f.v[d.name] = d.def;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") { if (g_rank == 0) print_help(); if (g_leave_collectively) g_leave_collectively(); exit(0); }
        if (a.rfind("--", 0) != 0) usage_error("unexpected argument '%s' (flags start with --; see --help)", a.c_str());
        std::string name = a.substr(2), value;
        size_t eq = name.find('=');
        bool has_value = eq != std::string::npos;
        if (has_value) { value = name.substr(eq + 1); name = name.substr(0, eq); }
        const FlagDef* def = nullptr;
        for (const FlagDef& d : FLAGS) if (name == d.name) def = &d;
        if (!def) usage_error("unknown flag '--%s' (see --help)", name.c_str());
        if (def->is_switch && !has_value) value = "1";
        else if (!has_value) {
            if (i + 1 >= argc) usage_error("--%s needs a value (see --help)", name.c_str());
            value = argv[++i];
        }
        f.v[name] = value;
        f.named.insert(name);
    }
    return f;
}

// The op context for --device: the CPU, or this rank's GPU (node-local rank mod GPU count) with
// its stream, cuBLASLt handle and workspace. "auto" picks the GPU when there is a usable one, and
// says why it runs on the CPU where there is a GPU this build cannot use (common.h:
// cuda_unusable_reason); "cuda" refuses such a GPU with that reason.
static Ctx make_ctx(const std::string& device, const Mesh& mesh) {
    Ctx ctx;
#ifdef LLMC_CUDA
    if (device == "cpu") return ctx;
    bool present = false;
    const std::string why = cuda_unusable_reason(mesh.local_rank, &present);
    if (!why.empty()) {
        if (device == "cuda") usage_error("--device cuda: %s (or run with --device cpu)", why.c_str());
        if (present && g_rank == 0) fprintf(stderr, "note: --device auto: running on the CPU: %s\n", why.c_str());
        return ctx;
    }
    cuda_ctx_init(&ctx, mesh.local_rank % cuda_device_count());
#else
    (void)mesh;
    if (device == "cuda") usage_error("--device cuda: this build has no CUDA backend (nvcc was not found at build time); use --device cpu");
#endif
    return ctx;
}

// --model: a preset name or a model file (only its header is read here); --vocab-size V (> 0)
// gives a preset V rows of wte (padded to a multiple of 128), and must match a model file's.
static GPTConfig model_config_from_spec(const std::string& spec, int vocab, bool* is_file) {
    GPTConfig c;
    *is_file = !gpt_preset(spec, &c);
    if (*is_file) {
        FILE* probe = fopen(spec.c_str(), "rb");
        if (!probe) usage_error("--model: '%s' is neither a preset (d12, gpt2:124M, llama:d12, llama:1B, ...) nor a readable model file", spec.c_str());
        fclose(probe);
        c = model_file_config(spec.c_str());
        if (vocab > 0 && vocab != c.vocab_size)
            usage_error("--vocab-size %d: the model file '%s' has a vocabulary of %d (--vocab-size is for presets)", vocab,
                        spec.c_str(), c.vocab_size);
    } else if (vocab > 0) {
        c.vocab_size = vocab;
        c.padded_vocab_size = (int)ceil_div((size_t)vocab, (size_t)128) * 128;
    }
    return c;
}

// ----------------------------------------------------------------------------
// evaluation and sampling

// Mean loss over the first `seqs` sequences of the validation data (dataloader.h), in rounds of
// B·dp: rank r takes the round's sequences r·B … r·B+B−1, the last round's as far as they go, and
// pads its micro-batch to B (every rank runs every forward: ZeRO-3 gathers parameters in each).
// Each sequence's loss sum lands in its own slot, and the slots are added in sequence order, so
// the result does not depend on how B and dp cut the sequences: on the CPU, where a position's
// loss does not depend on its batch, it is the same bits for every B and dp.
template <class floatX>
static float evaluate(const Ctx& ctx, GPT<floatX>* g, DataLoader* val, long long seqs, int B, std::vector<int>& x,
                      std::vector<int>& y, Group& dp) {
    const int Tn = val->T;
    std::vector<double> seq_loss(seqs, 0.0);
    std::vector<float> pp_losses;
    for (long long round = 0; round * B * dp.size < seqs; round++) {
        const long long first = (round * dp.size + dp.rank) * B;
        const int n = (int)std::max(0LL, std::min<long long>(B, seqs - first));
        std::fill(x.begin(), x.end(), 0);
        std::fill(y.begin(), y.end(), 0);
        if (n > 0) dataloader_sequences(val, first, n, x.data(), y.data());
        gpt_infer(ctx, g, x.data(), y.data(), B, Tn);  // (through the pipeline's stages, if any)
        const float* losses = gpt_infer_losses(g, B, Tn, &pp_losses);
        for (int j = 0; j < n; j++)
            for (int t = 0; t < Tn; t++) seq_loss[first + j] += losses[(size_t)j * Tn + t];
    }
    comm_sum_doubles(dp, seq_loss.data(), seqs);  // each slot is one rank's value plus zeros: exact
    double sum = 0.0;
    for (long long q = 0; q < seqs; q++) sum += seq_loss[q];
    return (float)(sum / ((double)seqs * Tn));
}

// {"all_reduce": bytes, ...} of the gradients' group's counters (dp, or dp × cp; the ops it used
// this step), the tp group's prefixed "tp_" (tensor_parallel.h's sums and gathers), the pp
// group's "pp_" (pipeline.h's sends between stages), the tied embeddings' "emb_" (their
// gradients' sum between the first and last stage) and the cp group's "cp_" (context_parallel.h's ring).
static std::string comm_stats_json(const Mesh& m) {
    std::string s = "{";
    const std::pair<const Group*, const char*> groups[] = {{&m.grads(), ""}, {&m.tp_group, "tp_"}, {&m.pp_group, "pp_"},
                                                           {&m.emb_group, "emb_"}, {&m.cp_group, "cp_"}};
    for (const auto& [g, prefix] : groups)
        for (int op = 0; op < NUM_COMM_OPS; op++) {
            if (!g->calls[op]) continue;
            char buf[96];
            snprintf(buf, sizeof(buf), "%s\"%s%s\": %.0f", s.size() > 1 ? ", " : "", prefix, COMM_OP_NAMES[op], g->bytes[op]);
            s += buf;
        }
    return s + "}";
}

// Samples one token from the logits of the last position: softmax(logits/temperature) over the
// top_k most likely tokens (all if top_k = 0).
static int sample_token(const float* logits, int V, float temperature, int top_k, Rng* rng) {
    std::vector<std::pair<float, int>> cand(V);
    for (int v = 0; v < V; v++) cand[v] = {logits[v] / temperature, v};
    if (top_k > 0 && top_k < V) {
        std::partial_sort(cand.begin(), cand.begin() + top_k, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
        cand.resize(top_k);
    }
    float m = -INFINITY;
    for (auto& c : cand) m = std::max(m, c.first);
    double sum = 0.0;
    for (auto& c : cand) sum += exp((double)(c.first - m));
    double r = rng->uniform() * sum, acc = 0.0;
    for (auto& c : cand) { acc += exp((double)(c.first - m)); if (r < acc) return c.second; }
    return cand.back().second;
}

template <class floatX>
static std::string generate(const Ctx& ctx, GPT<floatX>* g, Tokenizer* tk, const std::string& prompt, int n, int T,
                            float temperature, int top_k, Rng* rng) {
    std::vector<int> toks = {tk->doc_token};  // a document's start
    tokenizer_encode(*tk, prompt, &toks);
    size_t start = toks.size();
    std::vector<float> logits(g->config.padded_vocab_size);
    for (int i = 0; i < n; i++) {
        int len = std::min((int)toks.size(), T);
        const int* ctx_toks = toks.data() + toks.size() - len;
        gpt_infer(ctx, g, ctx_toks, nullptr, 1, len);  // (through the pipeline's stages, if any)
        gpt_infer_logits_row(ctx, g, len - 1, logits.data());
        toks.push_back(sample_token(logits.data(), g->config.vocab_size, temperature, top_k, rng));
    }
    return prompt + tokenizer_decode(*tk, toks.data() + start, toks.size() - start);
}

// ----------------------------------------------------------------------------
// the run's settings: every flag, read and checked on its own (one plain struct)

struct RunConfig {
    std::string device, precision, comm, model_spec, train_data, val_data, tokenizer, hellaswag, prompt;
    std::string out_dir, log_file, save_model;
    int vocab = 0;             // --vocab-size (0: the preset's or the file's)
    int B = 0;                 // micro-batch size (0: --batch-size auto, picked after the model state)
    int T = 0;                 // sequence length
    long long total_batch = -1;  // tokens a step (-1: B·T·dp)
    int steps = 0;
    LRSchedule sched;
    float wd = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
    double skip_loss_z = 0, skip_norm_z = 0;
    int max_skipped = 0, skip_window = 0;
    uint64_t seed = 0;
    bool shuffle = false;
    Recompute recompute = Recompute::None;
    int zero = 0, tp = 1, sp = 0, pp = 1, vpp = 1, cp = 1;
    PPSchedule pp_schedule = PPSchedule::OneFOneB;
    bool cp_zigzag = false;
    int ckpt_every = 0, ckpt_keep = 0;
    bool resume = false;
    int val_every = 0, val_steps = 0;
    long long val_tokens = 0;
    int sample_every = 0, gen_tokens = 0, top_k = 0;
    float temperature = 1;
    bool save_bf16 = false;
    int threads = 0;
    double loss_scale0 = 0;
    long long loss_scale_every = 0;
    bool fp8_delayed = false;
    std::string fp8_fast_accum;  // (a kernel choice: GPU only)
    int fp8_history = 0;
    bool comm_stats = false, overlap = true, profile = false;
    double comm_timeout = 1800;
    std::string flash_rows, flash_wgmma, flash_backward, flash_forward_producer, flash_backward_producer, classifier_staged, bias_grad, layernorm_prefetch;  // kernel choices (GPU only)
    bool flash_forward_pingpong = false, flash_forward_persistent = false;
    int flash_forward_keys = 64;
    int flash_forward_groups = 2;
    bool matmul_tune = true;
    int matmul_wgmma = 0;
    bool matmul_wgmma_gelu_only = false, matmul_wgmma_auto = false, classifier_stats_epilogue = false;
    bool auto_batch() const { return B == 0; }
    bool total_given() const { return total_batch != -1; }
};

// A flag whose three values name an enum's three members, in order.
template <class E, size_t N>
static E flag_enum(const Flags& f, const char* name, const char* const (&names)[N]) {
    static_assert(N == 3, "three names");
    const std::string& s = f.choice(name, {names[0], names[1], names[2]});
    return (E)(std::find(names, names + N, s) - names);
}

// The optimizer's, the schedule's and the outlier checks' flags.
static void parse_optimizer_flags(const Flags& f, RunConfig* rc) {
    rc->sched.lr = f.real("lr", 0, 10);
    rc->sched.warmup = (int)f.integer("warmup-steps", 0, 1 << 30);
    rc->sched.kind = f.choice("lr-schedule", {"cosine", "linear", "constant", "wsd"});
    rc->sched.final_lr_frac = f.real("final-lr-frac", 0, 1);
    rc->sched.cooldown_frac = f.real("cooldown-frac", 1e-6, 1);
    rc->sched.total = rc->steps;
    if (rc->steps > 0 && rc->sched.warmup > rc->steps)
        print0("note: --warmup-steps %d is more than --steps %d: the learning rate reaches only %.3g%% of --lr\n", rc->sched.warmup,
               rc->steps, 100.0 * rc->steps / rc->sched.warmup);
    rc->wd = f.real("weight-decay", 0, 10), rc->beta1 = f.real("beta1", 0, 0.999999), rc->beta2 = f.real("beta2", 0, 0.999999);
    rc->eps = f.real("eps", 0, 1), rc->grad_clip = f.real("grad-clip", 0, 1e30);
    rc->skip_loss_z = f.real("skip-loss-z", 0, 1e6), rc->skip_norm_z = f.real("skip-norm-z", 0, 1e6);
    rc->max_skipped = (int)f.integer("max-skipped-steps", 0, 1 << 30);
    if (rc->eps <= 0)
        usage_error("--eps %g: must be above 0 (AdamW divides by sqrt(v) + eps: a parameter whose gradient is 0 would get 0/0)", rc->eps);
    rc->skip_window = (int)f.integer("skip-window", 2, 1 << 20);
}

// --precision and the flags of fp16's loss scaling and fp8's scaling, which need their precision.
static void parse_precision_flags(const Flags& f, RunConfig* rc) {
    rc->precision = f.choice("precision", {"auto", "fp32", "bf16", "fp16", "fp8"});
    int ignored_exp;
    rc->loss_scale0 = f.real("loss-scale", 1, 1e30);
    if (std::frexp(rc->loss_scale0, &ignored_exp) != 0.5)
        usage_error("--loss-scale %g: must be a power of two (the scaling then rounds nothing)", rc->loss_scale0);
    rc->loss_scale_every = f.integer("loss-scale-every", 1, 1LL << 40);
    if (rc->precision != "fp16" && (f.given("loss-scale") || f.given("loss-scale-every")))
        usage_error("--loss-scale and --loss-scale-every are for --precision fp16 (got --precision %s, which needs no loss scaling)",
                    rc->precision.c_str());
    rc->fp8_delayed = f.choice("fp8-scaling", {"current", "delayed"}) == "delayed";
    rc->fp8_history = (int)f.integer("fp8-amax-history", 1, 1 << 16);
    if (rc->precision != "fp8" && (f.given("fp8-scaling") || f.given("fp8-amax-history")))
        usage_error("--fp8-scaling and --fp8-amax-history are for --precision fp8 (got --precision %s)", rc->precision.c_str());
    if (!rc->fp8_delayed && f.given("fp8-amax-history"))
        usage_error("--fp8-amax-history: needs --fp8-scaling delayed (current scaling keeps no history)");
    rc->fp8_fast_accum = f.choice("fp8-fast-accum", {"none", "forward", "all"});
    if (rc->precision != "fp8" && f.given("fp8-fast-accum"))
        usage_error("--fp8-fast-accum is for --precision fp8 (got --precision %s)", rc->precision.c_str());
}

// A flag that does nothing without another is refused. Else the run would go on without what it
// asked for (a checkpoint every N steps, a sample), and nobody would know until it was needed.
static void refuse_idle_flags(const Flags& f, const RunConfig& rc) {
    if ((rc.ckpt_every > 0 || rc.ckpt_keep > 0) && rc.out_dir.empty())
        usage_error("--checkpoint-every and --keep-checkpoints need --output-dir (where the checkpoints go)");
    if (!rc.prompt.empty() && rc.sample_every == 0) usage_error("--prompt needs --sample-every N: the samples start from it");
    if (rc.cp_zigzag && rc.cp == 1) usage_error("--cp-layout zigzag needs --cp > 1: it splits each sequence over the cp ranks");
    if (rc.sched.kind != "wsd" && f.given("cooldown-frac"))
        usage_error("--cooldown-frac is for --lr-schedule wsd (got --lr-schedule %s)", rc.sched.kind.c_str());
    if (rc.skip_loss_z == 0 && rc.skip_norm_z == 0 && (f.given("skip-window") || f.given("max-skipped-steps")))
        usage_error("--skip-window and --max-skipped-steps are for --skip-loss-z or --skip-norm-z (without them no update is skipped)");
}

// Every flag's value checked before anything large is allocated. The rules that tie flags to
// the model and the mesh are validate_layout's.
static RunConfig parse_run_config(const Flags& f) {
    RunConfig rc;
    rc.device = f.choice("device", {"auto", "cpu", "cuda"});
    rc.B = (int)f.integer("batch-size", 1, 1 << 20, "auto");
    rc.T = (int)f.integer("seq-len", 1, 1 << 20);
    rc.total_batch = f.integer("total-batch-tokens", -1, 1LL << 40);
    rc.steps = (int)f.integer("steps", 0, 1 << 30);
    parse_optimizer_flags(f, &rc);
    rc.seed = (uint64_t)f.integer("seed", 0, (1LL << 62));
    rc.shuffle = f.integer("shuffle", 0, 1);
    rc.recompute = flag_enum<Recompute>(f, "recompute", RECOMPUTE_NAMES);
    rc.zero = (int)f.integer("zero", 0, 3), rc.tp = (int)f.integer("tp", 1, 1 << 16), rc.sp = (int)f.integer("sp", 0, 1);
    rc.pp = (int)f.integer("pp", 1, 1 << 16), rc.vpp = (int)f.integer("vpp", 1, 1 << 16), rc.cp = (int)f.integer("cp", 1, 1 << 16);
    rc.pp_schedule = flag_enum<PPSchedule>(f, "pp-schedule", PP_SCHEDULE_NAMES);
    rc.cp_zigzag = f.choice("cp-layout", {"contiguous", "zigzag"}) == "zigzag";
    rc.out_dir = f.str("output-dir");
    rc.ckpt_every = (int)f.integer("checkpoint-every", 0, 1 << 30);
    rc.ckpt_keep = (int)f.integer("keep-checkpoints", 0, 1 << 30);
    rc.resume = f.integer("resume", 0, 1);
    rc.val_every = (int)f.integer("val-every", 0, 1 << 30), rc.val_steps = (int)f.integer("val-steps", 0, 1 << 30);
    rc.val_tokens = f.integer("val-tokens", 0, 1LL << 50);
    rc.sample_every = (int)f.integer("sample-every", 0, 1 << 30), rc.gen_tokens = (int)f.integer("gen-tokens", 0, 1 << 20);
    rc.temperature = f.real("temperature", 1e-6, 1e6);
    rc.top_k = (int)f.integer("top-k", 0, 1 << 30);
    rc.save_bf16 = f.choice("save-precision", {"fp32", "bf16"}) == "bf16";
    rc.threads = (int)f.integer("threads", 0, 4096);
    parse_precision_flags(f, &rc);
    rc.comm_stats = f.integer("comm-stats", 0, 1);
    rc.comm_timeout = f.real("comm-timeout", 0, 1e9);
    rc.overlap = f.integer("overlap", 0, 1);
    rc.profile = f.integer("profile", 0, 1);
    rc.flash_rows = f.choice("flash-rows", {"auto", "16", "32"});
    rc.flash_wgmma = f.choice("flash-wgmma", {"auto", "0", "1"});
    rc.flash_backward = f.choice("flash-backward", {"fused", "split", "fused128", "chain"});
    rc.flash_forward_producer = f.choice("flash-forward-producer", {"0", "2", "3", "auto"});
    rc.flash_backward_producer = f.choice("flash-backward-producer", {"0", "3", "4", "auto"});
    if (rc.flash_backward_producer != "0" && rc.flash_backward == "split")
        usage_error("--flash-backward-producer %s needs --flash-backward fused (the producer is the fused pass's)", rc.flash_backward_producer.c_str());
    rc.flash_forward_pingpong = f.integer("flash-forward-pingpong", 0, 1);
    const bool forward_auto = rc.flash_forward_producer == "auto";
    if (forward_auto && rc.flash_forward_pingpong)
        usage_error("--flash-forward-pingpong 1 with --flash-forward-producer auto: auto times the forward with and without ping-pong itself; drop one");
    if (rc.flash_forward_pingpong && rc.flash_forward_producer == "0")
        usage_error("--flash-forward-pingpong 1 needs --flash-forward-producer 2 or 3 (the turns are the producer forward's)");
    rc.flash_forward_persistent = f.integer("flash-forward-persistent", 0, 1);
    if (forward_auto && rc.flash_forward_persistent)
        usage_error("--flash-forward-persistent 1 with --flash-forward-producer auto: auto times the persistent forward itself; drop one");
    if (rc.flash_forward_persistent && rc.flash_forward_producer == "0")
        usage_error("--flash-forward-persistent 1 needs --flash-forward-producer 2 or 3 (the persistent blocks are the producer forward's)");
    rc.flash_forward_keys = std::stoi(f.choice("flash-forward-keys", {"64", "128"}));
    if (rc.flash_forward_keys == 128 && rc.flash_forward_producer == "3")
        usage_error("--flash-forward-keys 128 needs --flash-forward-producer 0 or 2 (3 slots of 128 keys are not built)");
    rc.flash_forward_groups = std::stoi(f.choice("flash-forward-groups", {"2", "3"}));
    if (forward_auto && rc.flash_forward_groups == 3)
        usage_error("--flash-forward-groups 3 with --flash-forward-producer auto: auto times 3 computing warpgroups itself; drop one");
    if (rc.flash_forward_groups == 3 && (rc.flash_forward_producer == "0" || rc.flash_forward_pingpong || rc.flash_forward_keys == 128))
        usage_error("--flash-forward-groups 3 needs --flash-forward-producer 2 or 3, key tiles of 64 and no ping-pong");
    rc.matmul_tune = f.integer("matmul-tune", 0, 1);
    const std::string wgmma_gemm = f.choice("matmul-wgmma", {"0", "1", "2", "3", "4", "5", "6", "auto"});
    rc.matmul_wgmma_auto = wgmma_gemm == "auto";
    rc.matmul_wgmma = rc.matmul_wgmma_auto ? 1 : std::stoi(wgmma_gemm);
    rc.matmul_wgmma_gelu_only = f.choice("matmul-wgmma-products", {"all", "gelu"}) == "gelu";
    if (rc.matmul_wgmma_gelu_only && !rc.matmul_wgmma) usage_error("--matmul-wgmma-products gelu needs --matmul-wgmma 1 to 6 or auto");
    rc.classifier_staged = f.choice("classifier-staged", {"auto", "0", "1", "2"});
    rc.classifier_stats_epilogue = f.choice("classifier-stats", {"kernel", "epilogue"}) == "epilogue";
    rc.bias_grad = f.choice("bias-grad", {"kernel", "epilogue"});
    rc.layernorm_prefetch = f.choice("layernorm-prefetch", {"auto", "0", "1"});
    if (rc.resume && rc.out_dir.empty()) usage_error("--resume needs --output-dir (where the checkpoints are)");
    rc.model_spec = f.str("model"), rc.vocab = (int)f.integer("vocab-size", 0, 1 << 20);
    rc.train_data = f.str("train-data"), rc.val_data = f.str("val-data"), rc.hellaswag = f.str("hellaswag");
    rc.tokenizer = f.str("tokenizer"), rc.prompt = f.str("prompt");
    rc.log_file = f.str("log-file"), rc.save_model = f.str("save-model"), rc.comm = f.choice("comm", {"auto", "mpi", "nccl"});
    refuse_idle_flags(f, rc);
    return rc;
}

// ----------------------------------------------------------------------------
// the model to train, and the rules that tie the flags to it and to the mesh

struct ModelSource {
    GPTConfig config;
    bool from_file = false;   // --model is a model file, whose weights are loaded
    std::string resume_dir;   // --resume: the checkpoint the run continues (its model's shape wins)
};

// --model (a preset or a model file), or on --resume the checkpoint's model, which must have
// the shape --model names.
static ModelSource choose_model(const RunConfig& rc) {
    ModelSource m;
    m.config = model_config_from_spec(rc.model_spec, rc.vocab, &m.from_file);
    if (!rc.resume) return m;
    m.resume_dir = checkpoint_latest(rc.out_dir);
    if (m.resume_dir.empty()) fatal("--resume: no checkpoint (step_*/) in '%s'", rc.out_dir.c_str());
    const GPTConfig saved = model_file_config((m.resume_dir + "/model.bin").c_str()), &c = m.config;
    if (!gpt_same_shape(saved, c)) {
        bool file = false;  // (a preset that differs only in V: name the flag that fixes it)
        char hint[64] = "";
        if (!m.from_file && saved.vocab_size != c.vocab_size &&
            gpt_same_shape(saved, model_config_from_spec(rc.model_spec, saved.vocab_size, &file)))
            snprintf(hint, sizeof hint, " (resume with --vocab-size %d)", saved.vocab_size);
        usage_error("--resume: the checkpoint in '%s' holds a %s L=%d C=%d V=%d model, but --model %s is %s L=%d C=%d V=%d%s",
                    m.resume_dir.c_str(), saved.llama() ? "llama" : "gpt2", saved.num_layers, saved.channels, saved.vocab_size,
                    rc.model_spec.c_str(), c.llama() ? "llama" : "gpt2", c.num_layers, c.channels, c.vocab_size, hint);
    }
    m.from_file = false;
    return m;
}

// The parallel layout: how tp, sp, pp, vpp and cp fit each other, the model and the sequence.
static void validate_parallel_layout(const RunConfig& rc, const GPTConfig& c) {
    const int tp = rc.tp, pp = rc.pp, vpp = rc.vpp, cp = rc.cp, T = rc.T;
    if (rc.sp == 1 && tp == 1) usage_error("--sp 1: sequence parallelism splits the positions over the tensor-parallel ranks; it needs --tp > 1");
    if (vpp > 1 && (pp == 1 || rc.pp_schedule != PPSchedule::Interleaved))
        usage_error("--vpp %d: chunks of blocks are for the interleaved pipeline schedule; add --pp N (N > 1) --pp-schedule interleaved", vpp);
    if (pp > 1 && rc.pp_schedule == PPSchedule::Interleaved && vpp == 1)
        usage_error("--pp-schedule interleaved: needs --vpp >= 2 chunks a stage (with one it is 1f1b)");
    if (c.num_heads % tp != 0)
        usage_error("--tp %d: must divide the model's %d attention heads (each tp rank computes NH/tp of them)", tp, c.num_heads);
    if (c.kv_heads() % tp != 0)
        usage_error("--tp %d: must divide the model's %d key/value heads (each tp rank holds NKV/tp of them, whole groups)", tp,
                    c.kv_heads());
    if (c.ffn() % tp != 0)
        usage_error("--tp %d: must divide the model's %d MLP hidden features (each tp rank computes H/tp of them)", tp, c.ffn());
    if (c.padded_vocab_size % tp != 0)
        usage_error("--tp %d: must divide the model's padded vocabulary %d (each tp rank computes Vp/tp of the logits)", tp,
                    c.padded_vocab_size);
    if (T > c.max_seq_len) usage_error("--seq-len %d exceeds the model's maximum sequence length %d", T, c.max_seq_len);
    if (T % cp_granule(cp, rc.cp_zigzag) != 0)
        usage_error("--cp %d --cp-layout %s: --seq-len %d must be a multiple of %d (each cp rank holds %s)", cp,
                    rc.cp_zigzag ? "zigzag" : "contiguous", T, cp_granule(cp, rc.cp_zigzag),
                    rc.cp_zigzag ? "two of the sequence's 2*cp equal chunks" : "seq-len/cp consecutive positions");
    if (pp > c.num_layers) usage_error("--pp %d: more stages than the model's %d blocks (each stage holds at least one)", pp, c.num_layers);
    if (pp > 1 && pp * vpp > c.num_layers)
        usage_error("--pp %d --vpp %d: %d virtual stages, more than the model's %d blocks (each chunk holds at least one)", pp, vpp,
                    pp * vpp, c.num_layers);
}

// Every rule that ties the flags to the model and the mesh: the parallel layout, then the step's
// tokens against the micro-batches that split it.
static void validate_layout(const RunConfig& rc, const GPTConfig& c, const Mesh& mesh) {
    validate_parallel_layout(rc, c);
    const long long T = rc.T, dp = mesh.dp, total = rc.total_batch;
    if (rc.auto_batch() && !rc.total_given())
        usage_error("--batch-size auto: needs --total-batch-tokens (the step's tokens, which auto splits into the largest "
                    "micro-batches that fit)");
    if (rc.auto_batch() && total > 0 && total % (T * dp) != 0)
        usage_error("--batch-size auto: --total-batch-tokens %lld is not a multiple of seq-len*dp = %lld", total, T * dp);
    if (rc.auto_batch() && rc.pp > 1 && rc.pp_schedule == PPSchedule::Interleaved && total > 0 && total % (T * dp * rc.pp) != 0)
        usage_error("--batch-size auto --pp-schedule interleaved: --total-batch-tokens %lld is not a multiple of seq-len*dp*pp = %lld "
                    "(the step's micro-batches must be a multiple of --pp %d, whatever the batch size)", total, T * dp * rc.pp, rc.pp);
    const bool has_val = !rc.val_data.empty() && (rc.val_tokens > 0 || rc.val_steps > 0);
    if (has_val && rc.val_tokens > 0 && rc.val_tokens < rc.T)
        usage_error("--val-tokens %lld: fewer than one sequence of --seq-len %d", rc.val_tokens, rc.T);
}

// ----------------------------------------------------------------------------
// the step's shape, and the data cut into it

// A step: accum micro-batches of B sequences of T on each of dp ranks; each rank runs Tl = T/cp
// positions of each sequence (context_parallel.h).
struct StepShape {
    int B = 0, T = 0, Tl = 0, dp = 1, accum = 0;
    long long total = 0;  // tokens a step: accum·B·T·dp
};

// The first shape: --batch-size (on --resume with auto: the checkpoint's B; else auto's 0 until
// plan_micro_batch picks it).
static StepShape first_shape(const RunConfig& rc, const ModelSource& src, const Mesh& mesh) {
    StepShape s;
    s.B = rc.B, s.T = rc.T, s.Tl = rc.T / rc.cp, s.dp = mesh.dp, s.total = rc.total_batch;
    if (rc.auto_batch() && rc.resume) s.B = (int)checkpoint_read_header(src.resume_dir).B;  // the resumed run's micro-batch
    if (s.total == -1) s.total = (long long)s.B * s.T * s.dp;
    return s;
}

// What the run reads: the token shards, the HellaSwag set and the tokenizer (for samples).
struct RunData {
    DataLoader train, val;
    bool has_val = false;
    long long val_seqs = 0;    // the sequences of T each evaluation reads (dataloader.h)
    bool val_capped = false;   // fewer than asked: all that --val-data holds
    long long data_most = 0;   // --batch-size auto: the most sequences the training data holds
    bool has_hellaswag = false;
    ChoiceSet hellaswag;
    bool can_sample = false;
    Tokenizer tk;
};

// Opens the shards in micro-batches of b (validates their headers) and sets the step's accum.
static void open_shards(RunData* d, const RunConfig& rc, int b, StepShape* s, const Mesh& mesh, int vocab) {
    const long long tokens_per_micro = (long long)b * s->T * s->dp;
    if (s->total <= 0 || s->total % tokens_per_micro != 0)
        usage_error("--total-batch-tokens %lld is not a multiple of batch-size*seq-len*dp = %lld", s->total, tokens_per_micro);
    s->accum = (int)(s->total / tokens_per_micro);
    if (rc.pp > 1 && rc.pp_schedule == PPSchedule::Interleaved && s->accum % rc.pp != 0)
        usage_error("--pp-schedule interleaved: the %d micro-batches a step (--total-batch-tokens / (batch-size*seq-len*dp)) "
                    "must be a multiple of --pp %d (Megatron's order sends pp of them through each chunk in turn)", s->accum, rc.pp);
    dataloader_init(&d->train, "--train-data", rc.train_data, b, s->T, s->dp, mesh.dp_rank, vocab, rc.shuffle, rc.seed);
    if (d->has_val) {  // opened in sequences (B = 1): its slots are then the sequences it holds
        dataloader_init(&d->val, "--val-data", rc.val_data, 1, s->T, s->dp, mesh.dp_rank, vocab, false, rc.seed);
        const long long asked = rc.val_tokens > 0 ? rc.val_tokens / s->T : (long long)rc.val_steps * b * s->dp;
        d->val_seqs = std::min(asked, d->val.slots);
        d->val_capped = asked > d->val_seqs;
    }
}

// Everything the run reads, its headers validated before the model is allocated. --batch-size
// auto opens the shards again once it has picked B (plan_micro_batch), at first in micro-batches
// of one sequence.
static void open_run_data(RunData* d, const RunConfig& rc, StepShape* s, const Mesh& mesh, int vocab) {
    d->has_val = !rc.val_data.empty() && (rc.val_tokens > 0 || rc.val_steps > 0);
    open_shards(d, rc, s->B > 0 ? s->B : 1, s, mesh, vocab);
    // for auto, the largest micro-batch the training data holds (the loader is open at B = 1):
    // one of B·T+1 tokens (validation pads its last micro-batches, so any B reads it)
    d->data_most = !rc.auto_batch() ? 0 : d->train.slots;
    d->has_hellaswag = !rc.hellaswag.empty();
    if (d->has_hellaswag) {
        d->hellaswag = choice_set_load("--hellaswag", rc.hellaswag, vocab);
        if (d->hellaswag.longest_row > s->T)
            usage_error("--hellaswag: its longest example needs %d positions, more than --seq-len %d", d->hellaswag.longest_row, s->T);
    }
    d->can_sample = rc.sample_every > 0 && rc.gen_tokens > 0;
    if (d->can_sample) {
        tokenizer_load(&d->tk, rc.tokenizer.c_str());
        if ((int)d->tk.vocab.size() != vocab)
            usage_error("--sample-every: the tokenizer has %zu tokens but the model's vocabulary is %d", d->tk.vocab.size(), vocab);
    }
}

// Every rank reads the same shards: the same names, token counts and token widths. A node with a
// shard missing, or an older one, would train on other data. The run stops at once instead.
static void refuse_other_shards(Group& world, const char* flag, const DataLoader& d) {
    uint32_t crc = 0;
    for (const Shard& s : d.shards) {
        const long long facts[2] = {s.ntok, s.bytes_per_token};
        crc = crc32c(crc32c(crc, s.path.c_str(), s.path.size() + 1), facts, sizeof facts);
    }
    const double mine[3] = {(double)crc, (double)d.shards.size(), (double)d.total_tokens};
    double first[3];
    const int r = comm_first_differing(world, mine, 3, first);
    if (r < 0) return;
    double theirs[3] = {mine[0], mine[1], mine[2]};  // rank r's, for rank 0 to print
    comm_from_rank(world, theirs, 3, r);
    usage_error("%s: rank %d sees other shards than rank 0 (rank 0: %.0f tokens in %.0f shard(s); rank %d: %.0f tokens in %.0f "
                "shard(s)): every node needs the same files", flag, r, first[2], first[1], r, theirs[2], theirs[1]);
}
static void refuse_other_shards(Group& world, const RunData& d) {
    refuse_other_shards(world, "--train-data", d.train);
    if (d.has_val) refuse_other_shards(world, "--val-data", d.val);
}

// Every rank reads the same --model file and --hellaswag file. A node with another copy would
// start from other weights (data-parallel copies that never meet again) or score another eval.
// The files' CRC32Cs are compared (only with several ranks). A model file's PATH.crc32c gives
// it, since the load checks the file against it (model_file_load). Any other file is read once
// more for it.
static void refuse_other_file(Group& world, const char* flag, const std::string& path, bool model_file) {
    uint32_t crc = 0;
    long long bytes = 0;
    if (!model_file || !sidecar_read(path, &crc, &bytes)) crc = crc32c_file(path, 0, &bytes);
    const double mine[2] = {(double)crc, (double)bytes};
    const int r = comm_first_differing(world, mine, 2);
    if (r >= 0)
        usage_error("%s %s: rank %d reads another file than rank 0 (its CRC32C or size differs): every node needs the same "
                    "file", flag, path.c_str(), r);
}
static void refuse_other_files(Group& world, const RunConfig& rc, const ModelSource& src) {
    if (world.size == 1) return;
    if (src.from_file && src.resume_dir.empty()) refuse_other_file(world, "--model", rc.model_spec, true);
    if (!rc.hellaswag.empty()) refuse_other_file(world, "--hellaswag", rc.hellaswag, false);
}

// ----------------------------------------------------------------------------
// the backend: threads, the device, the collectives, the dtype

struct Precision {
    bool fp8 = false, fp16 = false, bf16 = false;  // fp8 is bf16 with the blocks' products in FP8 (llmc/fp8.cuh)
};

// Which kernels run where there is a choice (kernel_options.h; GPU only). Each way gives the same
// results, but for --bias-grad's, --matmul-wgmma's and --classifier-stats' rounding.
static void set_kernel_choices(const RunConfig& rc, KernelOptions* o) {
    o->matmul_tune = rc.matmul_tune;
    o->matmul_wgmma = rc.matmul_wgmma;
    o->matmul_wgmma_gelu_only = rc.matmul_wgmma_gelu_only;
    o->matmul_wgmma_auto = rc.matmul_wgmma_auto;
    o->classifier_staged = rc.classifier_staged == "auto" ? 0 : std::stoi(rc.classifier_staged);
    o->classifier_staged_auto = rc.classifier_staged == "auto";
    o->classifier_stats_epilogue = rc.classifier_stats_epilogue;
    o->bias_grad = rc.bias_grad == "epilogue" ? BiasGrad::Epilogue : BiasGrad::Warps;
    o->layernorm_prefetch = rc.layernorm_prefetch == "1";
    o->layernorm_prefetch_auto = rc.layernorm_prefetch == "auto";
    o->fp8_fast_accum = rc.fp8_fast_accum == "forward" ? Fp8FastAccum::Forward : rc.fp8_fast_accum == "all" ? Fp8FastAccum::All : Fp8FastAccum::None;
    o->flash_forward_rows = o->flash_dq_rows = o->flash_dkv_keys = rc.flash_rows == "auto" ? 16 : std::stoi(rc.flash_rows);  // (auto: 16 until timed)
    o->flash_rows_auto = rc.flash_rows == "auto";
    o->flash_wgmma = rc.flash_wgmma == "1";
    o->flash_wgmma_auto = rc.flash_wgmma == "auto";
    o->flash_fused_backward = rc.flash_backward != "split";
    o->flash_fused_backward_128 = rc.flash_backward == "fused128";
    o->flash_dq_chain = rc.flash_backward == "chain";
    o->flash_forward_producer_auto = rc.flash_forward_producer == "auto";
    o->flash_backward_producer_auto = rc.flash_backward_producer == "auto";
    o->flash_forward_producer = o->flash_forward_producer_auto ? 0 : std::stoi(rc.flash_forward_producer);  // (auto: none until timed)
    o->flash_backward_producer = o->flash_backward_producer_auto ? 0 : std::stoi(rc.flash_backward_producer);
    o->flash_forward_pingpong = rc.flash_forward_pingpong;
    o->flash_forward_persistent = rc.flash_forward_persistent;
    o->flash_forward_keys = rc.flash_forward_keys;
    o->flash_forward_groups = rc.flash_forward_groups;
}

// --threads, or all cores: the threads each rank's CPU ops use.
static int start_threads(int threads) {
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
    return omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}

// The communication backend for GPU buffers: NCCL, or MPI staged through host memory.
static bool start_collectives(const RunConfig& rc, Mesh* mesh, const Ctx& ctx) {
    if (rc.comm == "nccl" && ctx.device != Device::CUDA) usage_error("--comm nccl: needs --device cuda (NCCL moves GPU buffers)");
    const bool use_nccl = ctx.device == Device::CUDA && mesh->world > 1 &&
                          (rc.comm == "nccl" || (rc.comm == "auto" && comm_have_nccl() && mesh->local_size <= cuda_device_count()));
    const char* one_queue = getenv("CUDA_DEVICE_MAX_CONNECTIONS");  // (comm.h, "the ring": why)
    if (use_nccl && rc.pp > 1 && one_queue && atoi(one_queue) == 1)
        usage_error("--pp %d over NCCL with CUDA_DEVICE_MAX_CONNECTIONS=1: every stream in one queue could hang the stages' "
                    "sends behind their receives; unset it (or --comm mpi)", rc.pp);
    if (use_nccl) comm_nccl_init(mesh, ctx);
    return use_nccl;
}

// The run's dtype (floatX): fp32 on the CPU and bf16 on a GPU unless --precision says otherwise.
static Precision run_precision(const RunConfig& rc, const Ctx& ctx) {
    Precision p;
    p.fp8 = rc.precision == "fp8", p.fp16 = rc.precision == "fp16";
    p.bf16 = rc.precision == "bf16" || p.fp8 || (rc.precision == "auto" && ctx.device == Device::CUDA);
    if (p.fp8) {
        const std::string why = fp8_device_problem(ctx);
        if (!why.empty()) usage_error("--precision fp8: %s", why.c_str());
        if (ctx.device == Device::CUDA && g_rank == 0)
            fprintf(stderr, "note: --precision fp8 is not faster than bf16 yet where it was measured (docs/performance.md: FP8 against bf16)\n");
        if (rc.recompute == Recompute::Selective && g_rank == 0)
            fprintf(stderr, "note: --recompute selective keeps what none keeps with --precision fp8: its backward reads no LayerNorm "
                    "or GELU output (llmc/model.h: fp8_keeps_operands); --recompute full keeps less\n");
    }
    return p;
}

// What run_training needs of the backend besides the Ctx.
struct Backend {
    int nthreads = 1;
    bool use_nccl = false;
    Precision precision;
};

// ----------------------------------------------------------------------------
// the model: its layout, its storage, the micro-batch that fits beside it, its weights

// The model on this rank (its share of tp, pp and cp) and its storage (data_parallel.h), once
// the state is known to fit (planner.h).
template <class floatX>
static void build_model(const RunConfig& rc, const GPTConfig& config, Mesh& mesh, const Ctx& ctx, const Precision& prec,
                        GPT<floatX>* model, DataParallel<floatX>* dpar) {
    ParallelGroups groups;
    groups.tp = rc.tp > 1 ? &mesh.tp_group : nullptr;
    groups.sp = rc.sp == 1;
    groups.pp = rc.pp > 1 ? &mesh.pp_group : nullptr;
    groups.vpp = rc.vpp;
    groups.cp = rc.cp > 1 ? &mesh.cp_group : nullptr;
    groups.zigzag = rc.cp_zigzag;
    gpt_build(model, config, groups);
    model->recompute = rc.recompute;
    model->fp8 = prec.fp8;
    if (rc.fp8_delayed) fp8_delayed_init(ctx, &model->fp8_delayed, gpt_fp8_tensors(*model), rc.fp8_history);
    dp_layout(dpar, model, &mesh.grads(), rc.zero, ctx);  // (dp × cp: both sum gradients)
    {   // does the state fit? (and what --zero 3 would take a rank, for the advice)
        DataParallel<floatX> at3;
        if (rc.zero < 3) dp_layout(&at3, model, &mesh.grads(), 3, ctx);
        plan_state(ctx, dp_memory(*dpar), rc.zero, mesh.grads().size, rc.zero < 3 ? dp_memory(at3).total() : 0, mesh);
    }
    dp_alloc(dpar);
    dpar->overlap = rc.overlap;
    if (rc.pp > 1 && config.tied) dpar->tied = &mesh.emb_group;  // the first and last stage's embeddings
}

// The micro-batch beside the model state (--batch-size auto picks the largest that fits), and
// what depends on it: fp8's shapes, the pipeline's activation slots and send copies.
template <class floatX>
static void plan_micro_batch(const RunConfig& rc, Mesh& mesh, const Ctx& ctx, const Precision& prec, double state_bytes,
                             GPT<floatX>* model, StepShape* s, RunData* data) {
    const bool runs_forward = rc.steps > 0 || data->has_val || data->has_hellaswag || data->can_sample;  // not a --steps 0 conversion
    if (runs_forward) {
        if (prec.fp8) fp8_products_run<floatX>(ctx);  // (matmul.cuh: refused, the fallback's scratch joins the plan)
        const PPPlan stage{rc.pp_schedule, rc.pp, mesh.pp_rank, rc.vpp};
        s->B = plan_batch<floatX>(ctx, *model, s->B, s->T, s->dp, s->total, rc.total_given(), state_bytes, mesh, data->data_most,
                                  rc.pp > 1 ? &stage : nullptr);
        if (rc.auto_batch() && !rc.resume) open_shards(data, rc, s->B, s, mesh, model->config.vocab_size);
    } else if (s->B == 0) {
        s->B = 1;  // a --steps 0 conversion reads no batch: any B would do
    }
    if (prec.fp8) {  // every FP8 product's dimensions a multiple of 16 (fp8.cuh): the B·T rows, and a block's widths on this rank
        const std::string why = gpt_fp8_shape_problem(model->layout.widths, s->B, s->Tl);
        if (!why.empty())
            usage_error("--precision fp8: %s (B*T = %d x %d%s); use --precision bf16, or a model and batch whose sizes are "
                        "multiples of 16", why.c_str(), s->B, s->Tl, rc.tp > 1 ? "; the widths are one tp rank's" : "");
    }
    if (rc.pp > 1) {  // the step's accum micro-batches: how many each chunk keeps alive at once, and the copies its sends keep (pipeline.h)
        pp_stage(model).slots = pp_slots(rc.pp_schedule, rc.pp, mesh.pp_rank, s->accum, rc.vpp);
        pp_stage(model).send_cap = pp_send_buffers(rc.pp_schedule, rc.pp, mesh.pp_rank, s->accum, rc.vpp);
    }
}

// Fresh weights: a batch of units drawn at a time, one per thread (each from its own streams:
// the same values in any order; GPT-2 1558M's 1.5 G normals take ~35 s on one core); at most 16
// at once, ~2 GB of fp32 for 1558M on each rank of a node.
template <class floatX>
static void init_weights(const GPTConfig& config, const ParamLayout& layout, uint64_t seed, int nthreads, DataParallel<floatX>* dpar) {
    const int nu = gpt_num_units(config), batch = std::min({nu, nthreads, 16});
    std::vector<avec<float>> units(batch);
    for (int u0 = 0; u0 < nu; u0 += batch) {
        const int u1 = std::min(nu, u0 + batch);
        #pragma omp parallel for schedule(dynamic, 1)
        for (int u = u0; u < u1; u++) {
            units[u - u0].resize(dpar->units[u].size);
            gpt_init_unit(config, layout, u, seed, units[u - u0].data());
        }
        for (int u = u0; u < u1; u++) dp_set_unit(dpar, u, units[u - u0].data());
    }
}

// The weights: the checkpoint's (with the run's state: step, data position, sampler, histories),
// the model file's, or fresh ones.
template <class floatX>
static TrainState load_weights(const RunConfig& rc, const ModelSource& src, const StepShape& s, int nthreads,
                               DataParallel<floatX>* dpar, DataLoader* train, Rng* sampler) {
    TrainState state;
    if (rc.resume) {
        state = checkpoint_load(src.resume_dir, dpar);
        if (state.B != s.B || state.T != s.T || state.total_batch != s.total)
            usage_error("--resume: '%s' was written with --batch-size %lld --seq-len %lld --total-batch-tokens %lld; "
                        "resume with the same (got %d, %d, %lld)", src.resume_dir.c_str(), (long long)state.B,
                        (long long)state.T, (long long)state.total_batch, s.B, s.T, s.total);
        train->k = state.global_batches / s.dp;  // an exact division: both are step·D/(B·T)
        sampler->state = state.rng_state;
    } else if (src.from_file) {
        model_file_load(dpar, rc.model_spec.c_str());
    } else {
        init_weights(src.config, dpar->g->layout, rc.seed, nthreads, dpar);
    }
    return state;
}

// ----------------------------------------------------------------------------
// the run summary: what runs, where, and in how much memory

// The model line and the data line. The data line says how many epochs --steps reads; more than
// one gets a note, since a --train-data pattern that matches too few shards looks the same.
template <class floatX>
static void print_model_and_data(const ModelSource& src, const GPT<floatX>& model, const RunData& data, const StepShape& s,
                                 int steps) {
    const GPTConfig& c = src.config;
    char arch_note[256] = "";
    if (c.llama()) {
        char scaled[96] = "";
        if (c.rope_scaling.factor)
            snprintf(scaled, sizeof(scaled), " scaled x%d (low %d, high %d, context %d)", c.rope_scaling.factor,
                     c.rope_scaling.low, c.rope_scaling.high, c.rope_scaling.original);
        snprintf(arch_note, sizeof(arch_note), "; llama: NKV=%d H=%d theta=%d%s (RMSNorm, RoPE, SwiGLU), %s", c.kv_heads(),
                 c.ffn(), c.rope_theta, scaled, c.tied ? "classifier tied to wte" : "lm_head apart from wte");
    }
    print0("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d, %.2fM parameters%s%s\n", c.num_layers, c.channels, c.num_heads,
           c.vocab_size, c.padded_vocab_size, c.max_seq_len, gpt_num_params(model) / 1e6,
           src.from_file ? " (from file)" : !src.resume_dir.empty() ? " (from checkpoint)" : "", arch_note);
    const long long slots = std::max(1LL, data.train.slots);  // (B·T pieces of the data: dataloader.h)
    const long long per_epoch = std::max(1LL, slots / ((long long)s.accum * s.dp));  // (steps)
    const double epochs = (double)steps * s.accum * s.dp / slots;
    char epoch_words[64] = "";  // (none for --steps 0: evaluation only)
    if (steps > 0) snprintf(epoch_words, sizeof epoch_words, "; --steps %d: %.3g epochs", steps, epochs);
    print0("data: %lld train tokens in %zu shard(s); B=%d T=%d dp=%d, %d micro-batch(es) per step = %lld tokens%s\n",
           data.train.total_tokens, data.train.shards.size(), s.B, s.T, s.dp, s.accum, s.total, epoch_words);
    if (epochs > 1)
        print0("note: --steps %d reads the training data %.3g times over (an epoch is %lld steps); check that --train-data "
               "names every shard\n", steps, epochs, per_epoch);
    for (const Shard& v : data.has_val ? data.val.shards : std::vector<Shard>{})
        for (const Shard& t : data.train.shards) {
            std::error_code ec;
            if (std::filesystem::equivalent(v.path, t.path, ec)) {
                print0("note: --val-data reads a file --train-data reads too (%s): the validation loss is then a training "
                       "loss\n", v.path.c_str());
                return;
            }
        }
}

// A stage's blocks: "[0, 2)", or with interleaving its chunks' "[0, 1) [2, 3)".
static std::string blocks_of(const ParamLayout& l) {
    std::string out;
    for (const LayerRange& r : l.chunks) out += (out.empty() ? "[" : " [") + std::to_string(r.first) + ", " + std::to_string(r.end) + ")";
    return out;
}

// The pipeline's lines: the stages' blocks (rank 0), then each stage's own (every rank's).
template <class floatX>
static void print_pipeline(const RunConfig& rc, const GPT<floatX>& model, const Mesh& mesh, int accum) {
    const GPTConfig& c = model.config;
    const bool il = rc.pp_schedule == PPSchedule::Interleaved;
    const int pp = rc.pp;
    print0("pipeline parallel: pp=%d, schedule %s%s, %d micro-batches a step: idle %s = %.1f%% of it; blocks", pp,
           PP_SCHEDULE_NAMES[(int)rc.pp_schedule], il ? (", vpp=" + std::to_string(rc.vpp) + " chunks a stage").c_str() : "", accum,
           il ? "(pp-1)/(vpp*m+pp-1)" : "(pp-1)/(m+pp-1)", 100 * pp_bubble_formula(rc.pp_schedule, pp, accum, rc.vpp));
    for (int st = 0; st < pp; st++)
        print0(" %s%s", blocks_of(make_layout(c, 1, 0, pp, st, il ? rc.vpp : 1)).c_str(), st + 1 < pp ? "," : " a stage\n");
    std::string slots;
    const PipelineStage<floatX>& stage = *model.par.stage;  // (plan_micro_batch made it)
    for (int n : stage.slots) slots += (slots.empty() ? "" : " + ") + std::to_string(n);
    fflush(stdout);
    printf("pipeline rank %d: stage %d, blocks %s%s%s, %s activation slot(s)%s, send copies at most %d + %d (forward + backward)\n",
           mesh.rank, mesh.pp_rank, blocks_of(model.layout).c_str(), model.layout.stage == 0 ? ", the embeddings" : "",
           !model.layout.has_head ? "" : c.tied ? ", lnf and the classifier (wte tied to stage 0's)" : ", lnf and the classifier (lm_head)",
           slots.c_str(), stage.slots.size() > 1 ? " (its chunks')" : "", stage.send_cap[0], stage.send_cap[1]);
    fflush(stdout);
}

// The lines of each parallelism in use, and the validation set's.
template <class floatX>
static void print_layout(const RunConfig& rc, const GPT<floatX>& model, const Mesh& mesh, const RunData& data, const StepShape& s) {
    const GPTConfig& c = model.config;
    const int tp = rc.tp, cp = rc.cp;
    if (tp > 1)
        print0("tensor parallel: tp=%d, each rank %d of the %d heads and %d of the %d MLP features of every block, and %d of "
               "the %d vocabulary rows (wte, the logits)\n", tp, c.num_heads / tp, c.num_heads, c.ffn() / tp, c.ffn(),
               c.padded_vocab_size / tp, c.padded_vocab_size);
    if (rc.pp > 1) print_pipeline(rc, model, mesh, s.accum);
    if (cp > 1)
        print0("context parallel: cp=%d, %s: each rank holds %d of each sequence's %d positions (%s), ring attention over "
               "the cp group; gradients summed over dp x cp = %d ranks\n", cp, rc.cp_zigzag ? "zigzag" : "contiguous", s.Tl, s.T,
               rc.cp_zigzag ? "two chunks, r and 2*cp-1-r, of 2*cp" : "rank r: [r*T/cp, (r+1)*T/cp)", s.dp * cp);
    if (rc.sp == 1)
        print0("sequence parallel: each tp rank holds %d of the %d positions of the residual stream and the LayerNorms\n",
               (int)ceil_div((size_t)s.B * s.Tl, (size_t)tp), s.B * s.Tl);
    if (data.has_val)
        print0("validation: %lld sequences of %d = %lld tokens each evaluation%s\n", data.val_seqs, s.T, data.val_seqs * s.T,
               data.val_capped ? " (all that --val-data holds)" : "");
}

// The device line: where it runs, in which precision, with what.
template <class floatX>
static void print_device(const RunConfig& rc, const Ctx& ctx, const Mesh& mesh, const Backend& be) {
    const Precision& p = be.precision;
    const std::string precision_note = p.fp8 ? std::string("bf16 with the blocks' products in fp8") +
                                                   (rc.fp8_delayed ? " (delayed scaling, amax history " + std::to_string(rc.fp8_history) + ")" : "")
                                     : p.fp16 ? "fp16 with dynamic loss scaling" : dtype_name<floatX>();
    // the line's tail: recomputation (when on) and where checkpoints go
    const std::string run_note = (rc.recompute == Recompute::None ? "" : std::string(", recompute ") + recompute_name(rc.recompute)) +
                                 (rc.out_dir.empty() ? "" : " -> " + rc.out_dir);
    if (ctx.device == Device::CPU)
        print0("device: cpu, %d rank(s) x %d thread(s), %s, zero %d%s\n", mesh.world, be.nthreads, precision_note.c_str(), rc.zero,
               run_note.c_str());
    else
        print0("device: cuda, %d rank(s)%s, %s, zero %d%s\n", mesh.world,
               mesh.world == 1 ? "" : be.use_nccl ? (rc.overlap ? " (collectives: nccl)" : " (collectives: nccl, not overlapped)")
                                                  : " (collectives: mpi, staged through host memory)",
               precision_note.c_str(), rc.zero, run_note.c_str());
    if (ctx.device == Device::CUDA) print0("gpu: %s\n", cuda_describe().c_str());
}

// Each rank's memory line: the state, the activations, and the scratch of what is on.
template <class floatX>
static void print_memory(const GPT<floatX>& model, const DPMemory& mem, const Ctx& ctx, const Mesh& mesh, const StepShape& s,
                         const Precision& prec) {
    fflush(stdout);
    const double gelu_scratch = gpt_gelu_scratch_bytes(ctx, model, s.B, s.Tl);
    const double attention_scratch = gpt_attention_scratch_bytes(ctx, model, s.B, s.Tl);
    const double classifier_scratch = gpt_classifier_scratch_bytes(ctx, model, s.B, s.Tl);
    std::string tail;
    if (model.par.pp) tail += ", send copies " + std::to_string((long long)gpt_send_copy_bytes(model, s.B, s.Tl)) + " B";
    if (prec.fp8) tail += ", fp8 scratch " + std::to_string((long long)gpt_fp8_scratch_bytes(ctx, model, s.B, s.Tl)) + " B";
    if (gelu_scratch) tail += ", gelu scratch " + std::to_string((long long)gelu_scratch) + " B";
    if (attention_scratch) tail += ", attention scratch " + std::to_string((long long)attention_scratch) + " B";
    if (classifier_scratch) tail += ", classifier stats " + std::to_string((long long)classifier_scratch) + " B";
    printf("memory rank %d: params %lld B, grads %lld B, optimizer %lld B, working buffers %lld B, activations %lld B%s\n",
           mesh.rank, (long long)mem.params, (long long)mem.grads, (long long)mem.optimizer, (long long)mem.working,
           (long long)gpt_all_activation_bytes(model, s.B, s.Tl, model.recompute), tail.c_str());
    fflush(stdout);
}

// The settings a checkpoint records (checkpoint.h: RunSettings), so that --resume can name those
// that changed. Each value is what the flag's reader would print; the data are counted, not named.
static RunSettings run_settings(const RunConfig& rc, const DataLoader& train, const Precision& p) {
    auto num = [](double v) { char b[32]; snprintf(b, sizeof b, "%g", v); return std::string(b); };
    std::string precision = p.fp8 ? "fp8" : p.fp16 ? "fp16" : p.bf16 ? "bf16" : "fp32";
    if (p.fp8) precision += rc.fp8_delayed ? " (delayed scaling, history " + std::to_string(rc.fp8_history) + ")" : " (current scaling)";
    std::string schedule = rc.sched.kind;
    if (schedule == "wsd") schedule += " (cooldown " + num(rc.sched.cooldown_frac) + ")";
    return {{"train-data", std::to_string(train.shards.size()) + " shard(s) of " + std::to_string(train.total_tokens) + " tokens"},
            {"shuffle", rc.shuffle ? "1 (seed " + std::to_string(rc.seed) + ")" : "0"},
            {"precision", precision}, {"steps", std::to_string(rc.steps)}, {"lr", num(rc.sched.lr)},
            {"warmup-steps", std::to_string(rc.sched.warmup)}, {"lr-schedule", schedule}, {"final-lr-frac", num(rc.sched.final_lr_frac)},
            {"weight-decay", num(rc.wd)}, {"beta1", num(rc.beta1)}, {"beta2", num(rc.beta2)}, {"eps", num(rc.eps)},
            {"grad-clip", num(rc.grad_clip)}, {"skip-loss-z", num(rc.skip_loss_z)}, {"skip-norm-z", num(rc.skip_norm_z)}};
}

// On --resume: where from, which settings changed, and what became of fp8's amax history.
static void print_resume(const RunConfig& rc, const ModelSource& src, const TrainState& state, const RunSettings& settings) {
    print0("resumed from %s at step %lld (saved with dp=%lld zero=%lld tp=%lld pp=%lld vpp=%lld)\n", src.resume_dir.c_str(),
           (long long)state.step, (long long)state.saved_dp, (long long)state.saved_zero, (long long)state.saved_tp,
           (long long)state.saved_pp, (long long)state.saved_vpp);
    const std::string changed = checkpoint_settings_changed(state.settings, settings);
    if (!changed.empty() && rc.steps > 0)
        print0("note: --resume: settings other than the checkpoint's run had: %s. The run goes on with them, so it is not the "
               "training that run would have made\n", changed.c_str());
    if (!rc.fp8_delayed) return;
    if (!state.same_layout)
        print0("fp8 delayed scaling: the checkpoint's amax history is per tp rank and stage of its layout (tp=%lld "
               "pp=%lld vpp=%lld), not this one's: it starts anew, the first step scaling each tensor from itself\n",
               (long long)state.saved_tp, (long long)state.saved_pp, (long long)state.saved_vpp);
    else if (state.fp8_steps >= 0)
        print0("fp8 delayed scaling: the amax history of %lld step(s) from the checkpoint\n", (long long)state.fp8_steps);
    else
        print0("fp8 delayed scaling: the checkpoint has no amax history (saved without --fp8-scaling delayed): the first "
               "step scales each tensor from itself\n");
}

// ----------------------------------------------------------------------------
// evaluations and samples (every rank runs them: ZeRO-3 gathers parameters in each forward)

template <class floatX>
static EvalLog run_evals(const Ctx& ctx, GPT<floatX>* model, RunData* data, const StepShape& s, Group& dp) {
    EvalLog ev;
    const double t0 = now_seconds();
    if (data->has_val) {
        std::vector<int> x((size_t)s.B * s.T), y((size_t)s.B * s.T);
        ev.has_val = true;
        ev.val_loss = evaluate(ctx, model, &data->val, data->val_seqs, s.B, x, y, dp);
    }
    if (data->has_hellaswag) {
        ChoiceResult r = choice_evaluate(ctx, model, data->hellaswag, s.B, s.T, dp);
        ev.has_hellaswag = true;
        ev.hellaswag_correct = r.correct, ev.hellaswag_total = r.total, ev.hellaswag_loss = r.gold_loss;
    }
    ev.seconds = now_seconds() - t0;  // the results are on the host: the device's work is done
    return ev;
}

static void print_evals(const EvalLog& ev) {
    if (ev.has_val) print0(" | val loss %.6f", ev.val_loss);
    if (ev.has_hellaswag) print0(" | hellaswag %.4f (%d/%d)", ev.hellaswag_acc(), ev.hellaswag_correct, ev.hellaswag_total);
    if (ev.has_val || ev.has_hellaswag) print0(" (eval %.1f s)", ev.seconds);
}

template <class floatX>
static void print_sample(const Ctx& ctx, GPT<floatX>* model, RunData* data, const RunConfig& rc, Rng* sampler, int step) {
    std::string text = generate(ctx, model, &data->tk, rc.prompt, rc.gen_tokens, rc.T, rc.temperature, rc.top_k, sampler);
    print0("---- sample at step %d ----\n%s\n---------------------------\n", step, text.c_str());
}

// --steps 0: the model evaluated as it is, nothing trained.
template <class floatX>
static void evaluate_only(const Ctx& ctx, GPT<floatX>* model, RunData* data, const RunConfig& rc, const StepShape& s, Mesh& mesh,
                          Logger* log, Rng* sampler, int at) {
    if (!data->has_val && !data->has_hellaswag && !data->can_sample)
        print0("--steps 0: nothing to do (give --val-data, --hellaswag or --sample-every to evaluate the model)\n");
    EvalLog ev = run_evals(ctx, model, data, s, mesh.dp_group);
    if (data->has_val || data->has_hellaswag) { print0("eval at step %d", at); print_evals(ev); print0("\n"); }
    fflush(stdout);
    logger_eval(log, at, ev);
    if (data->can_sample) print_sample(ctx, model, data, rc, sampler, at);
}

// ----------------------------------------------------------------------------
// one optimizer step

// The next micro-batch's tokens and targets at this rank's positions: all of them, or with
// context parallelism this rank's pieces of each sequence (context_parallel.h).
struct BatchReader {
    DataLoader* loader = nullptr;
    int B = 0, T = 0, cp = 1;
    std::vector<PosPiece> mine;
    std::vector<int> x, y;    // a whole micro-batch, before this rank's positions are taken
    std::vector<int> xl, yl;  // this rank's positions of it (B·T/cp each): what the model reads
};

static void next_batch(BatchReader* r, int* xb, int* yb) {
    if (r->cp == 1) { dataloader_next(r->loader, xb, yb); return; }
    dataloader_next(r->loader, r->x.data(), r->y.data());
    cp_take_positions(r->x.data(), r->B, r->T, r->mine, xb);
    cp_take_positions(r->y.data(), r->B, r->T, r->mine, yb);
}

// What a step carries to the next besides the model: the recent losses and norms a step is
// judged against (outliers.h), fp16's loss scale (loss_scale.h), the run of skipped steps.
// All are kept through a resume.
struct StepGuards {
    OutlierWindow loss_window, norm_window;
    LossScale loss_scale;
    Divergence divergence;
};

static StepGuards step_guards(const RunConfig& rc, const TrainState& state, bool fp16) {
    StepGuards g;
    g.loss_window.size = g.norm_window.size = rc.skip_window;
    for (double v : state.loss_history) outlier_push(&g.loss_window, v);
    for (double v : state.norm_history) outlier_push(&g.norm_window, v);
    g.loss_scale.on = fp16;
    g.loss_scale.every = rc.loss_scale_every;
    g.loss_scale.scale = state.loss_scale > 0 ? state.loss_scale : rc.loss_scale0;
    g.loss_scale.clean = state.loss_scale > 0 ? state.loss_scale_clean : 0;
    g.divergence = Divergence{rc.max_skipped, rc.skip_loss_z > 0, rc.skip_norm_z > 0};
    return g;
}

// What a step gives the log.
struct StepResult {
    float loss = 0, norm = 0, lr = 0;
    LossScaleStep scaling;
    bool skipped = false, loss_outlier = false, norm_outlier = false;
    double loss_z = 0, norm_z = 0;
    double fp8_saturated[2] = {-1, 0};  // (delayed scaling: the tensors that saturated, of how many; all ranks')
};

// Forward and backward over the step's micro-batches; returns this rank's sum of their losses.
template <class floatX>
static double forward_backward(const Ctx& ctx, GPT<floatX>* model, DataParallel<floatX>* dpar, const RunConfig& rc,
                               const StepShape& s, BatchReader* batches, float dloss) {
    double loss_sum = 0.0;
    if (rc.pp > 1)  // the micro-batches through the pipeline's stages, in its schedule (pipeline.h)
        return pp_train_step(ctx, model, dpar, rc.pp_schedule, s.accum, s.B, s.Tl, dloss,
                             [batches](int* xb, int* yb) { next_batch(batches, xb, yb); });
    for (int micro = 0; micro < s.accum; micro++) {
        dpar->last_micro = micro == s.accum - 1;
        next_batch(batches, batches->xl.data(), batches->yl.data());
        gpt_forward(ctx, model, batches->xl.data(), batches->yl.data(), s.B, s.Tl, dloss);
        gpt_backward(ctx, model, s.B, s.Tl);
        loss_sum += gpt_mean_loss(model);  // waits for the loss copy alone: the backward is still running
    }
    return loss_sum;
}

// Delayed scaling: the step's amaxes, the max over the ranks that hold these blocks, enter the
// history (here, where the norm has just emptied the GPU's queue: the copy waits for nothing).
template <class floatX>
static void fp8_record_step(const Ctx& ctx, GPT<floatX>* model, Mesh& mesh, double saturated[2]) {
    std::vector<float> amax = fp8_delayed_amaxes(ctx, model->fp8_delayed);
    comm_max_floats(mesh.grads(), amax.data(), (int)amax.size());
    saturated[0] = fp8_delayed_push(ctx, &model->fp8_delayed, amax);
    saturated[1] = model->fp8_delayed.n;
    model->fp8_delayed.record = false;
    comm_sum_doubles(mesh.tp_group, saturated, 2);  // (the other blocks' shards, and stages)
    comm_sum_doubles(mesh.pp_group, saturated, 2);
}

static void comm_reset_all(Mesh& mesh) {
    comm_reset_stats(mesh.grads());
    comm_reset_stats(mesh.cp_group);
    comm_reset_stats(mesh.tp_group);
    comm_reset_stats(mesh.pp_group);
    comm_reset_stats(mesh.emb_group);
}

// One optimizer step: the gradients of the step's tokens, their norm over all ranks, then the
// update, or a skip (fp16's overflow, an outlier step). A diverged run stops here.
template <class floatX>
static StepResult train_step(const Ctx& ctx, GPT<floatX>* model, DataParallel<floatX>* dpar, const RunConfig& rc,
                             const StepShape& s, Mesh& mesh, BatchReader* batches, StepGuards* g, int step) {
    StepResult r;
    comm_reset_all(mesh);
    dp_zero_grad(dpar);
    model->fp8_delayed.record = true;  // (delayed scaling: this step's quantizations record their amaxes)
    // ---- forward and backward; the loss and the gradient norm, over all ranks
    const float dloss = 1.0f / ((float)s.B * s.T * s.accum * s.dp);  // the dp (× cp) sum of gradients is then the mean
    double loss_sum = forward_backward(ctx, model, dpar, rc, s, batches, dloss * loss_scale_factor(g->loss_scale));
    { CommScope prof(ctx, mesh.grads(), "loss and norm sums"); comm_sum_doubles(mesh.grads(), &loss_sum, 1); }
    r.loss = (float)(loss_sum / ((double)s.accum * s.dp * rc.cp));  // (each cp rank's is the mean over its positions)
    const float scaled_norm = dp_grad_norm(dpar);  // (of the gradients times S, with fp16)
    if (model->fp8_delayed.on) fp8_record_step(ctx, model, mesh, r.fp8_saturated);
    // ---- update, or skip: fp16's overflow, an outlier step, a diverged step
    r.scaling = loss_scale_step(&g->loss_scale, scaled_norm);
    if (loss_scale_floor_hit(r.scaling))
        run_failed("step %d: the gradients are not finite even with the loss scale at 1 (fp16 overflows, or the run "
                   "diverged); use --precision bf16, or lower --lr", step);
    r.norm = (float)(scaled_norm / r.scaling.used);  // the gradients' own
    r.lr = lr_at(rc.sched, step - 1);
    r.loss_z = outlier_z(g->loss_window, r.loss), r.norm_z = outlier_z(g->norm_window, r.norm);
    outlier_push(&g->loss_window, r.loss);
    if (!r.scaling.overflow) outlier_push(&g->norm_window, r.norm);  // (an overflow says nothing about the norm)
    r.loss_outlier = rc.skip_loss_z > 0 && r.loss_z > rc.skip_loss_z;
    r.norm_outlier = !r.scaling.overflow && rc.skip_norm_z > 0 && r.norm_z > rc.skip_norm_z;
    r.skipped = r.scaling.overflow || r.loss_outlier || r.norm_outlier;
    divergence_check(&g->divergence, step, r.loss, r.norm, r.skipped, r.loss_outlier || r.norm_outlier);
    if (r.skipped) dp_skip_update(dpar);  // the same on every rank: they all hold the same loss and norm
    else dp_update(dpar, r.lr, rc.beta1, rc.beta2, rc.eps, rc.wd, step, (float)(grad_clip_factor(r.norm, rc.grad_clip) / r.scaling.used));
    return r;
}

// The step's line on stdout and in the JSON log.
static void log_step(const RunConfig& rc, Logger* log, int step, const StepResult& r, const StepGuards& g, const EvalLog& ev,
                     double ms, double tok_s, double mfu, const std::string& comm_json, bool fp16) {
    print0("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, rc.steps, r.loss, r.lr, r.norm, ms, tok_s);
    if (mfu >= 0) print0(" | mfu %.1f%%", 100 * mfu);
    if (fp16) print0(" | loss scale %g", r.scaling.used);
    if (r.fp8_saturated[0] > 0) print0(" | fp8 saturated %.0f of %.0f tensors", r.fp8_saturated[0], r.fp8_saturated[1]);
    if (r.skipped) {  // and why: the z that crossed its bound
        print0(" | update skipped:");
        if (r.scaling.overflow) print0(" fp16 overflow, loss scale %g -> %g", r.scaling.used, g.loss_scale.scale);
        if (r.loss_outlier) print0(" loss z %.1f > %g", r.loss_z, rc.skip_loss_z);
        if (r.norm_outlier) print0(" norm z %.1f > %g", r.norm_z, rc.skip_norm_z);
    }
    print_evals(ev);
    print0("\n");
    if (rc.comm_stats) print0("  comm (bytes sent per rank, ring model): %s\n", comm_json.c_str());
    fflush(stdout);
    logger_step(log, step, r.loss, r.lr, r.norm, tok_s, ms, mfu, r.skipped, ev, comm_json, fp16 ? r.scaling.used : 0.0,
                (int)r.fp8_saturated[0]);
}

// The checkpoints a run from step `done` to --steps writes: one each --checkpoint-every steps, and
// one after the last step.
static long long checkpoints_to_write(const RunConfig& rc, long long done) {
    if (rc.out_dir.empty() || rc.steps <= done) return 0;
    if (rc.ckpt_every <= 0) return 1;
    return rc.steps / rc.ckpt_every - done / rc.ckpt_every + (rc.steps % rc.ckpt_every == 0 ? 0 : 1);
}

// A checkpoint of step `step`: the model, the optimizer, and the run's state (checkpoint.h).
// False where the disk had no room for it (checkpoint_make_room).
template <class floatX>
static bool save_checkpoint(const RunConfig& rc, const StepShape& s, int step, const DataLoader& train, const Rng& sampler,
                            const StepGuards& g, bool fp16, DataParallel<floatX>* dpar, TrainState* state, Mesh& mesh) {
    state->step = step, state->global_batches = train.k * s.dp, state->rng_state = sampler.state;
    state->B = s.B, state->T = s.T, state->total_batch = s.total;
    state->loss_history.assign(g.loss_window.values.begin(), g.loss_window.values.end());
    state->norm_history.assign(g.norm_window.values.begin(), g.norm_window.values.end());
    state->loss_scale = fp16 ? g.loss_scale.scale : 0.0, state->loss_scale_clean = g.loss_scale.clean;
    if (!checkpoint_make_room(rc.out_dir, (double)gpt_num_params(*dpar->g), rc.ckpt_keep, step, mesh.world_group)) return false;
    checkpoint_save(rc.out_dir, dpar, *state, mesh.world_group);
    if (mesh.rank == 0) checkpoint_prune(rc.out_dir, rc.ckpt_keep, step);
    print0("checkpoint: %s\n", checkpoint_dir(rc.out_dir, step).c_str());
    return true;
}

// After the last step (or a stop): the model file, the profile, the last memory lines.
template <class floatX>
static void finish_run(const RunConfig& rc, const Ctx& ctx, GPT<floatX>* model, DataParallel<floatX>* dpar, const Mesh& mesh,
                       int stop, double peak) {
    dp_params_wait_all(dpar);  // the last update's all-gathers (ZeRO-1/2), before anything reads or frees them
    if (!rc.save_model.empty()) {
        if (stop) {
            print0("--save-model: not written (the run stopped before its last step)\n");
        } else {
            model_file_save(dpar, rc.save_model, rc.save_bf16);
            print0("model saved to %s (%s)\n", rc.save_model.c_str(), rc.save_bf16 ? "bf16" : "fp32");
        }
    }
    if (ctx.prof && mesh.rank == 0) profile_report(*ctx.prof, stdout, peak);
    if (rc.pp > 1) {  // (every rank's: pipeline.h's copies for its sends, each way's)
        const PipelineStage<floatX>& stage = pp_stage(model);
        size_t bytes = 0, kept[2] = {stage.sends[0].size(), stage.sends[1].size()};
        for (const auto& pool : stage.sends)
            for (const auto& o : pool) bytes += o.copy.bytes();
        fflush(stdout);
        printf("pipeline rank %d: %zu + %zu send buffer(s) (forward + backward; at most %d + %d), %s%s\n", mesh.rank, kept[0],
               kept[1], stage.send_cap[0], stage.send_cap[1], format_bytes(bytes).c_str(),
               ctx.device == Device::CUDA ? " of GPU memory" : "");
        fflush(stdout);
    }
    if (ctx.device == Device::CUDA)
        print0("peak GPU memory (model, activations, optimizer, buffers): %.1f MiB (%zu B)\n", g_gpu_bytes_peak / 1048576.0,
               g_gpu_bytes_peak);
}

// ----------------------------------------------------------------------------
// the run, written once for its dtype floatX: float (--precision fp32), bf16 (bf16 and fp8) or
// fp16 (fp16)

template <class floatX>
static int run_training(const RunConfig& rc, const ModelSource& src, StepShape s, RunData* data, Mesh& mesh, Ctx& ctx,
                        const Backend& be) {
    // --- the model, the micro-batch beside it, its weights
    GPT<floatX> model;
    DataParallel<floatX> dpar;
    build_model(rc, src.config, mesh, ctx, be.precision, &model, &dpar);
    const DPMemory mem = dp_memory(dpar);
    plan_micro_batch(rc, mesh, ctx, be.precision, mem.total(), &model, &s, data);
    Rng sampler(rc.seed, 0x5a3b1e);
    TrainState state = load_weights(rc, src, s, be.nthreads, &dpar, &data->train, &sampler);
    checkpoint_room(rc.out_dir, (double)gpt_num_params(model), checkpoints_to_write(rc, state.step), rc.ckpt_keep, mesh.world_group);
    const bool fp16 = be.precision.fp16;
    // --- the run summary
    print_model_and_data(src, model, *data, s, rc.steps);
    print_layout(rc, model, mesh, *data, s);
    print_device<floatX>(rc, ctx, mesh, be);
    const double peak = gpu_peak_flops(ctx), flops_tok = flops_per_token(src.config, s.T, gpt_num_params(model));
    print_memory(model, mem, ctx, mesh, s, be.precision);
    const RunSettings settings = run_settings(rc, data->train, be.precision);
    if (rc.resume) print_resume(rc, src, state, settings);
    state.settings = settings;  // (what this run's checkpoints record)
    Logger log;
    if (mesh.rank == 0) logger_open(&log, rc.log_file, rc.resume ? state.step : -1);
    if (rc.steps == 0) evaluate_only(ctx, &model, data, rc, s, mesh, &log, &sampler, (int)state.step);

    const size_t BT = (size_t)s.B * s.T, BTl = (size_t)s.B * s.Tl;
    BatchReader batches{&data->train, s.B, s.T, rc.cp, cp_pieces(rc.cp, mesh.cp_rank, rc.cp_zigzag, s.Tl),
                        std::vector<int>(BT), std::vector<int>(BT), std::vector<int>(BTl), std::vector<int>(BTl)};
    StepGuards guards = step_guards(rc, state, fp16);
    if (!rc.out_dir.empty()) stop_signals_install();  // a stop request is then answered after the step, with a checkpoint
    int stop = 0;  // the signal that stopped the run (0: none)
    bool saved = true;  // the last checkpoint was written (false: no room for it)
    const int first_step = (int)state.step + 1;
    for (int step = first_step; step <= rc.steps; step++) {
        // ---- train step (--profile measures the steps after the first, which sets up cuBLASLt and buffers)
        watchdog_step(step);
        const bool measured = rc.profile && (step > first_step || rc.steps == first_step);
        if (measured) { ctx_sync(ctx); profile_step_begin(ctx.prof); }
        const double t0 = now_seconds();
        const StepResult r = train_step(ctx, &model, &dpar, rc, s, mesh, &batches, &guards, step);
        if (measured) ctx_sync(ctx);  // the step's GPU work, all of it inside its time
        const double ms = (now_seconds() - t0) * 1000.0;
        if (measured) profile_step_end(ctx.prof, ms);
        const std::string comm_json = comm_stats_json(mesh);  // (before the evaluations' own collectives)
        // ---- once in a while: evaluate; then log
        const bool last = step == rc.steps;
        const EvalLog ev = last || (rc.val_every > 0 && step % rc.val_every == 0) ? run_evals(ctx, &model, data, s, mesh.dp_group) : EvalLog{};
        const double tok_s = s.total / (ms / 1000.0);
        const double mfu = peak > 0 ? tok_s / mesh.world * flops_tok / peak : -1.0;  // per GPU
        log_step(rc, &log, step, r, guards, ev, ms, tok_s, mfu, comm_json, fp16);
        // ---- once in a while: a sample
        if (data->can_sample && (last || step % rc.sample_every == 0)) print_sample(ctx, &model, data, rc, &sampler, step);
        // ---- stop on a signal: a SIGTERM, SIGUSR1 or SIGINT that reached any rank stops all here, with a checkpoint
        stop = rc.out_dir.empty() || last ? 0 : stop_signal_agreed(mesh.world_group);
        // ---- once in a while: a checkpoint
        if (!rc.out_dir.empty() && (last || stop || (rc.ckpt_every > 0 && step % rc.ckpt_every == 0)))
            saved = save_checkpoint(rc, s, step, data->train, sampler, guards, fp16, &dpar, &state, mesh);
        if (stop) {
            print0("stopped by %s after step %d of %d: run the same command with --resume to go on\n", stop_signal_name(stop), step,
                   rc.steps);
            break;
        }
    }
    finish_run(rc, ctx, &model, &dpar, mesh, stop, peak);
    logger_close(&log);
    if (stop) return 128 + stop;  // the shell's code for a process the signal ended
    if (!saved && mesh.rank == 0)
        fprintf(stderr, "error: the last step's checkpoint was not written (no room in --output-dir %s); free some space and "
                        "run the same command with --resume to write it\n", rc.out_dir.c_str());
    return saved ? 0 : 4;  // (4: not retried by run_until_done, since a resume would train into the same full disk)
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    Mesh mesh;
    mesh_start(&mesh, &argc, &argv);  // first, so that only rank 0 reports a bad flag
    refuse_other_commands(mesh.world_group, argc, argv);
    // --- the flags, each checked on its own; the outputs checked before anything is trained
    const RunConfig rc = parse_run_config(parse_flags(argc, argv));
    watchdog_start(rc.comm_timeout);  // (from here every wait for the other ranks is timed: llmc/comm_timeout.h)
    check_output_paths(rc.out_dir, rc.save_model);
    // --- the process mesh (dp = world / (tp·pp·cp)), the model, and the rules that tie them
    mesh_build(&mesh, rc.tp, rc.pp, rc.cp);
    output_dir_claim(rc.out_dir, rc.resume, mesh.world_group);  // (this run's alone: llmc/checkpoint.h)
    const ModelSource src = choose_model(rc);
    refuse_other_files(mesh.world_group, rc, src);
    validate_layout(rc, src.config, mesh);
    // --- the data, read in the step's shape
    StepShape shape = first_shape(rc, src, mesh);
    RunData data;
    open_run_data(&data, rc, &shape, mesh, src.config.vocab_size);
    refuse_other_shards(mesh.world_group, data);
    // --- the backend: threads, device, collectives, dtype
    Backend be;
    be.nthreads = start_threads(rc.threads);
    Ctx ctx = make_ctx(rc.device, mesh);
    set_kernel_choices(rc, &ctx.kernels);
    Profiler profiler;  // --profile: every copy of ctx (the model's, the storage owner's) reports to it
    if (rc.profile) ctx.prof = &profiler;
    be.use_nccl = start_collectives(rc, &mesh, ctx);
    be.precision = run_precision(rc, ctx);
    // --- the training, in the run's dtype
    const int rc_exit = be.precision.fp16 ? run_training<fp16>(rc, src, shape, &data, mesh, ctx, be)
                      : be.precision.bf16 ? run_training<bf16>(rc, src, shape, &data, mesh, ctx, be)
                                          : run_training<float>(rc, src, shape, &data, mesh, ctx, be);
    if (data.can_sample) tokenizer_free(&data.tk);
    mesh_finish(&mesh);
    return rc_exit;
}
