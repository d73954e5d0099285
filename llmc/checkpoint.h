/*
checkpoint.h — model files (llm.c's format) and training checkpoints (ours).

Model file: a 256-int32 header [20240326, version, maxT, V, L, NH, C, Vp] (a Llama's is longer),
then the tensors in llm.c's tensor-major order, fp32 (version 3) or bf16 (version 5). In memory
the parameters are layer-major, so load and save convert.

Checkpoint: DIR/step_NNNNNNNN/, written as step_NNNNNNNN.tmp/ and renamed once every rank has
written its part:

  model.bin             the fp32 master weights, as a model file
  state_rankNNNNN.bin   each rank's chunk of AdamW's m and v, and where the data stood
  history.bin           the outlier windows and fp16's loss scale; fp8_history.bin: FP8's amaxes
  manifest.json         step, layout, config, and the run's settings (--resume names those changed)

A resume is bit-identical to an uninterrupted run; any dp, ZeRO stage, tp, pp or vpp can resume.
A stop signal ends every rank after the same step, with a checkpoint. Nothing non-finite is written.

Main functions: model_file_config, model_file_load, model_file_save, checkpoint_save, checkpoint_load,
checkpoint_prune, checkpoint_room and checkpoint_make_room (a full disk), stop_signals_install.

Tests: test/test_cli.sh (round trips, bad files, a full disk), test/test_train.sh (resume,
signals), test/test_dp.sh, test/test_tp.sh, test/test_pp.sh (sharded checkpoints, resharding).
More: docs/formats.md, docs/training.md.
*/
#pragma once
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <iterator>
#include <random>
#include <string>
#include "common.h"
#include "model.h"
#include "comm.h"
#include "data_parallel.h"
#include "checksum.h"

static const int MODEL_MAGIC = 20240326, LLAMA_MODEL_MAGIC = 20261124;
static const int64_t STATE_MAGIC = 20241121;

// Reads and checks a model file's header. Returns its config; *file_bf16 (if given) tells the dtype.
inline GPTConfig model_file_config(const char* path, bool* file_bf16 = nullptr) {
    FILE* f = fopen_or_die(path, "rb");
    int h[256];
    fread_or_die(h, sizeof(int), 256, f, path);
    fclose(f);
    if (h[0] != MODEL_MAGIC && h[0] != LLAMA_MODEL_MAGIC)
        fatal("'%s' is not a model file: magic %d, expected %d (GPT-2) or %d (Llama)", path, h[0], MODEL_MAGIC, LLAMA_MODEL_MAGIC);
    if (h[1] != 3 && h[1] != 5) fatal("'%s': model file version %d is not supported (3 = fp32, 5 = bf16)", path, h[1]);
    // every field within what a real model has, so that the size arithmetic below cannot overflow
    const struct { const char* name; int v, lo, hi; } fields[] = {
        {"maxT", h[2], 1, 1 << 20}, {"V", h[3], 1, 1 << 24}, {"L", h[4], 1, 1 << 12}, {"NH", h[5], 1, 1 << 12}, {"C", h[6], 1, 1 << 17},
        {"Vp", h[7], 1, 1 << 24}};
    for (const auto& fl : fields)
        if (fl.v < fl.lo || fl.v > fl.hi)
            fatal("'%s': model header's %s = %d is outside [%d, %d]", path, fl.name, fl.v, fl.lo, fl.hi);
    if (h[0] == LLAMA_MODEL_MAGIC && (h[8] < 1 || h[8] > (1 << 12) || h[9] < 1 || h[9] > (1 << 20)))
        fatal("'%s': Llama header's NKV = %d or H = %d is outside [1, 4096] or [1, 1048576]", path, h[8], h[9]);
    GPTConfig c;
    c.max_seq_len = h[2]; c.vocab_size = h[3]; c.num_layers = h[4]; c.num_heads = h[5]; c.channels = h[6];
    c.padded_vocab_size = h[7];
    if (h[0] == LLAMA_MODEL_MAGIC) {
        c.arch = Arch::Llama; c.num_kv_heads = h[8]; c.hidden = h[9]; c.rope_theta = h[10]; c.tied = h[11] == 0;
        if (h[11] != 0 && h[11] != 1) fatal("'%s': Llama header's untied flag is %d (0 or 1)", path, h[11]);
        if (h[12] != 0) c.rope_scaling = {h[12], h[13], h[14], h[15]};  // (else none: the defaults)
        if (h[12] != 0 && (h[12] < 1 || h[13] < 1 || h[14] <= h[13] || h[15] < 1))
            fatal("'%s': Llama header's RoPE scaling (factor %d, low %d, high %d, original context %d) needs factor >= 1, "
                  "1 <= low < high, context >= 1 (or factor 0: none)", path, h[12], h[13], h[14], h[15]);
    }
    if (c.max_seq_len < 1 || c.vocab_size < 1 || c.num_layers < 1 || c.num_heads < 1 || c.channels < 1 ||
        c.channels % c.num_heads != 0 || c.padded_vocab_size < c.vocab_size)
        fatal("'%s': inconsistent model header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)", path, c.max_seq_len,
              c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size);
    if (c.llama() && (c.kv_heads() < 1 || c.num_heads % c.kv_heads() != 0 || c.hidden < 1 || c.rope_theta < 1 || c.head_dim() % 2))
        fatal("'%s': inconsistent Llama header (NH=%d NKV=%d H=%d theta=%d hd=%d: NKV must divide NH, hd be even)", path,
              c.num_heads, c.kv_heads(), c.hidden, c.rope_theta, c.head_dim());
    if (file_bf16) *file_bf16 = h[1] == 5;
    long long expect = 1024 + (long long)make_layout(c).total * (h[1] == 5 ? 2 : 4);
    long long actual = file_size_or_die(path);
    if (actual != expect)
        fatal("'%s': header describes a %lld-byte file (L=%d C=%d V=%d), but the file has %lld bytes",
              path, expect, c.num_layers, c.channels, c.vocab_size, actual);
    return c;
}

// Reads (or writes) unit u of an open model file from (into) unit, converting between the file's
// tensor-major order and the unit's layer-major one (params.h: unit_file_pieces). With tensor
// parallelism the unit is this rank's slice; a rank other than tp rank 0 writes only the pieces
// that are its own (the replicated ones are tp rank 0's to write).
inline void model_file_unit_io(FILE* f, const char* path, const GPTConfig& c, const ParamLayout& p, int u, float* unit,
                               bool write, bool file_bf16) {
    std::vector<uint16_t> h;
    if (write && u == 0 && p.stage != 0) return;  // (the last pipeline stage's copy of the embeddings: stage 0 writes them)
    for (const FilePiece& pc : unit_file_pieces(c, p, u)) {
        if (write && pc.replicated && p.tp_rank != 0) continue;
        fseek(f, 1024 + (long)(pc.file_off * (file_bf16 ? 2 : 4)), SEEK_SET);
        float* x = unit + pc.unit_off;
        if (!file_bf16) {
            if (write) fwrite_or_die(x, 4, pc.n, f, path); else fread_or_die(x, 4, pc.n, f, path);
            continue;
        }
        h.resize(pc.n);
        if (write) {
            for (size_t i = 0; i < pc.n; i++) h[i] = fp32_to_bf16(x[i]);
            fwrite_or_die(h.data(), 2, pc.n, f, path);
        } else {
            fread_or_die(h.data(), 2, pc.n, f, path);
            for (size_t i = 0; i < pc.n; i++) x[i] = bf16_to_fp32(h[i]);
        }
    }
}

