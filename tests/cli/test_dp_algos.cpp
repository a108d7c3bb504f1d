// --dp-algo through the binary (parallel/dp_algo.h, issue 23): every algorithm trains on four
// data-parallel ranks and composed with pipeline stages (and, where replicas differ, tensor
// parallelism), equal to the same algorithm on the same data-parallel ranks without them; bytes_sent
// in every metrics row equals the algorithm's formula (--comm-report); the limits where an algorithm is
// another one (local SGD with H = 1 and plain SGD, top-k of every element, gossip on two ranks) equal
// it; every algorithm resumes to the bit in its layout (each rank's replica and buffers saved) and
// starts its per-rank state afresh in another; the refused combinations say why.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace shardlm::test;

struct Algo {
    const char* name;
    const char* flags;
    bool differ;      // replicas differ: consensus is measured
    bool has_state;   // keeps per-rank state in checkpoints (replicas, error feedback, PowerSGD's Q)
    // composed layouts against dp2 (losses): 16-bit sums on the wire round along the ring in an order
    // that depends on the buffer's length, which pipeline stages cut
    double compose_rel = 1e-5;
};

const Algo kAlgos[] = {
    {"allreduce", "--dp-algo allreduce", false, false},
    {"local_sgd", "--dp-algo local-sgd --local-steps 3", true, true},
    {"diloco", "--dp-algo diloco --local-steps 3 --outer-lr 0.7 --outer-momentum 0.9", true, true},
    {"diloco_bf16", "--dp-algo diloco --local-steps 2 --outer-dtype bf16 --average-optimizer", true, true, 3e-3},
    {"gossip_ring", "--dp-algo gossip --topology ring", true, true},
    {"gossip_one_peer", "--dp-algo gossip --topology one-peer-exp --global-avg-every 4", true, true},
    {"gossip_torus", "--dp-algo gossip --topology torus", true, true},
    {"topk_ef", "--dp-algo compressed --compress topk:0.05 --error-feedback ef", false, true},
    {"randk_auto", "--dp-algo compressed --compress randk:0.25", false, false},  // auto: no error feedback (unbiased)
    {"qsgd", "--dp-algo compressed --compress qsgd:8 --error-feedback none", false, false},
    {"sign_ef21", "--dp-algo compressed --compress sign --error-feedback ef21", false, true},
    {"sign_vote", "--dp-algo compressed --compress sign:vote --error-feedback ef", false, true},
    {"powersgd", "--dp-algo compressed --compress powersgd:2 --error-feedback ef", false, true},
    // the vocabulary's matrices by a compressor of their own; PowerSGD's factors in bf16 on the wire
    {"powersgd_vocab_bf16", "--dp-algo compressed --compress powersgd:2 --compress-embedding powersgd:1 --compress-dtype bf16",
     false, true, 3e-3},
    {"topk_vocab_sign", "--dp-algo compressed --compress topk:0.05 --compress-embedding sign --error-feedback ef", false, true},
    // Deep Gradient Compression: each rank's momentum accumulated with the error (a per-rank buffer more)
    {"topk_dgc", "--dp-algo compressed --compress topk:0.05 --error-feedback ef --momentum-correction 0.9 --beta1 0", false,
     true},
};

// The e2e fixture model, G = 8 rows of T = 16, micro-batch 1.
std::string train(const std::string& extra, const std::string& lr = "0.003") {
    return kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --data-order sequential --seq 16" +
           " --global-batch 8 --micro-batch 1 --lr " + lr + " --threads 1 --bucket-mb 0.05 " + extra;
}

class DpAlgos : public CliTest, public ::testing::WithParamInterface<Algo> {
protected:
    CmdResult run(const std::string& cmd, const std::string& name) {
        CmdResult r = sh(cmd, tmp / (name + ".log"));
        EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
        return r;
    }
};

// Losses of two runs equal to rel (relative), every step; with norms the gradient norms too (not across
// algorithms: where replicas differ the norm logged is the root mean square of the replicas' own).
void same_losses(const fs::path& a, const fs::path& b, double rel, const std::string& what, bool norms = true) {
    if (norms) return expect_same_losses(a, b, 0, what, rel, false);
    const auto ma = metrics(a), mb = metrics(b);
    ASSERT_EQ(ma.size(), mb.size()) << what;
    for (size_t i = 0; i < ma.size(); i++) {
        const double x = ma[i]["loss"], y = mb[i]["loss"];
        EXPECT_NEAR(x, y, rel * std::fabs(x)) << what << ", step " << i;
    }
}

