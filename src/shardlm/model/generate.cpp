#include "shardlm/model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "shardlm/core/check.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/model/unit_ops.h"

namespace shardlm::model {

Generator::Generator(GptConfig config, const Layout& layout, const float* params)
    : cfg_(std::move(config)), layout_(layout), params_(params) {
    const size_t C = size_t(cfg_.n_embd), L = size_t(cfg_.n_layer), T = size_t(cfg_.n_ctx);
    blocks_.assign(L, -1);
    experts_.assign(L, -1);
    for (size_t u = 0; u < layout_.units.size(); u++) {
        const Unit& un = layout_.units[u];
        switch (un.kind) {
        case UnitKind::TokenEmbedding: wte_ = int(u); break;
        case UnitKind::PositionEmbedding: wpe_ = int(u); break;
        case UnitKind::Head: head_ = int(u); break;
        case UnitKind::Block: blocks_[size_t(un.block)] = int(u); break;
        case UnitKind::Experts: experts_[size_t(un.block)] = int(u); break;
        }
    }
    SHARDLM_CHECK(wte_ >= 0 && (wpe_ >= 0 || cfg_.position == Position::Rope) && head_ >= 0 &&
                      std::find(blocks_.begin(), blocks_.end(), -1) == blocks_.end(),
                  "Generator: the layout does not hold the whole model");
    scratch_.allocate(cfg_, 1, 1, 1, 1, DType::F32, Recompute::None);
    ctx_.cfg = &cfg_;
    ctx_.tp = &no_tensor_parallel();
    ctx_.scratch = &scratch_;
    acts_.allocate(cfg_, 1, 1, 1, false, DType::F32, /*keep_att=*/false, false, cfg_.has_moe());
    // grouped-query attention caches n_kv_head heads: n_kv_head / n_head of multi-head attention's cache
    const size_t KVC = size_t(cfg_.kv_heads()) * size_t(cfg_.head_dim());
    k_cache_.resize(L * T * KVC);
    v_cache_.resize(L * T * KVC);
    x_.resize(C), y_.resize(C), lnf_.resize(C), stats_.resize(2);
    logits_.resize(size_t(cfg_.padded_vocab()));
    scores_.resize(T);
}

const float* Generator::param(int unit, int i) const {
    if (unit < 0) return nullptr;
    const Unit& u = layout_.units[size_t(unit)];
    return u.role[i] < 0 ? nullptr : params_ + layout_.params[size_t(u.role[i])].offset;
}

const float* Generator::step(int token) {
    const int C = cfg_.n_embd, T = cfg_.n_ctx, V = cfg_.vocab_size;
    SHARDLM_CHECK(pos_ < T, "generation reached the model's context length n_ctx = ", T);
    SHARDLM_CHECK(token >= 0 && token < V, "token id ", token, " is outside the vocabulary [0, ", V, ")");
    const float* wte = param(wte_, kTable);
    const float* wpe = param(wpe_, kTable);
    for (int i = 0; i < C; i++) x_[size_t(i)] = wte[size_t(token) * C + i] + (wpe ? wpe[size_t(pos_) * C + i] : 0.0f);
    const size_t KVC = size_t(cfg_.kv_heads()) * size_t(cfg_.head_dim());
    for (int l = 0; l < cfg_.n_layer; l++) {
        BlockWeights w;
        for (int i = 0; i < kNumBlockParams; i++) w.w[i] = param(blocks_[size_t(l)], i);
        if (const int x = experts_[size_t(l)]; x >= 0) {
            w.moe = true;
            w.experts = {w.w[kRouterW], param(x, kExpertFcW), param(x, kExpertProjW), layout_.expert_stride(x), 0.0f,
                         expert_bias_.empty() ? nullptr : expert_bias_.data() + size_t(l) * size_t(cfg_.moe.n_experts)};
        }
        KvLayer kv{k_cache_.data() + size_t(l) * T * KVC, v_cache_.data() + size_t(l) * T * KVC, scores_.data()};
        block_forward(ctx_, w, acts_, x_.data(), y_.data(), 1, 1, &kv, pos_);
        std::swap(x_, y_);
    }
    detail::norm_forward(ctx_, lnf_.data(), &stats_[0], &stats_[1], x_.data(), param(head_, kLnfW), param(head_, kLnfB), 1);
    const float* head = cfg_.tie_embeddings ? wte : param(head_, kLmHead);
    kernels::matmul_forward(logits_.data(), lnf_.data(), head, nullptr, 1, C, V, false);
    pos_++;
    return logits_.data();
}

std::vector<int> sample_tokens(Generator& model, const std::vector<int>& prompt, const SampleOptions& opt) {
    SHARDLM_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
    const int V = model.config().vocab_size, T = model.config().n_ctx;
    SHARDLM_CHECK(int(prompt.size()) < T, "the prompt has ", prompt.size(), " tokens; the model's context is ", T);
    const float* logits = nullptr;
    for (int t : prompt) logits = model.step(t);
    std::mt19937_64 rng(opt.seed);
    std::vector<int> out;
    std::vector<float> p(V);
    std::vector<int> idx(V);
    for (int n = 0; n < opt.max_tokens; n++) {
        int next;
        if (opt.temperature <= 0.0f) {
            next = int(std::max_element(logits, logits + V) - logits);
        } else {
            std::iota(idx.begin(), idx.end(), 0);
            int k = (opt.top_k > 0 && opt.top_k < V) ? opt.top_k : V;
            if (k < V)
                std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                                  [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
            float mx = -INFINITY;
            for (int i = 0; i < k; i++) mx = std::max(mx, logits[idx[i]]);
            double z = 0;
            for (int i = 0; i < k; i++) z += (p[i] = std::exp((logits[idx[i]] - mx) / opt.temperature));
            // uniform in [0, 1) from 53 random bits: the same on every platform
            double u = double(rng() >> 11) * (1.0 / 9007199254740992.0) * z, c = 0;
            next = idx[k - 1];
            for (int i = 0; i < k; i++) {
                c += p[i];
                if (u < c) {
                    next = idx[i];
                    break;
                }
            }
        }
        out.push_back(next);
        // the last token is predicted from a full context but never fed back
        if (next == opt.stop_token || n + 1 == opt.max_tokens || model.position() >= T) break;
        logits = model.step(next);
    }
    return out;
}

}  // namespace shardlm::model
