/*
train_gpt — trains a GPT-2 or Llama model. The main loop reads top to bottom:

  flags → model state (does it fit? llmc/planner.h) → micro-batch (does it fit?)
        → weights (preset, model file or checkpoint) → data → for each step:
      zero grads; for each micro-batch: forward (with the loss gradient), backward
      grad norm → clip → lr(step) → AdamW (or no update for a skipped step)
      log; every N steps: validation loss, HellaSwag, a sample, a checkpoint
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
    {"profile", "0", "0 | 1: time every op of the steps after the first (CUDA events on a GPU) and print, at the end, where a step's time goes: ms, % of the step, TFLOP/s, GB/s per op and per kind of communication", false},
    {"overlap", "1", "0 | 1: overlap each unit's gradient all-reduce (DDP) or reduce-scatter (ZeRO), ZeRO-1/2's parameter all-gathers and ZeRO-3's prefetch with compute (NCCL); 0 waits for each at once, to measure what overlap saves (same results)", false},
    {"flash-rows", "auto", "auto | 16 | 32: rows per warp in the 16-bit (bf16, fp16) flash attention kernels at head size 64 (queries in the forward and the dQ pass, keys in the dK/dV pass); 32 feeds each fragment read from shared memory to two tensor-core ops, at more registers per thread; the same results either way. auto: each pass times both at its first launch of a training step's size and keeps the faster (printed)", false},
    {"matmul-tune", "1", "0 | 1: on a GPU, each matmul of at least 1e10 flops (every layer's, at a real size) runs, at its first call, each algorithm cuBLASLt's heuristic offers for it, and keeps the fastest of those that wrote the same bits as the heuristic's first (by 2%: timing noise); so the results are those of 0, which takes the heuristic's first untimed (each decision printed)", false},
    {"classifier-staged", "auto", "auto | 0 | 1: on a GPU, whether the loss kernel (softmax, cross-entropy and dlogits in one pass over a row of logits) first copies its row into shared memory, reading device memory once instead of twice (where the row fits: GPT-2's 98 KB in bf16). auto: at its first call of 4096 rows or more it runs both ways on a copy of 4096 rows, hashing what each wrote, and keeps the staged kernel where it was faster and wrote the same bits (printed); the results are the same either way", false},
    {"flash-backward", "fused", "fused | split: on a compute capability 9.0 GPU with the wgmma kernels (--flash-wgmma auto or 1) at head size 64, the attention backward as one fused pass that computes S and dP once (5 products; dQ summed in fp32 in a fixed order, deterministic) or as two passes (dQ, then dK and dV: 7 products). The two give the same dK and dV bits, and dQ within bf16 rounding of each other; elsewhere ignored", false},
    {"flash-wgmma", "auto", "auto | 0 | 1: on a compute capability 9.0 GPU (H100, H200), whether the 16-bit (bf16, fp16) flash attention kernels issue warpgroup MMA (wgmma, 64 rows per warpgroup, two warpgroups a block) instead of mma.sync; elsewhere ignored. auto: each pass runs both ways at its first launches of a training step's size (its bits hashed) and keeps wgmma where it was faster and wrote the same bits every time (printed)", false},
};

static void print_help() {
    printf("usage: train_gpt [--flag value]...\n\nTrains GPT-2 on token shards. Flags (default in brackets):\n");
    for (const FlagDef& f : FLAGS)
        printf("  --%-20s %s%s%s%s\n", f.name, f.help, f.is_switch ? "" : " [", f.is_switch ? "" : f.def, f.is_switch ? "" : "]");
    printf("  --%-20s %s\n", "help", "show this message");
}

struct Flags {
    std::map<std::string, std::string> v;
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
template <class T>
static float evaluate(const Ctx& ctx, GPT<T>* g, DataLoader* val, long long seqs, int B, std::vector<int>& x,
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

template <class T>
static std::string generate(const Ctx& ctx, GPT<T>* g, Tokenizer* tk, const std::string& prompt, int n, int T_,
                            float temperature, int top_k, Rng* rng) {
    std::vector<int> toks = {tk->doc_token};  // a document's start
    tokenizer_encode(*tk, prompt, &toks);
    size_t start = toks.size();
    std::vector<float> logits(g->config.padded_vocab_size);
    for (int i = 0; i < n; i++) {
        int len = std::min((int)toks.size(), T_);
        const int* ctx_toks = toks.data() + toks.size() - len;
        gpt_infer(ctx, g, ctx_toks, nullptr, 1, len);  // (through the pipeline's stages, if any)
        gpt_infer_logits_row(ctx, g, len - 1, logits.data());
        toks.push_back(sample_token(logits.data(), g->config.vocab_size, temperature, top_k, rng));
    }
    return prompt + tokenizer_decode(*tk, toks.data() + start, toks.size() - start);
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    Mesh mesh;
    mesh_start(&mesh, &argc, &argv);  // first, so that only rank 0 reports a bad flag
    Flags f = parse_flags(argc, argv);

    // --- every value checked before anything large is allocated
    std::string device = f.choice("device", {"auto", "cpu", "cuda"});
    int B = (int)f.integer("batch-size", 1, 1 << 20, "auto");  // 0: auto, picked once the model state is allocated
    const bool auto_batch = B == 0;
    int T = (int)f.integer("seq-len", 1, 1 << 20);
    long long total_batch = f.integer("total-batch-tokens", -1, 1LL << 40);
    int steps = (int)f.integer("steps", 0, 1 << 30);
    LRSchedule sched;
    sched.lr = f.real("lr", 0, 10);
    sched.warmup = (int)f.integer("warmup-steps", 0, 1 << 30);
    sched.kind = f.choice("lr-schedule", {"cosine", "linear", "constant", "wsd"});
    sched.final_lr_frac = f.real("final-lr-frac", 0, 1);
    sched.cooldown_frac = f.real("cooldown-frac", 1e-6, 1);
    sched.total = steps;
    float wd = f.real("weight-decay", 0, 10), beta1 = f.real("beta1", 0, 0.999999), beta2 = f.real("beta2", 0, 0.999999);
    float eps = f.real("eps", 0, 1), grad_clip = f.real("grad-clip", 0, 1e30);
    const double skip_loss_z = f.real("skip-loss-z", 0, 1e6), skip_norm_z = f.real("skip-norm-z", 0, 1e6);
    const int max_skipped = f.integer("max-skipped-steps", 0, 1 << 30);
    if (eps <= 0) usage_error("--eps %g: must be above 0 (AdamW divides by sqrt(v) + eps: a parameter whose gradient is 0 would get 0/0)", eps);
    const int skip_window = (int)f.integer("skip-window", 2, 1 << 20);
    uint64_t seed = (uint64_t)f.integer("seed", 0, (1LL << 62));
    bool shuffle = f.integer("shuffle", 0, 1);
    std::string precision = f.choice("precision", {"auto", "fp32", "bf16", "fp16", "fp8"});
    const std::string& recompute_flag = f.choice("recompute", {RECOMPUTE_NAMES[0], RECOMPUTE_NAMES[1], RECOMPUTE_NAMES[2]});
    const Recompute recompute = (Recompute)(std::find(RECOMPUTE_NAMES, RECOMPUTE_NAMES + 3, recompute_flag) - RECOMPUTE_NAMES);
    int zero = (int)f.integer("zero", 0, 3), tp = (int)f.integer("tp", 1, 1 << 16), sp = (int)f.integer("sp", 0, 1);
    int pp = (int)f.integer("pp", 1, 1 << 16), vpp = (int)f.integer("vpp", 1, 1 << 16), cp = (int)f.integer("cp", 1, 1 << 16);
    const std::string& pp_schedule_flag = f.choice("pp-schedule", {PP_SCHEDULE_NAMES[0], PP_SCHEDULE_NAMES[1], PP_SCHEDULE_NAMES[2]});
    const PPSchedule pp_schedule = (PPSchedule)(std::find(PP_SCHEDULE_NAMES, PP_SCHEDULE_NAMES + 3, pp_schedule_flag) - PP_SCHEDULE_NAMES);
    const bool cp_zigzag = f.choice("cp-layout", {"contiguous", "zigzag"}) == "zigzag";
    std::string out_dir = f.str("output-dir");
    int ckpt_every = (int)f.integer("checkpoint-every", 0, 1 << 30);
    int ckpt_keep = (int)f.integer("keep-checkpoints", 0, 1 << 30);
    bool resume = f.integer("resume", 0, 1);
    int val_every = (int)f.integer("val-every", 0, 1 << 30), val_steps = (int)f.integer("val-steps", 0, 1 << 30);
    const long long val_tokens = f.integer("val-tokens", 0, 1LL << 50);
    int sample_every = (int)f.integer("sample-every", 0, 1 << 30), gen_tokens = (int)f.integer("gen-tokens", 0, 1 << 20);
    float temperature = f.real("temperature", 1e-6, 1e6);
    int top_k = (int)f.integer("top-k", 0, 1 << 30);
    bool save_bf16 = f.choice("save-precision", {"fp32", "bf16"}) == "bf16";
    int threads = (int)f.integer("threads", 0, 4096);
    int ignored_exp;
    const double loss_scale0 = f.real("loss-scale", 1, 1e30);
    if (std::frexp(loss_scale0, &ignored_exp) != 0.5) usage_error("--loss-scale %g: must be a power of two (the scaling then rounds nothing)", loss_scale0);
    const long long loss_scale_every = f.integer("loss-scale-every", 1, 1LL << 40);
    if (precision != "fp16" && (loss_scale0 != 65536 || loss_scale_every != 2000))
        usage_error("--loss-scale and --loss-scale-every are for --precision fp16 (got --precision %s, which needs no loss scaling)",
                    precision.c_str());
    const bool fp8_delayed = f.choice("fp8-scaling", {"current", "delayed"}) == "delayed";
    const int fp8_history = (int)f.integer("fp8-amax-history", 1, 1 << 16);
    if (precision != "fp8" && (fp8_delayed || fp8_history != 16))
        usage_error("--fp8-scaling and --fp8-amax-history are for --precision fp8 (got --precision %s)", precision.c_str());
    if (!fp8_delayed && fp8_history != 16) usage_error("--fp8-amax-history: needs --fp8-scaling delayed (current scaling keeps no history)");
    bool comm_stats = f.integer("comm-stats", 0, 1);
    bool overlap = f.integer("overlap", 0, 1);
    const bool profile = f.integer("profile", 0, 1);
    const std::string flash_rows_flag = f.choice("flash-rows", {"auto", "16", "32"});
    const int flash_rows = flash_rows_flag == "auto" ? 16 : std::stoi(flash_rows_flag);  // (auto: 16 until timed)
    const std::string flash_wgmma = f.choice("flash-wgmma", {"auto", "0", "1"});
    const std::string flash_backward = f.choice("flash-backward", {"fused", "split"});
    const bool matmul_tune = f.integer("matmul-tune", 0, 1);
    const std::string classifier_staged = f.choice("classifier-staged", {"auto", "0", "1"});
#ifdef LLMC_CUDA
    g_matmul_tune = matmul_tune;  // (llmc/matmul.cuh)
    g_classifier_staged = classifier_staged == "1";  // (llmc/fused_classifier.cuh)
    g_classifier_staged_auto = classifier_staged == "auto";
    g_flash_forward_rows = g_flash_dq_rows = g_flash_dkv_keys = flash_rows;  // (llmc/attention.cuh)
    g_flash_rows_auto = flash_rows_flag == "auto";
    g_flash_wgmma = flash_wgmma == "1";
    g_flash_wgmma_auto = flash_wgmma == "auto";
    g_flash_fused_backward = flash_backward == "fused";
#else
    (void)flash_rows; (void)flash_wgmma; (void)flash_backward; (void)matmul_tune; (void)classifier_staged;
#endif
    if (resume && out_dir.empty()) usage_error("--resume needs --output-dir (where the checkpoints are)");
    check_output_paths(out_dir, f.str("save-model"));  // (before anything is trained)

    // --- the process mesh: dp = world / (tp·pp·cp)
    mesh_build(&mesh, tp, pp, cp);
    if (sp == 1 && tp == 1) usage_error("--sp 1: sequence parallelism splits the positions over the tensor-parallel ranks; it needs --tp > 1");
    if (vpp > 1 && (pp == 1 || pp_schedule != PPSchedule::Interleaved))
        usage_error("--vpp %d: chunks of blocks are for the interleaved pipeline schedule; add --pp N (N > 1) --pp-schedule interleaved", vpp);
    if (pp > 1 && pp_schedule == PPSchedule::Interleaved && vpp == 1)
        usage_error("--pp-schedule interleaved: needs --vpp >= 2 chunks a stage (with one it is 1f1b)");
    const int dp = mesh.dp;

    // --- model config: a preset, a model file, or (on --resume) the checkpoint's model
    std::string model_spec = f.str("model"), resume_dir;
    bool from_file = false;
    GPTConfig config = model_config_from_spec(model_spec, (int)f.integer("vocab-size", 0, 1 << 20), &from_file);
    if (resume) {
        resume_dir = checkpoint_latest(out_dir);
        if (resume_dir.empty()) fatal("--resume: no checkpoint (step_*/) in '%s'", out_dir.c_str());
        GPTConfig saved = model_file_config((resume_dir + "/model.bin").c_str());
        if (!gpt_same_shape(saved, config)) {
            bool file = false;  // (a preset that differs only in V: name the flag that fixes it)
            char hint[64] = "";
            if (!from_file && saved.vocab_size != config.vocab_size &&
                gpt_same_shape(saved, model_config_from_spec(model_spec, saved.vocab_size, &file)))
                snprintf(hint, sizeof hint, " (resume with --vocab-size %d)", saved.vocab_size);
            usage_error("--resume: the checkpoint in '%s' holds a %s L=%d C=%d V=%d model, but --model %s is %s L=%d C=%d V=%d%s",
                        resume_dir.c_str(), saved.llama() ? "llama" : "gpt2", saved.num_layers, saved.channels, saved.vocab_size,
                        model_spec.c_str(), config.llama() ? "llama" : "gpt2", config.num_layers, config.channels, config.vocab_size,
                        hint);
        }
        from_file = false;
    }
    if (config.num_heads % tp != 0)
        usage_error("--tp %d: must divide the model's %d attention heads (each tp rank computes NH/tp of them)", tp, config.num_heads);
    if (config.kv_heads() % tp != 0)
        usage_error("--tp %d: must divide the model's %d key/value heads (each tp rank holds NKV/tp of them, whole groups)", tp,
                    config.kv_heads());
    if (config.ffn() % tp != 0)
        usage_error("--tp %d: must divide the model's %d MLP hidden features (each tp rank computes H/tp of them)", tp, config.ffn());
    if (config.padded_vocab_size % tp != 0)
        usage_error("--tp %d: must divide the model's padded vocabulary %d (each tp rank computes Vp/tp of the logits)", tp,
                    config.padded_vocab_size);
    if (T > config.max_seq_len) usage_error("--seq-len %d exceeds the model's maximum sequence length %d", T, config.max_seq_len);
    if (T % cp_granule(cp, cp_zigzag) != 0)
        usage_error("--cp %d --cp-layout %s: --seq-len %d must be a multiple of %d (each cp rank holds %s)", cp,
                    cp_zigzag ? "zigzag" : "contiguous", T, cp_granule(cp, cp_zigzag),
                    cp_zigzag ? "two of the sequence's 2*cp equal chunks" : "seq-len/cp consecutive positions");
    const int Tl = T / cp;  // the positions of each sequence this rank runs (context_parallel.h)
    if (pp > config.num_layers) usage_error("--pp %d: more stages than the model's %d blocks (each stage holds at least one)", pp, config.num_layers);
    if (pp > 1 && pp * vpp > config.num_layers)
        usage_error("--pp %d --vpp %d: %d virtual stages, more than the model's %d blocks (each chunk holds at least one)", pp, vpp,
                    pp * vpp, config.num_layers);
    const bool total_given = total_batch != -1;
    if (auto_batch && !total_given)
        usage_error("--batch-size auto: needs --total-batch-tokens (the step's tokens, which auto splits into the largest "
                    "micro-batches that fit)");
    if (auto_batch && total_batch > 0 && total_batch % ((long long)T * dp) != 0)
        usage_error("--batch-size auto: --total-batch-tokens %lld is not a multiple of seq-len*dp = %lld", total_batch, (long long)T * dp);
    if (auto_batch && pp > 1 && pp_schedule == PPSchedule::Interleaved && total_batch > 0 && total_batch % ((long long)T * dp * pp) != 0)
        usage_error("--batch-size auto --pp-schedule interleaved: --total-batch-tokens %lld is not a multiple of seq-len*dp*pp = %lld "
                    "(the step's micro-batches must be a multiple of --pp %d, whatever the batch size)", total_batch, (long long)T * dp * pp, pp);
    if (auto_batch && resume) B = (int)checkpoint_read_header(resume_dir).B;  // the resumed run's micro-batch
    if (total_batch == -1) total_batch = (long long)B * T * dp;

    // --- the micro-batch and the data cut into it. Shard headers are validated here, before the
    // model is allocated; --batch-size auto opens the data again once it has picked B (after the
    // model state: that is what it must fit beside), at first with micro-batches of one sequence.
    int accum = 0;
    DataLoader train_loader, val_loader;
    const bool has_val = !f.str("val-data").empty() && (val_tokens > 0 || val_steps > 0);
    if (has_val && val_tokens > 0 && val_tokens < T)
        usage_error("--val-tokens %lld: fewer than one sequence of --seq-len %d", val_tokens, T);
    long long val_seqs = 0;   // the sequences of T each evaluation reads (dataloader.h)
    bool val_capped = false;  // fewer than asked: all that --val-data holds
    auto open_data = [&](int b) {
        const long long tokens_per_micro = (long long)b * T * dp;
        if (total_batch <= 0 || total_batch % tokens_per_micro != 0)
            usage_error("--total-batch-tokens %lld is not a multiple of batch-size*seq-len*dp = %lld", total_batch, tokens_per_micro);
        accum = (int)(total_batch / tokens_per_micro);
        if (pp > 1 && pp_schedule == PPSchedule::Interleaved && accum % pp != 0)
            usage_error("--pp-schedule interleaved: the %d micro-batches a step (--total-batch-tokens / (batch-size*seq-len*dp)) "
                        "must be a multiple of --pp %d (Megatron's order sends pp of them through each chunk in turn)", accum, pp);
        dataloader_init(&train_loader, "--train-data", f.str("train-data"), b, T, dp, mesh.dp_rank, config.vocab_size, shuffle, seed);
        if (has_val) {  // opened in sequences (B = 1): its slots are then the sequences it holds
            dataloader_init(&val_loader, "--val-data", f.str("val-data"), 1, T, dp, mesh.dp_rank, config.vocab_size, false, seed);
            const long long asked = val_tokens > 0 ? val_tokens / T : (long long)val_steps * b * dp;
            val_seqs = std::min(asked, val_loader.slots);
            val_capped = asked > val_seqs;
        }
    };
    open_data(B > 0 ? B : 1);
    // for auto, the largest micro-batch the training data holds (the loader is open at B = 1):
    // one of B·T+1 tokens (validation pads its last micro-batches, so any B reads it)
    const long long data_most = !auto_batch ? 0 : train_loader.slots;
    ChoiceSet hellaswag;
    const bool has_hellaswag = !f.str("hellaswag").empty();
    if (has_hellaswag) {
        hellaswag = choice_set_load("--hellaswag", f.str("hellaswag"), config.vocab_size);
        if (hellaswag.longest_row > T)
            usage_error("--hellaswag: its longest example needs %d positions, more than --seq-len %d", hellaswag.longest_row, T);
    }
    Tokenizer tk;
    bool can_sample = sample_every > 0 && gen_tokens > 0;
    if (can_sample) {
        tokenizer_load(&tk, f.str("tokenizer").c_str());
        if ((int)tk.vocab.size() != config.vocab_size)
            usage_error("--sample-every: the tokenizer has %zu tokens but the model's vocabulary is %d", tk.vocab.size(), config.vocab_size);
    }