TEST_P(DpAlgos, TrainsOnFourRanksAndComposes) {
    const Algo a = GetParam();
    const fs::path d4 = tmp / "dp4", d2 = tmp / "dp2", pp = tmp / "dp2pp2", tp = tmp / "dp2tp2", ar = tmp / "allreduce";
    const CmdResult r4 = run(mpirun(4) + train(std::string(a.flags) + " --steps 6 --comm-report --out " + d4.string()), "dp4");
    run(mpirun(4) + train("--steps 1 --out " + ar.string()), "allreduce");
    const std::vector<nlohmann::json> rows = metrics(d4);
    ASSERT_EQ(rows.size(), 6u);
    for (const nlohmann::json& row : rows) {
        ASSERT_TRUE(row.contains("bytes_sent") && row["bytes_sent"].is_number_integer()) << row.dump();
        EXPECT_EQ(row.contains("consensus"), a.differ) << row.dump();
        EXPECT_TRUE(std::isfinite(row["loss"].get<double>())) << row.dump();
    }
    EXPECT_LT(rows.back()["loss"].get<double>(), rows.front()["loss"].get<double>());
    // the logged loss is the mean over every rank's rows: at step 0 every replica holds the initial model
    EXPECT_NEAR(rows[0]["loss"].get<double>(), metrics(ar)[0]["loss"].get<double>(), 1e-9);
    // the last step's bytes, counted and by the algorithm's formula (rank 0's report)
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r4.out, m, std::regex("\n  dp +[a-z_-]+ +calls +\\d+ +sent +(\\d+) +theory +(\\d+)")))
        << r4.out;
    EXPECT_EQ(m[1].str(), m[2].str()) << r4.out;
    EXPECT_EQ(std::to_string(rows.back()["bytes_sent"].get<uint64_t>()), m[1].str());
    // composed: pipeline stages (and tensor parallelism where replicas differ: it splits no compressed
    // tensor then) change nothing the algorithm sees
    run(mpirun(2) + train(std::string(a.flags) + " --steps 6 --out " + d2.string()), "dp2");
    run(mpirun(4) + train(std::string(a.flags) + " --steps 6 --pp 2 --check-replicas 1 --out " + pp.string()), "dp2pp2");
    same_losses(d2, pp, a.compose_rel, std::string(a.name) + ": dp2 x pp2 against dp2");
    if (a.differ) {
        run(mpirun(4) + train(std::string(a.flags) + " --steps 6 --tp 2 --check-replicas 1 --out " + tp.string()), "dp2tp2");
        same_losses(d2, tp, a.compose_rel, std::string(a.name) + ": dp2 x tp2 against dp2");
    }
}

// A checkpoint at step 3 resumed in the same layout continues to the bit (each rank's replica,
// optimiser state and error-feedback buffers are in its state file); resumed on another number of
// ranks, the per-rank state starts afresh from the checkpoint's model, and says so.
TEST_P(DpAlgos, ResumesToTheBit) {
    const Algo a = GetParam();
    const fs::path whole = tmp / "whole", part = tmp / "part", other = tmp / "other";
    run(mpirun(4) + train(std::string(a.flags) + " --steps 6 --out " + whole.string()), "whole");
    run(mpirun(4) + train(std::string(a.flags) + " --steps 3 --out " + part.string()), "part3");
    fs::copy(part, other, fs::copy_options::recursive);
    run(mpirun(4) + train(std::string(a.flags) + " --steps 6 --resume --out " + part.string()), "part6");
    same_losses(whole, part, 0.0, std::string(a.name) + ": resumed at step 3");
    for (int r = 0; r < 4; r++) {
        char f[64];
        std::snprintf(f, sizeof(f), "model.rank%05d-of-%05d.safetensors", r, 4);
        EXPECT_EQ(shardlm::io::read_file((whole / "ckpt_00000006" / f).string()),
                  shardlm::io::read_file((part / "ckpt_00000006" / f).string()))
            << a.name << ": " << f;
    }
    const CmdResult o = run(mpirun(2) + train(std::string(a.flags) + " --steps 6 --resume --out " + other.string()), "other");
    EXPECT_EQ(o.out.find("starts afresh") != std::string::npos, a.has_state) << o.out;
}

INSTANTIATE_TEST_SUITE_P(All, DpAlgos, ::testing::ValuesIn(kAlgos), [](const auto& info) { return std::string(info.param.name); });

