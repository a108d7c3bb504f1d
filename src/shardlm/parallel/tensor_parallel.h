// parallel/tensor_parallel.h: Megatron tensor parallelism's communication, for the model.
//
// model/ computes the column- and row-parallel linears, the vocabulary-parallel embedding and
// cross-entropy on this rank's shards and calls model::TensorParallel for the conjugate operators
// (model/tensor_parallel.h); this class is that interface over the tensor-parallel comm::Group.
// Every call is a blocking collective on the training thread: it is on the critical path, and the
// communication engine runs it at once even while data-parallel buckets of another group are in
// flight on the communication thread (comm/progress.h).
//
// Sequence parallelism also leaves the replicated parameters (LayerNorms, row-parallel biases, wpe)
// with partial gradients, one per rank's rows: sync_replicated_grads sums them over the group.
#pragma once
#include <utility>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/tensor_parallel.h"

namespace shardlm::parallel {

class GroupTensorParallel final : public model::TensorParallel {
public:
    explicit GroupTensorParallel(comm::Group& g) : g_(g) {}
    int size() const override { return g_.size(); }
    int rank() const override { return g_.rank(); }
    void all_reduce_sum(float* x, size_t n) override { g_.all_reduce_sum(x, n); }
    void all_reduce_max(float* x, size_t n) override { g_.all_reduce_max(x, n); }
    void all_gather(const float* in, float* out, size_t n_per_rank) override { g_.all_gather(in, out, n_per_rank); }
    void all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) override {
        g_.all_gather_bytes(in, out, bytes_per_rank);
    }
    void reduce_scatter_sum(const float* in, float* out, size_t n_per_rank) override {
        g_.reduce_scatter_sum(in, out, n_per_rank);
    }

private:
    comm::Group& g_;
};

// The runs of contiguous replicated parameters of a unit ([begin, end), unit-local elements): one
// all-reduce each when they are summed.
std::vector<std::pair<size_t, size_t>> replicated_runs(const model::Layout& layout, int unit);

// Sums the gradients of unit's replicated parameters (grad: the unit's gradient, unit-local
// offsets) over the tensor-parallel group: needed under sequence parallelism only.
void sync_replicated_grads(comm::Group& tp, const model::Layout& layout, int unit, float* grad);

}  // namespace shardlm::parallel
