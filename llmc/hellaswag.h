/*
hellaswag.h — multiple-choice evaluation (HellaSwag), scored by the model's own loss.

Each example has a context c and 4 endings, one right. Each ending e is a row c ++ e, and

  score(e) = (1/|e|) Σ_{t=|c|−1}^{|c|+|e|−2} loss[t]     (e's tokens' mean cross-entropy)

The prediction is the ending of the lowest score; accuracy is the share predicted right, and the
right ending's mean score (gold loss) is reported too. llm.c's eval file loads unchanged.
Rows are batched into the training run's B×T activations, and rank r of dp runs every dp-th
group of rows, so the result does not depend on dp.

Main functions: choice_set_load, choice_set_write (the file), choice_evaluate (the evaluation).

Test: test/test_vs_pytorch.py (against PyTorch), test/test_cli.sh (bad files, --steps 0),
test/test_dp.sh (dp = 2 and 3 bit for bit), test/test_tokenizer.sh (./tokenize --hellaswag).
More: docs/data.md.
*/
#pragma once
#include <algorithm>
#include <string>
#include <vector>
#include "common.h"
#include "comm.h"
#include "model.h"
#include "inference.h"

static const int CHOICE_FILE_MAGIC = 20240522, CHOICE_FILE_VERSION = 1, CHOICE_FILE_VERSION_WIDE = 2, CHOICE_EXAMPLE_START = 65535;

struct ChoiceExample {
    int label = 0;                            // index of the right ending
    std::vector<int> context;
    std::vector<std::vector<int>> endings;
};

struct ChoiceSet {
    std::vector<ChoiceExample> examples;
    int rows = 0;         // Σ endings over the examples
    int longest_row = 0;  // max |c| + |e| - 1: the positions a row's forward needs
};

struct ChoiceResult {
    int correct = 0, total = 0;
    double gold_loss = 0.0;  // mean over examples of the right ending's score
};

// An eval file's words, widened to 32 bits, once its header and size are checked.
struct ChoiceWords {
    std::vector<uint32_t> s;
    size_t w = 2;  // bytes a word in the file: 2, or 4 (version 2)
    long long n_examples = 0;
};
inline ChoiceWords choice_words_read(const char* what, const char* p) {
    FILE* f = fopen_or_die(p, "rb", what);
    int header[256];
    fread_or_die(header, sizeof(int), 256, f, p);
    if (header[0] != CHOICE_FILE_MAGIC || (header[1] != CHOICE_FILE_VERSION && header[1] != CHOICE_FILE_VERSION_WIDE))
        fatal("%s: '%s' is not a multiple-choice eval file: header starts [%d, %d], expected [%d, %d] (llm.c's "
              "hellaswag_val.bin; ./tokenize --hellaswag writes one) or [%d, %d] (uint32)", what, p, header[0], header[1],
              CHOICE_FILE_MAGIC, CHOICE_FILE_VERSION, CHOICE_FILE_MAGIC, CHOICE_FILE_VERSION_WIDE);
    ChoiceWords words;
    words.w = header[1] == CHOICE_FILE_VERSION_WIDE ? 4 : 2;
    words.n_examples = header[2];
    const long long size = file_size_or_die(p);
    if (words.n_examples <= 0 || (size - 1024) % words.w != 0)
        fatal("%s: '%s' has a bad header (%lld examples) or a size (%lld bytes) not of whole %zu-byte words", what, p,
              words.n_examples, size, words.w);
    words.s.resize((size_t)(size - 1024) / words.w);
    if (words.w == 4) fread_or_die(words.s.data(), 4, words.s.size(), f, p);
    else {
        std::vector<uint16_t> s16(words.s.size());
        fread_or_die(s16.data(), 2, s16.size(), f, p);
        std::copy(s16.begin(), s16.end(), words.s.begin());
    }
    fclose(f);
    return words;
}

