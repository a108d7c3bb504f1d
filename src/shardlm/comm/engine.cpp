#include "shardlm/comm/engine.h"

#include "shardlm/core/timer.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "shardlm/comm/mpi_env.h"

namespace shardlm::comm {

namespace {
std::atomic<WaitMode> g_wait_mode{WaitMode::Sleep};
// 256 KiB: the kSlots = 4 receive slots of a reduce step (1 MiB) stay in the 2 MiB L2.
std::atomic<size_t> g_segment_bytes{size_t(256) << 10};
thread_local bool t_on_comm_thread = false;

// Sleep back-off of the communication thread (microseconds).
constexpr int kSleepMinUs = 5, kSleepMaxUs = 100;
// Polls before the first sleep: a message that is about to arrive costs no sleep.
constexpr int kSpinPolls = 32;
}  // namespace

void set_background_wait(WaitMode m) { g_wait_mode.store(m); }
WaitMode background_wait() { return g_wait_mode.load(); }
void set_segment_bytes(size_t bytes) { g_segment_bytes.store(std::max<size_t>(bytes, 64)); }
size_t segment_bytes() { return g_segment_bytes.load(); }

namespace detail {

Engine& engine() {
    static Engine e;
    return e;
}

bool on_comm_thread() { return t_on_comm_thread; }

Engine::~Engine() {
    // MpiEnv normally shuts the thread down before MPI_Finalize; this only covers abnormal exits.
    if (thread_.joinable()) {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        work_cv_.notify_all();
        thread_.join();
    }
}

// Runs op's body on this thread (the caller holds the token), timing it; for point-to-point ops,
// also waits for their requests if wait_p2p. Returns the error, if any.
std::exception_ptr Engine::execute(Op& op, bool wait_p2p) {
    try {
        op.t_start = now_s();
        op.body(op);
        if (op.p2p && wait_p2p) wait_requests(op.reqs.data(), int(op.reqs.size()));
        op.t_end = now_s();
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

void Engine::run(const std::shared_ptr<Op>& op) {
    std::unique_lock lk(mu_);
    if (!token_ && queue_.empty() && inflight_.empty()) {
        token_ = true;
        lk.unlock();
        std::exception_ptr err = execute(*op, /*wait_p2p=*/true);
        lk.lock();
        token_ = false;
        op->error = err;
        op->done.store(true, std::memory_order_release);
        lk.unlock();
        work_cv_.notify_all();
    } else {
        lk.unlock();
        submit(op);
        wait(*op);
    }
    if (op->error) std::rethrow_exception(op->error);
}

void Engine::submit(const std::shared_ptr<Op>& op) {
    {
        std::lock_guard lk(mu_);
        if (!thread_.joinable()) {
            stop_ = false;
            thread_ = std::thread([this] { loop(); });
        }
        queue_.push_back(op);
    }
    work_cv_.notify_all();
}

void Engine::wait(Op& op) {
    if (op.done.load(std::memory_order_acquire)) return;
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return op.done.load(std::memory_order_acquire); });
}

void Engine::shutdown() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
}

void Engine::complete(Op& op, std::exception_ptr e) {
    // Called with mu_ held.
    op.error = std::move(e);
    op.done.store(true, std::memory_order_release);
    done_cv_.notify_all();
}

void Engine::wait_requests(MPI_Request* reqs, int n) {
    if (n <= 0) return;
    if (!t_on_comm_thread) {
        SHARDLM_MPI_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        return;
    }
    int polls = 0, sleep_us = kSleepMinUs;
    for (;;) {
        int flag = 0;
        SHARDLM_MPI_CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
        if (flag) return;
        switch (g_wait_mode.load(std::memory_order_relaxed)) {
        case WaitMode::Spin:
            break;
        case WaitMode::Yield:
            sched_yield();
            break;
        case WaitMode::Sleep:
            if (++polls < kSpinPolls) break;
            std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
            sleep_us = std::min(sleep_us * 2, kSleepMaxUs);
            break;
        }
    }
}

void* Engine::scratch(size_t bytes, int slot) {
    auto& b = scratch_[slot];
    if (b.size() < bytes) b.resize(bytes);
    return b.data();
}

bool Engine::poll_inflight() {
    // Called with mu_ held and token_ taken by this thread; inflight_ is only changed under mu_.
    std::vector<std::shared_ptr<Op>> snapshot = inflight_;
    std::vector<std::pair<std::shared_ptr<Op>, std::exception_ptr>> finished;
    std::unique_lock lk(mu_, std::adopt_lock);
    lk.unlock();
    for (auto& op : snapshot) {
        try {
            int flag = 0;
            SHARDLM_MPI_CHECK(MPI_Testall(int(op->reqs.size()), op->reqs.data(), &flag, MPI_STATUSES_IGNORE));
            if (flag) finished.emplace_back(op, nullptr);
        } catch (...) {
            finished.emplace_back(op, std::current_exception());
        }
    }
    lk.lock();
    for (auto& [op, err] : finished) {
        inflight_.erase(std::find(inflight_.begin(), inflight_.end(), op));
        complete(*op, err);
    }
    lk.release();
    return !finished.empty();
}

void Engine::loop() {
    t_on_comm_thread = true;
    std::unique_lock lk(mu_);
    int idle_us = kSleepMinUs;
    for (;;) {
        if (token_) {  // a blocking call runs inline on the caller's thread
            work_cv_.wait(lk);
            continue;
        }
        if (!queue_.empty()) {
            std::shared_ptr<Op> op = std::move(queue_.front());
            queue_.pop_front();
            token_ = true;
            lk.unlock();
            std::exception_ptr err = execute(*op, /*wait_p2p=*/false);
            lk.lock();
            token_ = false;
            if (op->p2p && !err) {
                inflight_.push_back(std::move(op));
            } else {
                complete(*op, err);
            }
            idle_us = kSleepMinUs;
            continue;
        }
        if (!inflight_.empty()) {
            token_ = true;
            bool any = poll_inflight();
            token_ = false;
            if (any) {
                idle_us = kSleepMinUs;
                continue;
            }
            WaitMode m = g_wait_mode.load(std::memory_order_relaxed);
            if (m == WaitMode::Spin) continue;
            if (m == WaitMode::Yield) {
                lk.unlock();
                sched_yield();
                lk.lock();
                continue;
            }
            work_cv_.wait_for(lk, std::chrono::microseconds(idle_us));
            idle_us = std::min(idle_us * 2, kSleepMaxUs);
            continue;
        }
        if (stop_) break;
        work_cv_.wait(lk);
    }
}

}  // namespace detail
}  // namespace shardlm::comm
