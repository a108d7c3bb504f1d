#include "shardlm/planner/model_presets.h"

namespace shardlm::planner {

namespace {

std::vector<cost::ModelShape> make_presets() {
    using cost::gpt_shape;
    using cost::llama_shape;
    return {
        // LLaMA (Touvron et al. 2023, table 2; seed 002): vocab 32000, context 2048, SwiGLU sizes of
        // the released checkpoints (8h/3 rounded up to 256).
        //          name          l     h    a   kv    ffn   vocab   seq
        llama_shape("llama-7b",   32, 4096, 32, 32, 11008, 32000, 2048),
        llama_shape("llama-13b",  40, 5120, 40, 40, 13824, 32000, 2048),
        llama_shape("llama-33b",  60, 6656, 52, 52, 17920, 32000, 2048),
        llama_shape("llama-65b",  80, 8192, 64, 64, 22016, 32000, 2048),
        // Llama 2 (Touvron et al. 2023b; HF config.json): 70B uses 8 KV heads (GQA), context 4096.
        llama_shape("llama2-7b",  32, 4096, 32, 32, 11008, 32000, 4096),
        llama_shape("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        llama_shape("llama2-70b", 80, 8192, 64,  8, 28672, 32000, 4096),
        // Llama 3 (Meta 2024; HF config.json): vocab 128256, 8 KV heads, context 8192.
        llama_shape("llama3-8b",  32, 4096, 32,  8, 14336, 128256, 8192),
        llama_shape("llama3-70b", 80, 8192, 64,  8, 28672, 128256, 8192),
        // Megatron-LM's weak-scaling table (Narayanan et al. 2021, table 1; seed 002): GPT with
        // vocab 51200 and sequence 2048.
        //        name                 l      h    a   vocab   seq
        gpt_shape("megatron-1.7b",    24,  2304,  24, 51200, 2048),
        gpt_shape("megatron-3.6b",    30,  3072,  32, 51200, 2048),
        gpt_shape("megatron-7.5b",    36,  4096,  32, 51200, 2048),
        gpt_shape("megatron-18.4b",   40,  6144,  48, 51200, 2048),
        gpt_shape("megatron-39.1b",   48,  8192,  64, 51200, 2048),
        gpt_shape("megatron-76.1b",   60, 10240,  80, 51200, 2048),
        gpt_shape("megatron-145.6b",  80, 12288,  96, 51200, 2048),
        gpt_shape("megatron-310.1b",  96, 16384, 128, 51200, 2048),
        gpt_shape("megatron-529.6b", 105, 20480, 128, 51200, 2048),
        gpt_shape("megatron-1t",     128, 25600, 160, 51200, 2048),
    };
}

}  // namespace

const std::vector<cost::ModelShape>& model_presets() {
    static const std::vector<cost::ModelShape> p = make_presets();
    return p;
}

const cost::ModelShape* find_model_preset(const std::string& name) {
    for (const auto& m : model_presets())
        if (m.name == name) return &m;
    return nullptr;
}

}  // namespace shardlm::planner
