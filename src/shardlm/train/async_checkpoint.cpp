#include "shardlm/train/async_checkpoint.h"

#include "shardlm/core/check.h"

namespace shardlm::train {

AsyncCheckpoint::~AsyncCheckpoint() {
    if (thread_.joinable()) thread_.join();  // the files stay in their hidden directory: not published
}

void AsyncCheckpoint::start(std::unique_ptr<PendingCheckpoint> p) {
    SHARDLM_CHECK(!p_, "AsyncCheckpoint::start with a checkpoint still pending");
    p_ = std::move(p);
    done_.store(false);
    error_ = nullptr;
    thread_ = std::thread([this] {
        try {
            p_->write();
        } catch (...) {
            error_ = std::current_exception();
        }
        done_.store(true, std::memory_order_release);
    });
}

int AsyncCheckpoint::poll(comm::Group& world, bool wait, FaultInjector* faults) {
    if (!p_) return 0;
    if (wait && thread_.joinable()) thread_.join();
    const bool mine = done_.load(std::memory_order_acquire);
    double flags[2] = {mine ? 1.0 : 0.0, mine && error_ ? 1.0 : 0.0};
    world.all_reduce_sum(flags, 2);
    if (flags[1] > 0) {
        if (thread_.joinable()) thread_.join();
        std::string what = "another rank's writer failed";
        if (error_) try {
                std::rethrow_exception(error_);
            } catch (const std::exception& e) {
                what = e.what();
            }
        const int step = p_->step();
        p_.reset();
        fail("the checkpoint of step ", step, " could not be written: ", what,
             "\n---> HINT: free disk space (the previous checkpoint is intact) and resume with --resume");
    }
    if (flags[0] < double(world.size())) return 0;
    if (thread_.joinable()) thread_.join();
    const int step = p_->step();
    p_->commit(world, faults);
    p_.reset();
    return step;
}

}  // namespace shardlm::train
