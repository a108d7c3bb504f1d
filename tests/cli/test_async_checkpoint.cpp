// Fewer lost steps (issue 21, item 3): --async-ckpt writes a checkpoint's files on a background thread
// (the same bytes as a synchronous checkpoint, at the same steps), --ckpt-every-seconds checkpoints by
// the clock, and a kill while a checkpoint is still being written leaves the previous one to resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::kBin;
using shardlm::test::kFix;
using shardlm::test::sh;

std::string train(const fs::path& out, const std::string& extra) {
    return kBin + " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " + kFix +
           "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 --optimizer adamw --lr 3e-3 --keep-ckpts 20 --out " +
           out.string() + " " + extra;
}

std::string file(const fs::path& p) { return shardlm::io::read_file(p.string()); }

// Every file of checkpoint a equals b's; meta.json equal but for the settings that chose how it was written.
void expect_same_checkpoint(const fs::path& a, const fs::path& b) {
    ASSERT_TRUE(fs::exists(a / "meta.json")) << a;
    ASSERT_TRUE(fs::exists(b / "meta.json")) << b;
    for (const auto& e : fs::directory_iterator(a)) {
        const std::string n = e.path().filename().string();
        if (n == "meta.json") continue;
        EXPECT_EQ(file(e.path()), file(b / n)) << a << " vs " << b << ": " << n;
    }
    nlohmann::json ma = nlohmann::json::parse(file(a / "meta.json")), mb = nlohmann::json::parse(file(b / "meta.json"));
    for (auto* m : {&ma, &mb})
        for (const char* k : {"async_ckpt", "ckpt_every", "ckpt_every_seconds", "out", "resume"}) (*m)["train_config"].erase(k);
    EXPECT_EQ(ma, mb) << a << " vs " << b;
}

class AsyncCheckpoint : public shardlm::test::CliTest {};

TEST_F(AsyncCheckpoint, WritesTheSameCheckpointsAsSynchronousOnes) {
    for (const std::string& mpi : {std::string(""), shardlm::test::mpirun(2)}) {
        const std::string extra = mpi.empty() ? "--steps 6 --ckpt-every 2" : "--steps 6 --ckpt-every 2 --zero 1";
        const fs::path a = tmp / "sync", b = tmp / "async";
        fs::remove_all(a);
        fs::remove_all(b);
        CmdResult r = sh(mpi + train(a, extra), tmp / "a.txt");
        ASSERT_EQ(r.code, 0) << r.out;
        r = sh(mpi + train(b, extra + " --async-ckpt"), tmp / "b.txt");
        ASSERT_EQ(r.code, 0) << r.out;
        for (const char* c : {"ckpt_00000002", "ckpt_00000004", "ckpt_00000006"}) expect_same_checkpoint(a / c, b / c);
    }
}

TEST_F(AsyncCheckpoint, CkptEverySecondsCheckpointsByTheClock) {
    // every step takes longer than a microsecond (a step of this tiny model takes under a millisecond on
    // a fast CPU): a checkpoint after each
    CmdResult r = sh(train(tmp / "fast", "--steps 4 --ckpt-every-seconds 0.000001"), tmp / "a.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    for (int s = 1; s <= 4; s++) EXPECT_TRUE(fs::exists(tmp / "fast" / ("ckpt_0000000" + std::to_string(s)))) << s;
    // an hour: only the run's last
    r = sh(train(tmp / "slow", "--steps 4 --ckpt-every-seconds 3600 --async-ckpt"), tmp / "b.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_FALSE(fs::exists(tmp / "slow" / "ckpt_00000003"));
    EXPECT_TRUE(fs::exists(tmp / "slow" / "ckpt_00000004"));
    r = sh(train(tmp / "bad", "--steps 4 --ckpt-every-seconds -1"), tmp / "c.txt");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("--ckpt-every-seconds must be >= 0"), std::string::npos) << r.out;
}

TEST_F(AsyncCheckpoint, AKillWhileOneIsWrittenResumesFromThePreviousToTheBit) {
    const fs::path ref = tmp / "ref", run = tmp / "run";
    CmdResult r = sh(train(ref, "--steps 6 --ckpt-every 1"), tmp / "ref.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    // rank 0 is SIGKILLed before step 4 (0-based 3): the checkpoint of step 3 may still be in flight
    r = sh("env SHARDLM_TEST_SIGNAL=0:3:9 " + train(run, "--steps 6 --ckpt-every 1 --async-ckpt"), tmp / "run.txt");
    EXPECT_EQ(r.code, 128 + 9) << r.out;
    r = sh(train(run, "--steps 6 --ckpt-every 1 --async-ckpt --resume"), tmp / "resume.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("resuming from"), std::string::npos) << r.out;
    expect_same_checkpoint(ref / "ckpt_00000006", run / "ckpt_00000006");
}

}  // namespace
