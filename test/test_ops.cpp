/*
test_ops — every op's backward against finite differences of its forward, plus the small pieces
(the whole model's gradient, AdamW, the global norm, bf16 and fp16 rounding (test_fp16), the
model in fp16 with and without loss scaling and the loss scale's rules, FP8's formats, scaling and
products (test_fp8), LR schedules, the outlier window's z-score, MFU's FLOPs a token and the peak
a GPU's name gives, data order, the host memory a memory cgroup allows).

Finite differences. For an op y = f(x) and a fixed random R, the scalar L(x) = Σ y·R has
∂L/∂x = the op's backward with dout = R. Sampled elements of ∂L/∂x are checked against
(L(x + h) − L(x − h)) / 2h, L summed in double, h = 1e-2, with the truncation error (rtol 1e-2)
and the fp32 round-off of L (atol 16·2^-24·Σ|y·R| / 2h) bounded apart.
bf16 (test_bf16_ops): an op in bf16 is its fp32 op with each output rounded once (common.h:
F32View), so on bf16 inputs every bf16 output is within half a bf16 ulp of the fp32 op's, an
exact bound; test/gpucheck_ops.cu holds the CUDA bf16 kernels to these CPU ops.
The derivations: docs/verification.md ("The bounds").

Each test prints "ok"/"not ok" lines; test/run_tests.sh counts them.
*/
#include <map>
#include <tuple>
#include <cmath>
#include <complex>
#include <functional>
#include <vector>
#include "../llmc/model.h"
#include "../llmc/dataloader.h"
#include "../llmc/schedulers.h"
#include "../llmc/outliers.h"
#include "../llmc/loss_scale.h"
#include "../llmc/mfu.h"
#include "../llmc/pipeline.h"
#include "../llmc/context_parallel.h"
#include "../llmc/swiglu.cuh"
#include "../llmc/rope.cuh"
#include "../llmc/checksum.h"

static int n_pass = 0, n_fail = 0;
static void report(bool ok, const char* name, const char* fmt = "", double a = 0, double b = 0) {
    printf("%s - %s", ok ? "ok" : "not ok", name);
    if (*fmt) { printf(" ("); printf(fmt, a, b); printf(")"); }
    printf("\n");
    (ok ? n_pass : n_fail)++;
}

static Rng rng(42);
static avec<float> randn(size_t n, float scale = 1.0f) {
    avec<float> v(n);
    for (auto& x : v) x = scale * rng.normal();
    return v;
}

// Checks grad (analytic) against finite differences of loss() w.r.t. x, on up to `samples` elements.
// loss() returns Σ y·R in double together with Σ|y·R| (for the round-off bound).
static void fd_check(const char* name, float* x, size_t n, const float* grad,
                     const std::function<std::pair<double, double>()>& loss, int samples = 48) {
    const float h = 1e-2f;
    double worst = 0.0;
    bool ok = true;
    for (int s = 0; s < samples && s < (int)n; s++) {
        size_t i = n <= (size_t)samples ? (size_t)s : rng.below(n);
        float orig = x[i];
        x[i] = orig + h; auto lp = loss();
        x[i] = orig - h; auto lm = loss();
        x[i] = orig;
        double num = (lp.first - lm.first) / (2.0 * h);
        double atol = 16.0 * std::ldexp(1.0, -24) * std::max(lp.second, lm.second) / (2.0 * h);
        double err = std::fabs(grad[i] - num);
        double allowed = 1e-2 * std::fabs(num) + atol;
        worst = std::max(worst, err / allowed);
        if (err > allowed) {
            ok = false;
            printf("#   %s[%zu]: analytic %.6g, numeric %.6g, |diff| %.3g > allowed %.3g\n", name, i, grad[i], num, err, allowed);
        }
    }
    report(ok, name, "worst error / allowed = %.3f", worst);
}

static std::pair<double, double> dot_abs(const float* y, const float* R, size_t n) {
    double s = 0, a = 0;
    for (size_t i = 0; i < n; i++) { s += (double)y[i] * R[i]; a += std::fabs((double)y[i] * R[i]); }
    return {s, a};
}

static Ctx ctx;

static void test_encoder() {
    int B = 2, T = 5, C = 7, V = 11;
    auto wte = randn(V * C), wpe = randn(T * C), R = randn(B * T * C);
    std::vector<int> tok(B * T);
    for (auto& t : tok) t = (int)rng.below(V);
    tok[3] = tok[0];  // a repeated token: its rows' gradients must add
    avec<float> out(B * T * C), dwte(V * C, 0), dwpe(T * C, 0);
    auto loss = [&]() { encoder_forward(ctx, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C); return dot_abs(out.data(), R.data(), out.size()); };
    encoder_backward(ctx, dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, (size_t)V);
    fd_check("encoder dwte", wte.data(), wte.size(), dwte.data(), loss, 77);
    fd_check("encoder dwpe", wpe.data(), wpe.size(), dwpe.data(), loss);
}

// The vocabulary-parallel encoder (encoder.cuh): wte's rows split over t parts (t = 2, 3; Vp
// not a multiple of 3: the parts are ⌈V/t⌉ rows, the last shorter), the position embedding
// added by part 0 alone. The parts' outputs summed are the whole encoder's bit for bit (each
// position gets its row from one part and exact zeros from the others), and each part's dwte
// is its rows of the whole backward's, bit for bit (the same positions summed in the same
// order); every part's dwpe is the whole dwpe.
static void test_encoder_vocab_parallel() {
    const int B = 3, T = 6, C = 5, V = 20;
    auto wte = randn(V * C), wpe = randn(T * C), d = randn(B * T * C);
    std::vector<int> tok(B * T);
    for (auto& t : tok) t = (int)rng.below(V);
    tok[4] = tok[1]; tok[9] = tok[1];  // a repeated token
    avec<float> whole(B * T * C), dwte(V * C, 0), dwpe(T * C, 0);
    encoder_forward(ctx, whole.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    encoder_backward(ctx, dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C, (size_t)V);
    for (int t : {2, 3}) {
        const int per = (V + t - 1) / t;
        std::vector<float> sum(B * T * C, 0.0f);
        bool grads_ok = true;
        for (int r = 0; r < t; r++) {
            const int lo = r * per, rows = std::min(per, V - lo);
            avec<float> out(B * T * C), pdwte((size_t)rows * C, 0), pdwpe(T * C, 0);
            encoder_forward(ctx, out.data(), tok.data(), wte.data() + (size_t)lo * C, r == 0 ? wpe.data() : nullptr, B, T, C, lo, rows);
            for (size_t i = 0; i < sum.size(); i++) sum[i] += out[i];
            encoder_backward(ctx, pdwte.data(), pdwpe.data(), d.data(), tok.data(), B, T, C, (size_t)rows, lo);
            for (size_t i = 0; i < pdwte.size(); i++) grads_ok &= pdwte[i] == dwte[(size_t)lo * C + i];
            for (size_t i = 0; i < pdwpe.size(); i++) grads_ok &= pdwpe[i] == dwpe[i];
        }
        bool out_ok = true;
        for (size_t i = 0; i < sum.size(); i++) out_ok &= sum[i] == whole[i];
        char name[128];
        snprintf(name, sizeof(name), "encoder, vocabulary in %d parts: the parts' outputs sum to the whole encoder's, bit for bit", t);
        report(out_ok, name);
        snprintf(name, sizeof(name), "encoder, vocabulary in %d parts: each part's dwte is its rows of the whole, dwpe the whole's", t);
        report(grads_ok, name);
    }
}

// Pipeline schedules (pipeline.h): run in time by the simulator, each schedule does every forward
// and backward once, cannot deadlock, and idles the fraction the header's formula says; each
// stage's peak of live activations is the schedule's (gpipe m; 1f1b min(p − s, m); interleaved
// its warm-up forwards + 1, in chunks). The times are sums of multiples of 1/v (v ≤ 4 here, and
// 3: not exact in binary), so the bubble agrees to round-off: 1e-12. A schedule that runs a
// backward before its forward, or drops a step, is refused.
static void test_pipeline_schedules() {
    struct Case { PPSchedule kind; int p, m, v; };
    const Case cases[] = {{PPSchedule::GPipe, 4, 8, 1},       {PPSchedule::GPipe, 2, 3, 1},       {PPSchedule::OneFOneB, 4, 8, 1},
                          {PPSchedule::OneFOneB, 4, 2, 1},    {PPSchedule::OneFOneB, 2, 5, 1},    {PPSchedule::Interleaved, 4, 8, 2},
                          {PPSchedule::Interleaved, 2, 4, 2}, {PPSchedule::Interleaved, 4, 4, 2}, {PPSchedule::Interleaved, 4, 8, 4},
                          {PPSchedule::Interleaved, 2, 8, 3}};
    for (const Case& k : cases) {
        const PPTiming t = pp_simulate(k.kind, k.p, k.m, k.v);
        const double want = pp_bubble_formula(k.kind, k.p, k.m, k.v);
        bool peaks_ok = t.ok && (int)t.peak_alive.size() == k.p;
        for (int s = 0; peaks_ok && s < k.p; s++) {
            const int peak = k.kind == PPSchedule::GPipe ? k.m
                           : k.kind == PPSchedule::OneFOneB ? std::min(k.p - s, k.m)
                           : std::min((k.p - s - 1) * 2 + (k.v - 1) * k.p + 1, k.m * k.v);
            peaks_ok = t.peak_alive[s] == peak;
        }
        char name[200];
        snprintf(name, sizeof(name), "pipeline %s p=%d m=%d%s: every step once, no deadlock, bubble %.4f = (p-1)/(%sm+p-1), peaks %s",
                 PP_SCHEDULE_NAMES[(int)k.kind], k.p, k.m, k.kind == PPSchedule::Interleaved ? (" v=" + std::to_string(k.v)).c_str() : "",
                 t.bubble, k.kind == PPSchedule::Interleaved ? "v*" : "", peaks_ok ? "as the schedule's" : "WRONG");
        report(t.ok && std::fabs(t.bubble - want) <= 1e-12 && peaks_ok, name);
        if (!t.ok) printf("#   %s\n", t.why.c_str());
    }
    std::vector<std::vector<PPStep>> steps(2);
    for (int s = 0; s < 2; s++) steps[s] = pp_schedule(PPSchedule::OneFOneB, 2, s, 4);
    std::swap(steps[1][0], steps[1][1]);  // the last stage's first backward before its forward
    const PPTiming bad = pp_simulate_steps(steps, 4, 1, 1.0, 2.0);
    steps[1] = pp_schedule(PPSchedule::OneFOneB, 2, 1, 4);
    steps[0].pop_back();                  // a backward missing
    const PPTiming short_list = pp_simulate_steps(steps, 4, 1, 1.0, 2.0);
    report(!bad.ok && bad.why.find("deadlock") == 0 && !short_list.ok, "pipeline: a backward before its forward deadlocks, a missing step is refused");
    // the layers of P virtual stages: every layer once, in order, sizes within one of each other
    bool layers_ok = true;
    for (int L : {12, 5, 48})
        for (int P : {1, 2, 4, 5}) {
            if (P > L) continue;
            int at = 0, lo = L, hi = 0;
            for (int vs = 0; vs < P; vs++) {
                const LayerRange r = stage_layers(L, P, vs);
                layers_ok &= r.first == at && r.end > r.first;
                lo = std::min(lo, r.end - r.first); hi = std::max(hi, r.end - r.first);
                at = r.end;
            }
            layers_ok &= at == L && hi - lo <= 1;
        }
    report(layers_ok, "pipeline: L = 12, 5, 48 layers over 1, 2, 4, 5 stages: each layer once, in order, stage sizes within one");

    // The executor (pp_train_step) matches messages by sender and tag alone (forward 0, backward
    // 1), so on each channel (from, to, tag) the receiver must take them in the order the sender
    // sent them: walk every stage's list, the sends and receives of each step (chunk k of stage s
    // is virtual stage k·p + s, its neighbours s ± 1 mod p), and compare per channel.
    bool order_ok = true;
    for (const Case& k : cases) {
        const int v = k.kind == PPSchedule::Interleaved ? k.v : 1, V = k.p * v;
        std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> sent, received;  // channel → (micro, virtual stage sent to)
        for (int s = 0; s < k.p; s++)
            for (const PPStep& st : pp_schedule(k.kind, k.p, s, k.m, v)) {
                const int vs = st.chunk * k.p + s, up = (s + k.p - 1) % k.p, down = (s + 1) % k.p;
                if (st.forward && vs > 0) received[{up, s, 0}].push_back({st.micro, vs});
                if (st.forward && vs < V - 1) sent[{s, down, 0}].push_back({st.micro, vs + 1});
                if (!st.forward && vs < V - 1) received[{down, s, 1}].push_back({st.micro, vs});
                if (!st.forward && vs > 0) sent[{s, up, 1}].push_back({st.micro, vs - 1});
            }
        order_ok &= sent == received;
    }
    report(order_ok, "pipeline: on every channel (stage to stage, forward or backward) the receiver takes the messages in the order "
           "they were sent, every schedule above");
    // per-chunk slots: each chunk's peak of live micro-batches (what model.h allocates per chunk);
    // together at least the stage's peak, and 1f1b's are the stage's
    bool slots_ok = true;
    for (const Case& k : cases)
        for (int s = 0; s < k.p; s++) {
            const std::vector<int> sl = pp_slots(k.kind, k.p, s, k.m, k.v);
            const int v = k.kind == PPSchedule::Interleaved ? k.v : 1, peak = pp_simulate(k.kind, k.p, k.m, k.v).peak_alive[s];
            int sum = 0;
            for (int n : sl) { sum += n; slots_ok &= n >= 1 && n <= k.m; }
            slots_ok &= (int)sl.size() == v && sum >= peak && (v > 1 || sum == peak);
        }
    report(slots_ok, "pipeline: each chunk's slots are between 1 and m, at least the stage's peak together (equal to it with one chunk)");
    // send copies (pipeline.h's pp_send_buffers and gpt_stage_send): capped at the peak
    // the timeline keeps in flight, every message goes when it went unbounded (times are sums of
    // multiples of 1/v: compared exactly after the same additions); the caps pp_send_buffers
    // gives (one more) complete under other timings too (t_B = t_F, 3·t_F; a dataflow that
    // completes once completes always: the claim in pipeline.h); and one fewer than the peak on
    // a way that keeps two or more sends some message of that way later, or deadlocks (max-plus:
    // a constraint only delays, and message n waits for the one the peak said was still held).
    bool caps_same = true, caps_other_ok = true, fewer_later = true;
    int fewer_cases = 0, most = 0;
    for (const Case& k : cases) {
        const PPTiming free_run = pp_simulate(k.kind, k.p, k.m, k.v);
        std::vector<std::array<int, 2>> peak = free_run.peak_sends, given;
        for (int s = 0; s < k.p; s++) {
            given.push_back(pp_send_buffers(k.kind, k.p, s, k.m, k.v));
            for (int w = 0; w < 2; w++) {
                caps_same &= given[s][w] == (peak[s][w] > 0 ? peak[s][w] + 1 : 0);
                caps_same &= (peak[s][w] > 0) == !free_run.sent_at[s][w].empty();
                most = std::max(most, peak[s][w]);
            }
        }
        std::vector<std::array<int, 2>> at_peak = peak;
        for (auto& c : at_peak) for (int& n : c) n = std::max(n, 1);  // (a way with no sends: any cap)
        const PPTiming capped = pp_simulate(k.kind, k.p, k.m, k.v, 1.0, 2.0, at_peak), capped_given = pp_simulate(k.kind, k.p, k.m, k.v, 1.0, 2.0, given);
        caps_same &= capped.ok && capped.sent_at == free_run.sent_at && capped.step_time == free_run.step_time;
        caps_same &= capped_given.ok && capped_given.sent_at == free_run.sent_at;
        for (double t_B : {1.0, 3.0}) caps_other_ok &= pp_simulate(k.kind, k.p, k.m, k.v, 1.0, t_B, given).ok;
        for (int s = 0; s < k.p; s++)
            for (int w = 0; w < 2; w++) {
                if (peak[s][w] < 2) continue;
                std::vector<std::array<int, 2>> fewer = at_peak;
                fewer[s][w]--;
                const PPTiming f = pp_simulate(k.kind, k.p, k.m, k.v, 1.0, 2.0, fewer);
                bool later = !f.ok;
                for (size_t n = 0; f.ok && n < f.sent_at[s][w].size(); n++) later |= f.sent_at[s][w][n] > free_run.sent_at[s][w][n];
                fewer_later &= later;
                fewer_cases++;
            }
    }
    report(caps_same, "pipeline: with its sends capped at the timeline's peak in flight (or pp_send_buffers' one more), every "
           "schedule above sends each message when it did unbounded");
    report(caps_other_ok, "pipeline: with pp_send_buffers' caps every schedule above completes with t_B = t_F and t_B = 3 t_F too");
    char fewer_name[200];
    snprintf(fewer_name, sizeof(fewer_name), "pipeline: one copy fewer than the peak delays a send of that way or deadlocks (%d stage-ways "
             "keep >= 2; the most in flight: %d)", fewer_cases, most);
    report(fewer_later && fewer_cases > 0, fewer_name);
    // the interleaved layout (params.h): stage s holds virtual stages s, p + s, …; every block is
    // held by one stage, its parameters packed in increasing order after the embeddings
    bool layout_ok = true;
    GPTConfig lc;
    lc.num_layers = 10; lc.channels = 64; lc.num_heads = 2; lc.vocab_size = 100; lc.padded_vocab_size = 128; lc.max_seq_len = 16;
    for (int p : {2, 3})
        for (int v : {1, 2, 3}) {
            std::vector<int> holder(lc.num_layers, -1);
            for (int s = 0; s < p; s++) {
                const ParamLayout l = make_layout(lc, 1, 0, p, s, v);
                layout_ok &= l.vpp() == v && l.embeds(0) == (s == 0) && l.heads(v - 1) == (s == p - 1);
                size_t at = l.blocks;
                for (int k2 = 0; k2 < v; k2++) {
                    const LayerRange r = stage_layers(lc.num_layers, p * v, k2 * p + s);
                    layout_ok &= l.chunks[k2].first == r.first && l.chunks[k2].end == r.end;
                    for (int b = r.first; b < r.end; b++) {
                        layout_ok &= holder[b] < 0 && l.has_block(b) && l.block(b) == at && unit_span(lc, l, unit_of_block(b)).size == l.block_size;
                        holder[b] = s;
                        at += l.block_size;
                    }
                }
                layout_ok &= l.lnfw == at;
            }
            for (int h : holder) layout_ok &= h >= 0;
        }
    report(layout_ok, "pipeline: L = 10 over p = 2, 3 stages of v = 1, 2, 3 chunks: each block on one stage, chunk k of stage s is virtual "
           "stage k*p + s, its blocks packed in order");
}

static void test_layernorm() {
    int N = 6, C = 13;
    auto x = randn(N * C), w = randn(C), b = randn(C), R = randn(N * C);
    avec<float> out(N * C), mean(N), rstd(N), dx(N * C, 0), dw(C, 0), db(C, 0);
    auto loss = [&]() { layernorm_forward(ctx, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C); return dot_abs(out.data(), R.data(), out.size()); };
    loss();
    layernorm_backward(ctx, dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    fd_check("layernorm dinp", x.data(), x.size(), dx.data(), loss);
    fd_check("layernorm dw", w.data(), w.size(), dw.data(), loss);
    fd_check("layernorm db", b.data(), b.size(), db.data(), loss);
    // dinp accumulates: a second backward doubles it
    avec<float> dx2 = dx;
    layernorm_backward(ctx, dx2.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    bool ok = true;
    for (size_t i = 0; i < dx.size(); i++) ok &= std::fabs(dx2[i] - 2 * dx[i]) <= 1e-6f * (1 + std::fabs(dx[i]));
    report(ok, "layernorm dinp accumulates");
}

static void test_matmul() {
    int N = 9, C = 11, OC = 70;  // odd sizes: leftover rows of the 4-row tiles, a partial block
    auto x = randn(N * C), W = randn(OC * C), bias = randn(OC), R = randn(N * OC);
    avec<float> out(N * OC), dx(N * C), dW(OC * C, 0), db(OC, 0);
    auto loss = [&]() { matmul_forward(ctx, out.data(), x.data(), W.data(), bias.data(), N, C, OC); return dot_abs(out.data(), R.data(), out.size()); };
    matmul_backward(ctx, dx.data(), dW.data(), db.data(), R.data(), x.data(), W.data(), N, C, OC);
    fd_check("matmul dinp", x.data(), x.size(), dx.data(), loss);
    fd_check("matmul dW", W.data(), W.size(), dW.data(), loss);
    fd_check("matmul dbias", bias.data(), bias.size(), db.data(), loss);
}

// NKV < NH: grouped-query attention (query head h reads key/value head h / (NH/NKV)).
static void test_attention(int NH, int NKV) {
    const int B = 2, T = 7, C = 12;
    const QKVLayout L(C, NH, NKV);
    const size_t W = L.row();
    auto qkv = randn(B * T * W), R = randn(B * T * C);
    avec<float> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
    auto loss = [&]() { attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV); return dot_abs(out.data(), R.data(), out.size()); };
    loss();
    attention_backward(ctx, dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
    char name[96];
    snprintf(name, sizeof(name), "attention dqkv (NH=%d, NKV=%d)", NH, NKV);
    fd_check(name, qkv.data(), qkv.size(), dqkv.data(), loss, 96);
    // lse against a direct evaluation, and causality: row t=0 attends only to itself (out = v_0)
    loss();  // fd_check left the last perturbed forward in out/lse
    int hs = C / NH;
    double worst = 0;
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        double s = 0;
        for (int j = 0; j <= t; j++) {
            double d = 0;
            for (int i = 0; i < hs; i++) d += (double)qkv[(b * T + t) * W + h * hs + i] * qkv[(b * T + j) * W + L.k(h) + i];
            s += std::exp(d / std::sqrt((double)hs));
        }
        worst = std::max(worst, std::fabs(std::log(s) - lse[(b * NH + h) * T + t]));
    }
    snprintf(name, sizeof(name), "attention lse = log sum exp (NH=%d, NKV=%d)", NH, NKV);
    report(worst < 1e-5, name, "max |error| %.2g", worst);  // fp32 exp/log: ~1e-6
    bool causal = true;
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < hs; i++) causal &= std::fabs(out[h * hs + i] - qkv[L.v(h) + i]) < 1e-6f;
    snprintf(name, sizeof(name), "attention first position attends only to itself (NH=%d, NKV=%d)", NH, NKV);
    report(causal, name);
}

// Grouped-query attention is multi-head attention over rows whose key/value head h / G is
// repeated for each query head h (its definition): the forward the same bits (each query head's
// loop reads the same numbers in the same order), dq the same bits, and dk, dv of a key/value head
// the sum over its group of the repeated rows' gradients (the same terms in another order: fp32
// rounding, a few ulps of O(1) values → 1e-5).
static void test_gqa_is_repeated_mha() {
    const int B = 2, T = 9, NH = 6, NKV = 2, hs = 4, C = NH * hs, G = NH / NKV;
    const QKVLayout L(C, NH, NKV);
    const size_t N = (size_t)B * T, W = L.row();
    auto qkv = randn(N * W), R = randn(N * C);
    avec<float> rep(N * 3 * C);  // the repeated rows: [q | k of each query head | v of each]
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                rep[n * 3 * C + h * hs + i] = qkv[n * W + h * hs + i];
                rep[n * 3 * C + C + h * hs + i] = qkv[n * W + C + (h / G) * hs + i];
                rep[n * 3 * C + 2 * C + h * hs + i] = qkv[n * W + C + NKV * hs + (h / G) * hs + i];
            }
    avec<float> out(N * C), lse(B * NH * T), dqkv(N * W), rout(N * C), rlse(B * NH * T), drep(N * 3 * C);
    attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    attention_forward(ctx, rout.data(), rlse.data(), rep.data(), B, T, C, NH, NH);
    auto identical = [](const avec<float>& a, const avec<float>& b) { return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin()); };
    report(identical(out, rout) && identical(lse, rlse), "gqa attention forward = attention over the repeated rows (bit for bit)");
    attention_backward(ctx, dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
    attention_backward(ctx, drep.data(), R.data(), rep.data(), rout.data(), rlse.data(), B, T, C, NH, NH);
    bool dq_same = true;
    double dkv_err = 0;
    for (size_t n = 0; n < N; n++) {
        for (int e = 0; e < C; e++) dq_same &= dqkv[n * W + e] == drep[n * 3 * C + e];
        for (int part = 0; part < 2; part++)
            for (int kh = 0; kh < NKV; kh++)
                for (int i = 0; i < hs; i++) {
                    double sum = 0;
                    for (int h = kh * G; h < kh * G + G; h++) sum += drep[n * 3 * C + (1 + part) * C + h * hs + i];
                    dkv_err = std::max(dkv_err, std::fabs(sum - dqkv[n * W + C + part * NKV * hs + kh * hs + i]));
                }
    }
    report(dq_same, "gqa attention dq = the repeated rows' dq (bit for bit)");
    report(dkv_err <= 1e-5, "gqa attention dk, dv = the repeated rows' dk, dv summed over each group", "max diff %.1e", dkv_err);
}