inline void model_file_write_header(FILE* f, const char* path, const GPTConfig& c, bool file_bf16) {
    int h[256] = {0};
    h[0] = c.llama() ? LLAMA_MODEL_MAGIC : MODEL_MAGIC; h[1] = file_bf16 ? 5 : 3; h[2] = c.max_seq_len; h[3] = c.vocab_size;
    h[4] = c.num_layers; h[5] = c.num_heads; h[6] = c.channels; h[7] = c.padded_vocab_size;
    if (c.llama()) { h[8] = c.kv_heads(); h[9] = c.ffn(); h[10] = c.rope_theta; h[11] = c.tied ? 0 : 1; }
    if (c.llama() && c.rope_scaling.factor)
        h[12] = c.rope_scaling.factor, h[13] = c.rope_scaling.low, h[14] = c.rope_scaling.high, h[15] = c.rope_scaling.original;
    fwrite_or_die(h, sizeof(int), 256, f, path);
}

// Loads a model file into the data-parallel storage (each rank keeps what its stage keeps).
template <class floatX> inline void model_file_load(DataParallel<floatX>* d, const char* path) {
    bool file_bf16;
    GPTConfig c = model_file_config(path, &file_bf16);
    const GPT<floatX>& g = *d->g;
    if (!gpt_same_shape(c, g.config))
        fatal("'%s' does not match the model being loaded (file: %s L=%d C=%d NH=%d NKV=%d V=%d maxT=%d)", path,
              c.llama() ? "llama" : "gpt2", c.num_layers, c.channels, c.num_heads, c.kv_heads(), c.vocab_size, c.max_seq_len);
    sidecar_verify(path);  // (its PATH.crc32c, where it has one)
    FILE* f = fopen_or_die(path, "rb");
    avec<float> unit;
    for (int u = 0; u < gpt_num_units(c); u++) {
        unit.resize(d->units[u].size);
        model_file_unit_io(f, path, g.config, g.layout, u, unit.data(), false, file_bf16);
        dp_set_unit(d, u, unit.data());
    }
    fclose(f);
}

// The outputs are checked before the first step, so that a run never trains for hours and then
// fails to save: --save-model's directory exists and is writable, and the path is no directory;
// --output-dir is created now (it may exist) and is a writable directory. Every rank checks the
// same paths, so all stop together (usage_error: exit 2, one line).
inline void check_output_paths(const std::string& out_dir, const std::string& save_model) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!save_model.empty()) {
        const fs::path dir = fs::path(save_model).parent_path().empty() ? fs::path(".") : fs::path(save_model).parent_path();
        if (fs::is_directory(save_model, ec)) usage_error("--save-model %s: is a directory (a file name is expected)", save_model.c_str());
        if (!fs::is_directory(dir, ec)) usage_error("--save-model %s: its directory '%s' does not exist", save_model.c_str(), dir.c_str());
        if (access(dir.c_str(), W_OK) != 0)
            usage_error("--save-model %s: cannot write in '%s' (%s)", save_model.c_str(), dir.c_str(), strerror(errno));
    }
    if (!out_dir.empty()) {
        fs::create_directories(out_dir, ec);
        if (!fs::is_directory(out_dir, ec))
            usage_error("--output-dir %s: cannot create it (%s)", out_dir.c_str(), ec ? ec.message().c_str() : "a file is in the way");
        if (access(out_dir.c_str(), W_OK) != 0) usage_error("--output-dir %s: cannot write in it (%s)", out_dir.c_str(), strerror(errno));
    }
}

// Nothing non-finite is ever saved: a diverged run's weights or AdamW state stop the save, one
// line naming the file (the files saved before stay as they were).
inline void refuse_non_finite(const float* x, size_t n, const std::string& path, const char* what) {
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite(x[i])) fatal("'%s' not written: %s hold a non-finite value (%g at element %zu): the run diverged", path.c_str(), what, x[i], i);
}

// Writes the model as an llm.c model file from dp rank 0 (written to PATH.tmp, then renamed), and
// its CRC32C beside it in PATH.crc32c (checksum.h).
// Collective: where the weights are sharded (data_parallel.h: dp_get_unit) every dp rank takes
// part in gathering each unit. The weights written are the fp32 master. With tensor (pipeline)
// parallelism the dp rank 0 of each tp rank (pipeline stage) writes its slices (its units) into
// the one file (disjoint ranges of it): tp rank 0 of stage 0 creates it, the others open it once
// it exists (the barriers: over pp, then tp), and it renames it when all are done.
template <class floatX> inline void model_file_save(DataParallel<floatX>* d, const std::string& path, bool file_bf16) {
    const GPT<floatX>& g = *d->g;
    const bool tp = g.par.tp.size() > 1, creator = d->rank == 0 && g.layout.tp_rank == 0 && g.layout.stage == 0;
    std::string tmp = path + ".tmp";
    FILE* f = nullptr;
    if (creator) {
        f = fopen_or_die(tmp.c_str(), "wb");
        model_file_write_header(f, tmp.c_str(), g.config, file_bf16);
        if (fflush(f) != 0) fatal("cannot write model file '%s'", tmp.c_str());
    }
    if (g.par.pp) comm_barrier(*g.par.pp);
    if (tp) comm_barrier(*g.par.tp.group);
    if (d->rank == 0 && !creator) f = fopen_or_die(tmp.c_str(), "r+b");
    avec<float> unit;
    for (int u = 0; u < gpt_num_units(g.config); u++) {
        unit.resize(d->units[u].size);
        dp_get_unit(d, u, unit.data());
        if (f) refuse_non_finite(unit.data(), unit.size(), path, "the weights");
        if (f) model_file_unit_io(f, tmp.c_str(), g.config, g.layout, u, unit.data(), true, file_bf16);
    }
    if (f && !close_synced(f)) fatal("cannot write model file '%s'", tmp.c_str());
    if (tp) comm_barrier(*g.par.tp.group);
    if (g.par.pp) comm_barrier(*g.par.pp);
    if (creator) {  // its checksum beside it (checksum.h), each renamed into place, then their directory synced
        const std::string side = path + ".crc32c";
        sidecar_write(tmp, side + ".tmp");
        if (rename(tmp.c_str(), path.c_str()) != 0 || rename((side + ".tmp").c_str(), side.c_str()) != 0)
            fatal("cannot write model file '%s': %s", path.c_str(), strerror(errno));
        sync_dir(std::filesystem::path(path).parent_path().empty() ? "." : std::filesystem::path(path).parent_path().string());
    }
}

