// cli/cmd_info.cpp: `shardlm info`: parameter counts of a model and what this machine runs.
#include <cblas.h>

#include <cstdio>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/runtime.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/weights.h"

namespace shardlm::cli {

namespace {

std::string human(int64_t n) {
    char buf[32];
    if (n >= 1000000000) std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
    else if (n >= 1000000) std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
    else std::snprintf(buf, sizeof(buf), "%.2fK", n / 1e3);
    return buf;
}

void print_model(const model::GptConfig& c) {
    const model::ParamCount p = model::count_params(c);
    const int64_t est = model::estimate_params_12lh2_2vh(c);
    const int64_t C = c.n_embd, L = c.n_layer, V = c.vocab_size, F = c.ffn(), KV = int64_t(c.kv_heads()) * c.head_dim();
    const int64_t lh2 = 12 * L * C * C;
    const bool swiglu = c.mlp == model::Mlp::SwiGLU;
    std::printf("model %s: n_layer=%d n_head=%d n_kv_head=%d n_embd=%d head_dim=%d ffn_hidden=%d vocab_size=%d "
                "(padded %d) n_ctx=%d\n",
                c.name.c_str(), c.n_layer, c.n_head, c.kv_heads(), c.n_embd, c.head_dim(), c.ffn(), c.vocab_size,
                c.padded_vocab(), c.n_ctx);
    std::printf("  norm=%s position=%s%s mlp=%s bias=%s tie_embeddings=%s eps=%g\n",
                enum_name(model::kNormNames, c.norm).c_str(), enum_name(model::kPositionNames, c.position).c_str(),
                c.position == model::Position::Rope ? (" (theta " + std::to_string(int64_t(c.rope_theta)) + ")").c_str() : "",
                enum_name(model::kMlpNames, c.mlp).c_str(), c.bias ? "true" : "false", c.tie_embeddings ? "true" : "false",
                double(c.ln_eps));
    std::printf("  %-34s %15lld  (%s)\n",
                c.position == model::Position::Learned ? "embedding (wte V*C + wpe n_ctx*C)" : "embedding (V*C)",
                (long long)p.embedding, human(p.embedding).c_str());
    std::printf("  %-34s %15lld  (%s)  per block %lld\n", "blocks", (long long)p.blocks, human(p.blocks).c_str(),
                (long long)p.per_block);
    std::printf("  %-34s %15lld\n", "final norm", (long long)p.final_norm);
    if (p.head) std::printf("  %-34s %15lld  (%s)\n", "lm_head (untied, V*C)", (long long)p.head, human(p.head).c_str());
    std::printf("  %-34s %15lld  (%s)  %s\n", "total", (long long)p.total, human(p.total).c_str(),
                c.tie_embeddings ? "LM head tied to wte" : "untied LM head");
    if (c.has_moe()) {
        const model::MoeConfig& m = c.moe;
        std::printf("  mixture of experts: %d experts, top %d, %d shared, expert width %d, router %s, layers %s\n",
                    m.n_experts, m.top_k, m.n_shared, c.expert_ffn(), enum_name(model::kRouterNames, m.router).c_str(),
                    m.layers.c_str());
        std::printf("  %-34s %15lld  (%s)\n", "routed experts (in blocks)", (long long)p.experts, human(p.experts).c_str());
        std::printf("  %-34s %15lld  (%s)  %.1f %% of the total\n", "active per token", (long long)p.active,
                    human(p.active).c_str(), 100.0 * double(p.active) / double(p.total));
        return;  // the dense estimate below has no MoE term
    }
    std::printf("  %-34s %15lld  (%s)\n", "estimate 12 l h^2", (long long)lh2, human(lh2).c_str());
    std::printf("  %-34s %15lld  (%s)  untied head, as seed 002; ratio to total %.4f\n", "estimate 12 l h^2 + 2 v h",
                (long long)est, human(est).c_str(), double(est) / double(p.total));
    // where the estimate and the count differ, term by term (exact: their sum is total - estimate)
    std::printf("  where they differ (count - estimate = %+lld):\n", (long long)(p.total - est));
    const int64_t attn = L * (2 * C * C + 2 * C * KV) - L * 4 * C * C;
    const int64_t mlp = L * (swiglu ? 3 : 2) * C * F - L * 8 * C * C;
    if (attn) std::printf("    %-48s %+15lld\n", "k, v of n_kv_head heads, not 2 C^2 (GQA)", (long long)attn);
    if (mlp)
        std::printf("    %-48s %+15lld\n",
                    swiglu ? "MLP 3 C ffn (SwiGLU), not 8 C^2" : "MLP 2 C ffn, not 8 C^2", (long long)mlp);
    const int64_t small = p.blocks - L * (2 * C * C + 2 * C * KV + (swiglu ? 3 : 2) * C * F);
    if (small) std::printf("    %-48s %+15lld\n", "norms and biases of the blocks", (long long)small);
    if (p.final_norm) std::printf("    %-48s %+15lld\n", "final norm", (long long)p.final_norm);
    const int64_t emb = p.embedding - V * C;
    if (emb) std::printf("    %-48s %+15lld\n", "learned position table n_ctx C", (long long)emb);
    if (c.tie_embeddings) std::printf("    %-48s %+15lld\n", "head tied to wte (counted once)", (long long)(-V * C));
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto model = std::make_shared<std::string>();
    auto init = std::make_shared<std::string>();
    auto list = std::make_shared<bool>(false);
    CLI::App* c = app.add_subcommand("info", "Parameter counts of a model; BLAS and threads of this machine");
    c->add_option("--model", *model, "Model preset");
    c->add_option("--init", *init, "HF GPT-2 or LLaMA directory");
    c->add_flag("--list", *list, "List every preset");
    c->callback([model, init, list] {
        if (*list) {
            for (const auto& p : model::presets()) print_model(p);
        } else if (!model->empty()) {
            print_model(model::find_preset(*model));
        } else if (!init->empty()) {
            print_model(model::load_hf_dir_config(*init));
        }
        std::printf("blas: OpenBLAS %s, core %s, threads %d\n", openblas_get_config(), openblas_get_corename(),
                    get_threads());
    });
}

}  // namespace shardlm::cli
