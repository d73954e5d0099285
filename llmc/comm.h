/*
comm.h — the communicator and the process mesh.

The world's ranks are laid out as dp × pp × cp × tp, tp varying fastest:

  rank = ((dp_i · pp + pp_i) · cp + cp_i) · tp + tp_i

so a rank's tp peers are its neighbours. One group a dimension: the ranks that differ only there.
Chunked collectives give rank r chunk r of ⌈S/P⌉ elements (the ZeRO shard layout), and an
all-reduce is a reduce-scatter plus an all-gather, so every rank ends with the same bits.
Backends: MPI (CPU buffers, or GPU buffers through the host) and NCCL (GPU buffers; --comm).
Started collectives run on a communication stream; the host never blocks. Each call counts the
bytes one rank sends under the ring algorithm (--comm-stats).

Main functions: mesh_start, mesh_build (the groups), comm_all_reduce_sum, comm_reduce_scatter_sum,
comm_all_gather (and their _start forms), comm_wait, comm_ring_send_start, comm_ring_recv,
comm_sendrecv, comm_barrier, comm_first_differing (do all ranks have rank 0's values?).

Tests: test/test_comm.cpp (each collective under mpirun, the counters); the NCCL path by
test_dp.sh, test_tp.sh, test_pp.sh and test_cp.sh on the CPU SIMT emulator (test/simt_nccl.h).
More: docs/parallelism.md.
*/
#pragma once
#include <optional>
#include <string>
#include <vector>
#include "common.h"
#include "profiler.h"
#include "comm_timeout.h"
#ifdef LLMC_MPI
#include <mpi.h>
#endif
// LLMC_USE_NCCL: the NCCL path is compiled — in a CUDA build that found nccl.h (LLMC_NCCL), and in
// the trainer on the CPU SIMT emulator, where test/simt_nccl.h (forced in by the Makefile)
// carries out each NCCL call with MPI, so that make test runs this path without GPUs.
#if defined(LLMC_NCCL) && (defined(__CUDACC__) || defined(LLMC_SIMT))
#define LLMC_USE_NCCL 1
#ifndef LLMC_SIMT
#include <nccl.h>
#endif
#define NCCL_CHECK(call) do { ncclResult_t r_ = (call); \
    if (r_ != ncclSuccess) fatal("NCCL error at %s:%d: %s", __FILE__, __LINE__, ncclGetErrorString(r_)); } while (0)
#endif

enum CommOp { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, SEND_RECV, ALL_TO_ALL, BARRIER, NUM_COMM_OPS };
inline const char* const COMM_OP_NAMES[NUM_COMM_OPS] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                  "send_recv", "all_to_all", "barrier"};

struct Group {
    std::string name;
    int rank = 0, size = 1;
#ifdef LLMC_MPI
    MPI_Comm comm = MPI_COMM_NULL;
#endif
    double bytes[NUM_COMM_OPS] = {0};  // sent by this rank, ring model, since the last reset
    int calls[NUM_COMM_OPS] = {0};
#ifdef LLMC_USE_NCCL
    ncclComm_t nccl = nullptr;                 // set by comm_nccl_init for GPU buffers
    cudaStream_t compute = 0, stream = 0;      // the trainer's stream; this group's communication stream
    cudaEvent_t ready = nullptr;               // recorded on the compute stream: the data is there
    cudaEvent_t comm_done = nullptr;           // recorded after the last asynchronous collective
    void* pad[2] = {nullptr, nullptr};         // padded buffers for uneven chunks (grow): [0] for the
    size_t pad_bytes[2] = {0, 0};              // compute stream, [1] for the communication stream
    ncclComm_t ring[2][3] = {};                // the ring's communicators, per way and colour (pp group)
    cudaStream_t ring_stream[2] = {0, 0};      // and its sends' streams, per way (comm_ring_send_start)
#endif
};

// True when this group's collective on buf goes through NCCL.
inline bool comm_uses_nccl(const Group& g, const void* buf) {
#ifdef LLMC_USE_NCCL
    return g.nccl != nullptr && is_device_ptr(buf);
#else
    (void)g; (void)buf; return false;
#endif
}

inline void comm_count(Group& g, CommOp op, double bytes) { g.bytes[op] += bytes; g.calls[op]++; }
inline void comm_reset_stats(Group& g) { for (int i = 0; i < NUM_COMM_OPS; i++) { g.bytes[i] = 0; g.calls[i] = 0; } }
inline double comm_bytes_sent(const Group& g) { double s = 0; for (double b : g.bytes) s += b; return s; }

// The chunk of an S-element buffer owned by rank r of P: [begin, end).
inline size_t chunk_size(size_t S, int P) { return ceil_div(S, (size_t)P); }
inline size_t chunk_begin(size_t S, int P, int r) { size_t b = (size_t)r * chunk_size(S, P); return b < S ? b : S; }
inline size_t chunk_end(size_t S, int P, int r) { size_t e = (size_t)(r + 1) * chunk_size(S, P); return e < S ? e : S; }

