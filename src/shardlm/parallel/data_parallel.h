// parallel/data_parallel.h: data parallelism and ZeRO stages 0-3 (FSDP) over the model's units.
//
// Every DP rank runs the same model on its own rows of the global batch; this class is the model's
// UnitHooks and owns where parameters, gradients and their shards live:
//
//   stage  parameters            gradients                            after backward / the step
//   0      full, replicated      full; buckets all-reduced as soon    every rank updates everything
//                                as their last unit is final
//   1      full, replicated      full; each unit reduce-scattered     rank updates its shard, then
//                                once final (last micro-batch)        all-gathers each unit
//   2      full, replicated      only this rank's shard persists:     as 1
//                                each micro-batch's unit gradient goes
//                                to a unit-sized buffer, is reduce-
//                                scattered and added into the shard
//   3      only this rank's      as 2                                 rank updates its shard; nothing
//          shard; a unit is all-gathered just before its forward and         to gather
//          again before its backward (the next unit prefetched), then released
//
// Sharding is per unit (FSDP's flat parameter per wrapped module): unit u's range is padded to a
// multiple of 16 * dp floats (make_gpt2_layout's unit_multiple), and rank r owns the r-th of its dp
// equal slices. The shard boundaries ignore parameter boundaries; the optimiser intersects.
// The embedding unit is tied to the head (wte), so under ZeRO-3 it stays gathered from its forward
// to its backward, and its gradient buffer lives through the whole backward.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/gpt.h"
#include "shardlm/optim/optimizer.h"

namespace shardlm::parallel {

struct MemoryReport {
    size_t params = 0, grads = 0, master = 0, optimizer = 0, activations = 0, comm_buffers = 0;
    size_t total() const { return params + grads + master + optimizer + activations + comm_buffers; }
};

class DataParallel : public model::UnitHooks {
public:
    // dp: the data-parallel group. gpt: built with unit_multiple = dp.size(). zero: 0..3.
    // bucket_mb: all-reduce bucket size for stage 0 (stages 1-3 reduce per unit).
    DataParallel(comm::Group& dp, model::Gpt& gpt, int zero, double bucket_mb);
    ~DataParallel() override;

    int zero() const { return zero_; }
    comm::Group& group() { return dp_; }

    // Parameters from a full flat buffer (init or checkpoint): each rank keeps what its stage stores.
    void load_params(const float* full);
    // The full parameters into `out` (layout().total floats). Stage 3 all-gathers unit by unit.
    // Collective over the group; every rank gets the result.
    void gather_params(float* out);
    // Stages 0-2: the replicated full parameter buffer; stage 3: null.
    const float* full_params() const { return zero_ < 3 ? params_.data() : nullptr; }

    // The step protocol around gpt.forward/backward (hooks = this):
    void begin_micro_batch(int index, int count);  // index-th of `count` micro-batches of this step
    bool backward_accumulates() const;             // pass to Gpt::backward as `accumulate`
    void end_backward();                            // after each micro-batch's backward
    double grad_norm_sq();                          // global sum of squared gradients (collective)
    // Optimiser over this rank's ranges; then after_step() restores replicated parameters.
    std::vector<optim::Range> owned_ranges() const;
    std::vector<float*> owned_params();
    std::vector<const float*> owned_grads();
    void after_step();

    MemoryReport memory(const optim::Optimizer& opt) const;
    // The report with the ZeRO formulas beside it (fp32 Adam: params 4, grads 4, optimiser 8 bytes
    // per parameter; no separate master copy).
    std::string memory_report(const optim::Optimizer& opt) const;
    // Bytes this rank is expected to send per step, per op kind, for `micro` micro-batches.
    std::string comm_report(int micro) const;
    // Theory for one step: {all_reduce, reduce_scatter, all_gather} bytes sent by this rank.
    std::array<size_t, 3> expected_step_bytes(int micro) const;

    // Seconds the training thread spent waiting for communication since the last reset (the part
    // not hidden behind compute), and the reset.
    double exposed_comm_s() const { return exposed_s_; }
    void reset_exposed() { exposed_s_ = 0; }

    // UnitHooks
    void before_forward(int unit) override;
    void before_backward(int unit) override;
    void after_backward(int unit) override;

private:
    struct Slot;  // a unit-sized buffer and the request using it
    optim::Range shard(int unit) const;  // this rank's slice of unit, flat coordinates
    size_t shard_elems(int unit) const { return units_[size_t(unit)].numel / size_t(dp_.size()); }
    size_t shard_offset(int unit) const { return shard_off_[size_t(unit)]; }  // in the shard buffers
    float* gathered(int unit);                       // stage 3: wait for / start unit's gather
    void prefetch(int unit);                         // stage 3: start gathering unit into a free slot
    Slot& grad_slot(int unit);                       // stages 2-3
    void finish_grad_slot(Slot& s);

    comm::Group& dp_;
    model::Gpt& gpt_;
    const std::vector<model::Unit>& units_;
    int zero_;
    size_t bucket_elems_;
    int micro_index_ = 0, micro_count_ = 1;
    bool last_micro() const { return micro_index_ + 1 == micro_count_; }

    AlignedBuffer<float> params_, grads_;            // full (stages 0-2 params, stages 0-1 grads)
    AlignedBuffer<float> param_shards_, grad_shards_;  // stage 3 params, stages 2-3 grads
    std::vector<size_t> shard_off_;
    std::vector<std::vector<std::pair<size_t, size_t>>> gaps_;  // per unit: padding [begin, end), local
    std::vector<std::unique_ptr<Slot>> param_slots_, grad_slots_;
    std::vector<int> param_slot_of_;  // unit -> param slot holding it (-1: none)
    std::vector<comm::Request> pending_;  // stage 0-1 reductions, stage 1-2 gathers
    std::vector<optim::Range> buckets_;  // stage 0, in the order they complete
    std::vector<int> closes_bucket_;      // unit -> index of the bucket it completes, or -1
    double exposed_s_ = 0;
};

}  // namespace shardlm::parallel