// Reads the examples' words in order; each problem names the file and the example.
struct ChoiceReader {
    const char *what, *p;
    const ChoiceWords& words;
    long long i = 0;  // the example being read
    size_t at = 0;    // the next word
    void need(size_t n) const {
        if (at + n > words.s.size()) fatal("%s: '%s' ends inside example %lld (of %lld)", what, p, i, words.n_examples);
    }
    // a length, then that many tokens, each inside the vocabulary
    std::vector<int> tokens(const char* part, int vocab_size) {
        need(1);
        const size_t n = words.s[at++];
        need(n);
        if (n == 0) fatal("%s: '%s': example %lld has an empty %s", what, p, i, part);
        std::vector<int> out;
        for (size_t k = 0; k < n; k++) {
            const uint32_t t = words.s[at++];
            if (t >= (uint32_t)vocab_size)
                fatal("%s: '%s': example %lld: token %u in its %s is outside the model's vocabulary (V=%d)", what, p, i, t,
                      part, vocab_size);
            out.push_back((int)t);
        }
        return out;
    }
    // one example: [start, bytes, index, label, endings], its context, then its endings
    ChoiceExample example(int vocab_size) {
        const std::vector<uint32_t>& s = words.s;
        need(5);
        const size_t start = at;
        if (s[at] != CHOICE_EXAMPLE_START)
            fatal("%s: '%s': example %lld does not start with %d (found %u at word %zu)", what, p, i, CHOICE_EXAMPLE_START, s[at], at);
        const size_t bytes = s[at + 1];
        ChoiceExample ex;
        ex.label = s[at + 3];
        const int n_endings = (int)std::min<uint32_t>(s[at + 4], 1 << 20);
        at += 5;
        ex.context = tokens("context", vocab_size);
        ex.endings.resize(n_endings);
        for (auto& e : ex.endings) e = tokens("ending", vocab_size);
        if (n_endings < 2 || ex.label < 0 || ex.label >= n_endings)  // (a uint32 label past 2^31 reads negative)
            fatal("%s: '%s': example %lld has %d endings and label %d (expected 2 or more, label below that)", what, p, i,
                  n_endings, ex.label);
        if ((at - start) * words.w != bytes)
            fatal("%s: '%s': example %lld says it has %zu bytes, but its fields take %zu", what, p, i, bytes, (at - start) * words.w);
        return ex;
    }
};

// Reads and checks an eval file; every problem is reported with the file, the example and what
// was expected. `what` names the flag (for the message).
inline ChoiceSet choice_set_load(const char* what, const std::string& path, int vocab_size) {
    const char* p = path.c_str();
    const ChoiceWords words = choice_words_read(what, p);
    ChoiceReader r{what, p, words};
    ChoiceSet set;
    for (r.i = 0; r.i < words.n_examples; r.i++) {
        ChoiceExample ex = r.example(vocab_size);
        for (auto& e : ex.endings) set.longest_row = std::max(set.longest_row, (int)(ex.context.size() + e.size() - 1));
        set.rows += (int)ex.endings.size();
        set.examples.push_back(std::move(ex));
    }
    if (r.at != words.s.size()) fatal("%s: '%s' has %zu bytes after its %lld examples", what, p, (words.s.size() - r.at) * words.w, words.n_examples);
    return set;
}

// Writes an eval file in the format choice_set_load reads (and llm.c writes): uint16 words, or
// uint32 (version 2) if wide.
inline void choice_set_write(const std::string& path, const std::vector<ChoiceExample>& examples, bool wide = false) {
    if (examples.empty() || examples.size() >= 65536) fatal("'%s': %zu examples (the format holds 1..65535)", path.c_str(), examples.size());
    const size_t w = wide ? 4 : 2;
    const uint32_t word_max = wide ? 0xffffffffu : 0xffffu;
    std::vector<uint32_t> s;
    int longest = 0;
    for (size_t i = 0; i < examples.size(); i++) {
        const ChoiceExample& ex = examples[i];
        const size_t start = s.size();
        s.insert(s.end(), {(uint32_t)CHOICE_EXAMPLE_START, 0, (uint32_t)i, (uint32_t)ex.label, (uint32_t)ex.endings.size()});
        auto put = [&](const std::vector<int>& toks) {
            s.push_back((uint32_t)toks.size());
            for (int t : toks) {
                if (t < 0 || (!wide && t >= CHOICE_EXAMPLE_START))
                    fatal("'%s': example %zu has token %d (the uint16 format holds 0..65534)", path.c_str(), i, t);
                s.push_back((uint32_t)t);
            }
        };
        put(ex.context);
        for (const auto& e : ex.endings) put(e);
        const size_t bytes = (s.size() - start) * w;
        if (bytes > word_max || bytes > 0x7fffffff) fatal("'%s': example %zu takes %zu bytes (more than the format holds)", path.c_str(), i, bytes);
        s[start + 1] = (uint32_t)bytes;
        longest = std::max(longest, (int)bytes);
    }
    int header[256] = {CHOICE_FILE_MAGIC, wide ? CHOICE_FILE_VERSION_WIDE : CHOICE_FILE_VERSION, (int)examples.size(), longest};
    std::string tmp = path + ".tmp";
    FILE* f = fopen_or_die(tmp.c_str(), "wb");
    fwrite_or_die(header, sizeof(int), 256, f, tmp.c_str());
    if (wide) fwrite_or_die(s.data(), 4, s.size(), f, tmp.c_str());
    else {
        std::vector<uint16_t> s16(s.begin(), s.end());
        fwrite_or_die(s16.data(), 2, s16.size(), f, tmp.c_str());
    }
    if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0) fatal("cannot write '%s': %s", path.c_str(), strerror(errno));
}

