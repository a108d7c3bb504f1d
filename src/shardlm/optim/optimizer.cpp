#include "shardlm/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "shardlm/core/check.h"
#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::optim {

Kind parse_kind(const std::string& name) {
    Kind k;
    if (!enum_from_name(kKindNames, name, &k))
        fail("unknown optimizer '", name, "'\n---> HINT: choose one of ", names_list(kKindNames));
    return k;
}

std::string kind_name(Kind k) { return enum_name(kKindNames, k); }

Optimizer::Optimizer(OptimConfig cfg, const model::Layout& layout, std::vector<Range> owned)
    : cfg_(cfg), layout_(layout), owned_(std::move(owned)) {
    for (const Range& r : owned_) owned_elems_ += r.size();
    size_t n = owned_elems_;
    switch (cfg_.kind) {
        case Kind::SGD: break;
        case Kind::Momentum:
        case Kind::AdaGrad:
        case Kind::Lion: s0_.resize(n); break;
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam:
            s0_.resize(n);
            s1_.resize(n);
            break;
    }
}

std::vector<std::pair<std::string, AlignedBuffer<float>*>> Optimizer::state() {
    switch (cfg_.kind) {
        case Kind::SGD: return {};
        case Kind::Momentum: return {{"momentum_buffer", &s0_}};
        case Kind::AdaGrad: return {{"sum", &s0_}};
        case Kind::Lion: return {{"exp_avg", &s0_}};
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam: return {{"exp_avg", &s0_}, {"exp_avg_sq", &s1_}};
    }
    return {};
}

size_t Optimizer::state_bytes() const { return s0_.bytes() + s1_.bytes(); }

double Optimizer::state_bytes_per_param(const OptimConfig& cfg) {
    switch (cfg.kind) {
        case Kind::SGD: return 0;
        case Kind::Momentum:
        case Kind::AdaGrad:
        case Kind::Lion: return 4;
        case Kind::Adam:
        case Kind::AdamW:
        case Kind::RAdam: return 8;
    }
    return 8;
}

void Optimizer::step(float* params, const float* grads, float lr, float gs) {
    std::vector<float*> p;
    std::vector<const float*> g;
    for (const Range& r : owned_) p.push_back(params + r.begin), g.push_back(grads + r.begin);
    step(p, g, lr, gs);
}

void Optimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr, float gs) {
    SHARDLM_CHECK(params.size() == owned_.size() && grads.size() == owned_.size(), "Optimizer::step: ",
                  params.size(), " parameter ranges for ", owned_.size(), " owned ranges");
    step_++;
    size_t state_base = 0;  // offset of range k in the state buffers
    size_t first = 0;       // first parameter that can intersect the current range (ranges ascend)
    for (size_t k = 0; k < owned_.size(); k++) {
        const Range r = owned_[k];
        while (first < layout_.params.size() && layout_.params[first].offset + layout_.params[first].numel <= r.begin)
            first++;
        for (size_t pi = first; pi < layout_.params.size() && layout_.params[pi].offset < r.end; pi++) {
            const model::ParamSpec& p = layout_.params[pi];
            size_t b = std::max(p.offset, r.begin), e = std::min(p.offset + p.numel, r.end);
            if (b >= e) continue;
            float* w = params[k] + (b - r.begin);
            const float* g = grads[k] + (b - r.begin);
            size_t n = e - b, s = state_base + (b - r.begin);
            float wd = p.decay ? cfg_.weight_decay : 0.0f;
            switch (cfg_.kind) {
                case Kind::SGD: kernels::sgd_update(w, g, n, lr, wd, gs); break;
                case Kind::Momentum: kernels::momentum_update(w, g, s0_.data() + s, n, lr, cfg_.momentum, wd, gs); break;
                case Kind::AdaGrad: kernels::adagrad_update(w, g, s0_.data() + s, n, lr, cfg_.adagrad_eps, wd, gs); break;
                case Kind::Adam:
                    kernels::adam_update(w, g, s0_.data() + s, s1_.data() + s, n, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                                         wd, step_, gs);
                    break;
                case Kind::AdamW:
                    kernels::adamw_update(w, g, s0_.data() + s, s1_.data() + s, n, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                                          wd, step_, gs);
                    break;
                case Kind::RAdam:
                    kernels::radam_update(w, g, s0_.data() + s, s1_.data() + s, n, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                                          wd, step_, gs);
                    break;
                case Kind::Lion: kernels::lion_update(w, g, s0_.data() + s, n, lr, cfg_.beta1, cfg_.beta2, wd, gs); break;
            }
        }
        state_base += r.size();
    }
}

float LrSchedule::at(int step) const {
    if (kind == LrKind::Constant) return lr;
    if (step < warmup) return lr * float(step + 1) / float(warmup);
    if (step >= total) return lr_min;
    double progress = double(step - warmup) / double(std::max(1, total - warmup));
    return float(lr_min + 0.5 * (lr - lr_min) * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace shardlm::optim
