/*
test_simt — the CPU SIMT emulator (test/simt.h) checked on its own, so that "the CUDA kernels pass
under the emulator" (build/simcheck_ops) means something. Each check builds a small kernel whose
right answer is known:
  - mma.m16n8k16, ldmatrix(.trans) and wgmma (no swizzle and 128-byte swizzled operands, A in
    registers or shared memory): fragments laid out by the PTX ISA's formulas, written out again
    here, multiply to the plain product A·B + C;
  - shuffles, __syncthreads (a reduction without its barrier is wrong in one of the schedules),
    named barriers (strict alternation of two warps), the order threads run and blocks are handed out in;
  - cp.async, mbarriers and TMA land at the latest moment a GPU may land them, and a thread that
    reads early sees old bytes; a wgmma writes D only at its wait, and reading what cp.async or
    stmatrix wrote without a fence.proxy.async after it is reported; a cluster's multicast copy
    reaches each of its blocks, and a block reached before it is set up or after it exited is reported;
  - the failures a GPU would show are reported, each in a child process that must exit with
    status 3 and name the kernel: deadlocks, shuffles after lanes exited, reads past a cudaMalloc
    buffer, host pointers in kernels, copies never waited for, the host touching a page-locked
    buffer before its copy's wait, and one stream touching what another stream's work uses
    before waiting for it;
  - cuBLASLt: a layout that does not match the transposes is refused.
The full list is in docs/verification.md ("test/test_simt.cpp"); the model in docs/emulator.md.
Prints "ok"/"not ok" lines. Build: make build/test_simt (g++, no GPU).
*/
#include "simt.h"
#include <omp.h>
#include <string>
#include <sys/wait.h>

static int n_pass = 0, n_fail = 0;
static void check(bool ok, const char* what) {
    printf("%s - simt: %s\n", ok ? "ok" : "not ok", what);
    (ok ? n_pass : n_fail)++;
}

static uint16_t bf(float x) { uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); }  // exact for the values used
static float fl(uint16_t h) { uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x; }

// The PTX ISA's formulas for mma.m16n8k16 with .bf16 (g = lane>>2, t = lane%4; element i of the
// fragment, two per 32-bit register, low half first).
static int a_row(int lane, int i) { return lane / 4 + ((i >= 2 && i < 4) || i >= 6 ? 8 : 0); }
static int a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
static int b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
static int b_col(int lane, int) { return lane / 4; }
static int c_row(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
static int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }
// D == A·B + C exactly (the tests' inputs are small integers and halves: every sum exact in fp32)
template <int M, int N> static bool is_ab_plus_c(const float (&A)[M][16], const float (&B)[16][N], const float (&C)[M][N], const float (&D)[M][N]) {
    bool ok = true;
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            double s = C[r][n];
            for (int k = 0; k < 16; k++) s += (double)A[r][k] * B[k][n];
            ok &= D[r][n] == (float)s;
        }
    return ok;
}

// fp16 (IEEE binary16) code of x, for the normal values (and zero) the tests use, exactly
static uint16_t hf(float x) {
    if (x == 0.0f) return 0;
    int e;
    const float m = std::frexp(std::fabs(x), &e);  // |x| = m·2^e, m in [0.5, 1): 1.f · 2^(e−1)
    return (uint16_t)((x < 0 ? 0x8000 : 0) | (e - 1 + 15) << 10 | (int)((2 * m - 1) * 1024));
}

// fp16: the .f16 form, with values bf16 cannot hold (k·2^-8 on top of small integers: 10
// mantissa bits), so that a product read as bf16 (or as fp16 through the wrong formula) fails.
static void test_mma(bool fp16) {
    float A[16][16], B[16][8], C[16][8], D[16][8];
    const float frac = fp16 ? 0x1p-8f : 0.0f;  // (fp16 holds 2^-8 up to 8; bf16 only up to 2^-1)
    for (int r = 0; r < 16; r++) for (int k = 0; k < 16; k++) A[r][k] = (float)((r * 7 + k * 3) % 11) - 5.0f + frac * ((r + k) % 3);
    for (int k = 0; k < 16; k++) for (int n = 0; n < 8; n++) B[k][n] = ((float)((k * 5 + n) % 9) - 4.0f) * 0.5f;
    if (!fp16)
        for (int r = 0; r < 16; r++) for (int k = 0; k < 16; k++) A[r][k] = fl(bf(A[r][k]));
    for (int r = 0; r < 16; r++) for (int n = 0; n < 8; n++) C[r][n] = (float)(r - n);
    auto code = [&](float x) { return fp16 ? hf(x) : bf(x); };
    simt::launch("mma_test", simt::Cfg{1, 32}, [&] {
        int lane = threadIdx.x;
        uint32_t a[4], b[2];
        uint16_t ah[8], bh[4];
        for (int i = 0; i < 8; i++) ah[i] = code(A[a_row(lane, i)][a_col(lane, i)]);
        for (int i = 0; i < 4; i++) bh[i] = code(B[b_row(lane, i)][b_col(lane, i)]);
        for (int r = 0; r < 4; r++) a[r] = ah[2 * r] | ((uint32_t)ah[2 * r + 1] << 16);
        for (int r = 0; r < 2; r++) b[r] = bh[2 * r] | ((uint32_t)bh[2 * r + 1] << 16);
        float c[4];
        for (int i = 0; i < 4; i++) c[i] = C[c_row(lane, i)][c_col(lane, i)];
        simt::mma_m16n8k16(c, a, b, fp16);
        for (int i = 0; i < 4; i++) D[c_row(lane, i)][c_col(lane, i)] = c[i];
    });
    check(is_ab_plus_c(A, B, C, D), fp16 ? "mma m16n8k16 .f16 (values bf16 cannot hold) equals A·B + C"
                                         : "mma m16n8k16 with the ISA's fragment layout equals A·B + C");
}

// ldmatrix as the flash kernels use it (flash_attention.cuh): one .x4 gives the mma B fragments of two
// adjacent n-tiles (b[j][r], j = tile, r = register), read from a 16×16 tile of shared memory
// stored either as M[n][k] (plain) or as M[k][n] (.trans). Expected: the B formulas above.
// Lane l addresses row l%8 of matrix l/8; the rows are laid out in memory in reverse order
// (stride −24 elements), so a row taken from the wrong lane shows.
static void test_ldmatrix() {
    static uint16_t want[2][32][2][2][2];  // [trans][lane][j][r][half]
    static uint16_t got[2][32][2][2][2];
    auto val = [](int row, int col) { return (uint16_t)(row * 16 + col + 1); };
    simt::launch("ldmatrix_test", simt::Cfg{1, 32}, [&] {
        __shared__ __align__(16) uint16_t tile[16 * 24];  // 16 rows of 16 (+8 padding), last row first
        const int lane = threadIdx.x;
        for (int i = lane; i < 16 * 16; i += 32) tile[(15 - i / 16) * 24 + i % 16] = val(i / 16, i % 16);
        __syncthreads();
        auto at = [&](int row, int col) { return &tile[(15 - row) * 24 + col]; };
        for (int trans = 0; trans < 2; trans++) {
            // plain: M[n][k], lane → row n = 8·(l/16) + l%8, column k = 8·((l/8)%2)
            // trans: M[k][n], lane → row k = 8·((l/8)%2) + l%8, column n = 8·(l/16)
            int a = lane % 8 + 8 * (trans ? (lane / 8) % 2 : lane / 16), b = 8 * (trans ? lane / 16 : (lane / 8) % 2);
            uint32_t r[4];
            simt::ldmatrix(r, 4, trans, at(a, b));
            for (int j = 0; j < 2; j++)
                for (int q = 0; q < 2; q++)
                    for (int h = 0; h < 2; h++) {
                        int k = b_row(lane, 2 * q + h), n = 8 * j + b_col(lane, 2 * q + h);
                        got[trans][lane][j][q][h] = (uint16_t)(r[2 * j + q] >> (16 * h));
                        want[trans][lane][j][q][h] = trans ? val(k, n) : val(n, k);
                    }
        }
    });
    check(!memcmp(got[0], want[0], sizeof(got[0])), "ldmatrix.x4 of M[n][k] gives the mma B fragments of two n-tiles");
    check(!memcmp(got[1], want[1], sizeof(got[1])), "ldmatrix.x4.trans of M[k][n] gives the mma B fragments of two n-tiles");
}