// A host copy of a device buffer for the MPI calls (a no-op view of a host buffer). The copies
// use the legacy default stream, which waits for the work queued on the trainer's stream.
template <class floatX> struct Staged {
    floatX* dev = nullptr;
    std::vector<floatX> host;
    floatX* ptr;
    size_t n;
    Staged(const floatX* p, size_t count, bool copy_in) : ptr(const_cast<floatX*>(p)), n(count) {
#ifdef LLMC_CUDA
        if (count && is_device_ptr(p)) {
            dev = const_cast<floatX*>(p);
            host.resize(count);
            if (copy_in) CUDA_CHECK(cudaMemcpy(host.data(), p, count * sizeof(floatX), cudaMemcpyDeviceToHost));
            ptr = host.data();
        }
#else
        (void)copy_in;
#endif
    }
    void copy_out() {
#ifdef LLMC_CUDA
        if (dev) CUDA_CHECK(cudaMemcpy(dev, host.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
#endif
    }
};

#ifdef LLMC_MPI
inline std::vector<int> chunk_counts(size_t S, int P, std::vector<int>* displs) {
    std::vector<int> counts(P);
    displs->resize(P);
    for (int r = 0; r < P; r++) {
        size_t b = chunk_begin(S, P, r), e = chunk_end(S, P, r);
        if (e > 0x7fffffff) fatal("a collective of %zu elements is too large for MPI's int counts", S);
        counts[r] = (int)(e - b);
        (*displs)[r] = (int)b;
    }
    return counts;
}

// MPI's name for our element types, and their sum.
template <class floatX> inline void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {  // bf16 or fp16
    const floatX* a = (const floatX*)in;
    floatX* b = (floatX*)inout;
    for (int i = 0; i < *len; i++) b[i] = from_f<floatX>(to_f(a[i]) + to_f(b[i]));
}
template <class floatX> inline MPI_Datatype mpi_type() { return std::is_same_v<floatX, float> ? MPI_FLOAT : MPI_UINT16_T; }
template <class floatX> inline MPI_Op mpi_sum() {
    if constexpr (std::is_same_v<floatX, float>) return MPI_SUM;
    else {
        static MPI_Op op = MPI_OP_NULL;  // (one per type)
        if (op == MPI_OP_NULL) MPI_Op_create(half_sum<floatX>, /*commute=*/1, &op);
        return op;
    }
}
#endif

#ifdef LLMC_USE_NCCL
template <class floatX> inline ncclDataType_t nccl_type() {
    return std::is_same_v<floatX, float> ? ncclFloat32 : std::is_same_v<floatX, bf16> ? ncclBfloat16 : ncclFloat16;
}
// At least n elements of device scratch for the compute stream (which = 0) or the communication
// stream (1): two buffers, so a prefetch in flight never shares one with a blocking collective.
template <class floatX> inline floatX* nccl_pad(Group& g, int which, size_t n) {
    if (g.pad_bytes[which] < n * sizeof(floatX)) {
        if (g.pad[which]) { CUDA_CHECK(cudaDeviceSynchronize()); CUDA_CHECK(cudaFree(g.pad[which])); }
        g.pad_bytes[which] = n * sizeof(floatX);
        CUDA_CHECK(cudaMalloc(&g.pad[which], g.pad_bytes[which]));
    }
    return (floatX*)g.pad[which];
}
// The communication stream (or another of the group's: the ring's) waits until the compute
// stream has produced the data.
inline void nccl_stream_waits_compute(Group& g, cudaStream_t stream = nullptr) {
    CUDA_CHECK(cudaEventRecord(g.ready, g.compute));
    CUDA_CHECK(cudaStreamWaitEvent(stream ? stream : g.stream, g.ready, 0));
}
#endif

// ----------------------------------------------------------------------------
// collectives

#ifdef LLMC_USE_NCCL
// recv ← my chunk of Σ_ranks send on `stream`. When P divides S, NCCL works on the buffers
// themselves; otherwise through a padded buffer [P·c to reduce | my chunk] (pad buffer `which`:
// 0 for the compute stream, 1 for the communication stream), so that it sees P equal chunks of
// c (the tail zeroed).
template <class floatX> inline void nccl_reduce_scatter(Group& g, const floatX* send, floatX* recv, size_t S, cudaStream_t stream, int which) {
    const size_t c = chunk_size(S, g.size), b = chunk_begin(S, g.size, g.rank), e = chunk_end(S, g.size, g.rank);
    if (S % g.size == 0) { NCCL_CHECK(ncclReduceScatter(send, recv, c, nccl_type<floatX>(), ncclSum, g.nccl, stream)); return; }
    floatX* pad = nccl_pad<floatX>(g, which, (size_t)g.size * c + c);
    floatX* mine = pad + (size_t)g.size * c;
    CUDA_CHECK(cudaMemcpyAsync(pad, send, S * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(pad + S, 0, ((size_t)g.size * c - S) * sizeof(floatX), stream));
    NCCL_CHECK(ncclReduceScatter(pad, mine, c, nccl_type<floatX>(), ncclSum, g.nccl, stream));
    CUDA_CHECK(cudaMemcpyAsync(recv, mine, (e - b) * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
}
#endif

// recv (my chunk, chunk_end − chunk_begin elements) ← my chunk of Σ_ranks send (S elements)
template <class floatX> inline void comm_reduce_scatter_sum(Group& g, const floatX* send, floatX* recv, size_t S) {
    CommWait wait_("reduce_scatter", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, REDUCE_SCATTER, (double)sizeof(floatX) * S * (g.size - 1) / g.size);
    if (g.size == 1) { ctx_copy(Ctx(), recv, send, S * sizeof(floatX)); return; }  // host or device, no staging
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, send)) { nccl_reduce_scatter(g, send, recv, S, g.compute, 0); return; }
#endif
#ifdef LLMC_MPI
    std::vector<int> displs, counts = chunk_counts(S, g.size, &displs);
    Staged<floatX> s(send, S, true), r(recv, counts[g.rank], false);
    MPI_Reduce_scatter(s.ptr, r.ptr, counts.data(), mpi_type<floatX>(), mpi_sum<floatX>(), g.comm);
    r.copy_out();
#endif
}

// Handle of a collective started by comm_all_gather_start or comm_reduce_scatter_sum_start (a
// no-op handle when it completed at once).
struct CommHandle {
#ifdef LLMC_MPI
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int> counts, displs;  // must outlive the request
    std::vector<char> staged;         // a ring send's host copy of a GPU buffer (comm_ring_send_start)
#endif
#ifdef LLMC_USE_NCCL
    cudaEvent_t done = nullptr;       // NCCL: recorded on the communication stream after the transfer
    cudaStream_t compute = 0;
#endif
    bool active = false;
    const char* op = nullptr;         // what was started, over which group (--comm-timeout's message)
    const char* group = nullptr;
};

#ifdef LLMC_USE_NCCL
// Every rank's chunk of buf (S elements, in place) on `stream`: NCCL's in-place all-gather when P
// divides S, otherwise through a padded buffer [P·c gathered | my chunk] (pad buffer `which`, 0:
// compute stream, 1: communication stream).
template <class floatX> inline void nccl_all_gather(Group& g, floatX* buf, size_t S, cudaStream_t stream, int which) {
    const size_t c = chunk_size(S, g.size), b = chunk_begin(S, g.size, g.rank), e = chunk_end(S, g.size, g.rank);
    if (S % g.size == 0) { NCCL_CHECK(ncclAllGather(buf + b, buf, c, nccl_type<floatX>(), g.nccl, stream)); return; }
    floatX* gathered = nccl_pad<floatX>(g, which, (size_t)g.size * c + c);
    floatX* mine = gathered + (size_t)g.size * c;
    CUDA_CHECK(cudaMemcpyAsync(mine, buf + b, (e - b) * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
    NCCL_CHECK(ncclAllGather(mine, gathered, c, nccl_type<floatX>(), g.nccl, stream));
    CUDA_CHECK(cudaMemcpyAsync(buf, gathered, S * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
}

// h completes with what is queued on g's communication stream (or `stream`) so far.
inline void nccl_handle_started(Group& g, CommHandle* h, cudaStream_t stream = nullptr) {
    if (!h->done) CUDA_CHECK(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming));  // once per handle
    CUDA_CHECK(cudaEventRecord(h->done, stream ? stream : g.stream));
    h->compute = g.compute;
    h->active = true;
}
#endif

// Starts gathering every rank's chunk of buf (S elements, in place). Wait with comm_wait.
template <class floatX> inline void comm_all_gather_start(Group& g, floatX* buf, size_t S, CommHandle* h) {
    CommWait wait_("all_gather", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    h->op = "all_gather", h->group = g.name.c_str();
    comm_count(g, ALL_GATHER, (double)sizeof(floatX) * S * (g.size - 1) / g.size);
    h->active = false;
    if (g.size == 1) return;
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, buf)) {  // on the communication stream, once the compute stream has written buf
        nccl_stream_waits_compute(g);
        nccl_all_gather(g, buf, S, g.stream, 1);
        nccl_handle_started(g, h);
        return;
    }
#endif
#ifdef LLMC_MPI
    h->counts = chunk_counts(S, g.size, &h->displs);
    if (is_device_ptr(buf)) {  // staged through the host: done now (NCCL will overlap it)
        Staged<floatX> b(buf, S, true);
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.ptr, h->counts.data(), h->displs.data(), mpi_type<floatX>(), g.comm);
        b.copy_out();
        return;
    }
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, h->counts.data(), h->displs.data(), mpi_type<floatX>(), g.comm, &h->req);
    h->active = true;
#endif
}

// comm_reduce_scatter_sum started on the communication stream when it goes through NCCL (ZeRO:
// one unit's gradients while the backward of the next goes on); otherwise done now. Wait with
// comm_wait before reading recv; send must not change until then.
template <class floatX> inline void comm_reduce_scatter_sum_start(Group& g, const floatX* send, floatX* recv, size_t S, CommHandle* h) {
    CommWait wait_("reduce_scatter", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    h->op = "reduce_scatter", h->group = g.name.c_str();
    h->active = false;
#ifdef LLMC_USE_NCCL
    if (g.size > 1 && comm_uses_nccl(g, send)) {  // once the compute stream has written send
        comm_count(g, REDUCE_SCATTER, (double)sizeof(floatX) * S * (g.size - 1) / g.size);
        nccl_stream_waits_compute(g);
        nccl_reduce_scatter(g, send, recv, S, g.stream, 1);
        nccl_handle_started(g, h);
        return;
    }
#endif
    comm_reduce_scatter_sum(g, send, recv, S);
}

// Completes a started collective: MPI waits on the host; NCCL makes the compute stream wait.
inline void comm_wait(CommHandle* h) {
    CommWait wait_(h->op ? h->op : "a started collective", h->group);
#ifdef LLMC_USE_NCCL
    if (h->active && h->done) { CUDA_CHECK(cudaStreamWaitEvent(h->compute, h->done, 0)); h->active = false; return; }
#endif
#ifdef LLMC_MPI
    if (h->active) MPI_Wait(&h->req, MPI_STATUS_IGNORE);
#endif
    h->active = false;
}
template <class floatX> inline void comm_all_gather(Group& g, floatX* buf, size_t S) {
    CommWait wait_("all_gather", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
#ifdef LLMC_USE_NCCL
    if (g.size > 1 && comm_uses_nccl(g, buf)) {  // blocking: on the compute stream, in order, no events
        comm_count(g, ALL_GATHER, (double)sizeof(floatX) * S * (g.size - 1) / g.size);
        nccl_all_gather(g, buf, S, g.compute, 0);
        return;
    }
#endif
    CommHandle h;
    comm_all_gather_start(g, buf, S, &h);
    comm_wait(&h);
}

// buf ← Σ_ranks buf, identical on every rank (reduce-scatter, then all-gather).
template <class floatX> inline void comm_all_reduce_sum(Group& g, floatX* buf, size_t S, std::vector<floatX>* scratch) {
    CommWait wait_("all_reduce", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    if (g.size == 1) { comm_count(g, ALL_REDUCE, 0); return; }
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, buf)) {  // NCCL's ring all-reduce: every rank ends with the same bits too
        comm_count(g, ALL_REDUCE, 2.0 * sizeof(floatX) * S * (g.size - 1) / g.size);
        NCCL_CHECK(ncclAllReduce(buf, buf, S, nccl_type<floatX>(), ncclSum, g.nccl, g.compute));
        return;
    }
#endif
    size_t b = chunk_begin(S, g.size, g.rank), e = chunk_end(S, g.size, g.rank);
    Staged<floatX> all(buf, S, true);  // one staging for both halves when buf is on a GPU
    scratch->resize(std::max<size_t>(e - b, 1));
    comm_reduce_scatter_sum(g, all.ptr, scratch->data(), S);
    memcpy(all.ptr + b, scratch->data(), (e - b) * sizeof(floatX));
    comm_all_gather(g, all.ptr, S);
    all.copy_out();
    // book it as one all-reduce (2(P−1)/P·M), not as its two halves
    const double half = (double)sizeof(floatX) * S * (g.size - 1) / g.size;
    g.bytes[REDUCE_SCATTER] -= half; g.calls[REDUCE_SCATTER]--;
    g.bytes[ALL_GATHER] -= half; g.calls[ALL_GATHER]--;
    comm_count(g, ALL_REDUCE, 2 * half);
}

// The same, started on the communication stream when it goes through NCCL (DDP: one unit's
// gradients while the backward goes on); otherwise done now. comm_join completes them all.
template <class floatX> inline void comm_all_reduce_sum_start(Group& g, floatX* buf, size_t S, std::vector<floatX>* scratch) {
    CommWait wait_("all_reduce", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
#ifdef LLMC_USE_NCCL
    if (g.size > 1 && comm_uses_nccl(g, buf)) {
        comm_count(g, ALL_REDUCE, 2.0 * sizeof(floatX) * S * (g.size - 1) / g.size);
        nccl_stream_waits_compute(g);
        NCCL_CHECK(ncclAllReduce(buf, buf, S, nccl_type<floatX>(), ncclSum, g.nccl, g.stream));
        CUDA_CHECK(cudaEventRecord(g.comm_done, g.stream));
        return;
    }
#endif
    comm_all_reduce_sum(g, buf, S, scratch);
}
// The compute stream waits for every collective started on the group's communication stream.
inline void comm_join(Group& g) {
#ifdef LLMC_USE_NCCL
    if (g.nccl) CUDA_CHECK(cudaStreamWaitEvent(g.compute, g.comm_done, 0));
#else
    (void)g;
#endif
}

// v[i] ← Σ_ranks v[i] for a few doubles, summed in rank order: identical everywhere, and the
// same sum for the same values whatever MPI's algorithm.
inline void comm_sum_doubles(Group& g, double* v, int n) {
    CommWait wait_("all_reduce (a few doubles)", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    if (g.size == 1) return;
#ifdef LLMC_MPI
    std::vector<double> all((size_t)n * g.size);
    MPI_Allgather(v, n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, g.comm);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < g.size; r++) s += all[(size_t)r * n + i];
        v[i] = s;
    }
#endif
}

// v[i] ← max over the ranks of v[i] for a few floats (FP8 delayed scaling's amaxes): exact, so
// identical everywhere.
inline void comm_max_floats(Group& g, float* v, int n) {
    CommWait wait_("all_reduce (max of a few floats)", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    if (g.size == 1) return;
#ifdef LLMC_MPI
    std::vector<float> all((size_t)n * g.size);
    MPI_Allgather(v, n, MPI_FLOAT, all.data(), n, MPI_FLOAT, g.comm);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < g.size; r++) v[i] = std::max(v[i], all[(size_t)r * n + i]);
#endif
}

template <class floatX> inline void comm_broadcast(Group& g, floatX* buf, size_t n, int root) {
    CommWait wait_("broadcast", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, BROADCAST, g.size > 1 ? (double)sizeof(floatX) * n : 0);
    if (g.size == 1) return;
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, buf)) { NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_type<floatX>(), root, g.nccl, g.compute)); return; }
#endif
#ifdef LLMC_MPI
    Staged<floatX> b(buf, n, true);
    MPI_Bcast(b.ptr, (int)n, mpi_type<floatX>(), root, g.comm);
    b.copy_out();
#endif
}
template <class floatX> inline void comm_send(Group& g, const floatX* buf, size_t n, int peer) {
    CommWait wait_("send", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, SEND_RECV, (double)sizeof(floatX) * n);
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, buf)) { NCCL_CHECK(ncclSend(buf, n, nccl_type<floatX>(), peer, g.nccl, g.compute)); return; }
#endif
#ifdef LLMC_MPI
    Staged<floatX> b(buf, n, true);
    MPI_Send(b.ptr, (int)n, mpi_type<floatX>(), peer, 0, g.comm);