#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
    int nthreads = omp_get_max_threads();
#else
    int nthreads = 1;
#endif
    Ctx ctx = make_ctx(device, mesh);
    Profiler profiler;  // --profile: every copy of ctx (the model's, the storage owner's) reports to it
    if (profile) ctx.prof = &profiler;
    // --- the communication backend for GPU buffers: NCCL, or MPI staged through host memory
    std::string comm_backend = f.choice("comm", {"auto", "mpi", "nccl"});
    if (comm_backend == "nccl" && ctx.device != Device::CUDA) usage_error("--comm nccl: needs --device cuda (NCCL moves GPU buffers)");
    bool use_nccl = ctx.device == Device::CUDA && mesh.world > 1 &&
                    (comm_backend == "nccl" || (comm_backend == "auto" && comm_have_nccl() && mesh.local_size <= cuda_device_count()));
    const char* one_queue = getenv("CUDA_DEVICE_MAX_CONNECTIONS");  // (comm.h, "the ring": why)
    if (use_nccl && pp > 1 && one_queue && atoi(one_queue) == 1)
        usage_error("--pp %d over NCCL with CUDA_DEVICE_MAX_CONNECTIONS=1: every stream in one queue could hang the stages' "
                    "sends behind their receives; unset it (or --comm mpi)", pp);
    if (use_nccl) comm_nccl_init(&mesh, ctx);

    // fp8 is bf16 with the blocks' products in FP8 (llmc/fp8.cuh)
    const bool fp8_run = precision == "fp8", fp16_run = precision == "fp16";
    const bool bf16_run = precision == "bf16" || fp8_run || (precision == "auto" && ctx.device == Device::CUDA);
    if (fp8_run) {
        const std::string why = fp8_device_problem(ctx);
        if (!why.empty()) usage_error("--precision fp8: %s", why.c_str());
    }

    // The rest of main is written once and instantiated for the run's dtype floatX (llm.c's name):
    // float for --precision fp32, bf16 for --precision bf16 (and fp8), fp16 for --precision fp16
    // (common.h, model.h).
    auto train = [&](auto dtype_tag) -> int {
    using floatX = decltype(dtype_tag);
        // --- the model, its storage (data_parallel.h) and its weights
        GPT<floatX> model;
        gpt_build(&model, config, tp > 1 ? &mesh.tp_group : nullptr, sp == 1, pp > 1 ? &mesh.pp_group : nullptr,
                  cp > 1 ? &mesh.cp_group : nullptr, cp_zigzag, vpp);
        model.recompute = recompute;
        model.fp8 = fp8_run;
        if (fp8_delayed) fp8_delayed_init(ctx, &model.fp8_delayed, gpt_fp8_tensors(model), fp8_history);
        DataParallel<floatX> dpar;
        dp_layout(&dpar, &model, &mesh.grads(), zero, ctx);  // (dp × cp: both sum gradients)
        {   // does the state fit? (and what --zero 3 would take a rank, for the advice)
            DataParallel<floatX> at3;
            if (zero < 3) dp_layout(&at3, &model, &mesh.grads(), 3, ctx);
            plan_state(ctx, dp_memory(dpar), zero, mesh.grads().size, zero < 3 ? dp_memory(at3).total() : 0, mesh);
        }
        dp_alloc(&dpar);
        dpar.overlap = overlap;
        if (pp > 1 && config.tied) dpar.tied = &mesh.emb_group;  // the first and last stage's embeddings
        const DPMemory mem = dp_memory(dpar);
        const bool runs_forward = steps > 0 || has_val || has_hellaswag || can_sample;  // not a --steps 0 conversion
        if (runs_forward) {
            if (fp8_run) fp8_products_run<floatX>(ctx);  // (matmul.cuh: refused, the fallback's scratch joins the plan)
            const PPPlan stage{pp_schedule, pp, mesh.pp_rank, vpp};
            B = plan_batch<floatX>(ctx, model, B, T, dp, total_batch, total_given,
                                   mem.total(), mesh, data_most, pp > 1 ? &stage : nullptr);
            if (auto_batch && !resume) open_data(B);
        } else if (B == 0) {
            B = 1;  // a --steps 0 conversion reads no batch: any B would do
        }
        if (fp8_run) {  // every FP8 product's dimensions a multiple of 16 (fp8.cuh): the B·T rows, and a block's widths on this rank
            const std::string why = gpt_fp8_shape_problem(config, tp, B, Tl);
            if (!why.empty())
                usage_error("--precision fp8: %s (B*T = %d x %d%s); use --precision bf16, or a model and batch whose sizes are "
                            "multiples of 16", why.c_str(), B, Tl, tp > 1 ? "; the widths are one tp rank's" : "");
        }
        if (pp > 1) {  // the step's accum micro-batches: how many each chunk keeps alive at once, and the copies its sends keep (pipeline.h)
            model.slots = pp_slots(pp_schedule, pp, mesh.pp_rank, accum, vpp);
            model.pp_send_cap = pp_send_buffers(pp_schedule, pp, mesh.pp_rank, accum, vpp);
        }
        TrainState state;
        Rng sampler(seed, 0x5a3b1e);
        if (resume) {
            state = checkpoint_load(resume_dir, &dpar);
            if (state.B != B || state.T != T || state.total_batch != total_batch)
                usage_error("--resume: '%s' was written with --batch-size %lld --seq-len %lld --total-batch-tokens %lld; "
                            "resume with the same (got %d, %d, %lld)", resume_dir.c_str(), (long long)state.B,
                            (long long)state.T, (long long)state.total_batch, B, T, total_batch);
            train_loader.k = state.global_batches / dp;  // an exact division: both are step·D/(B·T)
            sampler.state = state.rng_state;
        } else if (from_file) {
            model_file_load(&dpar, model_spec.c_str());
        } else {
            // a batch of units drawn at a time, one per thread (each from its own streams: the
            // same values in any order; GPT-2 1558M's 1.5 G normals take ~35 s on one core); at
            // most 16 at once, ~2 GB of fp32 for 1558M on each rank of a node
            const int nu = gpt_num_units(config), batch = std::min({nu, nthreads, 16});
            std::vector<avec<float>> units(batch);
            for (int u0 = 0; u0 < nu; u0 += batch) {
                const int u1 = std::min(nu, u0 + batch);
                #pragma omp parallel for schedule(dynamic, 1)
                for (int u = u0; u < u1; u++) {
                    units[u - u0].resize(dpar.units[u].size);
                    gpt_init_unit(config, model.layout, u, seed, units[u - u0].data());
                }
                for (int u = u0; u < u1; u++) dp_set_unit(&dpar, u, units[u - u0].data());
            }
        }
        const std::string precision_note = fp8_run ? std::string("bf16 with the blocks' products in fp8") +
                                                         (fp8_delayed ? " (delayed scaling, amax history " + std::to_string(fp8_history) + ")" : "")
                                         : fp16_run ? "fp16 with dynamic loss scaling" : dtype_name<floatX>();
        // the device line's tail: recomputation (when on) and where checkpoints go
        const std::string run_note = (recompute == Recompute::None ? "" : std::string(", recompute ") + recompute_name(recompute)) +
                                     (out_dir.empty() ? "" : " -> " + out_dir);
        char arch_note[256] = "";
        if (config.llama()) {
            char scaled[96] = "";
            if (config.rope_scaling.factor)
                snprintf(scaled, sizeof(scaled), " scaled x%d (low %d, high %d, context %d)", config.rope_scaling.factor,
                         config.rope_scaling.low, config.rope_scaling.high, config.rope_scaling.original);
            snprintf(arch_note, sizeof(arch_note), "; llama: NKV=%d H=%d theta=%d%s (RMSNorm, RoPE, SwiGLU), %s", config.kv_heads(),
                     config.ffn(), config.rope_theta, scaled, config.tied ? "classifier tied to wte" : "lm_head apart from wte");
        }
        print0("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d, %.2fM parameters%s%s\n", config.num_layers, config.channels,
               config.num_heads, config.vocab_size, config.padded_vocab_size, config.max_seq_len, gpt_num_params(model) / 1e6,
               from_file ? " (from file)" : resume ? " (from checkpoint)" : "", arch_note);
        print0("data: %lld train tokens in %zu shard(s); B=%d T=%d dp=%d, %d micro-batch(es) per step = %lld tokens\n",
               train_loader.total_tokens, train_loader.shards.size(), B, T, dp, accum, total_batch);
        if (tp > 1)
            print0("tensor parallel: tp=%d, each rank %d of the %d heads and %d of the %d MLP features of every block, and %d of "
                   "the %d vocabulary rows (wte, the logits)\n", tp, config.num_heads / tp, config.num_heads, config.ffn() / tp, config.ffn(),
                   config.padded_vocab_size / tp, config.padded_vocab_size);
        // a stage's blocks: "[0, 2)", or with interleaving its chunks' "[0, 1) [2, 3)"
        auto blocks_of = [&](const ParamLayout& l) {
            std::string out;
            for (const LayerRange& r : l.chunks) out += (out.empty() ? "[" : " [") + std::to_string(r.first) + ", " + std::to_string(r.end) + ")";
            return out;
        };
        if (pp > 1) {
            const bool il = pp_schedule == PPSchedule::Interleaved;
            print0("pipeline parallel: pp=%d, schedule %s%s, %d micro-batches a step: idle %s = %.1f%% of it; blocks", pp,
                   PP_SCHEDULE_NAMES[(int)pp_schedule], il ? (", vpp=" + std::to_string(vpp) + " chunks a stage").c_str() : "", accum,
                   il ? "(pp-1)/(vpp*m+pp-1)" : "(pp-1)/(m+pp-1)", 100 * pp_bubble_formula(pp_schedule, pp, accum, vpp));
            for (int st = 0; st < pp; st++)
                print0(" %s%s", blocks_of(make_layout(config, 1, 0, pp, st, il ? vpp : 1)).c_str(), st + 1 < pp ? "," : " a stage\n");
        }
        if (pp > 1) {  // each stage's own line (every rank's, like its memory line below)
            std::string slots;
            for (int n : model.slots) slots += (slots.empty() ? "" : " + ") + std::to_string(n);
            fflush(stdout);
            printf("pipeline rank %d: stage %d, blocks %s%s%s, %s activation slot(s)%s, send copies at most %d + %d (forward + backward)\n",
                   mesh.rank, mesh.pp_rank, blocks_of(model.layout).c_str(), model.layout.stage == 0 ? ", the embeddings" : "",
                   !model.layout.has_head ? "" : config.tied ? ", lnf and the classifier (wte tied to stage 0's)" : ", lnf and the classifier (lm_head)",
                   slots.c_str(), model.slots.size() > 1 ? " (its chunks')" : "", model.pp_send_cap[0], model.pp_send_cap[1]);
            fflush(stdout);
        }
        if (cp > 1)
            print0("context parallel: cp=%d, %s: each rank holds %d of each sequence's %d positions (%s), ring attention over "
                   "the cp group; gradients summed over dp x cp = %d ranks\n", cp, cp_zigzag ? "zigzag" : "contiguous", Tl, T,
                   cp_zigzag ? "two chunks, r and 2*cp-1-r, of 2*cp" : "rank r: [r*T/cp, (r+1)*T/cp)", dp * cp);
        if (sp == 1)
            print0("sequence parallel: each tp rank holds %d of the %d positions of the residual stream and the LayerNorms\n",
                   (int)ceil_div((size_t)B * Tl, (size_t)tp), B * Tl);
        if (has_val)
            print0("validation: %lld sequences of %d = %lld tokens each evaluation%s\n", val_seqs, T, val_seqs * T,
                   val_capped ? " (all that --val-data holds)" : "");
        if (ctx.device == Device::CPU)
            print0("device: cpu, %d rank(s) x %d thread(s), %s, zero %d%s\n", mesh.world, nthreads, precision_note.c_str(), zero, run_note.c_str());
        else
            print0("device: cuda, %d rank(s)%s, %s, zero %d%s\n", mesh.world,
                   mesh.world == 1 ? "" : use_nccl ? (overlap ? " (collectives: nccl)" : " (collectives: nccl, not overlapped)")
                                                   : " (collectives: mpi, staged through host memory)",
                   precision_note.c_str(), zero, run_note.c_str());
        if (ctx.device == Device::CUDA) print0("gpu: %s\n", cuda_describe().c_str());
        const double peak = gpu_peak_flops(ctx), flops_tok = flops_per_token(config, T, gpt_num_params(model));
        fflush(stdout);
        const double gelu_scratch = gpt_gelu_scratch_bytes(model, B, Tl, ctx.device == Device::CUDA);
        const double attention_scratch = gpt_attention_scratch_bytes(model, B, Tl, ctx.device == Device::CUDA);
        printf("memory rank %d: params %lld B, grads %lld B, optimizer %lld B, working buffers %lld B, activations %lld B%s\n",
               mesh.rank, (long long)mem.params, (long long)mem.grads, (long long)mem.optimizer, (long long)mem.working,
               (long long)gpt_activation_bytes(model, B, Tl, recompute),
               (std::string(pp > 1 ? ", send copies " + std::to_string((long long)gpt_send_copy_bytes(model, B, Tl)) + " B" : "") +
                (fp8_run ? ", fp8 scratch " + std::to_string((long long)gpt_fp8_scratch_bytes(model, B, Tl)) + " B" : "") +
                (gelu_scratch ? ", gelu scratch " + std::to_string((long long)gelu_scratch) + " B" : "") +
                (attention_scratch ? ", attention scratch " + std::to_string((long long)attention_scratch) + " B" : "")).c_str());
        fflush(stdout);
        if (resume) print0("resumed from %s at step %lld (saved with dp=%lld zero=%lld tp=%lld pp=%lld vpp=%lld)\n", resume_dir.c_str(),
                           (long long)state.step, (long long)state.saved_dp, (long long)state.saved_zero, (long long)state.saved_tp,
                           (long long)state.saved_pp, (long long)state.saved_vpp);
        if (resume && fp8_delayed) {
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

        Logger log;
        if (mesh.rank == 0) logger_open(&log, f.str("log-file"), resume ? state.step : -1);
        std::vector<int> x((size_t)B * T), y((size_t)B * T);
        std::vector<int> xl((size_t)B * Tl), yl((size_t)B * Tl);  // this rank's positions of them (context parallelism)
        const std::vector<PosPiece> my_positions = cp_pieces(cp, mesh.cp_rank, cp_zigzag, Tl);
        auto next_batch = [&](int* xb, int* yb) {  // the next micro-batch's tokens and targets at this rank's positions
            if (cp == 1) { dataloader_next(&train_loader, xb, yb); return; }
            dataloader_next(&train_loader, x.data(), y.data());
            cp_take_positions(x.data(), B, T, my_positions, xb);
            cp_take_positions(y.data(), B, T, my_positions, yb);
        };
        const float dloss = 1.0f / ((float)B * T * accum * dp);  // the dp (× cp) sum of gradients is then the mean

        // the evaluations (every rank runs them: ZeRO-3 gathers parameters in each forward)
        auto run_evals = [&]() {
            EvalLog ev;
            const double t0 = now_seconds();
            if (has_val) { ev.has_val = true; ev.val_loss = evaluate(ctx, &model, &val_loader, val_seqs, B, x, y, mesh.dp_group); }
            if (has_hellaswag) {
                ChoiceResult r = choice_evaluate(ctx, &model, hellaswag, B, T, mesh.dp_group);
                ev.has_hellaswag = true;
                ev.hellaswag_correct = r.correct; ev.hellaswag_total = r.total; ev.hellaswag_loss = r.gold_loss;
            }
            ev.seconds = now_seconds() - t0;  // the results are on the host: the device's work is done
            return ev;
        };
        auto print_evals = [&](const EvalLog& ev) {
            if (ev.has_val) print0(" | val loss %.6f", ev.val_loss);
            if (ev.has_hellaswag)
                print0(" | hellaswag %.4f (%d/%d)", ev.hellaswag_acc(), ev.hellaswag_correct, ev.hellaswag_total);
            if (ev.has_val || ev.has_hellaswag) print0(" (eval %.1f s)", ev.seconds);
        };
        auto sample = [&](int step) {  // every rank runs it (ZeRO-3 gathers)
            std::string text = generate(ctx, &model, &tk, f.str("prompt"), gen_tokens, T, temperature, top_k, &sampler);
            print0("---- sample at step %d ----\n%s\n---------------------------\n", step, text.c_str());
        };
        if (steps == 0) {  // only evaluate the model as it is
            const int at = (int)state.step;
            if (!has_val && !has_hellaswag && !can_sample)
                print0("--steps 0: nothing to do (give --val-data, --hellaswag or --sample-every to evaluate the model)\n");
            EvalLog ev = run_evals();
            if (has_val || has_hellaswag) { print0("eval at step %d", at); print_evals(ev); print0("\n"); }
            fflush(stdout);
            logger_eval(&log, at, ev);
            if (can_sample) sample(at);
        }

        if (!out_dir.empty()) stop_signals_install();  // a stop request is then answered after the step, with a checkpoint
        int stop = 0;                                     // the signal that stopped the run (0: none)
        // the recent losses and norms a step is judged against (outliers.h), kept through a resume
        OutlierWindow loss_window, norm_window;
        loss_window.size = norm_window.size = skip_window;
        for (double v : state.loss_history) outlier_push(&loss_window, v);
        for (double v : state.norm_history) outlier_push(&norm_window, v);
        // fp16's loss scale (loss_scale.h), kept through a resume (history.bin)
        LossScale loss_scale;
        loss_scale.on = fp16_run;
        loss_scale.every = loss_scale_every;
        loss_scale.scale = state.loss_scale > 0 ? state.loss_scale : loss_scale0;
        loss_scale.clean = state.loss_scale > 0 ? state.loss_scale_clean : 0;
        const int first_step = (int)state.step + 1;
        Divergence divergence{max_skipped, skip_loss_z > 0, skip_norm_z > 0};  // (outliers.h)
        for (int step = first_step; step <= steps; step++) {
            // --profile measures the steps after the first (which sets up cuBLASLt and buffers)
            const bool measured = profile && (step > first_step || steps == first_step);
            if (measured) { ctx_sync(ctx); profile_step_begin(&profiler); }
            double t0 = now_seconds();
            comm_reset_stats(mesh.grads());
            comm_reset_stats(mesh.cp_group);
            comm_reset_stats(mesh.tp_group);
            comm_reset_stats(mesh.pp_group);
            comm_reset_stats(mesh.emb_group);
            dp_zero_grad(&dpar);
            model.fp8_delayed.record = true;  // (delayed scaling: this step's quantizations record their amaxes)
            // ---- train step: forward and backward over the micro-batches
            double loss_sum = 0.0;
            if (pp > 1)  // the micro-batches through the pipeline's stages, in its schedule (pipeline.h)
                loss_sum = pp_train_step(ctx, &model, &dpar, pp_schedule, accum, B, Tl, dloss * loss_scale_factor(loss_scale), next_batch);
            else for (int micro = 0; micro < accum; micro++) {
                dpar.last_micro = micro == accum - 1;
                next_batch(xl.data(), yl.data());
                gpt_forward(ctx, &model, xl.data(), yl.data(), B, Tl, dloss * loss_scale_factor(loss_scale));
                gpt_backward(ctx, &model, B, Tl);
                loss_sum += gpt_mean_loss(&model);  // waits for the loss copy alone: the backward is still running
            }
            // ---- the loss and the gradient norm, over all ranks
            { CommScope prof(ctx, mesh.grads(), "loss and norm sums"); comm_sum_doubles(mesh.grads(), &loss_sum, 1); }
            float loss = (float)(loss_sum / ((double)accum * dp * cp));  // (each cp rank's is the mean over its positions)
            const float scaled_norm = dp_grad_norm(&dpar);  // (of the gradients times S, with fp16)
            double fp8_saturated[2] = {-1, 0};  // (delayed scaling: the tensors that saturated, of how many; all ranks')
            if (model.fp8_delayed.on) {  // the step's amaxes, the max over the ranks that hold these blocks, enter the history
                // (here, where the norm has just emptied the GPU's queue: the copy waits for nothing)
                std::vector<float> amax = fp8_delayed_amaxes(ctx, model.fp8_delayed);
                comm_max_floats(mesh.grads(), amax.data(), (int)amax.size());
                fp8_saturated[0] = fp8_delayed_push(ctx, &model.fp8_delayed, amax);
                fp8_saturated[1] = model.fp8_delayed.n;
                model.fp8_delayed.record = false;
                comm_sum_doubles(mesh.tp_group, fp8_saturated, 2);  // (the other blocks' shards, and stages)
                comm_sum_doubles(mesh.pp_group, fp8_saturated, 2);
            }
            // ---- update, or skip: fp16's overflow, an outlier step, a diverged step
            const LossScaleStep scaling = loss_scale_step(&loss_scale, scaled_norm);
            if (loss_scale_floor_hit(scaling))
                fatal("step %d: the gradients are not finite even with the loss scale at 1 (fp16 overflows, or the run "
                      "diverged); use --precision bf16, or lower --lr", step);
            const float norm = (float)(scaled_norm / scaling.used);  // the gradients' own
            float lr = lr_at(sched, step - 1);
            const double loss_z = outlier_z(loss_window, loss), norm_z = outlier_z(norm_window, norm);
            outlier_push(&loss_window, loss);
            if (!scaling.overflow) outlier_push(&norm_window, norm);  // (an overflow says nothing about the norm)
            const bool loss_outlier = skip_loss_z > 0 && loss_z > skip_loss_z;
            const bool norm_outlier = !scaling.overflow && skip_norm_z > 0 && norm_z > skip_norm_z;
            const bool skipped = scaling.overflow || loss_outlier || norm_outlier;
            divergence_check(&divergence, step, loss, norm, skipped, loss_outlier || norm_outlier);  // (a diverged run stops here)
            if (skipped) dp_skip_update(&dpar);  // the same on every rank: they all hold the same loss and norm
            else dp_update(&dpar, lr, beta1, beta2, eps, wd, step, (float)(grad_clip_factor(norm, grad_clip) / scaling.used));
            // ---- log
            if (measured) ctx_sync(ctx);  // the step's GPU work, all of it inside its time
            double ms = (now_seconds() - t0) * 1000.0;
            if (measured) profile_step_end(&profiler, ms);
            double tok_s = total_batch / (ms / 1000.0);
            double mfu = peak > 0 ? tok_s / mesh.world * flops_tok / peak : -1.0;  // per GPU
            std::string comm_json = comm_stats_json(mesh);

            // ---- once in a while: evaluate, sample, checkpoint
            bool last = step == steps;
            bool do_eval = last || (val_every > 0 && step % val_every == 0);
            EvalLog ev = do_eval ? run_evals() : EvalLog{};
            print0("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, steps, loss, lr, norm, ms, tok_s);
            if (mfu >= 0) print0(" | mfu %.1f%%", 100 * mfu);
            if (fp16_run) print0(" | loss scale %g", scaling.used);
            if (fp8_saturated[0] > 0) print0(" | fp8 saturated %.0f of %.0f tensors", fp8_saturated[0], fp8_saturated[1]);
            if (skipped) {  // and why: the z that crossed its bound
                print0(" | update skipped:");
                if (scaling.overflow) print0(" fp16 overflow, loss scale %g -> %g", scaling.used, loss_scale.scale);
                if (loss_outlier) print0(" loss z %.1f > %g", loss_z, skip_loss_z);
                if (norm_outlier) print0(" norm z %.1f > %g", norm_z, skip_norm_z);
            }
            print_evals(ev);
            print0("\n");
            if (comm_stats) print0("  comm (bytes sent per rank, ring model): %s\n", comm_json.c_str());
            fflush(stdout);
            logger_step(&log, step, loss, lr, norm, tok_s, ms, mfu, skipped, ev, comm_json, fp16_run ? scaling.used : 0.0,
                        (int)fp8_saturated[0]);

            if (can_sample && (last || step % sample_every == 0)) sample(step);
            // ---- stop on a signal: a SIGTERM, SIGUSR1 or SIGINT that reached any rank stops all here, with a checkpoint
            stop = out_dir.empty() || last ? 0 : stop_signal_agreed(mesh.world_group);
            if (!out_dir.empty() && (last || stop || (ckpt_every > 0 && step % ckpt_every == 0))) {
                state.step = step; state.global_batches = train_loader.k * dp; state.rng_state = sampler.state;
                state.B = B; state.T = T; state.total_batch = total_batch;
                state.loss_history.assign(loss_window.values.begin(), loss_window.values.end());
                state.norm_history.assign(norm_window.values.begin(), norm_window.values.end());
                state.loss_scale = fp16_run ? loss_scale.scale : 0.0; state.loss_scale_clean = loss_scale.clean;
                checkpoint_save(out_dir, &dpar, state, mesh.world_group);
                if (mesh.rank == 0) checkpoint_prune(out_dir, ckpt_keep);
                print0("checkpoint: %s\n", checkpoint_dir(out_dir, step).c_str());
            }
            if (stop) {
                print0("stopped by %s after step %d of %d: run the same command with --resume to go on\n",
                       stop_signal_name(stop), step, steps);
                break;
            }
        }
        dp_params_wait_all(&dpar);  // the last update's all-gathers (ZeRO-1/2), before anything reads or frees them
        if (!f.str("save-model").empty()) {
            if (stop) {
                print0("--save-model: not written (the run stopped before its last step)\n");
            } else {
                model_file_save(&dpar, f.str("save-model"), save_bf16);
                print0("model saved to %s (%s)\n", f.str("save-model").c_str(), save_bf16 ? "bf16" : "fp32");
            }
        }
        if (profile && mesh.rank == 0) profile_report(profiler, stdout, peak);
        if (pp > 1) {  // (every rank's: pipeline.h's copies for its sends, each way's)
            size_t bytes = 0, kept[2] = {model.pp_sends[0].size(), model.pp_sends[1].size()};
            for (const auto& pool : model.pp_sends)
                for (const auto& o : pool) bytes += o.copy.bytes();
            fflush(stdout);
            printf("pipeline rank %d: %zu + %zu send buffer(s) (forward + backward; at most %d + %d), %s%s\n", mesh.rank, kept[0],
                   kept[1], model.pp_send_cap[0], model.pp_send_cap[1], format_bytes(bytes).c_str(),
                   ctx.device == Device::CUDA ? " of GPU memory" : "");
            fflush(stdout);
        }
        if (ctx.device == Device::CUDA)
            print0("peak GPU memory (model, activations, optimizer, buffers): %.1f MiB (%zu B)\n", g_gpu_bytes_peak / 1048576.0,
                   g_gpu_bytes_peak);
        logger_close(&log);
        if (can_sample) tokenizer_free(&tk);
        mesh_finish(&mesh);
        return stop ? 128 + stop : 0;  // the shell's code for a process the signal ended
    };
    return fp16_run ? train(fp16{}) : bf16_run ? train(bf16{}) : train(float{});
}
