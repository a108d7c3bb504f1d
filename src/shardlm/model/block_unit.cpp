#include "shardlm/model/block_unit.h"

namespace shardlm::model {

BlockUnit::BlockUnit(int in, const UnitEnv& env, int layer)
    : ComputeUnit(Kind::Block, in, env), layer_(layer), moe_(env.config->is_moe(layer)), slots_(size_t(env.slots)) {
    const UnitContext& c = *env.ctx;
    const GptConfig& cfg = *env.config;
    const int t = c.tp_size();
    for (State& s : slots_) {
        if (c.recompute != Recompute::Full)
            s.acts.allocate(cfg, env.B, env.T, t, c.sp, c.prec.activation, c.recompute != Recompute::Selective,
                            c.fused_attention, moe_, !moe_, c.ep_size());
        if (env.defer) s.keep.allocate(cfg, env.B, env.T, t, c.sp, c.bf16_products(), moe_, c.ep_size());
    }
}

BlockActs& BlockUnit::acts(int slot) {
    return env_.ctx->recompute == Recompute::Full ? env_.shared->recompute : slots_[size_t(slot)].acts;
}

BlockWeights BlockUnit::weights(float objective_scale) {
    BlockWeights w;
    for (int i = 0; i < kNumBlockParams; i++) w.w[i] = env_.params->param_or_vec(unit(), i);
    w.moe = moe_;
    if (moe_) {
        const int x = experts_unit();
        w.experts = {w.w[kRouterW], env_.params->param(x, kExpertFcW), env_.params->param(x, kExpertProjW),
                     env_.params->layout().expert_stride(x), objective_scale,
                     env_.expert_bias ? env_.expert_bias + size_t(layer_) * size_t(env_.config->moe.n_experts) : nullptr};
    }
    return w;
}

BlockGrads BlockUnit::grads() const {
    BlockGrads g;
    for (int i = 0; i < kNumBlockParams; i++) g.g[i] = env_.params->grad(unit(), i);
    g.moe = moe_;
    if (moe_) {
        const int x = experts_unit();
        g.experts = {g.g[kRouterW], env_.params->grad(x, kExpertFcW), env_.params->grad(x, kExpertProjW),
                     env_.params->layout().expert_stride(x)};
    }
    return g;
}

double BlockUnit::forward(ForwardPass& p) {
    p.hooks.before(unit());
    if (moe_) p.hooks.before(experts_unit());
    const BlockWeights w = weights(0.0f);
    BlockActs& a = acts(p.slot);
    const void* x = p.s.x[size_t(in_)].data();
    void* y = p.s.x[size_t(in_) + 1].data();
    const int B = p.s.B, T = p.s.T;
    env_.lanes->run_lanes(*env_.ctx, B, [&](const UnitContext& c) { block_forward(c, w, a, x, y, B, T); });
    if (moe_) {
        // the balance and z-losses are means over the micro-batch's B T tokens (T the whole sequence's, on
        // every cp rank): their factor in the objective
        slots_[size_t(p.slot)].objective_scale = p.dloss * float(B) * float(T) * float(env_.ctx->cp_size());
        if (p.dloss != 0.0f && env_.moe_stats) env_.moe_stats->add(layer_, a.moe);
    }
    return 0.0;
}

void BlockUnit::backward(BackwardPass& p) {
    const bool acc = p.hooks.accumulate();
    const int B = p.s.B, T = p.s.T;
    float* dres = p.dres;
    const void* x = p.s.x[size_t(in_)].data();
    if (moe_) p.hooks.before(experts_unit());
    p.hooks.before(unit());
    BlockActs& a = acts(p.slot);
    BlockKeep& kp = keep(p.slot);
    const BlockWeights w = p.input() ? weights(slots_[size_t(p.slot)].objective_scale) : BlockWeights{};
    const BlockGrads g = p.weight() ? grads() : BlockGrads{};
    env_.lanes->run_unit_backward(
        *env_.ctx, B, p.phases, [&](const UnitContext& c) { block_backward(c, w, g, a, kp, x, dres, B, T, acc); },
        [&](const UnitContext& c) { block_backward_input(c, w, a, kp, x, dres, B, T); },
        [&](const UnitContext& c) { block_backward_weight(c, g, a, kp, x, B, T, acc); });
    if (moe_) p.hooks.after(experts_unit());
    p.hooks.after(unit());
}

SlotBytes BlockUnit::bytes(int slot) const {
    const State& s = slots_[size_t(slot)];
    return {s.acts.bytes() - s.acts.stats_bytes(), s.acts.stats_bytes(), s.keep.bytes()};
}

void BlockUnit::products_changed() {
    const UnitContext& c = *env_.ctx;
    for (State& s : slots_) s.keep.size_copies(*env_.config, env_.B, env_.T, c.tp_size(), c.bf16_products());
}

}  // namespace shardlm::model
