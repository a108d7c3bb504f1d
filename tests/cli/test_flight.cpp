// The flight recorder (issue 21, item 4): when a job hangs, every rank's record of its last
// communication operations says which rank did not enter which one. A probe job (tests/flight/
// flight_probe.cpp) stalls a rank before each kind of operation, or runs mismatched collectives;
// `shardlm report --flight DIR` must name the rank and the operation. And a training run that a
// stalled rank ends with --comm-timeout leaves records that name the stalled rank.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::sh;

// A file's bytes, "" if it cannot be read (a /proc entry of a process that just ended).
std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Flight : public shardlm::test::CliTest {
protected:
    CmdResult job(const std::string& cmd) { return sh("timeout -s KILL 120 " + cmd, tmp / "log.txt"); }
    CmdResult report(const fs::path& dir) { return sh(shardlm::test::kBin + " report --flight " + dir.string(), tmp / "report.txt"); }
    CmdResult probe(const std::string& kind, const std::string& mode, const fs::path& dir) {
        return job(shardlm::test::mpirun(2) + SHARDLM_FLIGHT_PROBE + " " + kind + " " + mode + " " + dir.string());
    }
};

TEST_F(Flight, NamesTheRankThatDidNotEnterEachKindOfOperation) {
    for (const std::string kind : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"}) {
        const fs::path dir = tmp / ("stall_" + kind);
        const CmdResult r = probe(kind, "stall", dir);
        EXPECT_NE(r.code, 0) << kind << "\n" << r.out;
        const CmdResult a = report(dir);
        ASSERT_EQ(a.code, 0) << kind << "\n" << a.out << r.out;
        EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << kind << "\n" << a.out;
        EXPECT_NE(a.out.find("world rank 1 did not enter " + kind + " #3"), std::string::npos) << kind << "\n" << a.out;
        EXPECT_NE(a.out.find("on group 'probe' (world ranks 0,1)"), std::string::npos) << a.out;
        EXPECT_NE(a.out.find("its last collective there was " + kind + " #2"), std::string::npos) << a.out;
        EXPECT_NE(a.out.find("world rank 0: failed after"), std::string::npos) << a.out;
    }
    // point-to-point: rank 0 waits in a recv whose send rank 1 never posts
    const CmdResult r = probe("send_recv", "stall", tmp / "stall_p2p");
    EXPECT_NE(r.code, 0) << r.out;
    const CmdResult a = report(tmp / "stall_p2p");
    EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("world rank 1 did not post the send #3 to world rank 0 (1024 bytes, tag 7)"), std::string::npos)
        << a.out;
}

TEST_F(Flight, NamesMismatchedCollectives) {
    for (const std::string kind : {"all_reduce", "all_gather", "broadcast"}) {
        const fs::path dir = tmp / ("mismatch_" + kind);
        probe(kind, "mismatch", dir);
        const CmdResult a = report(dir);
        ASSERT_EQ(a.code, 0) << a.out;
        EXPECT_NE(a.out.find("MISMATCH on group 'probe' (world ranks 0,1) at collective #3:"), std::string::npos) << a.out;
        const std::string other = kind == "all_gather" ? "all_reduce" : "all_gather";
        EXPECT_NE(a.out.find("world rank 0 issued " + kind + " #3"), std::string::npos) << a.out;
        EXPECT_NE(a.out.find("world rank 1 issued " + other + " #3"), std::string::npos) << a.out;
    }
}

