// model/weights.h: filling the flat parameter buffer: random init, HF GPT-2 import and export.
#pragma once
#include <cstdint>
#include <string>

#include <map>
#include <memory>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/io/safetensors.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/pieces.h"

namespace shardlm::model {

// GPT-2 init: weights and embeddings N(0, 0.02), the two residual projections (attn.c_proj,
// mlp.c_proj) N(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm gains 1. Element i of parameter P
// (i in the whole tensor's internal layout) is a pure function of (seed, P's name, i): any layout,
// tensor-parallel shard or ZeRO slice initialises to the same values. Vocabulary padding stays 0.
// Fills the flat elements [range.begin, range.end) into dst (dst[0] is element range.begin).
void init_gpt2_weights(float* dst, const Layout& layout, FlatRange range, uint64_t seed);
inline void init_gpt2_weights(float* params, const Layout& layout, uint64_t seed) {
    init_gpt2_weights(params, layout, FlatRange{0, layout.total}, seed);
}

// Stored pieces of HF tensors (model/pieces.h): the tensors of safetensors files named
// "<hf name>" (the whole tensor: an HF model file) or "<hf name>[box]" (a piece), any float dtype.
class PieceStore {
public:
    void add_file(const std::string& path);
    // Fills dst (the flat elements [range.begin, range.end) of layout, dst[0] = element range.begin)
    // from the stored tensors named prefix + parameter name; vocabulary padding is zeroed. Throws,
    // naming the tensor and the missing box, if an element is not stored.
    void load(float* dst, const Layout& layout, FlatRange range, const std::string& prefix = "") const;
    // Distinct tensor names (without boxes), and the files they came from.
    std::vector<std::string> names() const;
    const std::vector<std::string>& files() const { return paths_; }

private:
    struct Stored {
        const io::SafetensorsReader* file;
        const io::TensorInfo* tensor;
        Box box;
        bool whole;  // named without a box: the whole tensor (its shape must be the model's)
    };
    std::vector<std::unique_ptr<io::SafetensorsReader>> readers_;
    std::vector<std::string> paths_;
    std::map<std::string, std::vector<Stored>> index_;
};

// Copies one whole parameter (tp_size 1) between the internal [out, in] layout at src/dst (the
// parameter's first element) and HF's layout (Conv1D [in, out], true vocabulary).
void to_hf_layout(float* dst, const float* src, const ParamSpec& p);
void from_hf_layout(float* dst, const float* src, const ParamSpec& p);

// Reads DIR/config.json.
GptConfig load_hf_dir_config(const std::string& dir);
// The model tensor files of an HF GPT-2 directory (model.safetensors) or of a shardlm checkpoint
// (model.rank*.safetensors: every rank's pieces). Throws if there are none.
std::vector<std::string> model_files(const std::string& dir);
// Checks that every tensor of the store is a parameter of the GPT-2 `c` (HF files may also carry
// lm_head.weight and the attention-mask buffers). `where` names the directory in errors.
void check_model_tensors(const PieceStore& store, const GptConfig& c, const std::string& where);
// Reads an HF GPT-2 directory or a checkpoint (F32/F16/BF16) into params (the whole layout).
void load_hf_weights(const std::string& dir, const GptConfig& c, const Layout& layout, float* params);
// Writes DIR/config.json and DIR/model.safetensors (same names and shapes, true vocabulary) of a
// whole-model layout.
void save_hf_model(const std::string& dir, const GptConfig& c, const Layout& layout, const float* params,
                   DType dtype = DType::F32);

}  // namespace shardlm::model