static void test_shuffles() {
    int got[3][64], any[2][64];
    simt::launch("shuffle_test", simt::Cfg{1, 64}, [&] {
        int i = threadIdx.x, lane = i % 32;
        got[0][i] = __shfl_xor_sync(0xffffffffu, 100 * (i / 32) + lane, 5);
        got[1][i] = __shfl_down_sync(0xffffffffu, lane, 3);
        got[2][i] = __shfl_sync(0xffffffffu, lane * lane, 7);
        any[0][i] = __any_sync(0xffffffffu, i == 40);  // true in one lane of the second warp alone
        any[1][i] = __any_sync(0xffffffffu, 0);
    });
    bool ok = true;
    for (int i = 0; i < 64; i++) {
        int lane = i % 32;
        ok &= got[0][i] == 100 * (i / 32) + (lane ^ 5);
        ok &= got[1][i] == (lane + 3 < 32 ? lane + 3 : lane);  // past the warp: own value
        ok &= got[2][i] == 49;
    }
    check(ok, "shuffles (xor, down, indexed) read the source lane, per warp");
    bool votes = true;
    for (int i = 0; i < 64; i++) votes &= (any[0][i] != 0) == (i >= 32) && any[1][i] == 0;
    check(votes, "__any_sync: every lane of a warp learns whether one of its lanes voted true, per warp");
}

// sum of 0..255 by a block of 256 through shared memory; `barrier` false drops the one that
// separates the writes from the reads
static long block_sum(bool barrier) {
    long result = -1;
    simt::launch("block_sum", simt::Cfg{1, 256}, [&] {
        __shared__ int s[256];
        s[threadIdx.x] = threadIdx.x;
        if (barrier) __syncthreads();
        if (threadIdx.x == 0) { long t = 0; for (int i = 0; i < 256; i++) t += s[i]; result = t; }
        __syncthreads();
        s[threadIdx.x] = -1;  // the next block would see garbage, as on a GPU
    });
    return result;
}
static void test_races() {
    const long want = 255 * 256 / 2;
    bool saved = simt::g_reverse;
    simt::g_reverse = false; long f = block_sum(true), f_race = block_sum(false);
    simt::g_reverse = true;  long r = block_sum(true), r_race = block_sum(false);
    simt::g_reverse = saved;
    check(f == want && r == want, "a block reduction with its barrier is right in both schedules");
    check(f_race != want || r_race != want, "the same reduction without the barrier is wrong in one schedule (the race is seen)");
}

// The order in which a launch hands out its blocks: blockIdx order, or with g_reverse_blocks the
// last first (one host thread, so that the order is exact)
static std::vector<int> block_order(bool reverse) {
    std::vector<int> order;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    simt::g_reverse_blocks = reverse;
    simt::launch("block_order", simt::Cfg{dim3(4, 2), 32}, [&] {
        if (threadIdx.x == 0) order.push_back((int)(blockIdx.y * gridDim.x + blockIdx.x));
    });
    simt::g_reverse_blocks = false;
    omp_set_num_threads(threads);
    return order;
}
// The order a block's threads run in: each warp's lanes in order up to each warp collective, one
// warp as far as it can go (to __syncthreads) before the next. Thread 3 ends after the shuffle, so
// its warp's lanes hand over around it. Returns threadIdx.x * 10 + phase, in the order they ran.
static std::vector<int> thread_order(bool reverse) {
    std::vector<int> order;
    const bool saved = simt::g_reverse;
    simt::g_reverse = reverse;
    simt::launch("thread_order", simt::Cfg{1, 64}, [&] {
        order.push_back((int)threadIdx.x * 10);
        (void)__shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);  // (a warp collective: the lanes meet)
        order.push_back((int)threadIdx.x * 10 + 1);
        if (threadIdx.x == 3) return;
        __syncthreads();
        order.push_back((int)threadIdx.x * 10 + 2);
    });
    simt::g_reverse = saved;
    return order;
}
static void test_thread_order() {
    for (bool reverse : {false, true}) {
        std::vector<int> want;
        auto lanes = [&](int warp, int phase) {
            for (int j = 0; j < 32; j++) {
                const int t = warp * 32 + (reverse ? 31 - j : j);
                if (t != 3 || phase < 2) want.push_back(t * 10 + phase);
            }
        };
        for (int k = 0; k < 2; k++) lanes(reverse ? 1 - k : k, 0), lanes(reverse ? 1 - k : k, 1);
        for (int k = 0; k < 2; k++) lanes(reverse ? 1 - k : k, 2);
        check(thread_order(reverse) == want, reverse ? "threads run warp by warp, lanes in order to each collective (reverse order)"
                                                     : "threads run warp by warp, lanes in order to each collective (thread order)");
    }
}
static void test_block_order() {
    check(block_order(false) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, "blocks are handed out in blockIdx order");
    check(block_order(true) == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0}, "with g_reverse_blocks, the last blockIdx first");
}

// cp.async: a 16-byte copy into shared memory lands at the thread's wait, not before (not at a
// __syncthreads either), and a short copy fills the rest of its 16 bytes with zeros
static void test_cp_async() {
    int* src; cudaMalloc(&src, 256 * sizeof(int));
    std::vector<int> h(256);
    for (int i = 0; i < 256; i++) h[i] = 1000 + i;
    cudaMemcpy(src, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice);
    int before[64], after[64];
    simt::launch("cp_async_test", simt::Cfg{1, 64}, [&] {
        __shared__ __align__(16) int s[256];
        for (int k = 0; k < 4; k++) s[threadIdx.x * 4 + k] = -1;
        __syncthreads();
        const unsigned bytes = threadIdx.x == 5 ? 8 : threadIdx.x == 6 ? 0 : 16;  // thread 5 half a copy, 6 none
        simt::cp_async16(&s[threadIdx.x * 4], src + threadIdx.x * 4, bytes);
        __syncthreads();
        before[threadIdx.x] = s[(threadIdx.x * 4 + 4) % 256];  // the neighbour's first element, copy still pending
        __syncthreads();
        simt::cp_async_wait_all();
        __syncthreads();
        after[threadIdx.x] = s[(threadIdx.x * 4 + 4) % 256];
    });
    bool pending = true, landed = true;
    for (int i = 0; i < 64; i++) {
        const int n = (i + 1) % 64;
        pending &= before[i] == -1;
        landed &= after[i] == (n == 6 ? 0 : 1000 + 4 * n);
    }
    check(pending, "cp.async has not landed at a __syncthreads before its wait");
    check(landed, "cp.async has landed after the wait, short copies zero-filled");
    cudaFree(src);
}

// cp.async groups: a thread copies 4 ints in 4 copies, commits after the first three (groups 0,
// 1, 2) and not after the fourth. wait_group 1 lands groups 0 and 1; wait_group 0 lands group 2;
// the fourth copy, in no group, lands only at wait_all.
static void test_cp_async_groups() {
    int* src; cudaMalloc(&src, 32 * 16 * sizeof(int));
    std::vector<int> h(32 * 16);
    for (int i = 0; i < 32 * 16; i++) h[i] = 1 + i;
    cudaMemcpy(src, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice);
    int seen[3][32][4];
    simt::launch("cp_async_groups", simt::Cfg{1, 32}, [&] {
        __shared__ __align__(16) int s[32 * 16];  // thread t's copy k at s[(t·4 + k)·4]
        const int t = threadIdx.x;
        for (int k = 0; k < 4; k++) s[(t * 4 + k) * 4] = 0;
        for (int k = 0; k < 4; k++) {
            simt::cp_async16(&s[(t * 4 + k) * 4], src + (t * 4 + k) * 4, 16);
            if (k < 3) simt::cp_async_commit();
        }
        simt::cp_async_wait_group(1);
        for (int k = 0; k < 4; k++) seen[0][t][k] = s[(t * 4 + k) * 4];
        simt::cp_async_wait_group(0);
        for (int k = 0; k < 4; k++) seen[1][t][k] = s[(t * 4 + k) * 4];
        simt::cp_async_wait_all();
        for (int k = 0; k < 4; k++) seen[2][t][k] = s[(t * 4 + k) * 4];
    });
    bool ok[3] = {true, true, true};
    for (int w = 0; w < 3; w++)
        for (int t = 0; t < 32; t++)
            for (int k = 0; k < 4; k++) {
                const bool landed = k < 2 || (k == 2 && w >= 1) || w == 2;
                ok[w] &= seen[w][t][k] == (landed ? h[(t * 4 + k) * 4] : 0);
            }
    check(ok[0], "cp.async wait_group 1 lands all but the newest committed group");
    check(ok[1], "cp.async wait_group 0 lands every committed group, not a copy committed in none");
    check(ok[2], "cp.async wait_all lands the copy in no group too");
    cudaFree(src);
}

