/*
gpucheck_ops — every CUDA op against its CPU reference op, on fresh random inputs at several
shapes (odd sizes included). Needs a GPU; `make gpucheck` runs it (CI only compiles it).

Each output buffer the op writes is poisoned with NaN on the GPU first, so an element the
kernel forgets to write fails; outputs the op accumulates into (+=) start from the same random
values on both sides, so the accumulation is checked too.
Error: max |gpu − cpu| / max(max |cpu|, 1e-6) per output, against a bound per op (fp32 both
sides; the bounds are round-off of a different summation order / exp implementation):
  elementwise (encoder, residual, GELU, AdamW)          1e-6 … 1e-5
  reductions over C or K ≤ 4096 (layernorm, matmul)     1e-5
  softmax over V or T (classifier, attention)           1e-4
Prints "ok"/"not ok" lines and a summary.
*/
#include <cmath>
#include <functional>
#include <vector>
#include "../llmc/model.h"

static int n_pass = 0, n_fail = 0;
static Ctx cpu, gpu;
static Rng rng(1234);

static std::vector<float> randn(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = scale * rng.normal();
    return v;
}

// a GPU copy of a host vector (or NaN-poisoned when poison)
struct Dev {
    Buf<float> b;
    Dev(const std::vector<float>& h, bool poison = false) {
        b.alloc(gpu, h.size());
        if (poison) { std::vector<float> nan(h.size(), NAN); ctx_copy(gpu, b.data(), nan.data(), h.size() * 4); }
        else ctx_copy(gpu, b.data(), h.data(), h.size() * 4);
    }
    float* p() { return b.data(); }
    std::vector<float> host() { std::vector<float> h(b.size()); ctx_copy(gpu, h.data(), b.data(), h.size() * 4); return h; }
};

static void compare(const char* op, const char* what, const std::vector<float>& want, const std::vector<float>& got, double bound) {
    double err = 0, scale = 1e-6;
    bool finite = true;
    for (size_t i = 0; i < want.size(); i++) {
        if (!std::isfinite(got[i])) finite = false;
        err = std::max(err, (double)std::fabs(got[i] - want[i]));
        scale = std::max(scale, (double)std::fabs(want[i]));
    }
    double rel = err / scale;
    bool ok = finite && rel <= bound;
    printf("%s - %s %s: rel err %.2e <= %.0e%s\n", ok ? "ok" : "not ok", op, what, rel, bound, finite ? "" : " (non-finite: unwritten?)");
    (ok ? n_pass : n_fail)++;
}

