/*
checkpoint.h — model files (llm.c's format) and training checkpoints (ours).

Model file (DESIGN §3.2): 256 int32 header [20240326, version, maxT, V, L, NH, C, Vp], then the
16 tensors in llm.c's tensor-major order, fp32 (version 3) or bf16 (version 5). Its size must be
exactly 1024 + Ψ·(4 or 2) bytes. In memory the parameters are layer-major (model.h), so load and
save convert. A bf16 file loads into fp32 masters exactly (bf16 ⊂ fp32) and saves back to the
same bytes; fp32 → bf16 rounds to nearest even.

Checkpoint: a directory DIR/step_NNNNNNNN/ written as DIR/step_NNNNNNNN.tmp/ and renamed into
place when complete (a crash leaves either the old checkpoints or the new one, never half of one):
  model.bin            the fp32 model file (loadable by llm.c and by --model)
  state_rank00000.bin  this rank's training state: int64 header [20241121, 1, step, loader
                       position, rng state, B, T, accumulation, Ψ], then AdamW m and v (fp32)
  manifest.json        step, layout and config, for people and tools
Resuming loads all of it, so the continued run is bit-identical to an uninterrupted one.

Tests: test/test_cli.sh (round trips, bad files), test/test_train.sh (resume bit-exactness).
*/
#pragma once
#include <filesystem>
#include <string>
#include "common.h"
#include "model.h"

static const int MODEL_MAGIC = 20240326;
static const int64_t STATE_MAGIC = 20241121;

// Reads and checks a model file's header. Returns its config; *bf16 tells the dtype.
inline GPTConfig model_file_config(const char* path, bool* bf16) {
    FILE* f = fopen_or_die(path, "rb");
    int h[256];
    fread_or_die(h, sizeof(int), 256, f, path);
    fclose(f);
    if (h[0] != MODEL_MAGIC) fatal("'%s' is not a model file: magic %d, expected %d", path, h[0], MODEL_MAGIC);
    if (h[1] != 3 && h[1] != 5) fatal("'%s': model file version %d is not supported (3 = fp32, 5 = bf16)", path, h[1]);
    GPTConfig c;
    c.max_seq_len = h[2]; c.vocab_size = h[3]; c.num_layers = h[4]; c.num_heads = h[5]; c.channels = h[6];
    c.padded_vocab_size = h[7];
    if (c.max_seq_len < 1 || c.vocab_size < 1 || c.num_layers < 1 || c.num_heads < 1 || c.channels < 1 ||
        c.channels % c.num_heads != 0 || c.padded_vocab_size < c.vocab_size)
        fatal("'%s': inconsistent model header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)", path, c.max_seq_len,
              c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size);
    *bf16 = h[1] == 5;
    long long expect = 1024 + (long long)make_layout(c).total * (*bf16 ? 2 : 4);
    long long actual = file_size_or_die(path);
    if (actual != expect)
        fatal("'%s': header describes a %lld-byte file (L=%d C=%d V=%d), but the file has %lld bytes",
              path, expect, c.num_layers, c.channels, c.vocab_size, actual);
    return c;
}

// Loads the weights of a model file into g (already built with the file's config).
inline void model_file_load(GPT* g, const char* path) {
    bool bf16;
    GPTConfig c = model_file_config(path, &bf16);
    if (!gpt_same_shape(c, g->config))
        fatal("'%s' does not match the model being loaded (file: L=%d C=%d NH=%d V=%d maxT=%d)", path,
              c.num_layers, c.channels, c.num_heads, c.vocab_size, c.max_seq_len);
    size_t n = g->layout.total;
    avec<float> file(n);
    FILE* f = fopen_or_die(path, "rb");
    fseek(f, 1024, SEEK_SET);
    if (bf16) {
        std::vector<uint16_t> h(n);
        fread_or_die(h.data(), 2, n, f, path);
        for (size_t i = 0; i < n; i++) file[i] = bf16_to_fp32(h[i]);
    } else fread_or_die(file.data(), 4, n, f, path);
    fclose(f);
    gpt_convert_layout(g->config, g->layout, g->params.data(), file.data(), false);
}

inline void model_file_save(const GPT& g, const std::string& path, bool bf16) {
    const GPTConfig& c = g.config;
    int h[256] = {0};
    h[0] = MODEL_MAGIC; h[1] = bf16 ? 5 : 3; h[2] = c.max_seq_len; h[3] = c.vocab_size; h[4] = c.num_layers;
    h[5] = c.num_heads; h[6] = c.channels; h[7] = c.padded_vocab_size;
    size_t n = g.layout.total;
    avec<float> file(n);
    gpt_convert_layout(c, g.layout, const_cast<float*>(g.params.data()), file.data(), true);
    std::string tmp = path + ".tmp";
    FILE* f = fopen_or_die(tmp.c_str(), "wb");
    fwrite_or_die(h, sizeof(int), 256, f, tmp.c_str());
    if (bf16) {
        std::vector<uint16_t> b(n);
        for (size_t i = 0; i < n; i++) b[i] = fp32_to_bf16(file[i]);
        fwrite_or_die(b.data(), 2, n, f, tmp.c_str());
    } else fwrite_or_die(file.data(), 4, n, f, tmp.c_str());
    if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0) fatal("cannot write model file '%s'", path.c_str());
}

