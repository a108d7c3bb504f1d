// comm/engine.h (internal): the one place that calls MPI after start-up.
//
// An Op is a closure that performs one operation with MPI point-to-point calls. The Engine runs
// ops in submission order, either
//  - inline on the caller's thread (blocking calls, when nothing is queued or in flight), or
//  - on the process's communication thread (non-blocking calls, and blocking calls that must
//    wait their turn behind queued ones).
// A token (token_) makes sure only one thread at a time is inside MPI (MPI_THREAD_SERIALIZED).
// Collective ops run to completion on the thread that runs them; point-to-point ops (isend/irecv)
// are only *posted* in order and then kept in an in-flight list that the thread polls, so that an
// isend and a matching irecv issued in either order do not deadlock.
// One thread per process rather than per Group: groups of a Grid then never need
// MPI_THREAD_MULTIPLE, and on a 2-core machine concurrent communication threads would only compete.
#pragma once
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"

namespace shardlm::comm::detail {

struct Op {
    OpKind kind = OpKind::Barrier;
    // Collective: performs the whole operation. Point-to-point: posts its requests into reqs.
    std::function<void(Op&)> body;
    bool p2p = false;
    std::vector<MPI_Request> reqs;
    uint64_t bytes_sent = 0;
    double t_submit = 0;
    double t_start = 0, t_end = 0;  // execution of body (collectives), for busy time
    std::atomic<bool> done{false};
    std::exception_ptr error;
};

class Engine {
public:
    ~Engine();
    // Blocking: runs op now on this thread if the engine is idle, else queues it and waits.
    // Rethrows the op's error.
    void run(const std::shared_ptr<Op>& op);
    // Non-blocking: queues op (starting the communication thread on first use).
    void submit(const std::shared_ptr<Op>& op);
    // Waits until op is done (does not rethrow).
    void wait(Op& op);
    // Drains the queue and in-flight list, then joins the thread.
    void shutdown();

    // For op bodies: wait until all n requests completed; polls without sleeping on a caller's
    // thread and per background_wait() on the communication thread.
    void wait_requests(MPI_Request* reqs, int n);
    // Grow-only scratch memory for op bodies (only the token holder uses it).
    void* scratch(size_t bytes, int slot);

private:
    std::exception_ptr execute(Op& op, bool wait_p2p);
    void loop();
    bool poll_inflight();  // returns whether any in-flight op completed
    void complete(Op& op, std::exception_ptr e);

    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::deque<std::shared_ptr<Op>> queue_;
    std::vector<std::shared_ptr<Op>> inflight_;
    bool token_ = false;
    bool stop_ = false;
    std::thread thread_;
    AlignedBuffer<unsigned char> scratch_[3];
};

Engine& engine();
bool on_comm_thread();

}  // namespace shardlm::comm::detail