static bool dies_with(const std::function<void()>& fn, const char* needle);  // (below)
// mbarriers: warp 2 (the producer) copies round r's 64 ints into slot r % 2 by cp.async and
// arrives on full[slot] when they land (cp.async.mbarrier.arrive.noinc, 32 arrivals a phase);
// warps 0 and 1 (the consumers) wait for full[slot]'s phase, sum the slot, and arrive on
// empty[slot] (2 arrivals: lane 0 of each), which the producer waits for before refilling it.
// A consumer that read a slot before its phase completed, or after it was refilled, sums wrong.
static void test_mbarrier() {
    const int rounds = 6;
    int* src; cudaMalloc(&src, rounds * 128 * sizeof(int));
    std::vector<int> h(rounds * 128);
    for (int i = 0; i < rounds * 128; i++) h[i] = i;
    cudaMemcpy(src, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice);
    for (int reverse = 0; reverse < 2; reverse++) {
        simt::g_reverse = reverse;
        int sums[2][rounds] = {};
        simt::launch("mbarrier_ring", simt::Cfg{1, 96}, [&] {
            __shared__ __align__(16) int slot[2][128];
            __shared__ uint64_t full[2], empty[2];
            const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
            if (threadIdx.x == 0)
                for (int s = 0; s < 2; s++) simt::mbar_init(&full[s], 32), simt::mbar_init(&empty[s], 2);
            __syncthreads();
            for (int r = 0; r < rounds; r++) {
                const int s = r % 2;
                const unsigned phase = (r / 2) & 1;
                if (warp == 2) {
                    simt::mbar_wait(&empty[s], phase ^ 1);  // (the first round of each slot passes at once)
                    simt::cp_async16(&slot[s][lane * 4], src + r * 128 + lane * 4, 16);
                    simt::mbar_arrive_on_copies(&full[s]);
                } else {
                    simt::mbar_wait(&full[s], phase);
                    int sum = 0;
                    for (int i = 0; i < 128; i += 32) sum += slot[s][i + lane];
                    for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                    if (lane == 0) sums[warp][r] = sum, simt::mbar_arrive(&empty[s]);
                }
            }
        });
        bool ok = true;
        for (int r = 0; r < rounds; r++) {
            const int expect = 128 * r * 128 + 127 * 128 / 2;  // the sum of r·128 .. r·128 + 127
            ok &= sums[0][r] == expect && sums[1][r] == expect;
        }
        check(ok, reverse ? "mbarrier: a 2-slot producer/consumer ring delivers every round whole (reverse order)"
                          : "mbarrier: a 2-slot producer/consumer ring delivers every round whole");
    }
    simt::g_reverse = false;
    cudaFree(src);
    check(dies_with([] {
        simt::launch("mbarrier_never", simt::Cfg{1, 32}, [&] {
            __shared__ uint64_t bar;
            if (threadIdx.x == 0) simt::mbar_init(&bar, 64);
            __syncthreads();
            simt::mbar_arrive(&bar);  // 32 of the 64 arrivals
            simt::mbar_wait(&bar, 0);
        });
    }, "mbarrier_never: deadlock"), "mbarrier: a wait for a phase that never completes is reported");
    check(dies_with([] {
        simt::launch("mbarrier_uninit", simt::Cfg{1, 32}, [&] {
            __shared__ uint64_t bar;
            simt::mbar_wait(&bar, 0);
        });
    }, "never initialized"), "mbarrier: a wait on a barrier never initialized is reported");
}

// Named barriers as the forward's ping-pong uses them: warp w waits for its turn at barrier 1 + w
// (bar.sync, 64 threads), logs its round, and passes the turn on (bar.arrive at the other's).
// Warp 1 gives warp 0 the first turn; warp 0 takes one more turn at the end (warp 1's last pass).
static std::vector<int> take_turns(bool barriers) {
    std::vector<int> log;
    simt::launch("take_turns", simt::Cfg{1, 64}, [&] {
        const int w = threadIdx.x / 32;
        if (barriers && w == 1) simt::bar_named(1, 64, false);
        for (int r = 0; r < 4; r++) {
            if (barriers) simt::bar_named(1 + w, 64, true);
            if (threadIdx.x % 32 == 0) log.push_back(w);
            if (barriers) simt::bar_named(2 - w, 64, false);
        }
        if (barriers && w == 0) simt::bar_named(1, 64, true);
    });
    return log;
}
static void test_named_barriers() {
    const std::vector<int> turns = {0, 1, 0, 1, 0, 1, 0, 1};
    for (int reverse = 0; reverse < 2; reverse++) {
        simt::g_reverse = reverse;
        check(take_turns(true) == turns, reverse ? "named barriers: two warps take turns, strictly alternating (reverse order)"
                                                 : "named barriers: two warps take turns, strictly alternating");
        check(take_turns(false) != turns, reverse ? "named barriers: without them the two warps do not alternate (reverse order)"
                                                  : "named barriers: without them the two warps do not alternate");
    }
    simt::g_reverse = false;
    check(dies_with([] {
        simt::launch("named_half", simt::Cfg{1, 64}, [&] { if (threadIdx.x < 32) simt::bar_named(3, 64, false); });
    }, "named barrier 3"), "named barriers: a block that ends with a phase half full is reported");
    check(dies_with([] {
        simt::launch("named_counts", simt::Cfg{1, 96}, [&] { simt::bar_named(4, threadIdx.x < 32 ? 64 : 96, true); });
    }, "different thread counts"), "named barriers: two thread counts for one barrier are reported");
    check(dies_with([] {
        simt::launch("named_never", simt::Cfg{1, 128}, [&] { if (threadIdx.x < 64) simt::bar_named(5, 96, true); });
    }, "named_never: deadlock"), "named barriers: a bar.sync whose phase never completes is reported");
}

// Two warpgroups, each with two wgmma waits (no products): warpgroup w writes its flag after
// its first wait and reads the other's after its second. With a named barrier between, each sees
// the other's flag. Without it, one of them reads too early in each schedule: a warpgroup whose
// wait is over runs ahead of the other (as the fused backward's dS exchange would without its
// barrier).
static bool warpgroups_see_flags(bool barrier) {
    bool both = true;
    simt::launch("wg_apart", simt::Cfg{1, 256}, [&] {
        __shared__ int flag[2];
        const int w = threadIdx.x / 128;
        if (threadIdx.x % 128 == 0) flag[w] = 0;
        __syncthreads();
        simt::wgmma_wait(0);
        if (threadIdx.x % 128 == 0) flag[w] = 1;
        if (barrier) simt::bar_named(1, 256, true);
        simt::wgmma_wait(0);
        if (threadIdx.x % 128 == 0 && flag[1 - w] != 1) both = false;
    });
    return both;
}
static void test_warpgroups_apart() {
    for (int reverse = 0; reverse < 2; reverse++) {
        simt::g_reverse = reverse;
        check(warpgroups_see_flags(true), reverse ? "wgmma: two warpgroups see each other's flags across a named barrier (reverse order)"
                                                  : "wgmma: two warpgroups see each other's flags across a named barrier");
        check(!warpgroups_see_flags(false), reverse ? "wgmma: without it one warpgroup runs ahead and reads too early (reverse order)"
                                                    : "wgmma: without it one warpgroup runs ahead and reads too early");
    }
    simt::g_reverse = false;
}