// Ring attention (context_parallel.h) with its c ranks run one after another in this process: each
// rank's local attention, then the blocks of the others' keys cp_block says it sees, merged
// (attention_block_forward); the backward's blocks the same way, each borrowed block's dk, dv
// added to its owner's. Every rank's rows must be the whole sequence's attention at their
// positions. Tolerance: the same fp32 sums in another order (the softmax split into blocks and
// merged; dq, dk, dv summed block by block): a few ulps of O(1) values → 1e-5.
// NKV < NH: the ring carries the NKV key/value heads alone (grouped-query attention).
static void test_ring_attention(int NH, int NKV) {
    const int B = 2, T = 24, C = 12;
    const QKVLayout L(C, NH, NKV);
    const int W = (int)L.row(), KV2 = 2 * L.kv();
    auto qkv = randn((size_t)B * T * W), R = randn((size_t)B * T * C);
    avec<float> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
    attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
    attention_backward(ctx, dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
    for (int c : {2, 3, 4})
        for (bool zz : {false, true}) {
            const int Tl = T / c;
            // rank r's rows of a (B, T, width) buffer, and back
            auto take = [&](const avec<float>& full, int r, int width) {
                avec<float> loc((size_t)B * Tl * width);
                for (const PosPiece& q : cp_pieces(c, r, zz, Tl))
                    for (int b = 0; b < B; b++)
                        for (int i = 0; i < q.n; i++)
                            std::copy_n(&full[((size_t)b * T + q.global + i) * width], width, &loc[((size_t)b * Tl + q.local + i) * width]);
                return loc;
            };
            std::vector<avec<float>> q(c), o(c), l(c), d(c), dx(c), kv(c);
            for (int r = 0; r < c; r++) {
                q[r] = take(qkv, r, W);
                d[r] = take(R, r, C);
                kv[r].resize((size_t)B * Tl * KV2);
                copy_rows(ctx, kv[r].data(), KV2, q[r].data() + C, W, KV2, (size_t)B * Tl);
                o[r].resize((size_t)B * Tl * C); l[r].resize((size_t)B * NH * Tl); dx[r].resize((size_t)B * Tl * W);
            }
            for (int r = 0; r < c; r++) {  // (every rank's k, v are there: what the ring lends)
                attention_forward(ctx, o[r].data(), l[r].data(), q[r].data(), B, Tl, C, NH, NKV);
                for (int s = 1; s < c; s++) {
                    const CPBlock k = cp_block(zz, r, (r - s + c) % c, Tl);
                    attention_block_forward(ctx, o[r].data(), l[r].data(), q[r].data(), kv[(r - s + c) % c].data(), B, Tl, Tl, C, NH,
                                            NKV, k.q0, k.nq, k.k0, k.nk);
                }
            }
            for (int r = 0; r < c; r++) {  // the local keys' share (with the final lse and out), then the borrowed blocks
                attention_backward(ctx, dx[r].data(), d[r].data(), q[r].data(), o[r].data(), l[r].data(), B, Tl, C, NH, NKV);
            }
            for (int r = 0; r < c; r++) {
                avec<float> D((size_t)B * NH * Tl), dkv((size_t)B * Tl * KV2);
                attention_row_dots(ctx, D.data(), d[r].data(), o[r].data(), B, Tl, C, NH);
                for (int s = 1; s < c; s++) {
                    const int own = (r - s + c) % c;
                    const CPBlock k = cp_block(zz, r, own, Tl);
                    std::fill(dkv.begin(), dkv.end(), 0.0f);
                    attention_block_backward(ctx, dx[r].data(), dkv.data(), d[r].data(), q[r].data(), kv[own].data(), l[r].data(), D.data(),
                                             B, Tl, Tl, C, NH, NKV, k.q0, k.nq, k.k0, k.nk);
                    copy_rows(ctx, dx[own].data() + C, W, dkv.data(), KV2, KV2, (size_t)B * Tl, true);
                }
            }
            double eo = 0, el = 0, ed = 0;
            for (int r = 0; r < c; r++) {
                const avec<float> wo = take(out, r, C), wd = take(dqkv, r, W);
                for (size_t i = 0; i < wo.size(); i++) eo = std::max(eo, (double)std::fabs(o[r][i] - wo[i]));
                for (size_t i = 0; i < wd.size(); i++) ed = std::max(ed, (double)std::fabs(dx[r][i] - wd[i]));
                for (const PosPiece& p : cp_pieces(c, r, zz, Tl))  // lse is (B, NH, T)
                    for (int bh = 0; bh < B * NH; bh++)
                        for (int i = 0; i < p.n; i++)
                            el = std::max(el, (double)std::fabs(l[r][(size_t)bh * Tl + p.local + i] - lse[(size_t)bh * T + p.global + i]));
            }
            char name[140];
            snprintf(name, sizeof(name), "ring attention, cp=%d %s%s: out, lse and dqkv are one attention's", c, zz ? "zigzag" : "contiguous",
                     NKV < NH ? ", grouped-query (NH=4, NKV=2)" : "");
            report(eo <= 1e-5 && el <= 1e-5 && ed <= 1e-5, name, "max diff out/lse %.1e, dqkv %.1e", std::max(eo, el), ed);
        }
    if (NKV < NH) return;
    // which blocks: zigzag's are half of the Q·Kᵀ pairs for every (r, o), contiguous's all or none
    bool halves = true;
    for (int c : {2, 4, 8})
        for (int r = 0; r < c; r++)
            for (int o = 0; o < c; o++)
                if (o != r) { const CPBlock k = cp_block(true, r, o, 16); halves &= k.nq * k.nk == 16 * 16 / 2; }
    report(halves, "ring attention zigzag: every borrowed block is half of the query-key pairs (balanced)");
}

static void test_gelu() {
    size_t N = 50;
    auto x = randn(N, 2.0f), R = randn(N);
    avec<float> out(N), dx(N);
    auto loss = [&]() { gelu_forward(ctx, out.data(), x.data(), N); return dot_abs(out.data(), R.data(), N); };
    gelu_backward(ctx, dx.data(), x.data(), R.data(), N);
    fd_check("gelu dinp", x.data(), N, dx.data(), loss);
}

// The ops of Llama-style models: RMSNorm (layernorm.cuh), SwiGLU (swiglu.cuh), RoPE (rope.cuh).
// Each backward against finite differences; RMSNorm's and RoPE's forwards against their
// formulas computed here in double (RoPE's from a complex multiplication, the angle t·θ^(−2i/hd),
// not from rope_table); RoPE preserves each pair's length and makes q·k depend on the distance
// alone. fp32 bounds: 1e-6 of the values (a few ulps of the fp32 ops' round-off).
static void test_llama_ops() {
    {   // RMSNorm
        int N = 6, C = 13;
        auto x = randn(N * C), w = randn(C), R = randn(N * C);
        avec<float> out(N * C), rstd(N), dx(N * C, 0), dw(C, 0);
        auto loss = [&]() { rmsnorm_forward(ctx, out.data(), rstd.data(), x.data(), w.data(), N, C); return dot_abs(out.data(), R.data(), out.size()); };
        loss();
        double err = 0;
        for (int i = 0; i < N; i++) {
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
            const double r = 1.0 / std::sqrt(ss / C + 1e-5);
            for (int c = 0; c < C; c++) err = std::max(err, std::fabs(out[i * C + c] - x[i * C + c] * r * w[c]) / (1 + std::fabs(x[i * C + c] * r * w[c])));
        }
        report(err <= 1e-6, "rmsnorm forward: x / sqrt(mean(x^2) + 1e-5) * w", "max error %.1e", err);
        rmsnorm_backward(ctx, dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
        fd_check("rmsnorm dinp", x.data(), x.size(), dx.data(), loss);
        fd_check("rmsnorm dw", w.data(), w.size(), dw.data(), loss);
    }
    {   // SwiGLU
        size_t N = 5, H = 9;
        auto x = randn(N * 2 * H, 2.0f), R = randn(N * H);
        avec<float> out(N * H), dx(N * 2 * H);
        auto loss = [&]() { swiglu_forward(ctx, out.data(), x.data(), N, H); return dot_abs(out.data(), R.data(), out.size()); };
        loss();
        double err = 0;
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < H; j++) {
                const double a = x[i * 2 * H + j], b = x[i * 2 * H + H + j], want = a / (1 + std::exp(-a)) * b;
                err = std::max(err, std::fabs(out[i * H + j] - want) / (1 + std::fabs(want)));
            }
        report(err <= 1e-6, "swiglu forward: silu(a) * b", "max error %.1e", err);
        swiglu_backward(ctx, dx.data(), x.data(), R.data(), N, H);
        fd_check("swiglu dinp [da | db]", x.data(), x.size(), dx.data(), loss);
    }
    {   // RoPE: rows of 3 heads of 8 (2 turned: q, k) + 5 left alone, at positions 3, 4, ...
        const int B = 2, T = 5, heads = 2, hd = 8, stride = 3 * hd + 5, off = 3;
        const double theta = 10000.0;
        std::vector<int> pos(T);
        for (int t = 0; t < T; t++) pos[t] = off + t;
        const std::vector<float> table = rope_table(pos.data(), T, hd, theta);
        auto x = randn((size_t)B * T * stride), R = randn((size_t)B * T * stride);
        avec<float> y(x.size()), dx(x.size());
        rope_forward(ctx, (y = x).data(), table.data(), B, T, stride, heads, hd);
        double err = 0;
        bool rest = true;
        for (int r = 0; r < B * T; r++)
            for (int e = 0; e < stride; e++) {
                const size_t k = (size_t)r * stride + e;
                if (e >= heads * hd) { rest &= y[k] == x[k]; continue; }
                const int i = (e % hd) / 2;
                const std::complex<double> z(x[k - e % 2], x[k - e % 2 + 1]),
                    turned = z * std::polar(1.0, (double)pos[r % T] / std::pow(theta, 2.0 * i / hd));
                err = std::max(err, std::fabs(y[k] - (e % 2 ? turned.imag() : turned.real())));
            }
        report(err <= 1e-6 && rest, "rope forward: each pair (x[2i], x[2i+1]) times e^(i t theta^(-2i/hd)); the rest of the row untouched",
               "max error %.1e", err);
        auto loss = [&]() { rope_forward(ctx, (y = x).data(), table.data(), B, T, stride, heads, hd); return dot_abs(y.data(), R.data(), y.size()); };
        rope_backward(ctx, (dx = R).data(), table.data(), B, T, stride, heads, hd);
        fd_check("rope dinp (the opposite turn)", x.data(), x.size(), dx.data(), loss);
        // q at t, k at u: q·k after the turns depends on u - t alone (positions 3+t vs 0+t: a table from 0)
        std::vector<int> pos0(T);
        for (int t = 0; t < T; t++) pos0[t] = t;
        const std::vector<float> table0 = rope_table(pos0.data(), T, hd, theta);
        avec<float> y0 = x;
        rope_forward(ctx, y0.data(), table0.data(), B, T, stride, heads, hd);
        double rel = 0;
        for (int t = 0; t < T; t++)
            for (int u = 0; u < T; u++) {
                double d3 = 0, d0 = 0, n = 0;
                for (int c = 0; c < hd; c++) {
                    d3 += (double)y[(size_t)t * stride + c] * y[(size_t)u * stride + hd + c];
                    d0 += (double)y0[(size_t)t * stride + c] * y0[(size_t)u * stride + hd + c];
                    n += std::fabs((double)x[(size_t)t * stride + c] * x[(size_t)u * stride + hd + c]);
                }
                rel = std::max(rel, std::fabs(d3 - d0) / n);
            }
        report(rel <= 1e-5, "rope: q.k after the turns is the same at positions shifted by 3 (it sees u - t alone)", "max diff %.1e", rel);
    }
}

static void test_classifier() {
    int N = 5, V = 37, Vp = 40;
    auto logits = randn(N * Vp, 3.0f);
    std::vector<int> tgt(N);
    for (auto& t : tgt) t = (int)rng.below(V);
    avec<float> work(N * Vp), losses(N);
    auto loss = [&]() {
        work = logits;
        fused_classifier(ctx, work.data(), losses.data(), tgt.data(), N, V, Vp, 0.0f);
        double s = 0, a = 0;
        for (float l : losses) { s += l; a += std::fabs(l); }
        return std::make_pair(s, a * 4);  // each loss sums V exps: a few more ulps
    };
    avec<float> grad = logits;
    fused_classifier(ctx, grad.data(), losses.data(), tgt.data(), N, V, Vp, 1.0f);
    fd_check("fused_classifier dlogits", logits.data(), logits.size(), grad.data(), loss, 80);
    bool pad_zero = true;
    for (int n = 0; n < N; n++) for (int v = V; v < Vp; v++) pad_zero &= grad[n * Vp + v] == 0.0f;
    report(pad_zero, "fused_classifier padded vocab gets zero gradient");
}

// The whole model: gradient of the mean loss w.r.t. sampled parameters of every tensor kind, of
// GPT-2 and of a Llama (RMSNorm, RoPE, SwiGLU, 4 query heads sharing 2 key/value heads), whose
// classifier is wte (tied) or its own lm_head.
static void test_model_grad(bool llama, bool tied = true) {
    const char* arch = !llama ? "gpt2" : tied ? "llama" : "llama (untied)";
    GPTConfig c;
    c.max_seq_len = 8; c.vocab_size = 50; c.padded_vocab_size = 64; c.num_layers = 2; c.num_heads = 2; c.channels = 16;
    if (llama) { c.arch = Arch::Llama; c.num_heads = 4; c.num_kv_heads = 2; c.hidden = 24; c.rope_theta = 10000; c.tied = tied; }
    GPT<float> g;
    gpt_build(&g, c);
    const ParamLayout& p = g.layout;
    avec<float> params(p.total), grads(p.total, 0.0f);
    gpt_point_units(&g, params.data(), grads.data());
    for (int u = 0; u < gpt_num_units(c); u++) gpt_init_unit(c, p, u, 7, params.data() + unit_span(c, p, u).offset);
    for (auto& x : params) x += 0.05f * rng.normal();  // break the zero biases / unit LayerNorms
    if (llama)  // sharp attention, so that q and k (and RoPE's turn of them) move the loss well above round-off
        for (int l = 0; l < c.num_layers; l++)
            for (size_t i = 0; i < block_tensor_size(c, QKVW); i++) params[p.block(l) + p.in_block[QKVW] + i] *= 5.0f;
    int B = 2, T = 8;
    std::vector<int> x(B * T), y(B * T);
    for (int i = 0; i < B * T; i++) { x[i] = (int)rng.below(50); y[i] = (int)rng.below(50); }
    gpt_forward(ctx, &g, x.data(), y.data(), B, T, 1.0f / (B * T));
    gpt_backward(ctx, &g, B, T);
    auto loss = [&]() {
        gpt_forward(ctx, &g, x.data(), y.data(), B, T, 0.0f);
        double l = gpt_mean_loss(&g);
        return std::make_pair(l, 64.0 * std::fabs(l));  // the mean of B·T losses, each a deep fp32 chain
    };
    char name[96];
    snprintf(name, sizeof(name), "%s model dwte (%s)", arch, tied ? "tied embedding + classifier" : "the embedding alone");
    fd_check(name, params.data() + p.wte, (size_t)50 * 16, grads.data() + p.wte, loss, 24);
    snprintf(name, sizeof(name), "%s model dwpe", arch);
    if (!llama) fd_check(name, params.data() + p.wpe, (size_t)8 * 16, grads.data() + p.wpe, loss, 24);
    else report(p.blocks == p.wpe, "llama model: no wpe (RoPE)");
    size_t held = 0;
    for (int k = 0; k < NUM_BLOCK_TENSORS; k++) {
        const size_t n = block_tensor_size(c, (BlockTensor)k);
        held += n;
        if (n == 0) continue;  // (Llama's biases)
        snprintf(name, sizeof(name), "%s model block0 %s", arch, BLOCK_TENSOR_NAMES[k]);
        size_t off = p.block(0) + p.in_block[k];
        fd_check(name, params.data() + off, n, grads.data() + off, loss, 12);
    }
    // a Llama block: 2C norms, (NH + 2·NKV)·hd·C + C² attention, 3·H·C MLP weights, no biases
    snprintf(name, sizeof(name), "%s block holds its %zu parameters", arch, held);
    report(held == p.block_size && (!llama || held == 2 * 16 + (4 + 2 * 2) * 4 * 16 + 16 * 16 + 3 * 24 * 16), name);
    snprintf(name, sizeof(name), "%s model dlnfw", arch);
    fd_check(name, params.data() + p.lnfw, 16, grads.data() + p.lnfw, loss, 16);
    if (!tied) {
        snprintf(name, sizeof(name), "%s model dlm_head (the classifier), apart from dwte (the embedding)", arch);
        fd_check(name, params.data() + p.lm_head, (size_t)50 * 16, grads.data() + p.lm_head, loss, 24);
        report(p.total == p.lm_head + (size_t)64 * 16, "llama (untied): lm_head's Vp x C rows end the layout");
    }
}

static void test_adamw_and_norm() {
    size_t n = 1000;
    auto p = randn(n), gr = randn(n), m = randn(n, 0.1f), v = randn(n, 0.1f);
    for (auto& x : v) x = x * x;
    avec<float> p2 = p, m2 = m, v2 = v;
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    int t = 3;
    adamw_update(ctx, p2.data(), gr.data(), m2.data(), v2.data(), nullptr, n, lr, b1, b2, eps, wd, t, scale);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {  // the same formula in double
        double g = (double)gr[i] * scale, mi = b1 * (double)m[i] + (1 - b1) * g, vi = b2 * (double)v[i] + (1 - b2) * g * g;
        double mh = mi / (1 - std::pow((double)b1, t)), vh = vi / (1 - std::pow((double)b2, t));
        double pi = p[i] - lr * (mh / (std::sqrt(vh) + eps) + wd * p[i]);
        worst = std::max(worst, std::fabs(pi - p2[i]) / (lr + std::fabs(pi) * 1e-6));
    }
    // fp32 vs double: a few ulps of each term; relative to one step's size lr
    report(worst < 1e-4, "adamw matches the double-precision formula", "max error / lr %.2g", worst);
    {  // one update with decay runs == one update per tensor (wd or 0), bit for bit
        avec<float> p3 = p, m3 = m, v3 = v, p4 = p, m4 = m, v4 = v;
        const size_t cut[] = {0, 100, 300, 500, 501, n};  // tensors; odd ones decay
        DecayRuns decay;
        for (int k = 0; k < 5; k++) {
            const size_t b = cut[k], e = cut[k + 1];
            if (k % 2) decay.add(b, e);
            adamw_update(ctx, p3.data() + b, gr.data() + b, m3.data() + b, v3.data() + b, nullptr, e - b, lr, b1, b2, eps,
                         k % 2 ? wd : 0.0f, t, scale);
        }
        adamw_update(ctx, p4.data(), gr.data(), m4.data(), v4.data(), nullptr, n, lr, b1, b2, eps, wd, decay, t, scale);
        report(p3 == p4 && m3 == m4 && v3 == v4 && decay.n == 2, "adamw over decay runs equals one update per tensor, bit for bit");
    }
    avec<float> big = randn(300001);
    double ref = 0;
    for (float x : big) ref += (double)x * x;
    double got = global_norm_squared(ctx, big.data(), big.size());
    report(std::fabs(got - ref) <= 1e-12 * ref, "global norm squared (double accumulation)", "rel error %.2g", std::fabs(got - ref) / ref);
    const size_t h = 100000;  // pieces: each piece's sum, added in order
    double pieces = global_norm_squared<float>(ctx, {{big.data(), h}, {big.data() + h, big.size() - h}});
    report(pieces == global_norm_squared(ctx, big.data(), h) + global_norm_squared(ctx, big.data() + h, big.size() - h),
           "global norm squared of two pieces is the pieces' sums added");
    report(grad_clip_factor(2.0f, 1.0f) == 0.5f && grad_clip_factor(0.5f, 1.0f) == 1.0f && grad_clip_factor(5.0f, 0.0f) == 1.0f,
           "grad clip factor");
}

static void test_misc() {
    // bf16: exact values survive, rounding is to nearest even, NaN stays NaN
    bool ok = bf16_to_fp32(fp32_to_bf16(1.5f)) == 1.5f && bf16_to_fp32(fp32_to_bf16(-3.0f)) == -3.0f;
    ok &= fp32_to_bf16(1.0f + 1.0f / 256) == fp32_to_bf16(1.0f);            // tie → even (down)
    ok &= fp32_to_bf16(1.0f + 3.0f / 256) == fp32_to_bf16(1.0f + 4.0f / 256);  // tie → even (up)
    ok &= std::isnan(bf16_to_fp32(fp32_to_bf16(NAN)));
    report(ok, "bf16 round to nearest even");
    // LR schedules at their boundaries
    LRSchedule s; s.lr = 1.0f; s.warmup = 10; s.total = 110; s.final_lr_frac = 0.1f;
    s.kind = "cosine";
    ok = std::fabs(lr_at(s, 0) - 0.1f) < 1e-6f && std::fabs(lr_at(s, 9) - 1.0f) < 1e-6f &&
         std::fabs(lr_at(s, 10) - 1.0f) < 1e-6f && std::fabs(lr_at(s, 60) - 0.55f) < 1e-5f;
    s.kind = "linear"; ok &= std::fabs(lr_at(s, 60) - 0.55f) < 1e-5f;
    s.kind = "wsd"; ok &= lr_at(s, 80) == 1.0f && std::fabs(lr_at(s, 100) - 0.55f) < 1e-5f;
    s.kind = "constant"; ok &= lr_at(s, 100) == 1.0f;
    report(ok, "lr schedules");
    // outlier z (outliers.h): window {1, 2, 3, 4}: mean 2.5, population std √1.25; no z before the
    // window is full (but +∞ for a non-finite value); the oldest value leaves first
    OutlierWindow w; w.size = 4;
    for (double v : {9.0, 1.0, 2.0, 3.0}) outlier_push(&w, v);
    ok = std::isnan(outlier_z(OutlierWindow{4, {1.0, 2.0}}, 5.0)) && std::isinf(outlier_z(OutlierWindow{4, {}}, NAN));
    outlier_push(&w, 4.0);  // pushes 9 out
    outlier_push(&w, INFINITY);  // left out
    ok &= w.values.size() == 4 && w.values.front() == 1.0 && std::fabs(outlier_z(w, 5.0) - 2.5 / std::sqrt(1.25)) < 1e-12;
    ok &= outlier_z(OutlierWindow{2, {3.0, 3.0}}, 3.5) == INFINITY && outlier_z(OutlierWindow{2, {3.0, 3.0}}, 3.0) == 0.0;
    report(ok, "outlier z-score over the window");
    // RNG state round trip
    Rng a(5); a.normal(); Rng b(0); b.state = a.state;
    report(a.next_u64() == b.next_u64(), "rng state round trip");
}

// The host memory a memory cgroup still allows (common.h: cgroup_room_bytes), on made-up cgroupfs
// trees of both versions: the limit less the usage, the inactive file cache counted as free, the
// tightest level winning, no limit giving -1.
static void write_text(const std::string& path, const std::string& text) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) { printf("# cannot write %s\n", path.c_str()); return; }
    fputs(text.c_str(), f);
    fclose(f);
}
static void test_cgroup_room() {
    char tmpl[] = "/tmp/llmc_cgroup_XXXXXX";
    const std::string root = mkdtemp(tmpl) ? tmpl : "";
    if (root.empty()) { report(false, "cgroup room: no temporary directory"); return; }
    const double M = 1048576;
    // v2: job (limit 1000 MiB, holds 600 of which 100 inactive cache) inside slurm (limit 800,
    // holds 700 of which 50 cache: room 150, the tightest) inside an unlimited root
    system(("mkdir -p " + root + "/v2/slurm/job " + root + "/v1/memory/docker/abc").c_str());
    write_text(root + "/v2/slurm/job/memory.max", std::to_string((long long)(1000 * M)) + "\n");
    write_text(root + "/v2/slurm/job/memory.current", std::to_string((long long)(600 * M)) + "\n");
    write_text(root + "/v2/slurm/job/memory.stat", "anon 1\nfile 2\ninactive_file " + std::to_string((long long)(100 * M)) + "\nactive_file 5\n");
    write_text(root + "/v2/slurm/memory.max", std::to_string((long long)(800 * M)) + "\n");
    write_text(root + "/v2/slurm/memory.current", std::to_string((long long)(700 * M)) + "\n");
    write_text(root + "/v2/slurm/memory.stat", "inactive_file " + std::to_string((long long)(50 * M)) + "\n");
    write_text(root + "/v2/memory.max", "max\n");
    write_text(root + "/v2/memory.current", "123\n");
    double r = cgroup_room_bytes(root + "/v2", "0::/slurm/job\n");
    report(r == 150 * M, "cgroup v2: the tightest of a cgroup and its parents, inactive file cache counted free", "%.1f MiB (want 150)", r / M);
    write_text(root + "/v2/slurm/memory.max", "max\n");
    r = cgroup_room_bytes(root + "/v2", "0::/slurm/job\n");
    report(r == 500 * M, "cgroup v2: a parent without a limit leaves the cgroup's", "%.1f MiB (want 500)", r / M);
    report(cgroup_room_bytes(root + "/v2", "0::/\n") == -1 && cgroup_room_bytes(root + "/v2", "") == -1,
           "cgroup v2: no limit (memory.max 'max', or no cgroup line) gives -1");
    // v1 (hybrid: a v2 line too): limit 2000 MiB, a parent's 1500 (hierarchical), holds 1200 of
    // which 200 inactive cache: room 500; a container that sees only its own cgroup at the mount
    const std::string d = root + "/v1/memory/docker/abc";
    write_text(d + "/memory.limit_in_bytes", std::to_string((long long)(2000 * M)) + "\n");
    write_text(d + "/memory.usage_in_bytes", std::to_string((long long)(1200 * M)) + "\n");
    write_text(d + "/memory.stat", "cache 9\nhierarchical_memory_limit " + std::to_string((long long)(1500 * M)) +
                                       "\ntotal_inactive_file " + std::to_string((long long)(200 * M)) + "\n");
    const std::string self = "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n0::/docker/abc\n";
    r = cgroup_room_bytes(root + "/v1", self);
    report(r == 500 * M, "cgroup v1: the limit or the parents' (hierarchical_memory_limit), inactive cache counted free", "%.1f MiB (want 500)", r / M);
    write_text(root + "/v1/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
    write_text(root + "/v1/memory/memory.usage_in_bytes", "1000\n");
    r = cgroup_room_bytes(root + "/v1", "3:memory:/elsewhere/on/the/host\n");
    report(r == -1, "cgroup v1: a path the container cannot see falls back to the mount's cgroup; ~2^63 is no limit", "%.1f (want -1)", r);
    write_text(root + "/v1/memory/memory.limit_in_bytes", std::to_string((long long)(300 * M)) + "\n");
    r = cgroup_room_bytes(root + "/v1", "3:memory:/elsewhere/on/the/host\n");
    report(r == 300 * M - 1000, "cgroup v1: the mount's cgroup's limit applies there", "%.1f MiB", r / M);
    // what the trainer uses: never more than /proc/meminfo's MemAvailable
    bool by_cgroup = false;
    const double host = host_available_bytes(&by_cgroup);
    report(host > 0, by_cgroup ? "host_available_bytes: known (this process's memory cgroup's room)"
                               : "host_available_bytes: known (MemAvailable)", "%.1f MiB", host / M);
    system(("rm -rf " + root).c_str());
}

// CRC32C (checksum.h): the standard check value of "123456789" (0xE3069283), the same CRC over
// any cut of the bytes into pieces, and the 8-byte path against a bit-by-bit one on odd lengths.
static uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}
static void test_crc32c() {
    report(crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c: the check value of \"123456789\" is e3069283", "%.0f", crc32c(0, "123456789", 9));
    std::vector<uint8_t> b(1000);
    uint64_t x = 12345;
    for (auto& v : b) { x = x * 6364136223846793005ull + 1442695040888963407ull; v = (uint8_t)(x >> 56); }
    bool same = true;
    for (size_t n : {0, 1, 7, 8, 9, 63, 999, 1000}) same = same && crc32c(0, b.data(), n) == crc32c_bitwise(b.data(), n);
    for (size_t cut : {1, 5, 8, 13, 500}) same = same && crc32c(crc32c(0, b.data(), cut), b.data() + cut, 1000 - cut) == crc32c(0, b.data(), 1000);
    report(same, "crc32c: 8 bytes at a time = bit by bit (lengths 0..1000), and over any cut into two pieces");
    const uint32_t before = crc32c(0, b.data(), 1000);
    b[500] ^= 4;
    report(crc32c(0, b.data(), 1000) != before, "crc32c: one flipped bit changes it");
}