TEST_F(Flight, NamesTheRankOutsideCommunicationWhenItsWaitingPeersLeftNoRecord) {
    // The records a dp2 x pp2 run left when world rank 3 stalled on a loaded machine: rank 0 failed in
    // its dp all-reduce with rank 1; ranks 1 and 2 (waiting for rank 3) were killed before they wrote
    // a record; rank 3's record (SIGTERM) shows it outside communication. Rank 3 stalled, not rank 1.
    const fs::path dir = tmp / "records";
    fs::create_directories(dir);
    using nlohmann::json;
    auto op = [](int group, int seq, const std::string& state, double t, json p2p = json::object()) {
        json o = {{"id", seq},  {"group", group},   {"seq", seq}, {"op", p2p.empty() ? "all_reduce" : "send_recv"},
                  {"bytes", 1024}, {"state", state}, {"t_issue", t}, {"t_start", t}, {"t_end", 0}};
        o.update(p2p);
        return o;
    };
    auto write = [&](int rank, const std::string& reason, const json& groups, const json& ops) {
        std::ofstream(dir / ("rank" + std::to_string(rank) + ".json"))
            << json{{"flight_record", 1}, {"world_rank", rank}, {"pid", 1},      {"host", "h"},       {"reason", reason},
                    {"now", 20.0},         {"unix_time", 0},     {"groups", groups}, {"ops", ops}};
    };
    auto group = [](const char* name, int a, int b) { return json{{"name", name}, {"members", {a, b}}}; };
    write(0, "all_reduce on group 'dp' did not finish within --comm-timeout 4 s", {group("dp", 0, 1), group("pp", 0, 2)},
          {op(0, 0, "done", 1), op(1, 0, "done", 2, {{"peer", 2}, {"tag", 1}, {"dir", "send"}}), op(0, 1, "failed", 15)});
    write(3, "SIGTERM", {group("dp", 2, 3), group("pp", 1, 3)},
          {op(0, 0, "done", 1), op(1, 0, "done", 2, {{"peer", 1}, {"tag", 1}, {"dir", "recv"}}), op(0, 1, "done", 3)});
    const CmdResult a = report(dir);
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_NE(a.out.find("stalled: world rank 3\n"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("world rank 1 left no flight record"), std::string::npos) << a.out;
    // with rank 3's record gone too, the rank that left none is all the records can name
    fs::remove(dir / "rank3.json");
    const CmdResult b = report(dir);
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_NE(b.out.find("stalled: world rank 1\n"), std::string::npos) << b.out;

    // The records the same layout left once under the sanitizers: ranks 0 and 2 failed in their dp
    // all-reduces (with ranks 1 and 3), rank 3 was killed before it wrote a record, and rank 1 (its
    // pipeline peer, slowed by the load) wrote one mid-step, outside communication but active 0.2 s
    // before its dump. Rank 1 is working, not stalled: the rank that left no record is named.
    fs::remove_all(dir);
    fs::create_directories(dir);
    write(0, "all_reduce on group 'dp' did not finish within --comm-timeout 4 s", {group("dp", 0, 1), group("pp", 0, 2)},
          {op(0, 0, "done", 1), op(1, 0, "done", 2, {{"peer", 2}, {"tag", 1}, {"dir", "send"}}), op(0, 1, "failed", 15)});
    write(2, "all_reduce on group 'dp' did not finish within --comm-timeout 4 s", {group("dp", 2, 3), group("pp", 0, 2)},
          {op(0, 0, "done", 1), op(1, 0, "done", 2, {{"peer", 0}, {"tag", 1}, {"dir", "recv"}}), op(0, 1, "failed", 15)});
    auto rank1 = [&](double last) {
        write(1, "SIGTERM", {group("dp", 0, 1), group("pp", 1, 3)},
              {op(0, 0, "done", 1), op(1, 0, "done", last, {{"peer", 3}, {"tag", 1}, {"dir", "send"}})});
    };
    rank1(19.8);
    const CmdResult c = report(dir);
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(c.out.find("stalled: world rank 3\n"), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("world rank 3 left no flight record"), std::string::npos) << c.out;
    // the same records with rank 1 out of communication for 10 s: rank 1 is what they show stalled
    rank1(10);
    const CmdResult d = report(dir);
    ASSERT_EQ(d.code, 0) << d.out;
    EXPECT_NE(d.out.find("stalled: world rank 1\n"), std::string::npos) << d.out;
}

TEST_F(Flight, ATrainingRunEndedByCommTimeoutNamesTheStalledRank) {
    const fs::path out = tmp / "run";
    const CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_STALL=1:2") + shardlm::test::kBin +
                            " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " +
                            shardlm::test::kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 " +
                            "--steps 10 --dp 2 --comm-timeout 3 --out " + out.string());
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("shardlm report --flight " + (out / "flight").string()), std::string::npos) << r.out;
    const CmdResult a = report(out / "flight");
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_NE(a.out.find("flight records of 2 of 2 ranks"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("world rank 1 did not enter all_reduce"), std::string::npos) << a.out;
    // no records: a clear error
    const CmdResult none = report(tmp / "nowhere");
    EXPECT_NE(none.code, 0);
    EXPECT_NE(none.out.find("is not a directory"), std::string::npos) << none.out;
}

// A timeout under ZeRO-1 and ZeRO-3 (whose pending gathers and reduce-scatters are waited for again as the
// stages unwind) ends with the timeout's own message and every rank's record, never in std::terminate.
TEST_F(Flight, ACommTimeoutUnderZeroKeepsItsMessageAndTheRecords) {
    for (const char* zero : {"1", "3"}) {
        const fs::path out = tmp / (std::string("zero") + zero);
        const CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_STALL=1:2") + shardlm::test::kBin +
                                " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " +
                                shardlm::test::kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 " +
                                "--steps 10 --dp 2 --zero " + zero + " --comm-timeout 3 --out " + out.string());
        EXPECT_NE(r.code, 0) << r.out;
        EXPECT_NE(r.out.find("did not finish within --comm-timeout 3 s"), std::string::npos) << zero << "\n" << r.out;
        EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << zero << "\n" << r.out;
        const CmdResult a = report(out / "flight");
        EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << zero << "\n" << a.out;
    }
    // a rank's file that does not read is left out, said so; the others still name the rank
    std::ofstream(tmp / "zero1" / "flight" / "rank7.json") << "{\"world_rank\": 7, \"ops\": [";
    const CmdResult a = report(tmp / "zero1" / "flight");
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_NE(a.out.find("left out rank7.json: "), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << a.out;
}

