// train/fault_injection.h: faults the tests inject into a training run. The Trainer calls an
// installed FaultInjector at the points below and has none by default; `shardlm train` installs the
// one the environment describes, and only when a test sets one of these variables:
//   SHARDLM_TEST_POISON="<param|grad>:<step>:<unit>:<world rank|-1>:<value>"   sets ("nan", "inf") or
//       adds (a number) value to every element the rank owns of the unit's parameters (after the
//       step's update) or gradients (once reduced, before the norm)
//   SHARDLM_TEST_INF_GRAD="<step>:<world rank>"   the first gradient element the rank owns becomes inf
//       (once reduced, before the norm): one overflow, for the loss-scaling tests
//   SHARDLM_TEST_STALL="<world rank>:<step>"   that rank sleeps for an hour before the step (a hung rank)
//   SHARDLM_TEST_SIGNAL="<world rank>:<step>:<signal>"   that rank raises the signal before the step
//   SHARDLM_TEST_KILL_AFTER_CKPT=<step>, SHARDLM_TEST_KILL_IN_CKPT=<step>   SIGKILL right after / while
//       writing that checkpoint
//   SHARDLM_TEST_LOSE_NODE="<world rank>:<step>"   before the step that rank deletes its node's memory
//       (node_memory: the stores of train/memory_checkpoint.h) and SIGKILLs itself: a lost node (with
//       SHARDLM_MEM_CKPT_HOSTS=per-rank, so that the node is that rank's alone)
#pragma once
#include <memory>
#include <string>

#include "shardlm/train/numerics.h"

namespace shardlm::train {

class FaultInjector {
public:
    virtual ~FaultInjector() = default;
    virtual void before_step(int step) {}
    virtual void on_reduced_grads(int step, const OwnedTensors& mine) {}  // before the norm
    virtual void after_update(int step, const OwnedTensors& mine) {}
    virtual void while_checkpointing(int step) {}  // this rank's files written, meta.json not yet
    virtual void after_checkpoint(int step) {}
};

// The injector the SHARDLM_TEST_* variables describe for this rank, or null when none is set.
std::unique_ptr<FaultInjector> faults_from_env(int world_rank, const std::string& node_memory = "");

}  // namespace shardlm::train