#endif
}
template <class floatX> inline void comm_recv(Group& g, floatX* buf, size_t n, int peer) {
    CommWait wait_("recv", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, buf)) { NCCL_CHECK(ncclRecv(buf, n, nccl_type<floatX>(), peer, g.nccl, g.compute)); return; }
#endif
#ifdef LLMC_MPI
    Staged<floatX> b(buf, n, false);
    MPI_Recv(b.ptr, (int)n, mpi_type<floatX>(), peer, 0, g.comm, MPI_STATUS_IGNORE);
    b.copy_out();
#endif
}

// ---- the ring: messages to the next rank or the previous one, sent without waiting
// (pipeline.h's: a stage hands its output to rank + 1 and its input's gradient to rank − 1, and
// its schedule assumes a send never waits for the receiver). A message goes one way round the
// ring, dir = +1 (to rank + 1 mod P) or −1; messages of one way between two ranks arrive in the
// order they were sent, those of the two ways are matched apart.
// MPI: an MPI_Isend (from a host copy when buf is on a GPU), tag = the way.
// NCCL runs the operations of one communicator in the order they are issued: a rank's send
// queued before its receive would hold the receive until the peer took the send, which the
// schedules do not assume. So each link of the ring (rank j → j + 1 mod P, and back) gets
// communicators whose only traffic that way is its: link j's colour is j mod 2, and with P odd
// the last link (P − 1 → 0) a third colour, so the two links at a rank differ in colour (a
// rank's sends one way use its outgoing link's colour, its receives that way the incoming
// link's). Per way and colour one communicator over the group (comm_nccl_init, for the pp
// group): on each rank it only sends or only receives. Sends run on the way's stream (after
// the compute stream's event: the data is there), receives on the compute stream (whose later
// kernels read what arrives) — the receives wait, the sends do not, on the GPU; the host waits
// for neither. (This needs the GPU to run the two streams' kernels side by side: with
// CUDA_DEVICE_MAX_CONNECTIONS=1, which puts every stream in one hardware queue, a receive
// waiting there ahead of a send its peer needs first could hang.)
inline int ring_way(int dir) { return dir > 0 ? 0 : 1; }
inline int ring_colors(int P) { return P % 2 == 0 ? 2 : 3; }
inline int ring_color(int P, int link) { return P % 2 == 1 && link == P - 1 ? 2 : link % 2; }
// Starts sending n elements of buf to rank + dir (mod P); buf must not change until the send is
// done (comm_send_done, or comm_wait: MPI waits on the host, NCCL makes the compute stream wait).
template <class floatX> inline void comm_ring_send_start(Group& g, const floatX* buf, size_t n, int dir, CommHandle* h) {
    CommWait wait_("ring send", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    h->op = "ring send", h->group = g.name.c_str();
    comm_count(g, SEND_RECV, (double)sizeof(floatX) * n);
    h->active = false;
    const int peer = (g.rank + dir + g.size) % g.size;
#ifdef LLMC_USE_NCCL
    if (g.ring[0][0] && is_device_ptr(buf)) {
        const int way = ring_way(dir), link = dir > 0 ? g.rank : peer;  // (link j joins j and j + 1)
        nccl_stream_waits_compute(g, g.ring_stream[way]);
        NCCL_CHECK(ncclSend(buf, n, nccl_type<floatX>(), peer, g.ring[way][ring_color(g.size, link)], g.ring_stream[way]));
        nccl_handle_started(g, h, g.ring_stream[way]);
        return;
    }
#endif
#ifdef LLMC_MPI
    if (n > 0x7fffffff) fatal("a send of %zu elements is too large for MPI's int counts", n);
    const void* from = buf;
#ifdef LLMC_CUDA
    if (is_device_ptr(buf)) {  // (through host memory: a GPU the ranks share, or no NCCL)
        h->staged.resize(n * sizeof(floatX));
        CUDA_CHECK(cudaMemcpy(h->staged.data(), buf, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        from = h->staged.data();
    }
#endif
    MPI_Isend(from, (int)n, mpi_type<floatX>(), peer, ring_way(dir), g.comm, &h->req);
    h->active = true;
#else
    (void)buf; (void)peer; fatal("comm_ring_send_start: this build has no MPI");
#endif
}
// Whether a send that comm_ring_send_start began is done (buf may then change), without waiting.
inline bool comm_send_done(CommHandle* h) {
#ifdef LLMC_USE_NCCL
    if (h->active && h->done) {
        const cudaError_t e = cudaEventQuery(h->done);
        if (e == cudaSuccess) h->active = false;
        else if (e == cudaErrorNotReady) (void)cudaGetLastError();  // (not an error: clear it)
        else CUDA_CHECK(e);
        return !h->active;
    }
#endif
#ifdef LLMC_MPI
    if (h->active) {
        int flag = 0;
        MPI_Test(&h->req, &flag, MPI_STATUS_IGNORE);
        if (flag) h->active = false;
    }
#endif
    return !h->active;
}
// Receives into buf (n elements) the next message that came this way round the ring: from rank −
// dir (mod P). On a GPU with NCCL it is queued on the compute stream, which waits for it.
template <class floatX> inline void comm_ring_recv(Group& g, floatX* buf, size_t n, int dir) {
    CommWait wait_("ring recv", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    const int peer = (g.rank - dir + g.size) % g.size;
#ifdef LLMC_USE_NCCL
    if (g.ring[0][0] && is_device_ptr(buf)) {
        const int way = ring_way(dir), link = dir > 0 ? peer : g.rank;
        NCCL_CHECK(ncclRecv(buf, n, nccl_type<floatX>(), peer, g.ring[way][ring_color(g.size, link)], g.compute));
        return;
    }
#endif
#ifdef LLMC_MPI
    Staged<floatX> b(buf, n, false);
    MPI_Recv(b.ptr, (int)n, mpi_type<floatX>(), peer, ring_way(dir), g.comm, MPI_STATUS_IGNORE);
    b.copy_out();
#else
    (void)buf; (void)peer; fatal("comm_ring_recv: this build has no MPI");
#endif
}
// Sends n elements of send to rank `to` and receives n into recv from rank `from`, at once (no
// deadlock whatever the peers: context_parallel.h's ring, where every rank sends and receives).
template <class floatX> inline void comm_sendrecv(Group& g, const floatX* send, size_t n, int to, floatX* recv, int from) {
    CommWait wait_("sendrecv", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, SEND_RECV, (double)sizeof(floatX) * n);
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, send)) {
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(send, n, nccl_type<floatX>(), to, g.nccl, g.compute));
        NCCL_CHECK(ncclRecv(recv, n, nccl_type<floatX>(), from, g.nccl, g.compute));
        NCCL_CHECK(ncclGroupEnd());
        return;
    }
#endif
#ifdef LLMC_MPI
    if (n > 0x7fffffff) fatal("a send of %zu elements is too large for MPI's int counts", n);
    Staged<floatX> s(send, n, true), r(recv, n, false);
    MPI_Sendrecv(s.ptr, (int)n, mpi_type<floatX>(), to, 1, r.ptr, (int)n, mpi_type<floatX>(), from, 1, g.comm, MPI_STATUS_IGNORE);
    r.copy_out();
#else
    (void)send; (void)to; (void)recv; (void)from; fatal("comm_sendrecv: this build has no MPI");
#endif
}
// comm_sendrecv started on the communication stream when it goes through NCCL (context_parallel.h:
// the next block of keys and values travels while this one's attention runs); otherwise done now.
// Wait with comm_wait before reading recv; send must not change, nor recv be read, until then.
template <class floatX> inline void comm_sendrecv_start(Group& g, const floatX* send, size_t n, int to, floatX* recv, int from, CommHandle* h) {
    CommWait wait_("sendrecv", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    h->op = "sendrecv", h->group = g.name.c_str();
    h->active = false;
#ifdef LLMC_USE_NCCL
    if (comm_uses_nccl(g, send)) {  // once the compute stream has written send and is done reading recv
        comm_count(g, SEND_RECV, (double)sizeof(floatX) * n);
        nccl_stream_waits_compute(g);
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(send, n, nccl_type<floatX>(), to, g.nccl, g.stream));
        NCCL_CHECK(ncclRecv(recv, n, nccl_type<floatX>(), from, g.nccl, g.stream));
        NCCL_CHECK(ncclGroupEnd());
        nccl_handle_started(g, h);
        return;
    }
#endif
    comm_sendrecv(g, send, n, to, recv, from);
}
// send holds P blocks of n elements, block r for rank r; recv gets block `rank` of every rank.
template <class floatX> inline void comm_all_to_all(Group& g, const floatX* send, floatX* recv, size_t n) {
    CommWait wait_("all_to_all", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, ALL_TO_ALL, (double)sizeof(floatX) * n * (g.size - 1));
#ifdef LLMC_USE_NCCL
    if (g.size > 1 && comm_uses_nccl(g, send)) {  // P sends and receives in one group
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < g.size; r++) {
            NCCL_CHECK(ncclSend(send + (size_t)r * n, n, nccl_type<floatX>(), r, g.nccl, g.compute));
            NCCL_CHECK(ncclRecv(recv + (size_t)r * n, n, nccl_type<floatX>(), r, g.nccl, g.compute));
        }
        NCCL_CHECK(ncclGroupEnd());
        return;
    }
#endif
#ifdef LLMC_MPI
    if (g.size > 1) {
        Staged<floatX> s(send, n * g.size, true), r(recv, n * g.size, false);
        MPI_Alltoall(s.ptr, (int)n, mpi_type<floatX>(), r.ptr, (int)n, mpi_type<floatX>(), g.comm);
        r.copy_out();
        return;
    }
#endif
    ctx_copy(Ctx(), recv, send, n * sizeof(floatX));
}
// Every rank gets rank `root`'s n values: a broadcast, written as a sum to which the other ranks
// add zeros (exact).
inline void comm_from_rank(Group& g, double* v, int n, int root = 0) {
    if (g.rank != root) std::fill(v, v + n, 0.0);
    comm_sum_doubles(g, v, n);
}
inline void comm_barrier(Group& g) {
    CommWait wait_("barrier", g.name.c_str());  // (--comm-timeout: comm_timeout.h)
    comm_count(g, BARRIER, 0);
#ifdef LLMC_MPI
    if (g.size > 1) MPI_Barrier(g.comm);
#endif
}