// ----------------------------------------------------------------------------
// checkpoints

// The settings that make a training what it is, beyond the model and the batch shape (which a
// resume must keep): (flag, value) pairs. Each checkpoint's manifest holds its run's, so that a
// resume can name those that changed (checkpoint_settings_changed).
using RunSettings = std::vector<std::pair<std::string, std::string>>;

struct TrainState {
    int64_t step = 0;            // optimizer steps completed
    int64_t global_batches = 0;  // micro-batches consumed by all dp ranks together (loader k·dp)
    uint64_t rng_state = 0;      // the sampler's generator
    int64_t B = 0, T = 0, total_batch = 0;
    int64_t saved_dp = 1, saved_zero = 0, saved_tp = 1, saved_pp = 1, saved_vpp = 1;
    bool same_layout = true;  // (checkpoint_load) saved with this run's tp, pp and vpp
    std::vector<double> loss_history, norm_history;  // outliers.h's windows, oldest first
    double loss_scale = 0.0;      // fp16's loss scale S (loss_scale.h; 0: none saved)
    int64_t loss_scale_clean = 0; // and its clean steps since the last change
    int64_t fp8_steps = -1;       // the steps FP8 delayed scaling's history had recorded (-1: no history loaded)
    RunSettings settings;         // the run's settings, in the manifest (none in a checkpoint from before them)
};
static const int64_t HISTORY_MAGIC = 20261123, FP8_HISTORY_MAGIC = 20261125;

inline std::string checkpoint_dir(const std::string& out_dir, int64_t step) {
    char name[32]; snprintf(name, sizeof(name), "step_%08lld", (long long)step);
    return out_dir + "/" + name;
}
// dp rank `rank`'s state file; with tensor parallelism (tp > 1) one per tp rank and dp rank,
// with pipeline parallelism (pp > 1) one per stage, tp rank and dp rank.
inline std::string state_file(const std::string& dir, int rank, int tp = 1, int tp_rank = 0, int pp = 1, int stage = 0) {
    char name[64];
    if (pp > 1) snprintf(name, sizeof(name), "/state_pp%03d_tp%03d_rank%05d.bin", stage, tp_rank, rank);
    else if (tp > 1) snprintf(name, sizeof(name), "/state_tp%03d_rank%05d.bin", tp_rank, rank);
    else snprintf(name, sizeof(name), "/state_rank%05d.bin", rank);
    return dir + name;
}
// The FP8 amax history of tp rank tp_rank of stage `stage` (one file for the ranks that hold those blocks).
inline std::string fp8_history_file(const std::string& dir, int tp = 1, int tp_rank = 0, int pp = 1, int stage = 0) {
    char name[64];
    if (pp > 1) snprintf(name, sizeof(name), "/fp8_history_pp%03d_tp%03d.bin", stage, tp_rank);
    else if (tp > 1) snprintf(name, sizeof(name), "/fp8_history_tp%03d.bin", tp_rank);
    else snprintf(name, sizeof(name), "/fp8_history.bin");
    return dir + name;
}

// The state file of dp rank r holds, for every unit u, its chunk r (of N = dp) of AdamW's m,
// padded to ⌈S_u/N⌉ elements, then the same for v (with tensor parallelism, of the units of
// its tp rank's slice: header[11] = tp; of its pipeline stage's units: header[12] = pp). Chunk r lies in the file at element
// offset Σ_{v<u} ⌈S_v/N⌉ (m) and that plus Σ_all ⌈S_v/N⌉ (v), after the 128-byte header.
static const int STATE_HEADER = 16;  // int64s

// The manifest's "settings": {"lr": "0.0003", ...}, and back. Only quotes and backslashes are
// escaped: the values are flag values and counts, written by this code.
inline std::string settings_json(const RunSettings& settings) {
    std::string out;
    auto quoted = [&](const std::string& v) {
        out += '"';
        for (char ch : v) out += ch == '"' || ch == '\\' ? std::string{'\\', ch} : std::string{ch};
        out += '"';
    };
    for (size_t i = 0; i < settings.size(); i++) {
        out += i ? ", " : "";
        quoted(settings[i].first), out += ": ", quoted(settings[i].second);
    }
    return out;
}
inline RunSettings settings_from_manifest(const std::string& dir) {
    RunSettings settings;
    std::ifstream in(dir + "/manifest.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t i = text.find("\"settings\": {");
    if (i == std::string::npos) return settings;  // (a checkpoint from before them)
    i += 13;
    auto quoted = [&](std::string* v) {  // reads "…" at i, or fails
        while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == ':')) i++;
        if (i >= text.size() || text[i] != '"') return false;
        for (i++; i < text.size() && text[i] != '"'; i++) *v += text[i] == '\\' && i + 1 < text.size() ? text[++i] : text[i];
        return i++ < text.size();
    };
    for (std::string k, v; quoted(&k) && quoted(&v); k.clear(), v.clear()) settings.emplace_back(k, v);
    return settings;
}
// "--lr 0.0003 → 0.001, --shuffle 0 → 1" for the settings that differ ("" where none does). A
// setting the checkpoint does not have is not compared.
inline std::string checkpoint_settings_changed(const RunSettings& saved, const RunSettings& now) {
    std::string out;
    for (const auto& [name, value] : now)
        for (const auto& [old_name, old_value] : saved)
            if (old_name == name && old_value != value)
                out += (out.empty() ? "--" : ", --") + name + " " + old_value + " → " + value;
    return out;
}

// One rank's state file: a header (the step, where the data stands, the layout), then its chunk
// of AdamW's m and v for each unit, zero-padded to ⌈S/N⌉.
template <class floatX>
inline void state_file_write(const std::string& path, DataParallel<floatX>* d, const TrainState& s) {
    const ParamLayout& l = d->g->layout;
    const int64_t h[STATE_HEADER] = {STATE_MAGIC, 2, s.step, s.global_batches, (int64_t)s.rng_state, s.B, s.T, s.total_batch,
                                     (int64_t)l.total, d->N, d->zero, l.tp, l.pp, l.vpp()};
    FILE* f = header_file_open(path, h);
    std::vector<float> chunk;  // host copy of one chunk
    for (Buf<float>* buf : {&d->m, &d->v})
        for (size_t u = 0; u < d->units.size(); u++) {
            size_t S = d->units[u].size, b = chunk_begin(S, d->N, d->rank), e = chunk_end(S, d->N, d->rank);
            chunk.assign(chunk_size(S, d->N), 0.0f);
            if (e > b) ctx_copy(d->ctx, chunk.data(), dp_opt_at(d, *buf, (int)u, b), (e - b) * sizeof(float));
            refuse_non_finite(chunk.data(), chunk.size(), path, "AdamW's moments");
            if (!chunk.empty()) fwrite_or_die(chunk.data(), 4, chunk.size(), f, path.c_str());
        }
    header_file_close(f, path);
}

