// parallel/data_parallel.h: data parallelism and ZeRO stages 0-3 (FSDP) over this rank's part of
// the model (its pipeline chunks, its tensor-parallel shard).
//
// Every DP rank of a group runs the same part on its own rows of the global batch; this class is the
// part's UnitHooks and owns where parameters, gradients and their shards live:
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
// Sharding is per parameter unit (FSDP's flat parameter per wrapped module): unit u's range is padded
// to a multiple of 16 * dp floats (the layout's unit_multiple), and rank r owns the r-th of its dp
// equal slices. The shard boundaries ignore parameter boundaries; the optimiser intersects.
// The token embedding wte is read by the embedding and by the tied head: under ZeRO-3 it has a
// gather slot of its own, and with one pipeline stage it stays gathered from the forward to the
// backward of a micro-batch (the head's backward writes its gradient first).
//
// Mixed precision (the part's precision bf16/fp16): the model reads a 16-bit copy of the parameters
// (whole at stages 0-2, this rank's slices at stage 3, gathered in 16 bits: half the bytes); the
// optimiser updates fp32 master weights, and with ZeRO >= 1 only this rank's slices of them exist;
// after the step each rank rounds its slices into the 16-bit copy and (stages 1-2) all-gathers that.
// Gradients accumulate in fp32 (Megatron's default for bf16: no precision lost across micro-batches);
// reduce_dtype bf16/fp16 rounds them for the reduction only, which then moves half the bytes.
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/part.h"
#include "shardlm/model/pieces.h"
#include "shardlm/optim/optimizer.h"

namespace shardlm::parallel {

struct MemoryReport {
    size_t params = 0, grads = 0, master = 0, optimizer = 0, activations = 0, comm_buffers = 0;
    size_t total() const { return params + grads + master + optimizer + activations + comm_buffers; }
};

class DataParallel : public model::UnitHooks {
public:
    // dp: the data-parallel group. part: built with unit_multiple = dp.size(). zero: 0..3.
    // bucket_mb: all-reduce bucket size for stage 0 (stages 1-3 reduce per unit).
    // single_stage: the part is the whole pipeline (one stage): a micro-batch's backward follows
    // its forward, so ZeRO-3 keeps the units still gathered at the end of the forward.
    // reduce_dtype: the type gradients are reduced in (F32, or BF16/F16: half the bytes).
    DataParallel(comm::Group& dp, model::ModelPart& part, int zero, double bucket_mb, bool single_stage,
                 DType reduce_dtype = DType::F32);
    ~DataParallel() override;

    int zero() const { return zero_; }
    comm::Group& group() { return dp_; }

    // Where this rank keeps its fp32 parameters (the master weights in mixed precision): (flat range
    // of the layout, storage of that range): the whole layout in one buffer, or each unit's shard.
    // Initialise or load into these, then call params_loaded().
    std::vector<std::pair<model::FlatRange, float*>> param_storage();
    void params_loaded();  // mixed precision: the 16-bit copy from the master weights (collective)
    // This rank's slice of every unit (each DP rank writes its slices to a checkpoint, whatever the
    // stage): the flat range, its parameters, and where its optimiser state starts in the
    // optimiser's state buffers.
    struct Slice {
        model::FlatRange range;
        const float* params;
        size_t state;
    };
    std::vector<Slice> slices() const;
    // The whole fp32 parameter buffer of this part, if this rank keeps one (else null).
    const float* full_params() const { return master_full_ ? master_.data() : nullptr; }
    // The full parameters of this part into out (layout().total floats); stage 3 all-gathers unit by
    // unit (collective over the group).
    void gather_params(float* out);

    // Called before a unit's gradient is reduced over the group, with where the gradient is: the
    // accumulated gradient of the step (stages 0-1) or one micro-batch's (stages 2-3). Sequence
    // parallelism sums its replicated parameters' gradients over the tensor-parallel group here.
    void set_pre_reduce(std::function<void(int unit, float* grad)> f) { pre_reduce_ = std::move(f); }

    // The step protocol (the hooks do the rest):
    bool backward_accumulates(int micro) const { return zero_ < 2 && micro > 0; }
    void end_pass(int chunk, bool forward);  // after each pass (stages 2-3: the micro-batch's slices)
    void finish_step();                       // every reduction of the step is complete
    // The gradient of the tied embedding (wte on the first pipeline stage, its copy on the last)
    // summed over `embedding_group` (those two ranks), on this rank's slice; where one rank holds both
    // (ZBV), summed on the rank. Both then take the same optimiser step and stay equal.
    void sum_tied_grads(comm::Group& embedding_group);
    // This rank's share of the squared gradient norm: its slice of every unit, parameters counted
    // once over the tensor-parallel group (model::ParamSpec::counted). Sum it over every rank.
    double grad_norm_sq_local() const;
    // Optimiser over this rank's ranges; then after_step() restores replicated parameters.
    std::vector<optim::Range> owned_ranges() const;
    std::vector<float*> owned_params();
    std::vector<const float*> owned_grads();
    void after_step();

