/*
tokenize — text files in, token shards out (and back: --decode); GPT-2's tokenizer, or Llama 3's
kind (a tiktoken rank file: --tokenizer original/tokenizer.model).

  ./tokenize INPUT.txt OUTPUT.bin            one shard: the document token, then the text's tokens
  ./tokenize --output-prefix PREFIX [--val-fraction F] [--shard-tokens N] FILE...
                                             a dataset: train shards and a validation shard
  ./tokenize --jsonl [--jsonl-key KEY] ...   JSON lines, a document a line
  ./tokenize --decode SHARD                  prints the text of a shard
  ./tokenize --hellaswag hellaswag_val.jsonl OUTPUT.bin    the multiple-choice eval file

An input that is a directory, or is the output, is refused. A rerun with the same --output-prefix
removes the earlier run's extra shards, naming each.
Encoding runs on every core (--threads) and gives the same tokens for any thread count. One
thread reads the next 64 MiB of pieces while the others encode the last, so memory holds two
batches, not the whole input.

Test: test/test_tokenizer.sh. More: docs/data.md, docs/formats.md.
*/
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <omp.h>
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/hellaswag.h"

static void print_help() {
    printf(
        "usage: tokenize [options] INPUT.txt OUTPUT.bin\n"
        "       tokenize [options] --output-prefix PREFIX FILE...\n"
        "       tokenize [--tokenizer PATH] --decode SHARD\n"
        "       tokenize [--tokenizer PATH] --hellaswag INPUT.jsonl OUTPUT.bin\n"
        "\n"
        "Writes token shards (256 int32 header [20240520, 1, ntok], then uint16 tokens; uint32 tokens\n"
        "under [20240801, 7, ntok] with --uint32 or a vocabulary of more than 65536 tokens).\n"
        "Each input file (each line, with --jsonl) is one document, preceded by GPT-2's <|endoftext|> (50256)\n"
        "or, with a rank file, Llama 3's <|begin_of_text|>.\n"
        "\n"
        "options:\n"
        "  --tokenizer PATH       tokenizer file (default: data/gpt2_tokenizer.bin), or a tiktoken rank file\n"
        "                         (\"BASE64 RANK\" lines, e.g. Llama 3's original/tokenizer.model): Llama 3's\n"
        "                         pre-tokenizer and 256 special tokens after the ranks (llmc/tokenizer.h)\n"
        "  --output-prefix PREFIX write PREFIX_val_000000.bin and PREFIX_train_NNNNNN.bin\n"
        "  --val-fraction F       fraction of documents (or, for one text file, of its bytes) kept for\n"
        "                         validation, 0 <= F < 1 (default 0.05 with --output-prefix)\n"
        "  --shard-tokens N       tokens per train shard (default 100000000)\n"
        "  --uint32               write llm.c's uint32 shards ([20240801, 7, ntok])\n"
        "  --threads N            threads that encode (default 0: all cores, or OMP_NUM_THREADS)\n"
        "  --chunk-bytes N        text is encoded in pieces of about N bytes, cut where a line starts\n"
        "                         with a printable character; the same tokens for any N (default 1048576)\n"
        "  --decode SHARD         print the text of SHARD and exit\n"
        "  --jsonl                inputs are JSON lines: each line an object whose --jsonl-key field\n"
        "                         (a string) is one document\n"
        "  --jsonl-key KEY        the field of each --jsonl line that holds the text (default text)\n"
        "  --hellaswag            INPUT.jsonl is HellaSwag (ctx, endings, label a line; e.g. hellaswag_val.jsonl):\n"
        "                         write train_gpt --hellaswag's eval file (llm.c's hellaswag_val.bin format; with a\n"
        "                         rank file: uint32, version 2, each context after <|begin_of_text|>)\n"
        "  --help                 this message\n");
}

// ----------------------------------------------------------------------------
// just enough JSON for the dataset's lines: objects, arrays, strings (every escape, \uXXXX with
// surrogate pairs, as UTF-8), numbers, true/false/null

