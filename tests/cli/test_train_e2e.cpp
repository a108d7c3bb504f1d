// End to end through the binary: `shardlm train --init` on a fresh HF-layout model trained by
// PyTorch for 10 AdamW steps (tests/fixtures/gpt2_e2e, tools/reference/make_fixtures.py) gives the
// same 10 losses and gradient norms, with G = 2 M so gradient accumulation is exercised.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardlm/io/atomic_file.h"

namespace {

const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line))
        if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
}

TEST(TrainE2E, TenStepsMatchPytorchWithGradientAccumulation) {
    const std::string dir = kSrc + "/tests/fixtures/gpt2_e2e";
    auto tmp = std::filesystem::temp_directory_path() / ("shardlm_e2e_" + std::to_string(::getpid()));
    std::filesystem::create_directories(tmp);
    const std::string metrics = (tmp / "metrics.jsonl").string();
    for (int micro : {2, 4}) {
        std::string cmd = kBin + " train --init " + dir + " --data " + dir + "/data.bin --data-order sequential" +
                          " --steps 10 --global-batch 4 --micro-batch " + std::to_string(micro) +
                          " --seq 16 --optimizer adamw --lr 3e-3 --lr-schedule constant --weight-decay 0.1" +
                          " --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0 --seed 1 --threads 2 --metrics " +
                          metrics + " > " + (tmp / "log.txt").string() + " 2>&1";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << shardlm::io::read_file((tmp / "log.txt").string());
        auto expected = nlohmann::json::parse(shardlm::io::read_file(dir + "/expected.json"));
        auto rows = read_jsonl(metrics);
        ASSERT_EQ(rows.size(), 10u);
        for (int s = 0; s < 10; s++) {
            double loss = rows[s]["loss"], ref = expected["losses"][s];
            double gn = rows[s]["grad_norm"], gref = expected["grad_norms"][s];
            EXPECT_EQ(rows[s]["step"], s);
            EXPECT_NEAR(loss, ref, 1e-4 * ref) << "micro-batch " << micro << ", step " << s;
            EXPECT_NEAR(gn, gref, 1e-4 * gref) << "micro-batch " << micro << ", step " << s;
            for (const char* key : {"lr", "step_ms", "tokens_per_s"}) EXPECT_TRUE(rows[s].contains(key)) << key;
            EXPECT_FLOAT_EQ(float(rows[s]["lr"]), 3e-3f);
        }
    }
    std::filesystem::remove_all(tmp);
}

// --n-layer/--n-head/--n-embd/--n-ctx reshape a preset: the checkpoint's HF config.json and the
// parameter count follow, the summary carries the train and train+val unigram entropies, and
// `generate` rebuilds the reshaped model from the checkpoint alone.
TEST(TrainE2E, PresetShapeOverrides) {
    const std::string data = kSrc + "/tests/fixtures/gpt2_e2e/data.bin";
    auto tmp = std::filesystem::temp_directory_path() / ("shardlm_shape_" + std::to_string(::getpid()));
    std::filesystem::remove_all(tmp);
    const std::string out = (tmp / "run").string(), log = (tmp / "log.txt").string();
    std::filesystem::create_directories(tmp);
    std::string cmd = kBin + " train --model tiny --n-layer 3 --n-head 3 --n-embd 48 --n-ctx 32 --data " + data +
                      " --val-data " + data + " --seq 16 --steps 2 --global-batch 2 --micro-batch 2 --threads 1 --out " +
                      out + " > " + log + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << shardlm::io::read_file(log);
    auto cfg = nlohmann::json::parse(shardlm::io::read_file(out + "/ckpt_00000002/config.json"));
    EXPECT_EQ(cfg["n_layer"], 3);
    EXPECT_EQ(cfg["n_head"], 3);
    EXPECT_EQ(cfg["n_embd"], 48);
    EXPECT_EQ(cfg["n_positions"], 32);
    // 12 l C^2 + 13 l C + V C + n_ctx C + 2 C
    const long l = 3, C = 48, V = 50257, P = 12 * l * C * C + 13 * l * C + V * C + 32 * C + 2 * C;
    char want[64];
    std::snprintf(want, sizeof want, "%.2fM parameters", double(P) / 1e6);
    EXPECT_NE(shardlm::io::read_file(log).find(want), std::string::npos) << want << "\n" << shardlm::io::read_file(log);
    auto summary = nlohmann::json::parse(shardlm::io::read_file(out + "/summary.json"));
    // the same shard for train and val: train+val has the same distribution, hence the same entropy
    EXPECT_GT(double(summary["train_unigram_entropy"]), 1.0);
    EXPECT_NEAR(double(summary["corpus_unigram_entropy"]), double(summary["train_unigram_entropy"]), 1e-9);
    cmd = kBin + " generate --ckpt " + out + " --prompt \"Hello\" --max-tokens 4 > " + log + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << shardlm::io::read_file(log);
    std::filesystem::remove_all(tmp);
}

}  // namespace