// wgmma m64n64k16 (A in registers: warp w the mma A fragment of rows 16w..16w+15; B through a
// descriptor in both canonical no-swizzle layouts, the core matrices spaced apart by LBO and SBO
// with gaps so that a swapped field shows; D: warp w rows 16w.., n-tile j in d[4j..4j+3] in the
// mma C layout) equals A·B + C, and only after the wait: D read between issue and wait is old.
// dynamic shared memory moved up to a multiple of 1024 bytes of the window (the emulator starts it
// at SIMT_SHARED_BIAS, as a GPU may start it after static shared variables): align_1024's job
static char* shared_1024() {
    char* p = (char*)simt::dynamic_shared();
    return p + (1024 - simt::shared_offset(p) % 1024) % 1024;
}
static void test_wgmma() {
    static float A[64][16], B[16][64], C[64][64], D[64][64];
    for (int r = 0; r < 64; r++) for (int k = 0; k < 16; k++) A[r][k] = fl(bf((float)((r * 7 + k * 3) % 11) - 5.0f));
    for (int k = 0; k < 16; k++) for (int n = 0; n < 64; n++) B[k][n] = fl(bf((float)((k * 5 + n * 3) % 9) - 4.0f) * 0.5f);
    for (int r = 0; r < 64; r++) for (int n = 0; n < 64; n++) C[r][n] = (float)(r - n);
    // B K-major, B MN-major (A in registers); A and B K-major from shared memory; B K-major and
    // MN-major 128-byte swizzled
    for (int mode = 0; mode < 5; mode++) {
        const int trans = mode == 1 || mode == 4, swizzled = mode >= 3;
        // K-major: (k, n) at 16(n%8) + SBO(n/8) + 2(k%8) + LBO(k/8); MN-major: 2(n%8) + SBO(n/8) + 16(k%8) + LBO(k/8)
        const uint32_t lbo = swizzled ? 16 : trans ? 1536 : 128, sbo = swizzled ? 1024 : trans ? 128 : 512;
        // Swizzled: rows of 128 bytes, 16-byte chunk c of row r at 16·(c XOR r%8). K-major B
        // (n a row) is the second k-step of 16 columns (the descriptor starts 32 bytes in);
        // MN-major B (k a row) is 16 rows of 64.
        auto sw = [](int row, int col) { return 128 * row + 16 * ((col / 8) ^ (row % 8)) + 2 * (col % 8); };
        auto at = [&](int k, int n) { return mode == 3 ? sw(n, 16 + k) : mode == 4 ? sw(k, n)
                                             : trans ? 2 * (n % 8) + sbo * (n / 8) + 16 * (k % 8) + lbo * (k / 8)
                                                     : 16 * (n % 8) + sbo * (n / 8) + 2 * (k % 8) + lbo * (k / 8); };
        // A (K-major) after B, at 4096: (m, k) at 16(m%8) + SBO_A(m/8) + 2(k%8) + LBO_A(k/8), spaced unlike B's
        const uint32_t lbo_a = 1024, sbo_a = 128;
        auto at_a = [&](int m, int k) { return 4096 + 16 * (m % 8) + sbo_a * (m / 8) + 2 * (k % 8) + lbo_a * (k / 8); };
        bool stale = true;  // D between issue and wait still holds C
        simt::launch("wgmma_test", simt::Cfg{1, 128, 8192 + 1024}, [&] {
            char* smem = shared_1024();
            if (threadIdx.x == 0) {
                for (int k = 0; k < 16; k++)
                    for (int n = 0; n < 64; n++) { uint16_t v = bf(B[k][n]); memcpy(smem + at(k, n), &v, 2); }
                for (int m = 0; m < 64 && mode == 2; m++)  // (the swizzled K-major B fills all 8 KB)
                    for (int k = 0; k < 16; k++) { uint16_t v = bf(A[m][k]); memcpy(smem + at_a(m, k), &v, 2); }
            }
            __syncthreads();
            const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
            uint32_t a[4];
            uint16_t ah[8];
            for (int i = 0; i < 8; i++) ah[i] = bf(A[16 * w + a_row(lane, i)][a_col(lane, i)]);
            for (int r = 0; r < 4; r++) a[r] = ah[2 * r] | ((uint32_t)ah[2 * r + 1] << 16);
            float d[32];
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++) d[4 * j + e] = C[16 * w + c_row(lane, e)][8 * j + c_col(lane, e)];
            const uint64_t desc = (uint64_t)((simt::shared_offset(smem) + (mode == 3 ? 32 : 0)) >> 4) | (uint64_t)(lbo >> 4) << 16 |
                                  (uint64_t)(sbo >> 4) << 32 | (uint64_t)swizzled << 62;
            const uint64_t desc_a = (uint64_t)(simt::shared_offset(smem + 4096) >> 4) | (uint64_t)(lbo_a >> 4) << 16 | (uint64_t)(sbo_a >> 4) << 32;
            simt::wgmma_fence();
            if (mode == 2) simt::wgmma_m64k16_ss(d, desc_a, desc, 64, false, true);
            else simt::wgmma_m64k16(d, a, desc, 64, trans, true);
            simt::wgmma_commit();
            if (d[5] != C[16 * w + c_row(lane, 1)][8 + c_col(lane, 1)]) stale = false;
            simt::wgmma_wait(0);
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++) D[16 * w + c_row(lane, e)][8 * j + c_col(lane, e)] = d[4 * j + e];
        });
        const bool ok = is_ab_plus_c(A, B, C, D);
        const char* what[] = {"B K-major", "B MN-major", "A and B K-major from shared memory", "B K-major 128-byte swizzled, 32 bytes in",
                              "B MN-major 128-byte swizzled"};
        char name[160];
        snprintf(name, sizeof(name), "wgmma m64n64k16, %s through the descriptor, equals A·B + C", what[mode]);
        check(ok, name);
        snprintf(name, sizeof(name), "... and its D is written only at the wait (%s)", what[mode]);
        check(stale, name);
    }
}

// One thread copies one box of map by TMA: to a tile moved up to 1024 (aligned) or to where
// dynamic shared memory starts; with fence.mbarrier_init after the barrier's init (fenced) or
// not; then waits for it (wait) or leaves it in flight. The wrong ways must be reported.
static void one_tma_copy(const CUtensorMap& map, bool aligned, bool fenced, bool wait) {
    simt::launch("tma_one_copy", simt::Cfg{1, 32, 2048}, [&] {
        __shared__ uint64_t full;
        if (threadIdx.x == 0) {
            simt::mbar_init(&full, 1);
            if (fenced) simt::mbar_init_fence();
            const int c[3] = {0, 0, 0};
            simt::mbar_arrive_expect_tx(&full, 8 * 64 * 2);
            simt::tma_load(aligned ? shared_1024() : simt::dynamic_shared(), &map, c, &full);
            if (wait) simt::mbar_wait(&full, 0);
        }
    });
}
// TMA: a box of 64 × 8 × 1 of a 3-D tensor of 16-bit values (80 × 5 × 2, rows padded to 96)
// at (16, 0, 1) lands in shared memory in box order, 128-byte swizzled, zeros past the tensor's
// columns and rows, and only when no thread can go on: a thread that reads before its mbarrier
// wait sees the old bytes. The phase waits for the copy's bytes after the expect_tx arrival.
static void test_tma() {
    const int X = 80, Y = 5, Z = 2, PITCH = 96;
    uint16_t* src; cudaMalloc(&src, Z * Y * PITCH * sizeof(uint16_t));
    std::vector<uint16_t> h(Z * Y * PITCH);
    for (int i = 0; i < Z * Y * PITCH; i++) h[i] = (uint16_t)(i + 1);
    cudaMemcpy(src, h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice);
    const uint64_t dims[3] = {X, Y, Z}, strides[2] = {PITCH * 2, Y * PITCH * 2};
    const unsigned box[3] = {64, 8, 1};
    CUtensorMap map;
    check(simt::tensor_map_encode(&map, 2, 3, src, dims, strides, box, true), "TMA: a 3-D tensor map of 16-bit values encodes");
    const uint64_t odd[2] = {PITCH * 2 + 8, Y * PITCH * 2};
    CUtensorMap bad;
    check(!simt::tensor_map_encode(&bad, 2, 3, src, dims, odd, box, true), "TMA: a row stride that is not a multiple of 16 bytes is refused");
    std::vector<uint16_t> got(8 * 64);
    bool early_old = true;
    simt::launch("tma_box", simt::Cfg{1, 64, 2048}, [&] {
        __shared__ uint64_t full;
        uint16_t* smem = (uint16_t*)shared_1024();
        if (threadIdx.x == 0) simt::mbar_init(&full, 1), simt::mbar_init_fence();
        for (int i = threadIdx.x; i < 8 * 64; i += 64) smem[i] = 0xffff;
        __syncthreads();
        if (threadIdx.x == 0) {
            const int c[3] = {16, 0, 1};
            simt::mbar_arrive_expect_tx(&full, 8 * 64 * 2);
            simt::tma_load(smem, &map, c, &full);
        }
        if (threadIdx.x == 32 && smem[0] != 0xffff) early_old = false;  // (read without waiting: the old bytes)
        simt::mbar_wait(&full, 0);
        if (threadIdx.x == 0)
            for (int i = 0; i < 8 * 64; i++) got[i] = smem[i];
    });
    bool ok = true;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 64; x++) {
            const int gx = 16 + x, off = y * 128 + x * 2, swz = off ^ (((off >> 7) & 7) << 4);
            const uint16_t want = gx < X && y < Y ? h[(1 * Y + y) * PITCH + gx] : 0;
            ok &= got[swz / 2] == want;
        }
    check(ok, "TMA: the box lands in box order, 128-byte swizzled, zeros outside the tensor");
    check(early_old, "TMA: a read before the mbarrier wait sees the old bytes");
    check(dies_with([&] { one_tma_copy(map, true, true, false); }, "TMA copy in flight"),
          "TMA: a block that ends with a copy no thread waited for is reported");
    check(dies_with([&] { one_tma_copy(map, false, true, true); }, "not 1024-byte aligned"),
          "TMA: a swizzled copy to dynamic shared memory as it starts (16 bytes into the window) is reported");
    check(dies_with([&] { one_tma_copy(map, true, false, true); }, "no fence.mbarrier_init since its init"),
          "TMA: a copy on an mbarrier whose init no fence.mbarrier_init published is reported");
    cudaFree(src);
}

