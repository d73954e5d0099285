/*
tokenizer.h — byte-level BPE (GPT-2's, and Llama 3's tiktoken kind): encode and decode, in C++.

Encoding, exactly GPT-2's (and tiktoken's for a rank file):
  1. pre-tokenize the text with the tokenizer's regex (PCRE2);
  2. each piece starts as its UTF-8 bytes, one token a byte;
  3. merge the adjacent pair of the lowest rank, all its occurrences, until none has a rank.
Decoding joins the tokens' bytes: decode(encode(x)) == x for any UTF-8 text.

The Tokenizer is read-only once loaded; an Encoder is one thread's state. tokenizer_next_cut
splits a long text where the regex splits anyway, so pieces encode on every core.
Files: data/gpt2_tokenizer.bin (llm.c's format plus the merges) or a tiktoken rank file.

Main functions: tokenizer_load, tokenizer_encode, tokenizer_decode, tokenizer_next_cut.

Test: test/test_tokenizer.sh (token for token against the reference GPT-2 BPE and tiktoken, on
real text; the decode round trip; the same tokens cut into pieces). More: docs/data.md.
*/
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string>
#include <unordered_map>
#include <vector>
#include "common.h"

static const int TOKENIZER_MAGIC = 20240328;

struct Tokenizer {                              // read-only once loaded: threads share it
    std::vector<std::string> vocab;             // token id → bytes (a special token: its name)
    int eot_token = -1;                         // <|endoftext|> (GPT-2), <|end_of_text|> (Llama 3)
    int doc_token = -1;                         // put before each document: eot (GPT-2), <|begin_of_text|> (Llama 3)
    bool tiktoken = false;                      // loaded from a rank file (Llama 3's kind)
    std::unordered_map<std::string, int> whole; // (rank file) bytes → token: a piece that is one token
    std::unordered_map<uint64_t, int> ranks;    // (left << 32 | right) → merge rank
    std::vector<int> merge_result;              // rank → merged token id
    int byte_token[256];                        // byte → its single-byte token
    pcre2_code* regex = nullptr;
    int rank_of(int left, int right) const {    // the merge rank of a pair, or -1
        auto it = ranks.find((uint64_t)left << 32 | (uint32_t)right);
        return it == ranks.end() ? -1 : it->second;
    }
};

// What encoding changes: PCRE2's match buffer and a cache of the pieces already merged. One per
// thread (tokenize.cpp encodes with all cores).
struct Encoder {
    const Tokenizer* tk;
    pcre2_match_data* match;
    std::unordered_map<std::string, std::vector<int>> cache;  // piece → tokens
    size_t cache_limit = 1000000;                             // emptied when it grows past this (memory on huge inputs)
    explicit Encoder(const Tokenizer& t) : tk(&t), match(pcre2_match_data_create_from_pattern(t.regex, nullptr)) {}
    ~Encoder() { pcre2_match_data_free(match); }
    Encoder(const Encoder&) = delete;
    Encoder& operator=(const Encoder&) = delete;
};

// Every byte's single-byte token (both kinds have one for each); fatal naming the file if not.
inline void tokenizer_byte_tokens(Tokenizer* tk, const std::unordered_map<std::string, int>& id_of, const char* path) {
    for (int b = 0; b < 256; b++) {
        auto it = id_of.find(std::string(1, (char)b));
        if (it == id_of.end()) fatal("'%s' has no token for byte %d", path, b);
        tk->byte_token[b] = it->second;
    }
}

inline void tokenizer_compile(Tokenizer* tk, const char* pattern) {
    int err; PCRE2_SIZE erroff;
    tk->regex = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              &err, &erroff, nullptr);
    if (!tk->regex) fatal("internal error: the pre-tokenizer regex does not compile (PCRE2 error %d at %zu)", err, (size_t)erroff);
    pcre2_jit_compile(tk->regex, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back silently
}

