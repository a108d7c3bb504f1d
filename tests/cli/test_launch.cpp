// `shardlm launch` (issue 21, items 1 and 2): a job that loses a rank goes on by itself on the ranks
// left, in a layout that fits them, with the same global batch; its metrics hold every step once;
// and the continuation equals, to the bit, a clean run that resumes the same checkpoint on that layout.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
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

std::string train_flags(const fs::path& out, const std::string& extra, const std::string& data = kFix + "/data.bin") {
    return "--model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " + data +
           " --seq 16 --global-batch 4 --micro-batch 1 --threads 1 --optimizer adamw --lr 3e-3 "
           "--ckpt-every 2 --keep-ckpts 10 --out " + out.string() + " " + extra;
}

// metrics.jsonl holds steps 0 .. n-1, each once, in order
void expect_every_step_once(const fs::path& metrics, int n) {
    const auto rows = jsonl(metrics);
    ASSERT_EQ(rows.size(), size_t(n)) << metrics;
    for (int i = 0; i < n; i++) EXPECT_EQ(rows[size_t(i)]["step"].get<int>(), i) << metrics;
}

class Launch : public shardlm::test::CliTest {
protected:
    // A launch of dp2 in the background, training for long: returned once 5 steps are logged in a.
    pid_t start_long_launch(const fs::path& a) {
        const pid_t pid = shardlm::test::spawn(kBin + " launch -np 2 --oversubscribe -- train " + train_flags(a, "--steps 1000000"),
                                               tmp / "launch.txt");
        shardlm::test::wait_until([&] { return fs::exists(a / "metrics.jsonl") && jsonl(a / "metrics.jsonl").size() >= 5; });
        return pid;
    }
    CmdResult launch(const std::string& env, const std::string& opts, const std::string& train) {
        return sh("timeout -s KILL 300 env " + env + " " + kBin + " launch " + opts + " --oversubscribe -- train " + train,
                  tmp / "launch.txt");
    }
};

