// train/memory_check.h: will the run fit in this machine's memory? Asked before anything is
// allocated, so that --model gpt3-175b on a small machine says how much memory the run needs and how
// much there is, instead of dying in std::bad_alloc.
//
// The need is that of the buffers the engine allocates for this rank: its layout's parameters,
// gradients and optimiser state (divided by dp as the ZeRO stage says), and the activations of the
// micro-batches its pipeline schedule keeps in flight (per block from the cost model's count in fp32,
// plus the logits and the chunk boundaries). The machine's side is MemAvailable of /proc/meminfo,
// shared by the ranks mpirun started on this node.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

struct MemoryNeed {
    double params = 0, grads = 0, optimizer = 0, activations = 0;  // bytes, one rank
    double total() const { return params + grads + optimizer + activations; }
};

// layout: this rank's (model::ModelPart's); chunks and slots: its model chunks and the activation
// slots its schedule keeps for each.
MemoryNeed estimate_rank_memory(const TrainConfig& cfg, const model::GptConfig& mc, const model::Layout& layout,
                                int dp, int tp, int cp, const std::vector<std::pair<int, int>>& chunks,
                                const std::vector<int>& slots);

// MemAvailable and MemTotal of /proc/meminfo in bytes; {0, 0} if it cannot be read.
std::pair<double, double> machine_memory();

// Throws, naming both sides, when `ranks_here` ranks of `need` exceed MemAvailable.
void check_memory_fits(const MemoryNeed& need, int ranks_here, const std::string& model_name);

}  // namespace shardlm::train