// llm.c's tokenizer file with our merges (the header's layout).
inline void tokenizer_load_gpt2(Tokenizer* tk, FILE* f, const char* path) {
    int header[256];
    fread_or_die(header, sizeof(int), 256, f, path);
    if (header[0] != TOKENIZER_MAGIC || header[1] != 2)
        fatal("'%s' is not a tokenizer file: header starts [%d, %d], expected [%d, 2]", path, header[0], header[1], TOKENIZER_MAGIC);
    int V = header[2], n_merges = header[4];
    if (V <= 0 || n_merges <= 0) fatal("'%s' has no BPE merges (a decode-only llm.c tokenizer?); encoding needs them", path);
    tk->eot_token = tk->doc_token = header[3];
    tk->vocab.resize(V);
    std::unordered_map<std::string, int> id_of;
    for (int i = 0; i < V; i++) {
        unsigned char len;
        fread_or_die(&len, 1, 1, f, path);
        tk->vocab[i].resize(len);
        if (len) fread_or_die(&tk->vocab[i][0], 1, len, f, path);
        id_of.emplace(tk->vocab[i], i);
    }
    tokenizer_byte_tokens(tk, id_of, path);
    std::vector<int> pairs(2 * (size_t)n_merges);
    fread_or_die(pairs.data(), sizeof(int), pairs.size(), f, path);
    tk->merge_result.resize(n_merges);
    for (int r = 0; r < n_merges; r++) {
        int a = pairs[2 * r], b = pairs[2 * r + 1];
        if (a < 0 || a >= V || b < 0 || b >= V) fatal("'%s': merge %d refers to token %d/%d outside the vocabulary", path, r, a, b);
        auto it = id_of.find(tk->vocab[a] + tk->vocab[b]);
        if (it == id_of.end()) fatal("'%s': merge %d makes a string that is not a token", path, r);
        tk->ranks[((uint64_t)a << 32) | (uint32_t)b] = r;
        tk->merge_result[r] = it->second;
    }
    tokenizer_compile(tk, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
}

// The bytes of a base64 string (RFC 4648, '=' padding); false if it is not one.
inline bool base64_decode(const std::string& s, std::string* out) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        return c == '+' ? 62 : c == '/' ? 63 : -1;
    };
    if (s.empty() || s.size() % 4) return false;
    out->clear();
    for (size_t i = 0; i < s.size(); i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == s.size() && j >= 2) { v[j] = 0; pad++; }
            else if (pad || (v[j] = val(s[i + j])) < 0) return false;
        }
        const uint32_t w = (uint32_t)v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
        out->push_back((char)(w >> 16));
        if (pad < 2) out->push_back((char)(w >> 8 & 255));
        if (pad < 1) out->push_back((char)(w & 255));
    }
    return true;
}