struct Json {
    enum Kind { NUL, BOOL, NUM, STR, ARR, OBJ } kind = NUL;
    double num = 0;
    std::string str;
    std::vector<Json> items;          // ARR's elements, OBJ's values
    std::vector<std::string> keys;    // OBJ's keys
    const Json* get(const std::string& k) const {
        for (size_t i = 0; i < keys.size(); i++) if (keys[i] == k) return &items[i];
        return nullptr;
    }
};

struct JsonParser {
    const std::string& s;
    const std::string& where;  // "file line N", for errors
    size_t i = 0;
    [[noreturn]] void fail(const char* what) { fatal("%s: bad JSON at byte %zu: %s", where.c_str(), i, what); }
    void ws() { while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++; }
    bool eat(char c) { ws(); if (i < s.size() && s[i] == c) { i++; return true; } return false; }
    void expect(char c) { if (!eat(c)) { char m[32]; snprintf(m, sizeof(m), "expected '%c'", c); fail(m); } }
    unsigned hex4() {
        if (i + 4 > s.size()) fail("short \\u escape");
        const std::string digits = s.substr(i, 4);
        if (digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) fail("bad \\u escape");
        i += 4;
        return (unsigned)std::stoul(digits, nullptr, 16);
    }
    static void utf8(std::string* out, unsigned cp) {
        if (cp < 0x80) *out += (char)cp;
        else if (cp < 0x800) { *out += (char)(0xC0 | cp >> 6); *out += (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) { *out += (char)(0xE0 | cp >> 12); *out += (char)(0x80 | (cp >> 6 & 63)); *out += (char)(0x80 | (cp & 63)); }
        else { *out += (char)(0xF0 | cp >> 18); *out += (char)(0x80 | (cp >> 12 & 63)); *out += (char)(0x80 | (cp >> 6 & 63)); *out += (char)(0x80 | (cp & 63)); }
    }
    std::string string() {
        expect('"');
        std::string out;
        while (true) {
            if (i >= s.size()) fail("unterminated string");
            char c = s[i++];
            if (c == '"') return out;
            if (c != '\\') { out += c; continue; }
            if (i >= s.size()) fail("unterminated string");
            switch (char e = s[i++]) {
                case '"': case '\\': case '/': out += e; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    unsigned cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u') {
                        size_t at = i;
                        i += 2;
                        unsigned lo = hex4();
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else i = at;  // a lone high surrogate: kept as it is, like the next escape
                    }
                    utf8(&out, cp);
                    break;
                }
                default: fail("bad escape");
            }
        }
    }
    Json value() {
        Json v;
        ws();
        if (i >= s.size()) fail("unexpected end");
        char c = s[i];
        if (c == '{') {
            i++; v.kind = Json::OBJ;
            if (eat('}')) return v;
            do { ws(); v.keys.push_back(string()); expect(':'); v.items.push_back(value()); } while (eat(','));
            expect('}');
        } else if (c == '[') {
            i++; v.kind = Json::ARR;
            if (eat(']')) return v;
            do v.items.push_back(value()); while (eat(','));
            expect(']');
        } else if (c == '"') {
            v.kind = Json::STR; v.str = string();
        } else if (s.compare(i, 4, "true") == 0 || s.compare(i, 5, "false") == 0) {
            v.kind = Json::BOOL; v.num = c == 't'; i += c == 't' ? 4 : 5;
        } else if (s.compare(i, 4, "null") == 0) {
            i += 4;
        } else {
            char* end;
            v.kind = Json::NUM; v.num = strtod(s.c_str() + i, &end);
            if (end == s.c_str() + i) fail("expected a value");
            i = end - s.c_str();
        }
        return v;
    }
};

