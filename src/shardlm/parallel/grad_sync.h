// parallel/grad_sync.h: the data-parallel seam. Every rank of a data-parallel (dp) group holds the
// same part of the model (its pipeline chunks, its tensor-parallel shard) and runs it on its own rows
// of the global batch; GradSync is how those ranks make one step of their work, and the one thing
// the pipeline executor and the trainer see of it:
//   the executor   hooks(): the ZeRO stage's hooks around each unit's pass (parallel/zero.h)
//   the schedule   prepare(schedule): the stage's Unshard/Reshard actions, where it needs them
//   the trainer    reduce() at the schedule's ReduceGrads, the norm in the step's sums, then
//                  step() or skip() at its OptimizerStep
// It owns the pieces: where the parameters and gradients live (parallel/param_store.h), the ZeRO
// stage (parallel/zero.h), the dp algorithm (parallel/dp_algo.h: allreduce, or replicas that step on
// their own gradients and combine otherwise) and the tied embedding's two copies
// (parallel/tied_embedding.h).
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "shardlm/comm/collectives.h"
#include "shardlm/comm/group.h"
#include "shardlm/model/part.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/dp_algo.h"
#include "shardlm/parallel/param_store.h"
#include "shardlm/parallel/tied_embedding.h"
#include "shardlm/parallel/zero.h"
#include "shardlm/schedule/schedule.h"

namespace shardlm::parallel {

struct MemoryReport {
    size_t params = 0, grads = 0, master = 0, optimizer = 0, activations = 0, comm_buffers = 0;
    size_t total() const { return params + grads + master + optimizer + activations + comm_buffers; }
};

// The squared gradient norms a step reads once the world has summed every rank's share.
struct GradNormsSq {
    double reported = 0;  // the global norm (replicas that differ: their root mean square)
    double clip = 0;      // what clipping reads: the global norm, or this replica's own
};

class GradSync {
public:
    struct Options {
        ZeroStage zero = ZeroStage::Replicate;
        double bucket_mb = 25;        // stage 0: the gradient all-reduce's bucket
        bool single_stage = false;    // the part is the whole pipeline: a backward follows its forward
        bool split_backward = false;  // the schedule runs a backward's B and W apart (zero-bubble)
        DType reduce_dtype = DType::F32;  // the gradients' type on the wire (BF16/F16: half the bytes)
        // How the group combines its work (null: allreduce in backward). Needs a comm::Group.
        std::unique_ptr<DpAlgorithm> algorithm;
        // The stages of the tied embedding's two copies (null: not tied across stages).
        std::unique_ptr<comm::Group> embedding_group;
        // Before a unit's gradient is reduced over the group (sequence parallelism sums its replicated
        // parameters' gradients over the tensor-parallel group here).
        std::function<void(int unit, float* grad)> pre_reduce;
        // Expert parallelism: the ranks holding the same experts (comm/grid.h: edp), over which an MoE
        // layer's experts are reduced and ZeRO slices them (null: the dp group).
        comm::Collectives* experts = nullptr;
    };
    // dp: the data-parallel group. part: built with unit_multiple = dp.size().
    GradSync(comm::Collectives& dp, model::ModelPart& part, Options o);
    ~GradSync();

    ParamStore& store() { return store_; }
    const ParamStore& store() const { return store_; }
    ZeroStage zero() const { return zero_->stage(); }
    StepHooks& hooks() { return *zero_; }  // for the pipeline executor
    // The dp algorithm (allreduce when none was given).
    const DpAlgorithm* algorithm() const { return algo_.get(); }
    DpAlgorithm* algorithm() { return algo_.get(); }
    bool replicas_differ() const { return differ_; }
    const TiedEmbedding& tied() const { return tied_; }
    // Adds the actions the stage needs to a schedule this part runs (ZeRO-3 under a split backward:
    // each chunk gathered at an Unshard action, released at a Reshard).
    void prepare(schedule::Schedule& s) const;

    // ---- parameters ------------------------------------------------------------------------
    // Initialise or load into store().param_storage(), then call params_loaded() (collective): mixed
    // precision's 16-bit copy from the fp32 master, and a dp algorithm's start (DiLoCo's anchor).
    void params_loaded(bool start_algorithm = true);
    // The full parameters of this part into out (layout().total floats); sliced masters are
    // all-gathered unit by unit (collective over the group).
    void gather_params(float* out);

    // ---- one step, in order ----------------------------------------------------------------
    void begin_step();  // the exposed-communication clock and the embedding group's counters at zero
    // The factor on each rank's loss gradient: dp where each replica steps on its own rows' mean.
    float local_mean_factor() const { return local_ ? float(dp_.size()) : 1.0f; }
    // At the schedule's ReduceGrads: every reduction of the step complete, the tied embedding's copies
    // summed and (compressed) the compressed exchange made, unless some rank's gradient is not finite
    // (world: every rank decides alike; loss_scale: the scale the gradients carry).
    void reduce(int step, float loss_scale, comm::Group& world);
    // The reductions and the tied sums alone (a pass whose gradients feed no update: Sophia's Hessian).
    void finish_reductions();
    // The squared norm travels in the step's one world all-reduce: into `global` this rank's share of
    // the global norm (+inf after an overflow), and where replicas differ into replicas[dp rank] its
    // replica's whole gradient's (norm_slots() doubles; global stays 0 then); by_compute (if given) gets
    // each compute unit's share (ParamStore::grad_norm_sq_local).
    int replica_slots() const { return differ_ ? dp_.size() : 0; }
    void put_norm_sq(double& global, double* replicas, double* by_compute = nullptr) const;
    GradNormsSq norms_sq(double global, const double* replicas) const;
    // At the schedule's OptimizerStep, the update: the optimiser over this rank's owned ranges with the
    // gradients times grad_scale, then the algorithm's combination, the tied copies' re-sync and what
    // the model reads. touched_after: something changes the parameters after the step (a test's fault),
    // so the optimiser must not write the 16-bit copy itself.
    void step(optim::Optimizer& opt, float lr, float grad_scale, int step, bool touched_after = false);
    // ... or no update: a loss-scale overflow skips the replicas' own steps, not their combination.
    void skip(optim::Optimizer& opt, int step, bool overflow);

    // ---- reports -----------------------------------------------------------------------------
    MemoryReport memory(const optim::Optimizer& opt) const;
    // The report with the ZeRO formulas beside it (fp32 Adam: params 4, grads 4, optimiser 8 bytes
    // per parameter; no separate master copy).
    std::string memory_report(const optim::Optimizer& opt) const;
    // Bytes this rank is expected to send per step on the group, {all_reduce, reduce_scatter,
    // all_gather}, for `micro` micro-batches per chunk.
    std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group = UnitGroup::All) const {
        return zero_->expected_step_bytes(micro, group);
    }
    // Seconds the training thread waited for communication since begin_step (not hidden by compute).
    double exposed_comm_s() const { return zero_->exposed_comm_s(); }

private:
    void after_update(optim::Optimizer& opt, int step);

    comm::Collectives& dp_;
    model::ModelPart& part_;
    ParamStore store_;
    std::unique_ptr<ZeroStrategy> zero_;
    std::unique_ptr<DpAlgorithm> algo_;
    TiedEmbedding tied_;
    bool local_ = false;   // each replica steps on its own gradient (no reduction in backward)
    bool differ_ = false;  // and the replicas' parameters differ between their combinations
    // the algorithm's averages can round the tied embedding's two copies apart: re-synced after a step
    bool resync_tied_ = false;
    bool overflow_ = false;  // this step: some rank's local gradient is not finite (compressed)
};

}  // namespace shardlm::parallel
