/*
dev/cuda/matmul.cu — GPT-2's linear layers through cuBLASLt (llmc/matmul.cuh): CPU reference vs
CUDA versions, in bf16 (the trainer's GPU precision).
  v1: the trainer's: the MLP's GELU rides in cuBLASLt's epilogues
  v2: the GELU apart: the matmul, then llmc/gelu.cuh's kernel
  v3: FP8 (--precision fp8): the quantize kernels and cuBLASLt's FP8 products, timed together
  v4: v3 with cuBLASLt's FP8 fast accumulation
  v5: v3 with delayed scaling (one quantize pass an operand)
  v6: v1 with --matmul-tune 1: every product's fastest cuBLASLt candidate of the same bits
  v7: v1 with --matmul-wgmma 1: the forward and dinp products by our GEMM (llmc/matmul_hopper.cuh; sm_90a)
  v8: v7 with --matmul-wgmma 2: its ping-pong layout
  v9: v7 with --matmul-wgmma 3: its outputs through shared memory and TMA stores
  v10, v11, v12: v7, v8, v9 in clusters of 2 blocks, each copying half of B for both (--matmul-wgmma 4-6)
The layers of one block (qkv, attproj, mlp; fc and fcproj: the MLP's products without GELU) and
the classifier, at N = B·T rows; for v7-v12 also cls+stats, the classifier whose forward also
gives the softmax's stats (--classifier-stats epilogue): its forward less the classifier's is their cost. Each layer's forward and backward is checked against the CPU op
on its first `check` rows, then timed at N (TFLOP/s over 2·N·C·OC a product). A line a version
gives the GELU's cost in the epilogues: mlp less fc and fcproj. Then dbias's column sums three ways for each bias width: the
Warps and Columns kernels alone (GB/s over dout's bytes), and inside a layer's whole backward
with cuBLASLt's BGRADB epilogue. Details: docs/playgrounds.md.
usage: ./build/dev_matmul [N C Vp [check]]   (default GPT-2 124M at B=16, T=1024: 16384 768 50304 64;
       Vp = 0: the dbias section alone, e.g. at 124M's B = 128: 131072 768 0)
*/
#include <map>
#include <memory>
#include "common.cuh"

using X = bf16;
static const double BOUND = 1e-2;  // gpucheck_ops' bf16 bound (its header says why)

// One layer's tensors, on both devices: host vectors (the CPU run) and GPU copies. Inputs are
// random and exact in bf16; outputs are poisoned with NaN before each check (sync), so an
// element nobody writes fails it; accumulated gradients start from the same values on both sides.
struct Tensors {
    std::vector<std::vector<X>> host;
    std::vector<std::unique_ptr<DevBuf<X>>> dev;
    std::vector<bool> output;
    int add(size_t n, bool is_output, float scale = 1.0f) {
        host.push_back(is_output ? std::vector<X>(n) : vec_cast<X>(dev_randn(n, scale)));
        dev.push_back(std::make_unique<DevBuf<X>>(host.back()));
        output.push_back(is_output);
        return (int)host.size() - 1;
    }
    X* p(const Ctx& ctx, int i) { return ctx.device == Device::CPU ? host[i].data() : dev[i]->p(); }
    void sync() {  // outputs to NaN, then the GPU copies to the host's values
        for (size_t i = 0; i < host.size(); i++) {
            if (output[i]) std::fill(host[i].begin(), host[i].end(), from_f<X>(NAN));
            dev[i]->set(host[i]);
        }
    }
};

// A layer: its tensors, its forward and backward on the first n rows on a Ctx, and the outputs
// to compare (cols: the row width of an activation, of which the first `check` rows are
// compared; 0 for a parameter gradient, compared whole).
struct Output { const char* name; int index, cols; };
struct Layer {
    const char* name;
    double products = 0;  // Σ C·OC over its matmuls: forward FLOPs = 2·N·products
    std::shared_ptr<Tensors> t = std::make_shared<Tensors>();
    std::function<void(const Ctx&, int)> forward, backward;
    std::vector<Output> outputs;
    int dout = -1, dbias = -1;  // a linear layer's tensors (bias_grads times its column sum alone)
};