// Calls f(line, "PATH line N") for each line of a file that is not blank (the line with its '\n').
static void for_each_line(const std::string& path, const std::function<void(const std::string&, const std::string&)>& f) {
    FILE* in = fopen_or_die(path.c_str(), "rb");
    char* buf = nullptr;
    size_t cap = 0;
    long long lineno = 0;
    for (ssize_t n; (n = getline(&buf, &cap, in)) >= 0; ) {
        lineno++;
        const std::string line(buf, n);
        if (line.find_first_not_of(" \t\r\n") != std::string::npos) f(line, path + " line " + std::to_string(lineno));
    }
    free(buf);
    fclose(in);
}

// Calls f(value, "PATH line N", bytes of the line) for each line of a JSON-lines file that is not
// blank; dies naming the line if it is not one JSON value.
static void for_each_json_line(const std::string& path, const std::function<void(const Json&, const std::string&, size_t)>& f) {
    for_each_line(path, [&](const std::string& line, const std::string& where) {
        JsonParser p{line, where};
        Json v = p.value();
        p.ws();
        if (p.i != line.size()) p.fail("text after the value");
        f(v, where, line.size());
    });
}

static size_t count_json_lines(const std::string& path) {  // the lines for_each_json_line visits
    size_t count = 0;
    for_each_line(path, [&](const std::string&, const std::string&) { count++; });
    return count;
}

// HellaSwag's jsonl → the eval file: per line, the context's tokens and each ending's tokens,
// the ending preceded by a space (it continues the context's last word). With a rank file
// (Llama 3's kind) the context starts with <|begin_of_text|>, as a Llama 3 model sees every text
// begin, and the file is uint32 (version 2): its ids pass 65535.
static void hellaswag_to_eval_file(const Tokenizer& tk, const std::string& in, const std::string& out_path) {
    Encoder enc(tk);
    auto encode = [&](const std::string& text, std::vector<int>* out) { encoder_encode(&enc, text.data(), text.size(), text.size(), out); };
    std::vector<ChoiceExample> examples;
    for_each_json_line(in, [&](const Json& ex, const std::string& where, size_t) {
        const Json *ctx = ex.get("ctx"), *endings = ex.get("endings"), *label = ex.get("label");
        if (ex.kind != Json::OBJ || !ctx || ctx->kind != Json::STR || !endings || endings->kind != Json::ARR || !label)
            fatal("%s: expected an object with \"ctx\" (a string), \"endings\" (a list of strings) and \"label\"", where.c_str());
        ChoiceExample e;
        e.label = -1;  // a number, or a string of digits ("" in the test split)
        if (label->kind == Json::NUM && label->num == (int)label->num) e.label = (int)label->num;
        if (label->kind == Json::STR && !label->str.empty() && label->str.find_first_not_of("0123456789") == std::string::npos)
            e.label = atoi(label->str.c_str());
        if (e.label < 0 || e.label >= (int)endings->items.size())
            fatal("%s: label must be the index of one of its %zu endings (the test split has no labels)", where.c_str(), endings->items.size());
        if (tk.tiktoken) e.context.push_back(tk.doc_token);
        encode(ctx->str, &e.context);
        for (const Json& end : endings->items) {
            if (end.kind != Json::STR) fatal("%s: an ending is not a string", where.c_str());
            e.endings.emplace_back();
            encode(" " + end.str, &e.endings.back());
        }
        examples.push_back(std::move(e));
    });
    if (examples.empty()) fatal("%s: no examples", in.c_str());
    choice_set_write(out_path, examples, tk.vocab.size() > (size_t)CHOICE_EXAMPLE_START);
    fprintf(stderr, "%s: %zu examples -> %s\n", in.c_str(), examples.size(), out_path.c_str());
}

