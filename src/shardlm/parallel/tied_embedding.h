// parallel/tied_embedding.h: the token embedding wte, read by the embedding and by the tied LM head.
//
// With one pipeline stage both read the same unit, and its gradient is one buffer. With several, the
// first model chunk holds wte and the last a copy of it (the head's): each copy's gradient is half
// of the truth, so after the step's reductions the two are summed over the embedding group (the
// two stages' ranks at the same data- and tensor-parallel position), and both take the same optimiser
// step. ZBV puts both chunks on one rank: the sum is made there. A data-parallel algorithm whose
// averages round the copies apart (parallel/dp_algo.h: may_desync_tied) makes them equal again after
// the step: the embedding stage's copy is broadcast to the head's.
#pragma once
#include <cstddef>
#include <memory>
#include <utility>

#include "shardlm/comm/group.h"
#include "shardlm/model/layout.h"
#include "shardlm/parallel/param_store.h"

namespace shardlm::parallel {

class TiedEmbedding {
public:
    // group: the stages of the first and last model chunks (null: the embedding is not tied across
    // stages, nothing to do). reduced: the gradients were reduced over the data-parallel group, so
    // each rank sums only the slice it owns (else the whole local gradient).
    TiedEmbedding(std::unique_ptr<comm::Group> group, ParamStore& store, bool reduced);

    bool active() const { return group_ != nullptr; }
    comm::Group* group() const { return group_.get(); }
    // The two copies' gradients summed; both copies then hold the sum.
    void sum_grads();
    // The two copies' fp32 parameters made equal: the embedding stage's to the head's.
    void sync_params();

private:
    std::pair<float*, size_t> grad(int unit);  // what sum_grads sums of a unit's gradient

    std::unique_ptr<comm::Group> group_;
    ParamStore& store_;
    bool reduced_;
    int wte_unit_ = -1;
    int local_copy_unit_ = -1;  // the head's copy on this rank beside wte itself (ZBV), or -1
};

}  // namespace shardlm::parallel