// FP8's amax history of one (tp, pp) group: a header, then the last min(steps, H) steps' amaxes.
inline void fp8_history_write(const std::string& path, const Fp8Delayed& fd) {
    const std::vector<float> amaxes = fp8_delayed_saved(fd);
    const int64_t h[STATE_HEADER] = {FP8_HISTORY_MAGIC, 1, fd.steps, fd.H, fd.n, (int64_t)std::min<long long>(fd.steps, fd.H)};
    FILE* f = header_file_open(path, h);
    if (!amaxes.empty()) fwrite_or_die(amaxes.data(), sizeof(float), amaxes.size(), f, path.c_str());
    header_file_close(f, path);
}

// history.bin: a header (the window sizes, fp16's loss scale and its clean steps), then the
// outlier windows of losses and of gradient norms.
inline void history_write(const std::string& path, const TrainState& s) {
    int64_t scale_bits;
    memcpy(&scale_bits, &s.loss_scale, 8);
    const int64_t h[STATE_HEADER] = {HISTORY_MAGIC, 2, (int64_t)s.loss_history.size(), (int64_t)s.norm_history.size(), scale_bits,
                                     s.loss_scale_clean};
    FILE* f = header_file_open(path, h);
    for (const std::vector<double>* v : {&s.loss_history, &s.norm_history})
        if (!v->empty()) fwrite_or_die(v->data(), sizeof(double), v->size(), f, path.c_str());
    header_file_close(f, path);
}

// manifest.json: the step, the layout, the model's config, the batch, the run's settings, and
// every file of the checkpoint.
template <class floatX>
inline void manifest_write(const std::string& path, DataParallel<floatX>* d, const TrainState& s, int world_size) {
    const GPTConfig& c = d->g->config;
    const int tp = d->g->layout.tp, pp = d->g->layout.pp;
    FILE* f = fopen_or_die(path.c_str(), "w");
    fprintf(f, "{\"step\": %lld, \"world_size\": %d, \"precision\": \"%s\", \"layout\": {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": 1, \"zero\": %d},\n"
               " \"model\": {\"arch\": \"%s\", \"max_seq_len\": %d, \"vocab_size\": %d, \"padded_vocab_size\": %d, \"num_layers\": %d, "
               "\"num_heads\": %d, \"channels\": %d, \"num_kv_heads\": %d, \"hidden\": %d, \"rope_theta\": %d, \"tied\": %s},\n"
               " \"batch_size\": %lld, \"seq_len\": %lld, \"total_batch_tokens\": %lld,\n"
               " \"settings\": {%s},\n"
               " \"files\": [\"model.bin\", \"model.bin.crc32c\", \"history.bin\"",
            (long long)s.step, world_size, d->g->fp8 ? "fp8" : dtype_name<floatX>(), d->N, tp, pp, d->zero, c.llama() ? "llama" : "gpt2",
            c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels, c.kv_heads(), c.ffn(),
            c.llama() ? c.rope_theta : 0, c.tied ? "true" : "false", (long long)s.B, (long long)s.T, (long long)s.total_batch,
            settings_json(s.settings).c_str());
    for (int q = 0; q < pp; q++)
        for (int t = 0; t < tp; t++) {
            for (int r = 0; r < d->N; r++) fprintf(f, ", \"%s\"", state_file("", r, tp, t, pp, q).substr(1).c_str());
            if (d->g->fp8_delayed.on) fprintf(f, ", \"%s\"", fp8_history_file("", tp, t, pp, q).substr(1).c_str());
        }
    fprintf(f, "]}\n");
    if (!close_synced(f)) fatal("cannot write '%s'", path.c_str());
}

// Collective over the world: every rank writes its state file, rank 0 the manifest and the
// history, dp rank 0 (of each tp rank) the model, into DIR/step_N.tmp, renamed to DIR/step_N
// when all are written.
template <class floatX>
inline void checkpoint_save(const std::string& out_dir, DataParallel<floatX>* d, const TrainState& s, Group& world) {
    namespace fs = std::filesystem;
    std::string final_dir = checkpoint_dir(out_dir, s.step), tmp = final_dir + ".tmp";
    std::error_code ec;
    const int tp = d->g->layout.tp, tp_rank = d->g->layout.tp_rank, pp = d->g->layout.pp, stage = d->g->layout.stage;
    if (world.rank == 0) {
        fs::create_directories(out_dir, ec);
        fs::remove_all(tmp, ec);
        if (!fs::create_directories(tmp, ec)) fatal("--output-dir: cannot create '%s': %s", tmp.c_str(), ec.message().c_str());
    }
    comm_barrier(world);
    // every rank its part, into the .tmp directory
    model_file_save(d, tmp + "/model.bin", false);
    state_file_write(state_file(tmp, d->rank, tp, tp_rank, pp, stage), d, s);
    if (d->g->fp8_delayed.on && d->rank == 0)  // (every rank of the group holds the same history)
        fp8_history_write(fp8_history_file(tmp, tp, tp_rank, pp, stage), d->g->fp8_delayed);
    if (world.rank == 0) {
        history_write(tmp + "/history.bin", s);
        manifest_write(tmp + "/manifest.json", d, s, world.size);
    }
    comm_barrier(world);
    // all written: move the checkpoint into place
    if (world.rank == 0) {  // (every file is fsynced: then its directory, the rename, and the rename's directory)
        sync_dir(tmp);
        fs::remove_all(final_dir, ec);
        fs::rename(tmp, final_dir, ec);
        if (ec) fatal("cannot move checkpoint into place at '%s': %s", final_dir.c_str(), ec.message().c_str());
        sync_dir(out_dir);
    }
    comm_barrier(world);
}

// Whether a directory name is a complete checkpoint's: step_ and 8 digits, nothing else (not
// step_N.tmp, not a step_N.broken a person renamed).
inline bool checkpoint_name(const std::string& name) {
    if (name.size() != 13 || name.rfind("step_", 0) != 0) return false;
    for (size_t i = 5; i < 13; i++) if (name[i] < '0' || name[i] > '9') return false;
    return true;
}
// The complete checkpoint directories in out_dir, oldest first: the zero-padded names sort in
// step order.
inline std::vector<std::string> checkpoint_list(const std::string& out_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(out_dir, ec))
        if (e.is_directory() && checkpoint_name(e.path().filename().string())) dirs.push_back(e.path().string());
    std::sort(dirs.begin(), dirs.end());
    return dirs;
}
// The newest complete checkpoint directory in out_dir, or "" if there is none.
inline std::string checkpoint_latest(const std::string& out_dir) {
    std::vector<std::string> dirs = checkpoint_list(out_dir);
    return dirs.empty() ? "" : dirs.back();
}
// Keeps this run's newest `keep` checkpoints, up to step `step` (the one just written), and
// deletes its older ones (keep 0: all). Rank 0 calls it once that checkpoint is in place. Every
// checkpoint in out_dir is this run's (output_dir_claim: a fresh run refuses a directory with
// any); none newer than `step` is ever deleted, and nothing that is not a checkpoint's name.
inline void checkpoint_prune(const std::string& out_dir, int keep, int64_t step) {
    std::vector<std::string> dirs;
    for (const std::string& d : checkpoint_list(out_dir))
        if (d <= checkpoint_dir(out_dir, step)) dirs.push_back(d);
    std::error_code ec;
    for (size_t i = 0; keep > 0 && i + keep < dirs.size(); i++) std::filesystem::remove_all(dirs[i], ec);
}

