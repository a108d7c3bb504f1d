// train/train_config.h: everything `shardlm train` can be told. Field names are the config-file keys
// and, with '_' -> '-', the command-line flags.
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/optim/optimizer.h"

namespace shardlm::train {

struct TrainConfig {
    // model: exactly one of init (HF directory) or model (preset name)
    std::string init;
    std::string model;
    // data
    std::string data;
    std::string data_order = "sequential";  // sequential | random
    int seq = 64;
    int global_batch = 8;
    int micro_batch = 8;
    int steps = 10;
    // optimiser
    std::string optimizer = "adamw";
    float lr = 3e-4f;
    std::string lr_schedule = "constant";  // constant | cosine
    int warmup = 0;
    float lr_min = 0.0f;
    float weight_decay = 0.0f;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    float momentum = 0.9f;
    float grad_clip = 0.0f;  // 0 = off
    // runtime
    uint64_t seed = 1337;
    int threads = 0;  // 0 = OpenMP default
    std::string metrics;  // JSONL file, one object per optimiser step

    optim::OptimConfig optim_config() const;
    // Throws a clear error for values out of range.
    void validate() const;
};

}  // namespace shardlm::train