// A pipeline stage stopped by SIGSTOP, wherever it stood (inside a send or a collective, or computing),
// is the rank named: its own record says it did not run (the watcher's late ticks), and the ranks that
// wait for it write theirs at half the --comm-timeout, before mpirun kills any of them.
TEST_F(Flight, AStoppedPipelineStageIsNamed) {
    for (const char* schedule : {"1f1b", "zb-h1"}) {
        const fs::path out = tmp / schedule;
        const pid_t job = shardlm::test::spawn(
            "timeout -s KILL 120 " + shardlm::test::mpirun(3) + shardlm::test::kBin + " train --model tiny --n-layer 3 --data " +
                shardlm::test::kFix + "/data.bin --seq 16 --global-batch 6 --micro-batch 1 --threads 1 --steps 100000 --pp 3 " +
                "--schedule " + schedule + " --comm-timeout 3 --out " + out.string(),
            tmp / "log.txt");
        shardlm::test::wait_until([&] { return fs::exists(out / "metrics.jsonl") && fs::file_size(out / "metrics.jsonl") > 2000; });
        // world rank 0 of this job: the process whose command names this run and whose environment says rank 0
        pid_t rank0 = 0;
        for (const auto& e : fs::directory_iterator("/proc")) {
            const std::string env = slurp((e.path() / "environ").string());
            const std::string cmd = slurp((e.path() / "cmdline").string());
            if (cmd.rfind(shardlm::test::kBin, 0) == 0 && cmd.find(out.string()) != std::string::npos &&
                env.find(std::string("OMPI_COMM_WORLD_RANK=0") + '\0') != std::string::npos)
                rank0 = std::atoi(e.path().filename().c_str());
        }
        ASSERT_GT(rank0, 0) << schedule;
        ASSERT_EQ(kill(rank0, SIGSTOP), 0);
        std::this_thread::sleep_for(std::chrono::seconds(6));
        kill(rank0, SIGCONT);
        EXPECT_NE(shardlm::test::wait_status(job), 0);
        const CmdResult a = report(out / "flight");
        EXPECT_NE(a.out.find("stalled: world rank 0\n"), std::string::npos) << schedule << "\n" << a.out;
    }
}

// A mixture of experts: the records carry the last step each rank finished and the expert loads after it
// (the metrics row's), so that a hang in an all-to-all reads beside the loads that sized it.
TEST_F(Flight, AnExpertParallelRunsRecordsHoldItsLastStepAndTheExpertLoads) {
    const fs::path out = tmp / "run";
    const CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_STALL=1:2") + shardlm::test::kBin +
                            " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --n-experts 4 "
                            "--top-k 2 --moe-layers 1 --data " + shardlm::test::kFix + "/data.bin --seq 16 --global-batch 4 "
                            "--micro-batch 1 --threads 1 --steps 10 --dp 2 --ep 2 --comm-timeout 3 --out " + out.string());
    EXPECT_NE(r.code, 0) << r.out;
    const CmdResult a = report(out / "flight");
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_NE(a.out.find("last step finished: 2 (world ranks 0,1)\n"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("expert loads after step 2 "), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("  layer 1: "), std::string::npos) << a.out;
    EXPECT_EQ(a.out.find("  layer 0: "), std::string::npos) << a.out;  // a dense layer
    EXPECT_NE(a.out.find("stalled: world rank 1\n"), std::string::npos) << a.out;
    // the loads in each rank's record are those metrics.jsonl holds for step 2
    std::ifstream metrics(out / "metrics.jsonl");
    std::string line, second;
    for (int i = 0; i < 2 && std::getline(metrics, line); i++) second = line;
    const nlohmann::json row = nlohmann::json::parse(second);
    for (const char* rank : {"rank0.json", "rank1.json"}) {
        std::ifstream dump(out / "flight" / rank);
        const nlohmann::json d = nlohmann::json::parse(dump);
        ASSERT_TRUE(d.contains("last_step")) << rank;
        EXPECT_EQ(d["last_step"]["step"], 1) << rank;
        EXPECT_EQ(d["last_step"]["moe_load"], row.at("moe_load")) << rank;
    }
}

TEST_F(Flight, Sigusr1DumpsAndTheRunGoesOn) {
    const fs::path out = tmp / "run";
    // rank 0 raises SIGUSR1 before step 2: it dumps its record and training finishes normally
    const CmdResult r = job(shardlm::test::mpirun(2, "-x SHARDLM_TEST_SIGNAL=0:2:10") + shardlm::test::kBin +
                            " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 --vocab-size 211 --data " +
                            shardlm::test::kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 1 --threads 1 " +
                            "--steps 4 --dp 2 --out " + out.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(fs::exists(out / "flight" / "rank0.json")) << r.out;
    const CmdResult a = report(out / "flight");
    EXPECT_NE(a.out.find("rank 0: SIGUSR1"), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("the records agree"), std::string::npos) << a.out;
}

}  // namespace
