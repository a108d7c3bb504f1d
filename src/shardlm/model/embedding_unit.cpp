#include "shardlm/model/embedding_unit.h"

#include <cstring>

#include "shardlm/core/check.h"

namespace shardlm::model {

EmbeddingUnit::EmbeddingUnit(int in, const UnitEnv& env, bool head_here)
    : ComputeUnit(Kind::Embedding, in, env), slots_(size_t(env.slots)), head_here_(head_here) {
    const size_t N = size_t(env.B) * size_t(env.T);
    const size_t Nl = size_t(env.ctx->rows(env.B * env.T)), C = size_t(env.config->n_embd);
    for (State& s : slots_) {
        s.tokens.resize(N);
        if (env.defer) s.dx0.resize(Nl * C);
    }
}

void EmbeddingUnit::check_inputs(const ForwardPass& p) const {
    const int N = p.B * p.T, V = env_.config->vocab_size;
    for (int i = 0; i < N; i++)
        SHARDLM_CHECK(p.tokens[i] >= 0 && p.tokens[i] < V, "token id ", p.tokens[i], " at position ", i,
                      " is outside the vocabulary [0, ", V, ")");
}

double EmbeddingUnit::forward(ForwardPass& p) {
    const int N = p.s.B * p.s.T;
    int* tokens = slots_[size_t(p.slot)].tokens.data();
    std::memcpy(tokens, p.tokens, sizeof(int) * size_t(N));
    const ParamUnits& id = *env_.ids;
    p.hooks.before(id.wte);
    p.hooks.before(id.wpe);
    const ParamBinding& w = *env_.params;
    embedding_forward(*env_.ctx, w.param(id.wte, kTable), w.param(id.wpe, kTable), tokens, p.s.x[size_t(in_) + 1].data(),
                      p.s.B, p.s.T);
    return 0.0;
}

void EmbeddingUnit::backward(BackwardPass& p) {
    State& st = slots_[size_t(p.slot)];
    const UnitContext& ctx = *env_.ctx;
    const size_t n = size_t(ctx.rows(p.s.B * p.s.T)) * size_t(env_.config->n_embd);
    if (p.input() && env_.defer) std::memcpy(st.dx0.data(), p.dres, sizeof(float) * n);
    if (!p.weight()) return;
    const ParamUnits& id = *env_.ids;
    p.hooks.before(id.wpe);
    p.hooks.before(id.wte);
    const ParamBinding& w = *env_.params;
    embedding_backward(ctx, w.grad(id.wte, kTable), w.grad(id.wpe, kTable), env_.defer ? st.dx0.data() : p.dres,
                       st.tokens.data(), p.s.B, p.s.T);
    p.hooks.after(id.wpe);
    p.hooks.after(id.wte);
}

void EmbeddingUnit::backward_units(std::vector<int>& order) const {
    const ParamUnits& id = *env_.ids;
    if (id.wpe >= 0) order.push_back(id.wpe);
    if (!head_here_ || id.head_wte != id.wte) order.push_back(id.wte);  // not the head's already
}

SlotBytes EmbeddingUnit::bytes(int slot) const {
    const State& s = slots_[size_t(slot)];
    return {s.tokens.bytes(), 0, s.dx0.bytes()};
}

}  // namespace shardlm::model