static std::string read_file(const std::string& path) {
    FILE* f = fopen_or_die(path.c_str(), "rb");
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

// ----------------------------------------------------------------------------
// Encoding on every core, in order. A document (a file, a --jsonl line, or one side of a single
// file's split) is cut at tokenizer_next_cut into pieces of about --chunk-bytes; the pieces gather
// into a batch (64 MiB of text, or 4096 pieces a thread) that all threads encode at once, each
// with its own Encoder, while this thread reads (and parses) the next batch; then the batch's
// tokens go out in document order, each document's <|endoftext|> first. So the output is the same
// for any --threads and --chunk-bytes (test_tokenizer holds them to each other and to the
// reference encoder), and memory holds two batches, not the input.

struct Piece {
    std::shared_ptr<const std::string> text;  // the text its document lies in
    size_t begin, stop, end;                  // the tokens of text[begin, stop), encoded within the document text[begin, end)
    bool first;                               // its document's first piece: <|endoftext|> before it
    int sink;                                 // where its tokens go (the caller's numbers)
};

struct ParallelEncoder {
    const Tokenizer& tk;
    size_t chunk_bytes;
    std::function<void(int sink, const std::vector<int>& tokens)> emit;  // called on this thread, in order
    std::vector<std::unique_ptr<Encoder>> encoders;  // one an encoding thread
    std::vector<Piece> batch;                        // being gathered
    size_t batch_bytes = 0;
    std::vector<Piece> running;                      // being encoded, by `worker` and its OpenMP team
    std::vector<std::vector<int>> running_tokens;
    std::thread worker;
    static const size_t BATCH_BYTES = 64 << 20;

    ParallelEncoder(const Tokenizer& t, size_t chunk, int threads, std::function<void(int, const std::vector<int>&)> out)
        : tk(t), chunk_bytes(chunk), emit(std::move(out)) {
        for (int i = 0; i < threads; i++) {
            encoders.emplace_back(new Encoder(tk));
            encoders.back()->cache_limit = std::max<size_t>(100000, 1000000 / threads);  // ~100 bytes an entry
        }
    }
    ~ParallelEncoder() { if (worker.joinable()) worker.join(); }
    // the document text[begin, end): <|endoftext|>, then its tokens, to sink
    void add_document(std::shared_ptr<const std::string> text, size_t begin, size_t end, int sink) {
        size_t at = begin;
        bool first = true;
        do {  // an empty document is one empty piece (its <|endoftext|>)
            size_t stop = end - at > chunk_bytes ? tokenizer_next_cut(text->data(), end, at + chunk_bytes) : end;
            batch.push_back({text, at, stop, end, first, sink});
            batch_bytes += stop - at;
            first = false;
            at = stop;
            if (batch_bytes >= BATCH_BYTES || batch.size() >= 4096 * encoders.size()) start();
        } while (at < end);
    }
    void start() {  // the batch to the encoding threads (once the previous one's tokens are out)
        finish();
        running.swap(batch);
        batch.clear();
        batch_bytes = 0;
        running_tokens.assign(running.size(), {});
        worker = std::thread([this] {
            #pragma omp parallel for schedule(dynamic, 1) num_threads(encoders.size())
            for (size_t i = 0; i < running.size(); i++) {
                const Piece& p = running[i];
                if (p.first) running_tokens[i].push_back(tk.doc_token);
                encoder_encode(encoders[omp_get_thread_num()].get(), p.text->data() + p.begin, p.end - p.begin,
                               p.stop - p.begin, &running_tokens[i]);
            }
        });
    }
    void finish() {  // waits for the batch being encoded and emits its tokens
        if (!worker.joinable()) return;
        worker.join();
        for (size_t i = 0; i < running.size(); i++) emit(running[i].sink, running_tokens[i]);
        running.clear();
    }
    void flush() { start(); finish(); }  // at the end: every document's tokens out
};

// A line on stderr at most every few seconds, and at the end.
struct Progress {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(), last = t0;
    void line(bool final, size_t docs_read, size_t n_docs, size_t bytes, size_t total_bytes, long long tokens) {
        auto now = std::chrono::steady_clock::now();
        if (!final && now - last < std::chrono::seconds(5)) return;
        last = now;
        double s = std::chrono::duration<double>(now - t0).count();
        fprintf(stderr, "%s %zu/%zu documents, %.1f/%.1f MiB read, %lld tokens, %.1f MiB/s\n", final ? "tokenized" : "tokenizing",
                docs_read, n_docs, bytes / 1048576.0, total_bytes / 1048576.0, tokens, s > 0 ? bytes / 1048576.0 / s : 0.0);
    }
};

// An earlier run with the same --output-prefix may have written more shards than this one: its
// PREFIX_train_NNNNNN.bin past the last written here (and its validation shard, when this run
// wrote none) would otherwise be read with them. They are removed, each named.
static void remove_stale_shards(const std::string& prefix, int n_train, bool wrote_val) {
    namespace fs = std::filesystem;
    const fs::path p(prefix);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    const std::string base = p.filename().string();
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        int n = -1;
        char kind[8] = {0}, tail[8] = {0};
        if (name.size() <= base.size() || name.compare(0, base.size(), base) != 0) continue;
        if (sscanf(name.c_str() + base.size(), "_%5[a-z]_%6d%4s", kind, &n, tail) != 3 || strcmp(tail, ".bin") != 0) continue;
        if (name.size() != base.size() + strlen(kind) + 2 + 6 + 4) continue;  // (exactly PREFIX_kind_NNNNNN.bin)
        const bool stale = (!strcmp(kind, "train") && n >= n_train) || (!strcmp(kind, "val") && !wrote_val);
        if (!stale) continue;
        if (fs::remove(e.path(), ec)) fprintf(stderr, "removed %s (a shard of an earlier run with this prefix)\n", e.path().c_str());
    }
}