// Data order (DESIGN §3.4): dp=2 with B=2 reads exactly the batches of dp=1 with B=4.

// ---- bf16: each op against its fp32 op on the same (bf16-exact) inputs

static avec<float> randn_bf(size_t n, float scale = 1.0f) {  // random values that are exact in bf16
    avec<float> v = randn(n, scale);
    for (auto& x : v) x = bf16_to_fp32(fp32_to_bf16(x));
    return v;
}
static avec<bf16> as_bf16(const avec<float>& v) {
    avec<bf16> b(v.size());
    for (size_t i = 0; i < v.size(); i++) b[i] = from_f<bf16>(v[i]);
    return b;
}
// every got[i] within half a bf16 ulp of ref[i]
static void check_rounded_once(const char* name, const avec<float>& ref, const avec<bf16>& got) {
    double worst = 0;
    for (size_t i = 0; i < ref.size(); i++)
        worst = std::max(worst, std::fabs((double)to_f(got[i]) - ref[i]) / (std::ldexp(std::fabs((double)ref[i]), -8) + 1e-30));
    report(worst <= 1.0, name, "worst |bf16 - fp32| / half-ulp = %.3f", worst);
}
// The fp32 side outputs: the same fp32 loops on the same values, but compiled in two template
// instantiations, where the compiler may contract a*b+c into an FMA in one and not the other:
// equal within 2 fp32 ulps (2^-22 relative), which any real difference in the math exceeds.
static bool same_fp32(const avec<float>& a, const avec<float>& b) {
    for (size_t i = 0; i < a.size(); i++)
        if (std::fabs((double)a[i] - b[i]) > std::ldexp(std::fabs((double)a[i]), -22)) return false;
    return true;
}
static bool same_fp32(double a, double b) { return std::fabs(a - b) <= std::ldexp(std::fabs(a), -22); }

