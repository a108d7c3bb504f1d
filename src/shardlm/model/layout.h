// model/layout.h: the layout table of the model's one flat parameter buffer.
//
// The model is a sequence of units: the embedding (wte, wpe), each transformer block, and the head
// (final LayerNorm; the LM head is tied to wte). Each unit owns a contiguous, 64-byte aligned range of
// the flat buffer, and each parameter a range inside its unit. Gradients, optimiser state and ZeRO
// slices use the same offsets, so every consumer (optimiser, checkpoint, DP buckets, planner) reads
// this one table instead of magic indices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/model/config.h"

namespace shardlm::model {

struct ParamSpec {
    std::string name;            // HF GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
    std::vector<int64_t> shape;  // internal logical shape; Linear weights are [out, in]
    size_t offset = 0;           // elements, from the start of the flat buffer
    size_t numel = 0;            // product of shape
    bool decay = false;          // weight decay applies (2-D tensors: matrices and embeddings)
    bool hf_transposed = false;  // HF Conv1D stores this weight as [in, out]
    int64_t hf_rows = -1;        // if >= 0, only the first hf_rows rows are real (padded vocabulary)
    std::vector<int64_t> hf_shape() const;
    size_t hf_numel() const;  // elements of hf_shape(): numel without vocabulary padding
};

struct Unit {
    std::string name;  // "embedding", "h.0", ..., "head"
    size_t offset = 0, numel = 0;
    int first_param = 0, num_params = 0;  // index range into Layout::params
};

struct Layout {
    std::vector<ParamSpec> params;
    std::vector<Unit> units;
    size_t total = 0;  // elements in the flat buffer, including alignment padding
    const ParamSpec* find(const std::string& name) const;
};

// Block parameter order inside each block unit (also the order of BlockParams in gpt.h).
enum BlockParam : int {
    kLn1W, kLn1B, kQkvW, kQkvB, kAttnProjW, kAttnProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kNumBlockParams
};

// unit_multiple: every unit's size is padded to a multiple of 16 * unit_multiple floats, so that a
// unit splits into unit_multiple equal, 64-byte aligned ZeRO shards (pass the data-parallel size).
Layout make_gpt2_layout(const GptConfig& c, int unit_multiple = 1);

}  // namespace shardlm::model
