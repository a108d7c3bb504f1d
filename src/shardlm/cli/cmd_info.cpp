// cli/cmd_info.cpp: `shardlm info`: parameter counts of a model and what this machine runs.
#include <cblas.h>

#include <cstdio>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/runtime.h"
#include "shardlm/model/config.h"
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
    model::ParamCount p = model::count_params(c);
    int64_t est = model::estimate_params_12lh2_2vh(c);
    int64_t lh2 = 12 * int64_t(c.n_layer) * c.n_embd * c.n_embd;
    std::printf("model %s: n_layer=%d n_head=%d n_embd=%d head_dim=%d vocab_size=%d (padded %d) n_ctx=%d\n",
                c.name.c_str(), c.n_layer, c.n_head, c.n_embd, c.head_dim(), c.vocab_size, c.padded_vocab(), c.n_ctx);
    std::printf("  %-34s %15lld  (%s)\n", "embedding (wte V*C + wpe n_ctx*C)", (long long)p.embedding, human(p.embedding).c_str());
    std::printf("  %-34s %15lld  (%s)\n", "blocks (L * (12 C^2 + 13 C))", (long long)p.blocks, human(p.blocks).c_str());
    std::printf("  %-34s %15lld\n", "final layernorm (2 C)", (long long)p.final_norm);
    std::printf("  %-34s %15lld  (%s)  LM head tied to wte\n", "total", (long long)p.total, human(p.total).c_str());
    std::printf("  %-34s %15lld  (%s)\n", "estimate 12 l h^2", (long long)lh2, human(lh2).c_str());
    std::printf("  %-34s %15lld  (%s)  untied head, as seed 002; ratio to total %.4f\n", "estimate 12 l h^2 + 2 v h",
                (long long)est, human(est).c_str(), double(est) / double(p.total));
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto model = std::make_shared<std::string>();
    auto init = std::make_shared<std::string>();
    auto list = std::make_shared<bool>(false);
    CLI::App* c = app.add_subcommand("info", "Parameter counts of a model; BLAS and threads of this machine");
    c->add_option("--model", *model, "Model preset");
    c->add_option("--init", *init, "HF GPT-2 directory");
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
