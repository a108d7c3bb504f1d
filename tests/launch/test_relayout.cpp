// The layout a job continues on after it lost ranks (launch/relayout.h), the train flags of the next
// attempt, and what a failed attempt's output says (launch/supervisor.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <unistd.h>

#include "shardlm/launch/hosts.h"
#include "shardlm/launch/relayout.h"
#include "shardlm/launch/supervisor.h"

namespace {

using namespace shardlm;
using launch::Layout;

train::TrainConfig job(int G, int micro, int tp, int pp) {
    train::TrainConfig c;
    c.model.preset = "gpt2";
    c.data.train = "tokens.bin";
    c.data.seq = 64;
    c.data.global_batch = G;
    c.data.micro_batch = micro;
    c.parallel.tp = tp;
    c.parallel.pp = pp;
    return c;
}

model::GptConfig gpt2_small() {
    model::GptConfig m;
    m.n_layer = 12, m.n_head = 12, m.n_embd = 768, m.vocab_size = 50257, m.n_ctx = 1024;
    return m;
}

std::string layout_for(const train::TrainConfig& c, int ranks, double mem = 0) {
    std::string why;
    const auto l = launch::choose_layout(c, gpt2_small(), ranks, mem, &why);
    return l ? launch::describe(*l) : "none: " + why;
}

TEST(Relayout, KeepsTpTimesPpWhenItFitsAndTheLargestDpThatDividesTheBatch) {
    EXPECT_EQ(layout_for(job(16, 2, 1, 2), 3), "dp1 tp1 pp2");   // 3 ranks: pp2 twice does not fit
    EXPECT_EQ(layout_for(job(16, 2, 2, 1), 7), "dp2 tp2 pp1");   // dp3 does not divide 8 micro-batches
    EXPECT_EQ(layout_for(job(16, 1, 1, 1), 5), "dp4 tp1 pp1");
    EXPECT_EQ(layout_for(job(12, 1, 1, 1), 5), "dp4 tp1 pp1");   // 12 micro-batches: dp 4 divides, 5 does not
    EXPECT_EQ(layout_for(job(12, 2, 1, 1), 5), "dp3 tp1 pp1");   // 6 micro-batches
    EXPECT_EQ(layout_for(job(8, 1, 2, 2), 4), "dp1 tp2 pp2");
}

TEST(Relayout, ShrinksTpOrPpWhenTheRanksLeftCannotHoldThem) {
    // tp2 x pp2 on 3 ranks: the nearest that fits uses tp2 or pp2 (distance 1), the most ranks first
    const std::string l = layout_for(job(8, 1, 2, 2), 3);
    EXPECT_TRUE(l == "dp1 tp2 pp1" || l == "dp1 tp1 pp2") << l;
    EXPECT_EQ(layout_for(job(8, 1, 1, 4), 2), "dp1 tp1 pp2");
    EXPECT_EQ(layout_for(job(8, 1, 2, 1), 1), "dp1 tp1 pp1");
}

TEST(Relayout, RefusesWhenTheModelDoesNotFitInMemory) {
    // GPT-2 124M with Adam needs ~2 GB of states in one process: 1 GB is not enough, 64 GB is
    EXPECT_EQ(layout_for(job(8, 1, 1, 1), 1, 64e9), "dp1 tp1 pp1");
    const std::string none = layout_for(job(8, 1, 1, 1), 1, 1e9);
    EXPECT_EQ(none.rfind("none: ", 0), 0u) << none;
    EXPECT_NE(none.find("memory"), std::string::npos) << none;
}

TEST(NextTrainArgs, SetsTheLayoutResumesAndNeverOverwrites) {
    const std::vector<std::string> a = {"--model", "gpt2", "--dp", "4", "--pp=2", "--pp-split", "6,6", "--overwrite",
                                        "--out", "R", "--sequence-parallel", "--tp", "1"};
    const std::vector<std::string> same_pp = launch::next_train_args(a, Layout{1, 1, 2}, false);
    const std::vector<std::string> want = {"--model", "gpt2", "--pp-split", "6,6", "--out", "R", "--sequence-parallel",
                                           "--dp", "1", "--tp", "1", "--pp", "2", "--resume"};
    EXPECT_EQ(same_pp, want);
    const std::vector<std::string> new_pp = launch::next_train_args(a, Layout{2, 1, 1}, true);
    const std::vector<std::string> want2 = {"--model", "gpt2", "--out", "R", "--sequence-parallel",
                                            "--dp", "2", "--tp", "1", "--pp", "1", "--resume"};
    EXPECT_EQ(new_pp, want2);
}

TEST(Diagnose, NamesAKilledRankATimeoutAndOtherFailures) {
    const launch::Failure k = launch::diagnose(
        "...\nmpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).\n", "");
    EXPECT_TRUE(k.rank_lost);
    EXPECT_EQ(k.lost, std::vector<int>{2});
    EXPECT_EQ(k.reason, "world rank 2 on vm was killed by signal 9 (Killed)");
    // SIGTERM is how mpirun ends the other ranks: not a loss
    const launch::Failure t = launch::diagnose("process rank 0 with PID 1 on node vm exited on signal 15 (Terminated)\n"
                                               "shardlm: error (rank 0 of 2): no such file\n", "");
    EXPECT_FALSE(t.rank_lost);
    EXPECT_EQ(t.reason, "error: no such file");
    const launch::Failure h = launch::diagnose("shardlm: error (rank 0 of 2): all_reduce did not finish within --comm-timeout 3 s", "");
    EXPECT_TRUE(h.rank_lost);
    EXPECT_NE(h.reason.find("--comm-timeout"), std::string::npos);
}

}  // namespace

