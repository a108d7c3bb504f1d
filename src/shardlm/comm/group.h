// comm/group.h: collectives over a group of ranks, with exact byte accounting.
//
// A Group wraps an MPI communicator, or is a "self" group of size 1 that never touches MPI. On any
// group of size 1 every collective is the identity (a copy where in != out) and sends 0 bytes.
//
// The collectives are our own ring algorithms on MPI point-to-point messages, so we know exactly
// what each rank sends (tests compare the counters with the formulas of ring_bytes):
//   reduce-scatter (ring)      rank r sends N-1 blocks           = (N-1)/N * total bytes
//   all-gather (ring)          the same                          = (N-1)/N * total bytes
//   all-reduce                 reduce-scatter + all-gather       = 2(N-1)/N * total bytes
//   broadcast (pipelined chain root -> root+1 -> ... -> root-1)  every rank but the last of the
//                              chain sends the whole buffer      = (N-1)/N * bytes on average
//   send/recv                  the payload (recv counts 0 bytes sent), barrier 0.
// all_reduce splits n elements into N blocks of n/N (the first n%N blocks one longer), so rank r
// sends total - |block r| - |block r+1| (ring_bytes_rank gives the exact count for any n).
// Sums are deterministic: block b is accumulated along the ring in the fixed order
// ((x[b+1] + x[b+2]) + ...) + x[b] and then copied, so the same inputs give bit-identical outputs on
// every rank and in every run. Messages are cut into segments (pipelined: a segment is added
// while later ones are in flight); segmentation never changes the order of the additions.
//
// Blocking calls run on the calling thread. Non-blocking calls (i*) are queued to the process's
// communication thread (comm/progress.h) and executed there in submission order, so they make real
// progress while the caller computes; a blocking call issued while non-blocking work is pending is
// queued behind it (all ranks must issue operations on a group in the same order, as in MPI). The
// buffers of a non-blocking call belong to the library until its Request completes. A Group and
// its Requests are used from one thread (the one that owns the training loop).
//
// Why a thread: Open MPI 4.1 does not progress MPI_Iallreduce without calls into MPI. Measured
// here (2 ranks, 16 MiB): MPI_Iallreduce, 190 ms of compute without MPI calls, then MPI_Wait: the
// wait still took 14-15 ms, as long as a blocking MPI_Allreduce (16 ms), i.e. nothing had moved.
// With our communication thread the operation completes during the compute (test NonBlocking.*).
// How much that hides depends on spare CPU: the ring is itself CPU work (the receiver's CMA copy and
// the additions: 5.3 ms CPU of 5.75 ms wall for 16 MiB), so with 2 ranks x 1 compute thread on 2
// cores it only hides waiting (rank skew, background load), not the copying. bench_comm measures it
// per wait mode; Sleep is the default because it never lost to Yield and Spin costs up to 78 %.
#pragma once
#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardlm/comm/collectives.h"
#include "shardlm/comm/op.h"
#include "shardlm/comm/settings.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/enum_names.h"

namespace shardlm::comm {

namespace detail {
struct GroupState;
}  // namespace detail

class Group;

// Handle of a non-blocking operation. wait() blocks until it completed (and rethrows its error);
// test() returns whether it completed without blocking. A default Request is complete. Destroying
// a pending Request waits for it (errors are then swallowed): always wait() explicitly.
class Request {
public:
    Request() = default;
    Request(Request&&) noexcept = default;
    Request& operator=(Request&& o) noexcept;
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    ~Request();

    void wait();
    // wait() for destructors: an error is swallowed (after a communication timeout every wait throws at
    // once, and a destructor that throws during the unwinding of that error would end the process in
    // std::terminate, losing the timeout's message and the flight records).
    void settle() noexcept;
    bool test();
    bool pending() const { return op_ != nullptr; }

private:
    friend class Group;
    Request(std::shared_ptr<detail::Op> op, std::shared_ptr<detail::GroupState> g);
    void finish();  // records stats, drops the op, rethrows its error
    std::shared_ptr<detail::Op> op_;
    std::shared_ptr<detail::GroupState> group_;
};

class Group : public Collectives, public Messages {
public:
    // A group of size 1 without MPI (members(): this process's world rank).
    static Group self();
    // Adopts comm (MPI_Comm_dup'ed internally; the caller keeps ownership of comm). Collective.
    static Group from_comm(MPI_Comm comm);