// ----------------------------------------------------------------------------
// the program's phases

struct Args {  // the command line (print_help)
    std::string tokenizer_path = "data/gpt2_tokenizer.bin", prefix, decode_path, jsonl_key = "text";
    double val_fraction = -1;  // −1: the default (0.05 for a dataset, else 0)
    long long shard_tokens = 100000000, threads = 0, chunk_bytes = 1 << 20;
    bool wide = false, hellaswag = false, jsonl = false;
    std::vector<std::string> files;
};

static long long parse_integer(const std::string& flag, const std::string& v, long long least, const char* what) {
    char* end;
    const long long n = strtoll(v.c_str(), &end, 10);
    if (*end || v.empty() || n < least) usage_error("%s: expected a %s integer, got '%s'", flag.c_str(), what, v.c_str());
    return n;
}

// False when --help was asked for (and printed).
static bool parse_args(int argc, char** argv, Args* o) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage_error("%s needs a value (see --help)", a.c_str());
            return argv[++i];
        };
        if (a == "--help" || a == "-h") { print_help(); return false; }
        else if (a == "--tokenizer") o->tokenizer_path = value();
        else if (a == "--output-prefix") o->prefix = value();
        else if (a == "--decode") o->decode_path = value();
        else if (a == "--uint32") o->wide = true;
        else if (a == "--hellaswag") o->hellaswag = true;
        else if (a == "--jsonl") o->jsonl = true;
        else if (a == "--jsonl-key") o->jsonl_key = value();
        else if (a == "--val-fraction") {
            std::string v = value(); char* end;
            o->val_fraction = strtod(v.c_str(), &end);
            if (*end || !(o->val_fraction >= 0 && o->val_fraction < 1)) usage_error("--val-fraction: expected a number in [0, 1), got '%s'", v.c_str());
        } else if (a == "--shard-tokens") {
            std::string v = value(); char* end;
            o->shard_tokens = strtoll(v.c_str(), &end, 10);
            if (*end || o->shard_tokens < 1) usage_error("--shard-tokens: expected a positive integer, got '%s'", v.c_str());
        } else if (a == "--threads") o->threads = parse_integer(a, value(), 0, "non-negative");
        else if (a == "--chunk-bytes") o->chunk_bytes = parse_integer(a, value(), 1, "positive");
        else if (a.size() > 1 && a[0] == '-') usage_error("unknown option '%s' (see --help)", a.c_str());
        else o->files.push_back(a);
    }
    return true;
}

