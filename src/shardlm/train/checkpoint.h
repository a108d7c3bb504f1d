// train/checkpoint.h: checkpoints that resume bit-exact.
//
// RUN_DIR/ckpt_<step, 8 digits>/ holds
//   meta.json              format version, completed steps, model and training config, optimiser
//                          hyper-parameters and step count, data position, RNG seed
//   config.json            HF GPT-2 config, and
//   model.safetensors      HF GPT-2 names and layout: the directory is also an HF model (--init, generate)
//   optimizer.safetensors  "<state>.<HF name>" (exp_avg, exp_avg_sq, momentum_buffer, sum), same layout
// It is written as a hidden temporary directory, every file fsynced, then renamed into place; older
// checkpoints are removed only after that, so a kill at any moment leaves the previous one intact.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

inline constexpr int kCheckpointVersion = 1;

// Writes RUN_DIR/ckpt_<step>/ and keeps the newest `keep` complete checkpoints. Returns its path.
std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const float* params, optim::Optimizer& opt, int keep);

// Removes hidden temporary checkpoint directories left by a killed run.
void remove_stale_checkpoint_temps(const std::string& run_dir);

// The newest complete checkpoint directory in RUN_DIR, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);

// Loads params and optimiser state; checks that the checkpoint's model and optimiser match.
// Returns meta.json (its "step" is the number of completed steps).
nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               float* params, optim::Optimizer& opt);

// Reads meta.json of a checkpoint, with clear errors.
nlohmann::json read_checkpoint_meta(const std::string& dir);

}  // namespace shardlm::train