    Group(Group&&) noexcept;
    Group& operator=(Group&&) noexcept;
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    ~Group() override;  // frees the communicators (after every operation queued on them)

    int rank() const override;
    int size() const override;
    bool is_self() const;                  // true for the MPI-less self group
    const std::vector<int>& members() const;  // world rank of each group rank
    // A name for reports and the timeline ("dp", "tp", "pp", ...); each operation is recorded on the
    // track of that name when core/trace.h is on.
    void set_name(std::string name);
    const std::string& name() const;
    // MPI_Comm_split of this group (collective over it); a self group splits into a self group.
    Group split(int color, int key) const;

    // ---- blocking collectives --------------------------------------------------------------
    void all_reduce_sum(float* data, size_t n);
    void all_reduce_sum(double* data, size_t n);
    void all_reduce_max(float* data, size_t n);
    void all_reduce_max(double* data, size_t n);
    // in: size()*n_per_rank floats; out (n_per_rank floats, may alias in + rank()*n_per_rank)
    // receives block rank() of the element-wise sum over ranks.
    void reduce_scatter_sum(const float* in, float* out, size_t n_per_rank);
    // out: size()*n_per_rank; block r of out = in of rank r. in may alias out + rank()*n_per_rank.
    void all_gather(const float* in, float* out, size_t n_per_rank);
    void all_gather_bytes(const void* in, void* out, size_t bytes_per_rank);
    void broadcast(float* data, size_t n, int root);
    void broadcast_bytes(void* data, size_t bytes, int root);
    void send(const void* data, size_t bytes, int dst, int tag);
    void recv(void* data, size_t bytes, int src, int tag) override;
    void barrier();
    // All-to-all with counts (MPI_Alltoallv, in bytes): send[j] bytes from send_off[j] of in go to rank j,
    // which receives recv[r] of them at recv_off[r] of out (its counts agreed beforehand: exchange them
    // with an all-gather). Pairwise messages; bytes sent: every block but this rank's own.
    void all_to_all_bytes(const void* in, const size_t* send, const size_t* send_off, void* out, const size_t* recv,
                          const size_t* recv_off);

    // ---- non-blocking (executed in order on the communication thread) ------------------------
    Request iall_reduce_sum(float* data, size_t n);
    Request ireduce_scatter_sum(const float* in, float* out, size_t n_per_rank);
    // Sums of n elements of type t (F32, or bf16/fp16 bit patterns: every hop adds in fp32 and
    // rounds, moving half the bytes of fp32). Same orders and accounting as the fp32 forms.
    void all_reduce_sum(void* data, size_t n, DType t);
    Request iall_reduce_sum(void* data, size_t n, DType t) override;
    Request ireduce_scatter_sum(const void* in, void* out, size_t n_per_rank, DType t) override;
    Request iall_gather(const float* in, float* out, size_t n_per_rank);
    Request iall_gather_bytes(const void* in, void* out, size_t bytes_per_rank) override;
    Request ibroadcast(float* data, size_t n, int root);
    // Posted in order on the communication thread and completed asynchronously (an isend and an
    // irecv between the same two ranks do not deadlock each other).
    Request isend(const void* data, size_t bytes, int dst, int tag) override;
    Request irecv(void* data, size_t bytes, int src, int tag);

    // ---- accounting ---------------------------------------------------------------------------
    const CommStats& stats() const;
    void reset_stats();
    std::string stats_table() const;  // one line per op kind with calls > 0, plus a total

    // The raw communicator for collectives (MPI_COMM_NULL for the self group). Calling MPI on it
    // directly bypasses the MPI mutex (comm/progress.h): only for benchmarks, with no i* call pending.
    MPI_Comm raw_comm() const;

private:
    explicit Group(std::shared_ptr<detail::GroupState> s);
    Request submit(std::shared_ptr<detail::Op> op);
    void run(std::shared_ptr<detail::Op> op);
    std::shared_ptr<detail::GroupState> s_;
};

}  // namespace shardlm::comm