// The mark in DIR/.lock ("pid mark"), or 0 where there is none. A network file system may show
// the file late, so it reads again for up to `wait` seconds until it finds `want`.
inline double output_dir_mark(const std::string& out_dir, double want, double wait) {
    for (const double t0 = now_seconds();; usleep(200 * 1000)) {
        long long pid = 0;
        double mark = 0;
        if (FILE* f = fopen((out_dir + "/.lock").c_str(), "r")) {
            if (fscanf(f, "%lld %lf", &pid, &mark) != 2) mark = 0;
            fclose(f);
        }
        if (mark == want || now_seconds() - t0 > wait) return mark;
    }
}
// Every rank writes its part of a checkpoint into --output-dir, so every node must see the same
// directory: one on a shared file system, not each node's own disk. Rank 0 wrote `mark` into
// DIR/.lock; a rank that does not find it there within 10 s stops the run, before the first step.
inline void output_dir_shared(const std::string& out_dir, double mark, Group& world) {
    const double seen = world.rank == 0 ? mark : output_dir_mark(out_dir, mark, 10);
    const int r = comm_first_differing(world, &seen, 1);
    if (r >= 0)
        usage_error("--output-dir %s: rank %d does not see the files rank 0 writes there: every rank writes its part of a "
                    "checkpoint into it, so all nodes need the same directory (a shared file system)", out_dir.c_str(), r);
}

// The bytes --output-dir's file system has free for this process. For tests of a full disk,
// LLMC_DISK_FREE=<bytes> in the environment stands for a disk with that many bytes free while
// --output-dir is empty: the files written into --output-dir take their bytes from it.
inline double disk_free_bytes(const std::string& dir) {
    if (const char* env = getenv("LLMC_DISK_FREE")) {
        char* end = nullptr;
        const double v = strtod(env, &end);
        if (end == env || *end != 0 || v < 0) usage_error("LLMC_DISK_FREE=%s: expected a number of bytes", env);
        std::error_code ec;
        double used = 0;
        for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
            if (e.is_regular_file(ec)) used += (double)e.file_size(ec);
        return v - used;
    }
    struct statvfs s;
    if (statvfs(dir.c_str(), &s) != 0) return -1;  // (unknown: nothing is said)
    return (double)s.f_bavail * s.f_frsize;
}

// Is there room for this run's checkpoints? One takes 12 bytes a parameter (the fp32 weights and
// AdamW's two moments). A disk without room for one is refused before the first step: the run
// would fail at its first save, and every restart again. Room for fewer than the run will keep
// gets a note. `writes`: the checkpoints the run writes; keep: --keep-checkpoints. Collective.
inline double checkpoint_bytes(double params) { return 12 * params + (1 << 20); }  // (+1 MiB: the headers, the history, the manifest)
inline void checkpoint_room(const std::string& out_dir, double params, long long writes, int keep, Group& world) {
    if (out_dir.empty() || writes <= 0) return;
    double free_bytes = world.rank == 0 ? disk_free_bytes(out_dir) : 0;
    comm_from_rank(world, &free_bytes, 1);
    if (free_bytes < 0) return;  // (unknown)
    const double one = checkpoint_bytes(params);
    if (free_bytes < one)
        usage_error("--output-dir %s: %s free, but one checkpoint of this run takes %s (12 bytes a parameter: the fp32 "
                    "weights and AdamW's two moments); free some space or choose another directory", out_dir.c_str(),
                    format_bytes(free_bytes).c_str(), format_bytes(one).c_str());
    const long long held = keep > 0 ? std::min<long long>(writes, std::max(keep, 2)) : writes;  // (checkpoint_make_room)
    const long long room = (long long)(free_bytes / one);
    if (room < held)
        print0("note: --output-dir %s: %s free holds %lld checkpoint%s of %s, but this run keeps up to %lld; %s\n", out_dir.c_str(),
               format_bytes(free_bytes).c_str(), room, room == 1 ? "" : "s", format_bytes(one).c_str(), held,
               keep > 0 ? "free some space, or lower --keep-checkpoints" : "free some space, or keep fewer with --keep-checkpoints");
}

// Before each save: is there room for the checkpoint of step `step`? Where there is not, and
// --keep-checkpoints K is 2 or more, the old checkpoints that K removes after this save are
// removed first (the newest always stays). Still no room: false, with a warning; the caller
// skips this save and the next one tries again, so a disk that others fill does not end the
// run. Collective: rank 0 looks and decides.
inline bool checkpoint_make_room(const std::string& out_dir, double params, int keep, int64_t step, Group& world) {
    const double one = checkpoint_bytes(params);
    double verdict[2] = {1, 0};  // rank 0's: 1 to save; the free bytes
    if (world.rank == 0) {
        std::vector<std::string> old;  // (this run's older checkpoints, oldest first: checkpoint_prune's)
        for (const std::string& d : checkpoint_list(out_dir))
            if (d < checkpoint_dir(out_dir, step)) old.push_back(d);
        double free_bytes = disk_free_bytes(out_dir);
        for (size_t i = 0; free_bytes >= 0 && free_bytes < one && keep >= 2 && old.size() - i > (size_t)keep - 1; i++) {
            std::error_code ec;
            std::filesystem::remove_all(old[i], ec);
            print0("note: step %lld: removed %s before the save, to make room (--keep-checkpoints %d would remove it after)\n",
                   (long long)step, old[i].c_str(), keep);
            free_bytes = disk_free_bytes(out_dir);
        }
        verdict[0] = free_bytes < 0 || free_bytes >= one, verdict[1] = free_bytes;
        if (!verdict[0])  // (old.back(), the newest, is never removed)
            print0("warning: step %lld: checkpoint not written: --output-dir %s has %s free, and one takes %s. The newest is "
                   "%s. Training goes on, and the next checkpoint tries again\n", (long long)step, out_dir.c_str(),
                   format_bytes(free_bytes).c_str(), format_bytes(one).c_str(), old.empty() ? "none" : old.back().c_str());
    }
    comm_from_rank(world, verdict, 2);
    return verdict[0] != 0;
}

