// model/inference.h: token-by-token GPT-2 inference with a KV cache, so each new token costs one
// position (matrix-vector products against the weights, attention against the cached keys and
// values) instead of a re-run over the whole sequence. Shares the flat parameter layout of Gpt.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"

namespace shardlm::model {

class KvCacheGpt {
public:
    // params: a flat buffer laid out by `layout` (make_gpt2_layout(config) unless given).
    KvCacheGpt(GptConfig config, const float* params);
    KvCacheGpt(GptConfig config, Layout layout, const float* params);

    // Feeds the token at position pos (= number of tokens fed so far; must be < n_ctx) and returns
    // the logits of the next token over the true vocabulary (vocab_size floats).
    const float* step(int token);
    int position() const { return pos_; }
    void reset() { pos_ = 0; }
    const GptConfig& config() const { return cfg_; }

private:
    const float* param(int unit, int i) const;
    GptConfig cfg_;
    Layout layout_;
    const float* params_;
    int pos_ = 0;
    AlignedBuffer<float> k_cache_, v_cache_;  // (L, n_ctx, C)
    AlignedBuffer<float> x_, ln_, qkv_, att_, y_, fc_, logits_, scores_;
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
std::vector<int> sample_tokens(KvCacheGpt& model, const std::vector<int>& prompt, const SampleOptions& opt);

}  // namespace shardlm::model
