// bench/bench_train_step.cpp: one full training step (forward, backward, AdamW) of a preset
// (default GPT-2 124M), timed over several steps on random tokens. Prints one JSON line with
// tokens/s, MFU against the fp32 peak given with --peak-gflops, and peak RSS.
// Usage: bench_train_step --batch B --seq T [--model gpt2] [--threads K] [--steps N] [--warmup W] [--peak-gflops P]
//                         [--matmul-precision fp32|bf16] [--precision fp32|bf16|fp16] [--recompute none|full|selective]
//                         [--n-layer L --n-head H --n-embd C] (reshape the preset)
//                         [--thread-split auto|batch|kernel] [--attention fused|materialized] [--n-ctx N]
//                         [--gemm auto|onednn|openblas]
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "shardlm/core/runtime.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/model/config.h"
#include "shardlm/train/trainer.h"

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    int B = 4, T = 64, threads = 2, steps = 5, warmup = 1;
    double peak = 0;
    std::string model = "gpt2", precision = "fp32", mixed = "fp32", recompute = "none", split = "auto", attention = "fused", gemm = "auto";
    int n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--batch") B = std::atoi(v);
        else if (k == "--seq") T = std::atoi(v);
        else if (k == "--threads") threads = std::atoi(v);
        else if (k == "--steps") steps = std::atoi(v);
        else if (k == "--warmup") warmup = std::atoi(v);
        else if (k == "--peak-gflops") peak = std::atof(v);
        else if (k == "--model") model = v;
        else if (k == "--matmul-precision") precision = v;
        else if (k == "--precision") mixed = v;
        else if (k == "--recompute") recompute = v;
        else if (k == "--thread-split") split = v;
        else if (k == "--attention") attention = v;
        else if (k == "--gemm") gemm = v;
        else if (k == "--n-ctx") n_ctx = std::atoi(v);
        else if (k == "--n-layer") n_layer = std::atoi(v);
        else if (k == "--n-head") n_head = std::atoi(v);
        else if (k == "--n-embd") n_embd = std::atoi(v);
        else { std::fprintf(stderr, "unknown flag %s\n", k.c_str()); return 2; }
    }
    shardlm::train::TrainConfig cfg;
    cfg.model = model;
    cfg.n_layer = n_layer, cfg.n_head = n_head, cfg.n_embd = n_embd;
    if (n_ctx > 0) cfg.n_ctx = n_ctx;
    using shardlm::train::parse_setting;
    parse_setting("--attention", attention, &cfg.attention);
    parse_setting("--matmul-precision", precision, &cfg.matmul_precision);
    parse_setting("--precision", mixed, &cfg.precision);
    parse_setting("--recompute", recompute, &cfg.recompute);
    parse_setting("--thread-split", split, &cfg.thread_split);
    parse_setting("--gemm", gemm, &cfg.gemm);
    shardlm::model::GptConfig mc = cfg.model_config();
    // random tokens, enough for every step
    std::mt19937 rng(1);
    std::vector<uint16_t> tok(size_t(B) * T * (steps + warmup) + 1);
    for (auto& t : tok) t = uint16_t(rng() % mc.vocab_size);
    std::string shard = (std::filesystem::temp_directory_path() / ("bench_step_" + std::to_string(::getpid()) + ".bin")).string();
    shardlm::data::write_token_shard(shard, tok);

    cfg.data = shard;
    cfg.seq = T;
    cfg.global_batch = cfg.micro_batch = B;
    cfg.steps = steps + warmup;
    cfg.optimizer = shardlm::optim::Kind::AdamW;
    cfg.lr = 6e-4f;
    cfg.weight_decay = 0.1f;
    cfg.grad_clip = 1.0f;
    cfg.threads = threads;
    shardlm::train::Trainer trainer(cfg);
    std::vector<double> ms;
    for (int s = 0; s < steps + warmup; s++) {
        auto st = trainer.train_step(s);
        if (s >= warmup) ms.push_back(st.step_ms);
    }
    std::remove(shard.c_str());
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double med = sorted[sorted.size() / 2], mean = 0;
    for (double m : ms) mean += m / ms.size();
    auto pc = shardlm::model::count_params(mc);
    double flops_per_token = 6.0 * double(pc.total) + 12.0 * mc.n_layer * T * mc.n_embd;
    double tps = double(B) * T / (med / 1e3);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("{\"impl\": \"shardlm\", \"attention\": \"%s\", \"model\": \"%s\", \"precision\": \"%s\", \"recompute\": \"%s\", \"matmul_precision\": \"%s\", \"n_layer\": %d, \"n_embd\": %d, \"B\": %d, \"T\": %d, \"threads\": %d, \"tokens_per_s\": %.2f, "
                "\"step_ms_median\": %.1f, \"step_ms_mean\": %.1f, \"tflops_per_step\": %.3f, \"achieved_gflops\": %.1f, "
                "\"mfu\": %.4f, \"peak_rss_mib\": %.0f, \"gemm\": \"%s\"}\n",
                attention.c_str(), model.c_str(), mixed.c_str(), recompute.c_str(), precision.c_str(), mc.n_layer, mc.n_embd, B, T, threads, tps, med, mean, flops_per_token * B * T / 1e12,
                flops_per_token * tps / 1e9, peak > 0 ? flops_per_token * tps / 1e9 / peak : 0.0, ru.ru_maxrss / 1024.0,
                shardlm::kernels::gemm_summary().c_str());
}
