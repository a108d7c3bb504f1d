#include "shardlm/model/config.h"

#include <nlohmann/json.hpp>

#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"

namespace shardlm::model {

void GptConfig::validate(const std::string& where) const {
    SHARDLM_CHECK(n_layer > 0, where, ": n_layer must be > 0 (got ", n_layer, ")");
    SHARDLM_CHECK(n_head > 0, where, ": n_head must be > 0 (got ", n_head, ")");
    SHARDLM_CHECK(n_embd > 0 && n_embd % n_head == 0, where, ": n_embd (", n_embd,
                  ") must be a positive multiple of n_head (", n_head, ")");
    SHARDLM_CHECK(vocab_size > 0 && vocab_size <= 65536, where, ": vocab_size must be in 1..65536 (got ",
                  vocab_size, "): token shards store uint16 ids");
    SHARDLM_CHECK(n_ctx > 0, where, ": n_ctx / n_positions must be > 0 (got ", n_ctx, ")");
}

const std::vector<GptConfig>& presets() {
    static const std::vector<GptConfig> p = {
        // name            L   NH    C      V      ctx
        {"gpt2",          12, 12,   768, 50257, 1024},
        {"gpt2-medium",   24, 16,  1024, 50257, 1024},
        {"gpt2-large",    36, 20,  1280, 50257, 1024},
        {"gpt2-xl",       48, 25,  1600, 50257, 1024},
        // GPT-3 (Brown et al. 2020, table 2.1; seed 002). Two entries of that table do not add up:
        // 13B prints d_model 5140 (40 heads x d_head 128 = 5120), and XL prints 24 heads with d_head
        // 128 for d_model 2048; we keep d_model and d_head (16 heads for XL, 5120 for 13B).
        {"gpt3-small",    12, 12,   768, 50257, 2048},
        {"gpt3-medium",   24, 16,  1024, 50257, 2048},
        {"gpt3-large",    24, 16,  1536, 50257, 2048},
        {"gpt3-xl",       24, 16,  2048, 50257, 2048},
        {"gpt3-2.7b",     32, 32,  2560, 50257, 2048},
        {"gpt3-6.7b",     32, 32,  4096, 50257, 2048},
        {"gpt3-13b",      40, 40,  5120, 50257, 2048},
        {"gpt3-175b",     96, 96, 12288, 50257, 2048},
        // Small models: tests, and the default training run on one CPU.
        {"tiny",           2,  4,    64, 50257,  256},
        {"small",          4,  4,   128, 50257,  256},
    };
    return p;
}

GptConfig find_preset(const std::string& name) {
    std::string names;
    for (const auto& c : presets()) {
        if (c.name == name) return c;
        names += (names.empty() ? "" : ", ") + c.name;
    }
    fail("unknown model preset '", name, "'\n---> HINT: choose one of ", names, ", or use --init DIR");
}

GptConfig load_hf_config(const std::string& path) {
    nlohmann::json j = io::read_json_file(path);
    SHARDLM_CHECK(j.is_object(), path, ": expected a JSON object with GPT-2 keys");
    auto get = [&](const char* key, const char* alt) -> int {
        const char* k = j.contains(key) ? key : (alt && j.contains(alt) ? alt : nullptr);
        SHARDLM_CHECK(k, path, ": missing key '", key, "'\n---> HINT: an HF GPT-2 config.json has n_layer, ",
                      "n_head, n_embd, vocab_size, n_positions");
        SHARDLM_CHECK(j[k].is_number_integer(), path, ": key '", k, "' must be an integer (got ", j[k].dump(), ")");
        return j[k].get<int>();
    };
    GptConfig c;
    c.name = "hf";
    c.n_layer = get("n_layer", nullptr);
    c.n_head = get("n_head", nullptr);
    c.n_embd = get("n_embd", nullptr);
    c.vocab_size = get("vocab_size", nullptr);
    c.n_ctx = get("n_positions", "n_ctx");
    if (j.contains("layer_norm_epsilon")) {
        SHARDLM_CHECK(j["layer_norm_epsilon"].is_number(), path, ": key 'layer_norm_epsilon' must be a number");
        c.ln_eps = j["layer_norm_epsilon"].get<float>();
    }
    if (j.contains("activation_function")) {
        auto a = j["activation_function"];
        SHARDLM_CHECK(a.is_string() && (a == "gelu_new" || a == "gelu_pytorch_tanh"), path,
                      ": activation_function ", a.dump(), " is not supported (want \"gelu_new\", GELU tanh approximation)");
    }
    c.validate(path);
    return c;
}

std::string hf_config_json(const GptConfig& c) {
    nlohmann::json j = {
        {"model_type", "gpt2"},          {"architectures", {"GPT2LMHeadModel"}},
        {"n_layer", c.n_layer},          {"n_head", c.n_head},
        {"n_embd", c.n_embd},            {"vocab_size", c.vocab_size},
        {"n_positions", c.n_ctx},        {"n_ctx", c.n_ctx},
        {"layer_norm_epsilon", c.ln_eps}, {"activation_function", "gelu_new"},
        {"resid_pdrop", 0.0},            {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},             {"tie_word_embeddings", true},
        {"bos_token_id", 50256},         {"eos_token_id", 50256},
    };
    return j.dump(2) + "\n";
}

ParamCount count_params(const GptConfig& c) {
    int64_t C = c.n_embd;
    ParamCount p;
    p.embedding = int64_t(c.vocab_size) * C + int64_t(c.n_ctx) * C;
    // ln_1 (2C) + c_attn (3C^2 + 3C) + attn c_proj (C^2 + C) + ln_2 (2C) + c_fc (4C^2 + 4C) + mlp c_proj (4C^2 + C)
    p.per_block = 12 * C * C + 13 * C;
    p.blocks = p.per_block * c.n_layer;
    p.final_norm = 2 * C;
    p.total = p.embedding + p.blocks + p.final_norm;
    return p;
}

int64_t estimate_params_12lh2_2vh(const GptConfig& c) {
    int64_t h = c.n_embd;
    return 12 * int64_t(c.n_layer) * h * h + 2 * int64_t(c.vocab_size) * h;
}

}  // namespace shardlm::model
