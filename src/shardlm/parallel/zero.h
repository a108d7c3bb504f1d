// parallel/zero.h: the ZeRO stages as strategies, one small object each, behind StepHooks.
//
// A strategy is the part's UnitHooks (it binds gradient slots and gathered parameters around each
// unit's pass and starts each unit's reduction once its gradient is final) plus the step protocol
// the executor drives (StepHooks) and the trainer's end of the step (finish_step, after_step). It
// owns no parameters: those live in the ParamStore (parallel/param_store.h), whose Residency the
// stage chooses (ZeroStrategy::residency).
//
//   stage  class              gradients                            after backward / the step
//   0      Replicated         whole; buckets all-reduced as soon   every rank updates everything
//                             as their last unit is final
//   1      ShardedOptimizer   whole; each unit reduce-scattered    rank updates its slices, then
//                             once final (last micro-batch)        all-gathers each unit
//   2      ShardedGradients   only this rank's slices persist:     as 1
//                             each micro-batch's unit gradient goes
//                             to a unit-sized slot, is reduce-
//                             scattered and added into the slice
//   3      ShardedParameters  as 2                                 rank updates its slices; nothing
//                             parameters: a unit is all-gathered           to gather
//                             just before its forward and again before its backward (the next unit
//                             prefetched), then released
//
// The token embedding wte is read by the embedding and by the tied head: its slots are its own
// (slot 0), and with one pipeline stage ZeRO-3 keeps it gathered from the forward to the backward
// of a micro-batch (the head's backward writes its gradient first).
//
// Mixed precision: the model reads the 16-bit copy; after the step each rank rounds its slices of
// the fp32 master into it and (stages 1-2) all-gathers that, in 16 bits. Gradients accumulate in
// fp32; a 16-bit reduce type rounds them for the reduction only (half the bytes on the wire).
//
// ZeRO-3 and a split backward (B apart from W, the zero-bubble schedules): the gathers become the
// schedule's Unshard / Reshard actions (PyTorch pipelining's UNSHARD/RESHARD,
// schedule::add_unshard_actions): a chunk is gathered once before its first pass of the step and
// released after its last, so a deferred W finds its parameters. The stage says whether it needs
// those actions (needs_unshard_actions); parallel/grad_sync.h adds them to the schedules it runs.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shardlm/comm/collectives.h"
#include "shardlm/comm/group.h"
#include "shardlm/model/part.h"
#include "shardlm/parallel/param_store.h"

namespace shardlm::parallel {

// What the pipeline executor sees of data parallelism: the part's unit hooks plus the pass protocol.
class StepHooks : public model::UnitHooks {
public:
    // Whether micro-batch `micro`'s backward adds into the bound gradients (else it writes them).
    virtual bool backward_accumulates(int micro) const = 0;
    virtual void end_pass(int chunk, bool forward) = 0;  // after each pass of a chunk
    // The schedule's Unshard / Reshard actions (schedule::add_unshard_actions): the chunk's
    // parameters gathered for the step's passes, then released. Only sharded parameters act.
    virtual void unshard(int chunk) {}
    virtual void reshard(int chunk) {}
};

// Which units' traffic: every unit's, those reduced over the dp group, or an MoE layer's experts (over theirs).
enum class UnitGroup { All, Data, Experts };

class ZeroStrategy : public StepHooks {
public:
    struct Setup {
        comm::Collectives& dp;
        model::ModelPart& part;
        ParamStore& store;
        double bucket_mb = 25;      // stage 0: gradient all-reduce bucket
        bool single_stage = false;  // the part is the whole pipeline: a backward follows its forward
        // the schedule runs a backward's B and W apart: stage 3 gathers a chunk at a time at the
        // schedule's Unshard/Reshard actions (the W needs the parameters after the B), not a unit at
        // a time around each pass
        bool split_backward = false;
        // stages 0-1: reduce the gradients over the group (false: each rank keeps its own, for a
        // data-parallel algorithm that combines them otherwise, parallel/dp_algo.h)
        bool reduce = true;
        // the expert-data-parallel group an MoE layer's experts are reduced and sliced over (null: dp)
        comm::Collectives* edp = nullptr;
    };
    explicit ZeroStrategy(const Setup& s);
    ~ZeroStrategy() override;
    virtual ZeroStage stage() const = 0;
    // Whether the schedules this stage runs need Unshard/Reshard actions (schedule::add_unshard_actions).
    virtual bool needs_unshard_actions() const { return false; }