namespace {

TEST(ShrinkHostfile, OneSlotFewerOnTheLostRanksNode) {
    const std::string h = "# cluster\nnode1 slots=4\nnode2 slots=2 max_slots=2\nnode3\n";
    EXPECT_EQ(shardlm::launch::shrink_hostfile(h, {"node1"}), "# cluster\nnode1 slots=3\nnode2 slots=2 max_slots=2\nnode3\n");
    EXPECT_EQ(shardlm::launch::shrink_hostfile(h, {"node2", "node2"}), "# cluster\nnode1 slots=4\nnode3\n");
    EXPECT_EQ(shardlm::launch::shrink_hostfile(h, {"node3"}), "# cluster\nnode1 slots=4\nnode2 slots=2 max_slots=2\n");
    EXPECT_EQ(shardlm::launch::shrink_hostfile(h, {"elsewhere"}), h);
}

}  // namespace

namespace {

// mpirun names this machine by its host name; a hostfile may say localhost, a loopback address or the
// host name with a domain: the lost slot comes off that line all the same. Other nodes by their first
// label ("node7" is "node7.cluster.example").
TEST(ShrinkHostfile, FindsTheNodeHoweverTheHostfileSpellsIt) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    const std::string me = host;
    for (const std::string& spelt : {std::string("localhost"), std::string("127.0.0.1"), me, me + ".example.org"}) {
        SCOPED_TRACE(spelt);
        EXPECT_EQ(shardlm::launch::shrink_hostfile(spelt + " slots=3\nnode2 slots=2\n", {me}), spelt + " slots=2\nnode2 slots=2\n");
        EXPECT_EQ(shardlm::launch::shrink_hostfile(spelt + "\nnode2\n", {me}), "node2\n");
    }
    EXPECT_EQ(shardlm::launch::shrink_hostfile("node7.cluster.example slots=4\n", {"node7"}), "node7.cluster.example slots=3\n");
    EXPECT_EQ(shardlm::launch::shrink_hostfile("node7 slots=4\n", {"NODE7.cluster.example"}), "node7 slots=3\n");
    EXPECT_EQ(shardlm::launch::shrink_hostfile("node8 slots=4\n", {"node7"}), "node8 slots=4\n");
    EXPECT_TRUE(shardlm::launch::same_host("localhost", me));
    EXPECT_FALSE(shardlm::launch::same_host("node8", "node7"));
}

}  // namespace
