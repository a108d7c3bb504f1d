#include "shardlm/cost/flops.h"

#include "shardlm/core/enum_names.h"

namespace shardlm::cost {

std::string recompute_name(Recompute r) { return enum_name(kRecomputeNames, r); }
bool recompute_from_name(const std::string& s, Recompute* out) { return enum_from_name(kRecomputeNames, s, out); }
std::string attention_name(Attention a) { return enum_name(kAttentionNames, a); }
bool attention_from_name(const std::string& s, Attention* out) { return enum_from_name(kAttentionNames, s, out); }

BlockFlops block_forward_flops_per_token(const ModelShape& m, int seq) {
    const double h = m.hidden, f = m.ffn_hidden, kv = double(m.kv_dim());
    const double mlp = m.arch == Arch::Llama ? 3 : 2;
    // an MoE block's MLP work: the k chosen experts and the shared ones, and the router
    const double width = m.moe() ? double(m.top_k + m.shared_experts) * m.expert_ffn : f;
    BlockFlops b;
    b.matmul = 2 * (h * (h + 2 * kv) + h * h + mlp * h * width + (m.moe() ? h * m.experts : 0.0));
    b.attention = 4.0 * seq * h;
    return b;
}

double head_forward_flops_per_token(const ModelShape& m) { return 2.0 * m.hidden * double(m.vocab); }

double forward_flops_per_token(const ModelShape& m, int seq) {
    return m.layers * block_forward_flops_per_token(m, seq).total() + head_forward_flops_per_token(m);
}

double model_flops_per_token(const ModelShape& m, int seq) { return 3 * forward_flops_per_token(m, seq); }

double hardware_flops_per_token(const ModelShape& m, int seq, Recompute r, Attention a) {
    const BlockFlops b = block_forward_flops_per_token(m, seq);
    double extra = 0;
    if (r == Recompute::Full) extra = m.layers * b.total();
    if (r == Recompute::Selective && a == Attention::Naive) extra = m.layers * b.attention;
    // the flash backward recomputes Q K^T (half the core's forward) from the saved row statistics
    if (a == Attention::Flash) extra += m.layers * b.attention / 2;
    return model_flops_per_token(m, seq) + extra;
}

double megatron_flops_per_step(const ModelShape& m, int64_t batch, int seq) {
    const double B = double(batch), s = seq, l = m.layers, h = m.hidden, V = m.vocab;
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double training_time_s(double tokens, double params, double gpus, double peak_flops, double utilisation) {
    return 8 * tokens * params / (gpus * peak_flops * utilisation);
}

double utilisation_from_time(double tokens, double params, double gpus, double peak_flops, double seconds) {
    return 8 * tokens * params / (gpus * peak_flops * seconds);
}

}  // namespace shardlm::cost