    // Called before a unit's gradient is reduced, with where it is (the step's accumulated gradient,
    // stages 0-1, or one micro-batch's, stages 2-3). Sequence parallelism sums its replicated
    // parameters' gradients over the tensor-parallel group here.
    void set_pre_reduce(std::function<void(int unit, float* grad)> f) { pre_reduce_ = std::move(f); }

    virtual void finish_step();    // every reduction of the step complete, gradients in fp32
    virtual void after_step() = 0; // the optimiser stepped the owned slices: restore what the model reads
    // The optimiser wrote the 16-bit copy of its slices in its own pass (Optimizer::Mirror): after_step
    // only gathers what it must.
    void params_rounded() { rounded_ = true; }
    virtual size_t comm_buffer_bytes() const;  // slots and 16-bit staging
    // Bytes this rank should send per step, {all_reduce, reduce_scatter, all_gather}, for `micro`
    // micro-batches per chunk, over the units of `group` (UnitGroup: all, the dp group's or the experts').
    virtual std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group = UnitGroup::All) const = 0;

    // The group a unit's gradient is reduced over and its slices gathered in: the dp group, or the experts'.
    comm::Collectives& group(int unit) const { return store_.expert_unit(unit) ? edp_ : dp_; }

    // Seconds the training thread waited for communication since the last reset.
    double exposed_comm_s() const { return exposed_s_; }
    void reset_exposed() { exposed_s_ = 0; }

    void begin_pass(int chunk, bool forward, int micro, int count) override;

protected:
    bool last_micro() const { return micro_index_ + 1 == micro_count_; }
    void wait(comm::Request& r);  // counted as exposed communication
    // stages 1-2: every rank's updated slices to every rank (16-bit copy, or the fp32 master)
    void gather_updated_slices();
    // bytes this rank sends in op k of elems elements over unit's group (-1: the dp group)
    size_t ring_bytes(comm::OpKind k, size_t elems, DType t, int unit = -1) const;

    // stages 1-3's bytes: every unit reduce-scattered `reductions` times and all-gathered once
    std::array<size_t, 3> sharded_step_bytes(int reductions, UnitGroup group) const;
    bool in_group(int unit, UnitGroup g) const { return g == UnitGroup::All || store_.expert_unit(unit) == (g == UnitGroup::Experts); }

    comm::Collectives& dp_;
    comm::Collectives& edp_;
    model::ModelPart& part_;
    ParamStore& store_;
    const std::vector<model::Unit>& units_;
    int wte_unit_ = -1;
    DType pt_, rt_;
    int micro_index_ = 0, micro_count_ = 1;
    bool reduce_ = true;
    std::function<void(int, float*)> pre_reduce_;
    double exposed_s_ = 0;
    bool rounded_ = false;  // params_rounded() this step
    // Mixed precision: every unit's slice rounded into the 16-bit copy, unless the optimiser did (the
    // flag is cleared either way)
    void round_slices_to_model();
    struct PendingReduce {
        comm::Request req;
        optim::Range back;  // what comes back from the 16-bit staging into the gradients once done
    };
    std::vector<PendingReduce> reduces_;
};

// stage 0
class Replicated final : public ZeroStrategy {
public:
    explicit Replicated(const Setup& s);
    ZeroStage stage() const override { return ZeroStage::Replicate; }
    bool backward_accumulates(int micro) const override { return micro > 0; }
    void end_pass(int, bool) override {}
    void after_backward(int unit) override;
    void after_step() override;
    std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group) const override;