// --decode: the text of a shard, to stdout.
static void decode_shard(const Tokenizer& tk, const std::string& path) {
    DataLoader d;
    Shard s = shard_open(path);
    d.shards = {s};
    d.vocab_size = (int)tk.vocab.size();
    std::vector<int> toks(s.ntok);
    if (s.ntok) dataloader_read(&d, 0, (int)s.ntok, toks.data());
    std::string text = tokenizer_decode(tk, toks.data(), toks.size());
    fwrite(text.data(), 1, text.size(), stdout);
}

// The documents, n of them, the last n_val for validation: each file; each line of a --jsonl
// file; or a single text file cut in two at the line boundary that leaves F of its bytes for
// validation (single, cut).
struct Documents {
    std::vector<std::string> inputs;
    size_t total_bytes = 0, n = 0, n_val = 0;
    std::shared_ptr<const std::string> single;
    size_t cut = 0;
};

// The inputs and what comes of them: one shard (INPUT OUTPUT), or a dataset (--output-prefix).
// Every input a readable file, and never the output too. Sets the default --val-fraction.
static Documents plan_documents(Args* o, bool dataset) {
    Documents d;
    d.inputs = o->files;
    if (!dataset) {
        if (o->files.size() != 2) usage_error("expected INPUT.txt OUTPUT.bin, or --output-prefix PREFIX FILE... (see --help)");
        d.inputs.pop_back();
    }
    if (d.inputs.empty()) usage_error("--output-prefix: no input files given");
    for (const std::string& in : d.inputs) {
        std::error_code ec;
        if (std::filesystem::is_directory(in, ec)) usage_error("%s: is a directory (an input is a text or JSON-lines file)", in.c_str());
        if (!dataset && std::filesystem::equivalent(in, o->files[1], ec))
            usage_error("%s: the output is the input (it would be overwritten by its own tokens)", in.c_str());
    }
    double& F = o->val_fraction;
    if (F < 0) F = dataset ? 0.05 : 0;
    if (!dataset && F > 0) usage_error("--val-fraction: only with --output-prefix (INPUT OUTPUT writes one shard)");
    for (const std::string& f : d.inputs) d.total_bytes += file_size_or_die(f.c_str());  // every file readable, before any shard is written
    if (o->jsonl) for (const std::string& f : d.inputs) d.n += count_json_lines(f);
    else d.n = d.inputs.size();
    if (d.n == 0) fatal("--jsonl: the input files hold no lines (no documents)");
    if (!o->jsonl && d.inputs.size() == 1) {
        d.single = std::make_shared<const std::string>(read_file(d.inputs[0]));
        const std::string& text = *d.single;
        d.cut = text.size() - (size_t)(F * text.size());
        while (d.cut > 0 && d.cut < text.size() && text[d.cut - 1] != '\n') d.cut++;
        if (d.cut < text.size()) { d.n = 2; d.n_val = 1; }
    } else if (F > 0) {
        d.n_val = std::max<size_t>(1, (size_t)(F * d.n + 0.5));
        if (d.n_val >= d.n) usage_error("--val-fraction %.3f leaves none of the %zu documents for training", F, d.n);
    }
    return d;
}

// Where the tokens go, in document order: the train side in shards as they fill (a dataset),
// the validation side at the end.
enum { TRAIN, VAL };
struct Output {
    const Args& o;
    bool dataset;
    std::vector<int> train, val;
    int shard_index = 0;
    long long total = 0;
    void add(int sink, const std::vector<int>& t) {
        std::vector<int>& out = sink == TRAIN ? train : val;
        out.insert(out.end(), t.begin(), t.end());
        total += t.size();
        if (dataset && sink == TRAIN) flush_train(false);
    }
    void flush_train(bool final) {  // writes the train shards that are full (at the end, what is left)
        while ((long long)train.size() >= o.shard_tokens || (final && !train.empty())) {
            size_t n = std::min<size_t>(train.size(), o.shard_tokens);
            char name[64]; snprintf(name, sizeof(name), "_train_%06d.bin", shard_index++);
            shard_write(o.prefix + name, std::vector<int>(train.begin(), train.begin() + n), o.wide);
            fprintf(stderr, "wrote %s%s (%zu tokens)\n", o.prefix.c_str(), name, n);
            train.erase(train.begin(), train.begin() + n);
        }
    }
};