// --output-dir belongs to one run at a time. Rank 0 holds an exclusive flock on DIR/.lock (with
// its pid and a mark in it) until the process ends; a run that finds it held stops at once, naming the
// holder. A fresh run (no --resume) refuses a directory that holds checkpoints: they are another
// run's, which it would overwrite or mix with. Leftover step_N.tmp directories (a save that died)
// are removed, with a note. Every rank must see the directory rank 0 sees (output_dir_shared).
// Collective over the world (all ranks stop together).
inline void output_dir_claim(const std::string& out_dir, bool resume, Group& world) {
    namespace fs = std::filesystem;
    if (out_dir.empty()) return;
    double verdict[3] = {0, 0, 0};  // rank 0's: 1 held by another run (pid), 2 a fresh run among checkpoints; its mark
    std::string newest;
    if (world.rank == 0) {
        const std::string lock = out_dir + "/.lock";
        const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) usage_error("--output-dir %s: cannot create '%s': %s", out_dir.c_str(), lock.c_str(), strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            char pid[32] = "";
            const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
            verdict[0] = 1, verdict[1] = n > 0 ? atof(pid) : 0;
        } else {  // (held until the process ends: the descriptor is never closed)
            verdict[2] = (double)(std::random_device{}() & 0xfffffff) + 1;  // (any number the other ranks can look for)
            const std::string me = std::to_string((long long)getpid()) + " " + std::to_string((long long)verdict[2]) + "\n";
            if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != (ssize_t)me.size() || fsync(fd) != 0)
                usage_error("--output-dir %s: cannot write '%s': %s", out_dir.c_str(), lock.c_str(), strerror(errno));
            const std::vector<std::string> dirs = checkpoint_list(out_dir);
            if (!resume && !dirs.empty()) verdict[0] = 2, newest = fs::path(dirs.back()).filename().string();
        }
    }
    comm_from_rank(world, verdict, 3);
    if (verdict[0] == 1)
        usage_error("--output-dir %s: another run is using it (pid %.0f holds %s/.lock); wait for it to end, or choose another "
                    "directory", out_dir.c_str(), verdict[1], out_dir.c_str());
    if (verdict[0] == 2)
        usage_error("--output-dir %s: holds checkpoints of another run (the newest: %s); continue it with --resume, or choose "
                    "another directory", out_dir.c_str(), newest.c_str());
    output_dir_shared(out_dir, verdict[2], world);
    std::error_code ec;
    if (world.rank == 0)
        for (const auto& e : fs::directory_iterator(out_dir, ec)) {
            const std::string name = e.path().filename().string();
            if (!e.is_directory() || name.rfind("step_", 0) != 0 || name.size() < 9 || name.compare(name.size() - 4, 4, ".tmp") != 0)
                continue;
            fs::remove_all(e.path(), ec);
            print0("note: --output-dir %s: removed %s, a checkpoint that a stopped run did not finish\n", out_dir.c_str(), name.c_str());
        }
    comm_barrier(world);
}

// Reads the header of a checkpoint's state file (rank 0's: they all agree) and its step history
// (history.bin, when there is one).
// The state file whose header the whole checkpoint's is: dp rank 0's, of tp rank 0 and stage 0.
inline std::string checkpoint_first_state(const std::string& dir) {
    std::string sp = state_file(dir, 0);
    if (!std::filesystem::exists(sp)) sp = state_file(dir, 0, 2, 0);        // a tensor-parallel run's (any tp > 1)
    if (!std::filesystem::exists(sp)) sp = state_file(dir, 0, 2, 0, 2, 0);  // a pipeline's (any pp > 1)
    return sp;
}
inline TrainState checkpoint_read_header(const std::string& dir) {
    const std::string sp = checkpoint_first_state(dir);
    FILE* f = fopen_or_die(sp.c_str(), "rb");
    int64_t h[STATE_HEADER];
    fread_or_die(h, sizeof(int64_t), STATE_HEADER, f, sp.c_str());
    fclose(f);
    if (h[0] != STATE_MAGIC || h[1] != 2) fatal("'%s' is not a training-state file (magic %lld, version %lld)", sp.c_str(), (long long)h[0], (long long)h[1]);
    // every field within what a run can have: a damaged header is named, not divided by or trusted
    const struct { const char* name; int64_t v, lo, hi; } fields[] = {
        {"step", h[2], 0, 1LL << 40}, {"micro-batches consumed", h[3], 0, 1LL << 50}, {"B", h[5], 1, 1 << 20}, {"T", h[6], 1, 1 << 24},
        {"total batch tokens", h[7], 1, 1LL << 40}, {"parameters", h[8], 0, 1LL << 42}, {"dp", h[9], 1, 1 << 20}, {"zero", h[10], 0, 3},
        {"tp", h[11], 0, 1 << 16}, {"pp", h[12], 0, 1 << 16}, {"vpp", h[13], 0, 1 << 16}};
    for (const auto& fl : fields)
        if (fl.v < fl.lo || fl.v > fl.hi)
            fatal("'%s': a damaged training-state header: %s = %lld, outside [%lld, %lld]", sp.c_str(), fl.name, (long long)fl.v,
                  (long long)fl.lo, (long long)fl.hi);
    const bool sealed = std::filesystem::exists(dir + "/model.bin.crc32c");  // (a checkpoint with checksums: checksum.h)
    header_verify(sp, h, sealed);  // (its fields are used below, and lay out the old state: checkpoint_load checks it once)
    TrainState s;
    s.step = h[2]; s.global_batches = h[3]; s.rng_state = (uint64_t)h[4]; s.B = h[5]; s.T = h[6]; s.total_batch = h[7];
    s.saved_dp = h[9]; s.saved_zero = h[10]; s.saved_tp = h[11] > 0 ? h[11] : 1;  // (0 before tensor parallelism)
    s.saved_pp = h[12] > 0 ? h[12] : 1;                                            // (0 before pipeline parallelism)
    s.saved_vpp = h[13] > 0 ? h[13] : 1;                                           // (0 before the interleaved schedule)
    s.settings = settings_from_manifest(dir);
    const std::string hp = dir + "/history.bin";
    if (FILE* hf = fopen(hp.c_str(), "rb")) {  // (absent in a checkpoint from before it existed)
        int64_t hh[STATE_HEADER];
        fread_or_die(hh, sizeof(int64_t), STATE_HEADER, hf, hp.c_str());
        if (hh[0] != HISTORY_MAGIC || (hh[1] != 1 && hh[1] != 2) || hh[2] < 0 || hh[3] < 0 || hh[2] > (1 << 24) || hh[3] > (1 << 24))
            fatal("'%s' is not a step-history file (magic %lld, version %lld)", hp.c_str(), (long long)hh[0], (long long)hh[1]);
        header_verify(hp, hh, sealed);
        s.loss_history.resize(hh[2]);
        s.norm_history.resize(hh[3]);
        if (hh[1] >= 2) { memcpy(&s.loss_scale, &hh[4], 8); s.loss_scale_clean = hh[5]; }  // (version 1: none)
        for (std::vector<double>* v : {&s.loss_history, &s.norm_history})
            if (!v->empty()) fread_or_die(v->data(), sizeof(double), v->size(), hf, hp.c_str());
        fclose(hf);
    }
    return s;
}