static void test_bf16_ops() {
    {   // encoder
        int B = 2, T = 5, C = 7, V = 11;
        auto wte = randn_bf(V * C), wpe = randn_bf(T * C), d = randn_bf(B * T * C), dte = randn_bf(V * C), dpe = randn_bf(T * C);
        std::vector<int> tok(B * T);
        for (auto& t : tok) t = (int)rng.below(V);
        tok[3] = tok[0];
        avec<float> out(B * T * C);
        auto bwte = as_bf16(wte), bwpe = as_bf16(wpe), bd = as_bf16(d), bdte = as_bf16(dte), bdpe = as_bf16(dpe);
        avec<bf16> bout(out.size());
        encoder_forward(ctx, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
        encoder_forward(ctx, bout.data(), tok.data(), bwte.data(), bwpe.data(), B, T, C);
        encoder_backward(ctx, dte.data(), dpe.data(), d.data(), tok.data(), B, T, C, (size_t)V);
        encoder_backward(ctx, bdte.data(), bdpe.data(), bd.data(), tok.data(), B, T, C, (size_t)V);
        check_rounded_once("bf16 encoder forward", out, bout);
        check_rounded_once("bf16 encoder backward dwte (accumulated)", dte, bdte);
        check_rounded_once("bf16 encoder backward dwpe (accumulated)", dpe, bdpe);
    }
    {   // layernorm
        int N = 6, C = 37;
        auto x = randn_bf(N * C), w = randn_bf(C), b = randn_bf(C), d = randn_bf(N * C);
        auto dx = randn_bf(N * C), dw = randn_bf(C), db = randn_bf(C);
        auto bx = as_bf16(x), bw = as_bf16(w), bb = as_bf16(b), bd = as_bf16(d), bdx = as_bf16(dx), bdw = as_bf16(dw), bdb = as_bf16(db);
        avec<float> out(N * C), mean(N), rstd(N), bmean(N), brstd(N);
        avec<bf16> bout(N * C);
        layernorm_forward(ctx, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        layernorm_forward(ctx, bout.data(), bmean.data(), brstd.data(), bx.data(), bw.data(), bb.data(), N, C);
        check_rounded_once("bf16 layernorm forward", out, bout);
        report(same_fp32(mean, bmean) && same_fp32(rstd, brstd), "bf16 layernorm mean/rstd are the fp32 op's");
        layernorm_backward(ctx, dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
        layernorm_backward(ctx, bdx.data(), bdw.data(), bdb.data(), bd.data(), bx.data(), bw.data(), bmean.data(), brstd.data(), N, C);
        check_rounded_once("bf16 layernorm backward dinp (accumulated)", dx, bdx);
        check_rounded_once("bf16 layernorm backward dw (accumulated)", dw, bdw);
        check_rounded_once("bf16 layernorm backward db (accumulated)", db, bdb);
    }
    {   // matmul
        int N = 9, C = 13, OC = 11;
        auto x = randn_bf(N * C), W = randn_bf(OC * C), bias = randn_bf(OC), d = randn_bf(N * OC);
        auto dW = randn_bf(OC * C), dbias = randn_bf(OC);
        auto bx = as_bf16(x), bW = as_bf16(W), bbias = as_bf16(bias), bd = as_bf16(d), bdW = as_bf16(dW), bdbias = as_bf16(dbias);
        avec<float> out(N * OC), dx(N * C);
        avec<bf16> bout(N * OC), bdx(N * C);
        matmul_forward(ctx, out.data(), x.data(), W.data(), bias.data(), N, C, OC);
        matmul_forward(ctx, bout.data(), bx.data(), bW.data(), bbias.data(), N, C, OC);
        check_rounded_once("bf16 matmul forward (+bias)", out, bout);
        matmul_backward(ctx, dx.data(), dW.data(), dbias.data(), d.data(), x.data(), W.data(), N, C, OC);
        matmul_backward(ctx, bdx.data(), bdW.data(), bdbias.data(), bd.data(), bx.data(), bW.data(), N, C, OC);
        check_rounded_once("bf16 matmul backward dinp", dx, bdx);
        check_rounded_once("bf16 matmul backward dW (accumulated)", dW, bdW);
        check_rounded_once("bf16 matmul backward dbias (accumulated)", dbias, bdbias);
    }
    for (int NKV : {3, 1}) {  // attention (NKV = 1: grouped-query, dk and dv summed over 3 heads in fp32, rounded once)
        const int B = 2, T = 7, C = 12, NH = 3;
        const size_t W = QKVLayout(C, NH, NKV).row();
        auto qkv = randn_bf(B * T * W), d = randn_bf(B * T * C);
        auto bqkv = as_bf16(qkv), bd = as_bf16(d);
        avec<float> out(B * T * C), lse(B * NH * T), blse(B * NH * T), dqkv(qkv.size());
        avec<bf16> bout(out.size()), bdqkv(qkv.size());
        const char* tag = NKV < NH ? " (grouped-query)" : "";
        attention_forward(ctx, out.data(), lse.data(), qkv.data(), B, T, C, NH, NKV);
        attention_forward(ctx, bout.data(), blse.data(), bqkv.data(), B, T, C, NH, NKV);
        check_rounded_once((std::string("bf16 attention forward") + tag).c_str(), out, bout);
        report(same_fp32(lse, blse), (std::string("bf16 attention lse is the fp32 op's") + tag).c_str());
        // the backward reads out: give both the same (bf16-exact) values
        for (size_t i = 0; i < out.size(); i++) out[i] = to_f(bout[i]);
        attention_backward(ctx, dqkv.data(), d.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NKV);
        attention_backward(ctx, bdqkv.data(), bd.data(), bqkv.data(), bout.data(), blse.data(), B, T, C, NH, NKV);
        check_rounded_once((std::string("bf16 attention backward dqkv") + tag).c_str(), dqkv, bdqkv);
    }
    {   // gelu, residual, add_inplace
        size_t n = 1000;
        auto x = randn_bf(n, 2.0f), d = randn_bf(n), a = randn_bf(n);
        auto bx = as_bf16(x), bd = as_bf16(d), ba = as_bf16(a);
        avec<float> y(n), dx(n), r(n);
        avec<bf16> by(n), bdx(n), br(n);
        gelu_forward(ctx, y.data(), x.data(), n); gelu_forward(ctx, by.data(), bx.data(), n);
        gelu_backward(ctx, dx.data(), x.data(), d.data(), n); gelu_backward(ctx, bdx.data(), bx.data(), bd.data(), n);
        residual_forward(ctx, r.data(), x.data(), a.data(), n); residual_forward(ctx, br.data(), bx.data(), ba.data(), n);
        check_rounded_once("bf16 gelu forward", y, by);
        check_rounded_once("bf16 gelu backward", dx, bdx);
        check_rounded_once("bf16 residual", r, br);
        add_inplace(ctx, a.data(), d.data(), n); add_inplace(ctx, ba.data(), bd.data(), n);
        check_rounded_once("bf16 add_inplace", a, ba);
    }
    {   // the Llama ops: RMSNorm (its rstd the fp32 op's), SwiGLU, RoPE
        int N = 6, C = 13, B = 2, T = 3, hd = 4, stride = 3 * hd;
        auto x = randn_bf(N * C), w = randn_bf(C), d = randn_bf(N * C), g = randn_bf((size_t)N * 2 * C, 2.0f);
        auto bx = as_bf16(x), bw = as_bf16(w), bd = as_bf16(d), bg = as_bf16(g);
        avec<float> y(N * C), rstd(N), brstd(N), dx(N * C, 0), dw(C, 0), s(N * C), ds((size_t)N * 2 * C);
        avec<bf16> by(N * C), bdx(N * C, from_f<bf16>(0.0f)), bdw(C, from_f<bf16>(0.0f)), bs(N * C), bds((size_t)N * 2 * C);
        rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), N, C);
        rmsnorm_forward(ctx, by.data(), brstd.data(), bx.data(), bw.data(), N, C);
        check_rounded_once("bf16 rmsnorm forward", y, by);
        report(same_fp32(rstd, brstd), "bf16 rmsnorm rstd is the fp32 op's");
        rmsnorm_backward(ctx, dx.data(), dw.data(), d.data(), x.data(), w.data(), rstd.data(), N, C);
        rmsnorm_backward(ctx, bdx.data(), bdw.data(), bd.data(), bx.data(), bw.data(), rstd.data(), N, C);
        check_rounded_once("bf16 rmsnorm backward dinp", dx, bdx);
        check_rounded_once("bf16 rmsnorm backward dw", dw, bdw);
        swiglu_forward(ctx, s.data(), g.data(), N, C); swiglu_forward(ctx, bs.data(), bg.data(), N, C);
        swiglu_backward(ctx, ds.data(), g.data(), d.data(), N, C); swiglu_backward(ctx, bds.data(), bg.data(), bd.data(), N, C);
        check_rounded_once("bf16 swiglu forward", s, bs);
        check_rounded_once("bf16 swiglu backward", ds, bds);
        std::vector<int> pos = {0, 7, 100};
        const std::vector<float> table = rope_table(pos.data(), T, hd, 500000.0);
        auto q = randn_bf((size_t)B * T * stride);
        auto bq = as_bf16(q);
        rope_forward(ctx, q.data(), table.data(), B, T, stride, 2, hd); rope_forward(ctx, bq.data(), table.data(), B, T, stride, 2, hd);
        check_rounded_once("bf16 rope forward", q, bq);
        for (size_t i = 0; i < q.size(); i++) q[i] = to_f(bq[i]);  // (the same bf16 input for the backward)
        rope_backward(ctx, q.data(), table.data(), B, T, stride, 2, hd); rope_backward(ctx, bq.data(), table.data(), B, T, stride, 2, hd);
        check_rounded_once("bf16 rope backward", q, bq);
    }
    {   // classifier: the losses are the fp32 op's bit for bit, dlogits rounded once
        int N = 5, V = 29, Vp = 32;
        auto logits = randn_bf(N * Vp, 3.0f);
        auto blogits = as_bf16(logits);
        std::vector<int> tgt(N);
        for (auto& t : tgt) t = (int)rng.below(V);
        avec<float> loss(N), bloss(N);
        fused_classifier(ctx, logits.data(), loss.data(), tgt.data(), N, V, Vp, 0.1f);
        fused_classifier(ctx, blogits.data(), bloss.data(), tgt.data(), N, V, Vp, 0.1f);
        report(same_fp32(loss, bloss), "bf16 classifier losses are the fp32 op's");
        check_rounded_once("bf16 classifier dlogits", logits, blogits);
    }
    {   // global norm and AdamW: fp32 master identical, the bf16 copy is the rounded master
        size_t n = 5000;
        auto g = randn_bf(n), p = randn(n), m = randn(n, 0.1f), v = randn(n, 0.1f);
        for (auto& x : v) x = x * x;
        auto bg = as_bf16(g);
        report(same_fp32(global_norm_squared(ctx, g.data(), n), global_norm_squared(ctx, bg.data(), n)), "bf16 global norm is the fp32 op's");
        avec<float> p2 = p, m2 = m, v2 = v;
        avec<bf16> copy(n);
        adamw_update(ctx, p.data(), g.data(), m.data(), v.data(), nullptr, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.7f);
        adamw_update(ctx, p2.data(), bg.data(), m2.data(), v2.data(), copy.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.7f);
        bool ok = same_fp32(p, p2) && same_fp32(m, m2) && same_fp32(v, v2);
        for (size_t i = 0; i < n; i++) ok &= copy[i].bits == fp32_to_bf16(p2[i]);
        report(ok, "bf16 adamw: fp32 master/m/v are the fp32 op's, working copy = round(master) exactly");
    }
}

// The whole model in bf16 against fp32 on the same weights and batch: losses agree to 2e-2
// (the bf16 training bound of the CUDA issue: ~L·a few roundings of 2^-9 each), and the
// gradient points the same way (cosine > 0.99) and has the same size (within 5%).
// FP8 (llmc/fp8.cuh). The formats from their definition, written here apart from fp8_decode:
// value = (−1)^s · 2^(e − bias) · (1 + m/2^M), subnormal (e = 0) 2^(1 − bias) · m/2^M; E4M3's
// S.1111.111 is NaN, E5M2's exponent 31 is ∞ (m = 0) or NaN.
static double fp8_definition(int c, Fp8Format f) {
    const int M = f == Fp8Format::E4M3 ? 3 : 2, EB = f == Fp8Format::E4M3 ? 4 : 5, bias = f == Fp8Format::E4M3 ? 7 : 15;
    const int m = c & ((1 << M) - 1), e = (c >> M) & ((1 << EB) - 1);
    const double sign = (c & 0x80) ? -1 : 1;
    if (f == Fp8Format::E4M3 && e == 15 && m == 7) return NAN;
    if (f == Fp8Format::E5M2 && e == 31) return m ? NAN : sign * INFINITY;
    return e ? sign * std::ldexp(1.0 + m / (double)(1 << M), e - bias) : sign * std::ldexp(m / (double)(1 << M), 1 - bias);
}
// The code nearest x by brute force over every finite code, ties to the even code (its last
// mantissa bit 0); past the largest, the largest (saturation).
static int fp8_nearest(double x, Fp8Format f) {
    const int sb = std::signbit(x) ? 0x80 : 0;
    if (std::fabs(x) >= fp8_largest(f)) return sb | fp8_largest_code(f);
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 128; c++) {  // the codes of x's sign
        const double v = fp8_definition(sb | c, f), d = std::fabs(v - x);
        if (std::isfinite(v) && (d < bd || (d == bd && (c & 1) == 0))) { bd = d; best = sb | c; }
    }
    return best;
}
// |fp8 product − exact product| ≤ bound, for the products of matmul_forward/backward with
// ctx.fp8: each operand element, scaled by its power of two s and rounded to its format, is off
// by at most u·|x| (u = 2^-(M+1): 2^-4 for E4M3, 2^-3 for E5M2) or, below the smallest normal,
// by half the smallest subnormal, a = 2^(emin − M − 1), over s. So a product term x·w is off by
// at most (ux + uw + ux·uw)·|x||w| + ax·|w| + aw·|x| + ax·aw, the fp32 sums add ≤ K·2^-24 of Σ|x||w|,
// and the bf16 output is rounded once (2^-8 of it). The exact product is in double on the same
// bf16 inputs. A wrong scale, format, transpose or operand fails it by orders of magnitude.
struct Fp8Err { double u, a; };
static Fp8Err fp8_err(Fp8Format f, float s) {
    const int M = fp8_mantissa_bits(f), emin = 1 - fp8_bias(f);
    return {std::ldexp(1.0, -(M + 1)), std::ldexp(1.0, emin - M - 1) / s};
}
static float fp8_test_scale(const avec<float>& x, Fp8Format f) {
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    return fp8_scale_for(amax, f);
}
// D[r, c] (+ D0) vs Σ_k X[r, k]·Y[c, k] (+ D0), X and Y quantized in formats fx, fy
static double fp8_worst(const avec<bf16>& got, const avec<float>& X, Fp8Format fx, const avec<float>& Y, Fp8Format fy,
                        const avec<float>* D0, int R, int K, int Cc) {
    const Fp8Err ex = fp8_err(fx, fp8_test_scale(X, fx)), ey = fp8_err(fy, fp8_test_scale(Y, fy));
    double worst = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            double exact = D0 ? (*D0)[(size_t)r * Cc + c] : 0, bound = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double x = X[(size_t)r * K + k], y = Y[(size_t)c * K + k];
                exact += x * y;
                mag += std::fabs(x * y);
                bound += (ex.u + ey.u + ex.u * ey.u) * std::fabs(x * y) + ex.a * std::fabs(y) + ey.a * std::fabs(x) + ex.a * ey.a;
            }
            const double g = to_f(got[(size_t)r * Cc + c]);
            bound += K * std::ldexp(mag, -24) + std::ldexp(std::fabs(g), -8);
            worst = std::max(worst, std::fabs(g - exact) / bound);
        }
    return worst;
}
static avec<float> transposed(const avec<float>& x, int R, int Cc) {
    avec<float> t(x.size());
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) t[(size_t)c * R + r] = x[(size_t)r * Cc + c];
    return t;
}

