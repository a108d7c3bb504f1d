#include "shardlm/model/config.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "shardlm/core/check.h"
#include "shardlm/cost/shape.h"
#include "shardlm/io/json_file.h"
#include "shardlm/model/layout.h"

namespace shardlm::model {

int GptConfig::ffn() const {
    if (ffn_hidden > 0) return ffn_hidden;
    return mlp == Mlp::SwiGLU ? cost::llama_default_ffn(n_embd) : 4 * n_embd;
}

void GptConfig::validate(const std::string& where) const {
    SHARDLM_CHECK(n_layer > 0, where, ": n_layer must be > 0 (got ", n_layer, ")");
    SHARDLM_CHECK(n_head > 0, where, ": n_head must be > 0 (got ", n_head, ")");
    SHARDLM_CHECK(n_embd > 0 && n_embd % n_head == 0, where, ": n_embd (", n_embd,
                  ") must be a positive multiple of n_head (", n_head, ")");
    // (token shards store uint16 ids: a larger vocabulary trains, its ids >= 65536 never occur in the data)
    SHARDLM_CHECK(vocab_size > 0 && vocab_size <= (1 << 24), where, ": vocab_size must be in 1..16777216 (got ",
                  vocab_size, ")");
    SHARDLM_CHECK(n_ctx > 0, where, ": n_ctx / n_positions must be > 0 (got ", n_ctx, ")");
    SHARDLM_CHECK(n_kv_head >= 0 && n_kv_head <= n_head && n_head % kv_heads() == 0, where, ": n_kv_head (", n_kv_head,
                  ") must divide n_head (", n_head, ")\n---> HINT: grouped-query attention shares each key/value head ",
                  "among n_head / n_kv_head query heads; n_kv_head = n_head is multi-head attention");
    SHARDLM_CHECK(ffn_hidden >= 0, where, ": ffn_hidden must be >= 0 (0 = the MLP's default; got ", ffn_hidden, ")");
    SHARDLM_CHECK(position != Position::Rope || head_dim() % 2 == 0, where, ": rotary embeddings need an even head ",
                  "dimension (n_embd / n_head = ", head_dim(), ")");
    SHARDLM_CHECK(position != Position::Rope || rope_theta > 0, where, ": rope_theta must be > 0 (got ", rope_theta, ")");
    SHARDLM_CHECK(ln_eps > 0, where, ": the norm's epsilon must be > 0 (got ", ln_eps, ")");
}

namespace {

GptConfig llama(std::string name, int L, int NH, int C, int KV, int F, int V, int ctx, float eps, float theta) {
    GptConfig c;
    c.name = std::move(name);
    c.n_layer = L, c.n_head = NH, c.n_embd = C, c.vocab_size = V, c.n_ctx = ctx, c.ln_eps = eps;
    c.norm = Norm::RMSNorm, c.position = Position::Rope, c.rope_theta = theta, c.mlp = Mlp::SwiGLU;
    c.ffn_hidden = F, c.bias = false, c.tie_embeddings = false, c.n_kv_head = KV;
    return c;
}

}  // namespace

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
        // LLaMA (Touvron et al. 2023, table 2; seed 002), Llama 2 (GQA at 70B), Llama 3 (GQA, 128K
        // vocabulary: beyond what token shards hold, so for `info` and `plan` only)
        //     name        L   NH     C   KV      F       V    ctx   eps    rope_theta
        llama("llama-7b",  32, 32, 4096, 32, 11008, 32000, 2048, 1e-6f, 10000.0f),
        llama("llama-13b", 40, 40, 5120, 40, 13824, 32000, 2048, 1e-6f, 10000.0f),
        llama("llama-33b", 60, 52, 6656, 52, 17920, 32000, 2048, 1e-6f, 10000.0f),
        llama("llama-65b", 80, 64, 8192, 64, 22016, 32000, 2048, 1e-6f, 10000.0f),
        llama("llama2-7b",  32, 32, 4096, 32, 11008, 32000, 4096, 1e-5f, 10000.0f),
        llama("llama2-13b", 40, 40, 5120, 40, 13824, 32000, 4096, 1e-5f, 10000.0f),
        llama("llama2-70b", 80, 64, 8192,  8, 28672, 32000, 4096, 1e-5f, 10000.0f),
        llama("llama3-8b",  32, 32, 4096,  8, 14336, 128256, 8192, 1e-5f, 500000.0f),
        llama("llama3-70b", 80, 64, 8192,  8, 28672, 128256, 8192, 1e-5f, 500000.0f),
        // tests and small runs: GQA (2 query heads per key/value head), the GPT-2 vocabulary
        llama("llama-tiny",  2,  4,   64,  2,   176, 50257,  256, 1e-5f, 10000.0f),
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
    auto flag = [&](const char* key, bool def) -> bool {
        if (!j.contains(key) || j[key].is_null()) return def;
        SHARDLM_CHECK(j[key].is_boolean(), path, ": key '", key, "' must be true or false (got ", j[key].dump(), ")");
        return j[key].get<bool>();
    };
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
    read_knob(j, path, kNormKey, &c.norm);
    read_knob(j, path, kPositionKey, &c.position);
    read_knob(j, path, kMlpKey, &c.mlp);
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
    SHARDLM_CHECK(type == "gpt2", path, ": model_type \"", type, "\" is not supported\n---> HINT: shardlm reads HF ",
                  "GPT-2 (\"gpt2\") and LLaMA (\"llama\") directories");
    return load_gpt2_config(path, j);
}

