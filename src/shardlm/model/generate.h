// model/generate.h: token-by-token sampling with a key/value cache, so each new token costs one
// position (the block's matrix products on one row, attention against the cached keys and values)
// instead of a re-run over the whole sequence. It runs the same block code as training
// (model/units.h: block_forward with a KvLayer), one process, no tensor parallelism.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/units.h"

namespace shardlm::model {

class Generator {
public:
    // params: a flat buffer laid out by `layout` (make_gpt2_layout(config): the whole model, one rank).
    Generator(GptConfig config, const Layout& layout, const float* params);

    // Feeds the token at position pos (= number of tokens fed so far; must be < n_ctx) and returns
    // the logits of the next token over the true vocabulary (vocab_size floats).
    const float* step(int token);
    int position() const { return pos_; }
    void reset() { pos_ = 0; }
    const GptConfig& config() const { return cfg_; }
    // The MoE layers' choice bias (n_layer x E, MoeConfig::bias_rate; a checkpoint's meta.json keeps it).
    void set_expert_bias(std::vector<float> bias) { expert_bias_ = std::move(bias); }

private:
    const float* param(int unit, int i) const;
    GptConfig cfg_;
    Layout layout_;
    const float* params_;
    int pos_ = 0;
    int wte_ = -1, wpe_ = -1, head_ = -1;
    std::vector<int> blocks_, experts_;
    std::vector<float> expert_bias_;
    Scratch scratch_;
    UnitContext ctx_;
    BlockActs acts_;                          // one row, reused by every block
    AlignedBuffer<float> k_cache_, v_cache_;  // (L, n_ctx, C)
    AlignedBuffer<float> x_, y_, lnf_, logits_, scores_, stats_;
};

struct SampleOptions {
    int max_tokens = 64;
    float temperature = 1.0f;  // 0 = greedy
    int top_k = 0;             // 0 = whole vocabulary
    uint64_t seed = 1337;
    int stop_token = -1;       // stop after sampling this id (e.g. <|endoftext|>), -1 = never
};

// Feeds the prompt (at least one token), then samples up to max_tokens new tokens (fewer if the
// context fills up). Returns only the new tokens. Deterministic for a given seed.
std::vector<int> sample_tokens(Generator& model, const std::vector<int>& prompt, const SampleOptions& opt);

}  // namespace shardlm::model