// The lowest rank of g whose n values differ from rank 0's, or -1 where all agree. rank0, when
// given, gets rank 0's values. Each value must be exact in a double (an integer below 2^53).
inline int comm_first_differing(Group& g, const double* v, int n, double* rank0 = nullptr) {
    std::vector<double> first(v, v + n);
    comm_from_rank(g, first.data(), n);
    bool differs = false;
    for (int i = 0; i < n; i++) differs = differs || v[i] != first[i];
    float mark = differs ? (float)(g.size - g.rank) : 0.0f;  // (the largest mark is the lowest rank; exact below 2^24)
    comm_max_floats(g, &mark, 1);
    if (rank0) std::copy(first.begin(), first.end(), rank0);
    return mark > 0 ? g.size - (int)mark : -1;
}

// --profile: a row per kind of communication, "comm: <what>" (profiler.h), with the bytes this
// rank sent meanwhile by the group's counters; none for a group of one rank (which never
// communicates). What a row's time means: for a blocking collective, all of it; for an
// asynchronous start (NCCL), only the start; for a wait ("<collective> wait (exposed)"), the
// part of the transfers that overlap did not hide.
struct CommScope {
    Group& g;
    double before;
    std::optional<OpScope> op;
    CommScope(const Ctx& ctx, Group& grp, const char* what) : g(grp), before(comm_bytes_sent(grp)) {
        if (grp.size > 1) op.emplace(ctx, 0, 0, "comm: %s", what);
    }
    ~CommScope() { if (op) op->add_bytes(comm_bytes_sent(g) - before); }
};

