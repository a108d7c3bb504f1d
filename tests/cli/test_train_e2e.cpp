// End to end through the binary: `shardlm train --init` on a fresh HF-layout model trained by
// PyTorch for 10 AdamW steps (tests/fixtures/gpt2_e2e, tools/reference/make_fixtures.py) gives the
// same 10 losses and gradient norms, with G = 2 M so gradient accumulation is exercised.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