// stats: the forward by matmul_forward_logits, our GEMM with the classifier's stats in its
// epilogue (--classifier-stats epilogue; where it does not run, matmul_forward)
static Layer linear(const char* name, int N, int C, int OC, bool bias, bool stats = false) {
    Layer L{name, (double)C * OC};
    auto t = L.t;
    const int x = t->add((size_t)N * C, false), W = t->add((size_t)OC * C, false, 0.05f), b = t->add(OC, false);
    const int dout = t->add((size_t)N * OC, false, 0.01f), out = t->add((size_t)N * OC, true), dx = t->add((size_t)N * C, true);
    const int dW = t->add((size_t)OC * C, false), db = t->add(OC, false);
    L.forward = [=](const Ctx& c, int n) {
        Ctx s = c;
        s.kernels.classifier_stats_epilogue = stats;
        if (!matmul_forward_logits(s, t->p(c, out), t->p(c, x), t->p(c, W), n, C, OC, OC))
            matmul_forward(c, t->p(c, out), t->p(c, x), t->p(c, W), bias ? t->p(c, b) : nullptr, n, C, OC);
    };
    L.backward = [=](const Ctx& c, int n) {
        matmul_backward(c, t->p(c, dx), t->p(c, dW), bias ? t->p(c, db) : nullptr, t->p(c, dout), t->p(c, x), t->p(c, W), n, C, OC);
    };
    L.outputs = {{"out", out, OC}, {"dinp", dx, C}, {"dW", dW, 0}};
    if (bias) L.outputs.push_back({"dbias", db, 0});
    L.dout = dout;
    L.dbias = db;
    return L;
}

// The MLP's second product (fcproj): its own place in a delayed-scaling state (fp8.cuh).
static Ctx second(const Ctx& c) { Ctx n = c; n.fp8_product++; return n; }
static Layer mlp(int N, int C) {
    const int H = 4 * C;
    Layer L{"mlp", 2.0 * C * H};
    auto t = L.t;
    const int x = t->add((size_t)N * C, false), W1 = t->add((size_t)H * C, false, 0.05f), b1 = t->add(H, false);
    const int W2 = t->add((size_t)C * H, false, 0.05f), b2 = t->add(C, false), dout = t->add((size_t)N * C, false, 0.01f);
    const int pre = t->add((size_t)N * H, true), h = t->add((size_t)N * H, true), y = t->add((size_t)N * C, true);
    const int dh = t->add((size_t)N * H, true), dx = t->add((size_t)N * C, true);
    const int dW1 = t->add((size_t)H * C, false), db1 = t->add(H, false), dW2 = t->add((size_t)C * H, false), db2 = t->add(C, false);
    L.forward = [=](const Ctx& c, int n) {  // (FP8: the model's path, model.h: gelu_in_fp8)
        if (c.fp8) {  // fcproj's quantizations make gelu(pre)
            matmul_forward(c, t->p(c, pre), t->p(c, x), t->p(c, W1), t->p(c, b1), n, C, H);
            matmul_forward(second(c), t->p(c, y), t->p(c, pre), t->p(c, W2), t->p(c, b2), n, H, C, nullptr, true);
            return;
        }
        matmul_forward(c, t->p(c, h), t->p(c, x), t->p(c, W1), t->p(c, b1), n, C, H, t->p(c, pre));  // h = gelu(pre)
        matmul_forward(second(c), t->p(c, y), t->p(c, h), t->p(c, W2), t->p(c, b2), n, H, C);
    };
    L.backward = [=](const Ctx& c, int n) {  // fcproj's dinp goes through the GELU: dh = ∂/∂pre
        if (c.fp8) {  // dh: the gradient at GELU's output, taken through the GELU by fc's quantization
            matmul_backward(second(c), t->p(c, dh), t->p(c, dW2), t->p(c, db2), t->p(c, dout), t->p(c, pre), t->p(c, W2), n, H, C, nullptr, true);
            matmul_backward(c, t->p(c, dx), t->p(c, dW1), t->p(c, db1), t->p(c, dh), t->p(c, x), t->p(c, W1), n, C, H, nullptr, false, t->p(c, pre));
            return;
        }
        matmul_backward(second(c), t->p(c, dh), t->p(c, dW2), t->p(c, db2), t->p(c, dout), t->p(c, h), t->p(c, W2), n, H, C, t->p(c, pre));
        matmul_backward(c, t->p(c, dx), t->p(c, dW1), t->p(c, db1), t->p(c, dh), t->p(c, x), t->p(c, W1), n, C, H);
    };
    L.outputs = {{"pre", pre, H}, {"gelu", h, H}, {"out", y, C}, {"dpre", dh, H}, {"dinp", dx, C},
                 {"dW fc", dW1, 0}, {"db fc", db1, 0}, {"dW fcproj", dW2, 0}, {"db fcproj", db2, 0}};
    return L;
}