// A rank file (tiktoken's format), with Llama 3's regex and special tokens (the header says which).
inline void tokenizer_load_ranks(Tokenizer* tk, FILE* f, const char* path) {
    std::vector<std::string> by_rank;
    std::vector<bool> seen;
    char line[4096];
    for (long long ln = 1; fgets(line, sizeof line, f); ln++) {
        std::string l(line);
        if (!l.empty() && l.back() == '\n') l.pop_back();
        else if (!feof(f)) fatal("'%s' line %lld: longer than %zu bytes (not a rank file?)", path, ln, sizeof line - 2);
        if (l.empty()) continue;
        const size_t sp = l.find(' ');
        std::string bytes;
        char* end = nullptr;
        const long r = sp == std::string::npos ? -1 : strtol(l.c_str() + sp + 1, &end, 10);
        if (sp == std::string::npos || !base64_decode(l.substr(0, sp), &bytes) || r < 0 || r >= (1 << 24) || *end)
            fatal("'%s' line %lld: expected \"BASE64 RANK\" (a tiktoken rank file, or llm.c's tokenizer with header %d), got '%.60s'",
                  path, ln, TOKENIZER_MAGIC, l.c_str());
        if ((size_t)r >= by_rank.size()) by_rank.resize(r + 1), seen.resize(r + 1);
        if (seen[r]) fatal("'%s' line %lld: rank %ld given twice", path, ln, r);
        by_rank[r] = bytes, seen[r] = true;
    }
    const int n = (int)by_rank.size();
    for (int r = 0; r < n; r++)
        if (!seen[r]) fatal("'%s': no token of rank %d (ranks must be 0 … %d, each once)", path, r, n - 1);
    std::unordered_map<std::string, int> id_of;
    for (int r = 0; r < n; r++)
        if (!id_of.emplace(by_rank[r], r).second) fatal("'%s': ranks %d and %d are the same bytes", path, id_of[by_rank[r]], r);
    tokenizer_byte_tokens(tk, id_of, path);
    tk->merge_result.resize(n);
    for (int t = 0; t < n; t++) {  // every split of token t into two tokens merges with t's rank
        const std::string& s = by_rank[t];
        tk->merge_result[t] = t;
        for (size_t cut = 1; cut < s.size(); cut++) {
            auto a = id_of.find(s.substr(0, cut)), b = id_of.find(s.substr(cut));
            if (a != id_of.end() && b != id_of.end()) tk->ranks[(uint64_t)a->second << 32 | (uint32_t)b->second] = t;
        }
    }
    tk->vocab = std::move(by_rank);
    tk->whole = std::move(id_of);
    for (int k = 0; k < 256; k++) {
        const char* name = k == 0 ? "begin_of_text" : k == 1 ? "end_of_text" : k == 6 ? "start_header_id"
                         : k == 7 ? "end_header_id" : k == 9 ? "eot_id" : nullptr;
        tk->vocab.push_back(name ? std::string("<|") + name + "|>" : "<|special_" + std::to_string(k) + "|>");
    }
    tk->doc_token = n, tk->eot_token = n + 1;
    tk->tiktoken = true;
    tokenizer_compile(tk, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
}

// Either kind: llm.c's binary file (its magic first) or a rank file (text).
// path: the value of --tokenizer (train_gpt's and tokenize's), named in the error.
inline void tokenizer_load(Tokenizer* tk, const char* path) {
    FILE* f = fopen_or_die(path, "rb", "--tokenizer");
    int magic = 0;
    const bool binary = fread(&magic, sizeof magic, 1, f) == 1 && magic == TOKENIZER_MAGIC;
    rewind(f);
    if (binary) tokenizer_load_gpt2(tk, f, path);
    else tokenizer_load_ranks(tk, f, path);
    fclose(f);
}

inline void tokenizer_free(Tokenizer* tk) {
    if (tk->regex) pcre2_code_free(tk->regex);
    tk->regex = nullptr;
}

// BPE of one pre-tokenized piece.
inline const std::vector<int>& encoder_bpe(Encoder* e, const std::string& piece) {
    auto hit = e->cache.find(piece);
    if (hit != e->cache.end()) return hit->second;
    const Tokenizer& tk = *e->tk;
    std::vector<int> w;
    if (tk.tiktoken) {  // a piece that is itself a token (tiktoken's rule; see the header)
        auto it = tk.whole.find(piece);
        if (it != tk.whole.end()) {
            if (e->cache.size() > e->cache_limit) e->cache.clear();
            return e->cache[piece] = {it->second};
        }
    }
    for (unsigned char ch : piece) w.push_back(tk.byte_token[ch]);
    while (w.size() > 1) {
        int best = -1;  // the lowest rank among adjacent pairs
        for (size_t i = 0; i + 1 < w.size(); i++) {
            int r = tk.rank_of(w[i], w[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) break;
        std::vector<int> merged;  // every occurrence of that pair merged, left to right
        for (size_t i = 0; i < w.size(); i++) {
            if (i + 1 < w.size() && tk.rank_of(w[i], w[i + 1]) == best) {
                merged.push_back(tk.merge_result[best]);
                i++;
            } else merged.push_back(w[i]);
        }
        w.swap(merged);
    }
    if (e->cache.size() > e->cache_limit) e->cache.clear();
    return e->cache[piece] = w;
}

// Appends to out the tokens of the pre-tokens of text s[0, n) that start before stop: stop is n,
// or a cut (tokenizer_next_cut), where the text splits into pieces that encode independently.
inline void encoder_encode(Encoder* e, const char* s, size_t n, size_t stop, std::vector<int>* out) {
    const Tokenizer& tk = *e->tk;
    PCRE2_SIZE pos = 0;
    while (pos < stop) {
        int rc = pcre2_match(tk.regex, (PCRE2_SPTR)s, n, pos, 0, e->match, nullptr);
        PCRE2_SIZE b, en;
        if (rc < 0) { b = pos; en = n; }  // no match (only invalid UTF-8 can do this): keep the bytes
        else {
            PCRE2_SIZE* ov = pcre2_get_ovector_pointer(e->match);
            b = ov[0]; en = ov[1];
            if (en == b) en = b + 1;
        }
        for (PCRE2_SIZE i = pos; i < b; i++)  // bytes the regex skipped (invalid UTF-8): one token per byte
            out->push_back(tk.byte_token[(unsigned char)s[i]]);
        const std::vector<int>& t = encoder_bpe(e, std::string(s + b, en - b));
        out->insert(out->end(), t.begin(), t.end());
        pos = en;
    }
}

// The first cut at or after from in s[0, n) (n if none): just after a '\n' that is followed by a
// printable ASCII character other than space. Why the pieces between cuts encode independently:
// a pre-token holding that '\n' is whitespace only (the regexes' \s alternatives) or, in Llama 3's,
// ends in line ends ([\r\n]*, [\r\n]+), so it ends at the cut; the next one starts there whatever
// came before, since neither regex looks behind; and the one character past the cut that the
// piece's last pre-token looks at (\s+(?!\S)) is in s, since a piece is encoded within the whole
// text (encoder_encode's stop).
inline size_t tokenizer_next_cut(const char* s, size_t n, size_t from) {
    for (size_t i = from < 1 ? 1 : from; i < n; i++)
        if (s[i - 1] == '\n' && s[i] > ' ' && s[i] < 127) return i;
    return n;
}

// Appends the tokens of text to out (one text, one thread; tokenize.cpp parallelizes).
inline void tokenizer_encode(const Tokenizer& tk, const std::string& text, std::vector<int>* out) {
    Encoder e(tk);
    encoder_encode(&e, text.data(), text.size(), text.size(), out);
}

inline std::string tokenizer_decode(const Tokenizer& tk, const int* tokens, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= (int)tk.vocab.size()) fatal("cannot decode token %d: vocabulary has %zu tokens", tokens[i], tk.vocab.size());
        s += tk.vocab[tokens[i]];
    }
    return s;
}