static void check_encoder(int B, int T, int C, int V) {
    char name[64]; snprintf(name, sizeof(name), "encoder B=%d T=%d C=%d", B, T, C);
    auto wte = randn((size_t)V * C), wpe = randn((size_t)T * C), dout = randn((size_t)B * T * C);
    std::vector<int> tok(B * T);
    for (auto& t : tok) t = (int)rng.below(V / 2);  // repeats
    std::vector<float> out((size_t)B * T * C);
    encoder_forward(cpu, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    Buf<int> dtok; dtok.alloc(gpu, tok.size()); ctx_copy(gpu, dtok.data(), tok.data(), tok.size() * 4);
    Dev gwte(wte), gwpe(wpe), gout(out, true);
    encoder_forward(gpu, gout.p(), dtok.data(), gwte.p(), gwpe.p(), B, T, C);
    compare(name, "forward", out, gout.host(), 1e-6);
    auto dwte = randn((size_t)V * C), dwpe = randn((size_t)T * C);
    Dev gdwte(dwte), gdwpe(dwpe), gdout(dout);
    encoder_backward(cpu, dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    encoder_backward(gpu, gdwte.p(), gdwpe.p(), gdout.p(), tok.data(), B, T, C);
    compare(name, "dwte (+=)", dwte, gdwte.host(), 1e-5);
    compare(name, "dwpe (+=)", dwpe, gdwpe.host(), 1e-5);
}

static void check_layernorm(int N, int C) {
    char name[64]; snprintf(name, sizeof(name), "layernorm N=%d C=%d", N, C);
    auto x = randn((size_t)N * C), w = randn(C), b = randn(C), dout = randn((size_t)N * C);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    layernorm_forward(cpu, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    Dev gx(x), gw(w), gb(b), gout(out, true), gmean(mean, true), grstd(rstd, true), gdout(dout);
    layernorm_forward(gpu, gout.p(), gmean.p(), grstd.p(), gx.p(), gw.p(), gb.p(), N, C);
    compare(name, "forward", out, gout.host(), 1e-5);
    compare(name, "mean", mean, gmean.host(), 1e-5);
    compare(name, "rstd", rstd, grstd.host(), 1e-5);
    auto dx = randn((size_t)N * C), dw = randn(C), db = randn(C);
    Dev gdx(dx), gdw(dw), gdb(db);
    layernorm_backward(cpu, dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    layernorm_backward(gpu, gdx.p(), gdw.p(), gdb.p(), gdout.p(), gx.p(), gw.p(), gmean.p(), grstd.p(), N, C);
    compare(name, "dinp (+=)", dx, gdx.host(), 1e-5);
    compare(name, "dw (+=)", dw, gdw.host(), 1e-5);
    compare(name, "db (+=)", db, gdb.host(), 1e-5);
}

static void check_matmul(int N, int C, int OC, bool bias) {
    char name[80]; snprintf(name, sizeof(name), "matmul N=%d C=%d OC=%d%s", N, C, OC, bias ? " +bias" : "");
    auto x = randn((size_t)N * C), W = randn((size_t)OC * C, 0.1f), bv = randn(OC), dout = randn((size_t)N * OC);
    std::vector<float> out((size_t)N * OC);
    matmul_forward(cpu, out.data(), x.data(), W.data(), bias ? bv.data() : nullptr, N, C, OC);
    Dev gx(x), gW(W), gb(bv), gout(out, true), gdout(dout);
    matmul_forward(gpu, gout.p(), gx.p(), gW.p(), bias ? gb.p() : nullptr, N, C, OC);
    compare(name, "forward", out, gout.host(), 1e-5);
    std::vector<float> dx((size_t)N * C);
    auto dW = randn((size_t)OC * C), db = randn(OC);
    Dev gdx(dx, true), gdW(dW), gdb(db);
    matmul_backward(cpu, dx.data(), dW.data(), bias ? db.data() : nullptr, dout.data(), x.data(), W.data(), N, C, OC);
    matmul_backward(gpu, gdx.p(), gdW.p(), bias ? gdb.p() : nullptr, gdout.p(), gx.p(), gW.p(), N, C, OC);
    compare(name, "dinp", dx, gdx.host(), 1e-5);
    compare(name, "dW (+=)", dW, gdW.host(), 1e-5);
    if (bias) compare(name, "dbias (+=)", db, gdb.host(), 1e-5);
}

static void check_attention(int B, int T, int C, int NH) {
    char name[80]; snprintf(name, sizeof(name), "attention B=%d T=%d C=%d NH=%d", B, T, C, NH);
    auto qkv = randn((size_t)B * T * 3 * C), dout = randn((size_t)B * T * C);
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv((size_t)B * T * 3 * C);
    attention_forward(cpu, out.data(), lse.data(), qkv.data(), B, T, C, NH);
    Dev gqkv(qkv), gout(out, true), glse(lse, true), gdout(dout), gdqkv(dqkv, true);
    attention_forward(gpu, gout.p(), glse.p(), gqkv.p(), B, T, C, NH);
    compare(name, "forward", out, gout.host(), 1e-4);
    compare(name, "lse", lse, glse.host(), 1e-5);
    attention_backward(cpu, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    attention_backward(gpu, gdqkv.p(), gdout.p(), gqkv.p(), gout.p(), glse.p(), B, T, C, NH);
    compare(name, "dqkv", dqkv, gdqkv.host(), 1e-4);
}

static void check_elementwise(size_t N) {
    char name[64]; snprintf(name, sizeof(name), "elementwise N=%zu", N);
    auto x = randn(N, 2.0f), y = randn(N), dout = randn(N);
    std::vector<float> out(N), d(N);
    gelu_forward(cpu, out.data(), x.data(), N);
    Dev gx(x), gy(y), gout(out, true), gdout(dout), gd(d, true);
    gelu_forward(gpu, gout.p(), gx.p(), N);
    compare(name, "gelu forward", out, gout.host(), 1e-5);
    gelu_backward(cpu, d.data(), x.data(), dout.data(), N);
    gelu_backward(gpu, gd.p(), gx.p(), gdout.p(), N);
    compare(name, "gelu backward", d, gd.host(), 1e-5);
    residual_forward(cpu, out.data(), x.data(), y.data(), N);
    Dev gres(out, true);
    residual_forward(gpu, gres.p(), gx.p(), gy.p(), N);
    compare(name, "residual", out, gres.host(), 1e-6);
    add_inplace(cpu, x.data(), y.data(), N);
    add_inplace(gpu, gx.p(), gy.p(), N);
    compare(name, "add_inplace", x, gx.host(), 1e-6);
}

static void check_classifier(int N, int V, int Vp) {
    char name[64]; snprintf(name, sizeof(name), "fused_classifier N=%d V=%d Vp=%d", N, V, Vp);
    auto logits = randn((size_t)N * Vp, 4.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)rng.below(V);
    Buf<int> dt; dt.alloc(gpu, N); ctx_copy(gpu, dt.data(), tgt.data(), N * 4);
    std::vector<float> losses(N);
    Dev glog(logits), gloss(losses, true);
    fused_classifier(cpu, logits.data(), losses.data(), tgt.data(), N, V, Vp, 1.0f / N);
    fused_classifier(gpu, glog.p(), gloss.p(), dt.data(), N, V, Vp, 1.0f / N);
    compare(name, "losses", losses, gloss.host(), 1e-5);
    compare(name, "dlogits (in place)", logits, glog.host(), 1e-4);
}

static void check_adamw_norm(size_t n) {
    char name[64]; snprintf(name, sizeof(name), "adamw+norm n=%zu", n);
    auto p = randn(n), g = randn(n), m = randn(n, 0.1f), v = randn(n, 0.1f);
    for (auto& x : v) x = x * x;
    Dev gp(p), gg(g), gm(m), gv(v);
    adamw_update(cpu, p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 0.7f);
    adamw_update(gpu, gp.p(), gg.p(), gm.p(), gv.p(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 0.7f);
    compare(name, "params", p, gp.host(), 1e-6);
    compare(name, "m", m, gm.host(), 1e-6);
    compare(name, "v", v, gv.host(), 1e-6);
    double a = global_norm_squared(cpu, g.data(), n), b = global_norm_squared(gpu, gg.p(), n);
    compare(name, "norm squared", {(float)a}, {(float)b}, 1e-6);
}

int main() {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { printf("not ok - gpucheck_ops: no usable GPU\n"); return 1; }
    cuda_ctx_init(&gpu, 0);
    check_encoder(2, 7, 13, 50);
    check_encoder(4, 64, 768, 50257);
    check_layernorm(7, 13);
    check_layernorm(256, 768);
    check_matmul(9, 11, 70, true);
    check_matmul(256, 768, 2304, true);
    check_matmul(128, 3072, 768, false);
    check_attention(2, 9, 12, 3);
    check_attention(2, 128, 768, 12);
    check_attention(1, 64, 256, 2);   // head size 128
    check_elementwise(1);
    check_elementwise(100003);
    check_classifier(3, 37, 40);
    check_classifier(64, 50257, 50304);
    check_adamw_norm(17);
    check_adamw_norm(1000003);
    printf("# gpucheck_ops: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
