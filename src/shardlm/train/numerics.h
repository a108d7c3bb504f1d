// train/numerics.h: numerical guards of a training run (--on-nan; spikes: train/health.h).
//
// A non-finite loss or gradient is seen by every rank at once: the step's world all-reduce sums the
// loss and the squared gradient norm, and NaN/inf survive the sum. Every rank then takes the same
// decision (--on-nan stop: no update and the run ends; skip: no optimiser update on any rank this
// step). To say where it started, each rank scans what it owns (its ranges of parameters and
// gradients) and the findings are exchanged, so the message names the first non-finite tensor: a
// parameter unit (forward order: it poisons everything after it), else the loss, else a gradient unit
// (backward order: the head's gradients come first).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"

namespace shardlm::train {

// What a rank owns: ranges of the flat buffer and where each is stored (ParamStore::owned_*).
struct OwnedTensors {
    const model::Layout* layout = nullptr;
    std::vector<optim::Range> ranges;
    std::vector<float*> params;
    std::vector<const float*> grads;  // empty: not scanned
};

struct NonFiniteReport {
    std::string message;  // "first non-finite tensor: gradient of unit h.1 (transformer.h.1.mlp.c_fc.weight, rank 1)"
    bool params = false;  // some parameter is non-finite (skipping steps cannot recover)
};
// Collective over world.
NonFiniteReport find_nonfinite(comm::Group& world, const OwnedTensors& mine, bool loss_finite);
// Whether every parameter of every rank is finite (collective over world).
bool params_finite(comm::Group& world, const OwnedTensors& mine);

// A JSON number, or null for NaN/inf (metrics.jsonl stays JSON).
std::string json_number(double x, const char* fmt = "%.17g");

}  // namespace shardlm::train
