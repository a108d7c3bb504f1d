// comm/op.h: one communication operation as the layers below the Group see it: its kind, its
// counters (OpStats, a group's CommStats) and, inside the library, the Op the communication thread
// runs (comm/progress.h) and the flight recorder logs (comm/flight.h).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::comm {

enum class OpKind { AllReduce, ReduceScatter, AllGather, Broadcast, SendRecv, Barrier, AllToAll };
inline constexpr int kNumOpKinds = 7;
std::string_view op_name(OpKind k);  // "all_reduce", "reduce_scatter", ...

struct OpStats {
    uint64_t calls = 0;
    uint64_t bytes_sent = 0;  // payload bytes this rank handed to MPI_Isend
    double seconds = 0;       // wall time inside the call; for i* calls: from submission to the
                              // wait()/test() that saw it complete
    double busy_seconds = 0;  // time the collective itself ran (on the communication thread for i*
                              // calls): what overlapping has to hide
};

struct CommStats {
    std::array<OpStats, kNumOpKinds> ops{};
    OpStats& operator[](OpKind k) { return ops[size_t(k)]; }
    const OpStats& operator[](OpKind k) const { return ops[size_t(k)]; }
    uint64_t total_bytes_sent() const;
    double total_seconds() const;
};

namespace detail {

// An Op is a closure that performs one operation with MPI point-to-point calls (comm/progress.h).
struct Op {
    OpKind kind = OpKind::Barrier;
    const void* group = nullptr;  // ops of one group run in submission order
    // Collective: performs the whole operation. Point-to-point: posts its requests into reqs.
    std::function<void(Op&)> body;
    bool p2p = false;
    uint64_t payload = 0;              // bytes of the buffer (flight recorder)
    int peer = -1, tag = -1;           // point-to-point: group rank of the peer, tag
    bool send = false;                 // point-to-point: direction
    uint64_t flight_id = 0;            // the flight recorder's entry (0: not recorded)
    int64_t flight_slot = -1;
    std::vector<MPI_Request> reqs;
    uint64_t bytes_sent = 0;
    double t_submit = 0;
    double t_start = 0, t_end = 0;  // execution of body (collectives), for busy time
    std::atomic<bool> done{false};
    std::atomic<bool> claimed{false};  // p2p: the thread that saw it complete finishes it
    std::exception_ptr error;
};

// "all_reduce on group 'dp' (rank 1 of 2, world rank 3)": for errors about op (defined by the group
// layer, comm/group.cpp, which knows the groups' names).
std::string describe_op(const Op& op);

inline int mod(int a, int n) { return ((a % n) + n) % n; }
// n elements in `parts` blocks of n/parts, the first n%parts blocks one longer.
struct Blocks {
    size_t base, rem;
    Blocks(size_t n, int parts) : base(n / size_t(parts)), rem(n % size_t(parts)) {}
    size_t off(int b) const { return base * size_t(b) + std::min(size_t(b), rem); }
    size_t len(int b) const { return base + (size_t(b) < rem ? 1 : 0); }
};

}  // namespace detail

// Bytes one rank sends when the buffer divides evenly into n blocks: bytes_total is the whole
// buffer (for reduce-scatter/all-gather: size() * bytes_per_rank). AllReduce 2(n-1)/n*B,
// ReduceScatter and AllGather (n-1)/n*B, Broadcast (n-1)/n*B (mean over the chain: the last rank
// sends 0, the others B), SendRecv B, Barrier 0. n == 1 gives 0 (except SendRecv).
size_t ring_bytes(OpKind kind, size_t bytes_total, int n);
// Exact bytes rank `rank` sends for `count` elements of elem_bytes (count = whole buffer:
// all-reduce/broadcast n, reduce-scatter/all-gather size()*n_per_rank), uneven blocks included.
size_t ring_bytes_rank(OpKind kind, size_t count, size_t elem_bytes, int n, int rank, int root = 0);

}  // namespace shardlm::comm
