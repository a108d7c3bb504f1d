#include "shardlm/model/param_binding.h"

#include <algorithm>
#include <cstring>

#include "shardlm/core/check.h"

namespace shardlm::model {

ParamUnits::ParamUnits(const Layout& layout, const GptConfig& config) {
    block.assign(size_t(config.n_layer), -1);
    experts.assign(size_t(config.n_layer), -1);
    for (size_t u = 0; u < layout.units.size(); u++) {
        const Unit& un = layout.units[u];
        switch (un.kind) {
        case UnitKind::TokenEmbedding: (layout.params[size_t(un.first_param)].tied_copy ? head_wte : wte) = int(u); break;
        case UnitKind::PositionEmbedding: wpe = int(u); break;
        case UnitKind::Head: head = int(u); break;
        case UnitKind::Block: block[size_t(un.block)] = int(u); break;
        case UnitKind::Experts: experts[size_t(un.block)] = int(u); break;
        }
    }
    // the head's chunk starts with the embedding; an untied head reads its own lm_head
    if (head_wte < 0 && config.tie_embeddings) head_wte = wte;
}

// Per unit: where its vectors (LayerNorms, biases) sit when mixed precision widens them to fp32 as
// it runs, and the parameter ranges no GEMM writes (zeroed before a backward writes the gradient).
ParamBinding::ParamBinding(const Layout& layout, DType stored, bool mixed)
    : layout_(layout), stored_(stored), mixed_(mixed) {
    vec_at_.resize(layout_.units.size());
    zero_ranges_.resize(layout_.units.size());
    size_t max_vec = 0;
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const Unit& un = layout_.units[u];
        size_t at = 0;
        for (int i = 0; i < un.num_params; i++) {
            const ParamSpec& p = layout_.params[size_t(un.first_param + i)];
            vec_at_[u].push_back(at);
            if (p.shape.size() == 1) at += (p.numel + 15) / 16 * 16;
            if (!p.gemm_written) zero_ranges_[u].push_back({p.offset - un.offset, p.offset - un.offset + p.numel});
        }
        max_vec = std::max(max_vec, at);
    }
    if (mixed_) vec_.resize(max_vec);
}

void ParamBinding::bind(void* params, float* grads) {
    params_.resize(layout_.units.size());
    grads_.resize(layout_.units.size());
    for (size_t u = 0; u < layout_.units.size(); u++) {
        params_[u] = params ? at(params, stored_, layout_.units[u].offset) : nullptr;
        grads_[u] = grads ? grads + layout_.units[u].offset : nullptr;
    }
}

void ParamBinding::bind_unit(int unit, void* params, float* grads) {
    if (params) params_[size_t(unit)] = params;
    if (grads) grads_[size_t(unit)] = grads;
}

// A role names the first vector of a packed run (LLaMA's q, k and v biases, SwiGLU's gate and up biases, the q
// and k norms' gains): the run is widened whole, into the run's slots (each vector's at least its size).
const float* ParamBinding::vec(int unit, int i) {
    if (!mixed_ || !has(unit, i)) return static_cast<const float*>(param(unit, i));
    const Unit& un = layout_.units[size_t(unit)];
    size_t n = 0;
    for (int k = un.role[i]; k < un.first_param + un.num_params; k++) {
        const ParamSpec& p = layout_.params[size_t(k)];
        if (k > un.role[i] && !p.packed) break;
        n += p.numel;
    }
    float* v = vec_.data() + vec_at_[size_t(unit)][size_t(un.role[i] - un.first_param)];
    convert_to_f32(v, param(unit, i), stored_, n);
    return v;
}

void ParamBinding::zero_accumulated_grads(int unit) {
    float* g = grads_[size_t(unit)];
    for (auto [b, e] : zero_ranges_[size_t(unit)]) std::memset(g + b, 0, (e - b) * sizeof(float));
}

}  // namespace shardlm::model
