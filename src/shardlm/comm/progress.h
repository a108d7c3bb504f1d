// comm/progress.h (internal): the one place that calls MPI after start-up, and what makes communication progress.
//
// An Op is a closure that performs one operation with MPI point-to-point calls. Progress runs
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

#include "shardlm/comm/op.h"
#include "shardlm/core/aligned_buffer.h"

namespace shardlm::comm::detail {

class Progress {
public:
    ~Progress();
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

Progress& progress();
bool on_comm_thread();

}  // namespace shardlm::comm::detail