// One (tp rank, pipeline stage) of the layout a checkpoint was saved with: its dp ranks' state
// files and where each unit's chunk starts in them.
struct SavedStateGroup {
    ParamLayout layout;
    std::vector<FILE*> files;        // one per old dp rank (opened on first use)
    std::vector<std::string> names;
    std::vector<std::array<int64_t, STATE_HEADER>> headers;  // each file's, and whether its checksum was checked
    std::vector<bool> verified;
    bool sealed = false;             // its checkpoint has checksums (a model.bin.crc32c): every file has one
    std::vector<size_t> unit_size, unit_off;  // each unit's size in this layout, its chunk's place in a file
    size_t per_part = 0;             // elements of m (then of v) in a file
};

// Copies old unit elements [ob, ob + n) of unit u, part (0: m, 1: v), from the old dp ranks'
// chunks that hold them, to `dst` (host).
inline void saved_state_read(SavedStateGroup& g, int old_N, int part, int u, size_t ob, size_t n, float* dst) {
    const size_t S = g.unit_size[u];
    for (int q = 0; q < old_N && n; q++) {
        const size_t b = std::max(ob, chunk_begin(S, old_N, q)), e = std::min(ob + n, chunk_end(S, old_N, q));
        if (e <= b) continue;
        const size_t elem = (size_t)part * g.per_part + g.unit_off[u] + (b - chunk_begin(S, old_N, q));
        if (!g.verified[q]) header_verify(g.names[q], g.headers[q].data(), g.sealed), g.verified[q] = true;  // (before its first use)
        fseek(g.files[q], (long)(STATE_HEADER * 8 + elem * 4), SEEK_SET);
        fread_or_die(dst + (b - ob), 4, e - b, g.files[q], g.names[q].c_str());
    }
}

// Loads the weights (model.bin) and this rank's part of AdamW's moments from a checkpoint saved
// with any layout: dp size, ZeRO stage, tp, pp and vpp may all differ from this run's. The weights
// come from the model file, which every layout reads its pieces of (unit_file_pieces). The
// moments are found through the same file order: for each piece of a unit this rank owns, the
// pieces of that unit in the old (tp rank, stage) layouts that overlap it in model-file order, and
// in those the old dp ranks' chunks (each old rank's state file holds its chunk of its units, as
// checkpoint_save writes it). A piece every old tp rank held (replicated: LayerNorms, biases of
// row-split products, wpe) is read from tp rank 0's files, the embeddings from stage 0's (the last
// stage's tied copy holds the same). Runs that go on in both layouts are read as one, so with
// the saved layout each old chunk is one read, as before. So dp=4 ZeRO-3 resumes as dp=2 ZeRO-1,
// tp=2 as tp=1, pp=2 × vpp=2 as pp=4. The elements found are counted against the rank's range.
// The saved layout's state files, group by group (old tp rank t of stage q), each group opened
// and checked on first use; closed at the end.
struct SavedCheckpoint {
    std::string dir, first_state;  // (first_state: the file checkpoint_read_header checked)
    GPTConfig c;
    int N, tp, pp, vpp;            // the saving run's dp ranks and layout
    std::vector<SavedStateGroup> groups;
    std::vector<ParamLayout> stages;  // each old stage's layout (its tp rank 0's): which units it held
    SavedCheckpoint(const std::string& dir_, const TrainState& s, const GPTConfig& c_)
        : dir(dir_), first_state(checkpoint_first_state(dir_)), c(c_), N((int)s.saved_dp), tp((int)s.saved_tp), pp((int)s.saved_pp),
          vpp((int)s.saved_vpp), groups((size_t)tp * pp) {
        for (int q = 0; q < pp; q++) stages.push_back(make_layout(c, tp, 0, pp, q, vpp));
    }
    SavedCheckpoint(const SavedCheckpoint&) = delete;
    SavedCheckpoint& operator=(const SavedCheckpoint&) = delete;
    ~SavedCheckpoint() {
        for (SavedStateGroup& g : groups)
            for (FILE* f : g.files) fclose(f);
    }
    SavedStateGroup& group(int t, int q);
};

inline SavedStateGroup& SavedCheckpoint::group(int t, int q) {
    SavedStateGroup& g = groups[(size_t)q * tp + t];
    if (!g.files.empty()) return g;
    g.layout = make_layout(c, tp, t, pp, q, vpp);
    g.sealed = std::filesystem::exists(dir + "/model.bin.crc32c");
    for (int u = 0; u < gpt_num_units(c); u++) {
        g.unit_size.push_back(unit_span(c, g.layout, u).size);
        g.unit_off.push_back(g.per_part);
        g.per_part += chunk_size(g.unit_size[u], N);
    }
    for (int r = 0; r < N; r++) {
        g.names.push_back(state_file(dir, r, tp, t, pp, q));
        g.files.push_back(fopen_or_die(g.names[r].c_str(), "rb"));
        int64_t* h = g.headers.emplace_back().data();
        g.verified.push_back(g.names[r] == first_state);
        fread_or_die(h, sizeof(int64_t), STATE_HEADER, g.files[r], g.names[r].c_str());
        if (h[0] != STATE_MAGIC || h[9] != N || std::max<int64_t>(h[11], 1) != tp || std::max<int64_t>(h[12], 1) != pp)
            fatal("'%s' does not belong to this checkpoint", g.names[r].c_str());
        if (h[8] != (int64_t)g.layout.total)  // (e.g. a tp checkpoint from before wte was split over the tp ranks)
            fatal("'%s' holds AdamW state for %lld parameters a rank, its layout %zu: another model, or a checkpoint "
                  "of an older layout (its model.bin loads with --model)", g.names[r].c_str(), (long long)h[8], g.layout.total);
    }
    return g;
}

// A run of state: this rank's unit elements [unit_off, +n) are group g's unit elements [old_off, +n).
struct StateRun { size_t unit_off, old_off, n; SavedStateGroup* g; };

