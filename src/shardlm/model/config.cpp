#include "shardlm/model/config.h"

#include <cstdlib>
#include <sstream>

#include "shardlm/core/check.h"
#include "shardlm/cost/shape.h"

namespace shardlm::model {

int GptConfig::ffn() const {
    if (ffn_hidden > 0) return ffn_hidden;
    return mlp == Mlp::SwiGLU ? cost::llama_default_ffn(n_embd) : 4 * n_embd;
}

namespace {

// The layers a MoeConfig::layers text names (whether each of n is an MoE layer); why not, in *error.
std::vector<bool> moe_layer_set(const std::string& text, int n, std::string* error) {
    std::vector<bool> on(size_t(n > 0 ? n : 0), false);
    if (text == "all") {
        on.assign(on.size(), true);
        return on;
    }
    if (text.rfind("every:", 0) == 0) {
        const int k = std::atoi(text.c_str() + 6);
        if (k <= 0) *error = "every:K needs K >= 1";
        for (int l = 0; k > 0 && l < n; l += k) on[size_t(l)] = true;
        return on;
    }
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const long l = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || l < 0 || l >= n) {
            *error = "'" + item + "' is not a layer in 0.." + std::to_string(n - 1);
            return on;
        }
        on[size_t(l)] = true;
    }
    return on;
}

}  // namespace

bool GptConfig::is_moe(int layer) const {
    if (!has_moe()) return false;
    std::string error;
    const std::vector<bool> on = moe_layer_set(moe.layers, n_layer, &error);
    return layer >= 0 && layer < int(on.size()) && on[size_t(layer)];
}

void GptConfig::validate_moe(const std::string& where) const {
    if (!has_moe()) return;
    const MoeConfig& m = moe;
    SHARDLM_CHECK(m.n_experts >= 1 && m.top_k >= 1 && m.top_k <= m.n_experts, where, ": top_k (", m.top_k,
                  ") must be between 1 and n_experts (", m.n_experts, ")");
    SHARDLM_CHECK(m.n_shared >= 0 && m.ffn >= 0, where, ": shared_experts and moe_ffn must be >= 0");
    SHARDLM_CHECK(m.aux_coef >= 0 && m.z_coef >= 0 && m.capacity_factor >= 0 && m.bias_rate >= 0, where,
                  ": aux_loss_coef, z_loss_coef, capacity_factor and expert_bias_rate must be >= 0 (0 = off / dropless)");
    std::string error;
    (void)moe_layer_set(m.layers, n_layer, &error);
    SHARDLM_CHECK(error.empty(), where, ": moe_layers '", m.layers, "': ", error,
                  "\n---> HINT: \"all\", \"every:K\" (layers 0, K, 2K, ...) or a list of layers such as \"1,3\"");
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
    validate_moe(where);
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

// A mixture of experts on a preset's shape: E experts of width F, top k (every layer).
GptConfig moe(GptConfig c, std::string name, int E, int k, int F) {
    c.name = std::move(name);
    c.moe.n_experts = E, c.moe.top_k = k, c.moe.ffn = F;
    return c;
}

// OLMoE's attention and routing: the queries and keys normalised, the top k not renormalised (OLMoE-1B-7B).
GptConfig olmoe(GptConfig c) {
    c.qk_norm = true, c.moe.norm_topk = false;
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
        // mixtures of experts: GPT-2's knobs on the quick start's shape with 8 experts of width 2C, top 2 (the
        // dense 4C MLP's active FLOPs per token); an OLMoE-like mini (LLaMA's knobs, 64 experts of width 64, top 8)
        moe(GptConfig{"", 6, 4, 64, 50257, 256}, "moe-small", 8, 2, 128),
        olmoe(moe(llama("", 4, 4, 128, 4, 256, 50257, 256, 1e-5f, 10000.0f), "olmoe-mini", 64, 8, 64)),
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
    m.qk_norm = c.qk_norm;
    if (c.has_moe()) {  // (the planner counts experts in every layer)
        m.experts = c.moe.n_experts, m.top_k = c.moe.top_k, m.expert_ffn = c.expert_ffn(), m.shared_experts = c.moe.n_shared;
        m.dropout = false;
    }
    return m;
}

int64_t estimate_params_12lh2_2vh(const GptConfig& c) {
    int64_t h = c.n_embd;
    return 12 * int64_t(c.n_layer) * h * h + 2 * int64_t(c.vocab_size) * h;
}

}  // namespace shardlm::model
