#include "shardlm/train/trainer.h"

#include <cmath>
#include <cstring>

#include "shardlm/core/check.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/model/weights.h"

namespace shardlm::train {

optim::OptimConfig TrainConfig::optim_config() const {
    optim::OptimConfig o;
    o.kind = optim::parse_kind(optimizer);
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.momentum = momentum;
    o.weight_decay = weight_decay;
    return o;
}

void TrainConfig::validate() const {
    SHARDLM_CHECK(init.empty() != model.empty(), "give exactly one of --init DIR or --model PRESET");
    SHARDLM_CHECK(!data.empty(), "--data FILE is required\n---> HINT: prepare a token shard with `shardlm tokenize`");
    SHARDLM_CHECK(steps >= 0, "--steps must be >= 0 (got ", steps, ")");
    SHARDLM_CHECK(seq > 0, "--seq must be > 0 (got ", seq, ")");
    SHARDLM_CHECK(micro_batch > 0, "--micro-batch must be > 0 (got ", micro_batch, ")");
    SHARDLM_CHECK(global_batch > 0 && global_batch % micro_batch == 0, "--global-batch (", global_batch,
                  ") must be a positive multiple of --micro-batch (", micro_batch, ")");
    SHARDLM_CHECK(lr >= 0 && std::isfinite(lr), "--lr must be a finite number >= 0 (got ", lr, ")");
    SHARDLM_CHECK(grad_clip >= 0, "--grad-clip must be >= 0 (0 = off; got ", grad_clip, ")");
    SHARDLM_CHECK(beta1 >= 0 && beta1 < 1, "--beta1 must be in [0, 1) (got ", beta1, ")");
    SHARDLM_CHECK(beta2 >= 0 && beta2 < 1, "--beta2 must be in [0, 1) (got ", beta2, ")");
    SHARDLM_CHECK(eps > 0, "--eps must be > 0 (got ", eps, ")");
    SHARDLM_CHECK(warmup >= 0, "--warmup must be >= 0 (got ", warmup, ")");
    SHARDLM_CHECK(lr_schedule == "constant" || lr_schedule == "cosine", "--lr-schedule '", lr_schedule,
                  "' is not known\n---> HINT: use constant or cosine");
    optim::parse_kind(optimizer);
}

Trainer::Trainer(TrainConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    set_threads(cfg_.threads);
    model_cfg_ = cfg_.init.empty() ? model::find_preset(cfg_.model) : model::load_hf_dir_config(cfg_.init);
    SHARDLM_CHECK(cfg_.seq <= model_cfg_.n_ctx, "--seq ", cfg_.seq, " exceeds the model's context length n_ctx = ",
                  model_cfg_.n_ctx, "\n---> HINT: use --seq <= ", model_cfg_.n_ctx);
    model_ = std::make_unique<model::Gpt>(model_cfg_, cfg_.micro_batch, cfg_.seq, get_threads());
    const model::Layout& layout = model_->layout();
    params_.resize(layout.total);
    grads_.resize(layout.total);
    model_->bind(params_.data(), grads_.data());
    if (cfg_.init.empty())
        model::init_gpt2_weights(params_.data(), layout, cfg_.seed);
    else
        model::load_hf_weights(cfg_.init, model_cfg_, layout, params_.data());
    optimizer_ = std::make_unique<optim::Optimizer>(cfg_.optim_config(), layout, optim::Range{0, layout.total});

    loader_ = std::make_unique<data::BatchLoader>(data::read_token_shard(cfg_.data), cfg_.seq, cfg_.data_order,
                                                  cfg_.seed, cfg_.data);
    int mx = loader_->max_token();
    SHARDLM_CHECK(mx < model_cfg_.vocab_size, "token shard '", cfg_.data, "' holds token id ", mx,
                  " but the model's vocab_size is ", model_cfg_.vocab_size,
                  "\n---> HINT: tokenize with the model's tokenizer, or use a model with a larger vocabulary");
    schedule_ = {cfg_.lr_schedule, cfg_.lr, cfg_.lr_min, cfg_.warmup, cfg_.steps};
    inputs_.resize(size_t(cfg_.micro_batch) * cfg_.seq);
    targets_.resize(inputs_.size());
    if (!cfg_.metrics.empty()) {
        metrics_ = std::fopen(cfg_.metrics.c_str(), "w");
        SHARDLM_CHECK(metrics_, "cannot write metrics file '", cfg_.metrics, "': ", std::strerror(errno));
    }
}

Trainer::~Trainer() {
    if (metrics_) std::fclose(metrics_);
}

StepStats Trainer::train_step(int step) {
    double t0 = now_s();
    const int G = cfg_.global_batch, M = cfg_.micro_batch, T = cfg_.seq;
    const float dloss = 1.0f / float(G * T);
    grads_.zero();
    double loss_sum = 0.0;
    for (int m0 = 0; m0 < G; m0 += M) {
        for (int j = 0; j < M; j++)
            loader_->fill(step, G, m0 + j, inputs_.data() + size_t(j) * T, targets_.data() + size_t(j) * T);
        float loss = model_->forward(inputs_.data(), targets_.data(), M, T, dloss);
        model_->backward();
        loss_sum += double(loss) * M;
    }
    StepStats s;
    s.step = step;
    s.loss = loss_sum / G;
    s.grad_norm = std::sqrt(kernels::sum_squares(grads_.data(), grads_.size()));
    if (cfg_.grad_clip > 0) {
        // torch.nn.utils.clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6))
        float coef = float(cfg_.grad_clip / (s.grad_norm + 1e-6));
        if (coef < 1.0f) kernels::scale_inplace(grads_.data(), grads_.size(), coef);
    }
    s.lr = schedule_.at(step);
    optimizer_->step(params_.data(), grads_.data(), s.lr);
    s.step_ms = (now_s() - t0) * 1e3;
    s.tokens_per_s = double(G) * T / (s.step_ms / 1e3);
    return s;
}

std::string stats_json(const StepStats& s) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"step_ms\": %.3f, "
                  "\"tokens_per_s\": %.3f}",
                  s.step, s.loss, s.grad_norm, double(s.lr), s.step_ms, s.tokens_per_s);
    return buf;
}

void Trainer::run() {
    for (int step = 0; step < cfg_.steps; step++) {
        StepStats s = train_step(step);
        std::string line = stats_json(s);
        if (metrics_) {
            std::fprintf(metrics_, "%s\n", line.c_str());
            std::fflush(metrics_);
        }
        std::printf("step %5d/%d | loss %.6f | grad_norm %.4f | lr %.3e | %.1f ms | %.0f tok/s\n", step + 1,
                    cfg_.steps, s.loss, s.grad_norm, double(s.lr), s.step_ms, s.tokens_per_s);
        std::fflush(stdout);
    }
}

}  // namespace shardlm::train