static void test_fp8() {
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        const char* nm = fp8_name(f);
        char name[160];
        // every code: decode is the definition; encode(decode(c)) = c (∞ saturates to the largest)
        int bad_decode = 0, bad_round_trip = 0;
        for (int c = 0; c < 256; c++) {
            const double want = fp8_definition(c, f);
            const float got = fp8_decode((uint8_t)c, f);
            if (std::isnan(want) ? !std::isnan(got) : (double)got != want || std::signbit(got) != std::signbit(want)) bad_decode++;
            if (std::isnan(want)) { if ((fp8_encode(got, f) & 0x7f) != 0x7f) bad_round_trip++; continue; }
            const int back = fp8_encode(got, f), expect = std::isinf(want) ? (c & 0x80) | fp8_largest_code(f) : c;
            if (back != expect) bad_round_trip++;
        }
        snprintf(name, sizeof name, "fp8 %s: fp8_decode of all 256 codes is the format's definition", nm);
        report(bad_decode == 0, name, "%g codes differ", bad_decode);
        snprintf(name, sizeof name, "fp8 %s: fp8_encode(fp8_decode(c)) = c for every code (NaN stays NaN, infinity saturates)", nm);
        report(bad_round_trip == 0, name, "%g codes differ", bad_round_trip);
        // between two neighbours: the midpoint goes to the even code, a hair off it to the nearer;
        // beyond the largest, the largest; half the smallest subnormal to zero
        int bad_ties = 0, ties = 0;
        for (int c = 0; c + 1 < 256; c++) {
            const double lo = fp8_definition(c, f), hi = fp8_definition(c + 1, f);
            if (!std::isfinite(lo) || !std::isfinite(hi) || (c & 0x80) || hi <= lo) continue;
            for (int sign : {1, -1}) {
                const float mid = (float)(sign * (lo + hi) / 2);  // (exact: fp8 values have ≤ 4 significant bits)
                const int sb = sign < 0 ? 0x80 : 0, even = (c & 1) ? c + 1 : c;
                ties++;
                if (fp8_encode(mid, f) != (sb | even)) bad_ties++;
                if (fp8_encode(std::nextafter(mid, 0.0f), f) != (sb | c)) bad_ties++;
                if (fp8_encode(std::nextafter(mid, sign * INFINITY), f) != (sb | (c + 1))) bad_ties++;
            }
        }
        const float largest = fp8_largest(f), tiny = (float)fp8_definition(1, f);
        const bool edges = fp8_encode(largest * 1.1f, f) == fp8_largest_code(f) && fp8_encode(-1e30f, f) == (0x80 | fp8_largest_code(f)) &&
                           fp8_encode(INFINITY, f) == fp8_largest_code(f) && (fp8_encode(NAN, f) & 0x7f) == 0x7f &&
                           fp8_encode(tiny / 2, f) == 0 && fp8_encode(std::nextafter(tiny / 2, 1.0f), f) == 1 &&
                           fp8_encode(-tiny / 4, f) == 0x80 && fp8_encode(1e-40f, f) == 0;
        snprintf(name, sizeof name, "fp8 %s: ties round to even at all %d midpoints, a hair off them to the nearer; saturation, "
                 "subnormal and zero edges", nm, ties);
        report(bad_ties == 0 && edges, name, "%g wrong", bad_ties);
        // random values over the whole range (the subnormals included) against the brute-force nearest code
        int bad_random = 0;
        for (int i = 0; i < 20000; i++) {
            const float x = (float)((rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(1.0 + rng.uniform(), (int)rng.below(40) - (f == Fp8Format::E4M3 ? 14 : 20)));
            if (fp8_encode(x, f) != fp8_nearest(x, f)) bad_random++;
        }
        snprintf(name, sizeof name, "fp8 %s: fp8_encode is the nearest code (ties to even) for 20000 random values", nm);
        report(bad_random == 0, name, "%g differ", bad_random);
        // the scale: a power of two that puts amax in the top binade
        int bad_scale = 0;
        for (int i = 0; i < 2000; i++) {
            const float amax = (float)std::ldexp(1.0 + rng.uniform(), (int)rng.below(60) - 30);
            const float sc = fp8_scale_for(amax, f);
            int e;
            if (std::frexp(sc, &e) != 0.5f || !(amax * sc <= largest) || !(amax * sc * 2 > largest)) bad_scale++;
        }
        const bool scale_edges = fp8_scale_for(0.0f, f) == 1.0f && fp8_scale_for(INFINITY, f) == 1.0f && fp8_scale_for(NAN, f) == 1.0f &&
                                 fp8_scale_for(largest, f) == 1.0f;
        snprintf(name, sizeof name, "fp8 %s: the scale is the power of two with largest/2 < amax*s <= largest (1 for 0, inf, NaN)", nm);
        report(bad_scale == 0 && scale_edges, name, "%g wrong", bad_scale);
        // quantize (odd sizes): q = fp8(x·s), qt its transpose, the inverse scale 1/s
        const int R = 13, Cc = 37;
        avec<bf16> x = as_bf16(randn_bf(R * Cc, 3.0f));
        std::vector<uint8_t> q(R * Cc), qt(R * Cc);
        Fp8Scales sc{};
        fp8_quantize(ctx, q.data(), qt.data(), &sc, x.data(), R, Cc, f);
        float amax = 0;
        for (auto v : x) amax = std::max(amax, std::fabs(to_f(v)));
        bool qok = sc.scale == fp8_scale_for(amax, f) && sc.inv * sc.scale == 1.0f;
        float qmax = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < Cc; c++) {
                const uint8_t want = fp8_encode(to_f(x[(size_t)r * Cc + c]) * sc.scale, f);
                qok = qok && q[(size_t)r * Cc + c] == want && qt[(size_t)c * R + r] == want;
                qmax = std::max(qmax, std::fabs(fp8_decode(want, f)));
            }
        // (amax·s is in (largest/2, largest]; largest/2 is a code, so the rounded amax·s is at least it —
        // and may be it, where E5M2's binade below the top one rounds up no further)
        snprintf(name, sizeof name, "fp8 %s: quantize writes fp8(x*s) and its transpose; the largest lands in [largest/2, largest]", nm);
        report(qok && qmax >= largest / 2 && qmax <= largest, name);
        // dequantize (the fallback's operands, matmul.cuh): the code's value times 1/s, exact in
        // bf16, and within the format's rounding of x (half a quantum of x·s, over s)
        avec<bf16> xd(R * Cc);
        fp8_dequantize(ctx, xd.data(), q.data(), f, &sc, (size_t)R * Cc);
        const Fp8Err e = fp8_err(f, sc.scale);
        int bad_dq = 0;
        for (int i = 0; i < R * Cc; i++) {
            const double v = fp8_definition(q[i], f) / sc.scale, xv = to_f(x[i]);
            if ((double)to_f(xd[i]) != v || std::fabs(v - xv) > e.u * std::fabs(xv) + e.a) bad_dq++;
        }
        snprintf(name, sizeof name, "fp8 %s: dequantize gives each code's value over s in bf16, exactly, within the format's rounding of x", nm);
        report(bad_dq == 0, name, "%g wrong", bad_dq);
    }
    // the products: matmul_forward/backward with ctx.fp8 against the exact products (fp8_worst)
    Ctx c8 = ctx;
    c8.fp8 = true;
    const int N = 48, C = 32, OC = 80;
    auto x = randn_bf(N * C), W = randn_bf(OC * C, 0.2f), bias = randn_bf(OC), d = randn_bf(N * OC, 1e-3f);
    auto dW0 = randn_bf(OC * C, 1e-2f), db0 = randn_bf(OC);
    x[5] = 40.0f;  // an outlier: the rest of x lands 3+ binades lower (the subnormal bound matters)
    avec<bf16> bx = as_bf16(x), bW = as_bf16(W), bbias = as_bf16(bias), bd = as_bf16(d), out(N * OC), dx(N * C);
    avec<bf16> dW = as_bf16(dW0), dbias = as_bf16(db0), dbias_ref = as_bf16(db0), dW_ref = as_bf16(dW0), dx_ref(N * C);
    matmul_forward(c8, out.data(), bx.data(), bW.data(), bbias.data(), N, C, OC);
    avec<float> bias_rows(N * OC);  // (the bias as a D0 of every row)
    for (int n = 0; n < N; n++) for (int o = 0; o < OC; o++) bias_rows[(size_t)n * OC + o] = bias[o];
    double w = fp8_worst(out, x, Fp8Format::E4M3, W, Fp8Format::E4M3, &bias_rows, N, C, OC);
    report(w <= 1.0, "fp8 matmul forward (+bias): x and W in e4m3, within the rounding bound of the exact product", "worst error / bound = %.3f", w);
    {   // an inference's rows (45: not a multiple of 16) are padded with zero rows: the same codes (x's
        // outlier, its amax, is in row 0), the same sums, the same first 45 rows bit for bit
        avec<bf16> out45(45 * OC);
        matmul_forward(c8, out45.data(), bx.data(), bW.data(), bbias.data(), 45, C, OC);
        report(memcmp(out45.data(), out.data(), out45.size() * sizeof(bf16)) == 0,
               "fp8 matmul forward of 45 rows (padded to 48 inside): the 48-row product's first 45 rows, bit for bit");
    }
    matmul_backward(c8, dx.data(), dW.data(), dbias.data(), bd.data(), bx.data(), bW.data(), N, C, OC);
    const double w_dinp = w = fp8_worst(dx, d, Fp8Format::E5M2, transposed(W, OC, C), Fp8Format::E4M3, nullptr, N, OC, C);
    report(w <= 1.0, "fp8 matmul backward dinp: dout in e5m2, W in e4m3, within the rounding bound", "worst error / bound = %.3f", w);
    w = fp8_worst(dW, transposed(d, N, OC), Fp8Format::E5M2, transposed(x, N, C), Fp8Format::E4M3, &dW0, OC, N, C);
    report(w <= 1.0, "fp8 matmul backward dW (accumulated): dout in e5m2, x in e4m3, within the rounding bound", "worst error / bound = %.3f", w);
    matmul_backward(ctx, dx_ref.data(), dW_ref.data(), dbias_ref.data(), bd.data(), bx.data(), bW.data(), N, C, OC);
    bool same_db = true;
    for (int o = 0; o < OC; o++) same_db = same_db && dbias[o].bits == dbias_ref[o].bits;
    report(same_db, "fp8 matmul backward dbias: the bf16 sums of dout, bit for bit the bf16 backward's");
    // and the bound is not loose: the bf16 product's error is far inside it, FP8's near it
    double wb = fp8_worst(dx_ref, d, Fp8Format::E5M2, transposed(W, OC, C), Fp8Format::E4M3, nullptr, N, OC, C);
    report(w_dinp > 0.02 && wb < w_dinp / 4, "fp8: the bound is tight enough to tell fp8 from bf16 (the bf16 backward's worst dinp "
           "error / bound is under a quarter of fp8's)", "bf16 %.4f, fp8 %.4f", wb, w_dinp);
}

