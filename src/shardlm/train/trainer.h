// train/trainer.h: the training loop of one process: gradient accumulation over micro-batches,
// global-norm clipping, the optimiser step and the metrics line of every step.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/data/loader.h"
#include "shardlm/model/gpt.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

struct StepStats {
    int step = 0;
    double loss = 0;       // mean over the G*T targets, before the update
    double grad_norm = 0;  // global L2 norm before clipping
    float lr = 0;
    double step_ms = 0;
    double tokens_per_s = 0;
};

class Trainer {
public:
    explicit Trainer(TrainConfig cfg);
    ~Trainer();

    StepStats train_step(int step);  // one optimiser step (global batch `step`)
    void run();                      // steps [0, cfg.steps), metrics to cfg.metrics

    model::Gpt& model() { return *model_; }
    float* params() { return params_.data(); }
    float* grads() { return grads_.data(); }
    const TrainConfig& config() const { return cfg_; }

private:
    TrainConfig cfg_;
    model::GptConfig model_cfg_;
    std::unique_ptr<model::Gpt> model_;
    AlignedBuffer<float> params_, grads_;
    std::unique_ptr<optim::Optimizer> optimizer_;
    std::unique_ptr<data::BatchLoader> loader_;
    optim::LrSchedule schedule_;
    std::vector<int> inputs_, targets_;
    std::FILE* metrics_ = nullptr;
};

std::string stats_json(const StepStats& s);

}  // namespace shardlm::train
