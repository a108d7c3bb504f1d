// model/param_binding.h: where a part's parameters and gradients are, per parameter unit (Layout::units).
// The units read them through ParamBinding by role (BlockParam, HeadParam, EmbeddingParam); the parallel
// layer re-points one unit at gathered parameters or a temporary gradient buffer (ZeRO-3, ZeRO-2) just
// before it runs. ParamUnits names which parameter unit is the embedding, the head, each block.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"

namespace shardlm::model {

// The parameter units a part's compute units read (-1: not in this part).
struct ParamUnits {
    int wte = -1, wpe = -1, head = -1;
    // the wte the head reads: the embedding's where they share a chunk, else the tied copy (-1: untied)
    int head_wte = -1;
    std::vector<int> block;    // block l -> its parameter unit
    std::vector<int> experts;  // block l -> its experts' unit (-1: a dense layer)
    ParamUnits(const Layout& layout, const GptConfig& config);
    ParamUnits() = default;
};

class ParamBinding {
public:
    // stored: the type of the parameters bind() is given (fp32, or the 16-bit copy of mixed precision);
    // mixed: vectors are widened to fp32 as a unit reads them
    ParamBinding(const Layout& layout, DType stored, bool mixed);

    // flat buffers of layout.total elements owned by the caller (gradients fp32)
    void bind(void* params, float* grads);
    // one unit at its own storage (the same layout as its range of the flat buffer); null keeps
    void bind_unit(int unit, void* params, float* grads);
    bool bound() const { return !params_.empty(); }
    const Layout& layout() const { return layout_; }

    // Parameter i (a role) of unit as bound (matrices: the stored type); null for a role the model
    // lacks (a bias of a model without biases, a position table under rotary embeddings).
    const void* param(int unit, int i) const {
        if (!has(unit, i)) return nullptr;
        return static_cast<const char*>(params_[size_t(unit)]) + local_offset(unit, i) * dtype_bytes(stored_);
    }
    // a vector parameter as fp32: mixed precision widens it into a buffer that the next call of any
    // unit may reuse (one unit's vectors at a time)
    const float* vec(int unit, int i);
    // a parameter as a unit reads it: vectors through vec(), matrices as bound
    const void* param_or_vec(int unit, int i) { return has(unit, i) && spec(unit, i).shape.size() == 1 ? vec(unit, i) : param(unit, i); }
    float* grad(int unit, int i) const { return has(unit, i) ? grads_[size_t(unit)] + local_offset(unit, i) : nullptr; }
    // zeroes the parameters' gradient ranges of unit that no GEMM overwrites (before a backward that
    // does not accumulate)
    void zero_accumulated_grads(int unit);
    size_t widened_bytes() const { return vec_.bytes(); }

private:
    bool has(int unit, int i) const { return unit >= 0 && layout_.units[size_t(unit)].role[i] >= 0; }
    const ParamSpec& spec(int unit, int i) const { return layout_.params[size_t(layout_.units[size_t(unit)].role[i])]; }
    size_t local_offset(int unit, int i) const { return spec(unit, i).offset - layout_.units[size_t(unit)].offset; }

    const Layout& layout_;
    DType stored_;
    bool mixed_;
    std::vector<void*> params_;
    std::vector<float*> grads_;
    AlignedBuffer<float> vec_;                  // mixed precision: the unit in use's vectors, fp32
    std::vector<std::vector<size_t>> vec_at_;  // per unit, per parameter: its place in vec_
    std::vector<std::vector<std::pair<size_t, size_t>>> zero_ranges_;  // per unit, local [begin, end)
};

}  // namespace shardlm::model