// FP8 delayed scaling (fp8.cuh): the one-pass quantize with a given scale, the state's rules
// (the scale from the max of the last H steps' amaxes, per format), the checkpoint's form of the
// history, which scales an operand takes, and the products: a step that records, then one that
// quantizes with what it recorded, multiply bit for bit as current scaling did.
static void test_fp8_delayed() {
    const int R = 13, Cc = 37;
    avec<bf16> x = as_bf16(randn_bf(R * Cc, 3.0f));
    float amax = 0;
    for (auto v : x) amax = std::max(amax, std::fabs(to_f(v)));
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        // a scale 4x too large (as a history below this step's amax gives): x·s past largest saturates
        const float s = 4 * fp8_scale_for(amax, f);
        Fp8Scales given = fp8_scales(s);
        float record = 0.5f;
        std::vector<uint8_t> q(R * Cc), qt(R * Cc);
        fp8_quantize(ctx, q.data(), qt.data(), Fp8Target{&given, &record, true}, x.data(), R, Cc, f);
        bool ok = given.scale == s && record == amax;
        int saturated = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < Cc; c++) {
                const float v = to_f(x[(size_t)r * Cc + c]);
                const uint8_t want = fp8_encode(v * s, f);
                ok = ok && q[(size_t)r * Cc + c] == want && qt[(size_t)c * R + r] == want;
                saturated += std::fabs(v) * s > fp8_largest(f);
                if (std::fabs(v) * s > fp8_largest(f)) ok = ok && (want & 0x7f) == fp8_largest_code(f);
            }
        char name[200];
        snprintf(name, sizeof name, "fp8 %s delayed: quantize with a given scale writes fp8(x*s) and its transpose, saturating past "
                 "it (%d of %d here), leaves the scale and maxes the amax into the record", fp8_name(f), saturated, R * Cc);
        report(ok && saturated > 0, name);
        record = 2 * amax;  // a record above this tensor's amax stays; current scaling with a record still scales from x
        Fp8Scales own{};
        fp8_quantize(ctx, q.data(), nullptr, Fp8Target{&own, &record, false}, x.data(), R, Cc, f);
        snprintf(name, sizeof name, "fp8 %s: current scaling with a record scales from the tensor's own amax; the record keeps its max",
                 fp8_name(f));
        report(own.scale == fp8_scale_for(amax, f) && record == 2 * amax, name);
    }
    // what a quantization reads (Fp8Act) and its column sums: the same codes and amax as the gelu
    // op's output quantized plainly (the same functions, each value rounded to bf16 once), and the
    // sums added to dbias as bias_backward_cpu adds them (from a zero dbias the same bits: its rows
    // in the same order)
    {
        const avec<bf16> pre = as_bf16(randn_bf(R * Cc, 2.0f));
        for (Fp8Act act : {Fp8Act::None, Fp8Act::Gelu, Fp8Act::GeluBackward}) {
            std::vector<bf16> made(R * Cc);
            if (act == Fp8Act::Gelu) gelu_forward_cpu(made.data(), x.data(), made.size());
            else if (act == Fp8Act::GeluBackward) gelu_backward_cpu(made.data(), pre.data(), x.data(), made.size());
            else made.assign(x.begin(), x.end());
            std::vector<float> want_sums(Cc, 0.0f), made_f(made.size());
            for (size_t i = 0; i < made.size(); i++) made_f[i] = to_f(made[i]);
            bias_backward_cpu(want_sums.data(), made_f.data(), R, Cc);
            std::vector<uint8_t> q(R * Cc), qt(R * Cc), wq(R * Cc), wqt(R * Cc);
            std::vector<bf16> sums(Cc, from_f<bf16>(0.0f));
            Fp8Scales sc{}, wsc{};
            float rec = 0, wrec = 0;
            fp8_quantize(ctx, q.data(), qt.data(), Fp8Target{&sc, &rec, false}, x.data(), R, Cc, Fp8Format::E4M3, sums.data(), act, pre.data());
            fp8_quantize(ctx, wq.data(), wqt.data(), Fp8Target{&wsc, &wrec, false}, made.data(), R, Cc, Fp8Format::E4M3);
            bool ok = q == wq && qt == wqt && sc.scale == wsc.scale && rec == wrec;
            for (int c = 0; c < Cc; c++) ok = ok && to_f(sums[c]) == to_f(from_f<bf16>(want_sums[c]));
            char name[200];
            snprintf(name, sizeof name, "fp8 quantize of %s with column sums: the codes, scale and amax of the op's output quantized, "
                     "the sums bias_backward_cpu's", act == Fp8Act::None ? "x" : act == Fp8Act::Gelu ? "gelu(x)" : "gelu's backward");
            report(ok, name);
        }
    }
    // the state's rules: 2 products (6 tensors), H = 3; tensor i's amax at step k is a spike (1000)
    // at step 1, else (i + 1)·(k + 1)
    Fp8Delayed st;
    fp8_delayed_init(ctx, &st, 6, 3);
    auto amax_at = [](int i, int k) { return k == 1 ? 1000.0f : (float)((i + 1) * (k + 1)); };
    bool rules = true;
    std::vector<int> saturated;
    for (int k = 0; k < 6; k++) {
        std::vector<float> a(6);
        for (int i = 0; i < 6; i++) a[i] = amax_at(i, k);
        for (int i = 0; i < 6; i++) st.amax.data()[i] = a[i];  // (as the step's quantizations would have left them)
        int expect = 0;  // the tensors whose amax passes what the step's scale holds (none in the first step)
        for (int i = 0; i < 6 && k > 0; i++)
            expect += a[i] * st.scales.data()[i].scale > fp8_largest(i % 3 == FP8_DOUT ? Fp8Format::E5M2 : Fp8Format::E4M3);
        saturated.push_back(fp8_delayed_push(ctx, &st, a));
        rules = rules && saturated.back() == expect;
        for (int i = 0; i < 6; i++) {
            float m = 0;
            for (int j = std::max(0, k - 2); j <= k; j++) m = std::max(m, amax_at(i, j));  // the last 3 steps
            const Fp8Format f = i % 3 == FP8_DOUT ? Fp8Format::E5M2 : Fp8Format::E4M3;
            rules = rules && st.scales.data()[i].scale == fp8_scale_for(m, f) && st.scales.data()[i].inv * st.scales.data()[i].scale == 1 &&
                    st.amax.data()[i] == 0;
        }
    }
    report(rules && st.steps == 6 && st.scales.data()[0].scale != fp8_scale_for(1000, Fp8Format::E4M3) && saturated[0] == 0 &&
           saturated[1] == 6 && saturated[2] == 0,
           "fp8 delayed: each step's scale comes from the max of the last H = 3 amaxes (a spike leaves the window after 3 steps), "
           "e4m3 for x and W, e5m2 for dout; the record restarts from 0; the step counts the tensors that passed their scale "
           "(all 6 at the spike, none the step after)");
    // the checkpoint's form: the last min(steps, H) oldest first; restored into H = 3 the same
    // scales and, pushed on, the same next ones; into H = 2 the newest 2; into H = 5 all 3
    const std::vector<float> saved = fp8_delayed_saved(st);
    bool form = saved.size() == 18;
    for (int i = 0; i < 6 && form; i++)
        for (int j = 0; j < 3; j++) form = form && saved[(size_t)i * 3 + j] == amax_at(i, 3 + j);
    Fp8Delayed same, shorter, longer;
    fp8_delayed_init(ctx, &same, 6, 3); fp8_delayed_init(ctx, &shorter, 6, 2); fp8_delayed_init(ctx, &longer, 6, 5);
    for (Fp8Delayed* d : {&same, &shorter, &longer}) fp8_delayed_restore(ctx, d, st.steps, saved);
    bool back = same.steps == 6 && shorter.steps == 6 && longer.steps == 6;
    for (int i = 0; i < 6; i++) {
        const Fp8Format f = fp8_operand_format(i);
        back = back && same.scales.data()[i].scale == st.scales.data()[i].scale && longer.scales.data()[i].scale == st.scales.data()[i].scale &&
               shorter.scales.data()[i].scale == fp8_scale_for(std::max(amax_at(i, 4), amax_at(i, 5)), f);
    }
    std::vector<float> next(6, 0.25f);
    fp8_delayed_push(ctx, &st, next);
    fp8_delayed_push(ctx, &same, next);
    for (int i = 0; i < 6; i++) back = back && same.scales.data()[i].scale == st.scales.data()[i].scale;
    report(form && back, "fp8 delayed: the history a checkpoint keeps (oldest first) restores to the same scales and the same next "
           "ones; a shorter history keeps the newest amaxes, a longer one all");
    // which scales an operand takes: none without a state; in the first step the op's own (from
    // the tensor), recording; after it the state's, at product·3 + operand; an evaluation records nothing
    Fp8Delayed fresh;
    fp8_delayed_init(ctx, &fresh, 6, 3);
    Fp8Scales scratch{};
    Ctx c = ctx;
    c.fp8 = true;
    Fp8Target t = fp8_target(c, FP8_W, &scratch);
    bool targets = t.scales == &scratch && !t.amax && !t.given;
    c.fp8_delayed = &fresh; c.fp8_product = 1; fresh.record = true;
    t = fp8_target(c, FP8_DOUT, &scratch);
    targets = targets && t.scales == &scratch && t.amax == fresh.amax.data() + 5 && !t.given;
    c.fp8_delayed = &st; st.record = false;
    t = fp8_target(c, FP8_X, &scratch);
    targets = targets && t.scales == st.scales.data() + 3 && !t.amax && t.given;
    report(targets, "fp8 delayed: an operand's scales are the op's own (current scaling, and delayed scaling's first step, which "
           "records) or the state's at product*3 + operand; an evaluation records nothing");
    // the products: a first step records the amaxes (scaling as current scaling does), the next
    // quantizes with the scales they give — the same scales for the same tensors, so the same
    // forward and backward bit for bit — and records the same amaxes again
    const int N = 48, C = 32, OC = 80;
    avec<bf16> bx = as_bf16(randn_bf(N * C)), bW = as_bf16(randn_bf(OC * C, 0.2f)), bb = as_bf16(randn_bf(OC)),
               bd = as_bf16(randn_bf(N * OC, 1e-3f));
    struct Out { avec<bf16> y, dx, dW; std::vector<float> amax; };
    auto run = [&](const Ctx& cc, Fp8Delayed* d) {
        Out o{avec<bf16>(N * OC), avec<bf16>(N * C), avec<bf16>(OC * C, from_f<bf16>(0.0f)), {}};
        if (d) d->record = true;
        matmul_forward(cc, o.y.data(), bx.data(), bW.data(), bb.data(), N, C, OC);
        matmul_backward(cc, o.dx.data(), o.dW.data(), (bf16*)nullptr, bd.data(), bx.data(), bW.data(), N, C, OC);
        if (d) { o.amax = fp8_delayed_amaxes(cc, *d); d->record = false; }
        return o;
    };
    Ctx cur = ctx, del = ctx;
    cur.fp8 = del.fp8 = true;
    Fp8Delayed one;
    fp8_delayed_init(ctx, &one, 3, 1);
    del.fp8_delayed = &one;
    const Out ref = run(cur, nullptr), first = run(del, &one);
    fp8_delayed_push(ctx, &one, first.amax);
    const Out second = run(del, &one);
    auto same_bits = [](const avec<bf16>& a, const avec<bf16>& b) { return memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0; };
    float ax = 0, aw = 0, ad = 0;
    for (auto v : bx) ax = std::max(ax, std::fabs(to_f(v)));
    for (auto v : bW) aw = std::max(aw, std::fabs(to_f(v)));
    for (auto v : bd) ad = std::max(ad, std::fabs(to_f(v)));
    const bool recorded = first.amax == std::vector<float>{ax, aw, ad} && second.amax == first.amax;
    report(recorded && same_bits(ref.y, first.y) && same_bits(ref.y, second.y) && same_bits(ref.dx, second.dx) && same_bits(ref.dW, second.dW),
           "fp8 delayed: a step records each operand's amax (x, W, dout); the next, quantizing with the scales they give, multiplies "
           "bit for bit as current scaling (forward, dinp, dW)");
}