    MemoryReport memory(const optim::Optimizer& opt) const;
    // The report with the ZeRO formulas beside it (fp32 Adam: params 4, grads 4, optimiser 8 bytes
    // per parameter; no separate master copy).
    std::string memory_report(const optim::Optimizer& opt) const;
    // Bytes this rank is expected to send per step on the group, {all_reduce, reduce_scatter,
    // all_gather}, for `micro` micro-batches per chunk.
    std::array<size_t, 3> expected_step_bytes(int micro) const;

    // Seconds the training thread spent waiting for communication since the last reset (the part
    // not hidden behind compute), and the reset.
    double exposed_comm_s() const { return exposed_s_; }
    void reset_exposed() { exposed_s_ = 0; }

    // UnitHooks
    void begin_pass(int chunk, bool forward, int micro, int count) override;
    void before_forward(int unit, int next) override;
    void before_backward(int unit, int next) override;
    void after_backward(int unit) override;

private:
    struct Slot;  // a unit-sized buffer and the request using it
    size_t comm_buffer_bytes() const;  // gather and gradient slots, 16-bit staging
    optim::Range shard(int unit) const;  // this rank's slice of unit, flat coordinates
    size_t shard_elems(int unit) const { return units_[size_t(unit)].numel / size_t(dp_.size()); }
    size_t shard_offset(int unit) const { return shard_off_[size_t(unit)]; }  // in the shard buffers
    bool last_micro() const { return micro_index_ + 1 == micro_count_; }
    int pick_slot(const std::vector<std::unique_ptr<Slot>>& slots, int unit, int keep) const;
    void* gathered(int unit);     // stage 3: wait for / start unit's gather
    float* master_slice(int unit);  // the fp32 master of unit's slice
    void round_to_model(int unit);  // mixed: unit's master slice into the 16-bit copy
    void prefetch(int unit);      // stage 3: start gathering unit into a free slot
    void reset_residency();       // stage 3: forget every gathered unit
    Slot& grad_slot(int unit);    // stages 2-3
    void finish_grad_slot(Slot& s);

    comm::Group& dp_;
    model::ModelPart& part_;
    const std::vector<model::Unit>& units_;
    int zero_;
    bool single_stage_;
    size_t bucket_elems_;
    int wte_unit_ = -1;
    int local_copy_unit_ = -1;  // a tied copy of wte on this rank beside wte itself (ZBV), or -1
    int micro_index_ = 0, micro_count_ = 1;
    int last_unit_ = -1;  // the latest non-wte unit handed to a hook: its slots are in use
    uint64_t clock_ = 0;  // slot use stamps

    DType pt_ = DType::F32;  // the parameters the model reads: fp32, or a 16-bit copy
    DType rt_ = DType::F32;  // the reduction's type
    // fp32 parameters the optimiser updates: the whole layout (fp32 at stages 0-2, mixed at stage 0:
    // master_full_) or this rank's slices (packed by unit); with fp32 and stages 0-2 the model reads it
    AlignedBuffer<float> master_;
    bool master_full_ = true;
    AlignedBuffer<unsigned short> model16_;          // mixed: the 16-bit copy (whole, or stage 3 slices)
    AlignedBuffer<float> grads_, grad_shards_;       // full (stages 0-1), slices (stages 2-3)
    AlignedBuffer<unsigned short> grads16_;          // stages 0-1 reduced in 16 bits: the staging copy
    struct PendingReduce {
        comm::Request req;
        optim::Range back;  // what comes back from grads16_ into grads_ once done (empty: fp32)
    };
    std::vector<PendingReduce> reduces_;
    std::vector<size_t> shard_off_;
    std::vector<std::vector<std::pair<size_t, size_t>>> gaps_;  // per unit: padding [begin, end), local
    std::vector<std::unique_ptr<Slot>> param_slots_, grad_slots_;  // slot 0: wte; 1, 2: the others
    std::vector<comm::Request> pending_;  // stage 1-2 gathers
    std::vector<optim::Range> buckets_;   // stage 0, per chunk, in the order they complete
    std::vector<int> closes_bucket_;      // unit -> index of the bucket it completes, or -1
    std::function<void(int, float*)> pre_reduce_;
    double exposed_s_ = 0;
};

}  // namespace shardlm::parallel