// TMA store: the same box from shared memory (128-byte swizzled) back to the tensor at (16, 0, 1).
// Only the tensor's elements are written: the rows past Y and the columns past X (the rows'
// padding) keep their bytes. The store reads shared memory at the wait, so what a thread writes
// there after the store and before the wait is what lands. Unpublished writes (stmatrix with no
// fence.proxy.async) and a store never waited for are reported.
static void test_tma_store() {
    const int X = 80, Y = 5, Z = 2, PITCH = 96;
    uint16_t* dst; cudaMalloc(&dst, Z * Y * PITCH * sizeof(uint16_t));
    std::vector<uint16_t> h(Z * Y * PITCH, 0x1234);
    cudaMemcpy(dst, h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice);
    const uint64_t dims[3] = {X, Y, Z}, strides[2] = {PITCH * 2, Y * PITCH * 2};
    const unsigned box[3] = {64, 8, 1};
    CUtensorMap map;
    check(simt::tensor_map_encode(&map, 2, 3, dst, dims, strides, box, true), "TMA store: the tensor map encodes");
    auto store = [&](bool fence, bool wait) {
        simt::launch("tma_store_box", simt::Cfg{1, 32, 2048}, [&] {
            uint16_t* smem = (uint16_t*)shared_1024();
            if (!fence) { const uint32_t r[4] = {0, 0, 0, 0}; simt::stmatrix(r, 4, false, smem + (threadIdx.x % 8) * 64 + threadIdx.x / 8 * 8); }
            for (int i = threadIdx.x; i < 8 * 64; i += 32) smem[i] = 1;
            if (fence) simt::fence_proxy_async();
            simt::syncthreads();
            if (threadIdx.x == 0) {
                const int c[3] = {16, 0, 1};
                simt::tma_store(&map, smem, c);
                simt::bulk_commit();
                for (int i = 0; i < 8 * 64; i++) smem[i] = (uint16_t)(i + 7);  // (after the store, before its wait: these land)
                if (wait) simt::bulk_wait_read(0);
            }
        });
    };
    store(true, true);
    std::vector<uint16_t> got(h.size());
    cudaMemcpy(got.data(), dst, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int z = 0; z < Z; z++)
        for (int y = 0; y < Y; y++)
            for (int x = 0; x < PITCH; x++) {
                const int bx = x - 16, off = y * 128 + bx * 2, swz = off ^ (((off >> 7) & 7) << 4);
                const bool in = z == 1 && bx >= 0 && bx < 64 && x < X;
                ok &= got[(z * Y + y) * PITCH + x] == (in ? (uint16_t)(swz / 2 + 7) : 0x1234);
            }
    check(ok, "TMA store: the box goes to the tensor unswizzled, as its shared memory held it at the wait, nothing outside the tensor");
    check(dies_with([&] { store(true, false); }, "TMA stores it never waited for"), "TMA store: a thread that ends with a store never waited for is reported");
    check(dies_with([&] { store(false, true); }, "after the last fence.proxy.async"),
          "TMA store: a store of shared memory that stmatrix wrote with no fence.proxy.async since is reported");
    cudaFree(dst);
}

// Clusters of 2 blocks (4 blocks, 128 threads each): each block's first thread copies its half of
// a 64 × 16 tensor (rows 8·rank..) by a multicast TMA copy into both blocks, at offset
// 1024·rank. Each block then holds the whole tensor, its own bytes elsewhere untouched. Each
// first thread arrives at both blocks' second barrier, which needs those 2 arrivals. Wrong ways:
// (mode) 1, no cluster barrier after the inits (the other block's barrier is not yet there);
// 2, none before the exit (block 0 arrives at block 1 after it exited); 3, an mbarrier in
// static shared memory; 4, a grid that clusters do not divide.
static void cluster_copy(const CUtensorMap& map, int mode, std::vector<uint16_t>& got, std::vector<int>& ranks) {
    simt::launch("cluster_multicast", simt::Cfg{mode == 4 ? 3u : 4u, 128, 4096, nullptr, 2}, [&] {
        char* smem = shared_1024();
        uint64_t* bar = (uint64_t*)(smem + 2560);  // (full, both arrivals, block 1's end)
        __shared__ uint64_t static_bar;
        const int rank = simt::cluster_rank();
        if (threadIdx.x == 0) {
            simt::mbar_init(mode == 3 ? &static_bar : &bar[0], 1), simt::mbar_init(&bar[1], 2), simt::mbar_init(&bar[2], 1);
            simt::mbar_init_fence();
            ranks[blockIdx.x] = rank;
        }
        ((uint16_t*)(smem + 2048))[threadIdx.x] = (uint16_t)(1000 * blockIdx.x + threadIdx.x);  // (its own, not copied over)
        if (mode != 1) simt::cluster_sync();
        if (threadIdx.x == 0) {
            const int c[3] = {0, 8 * rank, 0};
            simt::mbar_arrive_expect_tx(&bar[0], 2 * 1024);  // (both halves: the other block's may land first)
            simt::tma_load_multicast(smem + 1024 * rank, &map, c, &bar[0], 3);
            simt::mbar_wait(&bar[0], 0);
            if (mode == 2 && rank == 0) simt::mbar_wait(&bar[2], 0);  // (until block 1 has ended)
            if (mode != 2 || rank == 0) simt::mbar_arrive_cluster(&bar[1], 0), simt::mbar_arrive_cluster(&bar[1], 1);
            if (mode != 2) simt::mbar_wait(&bar[1], 0);
        }
        simt::syncthreads();
        for (int i = threadIdx.x; i < 1024 + 128; i += 128) got[blockIdx.x * 1152 + i] = ((uint16_t*)smem)[i];
        if (mode == 2 && rank == 1 && threadIdx.x == 0) simt::mbar_arrive_cluster(&bar[2], 0);
        if (mode != 2) simt::cluster_sync();
    });
}
static void test_clusters() {
    uint16_t* src; cudaMalloc(&src, 16 * 64 * sizeof(uint16_t));
    std::vector<uint16_t> h(16 * 64);
    for (int i = 0; i < 16 * 64; i++) h[i] = (uint16_t)(i + 1);
    cudaMemcpy(src, h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice);
    const uint64_t dims[3] = {64, 16, 1}, strides[2] = {128, 16 * 128};
    const unsigned box[3] = {64, 8, 1};
    CUtensorMap map;
    check(simt::tensor_map_encode(&map, 2, 3, src, dims, strides, box, false), "clusters: the tensor map encodes");
    std::vector<uint16_t> got(4 * 1152);
    std::vector<int> ranks(4, -1);
    cluster_copy(map, 0, got, ranks);
    bool ok = true;
    for (int b = 0; b < 4; b++) {
        for (int i = 0; i < 1024; i++) ok &= got[b * 1152 + i] == h[i];
        for (int t = 0; t < 128; t++) ok &= got[b * 1152 + 1024 + t] == (uint16_t)(1000 * b + t);
    }
    check(ok, "clusters: multicast copies give each block of the cluster both halves, and its own bytes stay its own");
    check(ranks == std::vector<int>({0, 1, 0, 1}), "clusters: a block's rank in its cluster of 2 is blockIdx.x % 2");
    check(dies_with([&] { cluster_copy(map, 1, got, ranks); }, "never initialized"),
          "clusters: a copy into a block whose barriers no cluster barrier published yet is reported");
    check(dies_with([&] { cluster_copy(map, 2, got, ranks); }, "after all its threads exited"),
          "clusters: an arrival at a block of the cluster that has exited is reported");
    check(dies_with([&] { cluster_copy(map, 3, got, ranks); }, "outside dynamic shared memory"),
          "clusters: an mbarrier in static shared memory is refused (the emulator's blocks of a cluster would share it)");
    check(dies_with([&] { cluster_copy(map, 4, got, ranks); }, "clusters of 2 blocks for a grid of 3"),
          "clusters: a grid that clusters do not divide is refused");
    cudaFree(src);
}

