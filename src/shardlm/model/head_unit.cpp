#include "shardlm/model/head_unit.h"

#include "shardlm/core/check.h"

namespace shardlm::model {

HeadUnit::HeadUnit(int in, const UnitEnv& env, bool embedding_here)
    : ComputeUnit(Kind::Head, in, env), slots_(size_t(env.slots)), embedding_here_(embedding_here) {
    if (env.defer)
        for (State& s : slots_) s.keep.allocate(*env.config, env.B, env.T, env.ctx->tp_size(), env.ctx->sp);
    products_changed();
}

void HeadUnit::products_changed() {
    const UnitContext& c = *env_.ctx;
    for (State& s : slots_)
        s.acts.allocate(*env_.config, env_.B, env_.T, c.tp_size(), c.sp, c.prec.activation, c.bf16_products(),
                        c.chunked_head());
}

const void* HeadUnit::matrix() const {
    const ParamUnits& id = *env_.ids;
    return id.head_wte >= 0 ? env_.params->param(id.head_wte, kTable) : env_.params->param(id.head, kLmHead);
}

void HeadUnit::check_inputs(const ForwardPass& p) const {
    const int* targets = p.targets;
    if (!targets) return;
    const int N = p.B * p.T;
    if (env_.ctx->sample_labels) {
        for (int i = 0; i < N; i++)
            SHARDLM_CHECK(targets[i] >= 0, "label sampling: negative token key ", targets[i], " at position ", i);
        return;
    }
    const int V = env_.config->vocab_size;
    for (int i = 0; i < N; i++)
        SHARDLM_CHECK(targets[i] >= 0 && targets[i] < V, "target id ", targets[i], " at position ", i,
                      " is outside the vocabulary [0, ", V, ")");
}

double HeadUnit::forward(ForwardPass& p) {
    const int B = p.s.B, T = p.s.T;
    const int* targets = p.targets;
    const ParamUnits& id = *env_.ids;
    p.hooks.before(id.head);
    if (!embedding_here_) p.hooks.before(id.head_wte);  // the tied copy
    ParamBinding& params = *env_.params;
    const float *w = params.vec(id.head, kLnfW), *b = params.vec(id.head, kLnfB);
    const void *wte = matrix(), *x = p.s.x[size_t(in_)].data();
    HeadActs& a = slots_[size_t(p.slot)].acts;
    const float dloss = p.dloss;
    env_.lanes->run_lanes(*env_.ctx, B, [&](const UnitContext& c) { head_forward(c, w, b, wte, a, x, targets, B, T, dloss); });
    return targets ? head_loss_sum(a, B * T) : 0.0;
}

void HeadUnit::backward(BackwardPass& p) {
    const void* x = p.s.x[size_t(in_)].data();
    const bool acc = p.hooks.accumulate();
    const int B = p.s.B, T = p.s.T;
    float* dres = p.dres;
    const ParamUnits& id = *env_.ids;
    p.hooks.before(id.head);
    p.hooks.before(id.head_wte);
    HeadActs& a = slots_[size_t(p.slot)].acts;
    HeadKeep& hk = keep(p.slot);
    ParamBinding& params = *env_.params;
    const float* w = p.input() ? params.vec(id.head, kLnfW) : nullptr;
    const void* wte = matrix();
    // (gradient storage is bound for W only: ZeRO-2 hands it out in the hooks)
    const bool weight = p.weight();
    float* dw = weight ? params.grad(id.head, kLnfW) : nullptr;
    float* db = weight ? params.grad(id.head, kLnfB) : nullptr;
    float* dwte = !weight ? nullptr : id.head_wte >= 0 ? params.grad(id.head_wte, kTable) : params.grad(id.head, kLmHead);
    env_.lanes->run_unit_backward(
        *env_.ctx, B, p.phases, [&](const UnitContext& c) { head_backward(c, w, wte, dw, db, dwte, a, hk, x, dres, B, T, acc); },
        [&](const UnitContext& c) { head_backward_input(c, w, wte, a, hk, x, dres, B, T); },
        [&](const UnitContext& c) { head_backward_weight(c, dw, db, dwte, a, hk, x, B, T, acc); });
    if (id.head_wte != id.wte) p.hooks.after(id.head_wte);  // the tied copy: final after the head
    p.hooks.after(id.head);
}

void HeadUnit::backward_units(std::vector<int>& order) const {
    const ParamUnits& id = *env_.ids;
    order.push_back(id.head);
    if (id.head_wte >= 0) order.push_back(id.head_wte);
}

SlotBytes HeadUnit::bytes(int slot) const {
    const State& s = slots_[size_t(slot)];
    return {s.acts.bytes(), 0, s.keep.bytes()};
}

}  // namespace shardlm::model