// Every document through the encoder into out, with a progress line now and then.
static void encode_documents(const Tokenizer& tk, const Args& o, const Documents& d, Output* out) {
    ParallelEncoder enc(tk, o.chunk_bytes, omp_get_max_threads(), [out](int sink, const std::vector<int>& t) { out->add(sink, t); });
    Progress progress;
    size_t doc = 0, bytes_read = 0;
    auto add = [&](std::shared_ptr<const std::string> text, size_t begin, size_t end, size_t input_bytes) {
        enc.add_document(text, begin, end, doc < d.n - d.n_val ? TRAIN : VAL);
        doc++;
        bytes_read += input_bytes;
        progress.line(false, doc, d.n, bytes_read, d.total_bytes, out->total);
    };
    if (d.single) {
        add(d.single, 0, d.cut, d.cut);
        if (d.cut < d.single->size()) add(d.single, d.cut, d.single->size(), d.single->size() - d.cut);
    } else for (const std::string& f : d.inputs) {
        if (!o.jsonl) {
            auto text = std::make_shared<const std::string>(read_file(f));
            add(text, 0, text->size(), text->size());
        } else for_each_json_line(f, [&](const Json& v, const std::string& where, size_t line_bytes) {
            const Json* t = v.get(o.jsonl_key);
            if (v.kind != Json::OBJ || !t || t->kind != Json::STR)
                fatal("%s: expected an object with a string \"%s\" (--jsonl-key)", where.c_str(), o.jsonl_key.c_str());
            auto text = std::make_shared<const std::string>(t->str);
            add(text, 0, text->size(), line_bytes);
        });
    }
    enc.flush();
    progress.line(true, doc, d.n, bytes_read, d.total_bytes, out->total);
    if (doc != d.n) fatal("the inputs changed while they were read (%zu documents, %zu counted first)", doc, d.n);
}

// The shards: the one output file, or the dataset's last train shard and its validation shard
// (and an earlier run's extra shards removed).
static void write_outputs(const Args& o, Output* out) {
    if (!out->dataset) {
        shard_write(o.files[1], out->train, o.wide);
        fprintf(stderr, "%s: %zu tokens -> %s\n", o.files[0].c_str(), out->train.size(), o.files[1].c_str());
        return;
    }
    out->flush_train(true);
    if (!out->val.empty()) {
        shard_write(o.prefix + "_val_000000.bin", out->val, o.wide);
        fprintf(stderr, "wrote %s_val_000000.bin (%zu tokens)\n", o.prefix.c_str(), out->val.size());
    }
    remove_stale_shards(o.prefix, out->shard_index, !out->val.empty());
}

int main(int argc, char** argv) {
    Args o;
    if (!parse_args(argc, argv, &o)) return 0;
    Tokenizer tk;
    tokenizer_load(&tk, o.tokenizer_path.c_str());
    if (tk.vocab.size() > 65536) o.wide = true;  // ids past 65535 need uint32 shards
    if (!o.decode_path.empty()) {  // shard → text
        decode_shard(tk, o.decode_path);
    } else if (o.hellaswag) {      // the multiple-choice eval file
        if (o.threads > 0) omp_set_num_threads((int)o.threads);
        if (o.files.size() != 2 || !o.prefix.empty()) usage_error("--hellaswag: expected INPUT.jsonl OUTPUT.bin (see --help)");
        hellaswag_to_eval_file(tk, o.files[0], o.files[1]);
    } else {                       // text → one shard, or a dataset's shards
        if (o.threads > 0) omp_set_num_threads((int)o.threads);
        const bool dataset = !o.prefix.empty();
        const Documents d = plan_documents(&o, dataset);
        Output out{o, dataset};
        encode_documents(tk, o, d, &out);
        write_outputs(o, &out);
    }
    tokenizer_free(&tk);
    return 0;
}
