// model/head_unit.h: the last compute unit: the final norm, the logits over this rank's vocabulary rows
// and, with targets, the loss (model/units.h: head_forward, head_backward_input, head_backward_weight).
// It multiplies by the tied wte (the embedding's, or a last pipeline stage's copy) or its own lm_head.
#pragma once
#include <vector>

#include "shardlm/model/compute_unit.h"

namespace shardlm::model {

class HeadUnit final : public ComputeUnit {
public:
    int compute_index() const override { return head_compute_unit(env_.config->n_layer); }
    // embedding_here: the chunk starts with the embedding, whose wte the forward has announced already
    HeadUnit(int in, const UnitEnv& env, bool embedding_here);
    bool writes_stream() const override { return false; }
    void check_inputs(const ForwardPass& p) const override;
    double forward(ForwardPass& p) override;
    void backward(BackwardPass& p) override;
    void backward_units(std::vector<int>& order) const override;
    SlotBytes bytes(int slot) const override;
    // the head's buffers for the products: full logits, or a chunked head's bf16 gradient
    void products_changed() override;
    const HeadActs& acts(int slot) const { return slots_[size_t(slot)].acts; }

private:
    struct State {
        HeadActs acts;
        HeadKeep keep;  // deferred W only
    };
    const void* matrix() const;  // wte (tied) or lm_head
    HeadKeep& keep(int slot) { return env_.defer ? slots_[size_t(slot)].keep : env_.shared->head_keep; }

    std::vector<State> slots_;
    bool embedding_here_;
};

}  // namespace shardlm::model
