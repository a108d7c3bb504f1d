// parallel/param_store.h: where this rank's parameters and gradients live (the fp32 master, the
// 16-bit copy the model reads in mixed precision, the gradient buffers), and how each parameter unit
// is sharded over the data-parallel ranks.
//
// Sharding is per parameter unit (FSDP's flat parameter per wrapped module): unit u's range is padded
// to a multiple of 16 * dp floats (the layout's unit_multiple), and rank r owns the r-th of its dp
// equal slices. The shard boundaries ignore parameter boundaries; the optimiser intersects.
//
// What is whole and what is a slice is a Residency, the ZeRO stage's (core/zero_stage.h). In fp32
// the model reads the master itself (stages 0-2: whole); in mixed precision it reads the 16-bit copy.
// Slices are packed unit after unit (shard_offset). Gradients accumulate in fp32; a 16-bit reduction
// (reduce type bf16/fp16) stages whole gradients in grads16 (stages 0-1).
#pragma once
#include <cstddef>
#include <utility>
#include <functional>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/zero_stage.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/pieces.h"
#include "shardlm/optim/optimizer.h"

namespace shardlm::parallel {

// Over which ranks the units are sliced: the data-parallel group, and for an MoE layer's experts
// (model::UnitKind::Experts) the expert-data-parallel group (the dp / ep ranks that hold the same experts;
// the dp group without expert parallelism).
struct ShardGroups {
    int dp_rank = 0, dp_size = 1;
    int edp_rank = 0, edp_size = 1;
    static ShardGroups data_parallel(int rank, int size) { return {rank, size, rank, size}; }
};

class ParamStore {
public:
    // param: the type the model reads (F32, or BF16/F16: a 16-bit copy of the fp32 master);
    // reduce: the gradients' type on the wire (a 16-bit one stages whole gradients).
    ParamStore(const model::Layout& layout, ShardGroups groups, Residency where, DType param, DType reduce);
    ParamStore(const model::Layout& layout, int dp_rank, int dp_size, Residency where, DType param, DType reduce)
        : ParamStore(layout, ShardGroups::data_parallel(dp_rank, dp_size), where, param, reduce) {}

    const model::Layout& layout() const { return layout_; }
    const std::vector<model::Unit>& units() const { return layout_.units; }
    const Residency& residency() const { return where_; }
    DType param_type() const { return pt_; }
    DType reduce_type() const { return rt_; }
    bool mixed() const { return pt_ != DType::F32; }
    int dp_size() const { return n_; }

    // ---- sharding ----------------------------------------------------------------------------
    bool expert_unit(int unit) const;   // sliced over the experts' group
    int shard_count(int unit) const;    // the slices of unit: the size of its group
    int shard_rank(int unit) const;     // which of them is this rank's
    optim::Range shard(int unit) const;  // this rank's slice of unit, flat coordinates
    size_t shard_elems(int unit) const { return layout_.units[size_t(unit)].numel / size_t(shard_count(unit)); }
    size_t shard_offset(int unit) const { return shard_off_[size_t(unit)]; }  // in the slice buffers
    // alignment padding inside unit, [begin, end) in the unit's own coordinates
    const std::vector<std::pair<size_t, size_t>>& gaps(int unit) const { return gaps_[size_t(unit)]; }

    // ---- parameters --------------------------------------------------------------------------
    float* master() { return master_.data(); }  // whole or packed slices (residency)
    const float* master() const { return master_.data(); }
    float* master_slice(int unit);              // the fp32 master of unit's slice
    const float* master_slice(int unit) const;
    // The whole fp32 master of this part, if this rank keeps it whole (else null).
    float* whole_master() { return where_.master_whole ? master_.data() : nullptr; }
    const float* whole_master() const { return where_.master_whole ? master_.data() : nullptr; }
    unsigned short* model16() { return model16_.data(); }
    // What the model reads when the parameters are resident (null when units are gathered as they
    // run: the 16-bit copy or the master is sliced).
    void* model_params();
    // This rank's fp32 parameters: (flat range of the layout, storage): the whole layout in one
    // buffer, or each unit's slice. Initialise or load into these.
    std::vector<std::pair<model::FlatRange, float*>> param_storage();
    // Mixed: unit's master slice rounded into the 16-bit copy (whole or packed).
    void round_to_model(int unit);
    void round_all_to_model();  // mixed, whole master: the whole 16-bit copy
    // This rank's slice of every unit (each DP rank writes its slices to a checkpoint, whatever the
    // stage): the flat range, its parameters, and where its optimiser state starts in the
    // optimiser's state buffers.
    struct Slice {
        model::FlatRange range;
        const float* params;
        size_t state;
    };
    std::vector<Slice> slices() const;

    // ---- gradients ---------------------------------------------------------------------------
    float* grads() { return grads_.data(); }              // whole (or empty)
    float* whole_grads() { return where_.grads_whole ? grads_.data() : nullptr; }
    float* grad_shards() { return grad_shards_.data(); }  // packed slices (or empty)
    unsigned short* grads16() { return grads16_.data(); } // 16-bit staging of whole gradients (or empty)
    // This rank's part of unit's reduced gradient: the whole unit when the optimiser owns the whole
    // layout, else its slice.
    std::pair<float*, size_t> owned_grad(int unit);
    // The squared norm of this rank's owned gradients, parameters counted once over the
    // tensor-parallel group (model::ParamSpec::counted). whole: the whole gradient instead of this
    // rank's data-parallel slices (whole gradients only).
    // by_compute (if given, n_layer + 2 long): each compute unit's share added at its index
    // (model::Unit::compute: 0 the embedding, 1 + l block l, n_layer + 1 the head), from the same pass.
    double grad_norm_sq_local(bool whole = false, double* by_compute = nullptr) const;
    // The parts of this rank's fp32 master that the gradient norm counts (a replicated tensor once), each
    // with its compute unit: f(compute, data, n). (Training-health telemetry: train/health.h.)
    void for_each_counted_master(const std::function<void(int, float*, size_t)>& f);

    // ---- the optimiser's view ----------------------------------------------------------------
    std::vector<optim::Range> owned_ranges() const;
    std::vector<float*> owned_params();
    // Mixed: where each owned range's 16-bit copy is (owned_params' order): the optimiser can write it
    // in its own pass (Optimizer::Mirror) instead of round_to_model.
    std::vector<void*> owned_params16();
    std::vector<const float*> owned_grads();

    size_t param_bytes() const { return mixed() ? model16_.bytes() : master_.bytes(); }
    size_t master_bytes() const { return mixed() ? master_.bytes() : 0; }
    size_t grad_bytes() const { return grads_.bytes() + grad_shards_.bytes(); }
    size_t staging_bytes() const { return grads16_.bytes(); }

private:
    const float* grad_slice(int unit) const;  // unit's slice of the reduced gradient

    const model::Layout& layout_;
    int rank_, n_;
    ShardGroups groups_;
    Residency where_;
    DType pt_, rt_;
    AlignedBuffer<float> master_;
    AlignedBuffer<unsigned short> model16_;
    AlignedBuffer<float> grads_, grad_shards_;
    AlignedBuffer<unsigned short> grads16_;
    std::vector<size_t> shard_off_;
    std::vector<std::vector<std::pair<size_t, size_t>>> gaps_;
};

}  // namespace shardlm::parallel
