// model/config.h: GPT-2-style model configuration and presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardlm::model {

struct GptConfig {
    std::string name = "custom";
    int n_layer = 0;
    int n_head = 0;
    int n_embd = 0;
    int vocab_size = 0;  // the true vocabulary; loss, import and export use it
    int n_ctx = 0;       // maximum sequence length (HF: n_positions)
    float ln_eps = 1e-5f;

    // Internally the vocabulary is padded to a multiple of 128 rows of zeros (faster GEMMs), times the
    // tensor-parallel size (every rank holds Vp / tp rows); padded rows never receive gradient and
    // are never exported.
    int padded_vocab(int tp_size = 1) const {
        const int m = 128 * tp_size;
        return (vocab_size + m - 1) / m * m;
    }
    int head_dim() const { return n_embd / n_head; }
    // Throws shardlm::Error naming `where` (a file or "--model NAME") if the numbers are inconsistent.
    void validate(const std::string& where) const;
};

// Presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl; the eight GPT-3 sizes of seed 002's table
// (gpt3-small ... gpt3-175b); and tiny ones for tests and the default training run.
const std::vector<GptConfig>& presets();
// Throws with the list of preset names if `name` is unknown.
GptConfig find_preset(const std::string& name);

// HF GPT-2 config.json (n_layer, n_head, n_embd, vocab_size, n_positions). Errors name the file and key.
GptConfig load_hf_config(const std::string& path);
std::string hf_config_json(const GptConfig& c);

// Parameter counts (true vocabulary; tied head counted once).
struct ParamCount {
    int64_t embedding = 0;  // wte (V x C) + wpe (n_ctx x C)
    int64_t blocks = 0;     // all transformer blocks
    int64_t per_block = 0;
    int64_t final_norm = 0;
    int64_t total = 0;
};
ParamCount count_params(const GptConfig& c);
// Seed 002's estimate 12 l h^2 + 2 v h (embedding and an untied output projection).
int64_t estimate_params_12lh2_2vh(const GptConfig& c);

}  // namespace shardlm::model