// The whole model in a 16-bit type T against fp32 on the same (T-exact) weights and batch, with
// the loss gradient dloss·S (S: a loss scale) and T's gradients divided by S: the loss, the
// gradient's cosine with fp32's and its norm ratio, and the fraction of fp32's nonzero gradients
// that came out 0 in T (flushed: below its smallest subnormal).
struct HalfModelResult { float l32, l16; double cosine, ratio, flushed; };
template <class floatX> static HalfModelResult half_model_vs_fp32(float dloss, float S) {
    GPTConfig c;
    c.max_seq_len = 16; c.vocab_size = 50; c.padded_vocab_size = 64; c.num_layers = 2; c.num_heads = 2; c.channels = 32;
    GPT<float> g; GPT<floatX> gb;
    gpt_build(&g, c); gpt_build(&gb, c);
    const ParamLayout& p = g.layout;
    avec<float> params(p.total), grads(p.total, 0.0f);
    for (int u = 0; u < gpt_num_units(c); u++) gpt_init_unit(c, p, u, 7, params.data() + unit_span(c, p, u).offset);
    for (auto& x : params) x = to_f(from_f<floatX>(x));  // the same weights in both
    avec<floatX> bparams(p.total), bgrads(p.total, from_f<floatX>(0.0f));
    for (size_t i = 0; i < p.total; i++) bparams[i] = from_f<floatX>(params[i]);
    gpt_point_units(&g, params.data(), grads.data());
    gpt_point_units(&gb, bparams.data(), bgrads.data());
    int B = 2, T = 16;
    Rng r(99);  // (the same batch for every call)
    std::vector<int> x(B * T), y(B * T);
    for (int i = 0; i < B * T; i++) { x[i] = (int)r.below(50); y[i] = (int)r.below(50); }
    gpt_forward(ctx, &g, x.data(), y.data(), B, T, dloss);
    gpt_forward(ctx, &gb, x.data(), y.data(), B, T, dloss * S);
    HalfModelResult res;
    res.l32 = gpt_mean_loss(&g); res.l16 = gpt_mean_loss(&gb);
    gpt_backward(ctx, &g, B, T);
    gpt_backward(ctx, &gb, B, T);
    double dot = 0, n32 = 0, n16 = 0, nonzero = 0, flushed = 0;
    for (size_t i = 0; i < p.total; i++) {
        double a = grads[i], b = to_f(bgrads[i]) / S;
        dot += a * b; n32 += a * a; n16 += b * b;
        nonzero += a != 0; flushed += a != 0 && b == 0;
    }
    res.cosine = dot / std::sqrt(n32 * n16); res.ratio = std::sqrt(n16 / n32); res.flushed = flushed / nonzero;
    return res;
}

static void test_bf16_model() {
    const HalfModelResult r = half_model_vs_fp32<bf16>(1.0f / 32, 1.0f);
    report(std::fabs(r.l32 - r.l16) <= 2e-2, "bf16 model loss within 2e-2 of fp32", "fp32 %.6f, bf16 %.6f", r.l32, r.l16);
    report(r.cosine > 0.99 && std::fabs(r.ratio - 1) < 0.05, "bf16 model gradient matches fp32 (cosine > 0.99, norm within 5%)",
           "cosine %.5f, norm ratio %.4f", r.cosine, r.ratio);
}

// fp16 and why it needs loss scaling (loss_scale.h). The model's gradient with the loss gradient
// of a large batch, 1/(B·T·2^16) (as a 2M-token batch gives each position): unscaled (S = 1) in
// fp16 most of it falls below 2^-24 and flushes to 0, and the rest loses bits as subnormals; at
// S = 2^16 the same gradient, divided by S in fp32, matches fp32's as bf16's does (bf16 needs no
// scaling: it has fp32's exponent range). "Flushed": fp32's nonzero gradients that are 0 in 16
// bits. A few are 0 by cancellation, not range — a 16-bit sum whose terms cancel to below half an
// ulp of them (bf16 does it too: ~1e-4 of them here) — so the bound is 1%, against the ~86% the
// range flushes unscaled.
static void test_fp16_model() {
    HalfModelResult r = half_model_vs_fp32<fp16>(1.0f / 32, 1.0f);
    report(std::fabs(r.l32 - r.l16) <= 2e-2, "fp16 model loss within 2e-2 of fp32", "fp32 %.6f, fp16 %.6f", r.l32, r.l16);
    const float tiny = 1.0f / (32 * 65536.0f);
    const HalfModelResult unscaled = half_model_vs_fp32<fp16>(tiny, 1.0f), scaled = half_model_vs_fp32<fp16>(tiny, 65536.0f);
    const HalfModelResult bf = half_model_vs_fp32<bf16>(tiny, 1.0f);
    report(scaled.cosine > 0.999 && std::fabs(scaled.ratio - 1) < 0.01 && scaled.flushed < 0.01,
           "fp16 model gradient at a large batch's loss gradient, loss scale 2^16: matches fp32 (cosine > 0.999, norm "
           "within 1%, under 1% flushed to 0)", "cosine %.6f, flushed %.2g", scaled.cosine, scaled.flushed);
    report(unscaled.flushed > 0.5 && unscaled.cosine < 0.9,
           "fp16 model gradient at the same loss gradient unscaled: most of it flushed to 0, the rest off (what loss scaling prevents)",
           "flushed %.2f, cosine %.4f", unscaled.flushed, unscaled.cosine);
    report(bf.flushed < 0.01 && bf.cosine > 0.99, "bf16 model gradient at the same loss gradient unscaled: matches fp32, under 1% "
           "flushed (fp32's exponent range)", "cosine %.5f, flushed %.2g", bf.cosine, bf.flushed);
}

// fp16 <-> fp32 (common.h) against the format's definition: all 65536 codes decode to
// (−1)^s·2^(e−15)·(1 + m/1024) (normal), (−1)^s·2^-14·m/1024 (subnormal), ±inf, NaN; every
// finite code encodes back to itself; at each midpoint between neighbours a tie goes to the even
// code and a hair above it to the upper one; from 65520 up (the midpoint past 65504) it is inf;
// and random values (normal, subnormal, across the range) encode to the nearest code found by
// brute force over the sorted codes.
static void test_fp16() {
    bool dec_ok = true, round_trip = true;
    std::vector<std::pair<double, uint16_t>> finite;  // (value, code) of the non-negative finite codes
    for (uint32_t h = 0; h < 65536; h++) {
        const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        const double mag = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
        const float got = fp16_to_fp32((uint16_t)h);
        if (e == 31) { dec_ok &= m ? std::isnan(got) : got == (s ? -INFINITY : INFINITY); continue; }
        dec_ok &= (double)got == (s ? -mag : mag) && std::signbit(got) == (bool)s;
        round_trip &= fp32_to_fp16(got) == (uint16_t)h;
        if (!s) finite.push_back({mag, (uint16_t)h});
    }
    report(dec_ok, "fp16: all 65536 codes decode as the format defines (normal, subnormal, ±0, ±inf, NaN)");
    report(round_trip, "fp16: every finite code (±0 and subnormals included) encodes back to itself");
    bool ties = true;
    for (size_t i = 0; i + 1 < finite.size(); i++) {
        const double mid = (finite[i].first + finite[i + 1].first) / 2;  // exact in fp32: one more bit
        const uint16_t even = (finite[i].second & 1) ? finite[i + 1].second : finite[i].second;
        ties &= fp32_to_fp16((float)mid) == even && fp32_to_fp16(-(float)mid) == (even | 0x8000);
        ties &= fp32_to_fp16(std::nextafter((float)mid, INFINITY)) == finite[i + 1].second;
        ties &= fp32_to_fp16(std::nextafter((float)mid, 0.0f)) == finite[i].second;
    }
    report(ties, "fp16: at every midpoint between neighbouring codes a tie rounds to even, and the fp32 values either side to the nearer");
    const bool edges = fp32_to_fp16(65504.0f) == 0x7bff && fp32_to_fp16(65519.99f) == 0x7bff && fp32_to_fp16(65520.0f) == 0x7c00 &&
                       fp32_to_fp16(1e30f) == 0x7c00 && fp32_to_fp16(-INFINITY) == 0xfc00 && std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))) &&
                       fp32_to_fp16(0x1p-25f) == 0 && fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)) == 1 && fp32_to_fp16(0x1p-26f) == 0 &&
                       fp32_to_fp16(-0.0f) == 0x8000 && fp32_to_fp16(std::nextafter(0x1p-14f, 0.0f)) == 0x0400;
    report(edges, "fp16: 65504 is the largest finite value, 65520 and up are inf, 2^-25 ties to 0, the largest subnormal's neighbour rounds up to 2^-14, -0 keeps its sign");
    bool nearest = true;
    for (int i = 0; i < 20000; i++) {
        const float x = (float)(rng.normal() * std::ldexp(1.0, (int)rng.below(44) - 28));  // 2^-28 … 2^15
        const double a = std::fabs((double)x);
        auto it = std::lower_bound(finite.begin(), finite.end(), std::make_pair(a, (uint16_t)0));
        uint16_t want;
        if (it == finite.end()) want = a >= 65520.0 ? 0x7c00 : 0x7bff;
        else if (it == finite.begin()) want = it->second;
        else {
            const auto lo = *(it - 1), hi = *it;
            const double dl = a - lo.first, dh = hi.first - a;
            want = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) ? hi.second : lo.second);
        }
        if (std::signbit(x)) want |= 0x8000;
        nearest &= fp32_to_fp16(x) == want;
    }
    report(nearest, "fp16: 20000 random values from 2^-28 to 2^15 encode to the nearest code (brute force, ties to even)");
}

// Dynamic loss scaling's rules (loss_scale.h): an overflow skips and halves S, N clean steps in
// a row double it (an overflow restarts the count), off means S = 1 and nothing skipped, and an
// overflow at S = 1 is the stop.
static void test_loss_scale() {
    LossScale ls;
    ls.on = true; ls.scale = 1024; ls.every = 3;
    bool ok = loss_scale_factor(ls) == 1024.0f;
    LossScaleStep r = loss_scale_step(&ls, INFINITY);
    ok &= r.overflow && r.used == 1024 && ls.scale == 512 && !loss_scale_floor_hit(r);
    r = loss_scale_step(&ls, NAN);
    ok &= r.overflow && r.used == 512 && ls.scale == 256;
    r = loss_scale_step(&ls, 3.0); ok &= !r.overflow && r.used == 256 && ls.scale == 256;
    r = loss_scale_step(&ls, 3.0); ok &= !r.overflow && ls.scale == 256;
    r = loss_scale_step(&ls, 3.0); ok &= !r.overflow && r.used == 256 && ls.scale == 512;  // the third clean step
    r = loss_scale_step(&ls, 3.0); r = loss_scale_step(&ls, 3.0);
    r = loss_scale_step(&ls, INFINITY); ok &= r.overflow && ls.scale == 256 && ls.clean == 0;  // two clean, then an overflow
    r = loss_scale_step(&ls, 3.0); r = loss_scale_step(&ls, 3.0); ok &= ls.scale == 256;    // counting again from 0
    report(ok, "loss scale: an overflow (inf or NaN norm) skips and halves S; 3 clean steps in a row double it; an overflow restarts the count");
    LossScale off;
    off.scale = 1024;
    r = loss_scale_step(&off, INFINITY);
    report(!r.overflow && r.used == 1 && loss_scale_factor(off) == 1.0f, "loss scale: off (not fp16): factor 1, nothing skipped");
    LossScale one;
    one.on = true; one.scale = 1;
    r = loss_scale_step(&one, INFINITY);
    report(loss_scale_floor_hit(r), "loss scale: an overflow at S = 1 is reported as the end (scaling cannot help)");
}

