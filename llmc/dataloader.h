/*
dataloader.h — token shards in, (inputs, targets) micro-batches out, in a fixed, resumable order.

Shard file (little-endian): 256 int32 header [20240520, 1, ntok, 0…] then ntok uint16 tokens;
llm.c's wide variant [20240801, 7, ntok, 0…] holds uint32 tokens. The file size must equal
1024 + ntok·(2 or 4) bytes exactly; anything else is rejected with the file's name.

Order (DESIGN §3.4). The shards matched by the glob, sorted by name, are one stream of N tokens.
It is cut into S = ⌊(N−1)/(B·T)⌋ slots of B·T tokens; slot s covers tokens [s·B·T, s·B·T + B·T]
(B·T+1 tokens: the inputs and, shifted by one, the targets). Micro-batch k of data-parallel rank r
is global batch g = k·dp + r, which reads slot g mod S in epoch ⌊g/S⌋. So with --shuffle 0
a dp=2 run with B=2 sees exactly the batches of a one-process run with B=4 (within an epoch).
With --shuffle 1 each epoch visits the slots in a permutation drawn from (seed, epoch), the same
on every rank. The whole position is the counter k: that is what a checkpoint saves.

Validation reads sequences rather than slots: sequence q is tokens [q·T, q·T + T] of the
validation stream, and an evaluation reads sequences 0 … S−1 (dataloader_sequences; the trainer's
evaluate splits them over micro-batches and ranks). Within a slot the B sequences are contiguous,
so micro-batch k of rank r is sequences (k·dp + r)·B … +B: the order of the slots above.

Test: test/test_cli.sh (bad shards), test/test_train.sh (order and resume; validation the same for
any B), test/test_dp.sh (for any dp), test/test_vs_pytorch.py (validation against PyTorch).
*/
#pragma once
#include <glob.h>
#include <algorithm>
#include <string>
#include <vector>
#include "common.h"
#include "rand.h"

static const int SHARD_MAGIC_U16 = 20240520, SHARD_VERSION_U16 = 1;
static const int SHARD_MAGIC_U32 = 20240801, SHARD_VERSION_U32 = 7;

struct Shard { std::string path; long long ntok; int bytes_per_token; long long first; };

// Reads and validates a shard's header; exits with a one-line error naming the file.
inline Shard shard_open(const std::string& path) {
    FILE* f = fopen_or_die(path.c_str(), "rb");
    int header[256];
    fread_or_die(header, sizeof(int), 256, f, path.c_str());
    fclose(f);
    Shard s{path, header[2], 0, 0};
    if (header[0] == SHARD_MAGIC_U16 && header[1] == SHARD_VERSION_U16) s.bytes_per_token = 2;
    else if (header[0] == SHARD_MAGIC_U32 && header[1] == SHARD_VERSION_U32) s.bytes_per_token = 4;
    else fatal("'%s' is not a token shard: header starts [%d, %d], expected [%d, %d] (uint16) or [%d, %d] (uint32)",
               path.c_str(), header[0], header[1], SHARD_MAGIC_U16, SHARD_VERSION_U16, SHARD_MAGIC_U32, SHARD_VERSION_U32);
    long long expect = 1024 + s.ntok * s.bytes_per_token, actual = file_size_or_die(path.c_str());
    if (s.ntok < 0 || actual != expect)
        fatal("'%s': header says %lld tokens (%lld bytes) but the file has %lld bytes", path.c_str(), s.ntok, expect, actual);
    return s;
}

inline void shard_write(const std::string& path, const std::vector<int>& tokens, bool wide) {
    std::string tmp = path + ".tmp";
    FILE* f = fopen_or_die(tmp.c_str(), "wb");
    int header[256] = {0};
    header[0] = wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16;
    header[1] = wide ? SHARD_VERSION_U32 : SHARD_VERSION_U16;
    if (tokens.size() > 0x7fffffff) fatal("'%s': too many tokens for one shard (%zu)", path.c_str(), tokens.size());
    header[2] = (int)tokens.size();
    fwrite_or_die(header, sizeof(int), 256, f, tmp.c_str());
    if (wide) fwrite_or_die(tokens.data(), sizeof(int), tokens.size(), f, tmp.c_str());
    else {
        std::vector<uint16_t> t16(tokens.size());
        for (size_t i = 0; i < tokens.size(); i++) {
            if (tokens[i] < 0 || tokens[i] > 65535) fatal("token %d does not fit a uint16 shard", tokens[i]);
            t16[i] = (uint16_t)tokens[i];
        }
        fwrite_or_die(t16.data(), 2, t16.size(), f, tmp.c_str());
    }
    if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0) fatal("cannot write '%s'", path.c_str());
}

