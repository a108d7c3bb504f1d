// Training-health telemetry (train/health.h): each unit's gradient norm, update-to-parameter ratio and output
// RMS, shown to be what they claim (the units' norms make up the global one; the ratio is the checkpoints'
// own change over the parameters) and the same in every layout; a spike names the unit it came from, and
// --on-spike skip skips that step's update on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::sh;

class Health : public shardlm::test::CliTest {
protected:
    // the fixture's GPT-2 (2 blocks), SGD with momentum as the layout tests use it
    CmdResult train(const std::string& args, const std::string& prefix = "", const std::string& env = "") {
        return sh(env + " " + prefix + shardlm::test::train_fixture("--optimizer sgd --momentum 0.9 --lr 0.05 --threads 1 " + args),
                  tmp / "log.txt");
    }
    static std::vector<nlohmann::json> health_rows(const fs::path& run) {
        std::vector<nlohmann::json> out;
        for (const auto& r : shardlm::test::metrics(run))
            if (r.contains("health")) out.push_back(r);
        return out;
    }
};

// The unit (as telemetry counts it) of an HF GPT-2 tensor name.
std::string unit_of(const std::string& name) {
    std::smatch m;
    if (std::regex_search(name, m, std::regex("\\.h\\.([0-9]+)\\."))) return "block " + m[1].str();
    if (name.find("wte") != std::string::npos || name.find("wpe") != std::string::npos) return "embedding";
    return "head";  // ln_f (and lm_head when untied)
}

TEST_F(Health, UnitNormsMakeUpTheGlobalOneAndTheRatioIsTheCheckpointsChange) {
    const fs::path a = tmp / "a", b = tmp / "b";
    ASSERT_EQ(train("--steps 4 --health-every 4 --ckpt-every 1 --keep-ckpts 10 --out " + a.string()).code, 0);
    const auto rows = health_rows(a);
    ASSERT_EQ(rows.size(), 1u);
    const nlohmann::json& h = rows[0]["health"];
    EXPECT_EQ(h["units"], nlohmann::json({"embedding", "block 0", "block 1", "head"}));
    double sq = 0;
    for (const auto& g : h["grad_norm"]) sq += g.get<double>() * g.get<double>();
    EXPECT_NEAR(std::sqrt(sq), rows[0]["grad_norm"].get<double>(), 1e-6 * rows[0]["grad_norm"].get<double>());
    // ||theta_4 - theta_3|| / ||theta_3|| per unit, from the checkpoints around step 4's update
    const auto before = shardlm::test::checkpoint_params(a / "ckpt_00000003"), after = shardlm::test::checkpoint_params(a / "ckpt_00000004");
    std::map<std::string, double> d2, p2;
    for (const auto& [name, x] : before) {
        const std::vector<float>& y = after.at(name);
        for (size_t i = 0; i < x.size(); i++) d2[unit_of(name)] += double(y[i] - x[i]) * double(y[i] - x[i]), p2[unit_of(name)] += double(x[i]) * x[i];
    }
    for (size_t u = 0; u < 4; u++) {
        const std::string n = h["units"][u];
        EXPECT_NEAR(h["update_ratio"][u].get<double>(), std::sqrt(d2[n] / p2[n]), 1e-4 * std::sqrt(d2[n] / p2[n])) << n;
    }
    for (size_t u = 0; u < 3; u++) EXPECT_GT(h["act_rms"][u].get<double>(), 0.0) << u;
    EXPECT_TRUE(h["act_rms"][3].is_null());  // the head writes a loss, not the stream
    // --health-every 0: no health rows
    ASSERT_EQ(train("--steps 4 --health-every 0 --out " + b.string()).code, 0);
    EXPECT_TRUE(health_rows(b).empty());
}

// The same numbers under data, tensor and pipeline parallelism and ZeRO-3: every rank adds its counted part.
TEST_F(Health, EveryLayoutMeasuresTheSame) {
    const fs::path one = tmp / "one";
    ASSERT_EQ(train("--steps 4 --health-every 2 --out " + one.string()).code, 0);
    const auto ref = health_rows(one);
    ASSERT_EQ(ref.size(), 2u);
    for (const std::string layout : {"--dp 2", "--tp 2", "--pp 2", "--dp 2 --zero 3", "--tp 2 --sequence-parallel"}) {
        const fs::path run = tmp / "layout";
        fs::remove_all(run);
        const CmdResult r = train("--steps 4 --health-every 2 " + layout + " --out " + run.string(), shardlm::test::mpirun(2));
        ASSERT_EQ(r.code, 0) << layout << "\n" << r.out;
        const auto got = health_rows(run);
        ASSERT_EQ(got.size(), ref.size()) << layout;
        for (size_t i = 0; i < ref.size(); i++)
            for (const char* key : {"grad_norm", "update_ratio", "act_rms"})
                for (size_t u = 0; u < 4; u++) {
                    const nlohmann::json &x = ref[i]["health"][key][u], &y = got[i]["health"][key][u];
                    ASSERT_EQ(x.is_null(), y.is_null()) << layout << " " << key << " " << u;
                    if (x.is_null()) continue;
                    EXPECT_NEAR(x.get<double>(), y.get<double>(), 2e-5 * std::fabs(x.get<double>()))
                        << layout << ", step " << ref[i]["step"] << ", " << key << " of " << ref[i]["health"]["units"][u];
                }
    }
}

// A gradient spike in block 1 (its gradients raised at step 20) is named so; with --on-spike skip every rank
// skips that update: the run's parameters after 20 steps are those of a clean run after 19.
TEST_F(Health, ASpikeNamesItsUnitAndSkipSkipsItsUpdateEverywhere) {
    const std::string poison = "SHARDLM_TEST_POISON=grad:19:h.1:-1:0.5";
    const fs::path warn = tmp / "warn", skip = tmp / "skip", clean = tmp / "clean";
    CmdResult r = train("--steps 20 --spike-window 10 --dp 2 --out " + warn.string(), shardlm::test::mpirun(2, "-x " + poison));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: step 20: gradient-norm spike: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the largest rise of a unit's gradient norm: block 1 ("), std::string::npos) << r.out;
    EXPECT_EQ(shardlm::test::metrics(warn)[19]["spike"], "block 1");
    r = train("--steps 20 --spike-window 10 --dp 2 --on-spike skip --out " + skip.string(), shardlm::test::mpirun(2, "-x " + poison));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("block 1 ("), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the update is skipped (--on-spike skip)"), std::string::npos) << r.out;
    EXPECT_TRUE(shardlm::test::metrics(skip)[19].value("skipped", false));
    ASSERT_EQ(train("--steps 19 --dp 2 --out " + clean.string(), shardlm::test::mpirun(2)).code, 0);
    for (const char* f : {"model.rank00000-of-00002.safetensors", "model.rank00001-of-00002.safetensors"})
        EXPECT_EQ(shardlm::io::read_file((skip / "ckpt_00000020" / f).string()), shardlm::io::read_file((clean / "ckpt_00000019" / f).string()))
            << f;
}

}  // namespace