// DEV_MATMUL_ONLY="1,7": only those versions, and no dbias part (a GPU call that times our GEMM)
static bool wanted(int v) { return !getenv("DEV_MATMUL_ONLY") || env_lists("DEV_MATMUL_ONLY", v); }
struct Times { float forward = 0, backward = 0; };
static Times run(Layer& L, int version, int N, int check) {
    if (!wanted(version)) return {};
    gpu_ctx.kernels.gelu_fusion = version == 1 || version >= 6;
    gpu_ctx.kernels.matmul_wgmma = version >= 7 ? version - 6 : 0;
    gpu_ctx.kernels.matmul_tune = version == 6;
    const double tune_flops = gpu_ctx.kernels.matmul_tune_flops;
    if (version == 6) { gpu_ctx.kernels.matmul_tune_flops = 1; autotune_forget(gpu_ctx); }
    gpu_ctx.kernels.fp8_fast_accum = version == 4 ? Fp8FastAccum::All : Fp8FastAccum::None;
    Ctx cpu = cpu_ctx, gpu = gpu_ctx;
    cpu.fp8 = gpu.fp8 = version >= 3 && version <= 5;  // (v3-v5)
    Tensors& t = *L.t;
    const long dequantized_before = gpu_ctx.tuned->fp8_dequantized_products;
    Fp8Delayed dcpu, dgpu;  // v5: each device's state, from one recording step on the checked rows
    if (version == 5)
        for (auto [c, d] : {std::pair{&cpu, &dcpu}, std::pair{&gpu, &dgpu}}) {
            fp8_delayed_init(*c, d, 2 * 3, 16);  // (at most 2 products a layer, 3 operands each)
            c->fp8_delayed = d;
            d->record = true;
            t.sync();
            L.forward(*c, check); L.backward(*c, check);
            fp8_delayed_push(*c, d, fp8_delayed_amaxes(*c, *d));
            d->record = true;  // (the runs below record, as a training step does)
        }
    t.sync();  // both devices from the same state: the first `check` rows of each
    L.forward(cpu, check); L.backward(cpu, check);
    L.forward(gpu, check); L.backward(gpu, check);
    double worst = 0;
    std::string which;
    for (const Output& o : L.outputs) {
        if (gpu.fp8 && !strcmp(o.name, "gelu")) continue;  // (FP8 writes no GELU output)
        const size_t n = o.cols ? (size_t)check * o.cols : t.host[o.index].size();  // (an activation's first rows only)
        std::vector<float> want = vec_widen(std::vector<X>(t.host[o.index].begin(), t.host[o.index].begin() + n)), got = t.dev[o.index]->host(n);
        const double e = rel_err(want, got, BOUND);
        if (!(e <= worst)) { worst = e; which = o.name; }
    }
    auto fwd = [&] { L.forward(gpu, N); };
    auto bwd = [&] { L.backward(gpu, N); };  // (the timed runs keep accumulating dW and dbias)
    const float mf = time_ms(fwd), mb = time_ms(bwd), mfb = time_ms([&] { fwd(); bwd(); });
    const double f = 2.0 * N * L.products;  // forward FLOPs; the backward's are twice that
    printf("v%d %-10s rel err %.2e (worst: %-9s)  forward %8.3f ms %6.1f TFLOP/s  backward %8.3f ms %6.1f TFLOP/s"
           "  both %8.3f ms %6.1f TFLOP/s\n", version, L.name, worst, which.c_str(), mf, f / mf / 1e9, mb, 2 * f / mb / 1e9,
           mfb, 3 * f / mfb / 1e9);
    if (gpu_ctx.tuned->fp8_dequantized_products > dequantized_before)  // (matmul.cuh's fallback: not FP8's speed)
        printf("    (cuBLASLt refused these FP8 products: they ran as bf16 products of the dequantized values)\n");
    gpu_ctx.kernels.gelu_fusion = true;
    gpu_ctx.kernels.fp8_fast_accum = Fp8FastAccum::None;
    gpu_ctx.kernels.matmul_wgmma = 0;
    if (version == 6) { gpu_ctx.kernels.matmul_tune = false; gpu_ctx.kernels.matmul_tune_flops = tune_flops; autotune_forget(gpu_ctx); }
    return {mf, mb};
}

// Every layer at one version. Then what the MLP's GELU costs in the products' epilogues: the MLP
// less its two products run with bias alone (fc, fcproj; forward: GELU and the second store of
// the 4C-wide activation; backward: GELU's backward and the read of pre).
static void run_all(std::vector<Layer>& layers, int version, int N, int check) {
    std::map<std::string, Times> t;
    for (Layer& L : layers) t[L.name] = run(L, version, N, check);
    const Times m = t["mlp"], a = t["fc"], b = t["fcproj"];
    if (m.forward > 0 && a.forward > 0 && b.forward > 0)
        printf("v%d the GELU in the MLP's epilogues (mlp less fc and fcproj): forward %+.3f ms, backward %+.3f ms\n", version,
               m.forward - a.forward - b.forward, m.backward - a.backward - b.backward);
}

