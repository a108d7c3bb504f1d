// tests/cli/run_dir.h: reading what `shardlm train` leaves in a run directory, for the tests that
// compare runs: its metrics rows, and a checkpoint's parameters assembled whole from the pieces of
// whatever layout wrote them.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/model/layout.h"
#include "shardlm/model/weights.h"

namespace shardlm::test {

inline std::vector<nlohmann::json> metrics(const std::filesystem::path& run_dir) {
    std::vector<nlohmann::json> rows;
    std::ifstream f(run_dir / "metrics.jsonl");
    for (std::string l; std::getline(f, l);)
        if (!l.empty()) rows.push_back(nlohmann::json::parse(l));
    return rows;
}

// HF tensor name -> the whole tensor (HF layout), from a checkpoint or HF directory.
inline std::map<std::string, std::vector<float>> checkpoint_params(const std::filesystem::path& dir) {
    const model::GptConfig c = model::load_hf_dir_config(dir.string());
    const model::Layout L = model::make_gpt2_layout(c);
    AlignedBuffer<float> flat(L.total);
    model::load_hf_weights(dir.string(), c, L, flat.data());
    std::map<std::string, std::vector<float>> out;
    for (const model::ParamSpec& p : L.params) {
        std::vector<float> t(p.hf_numel());
        model::to_hf_layout(t.data(), flat.data() + p.offset, p);
        out[p.name] = std::move(t);
    }
    return out;
}

// Losses, gradient norms and (with val) validation losses equal to `rel` relative, from row `from` on.
inline void expect_same_losses(const std::filesystem::path& a, const std::filesystem::path& b, size_t from,
                               const std::string& what, double rel = 1e-5, bool val = true) {
    auto ma = metrics(a), mb = metrics(b);
    ASSERT_EQ(ma.size(), mb.size()) << what;
    for (size_t i = from; i < ma.size(); i++) {
        double x = ma[i]["loss"], y = mb[i]["loss"];
        EXPECT_NEAR(x, y, rel * std::fabs(x)) << what << ", step " << i;
        double gx = ma[i]["grad_norm"], gy = mb[i]["grad_norm"];
        EXPECT_NEAR(gx, gy, rel * std::fabs(gx)) << what << ", step " << i;
        if (!val) continue;
        EXPECT_EQ(ma[i].contains("val_loss"), mb[i].contains("val_loss")) << what << ", step " << i;
        if (ma[i].contains("val_loss")) {
            double vx = ma[i]["val_loss"], vy = mb[i]["val_loss"];
            EXPECT_NEAR(vx, vy, rel * std::fabs(vx)) << what << ", step " << i;
        }
    }
}

// Every parameter of the two checkpoints equal to `rel` of the tensor's largest magnitude, but for
// at most one element in a thousand (at least one a tensor), held to 10 x rel: an element whose
// gradient nearly cancels over the batch has a large relative rounding error in any summation order,
// and Adam divides it by its own small scale (clang's ASan build, dp=4 ZeRO-2 against one process:
// one element of 2304 at 1.18 x rel, the rest within 0.4 x). A layout's bug moves many elements, or
// one by a step of lr (3e-3 absolute here, some 4e-2 of the scale). With
// key_bias_abs >= 0 the key bias (the middle third of each attn.c_attn.bias) is held apart to that
// absolute bound: its exact gradient is 0 (softmax is shift-invariant), so what Adam steps it by is
// rounding noise, which any change of summation order (a layout, a compiler) changes.
inline void expect_same_params(const std::filesystem::path& a, const std::filesystem::path& b, const std::string& what,
                               float rel = 1e-5f, float key_bias_abs = -1.0f) {
    auto pa = checkpoint_params(a), pb = checkpoint_params(b);
    ASSERT_EQ(pa.size(), pb.size()) << what;
    for (const auto& [name, x] : pa) {
        const std::vector<float>& y = pb.at(name);
        ASSERT_EQ(x.size(), y.size()) << what << ": " << name;
        const bool key = key_bias_abs >= 0 && name.size() >= 16 && name.compare(name.size() - 16, 16, "attn.c_attn.bias") == 0;
        const size_t C = x.size() / 3;
        float scale = 0;
        for (float v : x) scale = std::max(scale, std::fabs(v));
        float worst = 0;
        size_t over = 0, worst_at = 0;
        for (size_t i = 0; i < x.size(); i++) {
            const float d = std::fabs(x[i] - y[i]);
            if (key && i >= C && i < 2 * C) {
                EXPECT_LE(d, key_bias_abs) << what << ": key bias " << name << "[" << i << "]";
                continue;
            }
            if (d > rel * scale) over++;
            if (d > worst) worst = d, worst_at = i;
        }
        const size_t outliers = std::max<size_t>(1, x.size() / 1000);
        EXPECT_LE(worst, (over <= outliers ? 10 : 1) * rel * scale)
            << what << ": " << name << "[" << worst_at << "] " << x[worst_at] << " vs " << y[worst_at] << " (" << over
            << " elements over " << rel << " x " << scale << ", " << outliers << " allowed up to 10 x)";
    }
}

// A float64 reference fixture's final parameters (fixture/final.safetensors, rounded to fp32) against a run's
// checkpoint, through a scratch HF directory `scratch` (created or overwritten).
inline void expect_reference_params(const std::filesystem::path& ckpt, const std::string& fixture,
                                    const std::filesystem::path& scratch, const std::string& what, float rel = 1e-4f) {
    namespace fs = std::filesystem;
    fs::create_directories(scratch);
    fs::copy_file(fixture + "/config.json", scratch / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(fixture + "/final.safetensors", scratch / "model.safetensors", fs::copy_options::overwrite_existing);
    expect_same_params(ckpt, scratch, what, rel);
}

// A run's losses and gradient norms from step `from` on against a float64 reference fixture's expected.json,
// each to `rel` of the reference's value.
inline void expect_reference_curve(const std::filesystem::path& run, const std::string& fixture, const std::string& what,
                                   double rel = 1e-5, size_t from = 0) {
    const auto expected = nlohmann::json::parse(io::read_file(fixture + "/expected.json"));
    const auto rows = metrics(run);
    ASSERT_EQ(rows.size(), expected["losses"].size()) << what;
    for (size_t s = from; s < rows.size(); s++) {
        const double loss = rows[s]["loss"], ref = expected["losses"][s];
        const double gn = rows[s]["grad_norm"], gref = expected["grad_norms"][s];
        EXPECT_EQ(rows[s]["step"], int(s)) << what;
        EXPECT_NEAR(loss, ref, rel * ref) << what << ", step " << s;
        EXPECT_NEAR(gn, gref, rel * gref) << what << ", step " << s;
    }
}

}  // namespace shardlm::test
