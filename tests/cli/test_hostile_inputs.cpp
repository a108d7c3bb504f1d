// The rest of a hostile first hour (issue 21, item 8): inputs that used to be taken silently now get a
// warning or an error that names the setting and the fix.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cli_run.h"

namespace {

using shardlm::test::CmdResult;
using shardlm::test::kBin;
using shardlm::test::kFix;
using shardlm::test::sh;

class HostileInputs : public shardlm::test::CliTest {
protected:
    CmdResult run(const std::string& args) { return sh(kBin + " " + args, tmp / "log.txt"); }
    static std::string train(const std::string& extra) {
        return "train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " + kFix +
               "/data.bin --seq 16 --micro-batch 1 " + extra;
    }
};

TEST_F(HostileInputs, MoreThreadsThanCpusWarns) {
    CmdResult r = run(train("--global-batch 2 --steps 1 --threads 64"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: 64 threads on "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("allowed CPUs: the threads time-slice"), std::string::npos) << r.out;
    r = run(train("--global-batch 2 --steps 1 --threads 1"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("time-slice"), std::string::npos) << r.out;
}

TEST_F(HostileInputs, DataShorterThanOneGlobalBatchWarns) {
    // the fixture holds 700 tokens: 43 rows of 16
    CmdResult r = run(train("--global-batch 64 --steps 1 --threads 1"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("rows of 16 tokens, fewer than one global batch (64 rows)"), std::string::npos) << r.out;
    r = run(train("--global-batch 4 --steps 1 --threads 1"));
    EXPECT_EQ(r.out.find("fewer than one global batch"), std::string::npos) << r.out;
}

TEST_F(HostileInputs, CalibrateRefusesAnUnwritableOutBeforeMeasuring) {
    const auto t0 = std::chrono::steady_clock::now();
    const CmdResult r = run("calibrate --threads 1 --out /nonexistent/x.json");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--out /nonexistent/x.json: the directory /nonexistent does not exist"), std::string::npos) << r.out;
    EXPECT_LT(s, 1.0) << "it measured first";
}

// fp16 keeps no gradient in 16 bits (README, "Mixed precision"): the loss scale cannot act, so a static
// scale of 1 equals the dynamic default to the bit; a scale beyond fp32's range is refused.
TEST_F(HostileInputs, Fp16LossScaleIsANoOpAndOutOfRangeScalesAreRefused) {
    const std::string base = train("--global-batch 4 --steps 3 --threads 1 --precision fp16 --ckpt-every 3 --out ");
    CmdResult r = run(base + (tmp / "dyn").string());
    ASSERT_EQ(r.code, 0) << r.out;
    r = run(base + (tmp / "one").string() + " --loss-scale 1");
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* f : {"model.rank00000-of-00001.safetensors", "optimizer.rank00000-of-00001.safetensors"})
        EXPECT_EQ(shardlm::io::read_file((tmp / "dyn" / "ckpt_00000003" / f).string()),
                  shardlm::io::read_file((tmp / "one" / "ckpt_00000003" / f).string()))
            << f;
    r = run(base + (tmp / "big").string() + " --loss-scale 1e45");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--loss-scale"), std::string::npos) << r.out;
}

}  // namespace
