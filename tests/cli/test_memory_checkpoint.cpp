// Checkpoints kept in memory and on a replica (train/memory_checkpoint.h, --mem-ckpt-every): a restart
// after a lost rank resumes from them, at the step the rank was lost in, to the bit; a lost node's part
// comes from its replica over MPI; a damaged copy is passed over for the disk; a run that ends or starts
// afresh leaves no memory behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::kBin;
using shardlm::test::kFix;
using shardlm::test::jsonl;
using shardlm::test::sh;

// Every file under dir (the stores: <dir>/shardlm-<hash>/<host>/rank<r>/ckpt_<step>/<file>).
std::vector<fs::path> files_under(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
        if (e.is_regular_file()) out.push_back(e.path());
    return out;
}

class MemoryCheckpoint : public shardlm::test::CliTest {
protected:
    // node-local memory of the tests' own (a tmpfs, as the default /dev/shm)
    const fs::path shm = fs::path("/dev/shm") / ("shardlm_test_" + std::to_string(::getpid()));
    void TearDown() override {
        fs::remove_all(shm);
        CliTest::TearDown();
    }
    std::string flags(const fs::path& out, const std::string& extra, const fs::path& memory = {}) const {
        return "--model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " + kFix +
               "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 --optimizer adamw --lr 3e-3 "
               "--ckpt-every 4 --keep-ckpts 10 --mem-ckpt-dir " + (memory.empty() ? shm : memory).string() + " --out " +
               out.string() + " " + extra;
    }
    // the same run, uninterrupted, on dp2
    fs::path reference(const std::string& extra) {
        const fs::path ref = tmp / "ref";
        fs::remove_all(ref);
        const CmdResult r = sh(shardlm::test::mpirun(2) + kBin + " train " + flags(ref, extra), tmp / "ref.txt");
        EXPECT_EQ(r.code, 0) << r.out;
        return ref;
    }
};

TEST_F(MemoryCheckpoint, ALostNodesPartComesFromItsReplicaOverMpiToTheBit) {
    // every rank a host of its own; before step 8 world rank 1 deletes its node's memory and dies: the restart
    // (launch --max-np 2: on this machine its CPU is free again) resumes at step 7, rank 1's part from rank 0's store
    for (const std::string zero : {"0", "1"}) {
        SCOPED_TRACE("ZeRO-" + zero);
        const std::string extra = "--steps 10 --zero " + zero;
        const fs::path ref = reference(extra), a = tmp / ("a" + zero);
        const CmdResult r = sh("env SHARDLM_MEM_CKPT_HOSTS=per-rank SHARDLM_TEST_LOSE_NODE=1:7 timeout -s KILL 300 " + kBin +
                                   " launch -np 2 --max-np 2 --oversubscribe -- train " + flags(a, extra),
                               tmp / "launch.txt");
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_NE(r.out.find("layout dp2 tp1 pp1 (2 ranks) -> dp2 tp1 pp1 (2 ranks), global batch 4 unchanged; resuming from "
                             "the checkpoint kept in memory (step 7), 0 steps lost"),
                  std::string::npos) << r.out;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(r.out, m, std::regex("resuming from memory: step 7 of 10 \\(([0-9.]+) MB from the hosts' own "
                                                           "memory, ([0-9.]+) MB over MPI from other hosts; newest on disk: ckpt_00000004\\)")))
            << r.out;
        EXPECT_GT(std::stod(m[2]), 0.0) << "rank 1's host held nothing: its files came over MPI";
        const auto log = jsonl(a / "launch.jsonl");
        ASSERT_GE(log.size(), 3u);
        EXPECT_EQ(log[2]["event"], "restart");
        EXPECT_EQ(log[2]["resume_from"], "memory");
        EXPECT_EQ(log[2]["steps_lost"], 0);
        // the continuation is the uninterrupted run's, to the bit
        for (const char* f : {"model.rank00000-of-00002.safetensors", "optimizer.rank00001-of-00002.safetensors"})
            EXPECT_EQ(shardlm::io::read_file((a / "ckpt_00000010" / f).string()), shardlm::io::read_file((ref / "ckpt_00000010" / f).string()))
                << f;
        const auto ma = jsonl(a / "metrics.jsonl"), mr = jsonl(ref / "metrics.jsonl");
        ASSERT_EQ(ma.size(), 10u);
        for (size_t i = 0; i < 10; i++) {
            EXPECT_EQ(ma[i]["step"], int(i));
            EXPECT_EQ(ma[i]["loss"], mr[i]["loss"]) << "step " << i;
        }
        // the run ended well: no memory left behind
        EXPECT_TRUE(files_under(shm).empty());
    }
}

