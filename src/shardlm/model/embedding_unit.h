// model/embedding_unit.h: the first compute unit: token ids in, x0 = wte[tokens] + wpe[positions] out
// (model/units.h: embedding_forward). Its backward is all W: it has no input gradient.
#pragma once
#include <vector>

#include "shardlm/model/compute_unit.h"

namespace shardlm::model {

class EmbeddingUnit final : public ComputeUnit {
public:
    int compute_index() const override { return 0; }
    // head_here: the chunk holds the head too, which announces the tied wte first in a backward
    EmbeddingUnit(int in, const UnitEnv& env, bool head_here);
    bool reads_stream() const override { return false; }
    void check_inputs(const ForwardPass& p) const override;
    double forward(ForwardPass& p) override;
    void backward(BackwardPass& p) override;
    void backward_units(std::vector<int>& order) const override;
    SlotBytes bytes(int slot) const override;

private:
    struct State {
        AlignedBuffer<int> tokens;  // (N) the inputs
        AlignedBuffer<float> dx0;   // deferred W only: d(x0), as dres takes the next micro-batch's
    };
    std::vector<State> slots_;
    bool head_here_;
};

}  // namespace shardlm::model
