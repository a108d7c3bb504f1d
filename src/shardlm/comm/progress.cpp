#include "shardlm/comm/progress.h"

#include "shardlm/core/runtime.h"

#include "shardlm/core/timer.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "shardlm/comm/flight.h"
#include "shardlm/comm/mpi_call.h"
#include "shardlm/comm/settings.h"
#include "shardlm/core/check.h"
#include "shardlm/core/format.h"

namespace shardlm::comm {

namespace {
thread_local bool t_on_comm_thread = false;
thread_local const detail::Op* t_current_op = nullptr;  // the op whose body this thread executes
std::atomic<bool> g_timed_out{false};  // one wait timed out: every later wait fails at once
std::mutex g_first_timeout_mu;
std::string g_first_timeout;  // that timeout's operation, named in the later waits' errors

// Sleep back-off between polls (microseconds): from kSleepMinUs, doubling to kSleepMaxUs; a wait that
// has lasted kLongWaitS (a peer is computing or stalled) sleeps up to kSleepLongUs, so a rank waiting
// for a stopped peer takes ~0.1 % of a core instead of all of it.
constexpr int kSleepMinUs = 5, kSleepMaxUs = 100, kSleepLongUs = 1000;
constexpr double kLongWaitS = 0.02;
// Polls before the first sleep: a message that is about to arrive costs no sleep.
constexpr int kSpinPolls = 32;

// How a thread waits between two polls that found nothing, per WaitMode: spins kSpinPolls polls,
// then yields or sleeps with back-off.
class Backoff {
public:
    explicit Backoff(WaitMode m) : mode_(m), t0_(now_s()) {}
    void pause() {
        ++polls_;
        if (mode_ == WaitMode::Spin) return;
        if (mode_ == WaitMode::Yield || polls_ < kSpinPolls) {
            sched_yield();
            return;
        }
        thread_local bool slack_set = false;  // sleeps of a few us, not the default 50 us timer slack
        if (!slack_set) {
            ::prctl(PR_SET_TIMERSLACK, 2000UL, 0, 0, 0);
            slack_set = true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
        const int cap = now_s() - t0_ > kLongWaitS ? kSleepLongUs : kSleepMaxUs;
        sleep_us_ = std::min(sleep_us_ * 2, cap);
    }
    int polls() const { return polls_; }
    double start() const { return t0_; }

private:
    WaitMode mode_;
    double t0_;
    int polls_ = 0, sleep_us_ = kSleepMinUs;
};
}  // namespace

bool timed_out() { return g_timed_out.load(std::memory_order_relaxed); }

namespace detail {

Progress& progress() {
    static Progress e;
    return e;
}

bool on_comm_thread() { return t_on_comm_thread; }

Progress::~Progress() {
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

MpiLock::MpiLock() : lk(progress().mpi()) {}

// Runs op's body on this thread, timing it (a point-to-point body only posts its requests).
// Returns the error, if any.
std::exception_ptr Progress::execute(Op& op) {
    const Op* outer = t_current_op;
    t_current_op = &op;
    std::exception_ptr err;
    flight::started(op);
    try {
        op.t_start = now_s();
        op.body(op);
        op.t_end = now_s();
    } catch (...) {
        err = std::current_exception();
    }
    t_current_op = outer;
    return err;
}

void Progress::check_timeout(double t0, const Op* op) {
    const double limit = timeout();
    const bool earlier = g_timed_out.load(std::memory_order_relaxed);
    if (!earlier && (limit <= 0 || now_s() - t0 <= limit)) return;
    if (!op) op = t_current_op;
    const std::string what = op ? describe_op(*op) : std::string("a communication");
    if (earlier) {
        std::lock_guard<std::mutex> lock(g_first_timeout_mu);
        fail(what, ": abandoned after an earlier communication timeout (", g_first_timeout, ")");
    }
    {
        std::lock_guard<std::mutex> lock(g_first_timeout_mu);
        if (g_first_timeout.empty()) g_first_timeout = what + " did not finish within --comm-timeout " + format("%g", limit) + " s";
    }
    g_timed_out.store(true);
    fail(what, " did not finish within --comm-timeout ", limit,
         " s: the other ranks of the group did not take part in time (stalled or dead)",
         flight::dump_dir().empty()
             ? std::string("\n---> HINT: look at the other ranks' output; a rank stuck in I/O or killed shows there")
             : "\n---> HINT: `shardlm report --flight " + flight::dump_dir() +
                   "` names the rank that did not enter it (from every rank's flight record)");
}

void Progress::run(const std::shared_ptr<Op>& op) {
    if (op->p2p) {
        submit(op);
        wait(*op);
    } else {
        std::unique_lock lk(mu_);
        auto it = pending_.find(op->group);
        if (it == pending_.end() || it->second == 0) {
            lk.unlock();
            op->error = execute(*op);
            flight::finished(*op, !op->error);
            op->done.store(true, std::memory_order_release);
        } else {
            if (!thread_.joinable()) {
                stop_ = false;
                thread_ = std::thread([this] { loop(); });
            }
            queue_.push_back(op);
            pending_[op->group]++;
            lk.unlock();
            work_cv_.notify_all();
            wait(*op);
        }
    }
    if (op->error) std::rethrow_exception(op->error);
}

void Progress::submit(const std::shared_ptr<Op>& op) {
    if (op->p2p) {
        std::exception_ptr err = execute(*op);  // posts the requests now, in program order
        std::lock_guard lk(mu_);
        if (err) {
            op->claimed.store(true);
            complete(*op, err);
            return;
        }
        inflight_.push_back(op);
    } else {
        std::lock_guard lk(mu_);
        queue_.push_back(op);
        pending_[op->group]++;
    }
    {
        std::lock_guard lk(mu_);
        if (!thread_.joinable()) {
            stop_ = false;
            thread_ = std::thread([this] { loop(); });
        }
    }
    work_cv_.notify_all();
}

bool Progress::poll(Op& op) {
    if (op.done.load(std::memory_order_acquire)) return true;
    int flag = 0;
    std::exception_ptr err;
    try {
        std::lock_guard l(mpi_mu_);
        SHARDLM_MPI_CHECK(MPI_Testall(int(op.reqs.size()), op.reqs.data(), &flag, MPI_STATUSES_IGNORE));
    } catch (...) {
        err = std::current_exception();
        flag = 1;
    }
    if (!flag) return false;
    if (op.claimed.exchange(true)) {  // the other thread is completing it
        while (!op.done.load(std::memory_order_acquire)) std::this_thread::yield();
        return true;
    }
    std::lock_guard lk(mu_);
    auto it = std::find_if(inflight_.begin(), inflight_.end(), [&](const auto& p) { return p.get() == &op; });
    if (it != inflight_.end()) inflight_.erase(it);
    op.t_end = now_s();
    complete(op, err);
    return true;
}

void Progress::wait(Op& op) {
    if (op.done.load(std::memory_order_acquire)) return;
    if (op.p2p) {
        Backoff backoff(background_wait());
        while (!poll(op)) {
            backoff.pause();
            if (backoff.polls() % 256 == 255) {
                try {
                    check_timeout(backoff.start(), &op);
                } catch (...) {
                    // complete it with the error (the caller's finish() rethrows it); the requests are abandoned
                    if (!op.claimed.exchange(true)) {
                        std::lock_guard lk(mu_);
                        auto it = std::find_if(inflight_.begin(), inflight_.end(), [&](const auto& p) { return p.get() == &op; });
                        if (it != inflight_.end()) inflight_.erase(it);
                        complete(op, std::current_exception());
                    }
                    while (!op.done.load(std::memory_order_acquire)) std::this_thread::yield();
                    return;
                }
            }
        }
        return;
    }
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return op.done.load(std::memory_order_acquire); });
}

bool Progress::test(Op& op) {
    if (op.done.load(std::memory_order_acquire)) return true;
    return op.p2p && poll(op);
}

void Progress::shutdown() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
}

void Progress::complete(Op& op, std::exception_ptr e) {
    // Called with mu_ held.
    flight::finished(op, !e);
    op.error = std::move(e);
    op.done.store(true, std::memory_order_release);
    done_cv_.notify_all();
}

void Progress::wait_requests(MPI_Request* reqs, int n) {
    if (n <= 0) return;
    const bool comm = t_on_comm_thread;
    Backoff backoff(background_wait());
    for (;;) {
        if (backoff.polls() % 256 == 255) check_timeout(backoff.start(), nullptr);
        int flag = 0;
        if (comm) comm_wants_mpi_.fetch_add(1, std::memory_order_relaxed);
        {
            std::lock_guard l(mpi_mu_);
            if (comm) comm_wants_mpi_.fetch_sub(1, std::memory_order_relaxed);
            SHARDLM_MPI_CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
        }
        if (flag) return;
        // the caller's thread lets the communication thread in before it polls again
        if (!comm && comm_wants_mpi_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
        backoff.pause();
    }
}

void* Progress::scratch(size_t bytes, int slot) {
    thread_local AlignedBuffer<unsigned char> bufs[3];
    auto& b = bufs[slot];
    if (b.size() < bytes) b.resize(bytes);
    return b.data();
}

bool Progress::poll_inflight() {
    // Called without mu_ held.
    std::vector<std::shared_ptr<Op>> snapshot;
    {
        std::lock_guard lk(mu_);
        snapshot = inflight_;
    }
    bool any = false;
    for (auto& op : snapshot) any |= poll(*op);
    return any;
}

void Progress::loop() {
    t_on_comm_thread = true;
    unbind_this_thread();  // not the single CPU of the bound training thread that made it
    std::unique_lock lk(mu_);
    int idle_us = kSleepMinUs;
    double idle_since = 0;  // when the thread last did something
    for (;;) {
        if (!queue_.empty()) {
            std::shared_ptr<Op> op = std::move(queue_.front());
            queue_.pop_front();
            lk.unlock();
            std::exception_ptr err = execute(*op);
            lk.lock();
            if (--pending_[op->group] == 0) pending_.erase(op->group);
            complete(*op, err);
            idle_us = kSleepMinUs;
            continue;
        }
        if (!inflight_.empty()) {
            lk.unlock();
            bool any = poll_inflight();
            lk.lock();
            if (any || !queue_.empty()) {
                idle_us = kSleepMinUs;
                continue;
            }
            WaitMode m = background_wait();
            if (m == WaitMode::Spin) continue;
            if (m == WaitMode::Yield) {
                lk.unlock();
                sched_yield();
                lk.lock();
                continue;
            }
            if (idle_us == kSleepMinUs) idle_since = now_s();
            work_cv_.wait_for(lk, std::chrono::microseconds(idle_us));
            idle_us = std::min(idle_us * 2, now_s() - idle_since > kLongWaitS ? kSleepLongUs : kSleepMaxUs);
            continue;
        }
        if (stop_) break;
        work_cv_.wait(lk);
    }
}

}  // namespace detail
}  // namespace shardlm::comm