// runs fn in a child; true if it exits with status 3 and its stderr mentions `needle`
static bool dies_with(const std::function<void()>& fn, const char* needle) {
    int pipefd[2];
    if (pipe(pipefd)) return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2); close(pipefd[0]);
        omp_set_num_threads(1);  // (the parent's OpenMP threads did not come along)
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    std::string err; char buf[512]; ssize_t k;
    while ((k = read(pipefd[0], buf, sizeof(buf))) > 0) err.append(buf, k);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 3 && err.find(needle) != std::string::npos;
}

// Page-locked buffers of asynchronous copies: the host may touch them only after a wait that
// covers the copy (the runs that must fail are in test_failures).
static void test_pinned() {
    float *dev, *host;
    cudaMalloc(&dev, 1000 * sizeof(float));
    cudaMallocHost((void**)&host, 1000 * sizeof(float));
    cudaEvent_t e; cudaEventCreate(&e);
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    cudaMemcpyAsync(dev, host, 1000 * sizeof(float), cudaMemcpyHostToDevice);
    float first = host[7];  // reading an upload's source while it is in flight is allowed
    cudaEventRecord(e); cudaEventSynchronize(e);
    host[7] = -1;           // and, after the wait, writing it
    cudaMemcpyAsync(host, dev, 1000 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaEventRecord(e); cudaEventSynchronize(e);
    check(first == 7 && host[7] == 7 && host[999] == 999, "a page-locked buffer is the host's again after an event recorded after its copy");
    cudaMemcpyAsync(host, dev, 1000 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaStreamSynchronize(nullptr);
    check(host[500] == 500, "... and after a stream sync");
    cudaEventDestroy(e); cudaFreeHost(host); cudaFree(dev);
}

// Two streams: the bytes one stream's queued copy uses are the other stream's again once it has
// waited for an event recorded after the copy.
static void test_streams() {
    const size_t n = 4 * 4096 / sizeof(float);  // whole pages inside the buffers
    float *a, *b;
    cudaMalloc(&a, n * sizeof(float)); cudaMalloc(&b, n * sizeof(float));
    cudaStream_t s1, s2; cudaStreamCreate(&s1); cudaStreamCreate(&s2);
    cudaEvent_t e; cudaEventCreate(&e);
    cudaMemsetAsync(a, 0, n * sizeof(float), s1);
    cudaEventRecord(e, s1);
    cudaStreamWaitEvent(s2, e, 0);  // (without it, the copy would read what s1's memset may still write)
    cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, s2);
    cudaEventRecord(e, s2);
    cudaStreamWaitEvent(s1, e, 0);
    simt::launch("after_the_wait", simt::Cfg{1, 32, 0, s1}, [&] { b[threadIdx.x * 64] = 1; a[threadIdx.x * 64] = 2; }, a, b);
    cudaStreamSynchronize(s1);
    check(b[64] == 1 && a[64] == 2, "a stream may write what another stream's copy used, once it waited for an event after the copy");
    cudaEventDestroy(e); cudaFree(a); cudaFree(b);
}

// Two streams: what a kernel (many blocks, so several threads fault at once) wrote may be copied
// by another stream once it has waited for an event recorded after the kernel.
static void test_kernel_writes() {
    const int n = 8 * 4096 / sizeof(float);
    float *a, *b;
    cudaMalloc(&a, n * sizeof(float)); cudaMalloc(&b, n * sizeof(float));
    cudaStream_t s1, s2; cudaStreamCreate(&s1); cudaStreamCreate(&s2);
    cudaEvent_t e; cudaEventCreate(&e);
    simt::launch("fill", simt::Cfg{n / 256, 256, 0, s1}, [&] { int i = blockIdx.x * 256 + threadIdx.x; a[i] = (float)i; }, a);
    cudaEventRecord(e, s1);
    cudaStreamWaitEvent(s2, e, 0);
    cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, s2);
    cudaStreamSynchronize(s2);
    bool same = true;
    for (int i = 0; i < n; i++) same &= b[i] == (float)i;
    check(same, "a copy on another stream reads what a kernel wrote, once it waited for an event after the kernel");
    cudaEventDestroy(e); cudaFree(a); cudaFree(b);
}

// .aligned instructions: a warp's lanes at the same number of them but at two places (two
// branches) would go on here and may hang on a GPU; they are reported, at the point where the
// lanes meet and at the block's end, with the source lines. Lanes that exited early, or that did
// other work in a branch and meet again at one instruction, are not.
static volatile int g_sink = 0;
// A kernel of `threads` threads: those with threadIdx.x / span == odd run op in one branch, the
// others in the other; then all run `after`
static bool branches_reported(const char* kernel, unsigned threads, unsigned odd, unsigned span, void (*op)(), void (*after)(), const char* needle) {
    return dies_with([=] {
        simt::launch(kernel, simt::Cfg{1, threads}, [=] {
            if (threadIdx.x / span == odd) {
                g_sink = 1;
                op();
            } else {
                op();
            }
            if (after) after();
        });
    }, needle);
}
static void test_aligned_sites() {
    check(branches_reported("syncthreads_apart", 64, 5, 1, [] { __syncthreads(); }, nullptr, "syncthreads_apart: threads 0 and 5 of warp 0"),
          "aligned: __syncthreads reached from two branches of a warp is reported, with the kernel, the threads and the warp");
    check(branches_reported("bar_arrive_apart", 32, 0, 1, [] { simt::bar_named(1, 32, false); }, nullptr, "test_simt.cpp:"),
          "aligned: bar.arrive from two branches, with nothing after it, is reported at the block's end, with its source line");
    check(branches_reported("wgmma_fence_apart", 128, 77, 1, [] { simt::wgmma_fence(); }, [] { simt::wgmma_wait(0); },
                            "wgmma_fence_apart: threads 0 and 13 of warp 2"),
          "aligned: a wgmma.fence from two branches is reported at the warpgroup's wait");
    check(branches_reported("wgmma_fence_warps_apart", 128, 1, 32, [] { simt::wgmma_fence(); }, [] { simt::wgmma_wait(0); },
                            "wgmma_fence_warps_apart: threads 0 and 32 of warpgroup 0"),
          "aligned: a wgmma.fence that one warp of a warpgroup runs from another branch is reported (a warpgroup instruction)");
    check(branches_reported("setmaxnreg_warps_apart", 256, 5, 32, [] { simt::aligned_site("setmaxnreg", true); }, nullptr,
                            "setmaxnreg_warps_apart: threads 0 and 32 of warpgroup 1"),
          "aligned: setmaxnreg that one warp of a warpgroup runs from another branch is reported at the block's end");
    // g++ may copy a line into two places (it did in column_sum_add_kernel); one line's two calls stand in for that here
    check(!dies_with([] {
              simt::launch("one_line", simt::Cfg{1, 32}, [] { if (threadIdx.x == 1) { g_sink = 5; __syncthreads(); } else { __syncthreads(); } });
          }, "simt:"),
          "aligned: one source line reached through two chains of calls is one instruction");
    check(!dies_with([] {
              simt::launch("aligned_converged", simt::Cfg{1, 64}, [] {
                  __shared__ __align__(16) uint16_t s[8 * 8];
                  if (threadIdx.x % 32 == 3) g_sink = 4;  // (a branch that meets again before the next one)
                  for (int i = 0; i < 3; i++) {
                      uint32_t r[1];
                      if (threadIdx.x < 8) for (int c = 0; c < 8; c++) s[threadIdx.x * 8 + c] = (uint16_t)c;
                      __syncthreads();
                      simt::ldmatrix(r, 1, false, &s[(threadIdx.x % 8) * 8]);
                      __syncthreads();
                  }
                  if (threadIdx.x >= 48) return;  // lanes that exit, then the others meet again
                  __syncthreads();
              });
          }, "simt:"),
          "aligned: lanes that branch and meet again, loop, or exit before a __syncthreads are not reported");
}

