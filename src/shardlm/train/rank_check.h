// train/rank_check.h: ranks that should agree, checked.
//
// - At start, every rank's resolved configuration (TrainConfig as JSON) is hashed and the hashes
//   compared; on a mismatch the keys that differ from rank 0's are named and every rank ends with that
//   message, instead of hanging in a collective that the ranks issue differently (--steps, --zero) or
//   silently training different things (--seq, --lr).
// - --check-replicas N: every N steps, per-parameter hashes of what must be bit-identical: the full
//   parameter replicas of the data-parallel ranks (ZeRO 0-2; ZeRO-3 keeps no replicas) and the
//   tensors every tensor-parallel rank holds whole (LayerNorms, row-parallel biases). The reductions
//   are deterministic and every replica takes the same update, so any difference is a bug or a
//   hardware fault; the job ends naming the tensor and the ranks.
// Both are collective over the world and throw the same message on every rank.
#pragma once
#include "shardlm/comm/grid.h"
#include "shardlm/model/layout.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

void check_same_config(comm::Group& world, const TrainConfig& cfg);

// full_params: this rank's replicated parameter buffer (layout.total floats), null under ZeRO-3. dp_differ: the
// data-parallel replicas differ by design (--dp-algo local-sgd, diloco, gossip): only the tensor-parallel copies are compared.
void check_replicas(comm::Group& world, comm::Grid& grid, const model::Layout& layout, const float* full_params,
                    int step,
                    bool dp_differ = false);

}  // namespace shardlm::train
