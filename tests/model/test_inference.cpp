// Generator (one position at a time through the training block code with cached keys/values) gives
// the same logits as the training forward over the whole sequence, at every position; sampling is
// deterministic per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/gpt.h"
#include "shardlm/model/generate.h"
#include "shardlm/model/weights.h"

namespace {

using namespace shardlm;

// The Generator's logits at each of 20 positions equal the whole-sequence forward's.
void expect_generator_matches_forward(const model::GptConfig& c, uint64_t seed) {
    model::Gpt gpt(c, 1, 20, 2);
    AlignedBuffer<float> params(gpt.layout().total), grads(gpt.layout().total);
    model::init_gpt2_weights(params.data(), gpt.layout(), seed);
    gpt.bind(params.data(), grads.data());
    std::vector<int> tok(20);
    for (int i = 0; i < 20; i++) tok[i] = (i * 37 + 11) % c.vocab_size;
    gpt.forward(tok.data(), nullptr, 1, 20, 0.0f);
    model::Generator kv(c, gpt.layout(), params.data());
    for (int t = 0; t < 20; t++) {
        const float* a = kv.step(tok[t]);
        const float* b = gpt.logits() + size_t(t) * c.padded_vocab();
        float worst = 0, scale = 0;
        for (int v = 0; v < c.vocab_size; v++) {
            worst = std::max(worst, std::fabs(a[v] - b[v]));
            scale = std::max(scale, std::fabs(b[v]));
        }
        EXPECT_GT(scale, 0.0f) << c.name;
        EXPECT_LE(worst, 1e-5f * std::max(1.0f, scale)) << c.name << ", position " << t;
    }
}

TEST(Generator, MatchesFullForwardAtEveryPosition) { expect_generator_matches_forward({"t", 3, 3, 60, 101, 32}, 5); }

// The same for a LLaMA-style model: rotary embeddings at the cache's positions, a cache of the
// key/value heads only (grouped-query attention: 2 of 6), RMSNorm, SwiGLU, an untied head; and for a
// GPT-2 whose attention groups its key/value heads (learned positions, LayerNorm with biases).
TEST(Generator, MatchesFullForwardForLlamaAndGqa) {
    model::GptConfig llama = model::find_preset("llama-tiny");
    llama.n_layer = 2, llama.n_head = 6, llama.n_kv_head = 2, llama.n_embd = 48, llama.vocab_size = 101, llama.n_ctx = 32;
    expect_generator_matches_forward(llama, 7);
    model::GptConfig gqa{"gqa", 2, 4, 32, 101, 32};
    gqa.n_kv_head = 1;
    expect_generator_matches_forward(gqa, 7);
}

// And for mixtures of experts: Mixtral's (every layer, softmax, top 2 renormalised), and a dense layer beside an
// MoE one with a shared expert and a sigmoid router (each position routes its one token alike).
TEST(Generator, MatchesFullForwardWithExperts) {
    model::GptConfig mixtral = model::find_preset("llama-tiny");
    mixtral.n_layer = 2, mixtral.n_embd = 48, mixtral.vocab_size = 101, mixtral.n_ctx = 32;
    mixtral.moe.n_experts = 4, mixtral.moe.top_k = 2, mixtral.moe.ffn = 32;
    expect_generator_matches_forward(mixtral, 11);
    model::GptConfig gpt{"moe", 2, 4, 32, 101, 32};
    gpt.moe.n_experts = 4, gpt.moe.top_k = 1, gpt.moe.n_shared = 1, gpt.moe.router = model::Router::Sigmoid;
    gpt.moe.layers = "1";
    expect_generator_matches_forward(gpt, 13);
}

TEST(Generator, SamplingIsDeterministicAndRespectsTopK) {
    model::GptConfig c{"t", 2, 2, 32, 50, 16};
    model::Layout layout = model::make_gpt2_layout(c);
    AlignedBuffer<float> params(layout.total);
    model::init_gpt2_weights(params.data(), layout, 9);
    model::SampleOptions o;
    o.max_tokens = 10;
    o.seed = 3;
    model::Generator a(c, layout, params.data()), b(c, layout, params.data());
    auto x = model::sample_tokens(a, {1, 2, 3}, o);
    auto y = model::sample_tokens(b, {1, 2, 3}, o);
    EXPECT_EQ(x, y);
    EXPECT_EQ(x.size(), 10u);
    // top-k 1 is greedy
    o.top_k = 1;
    model::Generator g1(c, layout, params.data()), g2(c, layout, params.data());
    auto greedy = model::sample_tokens(g1, {4}, o);
    model::SampleOptions og = o;
    og.temperature = 0.0f;
    EXPECT_EQ(greedy, model::sample_tokens(g2, {4}, og));
    // the context limit stops generation
    o.max_tokens = 100;
    model::Generator g3(c, layout, params.data());
    EXPECT_EQ(model::sample_tokens(g3, {4, 5}, o).size(), size_t(c.n_ctx - 2 + 1));
}

}  // namespace
