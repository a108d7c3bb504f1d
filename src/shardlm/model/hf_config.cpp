// model/hf_config.cpp: HF config.json of GPT-2 and LLaMA models, read and written (config.h).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"
#include "shardlm/model/config.h"

namespace shardlm::model {

namespace {

GptConfig load_gpt2_config(const std::string& path, const nlohmann::json& j) {
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

// The shortest decimal that reads back as f (1e-05, not 9.99999974737875e-06).
double short_float(float f) {
    for (int digits = 6; digits <= 9; digits++) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.*g", digits, double(f));
        const double d = std::strtod(buf, nullptr);
        if (float(d) == f) return d;
    }
    return double(f);
}

// The architecture knobs HF's LLaMA has no key for, as shardlm writes them into a checkpoint's
// config.json (a LLaMA-named model with learned positions, LayerNorm or a GELU MLP).
constexpr const char* kNormKey = "shardlm_norm";
constexpr const char* kPositionKey = "shardlm_position";
constexpr const char* kMlpKey = "shardlm_mlp";

template <class E>
void read_knob(const nlohmann::json& j, const std::string& path, const char* key, E* out) {
    if (!j.contains(key)) return;
    SHARDLM_CHECK(j[key].is_string() && enum_from_name(enum_names(E{}), j[key].get<std::string>(), out), path,
                  ": key '", key, "' is ", j[key].dump(), "\n---> HINT: use one of ", names_list(enum_names(E{})));
}

// A config.json's optional keys, each checked for its type (an error names the file and the key).
struct OptionalKeys {
    const std::string& path;
    const nlohmann::json& j;
    bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
    int integer(const char* key, int def) const {
        if (!has(key)) return def;
        SHARDLM_CHECK(j[key].is_number_integer(), path, ": key '", key, "' must be an integer (got ", j[key].dump(), ")");
        return j[key].get<int>();
    }
    float number(const char* key, float def) const {
        if (!has(key)) return def;
        SHARDLM_CHECK(j[key].is_number(), path, ": key '", key, "' must be a number (got ", j[key].dump(), ")");
        return j[key].get<float>();
    }
    bool flag(const char* key, bool def) const {
        if (!has(key)) return def;
        SHARDLM_CHECK(j[key].is_boolean(), path, ": key '", key, "' must be true or false (got ", j[key].dump(), ")");
        return j[key].get<bool>();
    }
};

GptConfig load_llama_config(const std::string& path, const nlohmann::json& j) {
    auto num = [&](const char* key) -> const nlohmann::json& {
        SHARDLM_CHECK(j.contains(key), path, ": missing key '", key, "'\n---> HINT: an HF LLaMA config.json has ",
                      "hidden_size, intermediate_size, num_attention_heads, num_hidden_layers, vocab_size, ",
                      "max_position_embeddings");
        SHARDLM_CHECK(j[key].is_number(), path, ": key '", key, "' must be a number (got ", j[key].dump(), ")");
        return j[key];
    };
    auto integer = [&](const char* key) -> int {
        SHARDLM_CHECK(num(key).is_number_integer(), path, ": key '", key, "' must be an integer (got ", j[key].dump(), ")");
        return j[key].get<int>();
    };
    const OptionalKeys opt{path, j};
    auto flag = [&](const char* key, bool def) { return opt.flag(key, def); };
    GptConfig c;
    c.name = "hf-llama";
    c.norm = Norm::RMSNorm, c.position = Position::Rope, c.mlp = Mlp::SwiGLU;
    c.n_embd = integer("hidden_size");
    c.ffn_hidden = integer("intermediate_size");
    c.n_head = integer("num_attention_heads");
    c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() ? integer("num_key_value_heads")
                                                                                             : c.n_head;
    c.n_layer = integer("num_hidden_layers");
    c.vocab_size = integer("vocab_size");
    c.n_ctx = integer("max_position_embeddings");
    c.ln_eps = j.contains("rms_norm_eps") ? num("rms_norm_eps").get<float>() : 1e-6f;
    c.rope_theta = j.contains("rope_theta") ? num("rope_theta").get<float>() : 10000.0f;
    c.tie_embeddings = flag("tie_word_embeddings", false);
    const bool attn_bias = flag("attention_bias", false), mlp_bias = flag("mlp_bias", attn_bias);
    SHARDLM_CHECK(attn_bias == mlp_bias, path, ": attention_bias (", attn_bias, ") and mlp_bias (", mlp_bias,
                  ") differ; shardlm has one `bias` knob for both\n---> HINT: set both to the same value");
    c.bias = attn_bias;
    if (j.contains("hidden_act")) {
        const auto& a = j["hidden_act"];
        SHARDLM_CHECK(a.is_string() && a == "silu", path, ": hidden_act ", a.dump(),
                      " is not supported (LLaMA's MLP is SwiGLU: \"silu\")");
    }
    if (j.contains("rope_scaling"))
        SHARDLM_CHECK(j["rope_scaling"].is_null(), path, ": rope_scaling ", j["rope_scaling"].dump(),
                      " is not supported (plain rotary embeddings only)\n---> HINT: set it to null");
    if (j.contains("head_dim") && !j["head_dim"].is_null())
        SHARDLM_CHECK(c.n_head > 0 && integer("head_dim") * c.n_head == c.n_embd, path, ": head_dim ", j["head_dim"].dump(),
                      " is not hidden_size / num_attention_heads; shardlm needs head_dim * heads = hidden_size");
    if (j.contains("pretraining_tp"))
        SHARDLM_CHECK(!j["pretraining_tp"].is_number_integer() || j["pretraining_tp"].get<int>() == 1, path,
                      ": pretraining_tp ", j["pretraining_tp"].dump(), " is not supported (1: the usual linear layers)");
    c.qk_norm = flag("shardlm_qk_norm", false);  // (a dense model with q/k norms: a checkpoint's config.json)
    read_knob(j, path, kNormKey, &c.norm);
    read_knob(j, path, kPositionKey, &c.position);
    read_knob(j, path, kMlpKey, &c.mlp);
    c.validate(path);
    return c;
}

// shardlm's keys for the mixture-of-experts knobs HF Mixtral and OLMoE lack.
void read_moe_extras(const OptionalKeys& k, GptConfig& c) {
    MoeConfig& m = c.moe;
    m.n_shared = k.integer("shardlm_shared_experts", 0);
    if (k.has("shardlm_dense_ffn")) m.ffn = c.ffn_hidden, c.ffn_hidden = k.integer("shardlm_dense_ffn", 0);
    m.z_coef = k.number("shardlm_router_z_loss_coef", 0.0f);
    m.capacity_factor = k.number("shardlm_capacity_factor", 0.0f);
    m.bias_rate = k.number("shardlm_expert_bias_rate", 0.0f);
    read_knob(k.j, k.path, "shardlm_router", &m.router);
    if (k.has("shardlm_moe_layers")) m.layers = k.j["shardlm_moe_layers"].get<std::string>();
}

// HF Mixtral's config.json: LLaMA's keys, and its experts (intermediate_size is an expert's width), with
// shardlm's keys for the mixture-of-experts knobs Mixtral lacks.
GptConfig load_mixtral_config(const std::string& path, const nlohmann::json& j) {
    GptConfig c = load_llama_config(path, j);
    c.name = "hf-mixtral";
    const OptionalKeys k{path, j};
    MoeConfig& m = c.moe;
    SHARDLM_CHECK(j.contains("num_local_experts"), path, ": missing key 'num_local_experts'\n---> HINT: an HF Mixtral ",
                  "config.json has num_local_experts and num_experts_per_tok");
    m.n_experts = k.integer("num_local_experts", 0);
    m.top_k = k.integer("num_experts_per_tok", 2);
    m.aux_coef = k.number("router_aux_loss_coef", 0.001f);
    m.norm_topk = k.flag("shardlm_norm_topk", true);
    read_moe_extras(k, c);
    c.validate(path);
    return c;
}

// HF OLMoE's config.json (OlmoeForCausalLM): LLaMA's keys, its experts (num_experts, num_experts_per_tok,
// norm_topk_prob; intermediate_size is an expert's width), the queries and keys normalised.
GptConfig load_olmoe_config(const std::string& path, const nlohmann::json& j) {
    const OptionalKeys k{path, j};
    SHARDLM_CHECK(!k.has("clip_qkv"), path, ": clip_qkv ", j.value("clip_qkv", nlohmann::json()).dump(),
                  " is not supported (the queries, keys and values unclipped)\n---> HINT: set it to null");
    GptConfig c = load_llama_config(path, j);
    c.name = "hf-olmoe";
    c.qk_norm = true;
    MoeConfig& m = c.moe;
    SHARDLM_CHECK(j.contains("num_experts"), path, ": missing key 'num_experts'\n---> HINT: an HF OLMoE config.json ",
                  "has num_experts and num_experts_per_tok");
    m.n_experts = k.integer("num_experts", 0);
    m.top_k = k.integer("num_experts_per_tok", 8);
    m.norm_topk = k.flag("norm_topk_prob", false);
    m.aux_coef = k.number("router_aux_loss_coef", 0.01f);
    read_moe_extras(k, c);
    c.validate(path);
    return c;
}

}  // namespace

GptConfig load_hf_config(const std::string& path) {
    nlohmann::json j = io::read_json_file(path);
    SHARDLM_CHECK(j.is_object(), path, ": expected a JSON object (an HF GPT-2 or LLaMA config.json)");
    const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>()
                                                                                      : "gpt2";
    if (type == "llama") return load_llama_config(path, j);
    if (type == "mixtral") return load_mixtral_config(path, j);
    if (type == "olmoe") return load_olmoe_config(path, j);
    SHARDLM_CHECK(type == "gpt2", path, ": model_type \"", type, "\" is not supported\n---> HINT: shardlm reads HF ",
                  "GPT-2 (\"gpt2\"), LLaMA (\"llama\"), Mixtral (\"mixtral\") and OLMoE (\"olmoe\") directories");
    return load_gpt2_config(path, j);
}

std::string hf_unsupported(const GptConfig& c) {
    if (c.family() == Family::Gpt2) return "";
    std::string why;
    auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
    if (c.norm != Norm::RMSNorm) add("norm is layernorm (HF LLaMA has RMSNorm)");
    if (c.position != Position::Rope) add("position is learned (HF LLaMA has rotary embeddings)");
    if (c.mlp != Mlp::SwiGLU) add("mlp is gelu (HF LLaMA has SwiGLU)");
    if (!c.has_moe()) {
        if (c.qk_norm) add("q/k norms without experts (HF LLaMA has none; with experts the model is an HF OLMoE)");
        return why;
    }
    const MoeConfig& m = c.moe;
    const std::string hf = c.qk_norm ? "HF OLMoE" : "HF Mixtral";
    if (m.n_shared > 0) add("shared experts (" + hf + " has none)");
    if (m.ffn > 0 && m.ffn != c.ffn()) add("moe_ffn differs from the dense MLP's width (" + hf + " has one intermediate_size)");
    if (m.router != Router::Softmax) add("a sigmoid router (" + hf + "'s is softmax)");
    if (!m.norm_topk && !c.qk_norm) add("norm_topk false (HF Mixtral renormalises the top k)");
    if (m.layers != "all") add("MoE in some layers only (" + hf + " has experts in every layer)");
    if (m.bias_rate > 0) add("an expert bias for the choice (auxiliary-loss-free balancing; " + hf + " has none)");
    return why;
}

namespace {

// A mixture of experts as HF Mixtral's config.json has it, and shardlm's keys for what it lacks.
void add_mixtral_keys(const GptConfig& c, nlohmann::json& j) {
    const MoeConfig& m = c.moe;
    j["model_type"] = "mixtral";
    j["architectures"] = {"MixtralForCausalLM"};
    j["intermediate_size"] = c.expert_ffn();
    j["num_local_experts"] = m.n_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["router_aux_loss_coef"] = short_float(m.aux_coef);
    j["output_router_logits"] = false;
    if (m.ffn > 0 && m.ffn != c.ffn()) j["shardlm_dense_ffn"] = c.ffn();
    if (m.n_shared > 0) j["shardlm_shared_experts"] = m.n_shared;
    if (m.z_coef > 0) j["shardlm_router_z_loss_coef"] = short_float(m.z_coef);
    if (m.capacity_factor > 0) j["shardlm_capacity_factor"] = short_float(m.capacity_factor);
    if (m.bias_rate > 0) j["shardlm_expert_bias_rate"] = short_float(m.bias_rate);
    if (m.router != Router::Softmax) j["shardlm_router"] = enum_name(kRouterNames, m.router);
    if (!m.norm_topk) j["shardlm_norm_topk"] = false;
    if (m.layers != "all") j["shardlm_moe_layers"] = m.layers;
}

// An OLMoE as HF's config.json has it (the Mixtral keys' counterparts, and shardlm's keys for what it lacks).
void add_olmoe_keys(const GptConfig& c, nlohmann::json& j) {
    add_mixtral_keys(c, j);
    j.erase("num_local_experts"), j.erase("shardlm_norm_topk");
    j["model_type"] = "olmoe";
    j["architectures"] = {"OlmoeForCausalLM"};
    j["num_experts"] = c.moe.n_experts;
    j["norm_topk_prob"] = c.moe.norm_topk;
    j["clip_qkv"] = nullptr;
}

}  // namespace

std::string hf_config_json(const GptConfig& c) {
    if (c.family() == Family::Llama) {
        nlohmann::json j = {
            {"model_type", "llama"},
            {"architectures", {"LlamaForCausalLM"}},
            {"hidden_size", c.n_embd},
            {"intermediate_size", c.ffn()},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"num_hidden_layers", c.n_layer},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.n_ctx},
            {"rms_norm_eps", short_float(c.ln_eps)},
            {"rope_theta", short_float(c.rope_theta)},
            {"rope_scaling", nullptr},
            {"tie_word_embeddings", c.tie_embeddings},
            {"attention_bias", c.bias},
            {"mlp_bias", c.bias},
            {"hidden_act", "silu"},
            {"attention_dropout", 0.0},
            {"pretraining_tp", 1},
            {"torch_dtype", "float32"},
        };
        if (c.norm != Norm::RMSNorm) j[kNormKey] = enum_name(kNormNames, c.norm);
        if (c.position != Position::Rope) j[kPositionKey] = enum_name(kPositionNames, c.position);
        if (c.mlp != Mlp::SwiGLU) j[kMlpKey] = enum_name(kMlpNames, c.mlp);
        if (c.has_moe() && c.qk_norm) add_olmoe_keys(c, j);
        else if (c.has_moe()) add_mixtral_keys(c, j);
        else if (c.qk_norm) j["shardlm_qk_norm"] = true;
        return j.dump(2) + "\n";
    }
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

}  // namespace shardlm::model
