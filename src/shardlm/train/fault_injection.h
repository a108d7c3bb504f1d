// train/fault_injection.h: faults the tests inject into a training run through the environment
// (no-ops without the variables; read at the points named):
//   SHARDLM_TEST_POISON="<param|grad>:<step>:<unit>:<world rank|-1>:<value>"   sets ("nan", "inf") or
//       adds (a number) value to every element the rank owns of the unit's parameters (after the
//       step's update) or gradients (once reduced, before the norm)
//   SHARDLM_TEST_INF_GRAD="<step>:<world rank>"   the first gradient element the rank owns becomes inf
//       (once reduced, before the norm): one overflow, for the loss-scaling tests
//   SHARDLM_TEST_STALL="<world rank>:<step>"   that rank sleeps for an hour before the step (a hung rank)
//   SHARDLM_TEST_SIGNAL="<world rank>:<step>:<signal>"   that rank raises the signal before the step
//   SHARDLM_TEST_KILL_AFTER_CKPT=<step>, SHARDLM_TEST_KILL_IN_CKPT=<step>   SIGKILL right after / while
//       writing that checkpoint (train/trainer.cpp, train/checkpoint.cpp)
#pragma once
#include "shardlm/train/numerics.h"

namespace shardlm::train {

void apply_test_poison(const char* kind, int step, int world_rank, const OwnedTensors& mine);
void apply_test_inf_grad(int step, int world_rank, const OwnedTensors& mine);
void apply_test_stall(int step, int world_rank);
void apply_test_signal(int step, int world_rank);

}  // namespace shardlm::train