// Scores every ending of `set` with the model (B×T: the training run's micro-batch, whose
// activations are reused) and returns the accuracy. Every rank of `dp` calls it and gets the same.
template <class floatX>
inline ChoiceResult choice_evaluate(const Ctx& ctx, GPT<floatX>* g, const ChoiceSet& set, int B, int T, Group& dp) {
    const int Tr = set.longest_row, R = (int)std::min<long long>((long long)B * T / Tr, set.rows);
    // the rows in file order: (example, ending)
    std::vector<std::pair<int, int>> rows;
    for (int i = 0; i < (int)set.examples.size(); i++)
        for (int e = 0; e < (int)set.examples[i].endings.size(); e++) rows.push_back({i, e});
    std::vector<double> score(set.rows, 0.0);
    std::vector<int> x((size_t)R * Tr), y((size_t)R * Tr);
    std::vector<float> pp_losses;  // (gpt_infer_losses's, with pipeline parallelism)
    const long long per_batch = (long long)R * dp.size;
    double last_note = now_seconds();  // a progress line every 10 s (a large model on the CPU takes minutes)
    for (long long first = 0; first < set.rows; first += per_batch) {
        if (now_seconds() - last_note > 10) {
            print0("  hellaswag: %lld of %d endings scored\n", first, set.rows);
            fflush(stdout);
            last_note = now_seconds();
        }
        const long long mine = first + (long long)dp.rank * R;  // this rank's first row of the global batch
        std::fill(x.begin(), x.end(), 0);
        std::fill(y.begin(), y.end(), 0);
        for (int r = 0; r < R && mine + r < set.rows; r++) {
            const ChoiceExample& ex = set.examples[rows[mine + r].first];
            std::vector<int> row = ex.context;
            const std::vector<int>& e = ex.endings[rows[mine + r].second];
            row.insert(row.end(), e.begin(), e.end());
            for (size_t t = 0; t + 1 < row.size(); t++) { x[(size_t)r * Tr + t] = row[t]; y[(size_t)r * Tr + t] = row[t + 1]; }
        }
        gpt_infer(ctx, g, x.data(), y.data(), R, Tr);  // (through the pipeline's stages, if any)
        const float* losses = gpt_infer_losses(g, R, Tr, &pp_losses);
        for (int r = 0; r < R && mine + r < set.rows; r++) {
            const ChoiceExample& ex = set.examples[rows[mine + r].first];
            const size_t c = ex.context.size(), n = ex.endings[rows[mine + r].second].size();
            double sum = 0.0;
            for (size_t t = c - 1; t < c + n - 1; t++) sum += losses[(size_t)r * Tr + t];
            score[mine + r] = sum / n;
        }
    }
    comm_sum_doubles(dp, score.data(), set.rows);
    ChoiceResult res;
    size_t at = 0;
    for (const ChoiceExample& ex : set.examples) {
        const double* s = score.data() + at;
        const int n = (int)ex.endings.size();
        const int pred = (int)(std::min_element(s, s + n) - s);
        res.correct += pred == ex.label;
        res.gold_loss += s[ex.label];
        res.total++;
        at += n;
    }
    res.gold_loss /= res.total;
    return res;
}
