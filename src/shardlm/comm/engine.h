// comm/engine.h (internal): the one place that calls MPI after start-up.
//
// An Op is a closure that performs one operation with MPI point-to-point calls. The Engine runs
// collective ops in submission order *per group*, either
//  - inline on the caller's thread (blocking calls, when nothing of the same group is queued or
//    running), or
//  - on the process's communication thread (non-blocking calls, and blocking calls that must wait
//    their turn behind queued ones of their group).
// Different groups do not wait for each other: a tensor-parallel all-reduce on the critical path
// runs at once on the training thread while the communication thread is busy with a data-parallel
// bucket. Both threads may then be inside an operation at the same time, so every single MPI call
// holds mpi() (MPI_THREAD_SERIALIZED: one call at a time, from any thread), and waiting is polling
// (MPI_Testall) with the lock released between polls.
// Point-to-point ops (isend/irecv) are posted at once on the caller's thread (their order is the
// program's) and completed by whichever thread polls them first: the caller's wait(), or the
// communication thread while it is idle (so that a large send progresses while its sender computes).
// One communication thread per process, not per group: on a 2-core machine concurrent communication
// threads would only compete.
#pragma once
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"

namespace shardlm::comm::detail {

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

// "all_reduce on group 'dp' (rank 1 of 2, world rank 3)": for errors about op (comm/group.cpp).
std::string describe_op(const Op& op);

class Engine {
public:
    ~Engine();
    // Blocking: runs op now on this thread unless ops of its group are queued or running (then it
    // waits its turn). A point-to-point op is posted and waited for. Rethrows the op's error.
    void run(const std::shared_ptr<Op>& op);
    // Non-blocking: a collective is queued for the communication thread (started on first use); a
    // point-to-point op is posted now and completes in the background.
    void submit(const std::shared_ptr<Op>& op);
    // Waits until op is done (does not rethrow); polls a point-to-point op itself.
    void wait(Op& op);
    // Whether op is done, polling a point-to-point op once.
    bool test(Op& op);
    // Drains the queue and in-flight list, then joins the thread.
    void shutdown();

    // Every MPI call holds this lock (MPI_THREAD_SERIALIZED).
    std::mutex& mpi() { return mpi_mu_; }
    // For op bodies: wait until all n requests completed, polling MPI_Testall with mpi() released
    // between polls: per background_wait() on the caller's thread as on the
    // communication thread. Throws when they have not completed within comm::timeout() seconds
    // (naming the operation being executed on this thread).
    void wait_requests(MPI_Request* reqs, int n);
    // Grow-only scratch memory for op bodies, per thread.
    void* scratch(size_t bytes, int slot);

private:
    std::exception_ptr execute(Op& op);
    void loop();
    bool poll(Op& op);      // p2p: tests its requests; completes it if done; returns done
    bool poll_inflight();   // returns whether any in-flight op completed
    // Throws the timeout error for op (null: the operation this thread executes) if t0 is more than
    // comm::timeout() ago, or at once once any operation has timed out.
    void check_timeout(double t0, const Op* op);
    void complete(Op& op, std::exception_ptr e);

    std::mutex mu_;          // queue_, inflight_, pending_
    std::mutex mpi_mu_;      // MPI calls
    std::atomic<int> comm_wants_mpi_{0};  // the communication thread waits for mpi_mu_
    std::condition_variable work_cv_, done_cv_;
    std::deque<std::shared_ptr<Op>> queue_;
    std::vector<std::shared_ptr<Op>> inflight_;
    std::unordered_map<const void*, int> pending_;  // group -> collectives queued or running
    bool stop_ = false;
    std::thread thread_;
};

// Holds the MPI lock for one call (or a few that belong together).
struct MpiLock {
    std::lock_guard<std::mutex> lk;
    MpiLock();
};

Engine& engine();
bool on_comm_thread();

}  // namespace shardlm::comm::detail