// ----------------------------------------------------------------------------
// the process mesh

struct Mesh {
    int rank = 0, world = 1, local_rank = 0, local_size = 1;  // local: among this node's ranks (→ GPU)
    int dp = 1, pp = 1, cp = 1, tp = 1;
    int dp_rank = 0, pp_rank = 0, cp_rank = 0, tp_rank = 0;
    Group world_group, dp_group, pp_group, cp_group, tp_group;
    // the ranks that hold the same parameters: dp × cp (context-parallel ranks see parts of the
    // same sequences, so their gradients are summed like data-parallel ones); built when cp > 1
    Group dp_cp_group;
    Group& grads() { return cp > 1 ? dp_cp_group : dp_group; }  // whose gradients are summed, whose optimizer shards
    const Group& grads() const { return cp > 1 ? dp_cp_group : dp_group; }
    Group emb_group;  // pipeline: this rank's first and last stage, which both hold the embeddings (else alone)
};

#ifdef LLMC_MPI
inline void comm_leave_collectively() {
    int init = 0, fin = 0;
    MPI_Initialized(&init); MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}
#endif

#ifdef LLMC_MPI
// Was this process started by a launcher (mpirun, srun, prterun, mpiexec)? Each tells the processes
// it starts in their environment: OpenMPI's mpirun OMPI_COMM_WORLD_SIZE, a PMIx server (srun
// --mpi=pmix, OpenMPI 5) PMIX_RANK, PMI-1/2 (srun --mpi=pmi2, MPICH) PMI_RANK, srun itself
// SLURM_STEP_NUM_TASKS.
inline bool started_by_launcher() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"})
        if (getenv(v)) return true;
    return false;
}
#endif