TEST_F(MemoryCheckpoint, AResumeTakesTheNewerMemoryCopyAndPassesOverADamagedOne) {
    const fs::path a = tmp / "a";
    // one process killed before step 7: the disk holds step 4, memory step 6
    CmdResult r = sh("env SHARDLM_TEST_SIGNAL=0:6:9 " + kBin + " train " + flags(a, "--steps 10 --mem-ckpt-every 1"), tmp / "1.txt");
    ASSERT_EQ(r.code, 137) << r.out;
    const std::string resumed = kBin + " train " + flags(a, "--steps 10 --mem-ckpt-every 1 --resume");
    r = sh("env SHARDLM_TEST_SIGNAL=0:8:9 " + resumed, tmp / "2.txt");
    ASSERT_EQ(r.code, 137) << r.out;
    EXPECT_NE(r.out.find("resuming from memory: step 6 of 10"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("newest on disk: ckpt_00000004"), std::string::npos) << r.out;
    // memory now holds step 8, the disk step 8 too (the disk's is taken: memory is read only when it is newer)
    r = sh("env SHARDLM_TEST_SIGNAL=0:9:9 " + resumed, tmp / "3.txt");
    ASSERT_EQ(r.code, 137) << r.out;
    EXPECT_NE(r.out.find("resuming from " + (a / "ckpt_00000008").string()), std::string::npos) << r.out;
    // step 9 in memory only; damage it: the disk's is taken
    bool damaged = false;
    for (const fs::path& f : files_under(shm))
        if (f.filename() == "model.rank00000-of-00001.safetensors") {
            std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
            io.seekp(-4, std::ios::end);
            io.write("\x7f\x7f\x7f\x7f", 4);
            damaged = true;
        }
    ASSERT_TRUE(damaged) << "no model file in " << shm;
    r = sh(resumed, tmp / "4.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("warning: the checkpoint of step 9 kept in memory cannot be read \\(.*checksum mismatch\\): reading the disk")))
        << r.out;
    EXPECT_NE(r.out.find("resuming from " + (a / "ckpt_00000008").string()), std::string::npos) << r.out;
    for (size_t i = 0; const auto& row : jsonl(a / "metrics.jsonl")) EXPECT_EQ(row["step"], int(i++));
    EXPECT_TRUE(files_under(shm).empty()) << "the finished run left its memory";
    // a fresh start clears what a killed run left
    r = sh("env SHARDLM_TEST_SIGNAL=0:3:9 " + kBin + " train " + flags(tmp / "b", "--steps 10 --mem-ckpt-every 1"), tmp / "5.txt");
    ASSERT_EQ(r.code, 137) << r.out;
    ASSERT_FALSE(files_under(shm).empty());
    r = sh(kBin + " train " + flags(tmp / "b", "--steps 10 --overwrite"), tmp / "6.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(files_under(shm).empty());
}

TEST_F(MemoryCheckpoint, MemoryThatCannotHoldThemIsSaidOnceAndTheRunGoesOn) {
    // a --mem-ckpt-dir under a file: no store can be written (as with a full tmpfs)
    std::ofstream(tmp / "file") << "x";
    const CmdResult r = sh(shardlm::test::mpirun(2) + kBin + " train " + flags(tmp / "a", "--steps 6 --mem-ckpt-every 1", tmp / "file" / "shm"),
                           tmp / "1.txt");
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string said = "warning: the checkpoint of step 1 could not be kept in memory (";
    ASSERT_NE(r.out.find(said), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(said, r.out.find(said) + 1), std::string::npos) << "said more than once:\n" << r.out;
    EXPECT_NE(r.out.find("---> HINT: free the memory of --mem-ckpt-dir"), std::string::npos) << r.out;
    EXPECT_EQ(jsonl(tmp / "a" / "metrics.jsonl").size(), 6u);
}

}  // namespace
