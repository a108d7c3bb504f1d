// planner/model_presets.h: model shapes the planner knows by name, beyond the engine's GPT-2/GPT-3
// presets (model/config.h; the CLI adapts those): the LLaMA family of seed 002, Llama-2/3 with
// grouped-query attention, and the ten GPT models of Megatron-LM's weak-scaling table (seed 002).
#pragma once
#include <string>
#include <vector>

#include "shardlm/cost/shape.h"

namespace shardlm::planner {

const std::vector<cost::ModelShape>& model_presets();
// nullptr if `name` is not a planner preset.
const cost::ModelShape* find_model_preset(const std::string& name);

}  // namespace shardlm::planner