std::string hf_unsupported(const GptConfig& c) {
    if (c.family() == Family::Gpt2) return "";
    std::string why;
    auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
    if (c.norm != Norm::RMSNorm) add("norm is layernorm (HF LLaMA has RMSNorm)");
    if (c.position != Position::Rope) add("position is learned (HF LLaMA has rotary embeddings)");
    if (c.mlp != Mlp::SwiGLU) add("mlp is gelu (HF LLaMA has SwiGLU)");
    return why;
}

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

ParamCount count_params(const GptConfig& c) {
    // from the layout the engine trains: every knob counts as it is built (true vocabulary)
    const Layout L = make_gpt2_layout(c);
    ParamCount p;
    for (const Unit& u : L.units)
        for (int i = u.first_param; i < u.first_param + u.num_params; i++) {
            const ParamSpec& s = L.params[size_t(i)];
            const int64_t n = int64_t(s.hf_numel());
            switch (u.kind) {
                case UnitKind::TokenEmbedding:
                case UnitKind::PositionEmbedding: p.embedding += n; break;
                case UnitKind::Block: p.blocks += n; break;
                case UnitKind::Head: (s.shape.size() == 2 ? p.head : p.final_norm) += n; break;
            }
        }
    p.per_block = c.n_layer > 0 ? p.blocks / c.n_layer : 0;
    p.total = p.embedding + p.blocks + p.final_norm + p.head;
    return p;
}

cost::ModelShape cost_shape(const GptConfig& c, int seq, int vocab) {
    const int V = vocab > 0 ? vocab : c.vocab_size;
    cost::ModelShape m = c.mlp == Mlp::SwiGLU
                             ? cost::llama_shape(c.name, c.n_layer, c.n_embd, c.n_head, c.kv_heads(), c.ffn(), V, seq)
                             : cost::gpt_shape(c.name, c.n_layer, c.n_embd, c.n_head, V, seq);
    m.kv_heads = c.kv_heads();
    m.ffn_hidden = c.ffn();
    m.tied_embeddings = c.tie_embeddings;
    m.learned_positions = c.position == Position::Learned;
    m.biases = c.bias;
    return m;
}

int64_t estimate_params_12lh2_2vh(const GptConfig& c) {
    int64_t h = c.n_embd;
    return 12 * int64_t(c.n_layer) * h * h + 2 * int64_t(c.vocab_size) * h;
}

}  // namespace shardlm::model