struct DataLoader {
    std::vector<Shard> shards;
    long long total_tokens = 0, slots = 0;
    int B = 0, T = 0, dp_size = 1, dp_rank = 0, vocab_size = 0;
    bool shuffle = false;
    uint64_t seed = 0;
    long long k = 0;  // micro-batches this rank has read: the resumable position
    std::vector<long long> perm;  // slot permutation of perm_epoch (shuffle only)
    long long perm_epoch = -1;
    std::vector<int> buf;  // B·T+1 tokens
};

// flag: the command-line flag the pattern came from, for error messages.
inline void dataloader_init(DataLoader* d, const char* flag, const std::string& pattern, int B, int T,
                            int dp_size, int dp_rank, int vocab_size, bool shuffle, uint64_t seed) {
    glob_t g;
    int rc = glob(pattern.c_str(), 0, nullptr, &g);
    if (rc != 0 || g.gl_pathc == 0) fatal("%s: no file matches '%s'", flag, pattern.c_str());
    std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    std::sort(paths.begin(), paths.end());
    d->shards.clear();
    d->total_tokens = 0;
    for (const std::string& p : paths) {
        Shard s = shard_open(p);
        s.first = d->total_tokens;
        d->total_tokens += s.ntok;
        d->shards.push_back(s);
    }
    d->B = B; d->T = T; d->dp_size = dp_size; d->dp_rank = dp_rank; d->vocab_size = vocab_size;
    d->shuffle = shuffle; d->seed = seed; d->k = 0; d->perm_epoch = -1;
    d->slots = (d->total_tokens - 1) / ((long long)B * T);
    if (d->slots < 1)
        fatal("%s: '%s' holds %lld tokens, fewer than one batch needs (B*T+1 = %lld)", flag, pattern.c_str(),
              d->total_tokens, (long long)B * T + 1);
    d->buf.assign((size_t)B * T + 1, 0);
}

// Reads n tokens starting at global position pos of the concatenated shards into out.
inline void dataloader_read(DataLoader* d, long long pos, int n, int* out) {
    size_t si = 0;
    while (pos >= d->shards[si].first + d->shards[si].ntok) si++;
    int done = 0;
    std::vector<uint8_t> raw;
    while (done < n) {
        const Shard& s = d->shards[si];
        long long off = pos + done - s.first;
        int take = (int)std::min<long long>(n - done, s.ntok - off);
        raw.resize((size_t)take * s.bytes_per_token);
        FILE* f = fopen_or_die(s.path.c_str(), "rb");
        fseek(f, 1024 + off * s.bytes_per_token, SEEK_SET);
        fread_or_die(raw.data(), s.bytes_per_token, take, f, s.path.c_str());
        fclose(f);
        for (int i = 0; i < take; i++) {
            int tok = s.bytes_per_token == 2 ? ((uint16_t*)raw.data())[i] : ((int32_t*)raw.data())[i];
            if (tok < 0 || tok >= d->vocab_size)
                fatal("'%s': token %d at index %lld is outside the model's vocabulary (V=%d)",
                      s.path.c_str(), tok, off + i, d->vocab_size);
            out[done + i] = tok;
        }
        done += take;
        si++;
    }
}

// The slot that global batch g reads.
inline long long dataloader_slot(DataLoader* d, long long g) {
    long long epoch = g / d->slots, s = g % d->slots;
    if (!d->shuffle) return s;
    if (epoch != d->perm_epoch) {  // Fisher-Yates with a stream per epoch
        d->perm.resize(d->slots);
        for (long long i = 0; i < d->slots; i++) d->perm[i] = i;
        Rng r(d->seed, 0x5eed0000ull + epoch);
        for (long long i = d->slots - 1; i > 0; i--) std::swap(d->perm[i], d->perm[r.below(i + 1)]);
        d->perm_epoch = epoch;
    }
    return d->perm[s];
}

// Fills inputs and targets (B·T each) with this rank's next micro-batch.
inline void dataloader_next(DataLoader* d, int* inputs, int* targets) {
    long long g = d->k * d->dp_size + d->dp_rank;
    long long BT = (long long)d->B * d->T;
    dataloader_read(d, dataloader_slot(d, g) * BT, (int)BT + 1, d->buf.data());
    memcpy(inputs, d->buf.data(), BT * sizeof(int));
    memcpy(targets, d->buf.data() + 1, BT * sizeof(int));
    d->k++;
}

// Fills inputs and targets (n·T each) with sequences first … first+n−1 (see the header).
inline void dataloader_sequences(DataLoader* d, long long first, int n, int* inputs, int* targets) {
    const long long nT = (long long)n * d->T;
    std::vector<int> buf((size_t)nT + 1);
    dataloader_read(d, first * d->T, (int)nT + 1, buf.data());
    memcpy(inputs, buf.data(), nT * sizeof(int));
    memcpy(targets, buf.data() + 1, nT * sizeof(int));
}
