// cli/cmd_train.cpp: `shardlm train`.
#include <memory>

#include "shardlm/cli/commands.h"
#include "shardlm/train/trainer.h"

namespace shardlm::cli {

void add_train_command(CLI::App& app) {
    auto cfg = std::make_shared<train::TrainConfig>();
    CLI::App* c = app.add_subcommand("train", "Train a GPT model");
    c->add_option("--init", cfg->init, "HF GPT-2 directory (config.json + model.safetensors) to start from");
    c->add_option("--model", cfg->model, "Model preset to initialise randomly (see `shardlm info --list`)");
    c->add_option("--data", cfg->data, "Token shard (llm.c format) to train on");
    c->add_option("--data-order", cfg->data_order, "sequential | random")->capture_default_str();
    c->add_option("--seq", cfg->seq, "Sequence length T")->capture_default_str();
    c->add_option("--global-batch", cfg->global_batch, "Rows per optimiser step (G)")->capture_default_str();
    c->add_option("--micro-batch", cfg->micro_batch, "Rows per forward/backward (M; G % M == 0)")->capture_default_str();
    c->add_option("--steps", cfg->steps, "Optimiser steps")->capture_default_str();
    c->add_option("--optimizer", cfg->optimizer, "sgd | momentum | adagrad | adam | adamw")->capture_default_str();
    c->add_option("--lr", cfg->lr, "Peak learning rate")->capture_default_str();
    c->add_option("--lr-schedule", cfg->lr_schedule, "constant | cosine (linear warm-up, cosine to --lr-min)")
        ->capture_default_str();
    c->add_option("--warmup", cfg->warmup, "Warm-up steps (cosine schedule)")->capture_default_str();
    c->add_option("--lr-min", cfg->lr_min, "Final learning rate (cosine schedule)")->capture_default_str();
    c->add_option("--weight-decay", cfg->weight_decay, "Weight decay on matrices and embeddings")->capture_default_str();
    c->add_option("--beta1", cfg->beta1, "Adam beta1")->capture_default_str();
    c->add_option("--beta2", cfg->beta2, "Adam beta2")->capture_default_str();
    c->add_option("--eps", cfg->eps, "Adam epsilon")->capture_default_str();
    c->add_option("--momentum", cfg->momentum, "SGD momentum")->capture_default_str();
    c->add_option("--grad-clip", cfg->grad_clip, "Clip the global gradient norm to this (0 = off)")->capture_default_str();
    c->add_option("--seed", cfg->seed, "Random seed (init and data order)")->capture_default_str();
    c->add_option("--threads", cfg->threads, "OpenMP/BLAS threads (0 = all cores)")->capture_default_str();
    c->add_option("--metrics", cfg->metrics, "Write one JSON object per step to this file");
    c->callback([cfg] {
        train::Trainer t(*cfg);
        t.run();
    });
}

}  // namespace shardlm::cli