// Starts the communication layer: MPI_Init under a launcher; a single process otherwise, without
// MPI (MPI_Init there is a "singleton": OpenMPI forks a daemon, orted, which costs startup time and
// fails in some containers; every collective of a one-rank group returns before touching MPI).
// The world group works from here on; mesh_build makes the others.
inline void mesh_start(Mesh* m, int* argc, char*** argv) {
#ifdef LLMC_MPI
    if (started_by_launcher()) {  // (else Mesh's defaults: rank 0 of 1)
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &m->world);
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &m->local_rank);
        MPI_Comm_size(node, &m->local_size);
        MPI_Comm_free(&node);
        g_leave_collectively = comm_leave_collectively;
        m->world_group.comm = MPI_COMM_WORLD;  // (mesh_build makes it again, with the other groups)
    }
#else
    (void)argc; (void)argv;
#endif
    g_rank = m->rank;
    g_world = m->world;
    m->world_group.name = "world", m->world_group.rank = m->rank, m->world_group.size = m->world;
}

// Builds the dp × pp × cp × tp groups. Fails (usage error, before any large allocation) if
// the world size is not a multiple of tp·pp·cp.
inline void mesh_build(Mesh* m, int tp, int pp, int cp) {
    int model_ranks = tp * pp * cp;
    if (m->world % model_ranks != 0)
        usage_error("world size %d is not divisible by tp*pp*cp = %d*%d*%d = %d (dp = world/(tp*pp*cp))",
                    m->world, tp, pp, cp, model_ranks);
    m->tp = tp; m->pp = pp; m->cp = cp; m->dp = m->world / model_ranks;
    int r = m->rank;
    m->tp_rank = r % tp; r /= tp;
    m->cp_rank = r % cp; r /= cp;
    m->pp_rank = r % pp; r /= pp;
    m->dp_rank = r;
    auto make = [&](Group* g, const char* name, int color, int key, int size) {
        g->name = name; g->rank = key; g->size = size;
#ifdef LLMC_MPI
        if (m->world > 1) MPI_Comm_split(MPI_COMM_WORLD, color, key, &g->comm);
#else
        (void)color;
#endif
    };
    // color = every coordinate but the group's own; key = the group's own coordinate
    make(&m->world_group, "world", 0, m->rank, m->world);
    make(&m->dp_group, "dp", (m->pp_rank * cp + m->cp_rank) * tp + m->tp_rank, m->dp_rank, m->dp);
    make(&m->pp_group, "pp", (m->dp_rank * cp + m->cp_rank) * tp + m->tp_rank, m->pp_rank, pp);
    make(&m->cp_group, "cp", (m->dp_rank * pp + m->pp_rank) * tp + m->tp_rank, m->cp_rank, cp);
    make(&m->tp_group, "tp", (m->dp_rank * pp + m->pp_rank) * cp + m->cp_rank, m->tp_rank, tp);
    if (cp > 1) make(&m->dp_cp_group, "dp_cp", m->pp_rank * tp + m->tp_rank, m->dp_rank * cp + m->cp_rank, m->dp * cp);
    const bool ends = pp > 1 && (m->pp_rank == 0 || m->pp_rank == pp - 1);  // (a color of its own otherwise)
    make(&m->emb_group, "emb", ends ? (m->dp_rank * cp + m->cp_rank) * tp + m->tp_rank : m->world + m->rank,
         ends ? (m->pp_rank == 0 ? 0 : 1) : 0, ends ? 2 : 1);
}