private:
    // buckets, per chunk: a chunk's units finish in descending memory order (the head and the tied
    // copy, the last block, ..., the embedding), so a bucket is one contiguous range, closed by its
    // lowest unit once it reaches the bucket size (or at the chunk's first unit)
    std::vector<optim::Range> buckets_;
    std::vector<bool> bucket_group_;  // the bucket holds an MoE layer's experts (reduced over their group)
    std::vector<int> closes_bucket_;  // unit -> index of the bucket it completes, or -1
};

// stage 1
class ShardedOptimizer final : public ZeroStrategy {
public:
    using ZeroStrategy::ZeroStrategy;
    ZeroStage stage() const override { return ZeroStage::Optimizer; }
    bool backward_accumulates(int micro) const override { return micro > 0; }
    void end_pass(int, bool) override {}
    void after_backward(int unit) override;
    void after_step() override { gather_updated_slices(); }
    std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group) const override;
};

// stage 2 (and the gradient half of stage 3)
class ShardedGradients : public ZeroStrategy {
public:
    explicit ShardedGradients(const Setup& s);
    ~ShardedGradients() override;
    ZeroStage stage() const override { return ZeroStage::Gradients; }
    bool backward_accumulates(int) const override { return false; }  // each micro-batch its own slot
    void end_pass(int chunk, bool forward) override;
    void before_backward(int unit, int next) override;
    void after_backward(int unit) override;
    void after_step() override { gather_updated_slices(); }
    size_t comm_buffer_bytes() const override;
    std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group) const override;

protected:
    struct Slot;  // a unit-sized buffer and the request using it
    // The slot for unit: 0 for wte; else the least recently used of the others that holds neither `keep`
    // nor `keep2` (in use).
    int pick_slot(const std::vector<std::unique_ptr<Slot>>& slots, int unit, int keep, int keep2 = -1) const;
    std::vector<std::unique_ptr<Slot>> make_slots(size_t elem_bytes, bool grad) const;
    float* take_grad_slot(int unit);  // the unit's micro-batch gradient, zeroed where nothing writes
    void finish_grad_slot(Slot& s);   // the reduced slice added into the gradient slices
    std::vector<std::unique_ptr<Slot>> grad_slots_;
    uint64_t clock_ = 0;  // slot use stamps
};

// stage 3: a unit gathered around each of its passes into two rotating slots (the next one
// prefetched), or, under a split backward, a whole chunk from the schedule's Unshard to its Reshard
class ShardedParameters final : public ShardedGradients {
public:
    ShardedParameters(const Setup& s);
    ~ShardedParameters() override;
    ZeroStage stage() const override { return ZeroStage::Parameters; }
    void begin_pass(int chunk, bool forward, int micro, int count) override;
    void before_forward(int unit, int next) override;
    void before_backward(int unit, int next) override;
    void unshard(int chunk) override;
    void reshard(int chunk) override;
    void after_step() override;  // round this rank's slices; nothing to gather
    size_t comm_buffer_bytes() const override;
    std::array<size_t, 3> expected_step_bytes(int micro, UnitGroup group) const override;
    bool needs_unshard_actions() const override { return per_chunk_; }

private:
    void* gathered(int unit);  // wait for / start unit's gather
    void prefetch(int unit);   // start gathering unit into a free slot
    void reset_residency();    // forget every gathered unit
    void in_use(int unit);     // a hook handed unit's parameters out
    bool single_stage_;
    // the latest two non-wte units handed to a hook: their slots are in use (an MoE layer's block reads its
    // own unit and its experts')
    int last_unit_ = -1, prev_unit_ = -1;
    std::vector<std::unique_ptr<Slot>> param_slots_;
    bool per_chunk_ = false;
    std::vector<AlignedBuffer<unsigned char>> chunk_params_;  // per local chunk, while unsharded
    size_t chunk_peak_bytes_ = 0;                             // the most held at once
};

std::unique_ptr<ZeroStrategy> make_zero_strategy(ZeroStage stage, const ZeroStrategy::Setup& s);

}  // namespace shardlm::parallel
