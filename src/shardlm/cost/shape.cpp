#include "shardlm/cost/shape.h"

#include <algorithm>
#include <utility>

#include "shardlm/core/check.h"
#include "shardlm/core/enum_names.h"

namespace shardlm::cost {

ModelShape gpt_shape(std::string name, int layers, int hidden, int heads, int vocab, int seq_len) {
    ModelShape m;
    m.name = std::move(name);
    m.layers = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = heads;
    m.ffn_hidden = 4 * hidden, m.vocab = vocab, m.seq_len = seq_len;
    return m;  // the gpt flags are ModelShape's defaults
}

ModelShape llama_shape(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn_hidden,
                       int vocab, int seq_len) {
    ModelShape m;
    m.name = std::move(name);
    m.layers = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = kv_heads;
    m.ffn_hidden = ffn_hidden, m.vocab = vocab, m.seq_len = seq_len;
    m.arch = Arch::Llama;
    m.tied_embeddings = false, m.learned_positions = false, m.biases = false, m.dropout = false;
    return m;
}

int llama_default_ffn(int hidden) {
    int64_t f = (int64_t(8) * hidden + 2) / 3;  // ceil(8h/3)
    return int((f + 255) / 256 * 256);
}

namespace {
constexpr EnumName<Arch> kArchNames[] = {{Arch::Gpt, "gpt"}, {Arch::Llama, "llama"}};
}  // namespace

std::string arch_name(Arch a) { return enum_name(kArchNames, a); }
bool arch_from_name(const std::string& s, Arch* out) { return enum_from_name(kArchNames, s, out); }

std::string check_shape(const ModelShape& m) {
    auto positive = [](const char* key, int v) { return v > 0 ? std::string() : cat(key, " must be > 0 (got ", v, ")"); };
    for (auto [key, v] : {std::pair{"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads},
                          {"kv_heads", m.kv_heads}, {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab},
                          {"seq_len", m.seq_len}})
        if (std::string r = positive(key, v); !r.empty()) return r;
    if (m.hidden % m.heads != 0) return cat("hidden (", m.hidden, ") is not a multiple of heads (", m.heads, ")");
    if (m.heads % m.kv_heads != 0)
        return cat("heads (", m.heads, ") is not a multiple of kv_heads (", m.kv_heads, "): each KV head serves a group of query heads");
    if (m.experts < 0 || (m.moe() && (m.top_k < 1 || m.top_k > m.experts || m.expert_ffn < 1 || m.shared_experts < 0)))
        return cat("a mixture of experts needs 1 <= top_k <= experts and expert_ffn > 0 (got experts ", m.experts, ", top_k ",
                   m.top_k, ", expert_ffn ", m.expert_ffn, ")");
    return "";
}

namespace {

// MLP matrices: gpt 2 (fc, proj), llama 3 (gate, up, down).
int64_t mlp_matrices(const ModelShape& m) { return m.arch == Arch::Llama ? 3 : 2; }
int64_t norm_params(const ModelShape& m) { return m.biases ? 2 * int64_t(m.hidden) : int64_t(m.hidden); }

}  // namespace

int64_t expert_params_per_block(const ModelShape& m) {
    return m.moe() ? int64_t(m.experts) * mlp_matrices(m) * m.hidden * m.expert_ffn : 0;
}

int64_t active_params(const ModelShape& m) {
    const int64_t routed = int64_t(m.layers) * expert_params_per_block(m);
    return total_params(m) - (m.moe() ? routed - routed / m.experts * m.top_k : 0);
}

int64_t block_params_split(const ModelShape& m) {
    const int64_t h = m.hidden, qkv = h + 2 * m.kv_dim();
    // the MLP: a dense one of ffn_hidden, or the experts and the shared experts (no biases but the shared fc's)
    const int64_t f = m.moe() ? int64_t(m.shared_experts) * m.expert_ffn : m.ffn_hidden;
    int64_t p = h * qkv + h * h + mlp_matrices(m) * h * f + expert_params_per_block(m);  // QKV, projection, MLPs
    if (m.biases) p += qkv + f;                               // column-parallel biases (QKV, MLP fc)
    if (m.qk_norm) p += h + m.kv_dim();                       // the q and k norms' gains
    return p;
}

UnitParams unit_params(const ModelShape& m) {
    const int64_t h = m.hidden, V = m.vocab;
    UnitParams u;
    u.embedding = V * h + (m.learned_positions ? int64_t(m.seq_len) * h : 0);
    // + two norms, + the row-parallel biases (attention projection, MLP proj) that stay replicated
    // (an MoE block: the router, replicated, and a projection bias only for shared experts)
    const bool mlp_bias = !m.moe() || m.shared_experts > 0;
    u.block = block_params_split(m) + 2 * norm_params(m) + (m.biases ? (mlp_bias ? 2 : 1) * h : 0) +
              (m.moe() ? int64_t(m.experts) * h : 0);
    u.final_norm = norm_params(m);
    u.head = m.tied_embeddings ? 0 : V * h;
    return u;
}

int64_t total_params(const ModelShape& m) { return unit_params(m).total(m.layers); }

int64_t estimate_params_12lh2_2vh(const ModelShape& m) {
    const int64_t h = m.hidden;
    return 12 * int64_t(m.layers) * h * h + 2 * int64_t(m.vocab) * h;
}

LaneGroups lane_groups(int B, int T, int lanes, int rows) {
    if (lanes <= 1) return {B, 1};
    const int g = std::clamp((rows + T - 1) / T, 1, (B + lanes - 1) / lanes);
    return {g, (B + g - 1) / g};
}

int weight_block_rows(int n, int tp, int min_rows) {
    return tp > 1 ? std::max(n, 1) : std::max(min_rows, (n / 16 + 15) / 16 * 16);
}

bool runs_lanes(int B, int T, int threads, int tp) {
    return tp == 1 && threads > 1 && lane_groups(B, T, std::min(threads, B)).count >= 2 * threads;
}

}  // namespace shardlm::cost
