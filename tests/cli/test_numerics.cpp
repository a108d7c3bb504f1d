// Numerical guards (issue 10): a non-finite loss or gradient never trains on silently.
// --on-nan stop (default) ends the run naming the step and the first non-finite tensor (the loss, a
// gradient unit, a parameter unit), writes no checkpoint of non-finite weights, and leaves
// metrics.jsonl valid JSON (null); --on-nan skip drops that step's update on every rank and goes on.
// A loss spike (above mean + k sigma of a window) is a warning.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::sh;

class Numerics : public shardlm::test::CliTest {
protected:
    CmdResult train(const std::string& args, const std::string& env = "") {
        return sh(env + " " + shardlm::test::train_fixture("--threads 1 " + args), tmp / "log.txt");
    }
};

// Every line of the run's metrics.jsonl parses as JSON; returns the rows.
std::vector<nlohmann::json> json_rows(const fs::path& run) {
    std::vector<nlohmann::json> rows;
    std::ifstream f(run / "metrics.jsonl");
    for (std::string l; std::getline(f, l);) {
        EXPECT_TRUE(nlohmann::json::accept(l)) << l;
        if (nlohmann::json::accept(l)) rows.push_back(nlohmann::json::parse(l));
    }
    return rows;
}

// Every parameter of every checkpoint in the run is finite.
void expect_finite_checkpoints(const fs::path& run) {
    for (const auto& e : fs::directory_iterator(run)) {
        if (e.path().filename().string().rfind("ckpt_", 0) != 0) continue;
        for (const auto& [name, t] : shardlm::test::checkpoint_params(e.path()))
            for (float x : t) ASSERT_TRUE(std::isfinite(x)) << e.path() << ": " << name;
    }
}

TEST_F(Numerics, HugeLearningRateStopsAtTheFirstNonFiniteStep) {
    const fs::path run = tmp / "run";
    const CmdResult r = train("--optimizer sgd --lr 1e3 --steps 40 --ckpt-every 1 --val-data " + shardlm::test::kFix +
                        "/data.bin --val-every 1 --val-batches 1 --out " + run.string());
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("error: step "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("non-finite loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("first non-finite tensor: "), std::string::npos) << r.out;
    const auto rows = json_rows(run);
    ASSERT_FALSE(rows.empty());
    EXPECT_TRUE(rows.back()["loss"].is_null() || rows.back()["grad_norm"].is_null()) << rows.back();
    EXPECT_LT(rows.size(), 40u);
    expect_finite_checkpoints(run);
}

TEST_F(Numerics, NamesTheGradientUnit) {
    const fs::path run = tmp / "run";
    const CmdResult r = train("--steps 6 --out " + run.string(), "SHARDLM_TEST_POISON=grad:2:h.1:-1:nan");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("step 3: non-finite loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("first non-finite tensor: gradient of unit h.1 (transformer.h.1."), std::string::npos) << r.out;
    const auto rows = json_rows(run);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_TRUE(rows[2]["grad_norm"].is_null());
    EXPECT_TRUE(rows[2]["skipped"].get<bool>());
    EXPECT_FALSE(fs::exists(run / "ckpt_00000003"));
}

TEST_F(Numerics, NamesTheParameterUnitAndNeverSavesIt) {
    // poisoned after the update of step 3: the next forward's loss is NaN, and the parameters are named
    CmdResult r = train("--steps 6 --on-nan skip --out " + (tmp / "a").string(), "SHARDLM_TEST_POISON=param:2:h.0:-1:nan");
    EXPECT_EQ(r.code, 1) << r.out;  // skipping cannot help once the weights are NaN
    EXPECT_NE(r.out.find("step 4: non-finite loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("first non-finite tensor: parameters of unit h.0 (transformer.h.0."), std::string::npos) << r.out;
    // with a checkpoint due right after the update: refused, the previous one stays
    const fs::path b = tmp / "b";
    r = train("--steps 6 --ckpt-every 1 --out " + b.string(), "SHARDLM_TEST_POISON=param:2:wpe:-1:inf");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("after step 3 the parameters are non-finite (first non-finite tensor: parameters of unit wpe"),
              std::string::npos)
        << r.out;
    EXPECT_TRUE(fs::exists(b / "ckpt_00000002"));
    EXPECT_FALSE(fs::exists(b / "ckpt_00000003"));
    expect_finite_checkpoints(b);
}

TEST_F(Numerics, SkipDropsTheUpdateOnEveryRank) {
    // only rank 1's gradient shard is poisoned; both ranks skip step 3 and stay identical replicas
    const fs::path run = tmp / "run";
    const CmdResult r = sh(shardlm::test::mpirun(2, "-x SHARDLM_TEST_POISON=grad:2:h.0:1:nan") +
                         shardlm::test::train_fixture("--threads 1 --steps 6 --dp 2 --zero 2 --on-nan skip "
                                                      "--check-replicas 1 --out " + run.string()),
                     tmp / "log.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: step 3: non-finite"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("gradient of unit h.0 (transformer.h.0."), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rank 1)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--on-nan skip: no optimiser update on any rank"), std::string::npos) << r.out;
    const auto rows = json_rows(run);
    ASSERT_EQ(rows.size(), 6u);
    for (size_t i = 0; i < rows.size(); i++) {
        EXPECT_EQ(rows[i].contains("skipped"), i == 2) << rows[i];
        if (i != 2) {
            EXPECT_TRUE(rows[i]["loss"].is_number()) << rows[i];
        }
    }
    expect_finite_checkpoints(run);
}

TEST_F(Numerics, LossSpikeIsAWarning) {
    CmdResult r = train("--steps 30 --spike-window 10 --out " + (tmp / "quiet").string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("loss spike"), std::string::npos) << r.out;
    // the final LayerNorm's gain turns negative after step 20 (the logits flip): the loss of step 21 jumps
    r = train("--steps 30 --spike-window 10 --out " + (tmp / "spike").string(), "SHARDLM_TEST_POISON=param:19:head:-1:-3");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: step 21: loss spike: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("of the last 10 steps"), std::string::npos) << r.out;
}

}  // namespace
