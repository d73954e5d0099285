/*
tokenize — text files in, GPT-2 token shards out (and back: --decode).

  ./tokenize INPUT.txt OUTPUT.bin
      one shard holding <|endoftext|> (50256) followed by the tokens of the text.
  ./tokenize --output-prefix PREFIX [--val-fraction F] [--shard-tokens N] FILE...
      a dataset: every file is a document, preceded by <|endoftext|>. The last F of the
      documents (at least one) form PREFIX_val_000000.bin and the rest PREFIX_train_NNNNNN.bin,
      cut every N tokens (default 100M, like llm.c). With a single file, the split is made at
      the line boundary that leaves F of its bytes for validation.
  ./tokenize --decode SHARD        prints the text of a shard

The shard format and the tokenizer are described in llmc/dataloader.h and llmc/tokenizer.h.
Test: test/test_tokenizer.sh.
*/
#include <string>
#include <vector>
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"

static void print_help() {
    printf(
        "usage: tokenize [options] INPUT.txt OUTPUT.bin\n"
        "       tokenize [options] --output-prefix PREFIX FILE...\n"
        "       tokenize [--tokenizer PATH] --decode SHARD\n"
        "\n"
        "Writes GPT-2 token shards (256 int32 header [20240520, 1, ntok], then uint16 tokens).\n"
        "Each input file is one document, preceded by <|endoftext|> (50256).\n"
        "\n"
        "options:\n"
        "  --tokenizer PATH       tokenizer file (default: data/gpt2_tokenizer.bin)\n"
        "  --output-prefix PREFIX write PREFIX_val_000000.bin and PREFIX_train_NNNNNN.bin\n"
        "  --val-fraction F       fraction of documents (or, for one file, of its bytes) kept for\n"
        "                         validation, 0 <= F < 1 (default 0.05 with --output-prefix)\n"
        "  --shard-tokens N       tokens per train shard (default 100000000)\n"
        "  --uint32               write llm.c's uint32 shards ([20240801, 7, ntok])\n"
        "  --decode SHARD         print the text of SHARD and exit\n"
        "  --help                 this message\n");
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

int main(int argc, char** argv) {
    std::string tokenizer_path = "data/gpt2_tokenizer.bin", prefix, decode_path;
    double val_fraction = -1;
    long long shard_tokens = 100000000;
    bool wide = false;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage_error("%s needs a value (see --help)", a.c_str());
            return argv[++i];
        };
        if (a == "--help" || a == "-h") { print_help(); return 0; }
        else if (a == "--tokenizer") tokenizer_path = value();
        else if (a == "--output-prefix") prefix = value();
        else if (a == "--decode") decode_path = value();
        else if (a == "--uint32") wide = true;
        else if (a == "--val-fraction") {
            std::string v = value(); char* end;
            val_fraction = strtod(v.c_str(), &end);
            if (*end || val_fraction < 0 || val_fraction >= 1) usage_error("--val-fraction: expected a number in [0, 1), got '%s'", v.c_str());
        } else if (a == "--shard-tokens") {
            std::string v = value(); char* end;
            shard_tokens = strtoll(v.c_str(), &end, 10);
            if (*end || shard_tokens < 1) usage_error("--shard-tokens: expected a positive integer, got '%s'", v.c_str());
        } else if (a.size() > 1 && a[0] == '-') usage_error("unknown option '%s' (see --help)", a.c_str());
        else files.push_back(a);
    }
    Tokenizer tk;
    tokenizer_load(&tk, tokenizer_path.c_str());

    if (!decode_path.empty()) {
        DataLoader d;
        Shard s = shard_open(decode_path);
        d.shards = {s};
        d.vocab_size = (int)tk.vocab.size();
        std::vector<int> toks(s.ntok);
        if (s.ntok) dataloader_read(&d, 0, (int)s.ntok, toks.data());
        std::string text = tokenizer_decode(tk, toks.data(), toks.size());
        fwrite(text.data(), 1, text.size(), stdout);
        return 0;
    }

    if (prefix.empty()) {  // the simple form: INPUT OUTPUT
        if (files.size() != 2) usage_error("expected INPUT.txt OUTPUT.bin, or --output-prefix PREFIX FILE... (see --help)");
        std::vector<int> toks = {tk.eot_token};
        tokenizer_encode(&tk, read_file(files[0]), &toks);
        shard_write(files[1], toks, wide);
        fprintf(stderr, "%s: %zu tokens -> %s\n", files[0].c_str(), toks.size(), files[1].c_str());
        return 0;
    }

    if (files.empty()) usage_error("--output-prefix: no input files given");
    if (val_fraction < 0) val_fraction = 0.05;
    // documents: each file, except that a single file is cut in two at a line boundary
    std::vector<std::string> docs;
    size_t n_val_docs = 0;
    if (files.size() == 1) {
        std::string text = read_file(files[0]);
        size_t cut = text.size() - (size_t)(val_fraction * text.size());
        while (cut > 0 && cut < text.size() && text[cut - 1] != '\n') cut++;
        docs = {text.substr(0, cut)};
        if (cut < text.size()) { docs.push_back(text.substr(cut)); n_val_docs = 1; }
    } else {
        for (const std::string& f : files) docs.push_back(read_file(f));
        n_val_docs = val_fraction > 0 ? std::max<size_t>(1, (size_t)(val_fraction * docs.size() + 0.5)) : 0;
        if (n_val_docs >= docs.size()) usage_error("--val-fraction %.3f leaves no training documents", val_fraction);
    }
    std::vector<int> train, val;
    int shard_index = 0;
    size_t n_train_docs = docs.size() - n_val_docs;
    long long total = 0;
    auto flush_train = [&](bool final) {
        while ((long long)train.size() >= shard_tokens || (final && !train.empty())) {
            size_t n = std::min<size_t>(train.size(), shard_tokens);
            char name[64]; snprintf(name, sizeof(name), "_train_%06d.bin", shard_index++);
            shard_write(prefix + name, std::vector<int>(train.begin(), train.begin() + n), wide);
            fprintf(stderr, "wrote %s%s (%zu tokens)\n", prefix.c_str(), name, n);
            train.erase(train.begin(), train.begin() + n);
        }
    };
    for (size_t i = 0; i < docs.size(); i++) {
        std::vector<int>& out = i < n_train_docs ? train : val;
        size_t before = out.size();
        out.push_back(tk.eot_token);
        tokenizer_encode(&tk, docs[i], &out);
        total += out.size() - before;
        if (i < n_train_docs) flush_train(false);
        if ((i + 1) % 100 == 0 || i + 1 == docs.size())
            fprintf(stderr, "tokenized %zu/%zu documents, %lld tokens\n", i + 1, docs.size(), total);
    }
    flush_train(true);
    if (!val.empty()) {
        shard_write(prefix + "_val_000000.bin", val, wide);
        fprintf(stderr, "wrote %s_val_000000.bin (%zu tokens)\n", prefix.c_str(), val.size());
    }
    tokenizer_free(&tk);
    return 0;
}
