/*
gpt_config.h — a model's shape: GPT-2 or Llama, its sizes, and the named presets (--model).

  GPT-2:  L blocks of LayerNorm, attention (NH heads of C/NH), GELU MLP (4C), learned positions
  Llama:  RMSNorm, grouped-query attention (NKV key/value heads), SwiGLU MLP (H), RoPE, no biases

Main pieces: GPTConfig, gpt_same_shape, gpt_preset ("gpt2:124M", "d12", "llama:1B", ...).
Tests: test/test_ops.cpp (presets and parameter counts), test/test_cli.sh (--model).
More: docs/model.md (sizes, the two architectures).
*/
#pragma once
#include <string>
#include "common.h"
#include "rope.cuh"

// The two architectures (--model gpt2:… | llama:…). Llama (Touvron et al., 2023) changes the
// block, not the model's plumbing: RMSNorm for LayerNorm (no centering, no bias), no bias in any
// linear layer, no position embedding (RoPE turns q and k instead: rope.cuh), SwiGLU for GELU
// (swiglu.cuh) over H hidden features, and grouped-query attention (NKV ≤ NH key/value heads,
// each shared by NH/NKV query heads). Its classifier is tied to wte (as Llama 3.2's 1B and 3B)
// or a matrix of its own, lm_head (Llama 3 8B, Llama 2).
enum class Arch { GPT2, Llama };

struct GPTConfig {
    Arch arch = Arch::GPT2;
    int max_seq_len = 1024;         // maxT (Llama: only a bound on T, no parameters)
    int vocab_size = 50257;         // V
    int padded_vocab_size = 50304;  // Vp, V rounded up to a multiple of 128
    int num_layers = 12;            // L
    int num_heads = 12;             // NH
    int channels = 768;             // C
    int num_kv_heads = 0;           // NKV (Llama); 0: NH
    int hidden = 0;                 // H, the MLP's hidden features (Llama); 0: 4C
    int rope_theta = 10000;         // θ of RoPE's angles (Llama)
    RopeScaling rope_scaling;       // Llama 3.1's stretch of the slow pairs (rope.cuh); factor 0: none
    bool tied = true;               // the classifier is wte (else lm_head: Llama only)
    bool llama() const { return arch == Arch::Llama; }
    int kv_heads() const { return num_kv_heads ? num_kv_heads : num_heads; }
    int ffn() const { return hidden ? hidden : 4 * channels; }
    int head_dim() const { return channels / num_heads; }
    // the rows of qkv's product (q, k, v features): 3C, or (NH + 2·NKV)·hd with grouped-query attention
    size_t qkv_rows() const { return (size_t)(num_heads + 2 * kv_heads()) * head_dim(); }
    // the rows of the MLP's first product: 4C (GELU's input), or 2H (SwiGLU's [gate | up])
    size_t fc_rows() const { return (llama() ? 2 : 1) * (size_t)ffn(); }
};

inline bool gpt_same_shape(const GPTConfig& a, const GPTConfig& b) {
    return a.arch == b.arch && a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
           a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
           a.channels == b.channels && a.kv_heads() == b.kv_heads() && a.ffn() == b.ffn() &&
           a.tied == b.tied && (!a.llama() || (a.rope_theta == b.rope_theta && a.rope_scaling.factor == b.rope_scaling.factor &&
           (a.rope_scaling.factor == 0 || (a.rope_scaling.low == b.rope_scaling.low && a.rope_scaling.high == b.rope_scaling.high &&
                                           a.rope_scaling.original == b.rope_scaling.original))));
}

// ----------------------------------------------------------------------------
// presets

// "d12"-style depth (GPT-2 shapes at 12/24/36/48; otherwise C = 64·d, NH = d) or "gpt2:124M" etc.;
// "llama:d12"-style depth for a Llama block of the same C, NH (hd = 64) with NKV = NH/2 key/value
// heads (NH when odd) and H = 8C/3 rounded up to a multiple of 128 (the MLP's 8C² parameters
// then match GPT-2's), θ = 10000; "llama:1B" and "llama:3B" for Llama 3.2's shapes (NKV = 8,
// θ = 500000, T up to 8192), "llama:8B" for Llama 3 8B's (NKV = 8, H = 14336, lm_head apart from
// wte). All of them with GPT-2's vocabulary unless --vocab-size says otherwise (128256 for Llama
// 3's own tokenizer, a rank file: tokenizer.h).
// Returns false if the spec is not a preset name (it may then be a model file).
inline bool gpt_preset(const std::string& spec, GPTConfig* c) {
    std::string s = spec;
    if (s == "gpt2:124M") s = "d12";
    else if (s == "gpt2:350M") s = "d24";
    else if (s == "gpt2:774M") s = "d36";
    else if (s == "gpt2:1558M") s = "d48";
    if (s == "llama:1B" || s == "llama:3B" || s == "llama:8B") {
        *c = GPTConfig();
        c->arch = Arch::Llama;
        c->max_seq_len = 8192; c->num_kv_heads = 8; c->hidden = 8192; c->rope_theta = 500000;
        if (s == "llama:1B") { c->num_layers = 16; c->channels = 2048; c->num_heads = 32; }
        else if (s == "llama:3B") { c->num_layers = 28; c->channels = 3072; c->num_heads = 24; }
        else { c->num_layers = 32; c->channels = 4096; c->num_heads = 32; c->hidden = 14336; c->tied = false; }
        return true;
    }
    const bool llama = s.rfind("llama:", 0) == 0;
    if (llama) s = s.substr(6);
    if (s.size() < 2 || s[0] != 'd' || s.find_first_not_of("0123456789", 1) != std::string::npos) return false;
    int d = atoi(s.c_str() + 1);
    if (d < 1 || d > 96) return false;
    *c = GPTConfig();
    c->num_layers = d;
    if (llama) {
        c->arch = Arch::Llama;
        c->channels = 64 * d; c->num_heads = d;
        c->num_kv_heads = d % 2 == 0 ? d / 2 : d;
        c->hidden = (int)ceil_div((size_t)8 * c->channels, (size_t)3 * 128) * 128;
        return true;
    }
    if (d == 12) { c->channels = 768; c->num_heads = 12; }
    else if (d == 24) { c->channels = 1024; c->num_heads = 16; }
    else if (d == 36) { c->channels = 1280; c->num_heads = 20; }
    else if (d == 48) { c->channels = 1600; c->num_heads = 25; }
    else { c->channels = 64 * d; c->num_heads = d; }
    return true;
}