// ----------------------------------------------------------------------------
// checkpoints

struct TrainState {
    int64_t step = 0;          // optimizer steps completed
    int64_t loader_pos = 0;    // DataLoader::k
    uint64_t rng_state = 0;    // the sampler's generator
    int64_t B = 0, T = 0, grad_accum = 0;
};

inline std::string checkpoint_dir(const std::string& out_dir, int64_t step) {
    char name[32]; snprintf(name, sizeof(name), "step_%08lld", (long long)step);
    return out_dir + "/" + name;
}

inline void checkpoint_save(const std::string& out_dir, const GPT& g, const TrainState& s) {
    namespace fs = std::filesystem;
    std::string final_dir = checkpoint_dir(out_dir, s.step), tmp = final_dir + ".tmp";
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    fs::remove_all(tmp, ec);
    if (!fs::create_directories(tmp, ec)) fatal("--output-dir: cannot create '%s': %s", tmp.c_str(), ec.message().c_str());
    model_file_save(g, tmp + "/model.bin", false);
    std::string sp = tmp + "/state_rank00000.bin";
    FILE* f = fopen_or_die(sp.c_str(), "wb");
    int64_t h[16] = {STATE_MAGIC, 1, s.step, s.loader_pos, (int64_t)s.rng_state, s.B, s.T, s.grad_accum,
                     (int64_t)g.layout.total};
    fwrite_or_die(h, sizeof(int64_t), 16, f, sp.c_str());
    fwrite_or_die(g.m.data(), 4, g.m.size(), f, sp.c_str());
    fwrite_or_die(g.v.data(), 4, g.v.size(), f, sp.c_str());
    if (fclose(f) != 0) fatal("cannot write '%s'", sp.c_str());
    const GPTConfig& c = g.config;
    std::string mp = tmp + "/manifest.json";
    f = fopen_or_die(mp.c_str(), "w");
    fprintf(f, "{\"step\": %lld, \"world_size\": 1, \"layout\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"cp\": 1, \"zero\": 0},\n"
               " \"model\": {\"max_seq_len\": %d, \"vocab_size\": %d, \"padded_vocab_size\": %d, \"num_layers\": %d, "
               "\"num_heads\": %d, \"channels\": %d},\n"
               " \"batch_size\": %lld, \"seq_len\": %lld, \"grad_accum\": %lld,\n"
               " \"files\": [\"model.bin\", \"state_rank00000.bin\"]}\n",
            (long long)s.step, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels,
            (long long)s.B, (long long)s.T, (long long)s.grad_accum);
    if (fclose(f) != 0) fatal("cannot write '%s'", mp.c_str());
    fs::remove_all(final_dir, ec);
    fs::rename(tmp, final_dir, ec);
    if (ec) fatal("cannot move checkpoint into place at '%s': %s", final_dir.c_str(), ec.message().c_str());
}

// The newest complete checkpoint directory in out_dir, or "" if there is none.
inline std::string checkpoint_latest(const std::string& out_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string best;
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
        std::string name = e.path().filename().string();
        if (e.is_directory() && name.rfind("step_", 0) == 0 && name.find(".tmp") == std::string::npos &&
            (best.empty() || name > fs::path(best).filename().string()))
            best = e.path().string();
    }
    return best;
}

// Loads the training state (and AdamW moments) of a checkpoint into g; the weights come
// from its model.bin via model_file_load.
inline TrainState checkpoint_load_state(const std::string& dir, GPT* g) {
    std::string sp = dir + "/state_rank00000.bin";
    FILE* f = fopen_or_die(sp.c_str(), "rb");
    int64_t h[16];
    fread_or_die(h, sizeof(int64_t), 16, f, sp.c_str());
    if (h[0] != STATE_MAGIC || h[1] != 1) fatal("'%s' is not a training-state file (magic %lld)", sp.c_str(), (long long)h[0]);
    if (h[8] != (int64_t)g->layout.total)
        fatal("'%s' holds state for %lld parameters, the model has %zu", sp.c_str(), (long long)h[8], g->layout.total);
    TrainState s;
    s.step = h[2]; s.loader_pos = h[3]; s.rng_state = (uint64_t)h[4]; s.B = h[5]; s.T = h[6]; s.grad_accum = h[7];
    fread_or_die(g->m.data(), 4, g->m.size(), f, sp.c_str());
    fread_or_die(g->v.data(), 4, g->v.size(), f, sp.c_str());
    fclose(f);
    return s;
}
