// train/async_checkpoint.h: --async-ckpt: a checkpoint's files written by a background thread while
// training goes on (train/checkpoint.h's PendingCheckpoint).
//
// At a checkpoint step the ranks snapshot their pieces into memory (a copy: the cost that stays on
// the step) and hand the snapshot to a writer thread. After each later step the ranks ask, together,
// whether every writer has finished (one small all-reduce, only while a checkpoint is pending); the
// first step at which all have, they publish it (meta.json, rename, pruning). The files are those
// save_checkpoint writes, byte for byte. A failed write (a full disk) ends training on every rank
// with the failing rank's message, the previous checkpoint intact. At most one checkpoint is in
// flight: the next one first waits for the pending one.
#pragma once
#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "shardlm/comm/group.h"
#include "shardlm/train/checkpoint.h"

namespace shardlm::train {

class AsyncCheckpoint {
public:
    ~AsyncCheckpoint();
    // Starts writing p on a background thread (nothing may be pending).
    void start(std::unique_ptr<PendingCheckpoint> p);
    bool pending() const { return p_ != nullptr; }
    // Collective over world while pending() (the same on every rank): publishes the checkpoint if every
    // rank's writer has finished, or after waiting for them with wait. Returns the step published (0
    // if none yet). Throws on every rank when a rank's write failed.
    int poll(comm::Group& world, bool wait, FaultInjector* faults = nullptr);

private:
    std::unique_ptr<PendingCheckpoint> p_;
    std::thread thread_;
    std::atomic<bool> done_{false};
    std::exception_ptr error_;
};

}  // namespace shardlm::train
