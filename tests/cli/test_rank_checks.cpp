// Ranks that must agree (issue 10): different settings on different ranks end the job at start with
// the differing keys named (instead of a hang or a silent divergence); --check-replicas catches a
// replica that drifted; --comm-timeout ends a job whose rank stalled, naming the operation, the
// group and the rank, instead of hanging.
#include <gtest/gtest.h>
#include <fstream>

#include <chrono>
#include <filesystem>
#include <string>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::sh;

class RankChecks : public shardlm::test::CliTest {
protected:
    // A job that must end: `timeout` turns a hang into a failure instead of a stuck test.
    CmdResult job(const std::string& cmd) { return sh("timeout -s KILL 120 " + cmd, tmp / "log.txt"); }
    static std::string train(const std::string& extra) {
        return shardlm::test::kBin + " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " +
               shardlm::test::kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 " + extra;
    }
};

TEST_F(RankChecks, DifferentSettingsOnDifferentRanksEndTheJob) {
    // mpirun's MPMD form: one rank with each command line
    const std::string np1 = std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 1 ";
    CmdResult r = job(np1 + train("--steps 3") + " : -np 1 " + train("--steps 6"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("the ranks were started with different settings"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rank 1: steps = 6 (rank 0: 3)"), std::string::npos) << r.out;
    r = job(np1 + train("--zero 0 --lr 1e-3") + " : -np 1 " + train("--zero 3 --lr 2e-3"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("rank 1: lr = 0.0020"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("zero = 3 (rank 0: 0)"), std::string::npos) << r.out;
    // the same --data path holding different files on two machines (here: two working directories)
    for (const char* m : {"m0", "m1"}) {
        fs::create_directories(tmp / m);
        fs::copy_file(shardlm::test::kFix + "/data.bin", tmp / m / "data.bin");
    }
    {
        std::fstream f(tmp / "m1" / "data.bin", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-2, std::ios::end);
        f.put('\x01');
    }
    const std::string rel = shardlm::test::kBin + " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 "
                            "--data data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 --steps 2";
    r = job(np1 + "-wdir " + (tmp / "m0").string() + " " + rel + " : -np 1 -wdir " + (tmp / "m1").string() + " " + rel);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("rank 1: data_contents = \"2424 bytes, sample "), std::string::npos) << r.out;
}

TEST_F(RankChecks, CheckReplicasPassesOnHealthyRunsAndCatchesADivergedReplica) {
    for (const char* layout : {"--dp 2 --zero 0", "--dp 2 --zero 1", "--tp 2", "--dp 2 --zero 3"}) {
        const CmdResult r = job(shardlm::test::mpirun(2) + train(std::string("--steps 4 --check-replicas 1 ") + layout));
        EXPECT_EQ(r.code, 0) << layout << "\n" << r.out;
    }
    // rank 1's copy of block 0 moves by 1e-3 after step 3
    CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_POISON=param:2:h.0:1:1e-3") +
                train("--steps 6 --dp 2 --check-replicas 1"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("step 3: --check-replicas: transformer.h.0."), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("differs between data-parallel ranks 0 and 1 (world ranks 0 and 1)"), std::string::npos)
        << r.out;
    // the same on a tensor-parallel replicated tensor (a LayerNorm) after step 4, caught every 2 steps
    r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_POISON=param:3:h.1:1:1e-3") +
            train("--steps 6 --tp 2 --check-replicas 2"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("step 4: --check-replicas: transformer.h.1.ln_1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("differs between tensor-parallel ranks 0 and 1"), std::string::npos) << r.out;
}

TEST_F(RankChecks, StalledRankEndsTheJobNamingTheCollective) {
    // rank 1 stops answering before step 3; rank 0 waits 3 s at most in the step's communication
    const auto t0 = std::chrono::steady_clock::now();
    const CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_STALL=1:2") +
                      train("--steps 10 --dp 2 --comm-timeout 3"));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_LT(s, 60) << r.out;
    EXPECT_NE(r.out.find("did not finish within --comm-timeout 3 s"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("on group '"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(rank 0 of 2, world rank 0)"), std::string::npos) << r.out;
}

}  // namespace