#ifdef LLMC_USE_NCCL
inline std::vector<ncclComm_t>& nccl_comms() { static std::vector<ncclComm_t> all; return all; }  // every one made
// --comm-timeout (comm_timeout.h): every NCCL communicator aborted, so that no kernel waits on.
inline void comm_abort_nccl() { for (ncclComm_t c : nccl_comms()) ncclCommAbort(c); }
#endif
// Gives every group of more than one rank an NCCL communicator on ctx's GPU, bootstrapped over
// MPI, with its own communication stream. Collective over the world.
inline void comm_nccl_init(Mesh* m, const Ctx& ctx) {
#if defined(LLMC_USE_NCCL) && defined(LLMC_MPI)
    g_watchdog.abort_comms = comm_abort_nccl;
#endif
#if defined(LLMC_USE_NCCL) && defined(LLMC_MPI)
    auto make = [](Group& g, ncclComm_t* c) {  // a communicator over g's ranks (collective over them)
        CommWait wait_("NCCL's setup (ncclCommInitRank)", g.name.c_str());  // (a network it cannot reach hangs here)
        ncclUniqueId id;
        if (g.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, g.comm);
        NCCL_CHECK(ncclCommInitRank(c, g.size, id, g.rank));
        nccl_comms().push_back(*c);  // (--comm-timeout aborts them all: comm_abort_nccl)
    };
    for (Group* g : {&m->world_group, &m->dp_group, &m->pp_group, &m->cp_group, &m->tp_group, &m->dp_cp_group}) {
        if (g->size == 1) continue;
        make(*g, &g->nccl);
        g->compute = ctx.stream;
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->comm_done, cudaEventDisableTiming));
    }
    Group& pp = m->pp_group;  // the pipeline's ring (comm_ring_send_start): per way, a communicator a colour
    for (int way = 0; pp.size > 1 && way < 2; way++) {
        for (int c = 0; c < ring_colors(pp.size); c++) make(pp, &pp.ring[way][c]);
        CUDA_CHECK(cudaStreamCreateWithFlags(&pp.ring_stream[way], cudaStreamNonBlocking));
    }
#else
    (void)m; (void)ctx;
    usage_error("--comm nccl: this build has no NCCL (a CUDA build finds it through nccl.h); use --comm mpi");
#endif
}
inline bool comm_have_nccl() {
#if defined(LLMC_USE_NCCL) && defined(LLMC_MPI)
    return true;
#else
    return false;
#endif
}

inline void mesh_finish(Mesh*) {
#ifdef LLMC_MPI
    comm_leave_collectively();
#endif
}