static void test_failures() {
    check(dies_with([] {
              simt::launch("divergent", simt::Cfg{1, 64}, [] {  // half a warp at the barrier, half at a shuffle
                  if (threadIdx.x % 32 < 16) __syncthreads(); else (void)__shfl_xor_sync(0xffffffffu, 1, 1);
              });
          }, "divergent: deadlock"),
          "__syncthreads in divergent code is reported as a deadlock, with the kernel's name");
    check(dies_with([] {
              simt::launch("early_exit", simt::Cfg{1, 32}, [] { if (threadIdx.x == 3) return; (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1); });
          }, "early_exit: a warp collective"),
          "a shuffle after some lanes of the warp returned is reported");
    check(dies_with([] {
              float* p; cudaMalloc(&p, 100 * sizeof(float));
              simt::launch("past_the_end", simt::Cfg{1, 128}, [&] { volatile float x = p[threadIdx.x * 64]; (void)x; });
          }, "in past_the_end, block"),
          "reading past a cudaMalloc buffer's end is caught and names the kernel");
    check(dies_with([] {
              static float host[4];
              float* p = host;
              simt::launch("given_host_memory", simt::Cfg{1, 32}, [&] { p[threadIdx.x % 4] = 0; }, p);
          }, "given_host_memory: argument 0 is not device memory"),
          "a host pointer passed to a kernel is refused at the launch");
    check(dies_with([] {
              cublasLtHandle_t h; cublasLtCreate(&h);
              cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
              cublasLtMatrixLayout_t la, lb, ld;  // D 4×3 = A(4×5)·B(5×3), but A declared 5×4 without TRANSA
              cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 5, 4, 5);
              cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 5, 3, 5);
              cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 4, 3, 4);
              cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
              cublasLtMatmulHeuristicResult_t heur; int found;
              cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &heur, &found);
              float *A, *B, *D; cudaMalloc(&A, 80); cudaMalloc(&B, 60); cudaMalloc(&D, 48);
              float one = 1, zero = 0;
              cublasLtMatmul(h, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &heur.algo, nullptr, 0, nullptr);
          }, "A's layout"),
          "cuBLASLt: a layout that disagrees with the transposes is refused");
    check(dies_with([] {
              simt::launch("ldmatrix_unaligned", simt::Cfg{1, 32}, [] {
                  __shared__ __align__(16) uint16_t s[8 * 16];
                  uint32_t r[1];
                  simt::ldmatrix(r, 1, false, &s[(threadIdx.x % 8) * 16 + 4]);
              });
          }, "ldmatrix_unaligned: ldmatrix row address"),
          "ldmatrix from a row address that is not 16-byte aligned is reported");
    check(dies_with([] {
              float* p; cudaMalloc(&p, 64 * sizeof(float));
              simt::launch("cp_async_never_waited", simt::Cfg{1, 32}, [&] {
                  __shared__ __align__(16) float s[128];
                  simt::cp_async16(&s[threadIdx.x * 4], p, 16);
              });
          }, "cp_async_never_waited: a thread ended with cp.async copies"),
          "a thread that ends with a cp.async it never waited for is reported");
    // a download read before its wait; an upload's source overwritten before its wait; an event
    // recorded between two downloads into one buffer covers only the first
    struct Bufs { float *dev, *host; Bufs() { cudaMalloc(&dev, 4096); cudaMallocHost((void**)&host, 4096); } };
    check(dies_with([] {
              Bufs b;
              cudaMemcpyAsync(b.host, b.dev, 4096, cudaMemcpyDeviceToHost);
              volatile float x = b.host[3]; (void)x;
          }, "the host touched page-locked memory at"),
          "reading a download's buffer before waiting for the copy is reported");
    check(dies_with([] {
              Bufs b;
              cudaMemcpyAsync(b.dev, b.host, 4096, cudaMemcpyHostToDevice);
              b.host[3] = 1;
          }, "an asynchronous copy out of it may still be running"),
          "overwriting an upload's source before waiting for the copy is reported");
    check(dies_with([] {
              Bufs b; cudaEvent_t e; cudaEventCreate(&e);
              cudaMemcpyAsync(b.host, b.dev, 4096, cudaMemcpyDeviceToHost);
              cudaEventRecord(e);
              cudaMemcpyAsync(b.host, b.dev, 4096, cudaMemcpyDeviceToHost);
              cudaEventSynchronize(e);
              volatile float x = b.host[3]; (void)x;
          }, "an asynchronous copy into it may still be running"),
          "an event waits only for the copies queued before it");
    // another stream's queued copy: its destination may not be touched, its source not written
    struct Two { float *a, *b; cudaStream_t s1, s2; Two() {
        cudaMalloc(&a, 16384); cudaMalloc(&b, 16384); cudaStreamCreate(&s1); cudaStreamCreate(&s2);
        cudaMemcpyAsync(b, a, 16384, cudaMemcpyDeviceToDevice, s2); } };
    check(dies_with([] {
              Two t; float* b = t.b;
              simt::launch("reads_too_early", simt::Cfg{1, 32, 0, t.s1}, [&] { volatile float x = b[threadIdx.x * 64]; (void)x; }, b);
          }, "reads_too_early on stream"),
          "a kernel reading what another stream's queued copy writes, without waiting, is reported");
    check(dies_with([] {
              Two t; float* a = t.a;
              simt::launch("writes_too_early", simt::Cfg{1, 32, 0, t.s1}, [&] { a[threadIdx.x * 64] = 0; }, a);
          }, "may still be reading"),
          "a kernel overwriting another stream's queued copy's source, without waiting, is reported");
    check(dies_with([] {
              float *a, *b; cudaStream_t s1, s2;
              cudaMalloc(&a, 16384); cudaMalloc(&b, 16384); cudaStreamCreate(&s1); cudaStreamCreate(&s2);
              cudaMemsetAsync(a, 0, 16384, s1);
              cudaMemcpyAsync(b, a, 16384, cudaMemcpyDeviceToDevice, s2);
          }, "cudaMemcpyAsync on stream"),
          "a copy reading what another stream's queued memset writes, without waiting, is reported");
    // a kernel's or a matmul's writes, and a matmul's reads, are learnt: another stream's copy or
    // memset may not use them before it waits (a missing nccl_stream_waits_compute, comm.h)
    check(dies_with([] {
              float *a, *b; cudaStream_t s1, s2;
              cudaMalloc(&a, 16384); cudaMalloc(&b, 16384); cudaStreamCreate(&s1); cudaStreamCreate(&s2);
              simt::launch("writes_a", simt::Cfg{1, 32, 0, s1}, [&] { a[threadIdx.x * 128] = 1; }, a);
              cudaMemcpyAsync(b, a, 16384, cudaMemcpyDeviceToDevice, s2);
          }, "read device memory at 0x"),
          "a copy reading what a kernel of another stream wrote, without waiting, is reported");
    struct Mm { float *A, *B, *D; cublasLtHandle_t h; cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t l;
                cublasLtMatmulHeuristicResult_t heur; cudaStream_t s1, s2;
        Mm() {  // D = A·B, 64×64 fp32 (16 KiB each: whole pages)
            cudaMalloc(&A, 16384); cudaMalloc(&B, 16384); cudaMalloc(&D, 16384);
            cudaStreamCreate(&s1); cudaStreamCreate(&s2);
            cublasLtCreate(&h); cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
            cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 64, 64, 64);
            cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
            int found; cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &heur, &found);
            float one = 1, zero = 0;
            cublasLtMatmul(h, op, &one, A, l, B, l, &zero, D, l, D, l, &heur.algo, nullptr, 0, s1);
        } };
    check(dies_with([] { Mm m; cudaMemsetAsync(m.A, 0, 16384, m.s2); }, "cudaMemsetAsync on stream"),
          "a memset overwriting what a matmul of another stream reads, without waiting, is reported");
    check(dies_with([] { Mm m; float* c; cudaMalloc(&c, 16384); cudaMemcpyAsync(c, m.D, 16384, cudaMemcpyDeviceToDevice, m.s2); }, "that cublasLtMatmul on stream"),
          "a copy reading what a matmul of another stream wrote, without waiting, is reported");
}

