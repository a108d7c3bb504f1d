// model/block_unit.h: a transformer block as a compute unit: x[in] -> x[in + 1] through attention and the
// MLP (model/units.h: block_forward, block_backward_input, block_backward_weight), on the part's lanes.
// Per slot it keeps its saved activations (none under full recomputation: one shared set is refilled
// before its backward) and, when W is deferred, what its B leaves for its W.
#pragma once
#include <vector>

#include "shardlm/model/compute_unit.h"

namespace shardlm::model {

class BlockUnit final : public ComputeUnit {
public:
    int compute_index() const override { return 1 + layer_; }
    BlockUnit(int in, const UnitEnv& env, int layer);
    int layer() const { return layer_; }
    double forward(ForwardPass& p) override;
    void backward(BackwardPass& p) override;
    // an MoE layer's experts first: the backward finishes units in descending memory order
    void backward_units(std::vector<int>& order) const override {
        if (moe_) order.push_back(experts_unit());
        order.push_back(unit());
    }
    SlotBytes bytes(int slot) const override;
    void products_changed() override;

private:
    struct State {
        BlockActs acts;  // empty under full recomputation
        BlockKeep keep;  // deferred W only
        float objective_scale = 0;  // an MoE layer's: its forward's factor on the balance and z-losses
    };
    int unit() const { return env_.ids->block[size_t(layer_)]; }
    int experts_unit() const { return env_.ids->experts[size_t(layer_)]; }
    BlockWeights weights(float objective_scale);
    BlockGrads grads() const;
    BlockActs& acts(int slot);
    BlockKeep& keep(int slot) { return env_.defer ? slots_[size_t(slot)].keep : env_.shared->keep; }

    int layer_;
    bool moe_;  // the feed-forward is a mixture of experts
    std::vector<State> slots_;
};

}  // namespace shardlm::model
