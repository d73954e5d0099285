/*
test_comm — the communicator under mpirun (run with -np 4, and -np 3 for uneven chunks):
every collective against values each rank can compute alone, the chunk layout, the byte
counters against the ring formulas, and the mesh's groups (tp fastest-varying).
Prints "ok"/"not ok" lines from rank 0 (a check fails if it fails on any rank).
*/
#include <cmath>
#include "../llmc/comm.h"

static Mesh mesh;
static int n_fail = 0;

static void report(bool ok_here, const char* name) {
    double bad = ok_here ? 0 : 1;
    comm_sum_doubles(mesh.world_group, &bad, 1);
    if (mesh.rank == 0) printf("%s - %s (np=%d)\n", bad == 0 ? "ok" : "not ok", name, mesh.world);
    if (bad) n_fail++;
}

// the value element i has on rank r before a reduction: exact in fp32 (small integers)
static float val(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 997)); }

int main(int argc, char** argv) {
    mesh_start(&mesh, &argc, &argv);
    mesh_build(&mesh, 1, 1, 1);
    Group& w = mesh.world_group;
    const int P = w.size, r = w.rank;
    bool ok;

    for (size_t S : {(size_t)1, (size_t)7, (size_t)1000, (size_t)4099}) {  // includes S < P: empty chunks
        char name[96];
        // chunks tile [0, S)
        ok = true;
        size_t covered = 0;
        for (int q = 0; q < P; q++) { ok &= chunk_begin(S, P, q) == covered || chunk_begin(S, P, q) == S; covered = chunk_end(S, P, q); }
        ok &= covered == S;
        snprintf(name, sizeof(name), "chunks of %zu elements tile the buffer", S);
        report(ok, name);

        // all-reduce: the exact sum, on every rank
        std::vector<float> buf(S), scratch;
        for (size_t i = 0; i < S; i++) buf[i] = val(r, i);
        comm_reset_stats(w);
        comm_all_reduce_sum(w, buf.data(), S, &scratch);
        ok = true;
        for (size_t i = 0; i < S; i++) { float want = 0; for (int q = 0; q < P; q++) want += val(q, i); ok &= buf[i] == want; }
        ok &= std::fabs(w.bytes[ALL_REDUCE] - 2.0 * (P - 1) / P * 4 * S) < 1e-6 && w.bytes[REDUCE_SCATTER] == 0 && w.bytes[ALL_GATHER] == 0;
        snprintf(name, sizeof(name), "all_reduce_sum of %zu: exact sum, counted as 2(P-1)/P*M bytes", S);
        report(ok, name);

        // reduce-scatter: my chunk of the sum
        std::vector<float> send(S), mine(std::max<size_t>(1, chunk_end(S, P, r) - chunk_begin(S, P, r)));
        for (size_t i = 0; i < S; i++) send[i] = val(r, i);
        comm_reset_stats(w);
        comm_reduce_scatter_sum(w, send.data(), mine.data(), S);
        ok = std::fabs(w.bytes[REDUCE_SCATTER] - 1.0 * (P - 1) / P * 4 * S) < 1e-6;
        for (size_t i = chunk_begin(S, P, r); i < chunk_end(S, P, r); i++) {
            float want = 0; for (int q = 0; q < P; q++) want += val(q, i);
            ok &= mine[i - chunk_begin(S, P, r)] == want;
        }
        snprintf(name, sizeof(name), "reduce_scatter_sum of %zu: my chunk of the sum, (P-1)/P*M bytes", S);
        report(ok, name);

        // all-gather (async start + wait): every rank's chunk everywhere
        std::vector<float> g(S, -1.0f);
        for (size_t i = chunk_begin(S, P, r); i < chunk_end(S, P, r); i++) g[i] = val(r, i);
        CommHandle h;
        comm_all_gather_start(w, g.data(), S, &h);
        comm_wait(&h);
        ok = true;
        for (int q = 0; q < P; q++) for (size_t i = chunk_begin(S, P, q); i < chunk_end(S, P, q); i++) ok &= g[i] == val(q, i);
        snprintf(name, sizeof(name), "all_gather of %zu: every chunk from its owner", S);
        report(ok, name);
    }

    // broadcast, send/recv ring, all-to-all, barrier, deterministic double sums
    std::vector<float> b(5);
    for (int i = 0; i < 5; i++) b[i] = r == P - 1 ? 42.0f + i : 0.0f;
    comm_broadcast(w, b.data(), 5, P - 1);
    ok = true; for (int i = 0; i < 5; i++) ok &= b[i] == 42.0f + i;
    report(ok, "broadcast from the last rank");

    float out = (float)r, in = -1;
    int next = (r + 1) % P, prev = (r + P - 1) % P;
    if (r % 2 == 0) { comm_send(w, &out, 1, next); comm_recv(w, &in, 1, prev); }
    else { comm_recv(w, &in, 1, prev); comm_send(w, &out, 1, next); }
    report(in == (float)prev, "send/recv around a ring");

    std::vector<float> a2a_send(2 * P), a2a_recv(2 * P);
    for (int q = 0; q < P; q++) { a2a_send[2 * q] = (float)(r * 100 + q); a2a_send[2 * q + 1] = -(float)(r * 100 + q); }
    comm_all_to_all(w, a2a_send.data(), a2a_recv.data(), 2);
    ok = true; for (int q = 0; q < P; q++) ok &= a2a_recv[2 * q] == (float)(q * 100 + r) && a2a_recv[2 * q + 1] == -(float)(q * 100 + r);
    report(ok, "all_to_all: block q of rank r lands as block r of rank q");
    comm_barrier(w);

    double d[2] = {0.1 * (r + 1), 1e-17};
    comm_sum_doubles(w, d, 2);
    double want = 0; for (int q = 0; q < P; q++) want += 0.1 * (q + 1);
    report(d[0] == want && d[1] == P * 1e-17, "sum of doubles in rank order");

    // the mesh: with tp=2 (when the world allows) tp peers are neighbours, dp groups stride by tp
    if (P % 2 == 0) {
        Mesh m2 = mesh;
        mesh_build(&m2, 2, 1, 1);
        float me = (float)r, peers[2] = {0, 0};
        // gather world ranks within the tp group: [my, other] by tp rank
        std::vector<float> tpbuf(2, 0.0f);
        tpbuf[m2.tp_rank] = me;
        comm_all_gather(m2.tp_group, tpbuf.data(), 2);
        peers[0] = tpbuf[0]; peers[1] = tpbuf[1];
        ok = m2.dp == P / 2 && m2.tp_rank == r % 2 && m2.dp_rank == r / 2 && peers[0] == (float)(r - r % 2) && peers[1] == (float)(r - r % 2 + 1);
        std::vector<float> dpbuf(m2.dp, 0.0f);
        dpbuf[m2.dp_rank] = me;
        comm_all_gather(m2.dp_group, dpbuf.data(), m2.dp);
        for (int q = 0; q < m2.dp; q++) ok &= dpbuf[q] == (float)(q * 2 + r % 2);
        report(ok, "mesh with tp=2: tp groups are neighbours, dp groups stride by tp");
    }
    if (mesh.rank == 0) printf("# test_comm: np=%d, %d failed\n", P, n_fail);
    mesh_finish(&mesh);
    return n_fail ? 1 : 0;
}