// The async proxy: a wgmma reads a tile that cp.async or stmatrix wrote only after a
// fence.proxy.async (by the writers, or by a thread the write reached through a barrier).
// Without the fence the run is reported; with it the same product runs.
static void wgmma_after_generic_writes(bool by_stmatrix, bool fence) {
    static uint16_t* src = nullptr;
    if (!src) cudaMalloc(&src, 2048), cudaMemset(src, 0, 2048);
    simt::launch(by_stmatrix ? "wgmma_after_stmatrix" : "wgmma_after_cp_async", simt::Cfg{1, 128, 4096}, [&] {
        char* smem = (char*)simt::dynamic_shared();
        if (by_stmatrix) {  // warp 0 stores 4 matrices of 8 rows: bytes 0..511 of B
            const uint32_t r[4] = {1u, 2u, 3u, 4u};
            if (threadIdx.x < 32) simt::stmatrix(r, 4, false, smem + 16 * threadIdx.x);
        } else {
            simt::cp_async16(smem + 16 * threadIdx.x, src + 8 * threadIdx.x, 16);  // B's 2048 bytes
            simt::cp_async_wait_all();
        }
        if (fence) simt::fence_proxy_async();
        __syncthreads();
        float d[32] = {};
        const uint32_t a[4] = {};
        // B K-major, no swizzle: (k, n) at 16(n%8) + 256(n/8) + 2(k%8) + 128(k/8)
        simt::wgmma_fence();
        simt::wgmma_m64k16(d, a, (uint64_t)(simt::shared_offset(smem) >> 4) | 8ull << 16 | 16ull << 32, 64, false, false);
        simt::wgmma_commit();
        simt::wgmma_wait(0);
    });
}
static void test_wgmma_proxy() {
    for (int by_stmatrix = 0; by_stmatrix < 2; by_stmatrix++) {
        const char* how = by_stmatrix ? "stmatrix" : "cp.async";
        char name[200];
        snprintf(name, sizeof(name), "async proxy: a wgmma reading what %s wrote, without fence.proxy.async, is reported", how);
        check(dies_with([by_stmatrix] { wgmma_after_generic_writes(by_stmatrix, false); }, "after the last fence.proxy.async"), name);
        snprintf(name, sizeof(name), "async proxy: with the fence before the barrier, the wgmma after %s runs", how);
        check(dies_with([by_stmatrix] { wgmma_after_generic_writes(by_stmatrix, true); _exit(3); }, ""), name);
    }
}

static void test_wgmma_failures() {
    // an operand past the end of the block's shared memory (its last 16-byte chunks), and a wgmma wider than 256
    auto wgmma_at = [](size_t start, int n) {
        simt::launch("wgmma_shape", simt::Cfg{1, 128, 2048}, [&] {
            float d[132] = {};
            uint32_t a[4] = {};
            simt::wgmma_fence();
            simt::wgmma_m64k16(d, a, (uint64_t)((simt::shared_offset(simt::dynamic_shared()) + start) >> 4) | 8ull << 16 | 16ull << 32, n, false, false);
            simt::wgmma_commit();
            simt::wgmma_wait(0);
        });
    };
    check(dies_with([&] { wgmma_at(0, 64); _exit(3); }, ""), "a wgmma whose B fills the block's 2048 bytes of shared memory runs");
    check(dies_with([&] { wgmma_at(16, 64); }, "wgmma reads B outside the block's dynamic shared memory"),
          "a wgmma whose B ends 16 bytes past the block's shared memory is reported");
    check(dies_with([&] { wgmma_at(0, 264); }, "a wgmma with N = 264"), "a wgmma wider than 256 columns is reported");
    check(dies_with([] {
        simt::launch("wgmma_half_wait", simt::Cfg{1, 128, 2048}, [&] {
            float d[32] = {};
            uint32_t a[4] = {};
            simt::wgmma_fence();
            simt::wgmma_m64k16(d, a, (uint64_t)(simt::shared_offset(simt::dynamic_shared()) >> 4) | 8ull << 16 | 8ull << 32, 64, false, true);
            simt::wgmma_commit();
            if (threadIdx.x < 96) simt::wgmma_wait(0);  // warp 3 leaves without waiting
        });
    }, "wgmma products it never waited for"), "a warpgroup whose last warp never waits for its wgmma is reported");
    check(dies_with([] {
        simt::launch("wgmma_swizzle_unaligned", simt::Cfg{1, 128, 4096}, [&] {
            float d[32] = {};
            const uint32_t a[4] = {};
            simt::wgmma_fence();
            simt::wgmma_m64k16(d, a, (uint64_t)((simt::shared_offset(simt::dynamic_shared()) + 128) >> 4) | 1ull << 16 | 64ull << 32 | 1ull << 62,
                               64, false, true);
            simt::wgmma_commit();
            simt::wgmma_wait(0);
        });
    }, "does not start at a multiple of 1024"), "a 128-byte swizzled wgmma operand off its 1024-byte pattern is reported");
    // a second product after a wait (whose D the thread then reads) with no wgmma.fence between
    check(dies_with([] {
        simt::launch("wgmma_unfenced", simt::Cfg{1, 128, 2048}, [&] {
            float d[32] = {};
            const uint32_t a[4] = {};
            const uint64_t desc = (uint64_t)(simt::shared_offset(simt::dynamic_shared()) >> 4) | 8ull << 16 | 8ull << 32;
            simt::wgmma_fence();
            simt::wgmma_m64k16(d, a, desc, 64, false, false);
            simt::wgmma_commit();
            simt::wgmma_wait(0);
            d[0] += 1.0f;
            simt::wgmma_m64k16(d, a, desc, 64, false, true);
            simt::wgmma_commit();
            simt::wgmma_wait(0);
        });
    }, "no wgmma.fence since"), "a wgmma issued after a wait with no wgmma.fence between is reported");
    // registers the product is still reading (A) or will write (D) touched between issue and wait
    for (int which = 0; which < 2; which++)
        check(dies_with([which] {
            simt::launch("wgmma_early_write", simt::Cfg{1, 128, 2048}, [&] {
                float d[32] = {};
                uint32_t a[4] = {};
                simt::wgmma_fence();
                simt::wgmma_m64k16(d, a, (uint64_t)(simt::shared_offset(simt::dynamic_shared()) >> 4) | 8ull << 16 | 8ull << 32, 64, false, true);
                simt::wgmma_commit();
                if (threadIdx.x == 37) { if (which) d[5] = 1.0f; else a[2] = 7u; }
                simt::wgmma_wait(0);
            });
        }, which ? "thread 37 wrote the D registers" : "thread 37 wrote the A registers"),
              which ? "a thread writing the D registers of a wgmma before its wait is reported"
                    : "a thread writing the A registers of a wgmma before its wait is reported");
}

int main() {
    test_mma(false);
    test_mma(true);
    test_ldmatrix();
    test_shuffles();
    test_races();
    test_block_order();
    test_thread_order();
    test_cp_async();
    test_cp_async_groups();
    test_mbarrier();
    test_named_barriers();
    test_wgmma();
    test_warpgroups_apart();
    test_tma();
    test_tma_store();
    test_clusters();
    test_wgmma_failures();
    test_wgmma_proxy();
    test_pinned();
    test_streams();
    test_kernel_writes();
    test_failures();
    test_aligned_sites();
    printf("# test_simt: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
