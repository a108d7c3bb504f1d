// parallel/data_parallel.h: data parallelism and ZeRO stages 0-3 (FSDP) over this rank's part of
// the model (its pipeline chunks, its tensor-parallel shard): the one object the engine builds.
//
// Every DP rank of a group runs the same part on its own rows of the global batch. DataParallel
// puts together the two halves of the concern and is what the trainer and checkpoints talk to:
//   parallel/param_store.h  where the parameters, the fp32 master, the 16-bit copy and the gradients
//                           live, whole or as this rank's slices, and how units are sliced;
//   parallel/zero.h         the stage as a strategy (Replicated, ShardedOptimizer, ShardedGradients,
//                           ShardedParameters): the hooks around each unit's pass, the reductions,
//                           the gathers; the pipeline executor sees it only as StepHooks.
// Here: initialising and loading parameters, the tied embedding's gradient sum, the optimiser's view,
// and the reports.
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/part.h"
#include "shardlm/model/pieces.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/param_store.h"
#include "shardlm/parallel/zero.h"

namespace shardlm::parallel {

struct MemoryReport {
    size_t params = 0, grads = 0, master = 0, optimizer = 0, activations = 0, comm_buffers = 0;
    size_t total() const { return params + grads + master + optimizer + activations + comm_buffers; }
};

class DataParallel {
public:
    // dp: the data-parallel group. part: built with unit_multiple = dp.size(). zero: 0..3.
    // bucket_mb: all-reduce bucket size for stage 0 (stages 1-3 reduce per unit).
    // single_stage: the part is the whole pipeline (one stage): a micro-batch's backward follows
    // its forward, so ZeRO-3 keeps the units still gathered at the end of the forward.
    // reduce_dtype: the type gradients are reduced in (F32, or BF16/F16: half the bytes).
    // gather_per_chunk: ZeRO-3 gathers a chunk at the schedule's Unshard actions (ZeroStrategy::Setup).
    // reduce_grads false: stages 0-1 leave each rank its own gradient (parallel/dp_algo.h combines them).
    DataParallel(comm::Collectives& dp, model::ModelPart& part, int zero, double bucket_mb, bool single_stage,
                 DType reduce_dtype = DType::F32, bool gather_per_chunk = false, bool reduce_grads = true);
    ~DataParallel();

    int zero() const { return zero_->stage(); }
    StepHooks& hooks() { return *zero_; }  // for the pipeline executor
    bool gathers_per_chunk() const { return gather_per_chunk_; }  // schedules need Unshard actions
    ParamStore& store() { return store_; }

    // Where this rank keeps its fp32 parameters (the master weights in mixed precision): (flat range
    // of the layout, storage of that range). Initialise or load into these, then call params_loaded().
    std::vector<std::pair<model::FlatRange, float*>> param_storage() { return store_.param_storage(); }
    void params_loaded();  // mixed precision: the 16-bit copy from the master weights (collective)
    using Slice = ParamStore::Slice;
    std::vector<Slice> slices() const { return store_.slices(); }
    // The whole fp32 parameter buffer of this part, if this rank keeps one (else null).
    const float* full_params() const { return store_.residency().master_whole ? store_.master() : nullptr; }
    // The full parameters of this part into out (layout().total floats); sliced masters are
    // all-gathered unit by unit (collective over the group).
    void gather_params(float* out);

    // Called before a unit's gradient is reduced over the group (ZeroStrategy::set_pre_reduce).
    void set_pre_reduce(std::function<void(int unit, float* grad)> f) { zero_->set_pre_reduce(std::move(f)); }

    // The step's end:
    void finish_step() { zero_->finish_step(); }  // every reduction of the step is complete
    // The gradient of the tied embedding (wte on the first pipeline stage, its copy on the last)
    // summed over `embedding_group` (those two ranks), on this rank's slice; where one rank holds both
    // (ZBV), summed on the rank. Both then take the same optimiser step and stay equal.
    void sum_tied_grads(comm::Group& embedding_group);
    // The tied embedding's parameters made equal again on its two stages: the embedding stage's fp32
    // master (or this rank's slice of it) broadcast to the head's copy. For data-parallel algorithms whose
    // averages round the two copies differently (their sums' order follows a buffer position that
    // differs between the stages).
    void sync_tied_params(comm::Group& embedding_group);
    // This rank's share of the squared gradient norm (sum it over every rank).
    double grad_norm_sq_local() const { return store_.grad_norm_sq_local(); }
    // The squared norm of this rank's whole gradient (counted elements): a replica's own, where the
    // replicas' gradients are not reduced (ZeRO-0/1 keep whole gradients).
    double grad_norm_sq_whole() const { return store_.grad_norm_sq_local(true); }
    float* whole_grads() { return store_.residency().grads_whole ? store_.grads() : nullptr; }
    float* whole_params() { return store_.residency().master_whole ? store_.master() : nullptr; }
    // Optimiser over this rank's ranges; then after_step() restores what the model reads.
    std::vector<optim::Range> owned_ranges() const { return store_.owned_ranges(); }
    std::vector<float*> owned_params() { return store_.owned_params(); }
    std::vector<const float*> owned_grads() { return store_.owned_grads(); }
    void after_step() { zero_->after_step(); }
    // Mixed precision: where the optimiser may write the owned ranges' 16-bit copy (null: none), and
    // that it did (after_step then only gathers)
    std::optional<optim::Optimizer::Mirror> owned_mirror() {
        if (store_.param_type() == DType::F32) return std::nullopt;
        return optim::Optimizer::Mirror{store_.owned_params16(), store_.param_type()};
    }
    void params_rounded() { zero_->params_rounded(); }

    MemoryReport memory(const optim::Optimizer& opt) const;
    // The report with the ZeRO formulas beside it (fp32 Adam: params 4, grads 4, optimiser 8 bytes
    // per parameter; no separate master copy).
    std::string memory_report(const optim::Optimizer& opt) const;
    // Bytes this rank is expected to send per step on the group, {all_reduce, reduce_scatter,
    // all_gather}, for `micro` micro-batches per chunk.
    std::array<size_t, 3> expected_step_bytes(int micro) const { return zero_->expected_step_bytes(micro); }

    // Seconds the training thread spent waiting for communication since the last reset (the part
    // not hidden behind compute), and the reset.
    double exposed_comm_s() const { return zero_->exposed_comm_s(); }
    void reset_exposed() { zero_->reset_exposed(); }

private:
    comm::Collectives& dp_;
    model::ModelPart& part_;
    ParamStore store_;
    std::unique_ptr<ZeroStrategy> zero_;
    int wte_unit_ = -1;
    int local_copy_unit_ = -1;  // a tied copy of wte on this rank beside wte itself (ZBV), or -1
    bool gather_per_chunk_ = false;
    bool reduce_grads_ = true;
    std::pair<float*, size_t> tied_grad(int unit);  // what sum_tied_grads sums of a unit's gradient
};

}  // namespace shardlm::parallel
