// Parameter counts of every preset: the layout table holds exactly count_params() real elements,
// and the count is 12 l h^2 + 13 l h + v h + n_ctx h + 2 h (tied head), i.e. seed 002's
// 12 l h^2 + 2 v h minus the untied head's v h plus the small terms.
#include <gtest/gtest.h>

#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"

namespace {

using namespace shardlm::model;

TEST(Presets, ParameterCountsMatchTheLayoutAndTheFormula) {
    for (const GptConfig& c : presets()) {
        c.validate(c.name);
        const int64_t l = c.n_layer, h = c.n_embd, v = c.vocab_size;
        ParamCount p = count_params(c);
        if (c.has_moe()) {  // attention, norms, the router, the routed experts (and shared ones); embedding, head
            const int64_t kv = int64_t(c.kv_heads()) * c.head_dim(), F = c.expert_ffn(), E = c.moe.n_experts;
            const int64_t mats = c.mlp == Mlp::SwiGLU ? 3 : 2, norm = c.norm == Norm::LayerNorm && c.bias ? 2 * h : h;
            const int64_t attn = 2 * h * h + 2 * h * kv + (c.bias ? 2 * h + 2 * kv : 0) + (c.qk_norm ? h + kv : 0);
            const int64_t shared = c.moe.n_shared > 0 ? mats * h * F * c.moe.n_shared + (c.bias ? h : 0) : 0;
            const int64_t experts = l * E * mats * h * F;
            const int64_t emb = v * h + (c.position == Position::Learned ? int64_t(c.n_ctx) * h : 0);
            EXPECT_EQ(p.total, l * (attn + 2 * norm + E * h + shared) + experts + emb + (c.tie_embeddings ? 0 : v * h) + norm)
                << c.name;
            EXPECT_EQ(p.experts, experts) << c.name;
            EXPECT_EQ(p.active, p.total - experts + experts / E * c.moe.top_k) << c.name;
            // the planner's shape of it counts the same (total and active)
            EXPECT_EQ(p.total, shardlm::cost::total_params(cost_shape(c, c.n_ctx))) << c.name;
            EXPECT_EQ(p.active, shardlm::cost::active_params(cost_shape(c, c.n_ctx))) << c.name;
        } else if (c.family() == Family::Gpt2) {
            EXPECT_EQ(p.total, 12 * l * h * h + 13 * l * h + v * h + int64_t(c.n_ctx) * h + 2 * h) << c.name;
            EXPECT_EQ(estimate_params_12lh2_2vh(c) - v * h + 13 * l * h + int64_t(c.n_ctx) * h + 2 * h, p.total) << c.name;
        } else {  // q, o (h^2 each), k, v (h g d each), three MLP matrices, two RMSNorms; embedding and head
            const int64_t kv = int64_t(c.kv_heads()) * c.head_dim(), f = c.ffn();
            EXPECT_EQ(p.total, l * (2 * h * h + 2 * h * kv + 3 * h * f + 2 * h) + 2 * v * h + h) << c.name;
            // the cost model (the planner) counts the same shape alike
            EXPECT_EQ(p.total, shardlm::cost::total_params(cost_shape(c, c.n_ctx))) << c.name;
        }
        Layout L = make_gpt2_layout(c, 4);
        int64_t real = 0;
        for (const ParamSpec& s : L.params) real += int64_t(s.hf_numel());
        EXPECT_EQ(real, p.total) << c.name;
        for (const Unit& u : L.units) EXPECT_EQ(u.numel % (16 * 4), 0u) << c.name << " " << u.name;
    }
    // the GPT-2 124M and GPT-3 175B figures everyone quotes
    EXPECT_EQ(count_params(find_preset("gpt2")).total, 124439808);
    EXPECT_NEAR(double(count_params(find_preset("gpt3-175b")).total), 174.6e9, 0.1e9);
    // LLaMA-7B as its paper and HF count it; Llama 3 8B
    EXPECT_EQ(count_params(find_preset("llama-7b")).total, 6738415616);
    EXPECT_EQ(count_params(find_preset("llama3-8b")).total, 8030261248);
}

TEST(Presets, UnknownPresetListsTheKnownOnes) {
    try {
        find_preset("gpt5");
        FAIL();
    } catch (const std::exception& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("gpt2-medium"), std::string::npos) << m;
        EXPECT_NE(m.find("gpt3-13b"), std::string::npos) << m;
    }
}

}  // namespace
