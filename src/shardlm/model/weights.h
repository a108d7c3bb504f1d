// model/weights.h: filling the flat parameter buffer: random init, HF GPT-2 import and export.
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/core/dtype.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"

namespace shardlm::model {

// GPT-2 init: weights and embeddings N(0, 0.02), the two residual projections (attn.c_proj,
// mlp.c_proj) N(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm gains 1. Element i of parameter P
// is a pure function of (seed, P's name, i): any layout or shard of the buffer initialises to the
// same values. Vocabulary padding stays 0.
void init_gpt2_weights(float* params, const Layout& layout, uint64_t seed);

// Reads DIR/config.json.
GptConfig load_hf_dir_config(const std::string& dir);
// Reads DIR/model.safetensors (HF GPT-2 names, Conv1D [in, out] weights, F32/F16/BF16) into params.
// Every tensor of the layout must be present with the right shape; unknown tensors other than
// lm_head.weight / attn.bias / attn.masked_bias buffers are an error.
void load_hf_weights(const std::string& dir, const GptConfig& c, const Layout& layout, float* params);
// Writes DIR/config.json and DIR/model.safetensors (same names and shapes, true vocabulary).
void save_hf_model(const std::string& dir, const GptConfig& c, const Layout& layout, const float* params,
                   DType dtype = DType::F32);

// Copies between the internal [out, in] layout and HF's [in, out] for one parameter.
void to_hf_layout(float* dst, const float* src, const ParamSpec& p);
void from_hf_layout(float* dst, const float* src, const ParamSpec& p);

}  // namespace shardlm::model
