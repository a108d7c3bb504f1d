// cli/cmd_generate.cpp: `shardlm generate`: sample text from a checkpoint with a KV cache.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "shardlm/cli/commands.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/data/tokenizer.h"
#include "shardlm/model/generate.h"
#include "shardlm/model/weights.h"
#include "shardlm/train/checkpoint.h"

namespace shardlm::cli {

void add_generate_command(CLI::App& app) {
    struct Opts {
        std::string ckpt, prompt = "\n", vocab;
        model::SampleOptions s;
    };
    auto o = std::make_shared<Opts>();
    o->s.top_k = 40;
    o->s.max_tokens = 100;
    CLI::App* c = app.add_subcommand("generate", "Sample text from a checkpoint (or a run directory, or an HF GPT-2 directory)");
    c->add_option("--ckpt", o->ckpt, "Checkpoint directory, run directory (its latest checkpoint) or HF directory")->required();
    c->add_option("--prompt", o->prompt, "Text to continue")->capture_default_str();
    c->add_option("--max-tokens", o->s.max_tokens, "Tokens to generate")->capture_default_str();
    c->add_option("--temperature", o->s.temperature, "Softmax temperature (0 = greedy)")->capture_default_str();
    c->add_option("--top-k", o->s.top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str();
    c->add_option("--seed", o->s.seed, "Sampling seed")->capture_default_str();
    c->add_option("--vocab", o->vocab, "Directory with encoder.json and vocab.bpe (default: data/gpt2)");
    c->callback([o] {
        SHARDLM_CHECK(o->s.max_tokens >= 0, "--max-tokens must be >= 0");
        SHARDLM_CHECK(o->s.temperature >= 0, "--temperature must be >= 0");
        SHARDLM_CHECK(o->s.top_k >= 0, "--top-k must be >= 0");
        std::string dir = o->ckpt;
        // a checkpoint holds meta.json, an HF directory model.safetensors; a run directory holds checkpoints
        namespace fs = std::filesystem;
        if (!fs::exists(fs::path(dir) / "model.safetensors") && !fs::exists(fs::path(dir) / "meta.json")) {
            std::vector<std::string> damaged;  // newer ones whose files do not match their checksums: passed over, as --resume does
            const std::string good = train::newest_good_checkpoint(dir, &damaged);
            SHARDLM_CHECK(!good.empty() || !damaged.empty(), "'", dir, "' is neither a checkpoint or HF directory (config.json + model ",
                          "tensors) nor a run directory with checkpoints\n---> HINT: train with --out RUN_DIR first");
            for (const std::string& d : damaged) std::fprintf(stderr, "warning: %s: passed over\n", d.c_str());
            SHARDLM_CHECK(!good.empty(), "every checkpoint in '", dir, "' is damaged (", damaged.size(), ")",
                          "\n---> HINT: repair one, or sample from an exported HF directory");
            if (!damaged.empty()) std::fprintf(stderr, "sampling from %s, the newest good checkpoint\n", good.c_str());
            dir = good;
        }
        train::check_checkpoint_files(dir);  // a checkpoint: its files against meta.json's checksums
        model::GptConfig cfg = model::load_hf_dir_config(dir);
        model::Layout layout = model::make_gpt2_layout(cfg);
        AlignedBuffer<float> params(layout.total);
        model::load_hf_weights(dir, cfg, layout, params.data());
        data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(o->vocab.empty() ? data::default_vocab_dir() : o->vocab);
        SHARDLM_CHECK(int(tok.vocab_size()) <= cfg.vocab_size, "the model's vocab_size ", cfg.vocab_size,
                      " is smaller than the GPT-2 tokenizer's ", tok.vocab_size());
        std::vector<int> prompt = tok.encode(o->prompt);
        if (prompt.empty()) prompt.push_back(tok.eot_id());
        // the prompt fills positions 0..P-1; each new token is predicted at the next position, the last one at n_ctx
        const int room = cfg.n_ctx + 1 - int(prompt.size());
        SHARDLM_CHECK(o->s.max_tokens <= room, "--max-tokens ", o->s.max_tokens, " with a prompt of ", prompt.size(),
                      " tokens goes beyond the model's context (n_ctx = ", cfg.n_ctx, "): ",
                      room > 0 ? "at most " + std::to_string(room) + " new tokens fit" : std::string("the prompt alone fills it"),
                      "\n---> HINT: --max-tokens ", std::max(room, 0), " or less, or a shorter --prompt");
        model::Generator gen(cfg, layout, params.data());
        if (fs::exists(fs::path(dir) / "meta.json")) {  // an MoE checkpoint's choice bias (auxiliary-loss-free balancing)
            const nlohmann::json meta = train::read_checkpoint_meta(dir);
            if (meta.contains("expert_bias")) gen.set_expert_bias(meta["expert_bias"].get<std::vector<float>>());
        }
        std::vector<int> ids = model::sample_tokens(gen, prompt, o->s);
        std::printf("%s%s\n", o->prompt.c_str(), tok.decode(ids).c_str());
    });
}

}  // namespace shardlm::cli
