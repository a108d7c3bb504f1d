#include "shardlm/model/weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/safetensors.h"

namespace shardlm::model {

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// Standard normal from a 64-bit key (Box-Muller on two 32-bit uniforms).
float normal_from_key(uint64_t key) {
    uint64_t r = splitmix64(key);
    double u1 = (double((r >> 32) & 0xffffffffu) + 1.0) / 4294967297.0;  // (0, 1]
    double u2 = double(r & 0xffffffffu) / 4294967296.0;
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void init_gpt2_weights(float* params, const Layout& layout, uint64_t seed) {
    int n_layer = 0;
    for (const auto& u : layout.units) n_layer += u.name.rfind("h.", 0) == 0;
    const float std_resid = 0.02f / std::sqrt(2.0f * float(n_layer));
    for (const ParamSpec& p : layout.params) {
        float* w = params + p.offset;
        if (p.shape.size() == 1) {
            float v = ends_with(p.name, "ln_1.weight") || ends_with(p.name, "ln_2.weight") ||
                              ends_with(p.name, "ln_f.weight") ? 1.0f : 0.0f;
            for (size_t i = 0; i < p.numel; i++) w[i] = v;
            continue;
        }
        float sd = ends_with(p.name, "c_proj.weight") ? std_resid : 0.02f;
        size_t real = p.hf_numel();
        uint64_t base = splitmix64(seed ^ fnv1a(p.name));
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < p.numel; i++) w[i] = i < real ? sd * normal_from_key(base + i) : 0.0f;
    }
}

void to_hf_layout(float* dst, const float* src, const ParamSpec& p) {
    size_t n = p.hf_numel();
    if (!p.hf_transposed) {
        std::memcpy(dst, src, n * sizeof(float));
        return;
    }
    // internal [R, Cc] -> HF [Cc, R]
    const size_t R = size_t(p.shape[0]), Cc = size_t(p.shape[1]);
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < Cc; c++)
        for (size_t r = 0; r < R; r++) dst[c * R + r] = src[r * Cc + c];
}

void from_hf_layout(float* dst, const float* src, const ParamSpec& p) {
    if (!p.hf_transposed) {
        std::memcpy(dst, src, p.hf_numel() * sizeof(float));
        return;
    }
    const size_t R = size_t(p.shape[0]), Cc = size_t(p.shape[1]);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++)
        for (size_t c = 0; c < Cc; c++) dst[r * Cc + c] = src[c * R + r];
}

GptConfig load_hf_dir_config(const std::string& dir) {
    std::string path = (std::filesystem::path(dir) / "config.json").string();
    SHARDLM_CHECK(std::filesystem::exists(path), "'", dir, "' has no config.json\n---> HINT: --init takes a ",
                  "directory with an HF GPT-2 config.json and model.safetensors (e.g. written by `shardlm export`)");
    return load_hf_config(path);
}

void load_hf_weights(const std::string& dir, const GptConfig& c, const Layout& layout, float* params) {
    std::string path = (std::filesystem::path(dir) / "model.safetensors").string();
    SHARDLM_CHECK(std::filesystem::exists(path), "'", dir, "' has no model.safetensors\n---> HINT: --init takes a ",
                  "directory with an HF GPT-2 config.json and model.safetensors");
    io::SafetensorsReader st(path);
    std::set<std::string> expected;
    std::vector<float> tmp;
    for (const ParamSpec& p : layout.params) {
        expected.insert(p.name);
        std::vector<int64_t> hs = p.hf_shape();
        size_t n = p.hf_numel();
        tmp.resize(n);
        st.read_f32(p.name, hs, tmp.data());
        from_hf_layout(params + p.offset, tmp.data(), p);
        if (p.hf_rows >= 0)  // zero the vocabulary padding
            std::memset(params + p.offset + n, 0, (p.numel - n) * sizeof(float));
    }
    for (const io::TensorInfo& t : st.tensors()) {
        if (expected.count(t.name)) continue;
        // HF GPT-2 files may carry the tied head and the causal-mask buffers; they hold no parameters of ours.
        if (t.name == "lm_head.weight" || ends_with(t.name, ".attn.bias") || ends_with(t.name, ".attn.masked_bias"))
            continue;
        fail(path, ": unexpected tensor '", t.name, "' for a GPT-2 with n_layer=", c.n_layer,
             "\n---> HINT: does config.json match the weights?");
    }
}

void save_hf_model(const std::string& dir, const GptConfig& c, const Layout& layout, const float* params, DType dtype) {
    std::filesystem::create_directories(dir);
    io::SafetensorsWriter w;
    for (const ParamSpec& p : layout.params) {
        std::vector<int64_t> hs = p.hf_shape();
        size_t n = p.hf_numel();
        std::vector<float> tmp(n);
        to_hf_layout(tmp.data(), params + p.offset, p);
        w.add_f32(p.name, hs, tmp.data(), dtype);
    }
    w.set_metadata("format", "pt");
    w.write((std::filesystem::path(dir) / "model.safetensors").string());
    io::write_file_atomic((std::filesystem::path(dir) / "config.json").string(), hf_config_json(c));
}

}  // namespace shardlm::model
