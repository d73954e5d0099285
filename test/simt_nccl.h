/*
simt_nccl.h — NCCL emulated over MPI, for the trainer on the CPU SIMT emulator (test/simt.h).

NCCL puts one rank on each GPU, so the NCCL path of llmc/comm.h (communicators, the padded
reduce-scatter and all-gather, DDP's all-reduce, ZeRO-3's prefetch on the communication stream,
the events between the streams) can only run where there are several GPUs. Under the emulator
every rank's "GPU memory" is its own host memory, so MPI carries out each NCCL call on the same
pointers. build/train_gpt_simt is built with this header (and -DLLMC_NCCL), so `--device cuda
--comm nccl` under mpirun runs that path in make test.

It models the data each call moves and NCCL's documented contract: device buffers, in-place or
disjoint buffers, every rank calling the same collective with the same count and type (a
mismatch is reported), sends and receives in a group or a send left in flight. A reduction adds
the ranks' values in rank order in fp32 and rounds once. Each collective's bytes stay closed to
the other streams until one waits for it (simt.h), so a missing comm_wait, comm_join or
nccl_stream_waits_compute is reported.

Test: test/test_dp.sh, test_tp.sh, test_pp.sh and test_cp.sh with DEVICE=cuda COMM=nccl on
build/train_gpt_simt (run_tests.sh). More: docs/emulator.md.
*/
#pragma once
#include <mpi.h>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4 } ncclResult_t;
typedef enum { ncclFloat32, ncclBfloat16, ncclFloat16 } ncclDataType_t;
typedef enum { ncclSum } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct ncclComm { MPI_Comm comm; int rank, size; };
typedef ncclComm* ncclComm_t;

namespace simt_nccl {
inline int group_depth = 0;
inline std::vector<MPI_Request> pending;  // send/recv of the open group

inline size_t type_bytes(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }
inline float load(const void* p, size_t i, ncclDataType_t t) {
    if (t == ncclFloat32) return ((const float*)p)[i];
    if (t == ncclFloat16) return simt::half_value(((const uint16_t*)p)[i], 0, true);  // (test/simt.h's decoder)
    uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16; float f; memcpy(&f, &u, 4); return f;
}
inline void store(void* p, size_t i, float f, ncclDataType_t t) {
    if (t == ncclFloat32) { ((float*)p)[i] = f; return; }
    if (t == ncclFloat16) { ((uint16_t*)p)[i] = simt::fp16_code(f); return; }  // (round to nearest even)
    uint32_t u; memcpy(&u, &f, 4);
    uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40) : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    ((uint16_t*)p)[i] = h;  // round to nearest even (NaN stays NaN)
}
// the contract every collective shares: an initialized communicator, device buffers, and the
// same call (kind, count, type, root) on every rank of the communicator
inline void check_call(const char* what, ncclComm_t comm, const void* a, const void* b, size_t count, ncclDataType_t t, int root = 0) {
    if (!comm) simt::die("NCCL %s: the communicator was never initialized (ncclCommInitRank)", what);
    if ((a && !simt::device_owns(a)) || (b && !simt::device_owns(b)))
        simt::die("NCCL %s on rank %d: a buffer is not device memory", what, comm->rank);
    unsigned long long kind = 1469598103934665603ull;  // FNV-1a of the call's name (the same on every rank)
    for (const char* c = what; *c; c++) kind = (kind ^ (unsigned char)*c) * 1099511628211ull;
    unsigned long long mine[4] = {kind, count, (unsigned long long)t, (unsigned long long)root};
    std::vector<unsigned long long> all(4 * (size_t)comm->size);
    MPI_Allgather(mine, 4, MPI_UNSIGNED_LONG_LONG, all.data(), 4, MPI_UNSIGNED_LONG_LONG, comm->comm);
    for (int r = 0; r < comm->size; r++)
        if (memcmp(&all[4 * (size_t)r], mine, sizeof(mine)))
            simt::die("NCCL %s: rank %d called it with count %zu, rank %d with a different call or count %llu", what,
                      comm->rank, count, r, all[4 * (size_t)r + 1]);
}
// [a, a + na) and [b, b + nb) are the same range or do not overlap
// a collective on `stream`: runs as that stream's work, then notes what it read and wrote (simt.h's
// g_side: until another stream waits for it, that stream's work may not touch these bytes)
struct Noted {
    const void* stream; const void* send; size_t ns; const void* recv; size_t nr;
    Noted(const void* s, const char* op, const void* send_, size_t ns_, const void* recv_, size_t nr_)
        : stream(s), send(send_), ns(ns_), recv(recv_), nr(nr_) { simt::side_enter(s, op); }
    ~Noted() { if (send) simt::side_note(stream, send, ns, false); simt::side_note(stream, recv, nr, true); }
};
inline void check_disjoint(const char* what, const void* a, size_t na, const void* b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (x != y && x < y + nb && y < x + na) simt::die("NCCL %s: send and receive buffers overlap without being in place", what);
}
}  // namespace simt_nccl

inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static int made = 0;  // (world rank of the maker, how many it made): unique in the job
    int w; MPI_Comm_rank(MPI_COMM_WORLD, &w);
    memset(id, 0, sizeof(*id));
    int v[2] = {w, made++};
    memcpy(id->internal, v, sizeof(v));
    return ncclSuccess;
}
// Collective over the world here (MPI_Comm_split): comm.h initializes every rank's group of
// each kind in the same order, so all world ranks take part. SIMT_NCCL_INIT_STALL=R: world rank
// R never returns from it, the way a real setup hangs on a network it cannot reach (test_dp).
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int v[2]; memcpy(v, id.internal, sizeof(v));
    int w; MPI_Comm_rank(MPI_COMM_WORLD, &w);
    if (getenv("SIMT_NCCL_INIT_STALL") && atoi(getenv("SIMT_NCCL_INIT_STALL")) == w)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    auto* c = new ncclComm;
    MPI_Comm_split(MPI_COMM_WORLD, v[0] * 4096 + v[1], rank, &c->comm);
    MPI_Comm_rank(c->comm, &c->rank); MPI_Comm_size(c->comm, &c->size);
    if (c->size != nranks || c->rank != rank)
        simt::die("ncclCommInitRank: rank %d of %d, but %d ranks share its unique id", rank, nranks, c->size);
    *comm = c;
    return ncclSuccess;
}
// Aborting a communicator (--comm-timeout, before the process exits): the emulated one holds
// nothing that outlives the process.
inline ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    check_call("ncclAllReduce", comm, send, recv, count, t);
    const size_t sz = type_bytes(t);
    Noted noted(stream, "ncclAllReduce", send, count * sz, recv, count * sz);
    check_disjoint("ncclAllReduce", send, count * sz, recv, count * sz);
    std::vector<char> all(count * sz * comm->size);
    MPI_Allgather(send, (int)(count * sz), MPI_BYTE, all.data(), (int)(count * sz), MPI_BYTE, comm->comm);
    for (size_t i = 0; i < count; i++) {
        float s = 0.0f;
        for (int r = 0; r < comm->size; r++) s += load(all.data() + r * count * sz, i, t);
        store(recv, i, s, t);
    }
    return ncclSuccess;
}
// recv (recvcount) ← this rank's slot of Σ_ranks send (nranks · recvcount)
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    check_call("ncclReduceScatter", comm, send, recv, recvcount, t);
    const size_t sz = type_bytes(t), chunk = recvcount * sz;
    Noted noted(stream, "ncclReduceScatter", send, chunk * comm->size, recv, chunk);
    if ((char*)recv != (const char*)send + comm->rank * chunk) check_disjoint("ncclReduceScatter", send, chunk * comm->size, recv, chunk);
    std::vector<char> mine(chunk * comm->size);  // slot r of every rank's send buffer
    MPI_Alltoall(send, (int)chunk, MPI_BYTE, mine.data(), (int)chunk, MPI_BYTE, comm->comm);
    for (size_t i = 0; i < recvcount; i++) {
        float s = 0.0f;
        for (int r = 0; r < comm->size; r++) s += load(mine.data() + r * chunk, i, t);
        store(recv, i, s, t);
    }
    return ncclSuccess;
}
// recv (nranks · sendcount) ← every rank's send, in rank order
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    check_call("ncclAllGather", comm, send, recv, sendcount, t);
    const size_t chunk = sendcount * type_bytes(t);
    Noted noted(stream, "ncclAllGather", send, chunk, recv, chunk * comm->size);
    const bool in_place = (const char*)send == (char*)recv + comm->rank * chunk;
    if (!in_place) check_disjoint("ncclAllGather", send, chunk, recv, chunk * comm->size);
    std::vector<char> all(chunk * comm->size);
    MPI_Allgather(send, (int)chunk, MPI_BYTE, all.data(), (int)chunk, MPI_BYTE, comm->comm);
    memcpy(recv, all.data(), all.size());
    return ncclSuccess;
}
inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    check_call("ncclBroadcast", comm, comm->rank == root ? send : nullptr, recv, count, t, root);
    const size_t bytes = count * type_bytes(t);
    Noted noted(stream, "ncclBroadcast", comm->rank == root ? send : nullptr, bytes, recv, bytes);
    if (comm->rank == root && send != recv) { check_disjoint("ncclBroadcast", send, bytes, recv, bytes); memcpy(recv, send, bytes); }
    MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, comm->comm);
    return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() { simt_nccl::group_depth++; return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() {
    if (--simt_nccl::group_depth == 0 && !simt_nccl::pending.empty()) {
        MPI_Waitall((int)simt_nccl::pending.size(), simt_nccl::pending.data(), MPI_STATUSES_IGNORE);
        simt_nccl::pending.clear();
    }
    return ncclSuccess;
}
// Point to point: in an open group, queued and finished at its end (with the group's receives:
// context_parallel.h's ring, all-to-all). A send outside a group is what NCCL does with it on a
// GPU: queued on its stream, done once the receiver has taken it — not when the call returns —
// so it is started here and left in flight (simt.h's g_settle): only a wait that covers its
// stream's place finishes it (cudaStreamWaitEvent, cudaEventSynchronize, a sync), and
// cudaEventQuery says cudaErrorNotReady until the receiver took it. Its buffer stays noted as
// read on its stream meanwhile, so writing it before such a wait is reported (simt.h,
// "streams"). A receive outside a group waits for its message (it runs on the stream whose
// later work reads it); SIMT_NCCL_RECV_DELAY_MS=N makes each such receive start N ms late, a
// slow receiver, so that its sender finds its sends still in flight (test_pp.sh).
namespace simt_nccl {
struct InFlight { MPI_Request req; const void* stream; unsigned long seq; };
inline std::vector<InFlight> in_flight;  // the sends started outside a group, not yet finished
inline bool settle(const void* stream, unsigned long upto, bool block) {
    bool none_left = true;
    for (size_t i = 0; i < in_flight.size();) {
        InFlight& f = in_flight[i];
        if ((stream && f.stream != stream) || f.seq > upto) { i++; continue; }
        int done = 1;
        if (block) MPI_Wait(&f.req, MPI_STATUS_IGNORE); else MPI_Test(&f.req, &done, MPI_STATUS_IGNORE);
        if (done) in_flight.erase(in_flight.begin() + i); else { none_left = false; i++; }
    }
    return none_left;
}
inline const bool settle_hooked = (simt::g_settle = settle, true);
}  // namespace simt_nccl
inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    if (!comm || !simt::device_owns(buf)) simt::die("ncclSend: no communicator, or a buffer that is not device memory");
    const size_t bytes = count * type_bytes(t);
    { Noted noted(stream, "ncclSend", buf, bytes, nullptr, 0); }
    MPI_Request req;
    MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 77, comm->comm, &req);
    if (group_depth > 0) pending.push_back(req);
    else in_flight.push_back({req, stream, ++simt::g_seq});
    return ncclSuccess;
}
inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    using namespace simt_nccl;
    if (!comm || !simt::device_owns(buf)) simt::die("ncclRecv: no communicator, or a buffer that is not device memory");
    const size_t bytes = count * type_bytes(t);
    Noted noted(stream, "ncclRecv", nullptr, 0, buf, bytes);
    static const int delay_ms = simt::env_int("SIMT_NCCL_RECV_DELAY_MS", 0);
    if (delay_ms > 0 && group_depth == 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ncclGroupStart();
    pending.emplace_back();
    MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 77, comm->comm, &pending.back());
    return ncclGroupEnd();
}
