// parallel/comm_theory.h: the bytes each parallel dimension should send in one training step, from
// the shapes alone (the communication report prints them beside what was measured; tests check
// they are equal). Data parallelism's are GradSync::expected_step_bytes.
#pragma once
#include <array>
#include <cstddef>

#include "shardlm/core/zero_stage.h"
#include "shardlm/model/part.h"
#include "shardlm/schedule/schedule.h"

namespace shardlm::parallel {

// {all_reduce, reduce_scatter, all_gather} bytes this rank sends on its tensor-parallel group in one
// step of `micro` micro-batches of rows x T tokens (zero: the ZeRO stage, which decides how often
// sequence parallelism sums the replicated gradients). Megatron without sequence parallelism:
// per block 2 all-reduces of (rows T, C) forward and 2 backward, one for the embedding's forward,
// one for the head's backward, and the vocabulary-parallel cross-entropy's max (rows T) and sums
// (2 rows T). With sequence parallelism each all-reduce of a block becomes an all-gather and a
// reduce-scatter of this rank's (rows T / tp, C), the backward re-gathers the two LayerNorm
// outputs, and the replicated parameters' gradients are all-reduced.
std::array<size_t, 3> tp_step_bytes(const model::ModelPart& part, int micro, int rows, int T, ZeroStage zero);

// Bytes this rank sends on its pipeline group in one step: for each micro-batch, the (rows T / (tp
// under sequence parallelism), C) activation to the next chunk and its gradient to the previous one.
size_t pp_step_bytes(const model::ModelPart& part, const schedule::Schedule& s, int rank, int rows, int T);

}  // namespace shardlm::parallel
