// train/checkpoint.h: checkpoints that resume bit-exact.
//
// RUN_DIR/ckpt_<step, 8 digits>/ holds
//   meta.json              format version, completed steps, model and training config, optimiser
//                          hyper-parameters and step count, data position, RNG seed, writer layout
//   config.json            HF GPT-2 config, and
//   model.safetensors      HF GPT-2 names and layout: the directory is also an HF model (--init, generate)
//   optimizer.rank<r>-of-<n>.safetensors
//                          each data-parallel rank's own optimiser state, never gathered: one tensor
//                          "<state>/<param name>/<first>" per piece of a parameter that rank owns, the
//                          elements [first, first + len) of the parameter flattened in shardlm's
//                          internal [out, in] layout. Any layout (dp size, ZeRO stage) reads any other:
//                          each rank copies the pieces that intersect what it owns.
// It is written as a hidden temporary directory, every file fsynced, then renamed into place; older
// checkpoints are removed only after that, so a kill at any moment leaves the previous one intact.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "shardlm/comm/group.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

inline constexpr int kCheckpointVersion = 2;

// Writes RUN_DIR/ckpt_<step>/ and keeps the newest `keep` complete checkpoints. Returns its path.
// Collective over `group` (the data-parallel ranks): `full_params` (the whole flat buffer) is read
// on rank 0 only; every rank writes its optimiser state.
std::string save_checkpoint(const std::string& run_dir, int step, const TrainConfig& cfg, const model::GptConfig& mc,
                            const model::Layout& layout, const float* full_params, optim::Optimizer& opt, int keep,
                            comm::Group& group);

// Removes hidden temporary checkpoint directories left by a killed run.
void remove_stale_checkpoint_temps(const std::string& run_dir);

// The newest complete checkpoint directory in RUN_DIR, or "" if there is none.
std::string latest_checkpoint(const std::string& run_dir);

// Loads the full parameters (into full_params, layout().total floats) and this rank's optimiser
// state; checks that the checkpoint's model and optimiser match. Returns meta.json (its "step" is the
// number of completed steps).
nlohmann::json load_checkpoint(const std::string& dir, const model::GptConfig& mc, const model::Layout& layout,
                               float* full_params, optim::Optimizer& opt);

// Reads meta.json of a checkpoint, with clear errors.
nlohmann::json read_checkpoint_meta(const std::string& dir);

}  // namespace shardlm::train
