#include "shardlm/model/compute_unit.h"

namespace shardlm::model {

size_t ActivationSlot::bytes() const {
    size_t n = 0;
    for (const auto& b : x) n += b.bytes();
    return n;
}

namespace {

// each(u, next) for the units of `order` from `at` up to `unit`, unless `unit` was reached already
template <class F>
void reach_units(const std::vector<int>& order, size_t& at, int unit, F&& each) {
    for (size_t i = 0; i < at; i++)
        if (order[i] == unit) return;
    while (at < order.size()) {
        const int u = order[at++];
        each(u, at < order.size() ? order[at] : -1);
        if (u == unit) break;
    }
}

}  // namespace

void ForwardHooks::before(int unit) {
    if (!hooks_ || unit < 0) return;
    reach_units(order_, at_, unit, [&](int u, int next) { hooks_->before_forward(u, next); });
}

void WeightHooks::before(int unit) {
    if (!weight_ || unit < 0) return;
    reach_units(order_, at_, unit, [&](int u, int next) {
        if (hooks_) hooks_->before_backward(u, next);
        if (!accumulate_) params_.zero_accumulated_grads(u);
    });
}

void WeightHooks::after(int unit) {
    if (weight_ && hooks_ && unit >= 0) hooks_->after_backward(unit);
}

}  // namespace shardlm::model