// dbias += the column sums of dout (N × OC): each BiasGrad way, checked on `check` rows, then timed
// alone (the kernels) and inside the backward of a C → OC linear layer.
static void bias_grads(int N, int C, int OC, int check) {
    Layer L = linear("bias", N, C, OC, true);
    Tensors& t = *L.t;
    const int dout = L.dout, db = L.dbias;
    static const char* names[] = {"Warps (8 warps split each chunk's rows)", "Columns (a thread per column pack)",
                                  "Epilogue (cuBLASLt BGRADB on dW)"};
    for (BiasGrad bg : {BiasGrad::Warps, BiasGrad::Columns, BiasGrad::Epilogue}) {
        gpu_ctx.kernels.bias_grad = bg;
        t.sync();
        double e = 0;
        if (bg != BiasGrad::Epilogue) {  // the kernels alone, against the column sums on the host
            std::vector<float> want = vec_widen(t.host[db]);
            for (int o = 0; o < OC; o++) {
                float s = 0.0f;
                for (int n = 0; n < check; n++) s += to_f(t.host[dout][(size_t)n * OC + o]);
                want[o] = to_f(from_f<X>(want[o] + s));
            }
            bias_grad_kernels(gpu_ctx, t.p(gpu_ctx, db), t.p(gpu_ctx, dout), check, OC);
            e = rel_err(want, t.dev[db]->host(), BOUND);
        }
        t.sync();
        L.backward(cpu_ctx, check); L.backward(gpu_ctx, check);
        const double eb = rel_err(vec_widen(t.host[db]), t.dev[db]->host(), BOUND);
        const float alone = bg == BiasGrad::Epilogue ? 0.0f
                          : time_ms([&] { bias_grad_kernels(gpu_ctx, t.p(gpu_ctx, db), t.p(gpu_ctx, dout), N, OC); });
        const float bwd = time_ms([&] { L.backward(gpu_ctx, N); });
        if (bg == BiasGrad::Epilogue)
            printf("OC=%-5d %-40s rel err %.2e  alone      -                    backward %8.3f ms\n", OC, names[(int)bg], eb, bwd);
        else
            printf("OC=%-5d %-40s rel err %.2e  alone %8.3f ms %7.1f GB/s  backward %8.3f ms\n", OC, names[(int)bg],
                   std::max(e, eb), alone, 2.0 * N * OC / alone / 1e6, bwd);
    }
    gpu_ctx.kernels.bias_grad = BiasGrad::Warps;
}

int main(int argc, char** argv) {
    dev_init();
    int N = 16384, C = 768, Vp = 50304, check = 64;
    if (argc >= 4) { N = atoi(argv[1]); C = atoi(argv[2]); Vp = atoi(argv[3]); }
    if (argc >= 5) check = atoi(argv[4]);
    check = std::min(check, N);
    printf("# matmul bf16 N=%d C=%d Vp=%d (checked on %d rows)\n", N, C, Vp, check);
    if (Vp > 0) {
        std::vector<Layer> layers;
        layers.push_back(linear("qkv", N, C, 3 * C, true));
        layers.push_back(linear("attproj", N, C, C, true));
        layers.push_back(mlp(N, C));
        layers.push_back(linear("fc", N, C, 4 * C, true));  // (the MLP's two products without the GELU)
        layers.push_back(linear("fcproj", N, 4 * C, C, true));
        layers.push_back(linear("classifier", N, C, Vp, false));
        run_all(layers, 1, N, check);
        run(layers[2], 2, N, check);  // the MLP with its GELU apart
        run_all(layers, 6, N, check);  // tuned
        layers.push_back(linear("cls+stats", N, C, Vp, false, true));  // (v7-v12: the classifier with the softmax's stats)
        if (gpu_has_wgmma())
            for (int v : {7, 10, 8, 11, 9, 12}) run_all(layers, v, N, check);  // our GEMM's forward and dinp: each layout, then it in clusters
        else
            printf("# v7-v12 (our GEMM) skipped: not a compute capability 9.0 GPU\n");
        const bool fp8_wanted = wanted(3) || wanted(4) || wanted(5);
        if (fp8_wanted && fp8_device_problem(gpu_ctx).empty() && fp8_shape_problem(N, C, 16).empty() && check % 16 == 0)
            for (int v : {3, 4, 5})
                for (int l = 0; l < 3; l++) run(layers[l], v, N, check);  // FP8: the blocks' layers
        else if (fp8_wanted)
            printf("# v3-v5 (fp8) skipped: %s\n", !fp8_device_problem(gpu_ctx).empty() ? fp8_device_problem(gpu_ctx).c_str()
                                                                                    : "N, C and the checked rows must be multiples of 16");
    }
    if (getenv("DEV_MATMUL_ONLY")) return dev_done();
    printf("# dbias column sum (bf16 dout, N=%d): alone, and the backward of the layer of that width\n", N);
    for (int OC : {C, 3 * C, 4 * C}) bias_grads(N, C, OC, check);
    return dev_done();
}