static void test_data_order() {
    std::vector<int> toks(2000);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (int)(i % 1000);
    shard_write("/tmp/llmcu_order_test.bin", toks, false);
    int T = 8;
    DataLoader one, r0, r1;
    dataloader_init(&one, "test", "/tmp/llmcu_order_test.bin", 4, T, 1, 0, 1000, false, 0);
    dataloader_init(&r0, "test", "/tmp/llmcu_order_test.bin", 2, T, 2, 0, 1000, false, 0);
    dataloader_init(&r1, "test", "/tmp/llmcu_order_test.bin", 2, T, 2, 1, 1000, false, 0);
    bool ok = true;
    std::vector<int> x4(4 * T), y4(4 * T), x2(2 * T), y2(2 * T);
    for (int k = 0; k < 10; k++) {
        dataloader_next(&one, x4.data(), y4.data());
        dataloader_next(&r0, x2.data(), y2.data());
        for (int i = 0; i < 2 * T; i++) ok &= x2[i] == x4[i] && y2[i] == y4[i];
        dataloader_next(&r1, x2.data(), y2.data());
        for (int i = 0; i < 2 * T; i++) ok &= x2[i] == x4[2 * T + i] && y2[i] == y4[2 * T + i];
        ok &= x4[0] == (k * 4 * T) % 1000 && y4[0] == x4[1];
    }
    report(ok, "data order: dp=2 x B=2 == dp=1 x B=4, targets shifted by one");
    // shuffle: a permutation of the slots per epoch, the same on every rank
    DataLoader s;
    dataloader_init(&s, "test", "/tmp/llmcu_order_test.bin", 4, T, 1, 0, 1000, true, 3);
    std::vector<int> seen(s.slots, 0);
    for (long long i = 0; i < s.slots; i++) seen[dataloader_slot(&s, i)]++;
    bool perm = true;
    for (int c : seen) perm &= c == 1;
    bool moved = false;
    for (long long i = 0; i < s.slots; i++) moved |= dataloader_slot(&s, i) != i;
    report(perm && moved, "shuffle visits every slot once per epoch");
    remove("/tmp/llmcu_order_test.bin");
}

// MFU's two halves (mfu.h): the FLOPs a token costs, and the peak a device's name gives
static void test_mfu() {
    // GPT-2 124M at T = 1024: Ψ = Vp·C + maxT·C + L·(12C² + 13C) + 2C with Vp = 50304 (llm.c's
    // 124,475,904), so 6Ψ + 6·L·C·T = 746,855,424 + 56,623,104 FLOPs a token
    GPTConfig c;
    bool ok = gpt_preset("gpt2:124M", &c);
    GPT<float> g;
    if (ok) gpt_build(&g, c);
    const size_t params = ok ? gpt_num_params(g) : 0;
    ok = ok && params == 124475904 && flops_per_token(c, 1024, params) == 803478528.0;
    report(ok, "FLOPs a token of GPT-2 124M at T=1024: 6*124475904 + 6*12*768*1024 = 803478528", "%.0f", ok ? 803478528.0 : (double)params);
    // the peaks by the names the CUDA runtime gives: the specific rows before the general ones,
    // whole words only (an A100 is no A10, an L40 no L4), unknown names none
    const struct { const char* name; double peak; } cases[] = {
        {"NVIDIA H100 80GB HBM3", 989e12}, {"NVIDIA H100 PCIe", 756e12}, {"NVIDIA H100 NVL", 835e12},
        {"NVIDIA GH200 480GB", 989e12}, {"NVIDIA A100-SXM4-80GB", 312e12}, {"NVIDIA A10", 125e12},
        {"NVIDIA B200", 2250e12}, {"NVIDIA GB200", 2500e12}, {"NVIDIA L40S", 362e12}, {"NVIDIA L40", -1},
        {"NVIDIA L4", 121e12}, {"NVIDIA A10G", -1}, {"CPU SIMT emulator (test/simt.h)", -1},
    };
    ok = true;
    for (const auto& k : cases) {
        const double got = gpu_peak_flops_named(k.name);
        if (got != k.peak) { ok = false; printf("#   '%s': peak %g, expected %g\n", k.name, got, k.peak); }
    }
    report(ok, "dense bf16 peaks by device name (13 names: H100 variants, GH200, A100, A10, B200, GB200, L40S, L40, L4, A10G, none)");
}

// Tensor parallelism's slices (tensor_parallel.h, model.h): over the tp ranks, each block tensor's
// elements are held exactly once (split) or by every rank (replicated), each rank's pieces fill
// its local tensor exactly once, the model file's pieces of a block cover its range of the file
// once when the replicated ones are written by tp rank 0 alone, and a rank's initialization is
// its slice of the whole block's (and of the whole wte: its Vp/t rows).
// The same for a Llama with grouped-query attention, whose qkv rows are 3 groups of unequal size.
// And for a Llama with its own classifier, lm_head: each rank's Vp/t rows of it, like wte's.
static void test_tp_slices(bool llama, bool tied = true) {
    GPTConfig c;
    c.num_layers = 3; c.channels = 16; c.num_heads = 4; c.max_seq_len = 8; c.vocab_size = 50; c.padded_vocab_size = 64;
    if (llama) { c.arch = Arch::Llama; c.channels = 32; c.num_heads = 8; c.num_kv_heads = 4; c.hidden = 48; c.tied = tied; }
    const ParamLayout full = make_layout(c);
    for (int t : {2, 4}) {
        bool tensors_ok = true, file_ok = true, init_ok = true;
        std::vector<int> file_hits(full.total, 0);
        std::vector<float> whole(full.block_size);
        gpt_init_unit(c, full, unit_of_block(1), 7, whole.data());
        for (int r = 0; r < t; r++) {
            const ParamLayout p = make_layout(c, t, r);
            for (int k = 0; k < NUM_BLOCK_TENSORS; k++) {
                const size_t n = block_tensor_size(c, (BlockTensor)k), local = block_tensor_size(c, (BlockTensor)k, t);
                std::vector<int> held(local, 0);
                for (const TPPiece& q : block_tensor_pieces(c, p, (BlockTensor)k)) {
                    if (q.full_off + q.n > n || q.local_off + q.n > local) { tensors_ok = false; continue; }
                    for (size_t i = 0; i < q.n; i++) held[q.local_off + i]++;
                }
                for (int h : held) tensors_ok &= h == 1;
            }
            for (int u = 0; u < gpt_num_units(c); u++)
                for (const FilePiece& q : unit_file_pieces(c, p, u)) {
                    if (q.replicated && r != 0) continue;
                    for (size_t i = 0; i < q.n; i++) if (q.file_off + i < full.total) file_hits[q.file_off + i]++; else file_ok = false;
                }
            std::vector<float> mine(p.block_size);
            gpt_init_unit(c, p, unit_of_block(1), 7, mine.data());
            for (int k = 0; k < NUM_BLOCK_TENSORS; k++)
                for (const TPPiece& q : block_tensor_pieces(c, p, (BlockTensor)k))
                    for (size_t i = 0; i < q.n; i++)
                        init_ok &= mine[p.in_block[k] + q.local_off + i] == whole[full.in_block[k] + q.full_off + i];
            // the embeddings: this rank's Vp/t rows of wte, then all of wpe
            const size_t wte_n = p.wpe - p.wte, wpe_n = p.blocks - p.wpe;
            std::vector<float> emb(p.blocks), whole_emb(full.blocks);
            gpt_init_unit(c, p, 0, 7, emb.data());
            gpt_init_unit(c, full, 0, 7, whole_emb.data());
            init_ok &= wte_n * t == (size_t)c.padded_vocab_size * c.channels;
            for (size_t i = 0; i < wte_n; i++) init_ok &= emb[i] == whole_emb[r * wte_n + i];
            for (size_t i = 0; i < wpe_n; i++) init_ok &= emb[wte_n + i] == whole_emb[full.wpe + i];
            // lnf's unit: lnfw whole, then (untied) this rank's Vp/t rows of lm_head
            std::vector<float> head(unit_span(c, p, unit_lnf(c)).size), whole_head(unit_span(c, full, unit_lnf(c)).size);
            gpt_init_unit(c, p, unit_lnf(c), 7, head.data());
            gpt_init_unit(c, full, unit_lnf(c), 7, whole_head.data());
            const size_t norm = p.lm_head - p.lnfw, head_n = p.total - p.lm_head;
            init_ok &= head_n * t == (tied ? 0 : (size_t)c.padded_vocab_size * c.channels);
            for (size_t i = 0; i < norm; i++) init_ok &= head[i] == whole_head[i];
            for (size_t i = 0; i < head_n; i++) init_ok &= head[norm + i] == whole_head[norm + r * head_n + i];
        }
        for (int h : file_hits) file_ok &= h == 1;
        char name[160];
        const char* arch = !llama ? "" : tied ? "llama (NKV = NH/2) " : "llama (NKV = NH/2, untied) ";
        snprintf(name, sizeof(name), "%stp=%d: every rank's pieces fill its slice of each block tensor once", arch, t);
        report(tensors_ok, name);
        snprintf(name, sizeof(name), "%stp=%d: the ranks' model-file pieces cover the file once (replicated ones from tp rank 0)", arch, t);
        report(file_ok, name);
        snprintf(name, sizeof(name), "%stp=%d: each rank initializes its slice of the whole block's values, and its rows of wte%s", arch, t,
                 tied ? "" : " and lm_head");
        report(init_ok, name);
    }
}

// The vocabulary-parallel classifier (fused_classifier.cuh): the columns of a padded vocabulary
// split over 2 and 3 parts (the last with padding only, or none), each part's stats gathered and
// its losses and gradient finished, against the one-pass op. The parts' sums are fp32, the
// one-pass sum double: the losses agree to a few fp32 ulps of log S (1e-6 of ~10), the gradient
// elements to 1e-6 of the largest (|p − 1| ≤ 1, scaled by dloss).
static void test_classifier_vocab_parallel() {
    const int N = 6, V = 1000, Vp = 1008;
    Rng r(11);
    std::vector<float> logits((size_t)N * Vp);
    for (auto& x : logits) x = 3.0f * r.normal();
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = n == 0 ? 0 : n == 1 ? V - 1 : n == 2 ? Vp / 2 : (int)r.below(V);  // the ends, a seam
    std::vector<float> want = logits, want_loss(N);
    fused_classifier(Ctx(), want.data(), want_loss.data(), tgt.data(), N, V, Vp, 0.25f);
    for (int parts : {2, 3}) {
        const int Vpl = Vp / parts;
        std::vector<float> stats((size_t)parts * N * 3), got((size_t)N * Vp), loss(N);
        std::vector<std::vector<float>> slice(parts, std::vector<float>((size_t)N * Vpl));
        for (int q = 0; q < parts; q++) {
            for (int n = 0; n < N; n++)
                for (int v = 0; v < Vpl; v++) slice[q][(size_t)n * Vpl + v] = logits[(size_t)n * Vp + q * Vpl + v];
            const int lo = q * Vpl, Vl = std::max(0, std::min(Vpl, V - lo));
            classifier_stats(Ctx(), slice[q].data(), stats.data() + (size_t)q * N * 3, tgt.data(), N, Vl, Vpl, lo);
        }
        double loss_err = 0, grad_err = 0, grad_max = 0;
        for (int q = 0; q < parts; q++) {
            const int lo = q * Vpl, Vl = std::max(0, std::min(Vpl, V - lo));
            classifier_finish(Ctx(), slice[q].data(), loss.data(), stats.data(), parts, tgt.data(), N, Vl, Vpl, lo, 0.25f);
            for (int n = 0; n < N; n++) {
                loss_err = std::max(loss_err, (double)std::fabs(loss[n] - want_loss[n]));
                for (int v = 0; v < Vpl; v++) {
                    const double w = want[(size_t)n * Vp + lo + v];
                    grad_err = std::max(grad_err, std::fabs(slice[q][(size_t)n * Vpl + v] - w));
                    grad_max = std::max(grad_max, std::fabs(w));
                }
            }
        }
        char name[120];
        snprintf(name, sizeof(name), "vocabulary-parallel classifier, %d parts: the one-pass losses and gradient", parts);
        report(loss_err <= 1e-5 && grad_err <= 1e-6 * grad_max, name, "loss diff %.1e, gradient diff %.1e of the largest",
               loss_err, grad_err / grad_max);
    }
}

// The classifier from the rows' part stats (fused_classifier.cuh; --classifier-stats epilogue,
// where the LM head's product makes them): the stats of each 128 columns, then the losses and the
// gradient, against the one-pass op. V ends inside a part (1000 = 7·128 + 104) and the padding
// fills the rest of the last part; one more row has all its real logits in the first part.
// Bounds as above: the parts' sums are fp32, the one-pass sum double.
static void test_classifier_from_parts() {
    const int N = 6, V = 1000, Vp = 1008, parts = classifier_parts(Vp);
    Rng r(12);
    std::vector<float> logits((size_t)N * Vp);
    for (auto& x : logits) x = 3.0f * r.normal();
    for (int v = 0; v < Vp; v++) logits[(size_t)5 * Vp + v] = v < 100 ? 20.0f + v % 7 : -30.0f;  // (the other parts' exps are ~1e-22 of it)
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = n == 0 ? 0 : n == 1 ? V - 1 : n == 2 ? 128 : (int)r.below(V);  // the ends, a part's first column
    std::vector<float> want = logits, want_loss(N), got = logits, loss(N), stats((size_t)N * parts * 2);
    fused_classifier(Ctx(), want.data(), want_loss.data(), tgt.data(), N, V, Vp, 0.25f);
    classifier_part_stats_cpu(logits.data(), stats.data(), N, V, Vp);
    classifier_from_parts(Ctx(), got.data(), loss.data(), stats.data(), tgt.data(), N, V, Vp, 0.25f);
    double loss_err = 0, grad_err = 0, grad_max = 0;
    for (int n = 0; n < N; n++) {
        loss_err = std::max(loss_err, (double)std::fabs(loss[n] - want_loss[n]));
        for (int v = 0; v < Vp; v++) {
            grad_err = std::max(grad_err, (double)std::fabs(got[(size_t)n * Vp + v] - want[(size_t)n * Vp + v]));
            grad_max = std::max(grad_max, (double)std::fabs(want[(size_t)n * Vp + v]));
        }
    }
    const float* last = stats.data() + 2 * ((size_t)0 * parts + parts - 1);  // (row 0's last part: columns 896-1007, 104 of them real)
    float m = -INFINITY;
    for (int v = 896; v < V; v++) m = std::max(m, logits[v]);
    report(loss_err <= 1e-5 && grad_err <= 1e-6 * grad_max && last[0] == m, "classifier from the part stats: the one-pass losses and gradient",
           "loss diff %.1e, gradient diff %.1e of the largest; the last part's max over its real columns", loss_err, grad_err / grad_max);
}

int main() {
    test_encoder();
    test_layernorm();
    test_matmul();
    test_attention(3, 3);
    test_attention(4, 2);  // grouped-query
    test_attention(4, 1);  // one key/value head (multi-query)
    test_gqa_is_repeated_mha();
    test_ring_attention(3, 3);
    test_ring_attention(4, 2);
    test_gelu();
    test_llama_ops();
    test_classifier();
    test_model_grad(false);
    test_model_grad(true);
    test_model_grad(true, false);
    test_adamw_and_norm();
    test_misc();
    test_mfu();
    test_cgroup_room();
    test_crc32c();
    test_bf16_ops();
    test_bf16_model();
    test_fp16();
    test_fp16_model();
    test_loss_scale();
    test_fp8();
    test_fp8_delayed();
    test_data_order();
    test_tp_slices(false);
    test_tp_slices(true);
    test_tp_slices(true, false);
    test_classifier_vocab_parallel();
    test_classifier_from_parts();
    test_encoder_vocab_parallel();
    test_pipeline_schedules();
    printf("# test_ops: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
