// model/config.h: the configuration of a decoder-only transformer and its presets.
//
// GPT-2 is the default of every knob; LLaMA-style models set them: RMSNorm, rotary position
// embeddings, a SwiGLU MLP, no biases, an untied head, grouped-query attention (n_kv_head < n_head).
// The knobs are independent (a GPT-2 with RMSNorm is a valid model); the parameter names follow HF
// GPT-2 when every knob is GPT-2's and HF LLaMA otherwise (Family).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/core/enum_names.h"
#include "shardlm/cost/shape.h"

namespace shardlm::model {

enum class Norm { LayerNorm, RMSNorm };
enum class Position { Learned, Rope };
enum class Mlp { Gelu, SwiGLU };
inline constexpr EnumName<Norm> kNormNames[] = {{Norm::LayerNorm, "layernorm"}, {Norm::RMSNorm, "rmsnorm"}};
inline constexpr EnumName<Position> kPositionNames[] = {{Position::Learned, "learned"}, {Position::Rope, "rope"}};
inline constexpr EnumName<Mlp> kMlpNames[] = {{Mlp::Gelu, "gelu"}, {Mlp::SwiGLU, "swiglu"}};
constexpr const auto& enum_names(Norm) { return kNormNames; }
constexpr const auto& enum_names(Position) { return kPositionNames; }
constexpr const auto& enum_names(Mlp) { return kMlpNames; }
// A mixture of experts' router: softmax over the experts' logits (Mixtral, OLMoE) or each expert's own
// sigmoid (DeepSeek-V3).
enum class Router { Softmax, Sigmoid };
inline constexpr EnumName<Router> kRouterNames[] = {{Router::Softmax, "softmax"}, {Router::Sigmoid, "sigmoid"}};
constexpr const auto& enum_names(Router) { return kRouterNames; }

// The mixture-of-experts feed-forward of chosen layers (model/moe.h): n_experts = 0 is a dense model.
struct MoeConfig {
    int n_experts = 0;
    int top_k = 2;
    int n_shared = 0;  // shared experts (DeepSeek-MoE): one dense MLP of n_shared x ffn every token passes
    int ffn = 0;       // an expert's inner width; 0: the dense MLP's (GptConfig::ffn())
    Router router = Router::Softmax;
    bool norm_topk = true;  // the k chosen weights renormalised to sum to 1
    // which layers: "all", "every:K" (layers 0, K, 2K, ...: Megatron's moe_layer_freq) or a list "1,3"
    std::string layers = "all";
    // the objective adds, per MoE layer and micro-batch, aux_coef E sum_i f_i P_i (f_i: the share of the
    // k N choices that went to expert i, P_i: its mean router probability; 1 when balanced) and
    // z_coef mean_t logsumexp(logits_t)^2
    float aux_coef = 0.01f;
    float z_coef = 0.0f;
    // 0: dropless; else each expert takes at most ceil(F k N / E) of a micro-batch's N tokens, those of
    // the largest router probability
    float capacity_factor = 0.0f;
    // DeepSeek-V3's auxiliary-loss-free balancing: a bias per expert added to its score for the choice only
    // (not to the gate weights), after each step bias += rate sign(mean load - load) from the step's global
    // loads; 0: off
    float bias_rate = 0.0f;
};

// Whose parameter names (and HF config.json) a model uses.
enum class Family { Gpt2, Llama };

struct GptConfig {
    std::string name = "custom";
    int n_layer = 0;
    int n_head = 0;
    int n_embd = 0;
    int vocab_size = 0;  // the true vocabulary; loss, import and export use it
    int n_ctx = 0;       // maximum sequence length (HF: n_positions, max_position_embeddings)
    float ln_eps = 1e-5f;  // LayerNorm's or RMSNorm's epsilon (HF: layer_norm_epsilon, rms_norm_eps)
    // architecture knobs (GPT-2's by default)
    Norm norm = Norm::LayerNorm;
    Position position = Position::Learned;
    float rope_theta = 10000.0f;
    Mlp mlp = Mlp::Gelu;
    int ffn_hidden = 0;  // the MLP's inner size; 0: 4 C (gelu), LLaMA's 8C/3 rounded up to 256 (swiglu)
    bool bias = true;    // biases of the linear layers and of LayerNorm
    bool tie_embeddings = true;  // the head reads wte (else its own lm_head matrix)
    int n_kv_head = 0;   // key/value heads (grouped-query attention); 0: n_head
    // OLMoE's normalisation of the queries and keys: each token's whole query and key projections RMS-normalised
    // (over all heads) and scaled by learned gains before the rotary embeddings (model/qk_norm.h). An MoE model
    // with it is an HF OLMoE (its experts carry OLMoE's names), without a Mixtral.
    bool qk_norm = false;
    MoeConfig moe = {};

    bool has_moe() const { return moe.n_experts > 0; }
    bool is_moe(int layer) const;  // layer's feed-forward is a mixture of experts
    int expert_ffn() const { return moe.ffn > 0 ? moe.ffn : ffn(); }

    int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
    int ffn() const;
    // width of a row of the fused q | k | v projection: (n_head + 2 n_kv_head) head_dim
    int qkv_width() const { return (n_head + 2 * kv_heads()) * head_dim(); }
    bool gpt2_arch() const {
        return norm == Norm::LayerNorm && position == Position::Learned && mlp == Mlp::Gelu && bias &&
               tie_embeddings && !has_moe() && !qk_norm && kv_heads() == n_head && (ffn_hidden == 0 || ffn_hidden == 4 * n_embd);
    }
    Family family() const { return gpt2_arch() ? Family::Gpt2 : Family::Llama; }

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
    void validate_moe(const std::string& where) const;
};

// Presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl; the eight GPT-3 sizes of seed 002's table
// (gpt3-small ... gpt3-175b); the LLaMA family (llama-7b/13b/33b/65b, llama2-7b/13b/70b,
// llama3-8b/70b); and tiny ones for tests and the default training run (tiny, small, llama-tiny).
const std::vector<GptConfig>& presets();
// Throws with the list of preset names if `name` is unknown.
GptConfig find_preset(const std::string& name);

// HF config.json: GPT-2's (model_type "gpt2": n_layer, n_head, n_embd, vocab_size, n_positions) or
// LLaMA's (model_type "llama": hidden_size, intermediate_size, num_attention_heads,
// num_key_value_heads, num_hidden_layers, vocab_size, max_position_embeddings, rms_norm_eps,
// rope_theta, tie_word_embeddings). Errors name the file and key.
GptConfig load_hf_config(const std::string& path);
// The config.json of c's family (for a LLaMA-named model HF cannot express, with shardlm's keys for
// the knobs HF's LLaMA lacks: hf_unsupported).
std::string hf_config_json(const GptConfig& c);
// Empty if HF's GPT-2 or LLaMA computes what c computes, else why not (export refuses such a model;
// its checkpoints still load: config.json then carries shardlm's own keys for the other knobs).
std::string hf_unsupported(const GptConfig& c);

// The cost model's shape of c (cost/shape.h) at sequence length seq; vocab: 0 for c's true vocabulary.
cost::ModelShape cost_shape(const GptConfig& c, int seq, int vocab = 0);

// Seed 002's estimate 12 l h^2 + 2 v h (embedding and an untied output projection).
int64_t estimate_params_12lh2_2vh(const GptConfig& c);

}  // namespace shardlm::model