// Where the elements [own_b, own_e) of unit u in layout `mine` lie in the saved files: the pieces
// of the old layouts that overlap them in model-file order, clipped to the range. Runs that go on
// in both layouts are one.
inline std::vector<StateRun> saved_state_runs(SavedCheckpoint& old, const ParamLayout& mine, int u, size_t own_b, size_t own_e) {
    auto by_file = [](const FilePiece& a, const FilePiece& b) { return a.file_off < b.file_off; };
    std::vector<FilePiece> want = unit_file_pieces(old.c, mine, u);
    std::sort(want.begin(), want.end(), by_file);
    std::vector<StateRun> runs;
    for (int q = 0; q < old.pp; q++) {
        if (unit_span(old.c, old.stages[q], u).size == 0 || (u == 0 && q != 0)) continue;  // (not its unit; the embeddings: stage 0's)
        for (int t = 0; t < old.tp; t++) {
            SavedStateGroup& g = old.group(t, q);
            std::vector<FilePiece> theirs = unit_file_pieces(old.c, g.layout, u);
            std::sort(theirs.begin(), theirs.end(), by_file);
            size_t j = 0;
            for (const FilePiece& a : want) {  // (both sorted by their place in the file: one sweep)
                while (j < theirs.size() && theirs[j].file_off + theirs[j].n <= a.file_off) j++;
                for (size_t k = j; k < theirs.size() && theirs[k].file_off < a.file_off + a.n; k++) {
                    const FilePiece& o = theirs[k];
                    if (o.replicated && t != 0) continue;
                    const size_t fb = std::max(a.file_off, o.file_off), fe = std::min(a.file_off + a.n, o.file_off + o.n);
                    size_t ub = a.unit_off + (fb - a.file_off), ue = ub + (fe - fb);
                    size_t ob = o.unit_off + (fb - o.file_off);
                    if (ub < own_b) { ob += own_b - ub; ub = own_b; }  // (clipped to this rank's range)
                    if (ue > own_e) ue = own_e;
                    if (ue <= ub) continue;
                    StateRun* last = runs.empty() ? nullptr : &runs.back();  // (one run while both sides go on)
                    if (last && last->g == &g && last->unit_off + last->n == ub && last->old_off + last->n == ob) last->n += ue - ub;
                    else runs.push_back(StateRun{ub, ob, ue - ub, &g});
                }
            }
        }
    }
    return runs;
}

// The FP8 amax history is per tp rank and stage (its tensors are the rank's slices of its
// blocks): with another layout it starts empty, as the first run's did. Returns the steps it
// holds (-1: none read).
template <class floatX> inline int64_t fp8_history_load(const std::string& dir, DataParallel<floatX>* d, bool same_layout) {
    Fp8Delayed* fd = &d->g->fp8_delayed;
    const ParamLayout& p = d->g->layout;
    const std::string fp = fp8_history_file(dir, p.tp, p.tp_rank, p.pp, p.stage);
    FILE* hf = fd->on && same_layout ? fopen(fp.c_str(), "rb") : nullptr;
    if (!hf) return -1;  // (absent: a run with current scaling saved it, and the history starts empty)
    int64_t fh[STATE_HEADER];
    fread_or_die(fh, sizeof(int64_t), STATE_HEADER, hf, fp.c_str());
    if (fh[0] != FP8_HISTORY_MAGIC || fh[1] != 1 || fh[2] < 0 || fh[3] < 1 || fh[5] != std::min(fh[2], fh[3]))
        fatal("'%s' is not an FP8 amax history (magic %lld, version %lld)", fp.c_str(), (long long)fh[0], (long long)fh[1]);
    if (fh[4] != fd->n)
        fatal("'%s' holds the amaxes of %lld FP8 tensors, this rank's blocks have %d", fp.c_str(), (long long)fh[4], fd->n);
    header_verify(fp, fh, std::filesystem::exists(dir + "/model.bin.crc32c"));
    std::vector<float> amaxes((size_t)fh[4] * fh[5]);
    if (!amaxes.empty()) fread_or_die(amaxes.data(), sizeof(float), amaxes.size(), hf, fp.c_str());
    fclose(hf);
    fp8_delayed_restore(d->ctx, fd, fh[2], amaxes);
    return fh[2];
}

template <class floatX> inline TrainState checkpoint_load(const std::string& dir, DataParallel<floatX>* d) {
    TrainState s = checkpoint_read_header(dir);
    const ParamLayout& p = d->g->layout;
    s.same_layout = s.saved_tp == p.tp && s.saved_pp == p.pp && s.saved_vpp == p.vpp();
    model_file_load(d, (dir + "/model.bin").c_str());
    {   // AdamW's m and v, each unit's elements this rank owns, from the saved layout's files
        SavedCheckpoint old(dir, s, d->g->config);
        std::vector<float> piece;
        for (int u = 0; u < gpt_num_units(old.c); u++) {
            const size_t own_b = d->own_begin[u], own_e = d->own_end[u];
            if (own_e <= own_b) continue;
            const std::vector<StateRun> runs = saved_state_runs(old, p, u, own_b, own_e);
            size_t found = 0;
            for (const StateRun& r : runs) found += r.n;
            CHECK(found == own_e - own_b, "checkpoint_load: unit %d: %zu of this rank's %zu elements of AdamW's state found in '%s'",
                  u, found, own_e - own_b, dir.c_str());
            for (int part = 0; part < 2; part++)
                for (const StateRun& r : runs) {
                    piece.resize(r.n);
                    saved_state_read(*r.g, old.N, part, u, r.old_off, r.n, piece.data());
                    ctx_copy(d->ctx, dp_opt_at(d, part == 0 ? d->m : d->v, u, r.unit_off), piece.data(), r.n * sizeof(float));
                }
        }
    }
    s.fp8_steps = fp8_history_load(dir, d, s.same_layout);
    return s;
}

// ---- stopping on a signal, after a whole step and with a checkpoint (see the header)
static const int STOP_SIGNALS[] = {SIGTERM, SIGUSR1, SIGINT};
inline volatile sig_atomic_t g_stop_signal = 0;
inline void on_stop_signal(int sig) { g_stop_signal = sig; }  // (async-signal-safe: one store)

inline const char* stop_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "a signal";
}
inline void stop_signals_install() {
    struct sigaction a = {};
    a.sa_handler = on_stop_signal;
    a.sa_flags = SA_RESTART | SA_RESETHAND;  // interrupted reads go on; the second signal kills
    sigemptyset(&a.sa_mask);
    for (int sig : STOP_SIGNALS) {
        struct sigaction old;
        sigaction(sig, nullptr, &old);
        if (sig == SIGINT && old.sa_handler == SIG_IGN) continue;  // started in the background (&, nohup): stays immune
        sigaction(sig, &a, nullptr);
    }
}
// Collective over the world: the signal some rank received (the first of STOP_SIGNALS in that
// order, if ranks got different ones), or 0 when none did. Every rank gets the same answer.
inline int stop_signal_agreed(Group& world) {
    constexpr int K = (int)std::size(STOP_SIGNALS);
    const int got = g_stop_signal;
    double n[K];  // how many ranks got each signal
    for (int i = 0; i < K; i++) n[i] = got == STOP_SIGNALS[i] ? 1.0 : 0.0;
    comm_sum_doubles(world, n, K);
    for (int i = 0; i < K; i++)
        if (n[i] > 0) return STOP_SIGNALS[i];
    return 0;
}