TEST_F(Launch, ARankKilledRestartsOnTheRanksLeftAndEqualsACleanResume) {
    const fs::path a = tmp / "a";
    // world rank 1 SIGKILLs itself before step 5 (of the first attempt only)
    // (no checkpoint kept in memory: the restart resumes the disk's; tests/cli/test_memory_checkpoint.cpp has the other)
    const CmdResult r =
        launch("SHARDLM_TEST_SIGNAL=1:5:9", "-np 2 --min-np 1 --max-restarts 2", train_flags(a, "--steps 10 --mem-ckpt-every 0"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("launch: restart 1 of at most 2: world rank 1 on "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("killed by signal 9"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("layout dp2 tp1 pp1 (2 ranks) -> dp1 tp1 pp1 (1 rank), global batch 4 unchanged; resuming from "
                         "ckpt_00000004 (step 4)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("launch: training finished on attempt 2"), std::string::npos) << r.out;
    expect_every_step_once(a / "metrics.jsonl", 10);
    const auto log = jsonl(a / "launch.jsonl");
    std::vector<std::string> events;
    for (const auto& e : log) events.push_back(e["event"]);
    EXPECT_EQ(events, (std::vector<std::string>{"start", "failure", "restart", "start", "done"}));
    EXPECT_EQ(log[2]["new_layout"], "dp1 tp1 pp1");
    EXPECT_EQ(log[2]["old_layout"], "dp2 tp1 pp1");
    EXPECT_EQ(log[2]["resume_step"], 4);
    EXPECT_EQ(log[1]["lost_ranks"], nlohmann::json::array({1}));

    // the clean reference: the same checkpoint resumed on the new layout by a plain run
    const fs::path b = tmp / "b";
    fs::create_directories(b);
    fs::copy(a / "ckpt_00000004", b / "ckpt_00000004", fs::copy_options::recursive);
    const CmdResult c = sh(kBin + " train " + train_flags(b, "--steps 10 --dp 1 --resume"), tmp / "clean.txt");
    ASSERT_EQ(c.code, 0) << c.out;
    for (const char* f : {"model.rank00000-of-00001.safetensors", "optimizer.rank00000-of-00001.safetensors"})
        EXPECT_EQ(shardlm::io::read_file((a / "ckpt_00000010" / f).string()),
                  shardlm::io::read_file((b / "ckpt_00000010" / f).string()))
            << f << " differs from the clean resume's";
    const auto ma = jsonl(a / "metrics.jsonl"), mb = jsonl(b / "metrics.jsonl");
    ASSERT_EQ(mb.size(), 6u);
    for (size_t i = 0; i < 6; i++) EXPECT_EQ(ma[4 + i]["loss"], mb[i]["loss"]) << "step " << 4 + i;
}

TEST_F(Launch, KeepsThePipelineWhenItFitsAndNamesAStalledRank) {
    // dp2 x pp2 on 4 ranks; world rank 3 stalls before step 3: --comm-timeout ends the attempt, the flight
    // records name rank 3, and the 3 ranks left hold one pp2 pipeline (dp1 pp2)
    const fs::path a = tmp / "a";
    const CmdResult r = launch("SHARDLM_TEST_STALL=3:3", "-np 4 --max-restarts 1",
                               train_flags(a, "--steps 6 --pp 2 --comm-timeout 4"));
    ASSERT_EQ(r.code, 0) << r.out;
    // rank 3 among those named: on a loaded machine (the sanitizers' suite runs two tests at once) a rank
    // that only waited can be killed before its record is written, and is then named with it (measured:
    // "world ranks 1,3"); the layout chosen is the same
    EXPECT_TRUE(std::regex_search(r.out, std::regex("the flight records name world ranks? ([0-9]+,)*3(,[0-9]+)* as stalled")))
        << r.out;
    EXPECT_NE(r.out.find("layout dp2 tp1 pp2 (4 ranks) -> dp1 tp1 pp2 (2 ranks)"), std::string::npos) << r.out;
    expect_every_step_once(a / "metrics.jsonl", 6);
    // the failed attempt's records stay beside the next one's, and each attempt's output in its log
    EXPECT_TRUE(fs::exists(a / "flight" / "attempt-1" / "rank0.json"));
    const CmdResult old = sh(kBin + " report --flight " + (a / "flight" / "attempt-1").string(), tmp / "report.txt");
    EXPECT_NE(old.out.find("stalled: world rank"), std::string::npos) << old.out;
    EXPECT_NE(shardlm::io::read_file((a / "launch.attempt-1.log").string()).find("SHARDLM_TEST_STALL: rank 3 stalls"), std::string::npos);
    EXPECT_TRUE(fs::exists(a / "launch.attempt-2.log"));
}

// A stop asked of launch (SIGTERM, or Ctrl-C's SIGINT) reaches the ranks as a request (SIGUSR2 through
// mpirun, which would kill them at once on a SIGTERM): they finish the step and write a checkpoint, launch
// says which, and the same command with --resume goes on from it, every step logged once.
TEST_F(Launch, ASignalToLaunchWritesACheckpoint) {
    const fs::path a = tmp / "a";
    const pid_t pid = start_long_launch(a);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    EXPECT_EQ(shardlm::test::wait_status(pid), 128 + SIGTERM);
    const std::string out = shardlm::io::read_file((tmp / "launch.txt").string());
    const size_t n = jsonl(a / "metrics.jsonl").size();
    char name[32];
    std::snprintf(name, sizeof(name), "ckpt_%08zu", n);
    EXPECT_NE(out.find(std::string("launch: interrupted by SIGTERM: the ranks wrote ") + name + " before stopping"), std::string::npos) << out;
    ASSERT_TRUE(fs::exists(a / name / "meta.json")) << out;
    const CmdResult r = launch("X=1", "-np 2", train_flags(a, "--steps " + std::to_string(n + 2) + " --resume"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("resuming from " + (a / name).string()), std::string::npos) << r.out;
    expect_every_step_once(a / "metrics.jsonl", int(n) + 2);
}

// kill -9 of launch leaves no job training unsupervised: the ranks see their supervisor gone, finish the
// step, write a checkpoint and end; a new launch on the directory waits for them and goes on from it.
TEST_F(Launch, RanksWhoseLaunchIsKilledCheckpointAndStop) {
    const fs::path a = tmp / "a";
    const pid_t pid = start_long_launch(a);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    shardlm::test::wait_status(pid);
    const fs::path first = a / "launch.attempt-1.log";
    shardlm::test::wait_for_text(first, "\ntrained ");  // rank 0's last line, after the checkpoint
    const std::string log = shardlm::io::read_file(first.string());
    EXPECT_NE(log.find("the launch that started this job is gone: finishing this step, then a checkpoint"), std::string::npos) << log;
    EXPECT_NE(log.find("interrupted by the loss of its launch after step"), std::string::npos) << log;
    std::smatch m;
    int k = 0;
    for (const auto& e : fs::directory_iterator(a))
        if (const std::string n = e.path().filename().string(); std::regex_match(n, m, std::regex("ckpt_([0-9]{8})")))
            k = std::max(k, std::stoi(m[1]));
    ASSERT_EQ(size_t(k), jsonl(a / "metrics.jsonl").size()) << log;  // the checkpoint of the last step logged
    const CmdResult r = launch("X=1", "-np 2", train_flags(a, "--steps 1000000 --stop-after " + std::to_string(k + 3) + " --resume"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("(step " + std::to_string(k) + " of 1000000)"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(a / "launch.attempt-2.log"));  // the earlier launch's log kept
    expect_every_step_once(a / "metrics.jsonl", k + 3);
}

// --max-np: the rank lost before step 5 can run again at once on this machine, so at the next checkpoint the
// ranks stop after a checkpoint and the job goes on on 2 ranks again: no step lost by growing, every step
// logged once, growing not counted as a restart.
TEST_F(Launch, GrowsBackToMaxNpAtTheNextCheckpoint) {
    const fs::path a = tmp / "a";
    const std::string flags = "--model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " + kFix +
                              "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 --ckpt-every 100 --steps 4000 --out " +
                              a.string();
    // a node of 2 slots (its name as the hostfile spells it, not as mpirun does): the lost rank's slot counts
    // again once `mpirun --host` runs there, at the next checkpoint
    std::ofstream(tmp / "hosts") << "localhost slots=2\n";
    const CmdResult r = launch("SHARDLM_TEST_SIGNAL=1:5:9", "-np 2 --max-np 2 --max-restarts 1 --hostfile " + (tmp / "hosts").string(), flags);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("layout dp2 tp1 pp1 (2 ranks) -> dp1 tp1 pp1 (1 rank)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("launch: growing back: layout dp1 tp1 pp1 (1 rank) -> dp2 tp1 pp1 (2 ranks), global batch 4 unchanged"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no step lost"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("launch: training finished on attempt 3 (dp2 tp1 pp1), after 1 restart"), std::string::npos) << r.out;
    std::vector<std::string> events;
    for (const auto& e : jsonl(a / "launch.jsonl")) events.push_back(e["event"]);
    EXPECT_EQ(events, (std::vector<std::string>{"start", "failure", "restart", "start", "grow", "start", "done"}));
    expect_every_step_once(a / "metrics.jsonl", 4000);
    // a bad --max-np
    const CmdResult bad = sh(kBin + " launch -np 2 --max-np 1 --oversubscribe -- train " + train_flags(tmp / "b", "--steps 2"), tmp / "u.txt");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("--max-np must be at least -np 2 (got 1)"), std::string::npos) << bad.out;
}

TEST_F(Launch, GivesUpOnFailuresThatAreNotALostRankAndBelowMinNp) {
    // a missing data file fails every attempt the same way: no restart
    const fs::path a = tmp / "a";
    CmdResult r = launch("X=1", "-np 2", train_flags(a, "--steps 4", (tmp / "none.bin").string()));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("launch: giving up: the failure is not a lost rank"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("launch: restart"), std::string::npos) << r.out;
    // --min-np 2: one rank left is not enough
    const fs::path b = tmp / "b";
    r = launch("SHARDLM_TEST_SIGNAL=1:3:9", "-np 2 --min-np 2", train_flags(b, "--steps 6"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("launch: giving up: 1 rank left, below --min-np 2"), std::string::npos) << r.out;
    // usage errors
    r = sh(kBin + " launch -np 3 --oversubscribe -- train " + train_flags(tmp / "c", "--steps 2 --tp 2"), tmp / "u.txt");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("-np 3 does not equal the train command's layout"), std::string::npos) << r.out;
    r = sh(kBin + " launch -np 2 -- train --model tiny --steps 2", tmp / "u.txt");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("the train command has no --out"), std::string::npos) << r.out;
}

}  // namespace
