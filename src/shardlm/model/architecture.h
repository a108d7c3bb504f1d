// model/architecture.h: what a model computes, as a record a checkpoint keeps (meta.json "model"), and
// what differs between two such records.
//
// Every knob that changes what a checkpoint's tensors mean is in the record, resolved (the MLP's width,
// the key/value heads, the MoE layers as a list): the shape (n_layer, n_head, n_embd, vocab_size,
// n_ctx), the norm and its epsilon, positions and the rotary base, the MLP, biases, the tied head,
// grouped-query heads, the q/k norms and the mixture of experts (experts, top-k, shared experts, an
// expert's width, the router and its renormalisation, which layers). Training settings that leave the
// tensors' meaning alone (the balance loss's coefficient, the capacity, the expert bias's rate) are
// not. A resume compares the checkpoint's record with the run's and refuses any change, naming every key.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/model/config.h"

namespace shardlm::model {

nlohmann::json architecture_json(const GptConfig& c);

// A key whose value differs, as the records spell them ("norm": "layernorm" -> "rmsnorm").
struct ArchitectureChange {
    std::string key, was, now;
};
// The keys of `was` that `now` holds with another value (a key `was` lacks is not compared: the
// records of older checkpoints hold only the shape).
std::vector<ArchitectureChange> architecture_changes(const nlohmann::json& was, const nlohmann::json& now);
// One line: "GPT-2 family, 2 layers x 4 heads, width 64, vocabulary 50257, layernorm, learned positions,
// gelu MLP of 256, biases, tied head" (the keys a record has).
std::string architecture_summary(const nlohmann::json& a);
// The train flag that sets a record's key ("ln_eps" -> "--rms-norm-eps", "moe_layers" -> "--moe-layers").
std::string architecture_flag(const std::string& key);

}  // namespace shardlm::model