// Where an algorithm is another: local SGD averaging after every plain SGD step is the all-reduce's
// step (the average of x - lr g_i is x - lr mean g_i); top-k of every element without error feedback
// is the mean of the gradients; gossip on two ranks mixes with 1/2 each, the average. Equal up to the
// order of the sums.
TEST_F(DpAlgos, LimitsEqualTheAlgorithmsTheyBecome) {
    auto run_to = [&](const std::string& flags, const std::string& name, int np) {
        const bool sgd = flags.find("--optimizer sgd") != std::string::npos;
        const CmdResult r = sh(mpirun(np) + train(flags + " --steps 8 --out " + (tmp / name).string(), sgd ? "0.5" : "0.003"),
                               tmp / (name + ".log"));
        EXPECT_EQ(r.code, 0) << r.out;
        return tmp / name;
    };
    const fs::path ar = run_to("--optimizer sgd", "ar", 4);
    const fs::path local = run_to("--optimizer sgd --dp-algo local-sgd --local-steps 1", "local", 4);
    same_losses(ar, local, 1e-5, "local SGD, H = 1, against all-reduce", false);
    expect_same_params(ar / "ckpt_00000008", local / "ckpt_00000008", "local SGD, H = 1", 1e-5f);
    const fs::path ar_adam = run_to("", "ar_adam", 4);
    const fs::path topk = run_to("--dp-algo compressed --compress topk:1 --error-feedback none", "topk", 4);
    same_losses(ar_adam, topk, 1e-5, "top-k of every element against all-reduce");
    // DGC's momentum factor masking: what is sent leaves the momentum, so with every element sent the momentum
    // never builds up and the exchange is the all-reduce's
    const fs::path dgc = run_to("--dp-algo compressed --compress topk:1 --error-feedback ef --momentum-correction 0.9",
                                "dgc", 4);
    same_losses(ar_adam, dgc, 1e-5, "top-k of every element with momentum correction against all-reduce");
    const fs::path local2 = run_to("--dp-algo local-sgd --local-steps 1", "local2", 2);
    const fs::path gossip2 = run_to("--dp-algo gossip --topology ring", "gossip2", 2);
    same_losses(local2, gossip2, 1e-6, "gossip on two ranks against averaging every step", false);
    // and the averaging algorithms measure a consensus of 0 right after they average
    for (const nlohmann::json& row : metrics(local2)) EXPECT_LE(row["consensus"].get<double>(), 1e-7) << row.dump();
}

TEST_F(DpAlgos, RefusedCombinationsSayWhy) {
    const struct {
        const char* flags;
        const char* says;
    } cases[] = {
        {"--dp-algo local-sgd --zero 1", "shards one replica"},
        {"--dp-algo gossip --zero 2", "shards one replica"},
        {"--dp-algo compressed --compress topk:0.01 --zero 2", "need its whole gradient"},
        {"--dp-algo compressed", "--dp-algo compressed needs --compress"},
        {"--compress topk:0.01", "applies to --dp-algo compressed"},
        {"--dp-algo compressed --compress topk:2", "--compress"},
        {"--dp-algo compressed --compress powersgd:2 --error-feedback ef21", "ef21"},
        {"--dp-algo local-sgd --optimizer sophia", "Hessian pass"},
        {"--dp-algo local-sgd --local-steps 0", "--local-steps must be >= 1"},
        {"--dp-algo gossip --topology star", "star"},
        {"--dp-algo compressed --compress randk:0.01 --error-feedback ef", "not contractive"},
        {"--dp-algo compressed --compress qsgd:8 --error-feedback ef21", "not contractive"},
        {"--dp-algo compressed --compress sign:vote --error-feedback ef21", "majority vote is not their mean"},
        {"--dp-algo compressed --compress powersgd:2 --compress-embedding topk:0.01", "PowerSGD all-reduces its factors"},
        {"--dp-algo compressed --compress topk:0.01 --compress-embedding powersgd:1", "one exchange serves one family"},
        {"--dp-algo compressed --compress topk:0.01 --compress-dtype bf16", "take a wire type"},
        {"--dp-algo local-sgd --compress-embedding powersgd:1", "apply to --dp-algo compressed"},
        {"--dp-algo compressed --compress topk:0.01 --compress-embedding qsgd:8", "(auto: --compress is biased)"},
        {"--dp-algo compressed --compress powersgd:2 --compress-embedding powersgd:0", "--compress"},
        {"--dp-algo compressed --compress sign --momentum-correction 0.9", "needs top-k on every tensor"},
        {"--dp-algo compressed --compress topk:0.01 --compress-embedding none --momentum-correction 0.9",
         "needs top-k on every tensor"},
        {"--dp-algo compressed --compress topk:0.01 --error-feedback ef21 --momentum-correction 0.9", "error feedback ef"},
        {"--dp-algo local-sgd --momentum-correction 0.9", "applies to --dp-algo compressed"},
        {"--dp-algo compressed --compress topk:0.01 --momentum-correction 1", "must be in [0, 1)"},
    };
    for (const auto& c : cases) {
        const CmdResult r = sh(train(std::string(c.flags) + " --steps 1"), tmp / "refused.log");
        EXPECT_NE(r.code, 0) << c.flags;
        EXPECT_NE(r.out.find(c.says), std::string::npos) << c.flags << "\n" << r.out;
    }
}

}  // namespace
