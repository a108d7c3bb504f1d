// The later optimisers through the binary, in the layouts of data parallelism: for each, ten steps
// of one process against dp=2 under ZeRO-1 and ZeRO-3 (optimiser state, and then also parameters,
// sharded), a checkpoint written by dp=2 ZeRO-2 at step 5 resumed by one process and one written by
// one process resumed by dp=2 ZeRO-1, and a same-layout
// resume that must be bit-exact (the state a checkpoint holds is the state the run continues from).
// Their agreement with the papers' algorithms is tests/train/test_pytorch_reference.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace shardlm::test;

struct Case {
    const char* name;   // test name
    const char* flags;  // the optimiser and its settings
    float rel = 1e-5f;  // ZeRO and resharded runs against one process: losses and parameters
    // Lion, Sophia: the key bias (middle third of c_attn.bias) steps by lr sign(rounding noise), its exact
    // gradient being 0, and so differs with the summation order; it has no effect on the function
    // (softmax is shift-invariant). Compared apart, to 2 lr per step.
    bool sign_of_noise = false;
    // > 0: each tensor's distance between the two runs at most this fraction of the distance it
    // travelled from the initial model, instead of element by element:
    // - adam8bit (kQuantisedApart): the states are rounded to 8-bit codes, and a value that another
    //   summation order moves across a midpoint between two codes rounds to the neighbouring code
    //   (tests/train: Adam8bitReference); a ZeRO slice boundary inside a block also makes two blocks of
    //   it. Measured: at most 0.23%; a rank's state lost or misplaced is tens of percent.
    // - sophia (kSophiaApart): the step m / (rho B h) divides by the Hessian estimate, and where a
    //   gradient cancels to rounding noise (the key weights' directions that softmax's shift-invariance
    //   zeroes) h is that noise squared, so the summation order moves a few elements by ~1e-5.
    //   Measured: 4.6e-5 (tp2), 1e-5 (ZeRO-1); labels drawn with another seed: 0.8% to 40%, every tensor.
    double apart = 0;
};

constexpr double kQuantisedApart = 0.01, kSophiaApart = 1e-3;

constexpr float kLr = 3e-3f;

// The parameters of two checkpoints equal to `rel` of each tensor's largest magnitude (or by distance:
// c.apart); with c.sign_of_noise, the key bias to 2 lr per step.
void expect_same(const Case& c, const fs::path& a, const fs::path& b, const std::string& what, float rel, int steps) {
    if (!c.sign_of_noise && c.apart == 0) return expect_same_params(a, b, what, rel);
    auto pa = checkpoint_params(a), pb = checkpoint_params(b), p0 = checkpoint_params(kFix);
    ASSERT_EQ(pa.size(), pb.size()) << what;
    for (auto& [name, x] : pa) {
        std::vector<float>& y = pb.at(name);
        ASSERT_EQ(x.size(), y.size()) << what << ": " << name;
        if (!c.sign_of_noise || !name.ends_with("attn.c_attn.bias")) continue;
        const size_t C = x.size() / 3;
        for (size_t i = C; i < 2 * C; i++) {
            EXPECT_LE(std::fabs(x[i] - y[i]), 2 * kLr * steps * 1.01f) << what << ": key bias " << name << "[" << i << "]";
            y[i] = x[i];
            p0.at(name)[i] = x[i];
        }
    }
    for (const auto& [name, x] : pa) {
        const std::vector<float>&y = pb.at(name), &x0 = p0.at(name);
        if (c.apart > 0) {
            double d = 0, moved = 0;
            for (size_t i = 0; i < x.size(); i++) {
                d += double(x[i] - y[i]) * (x[i] - y[i]);
                moved += double(x[i] - x0[i]) * (x[i] - x0[i]);
            }
            EXPECT_LE(std::sqrt(d), c.apart * std::sqrt(moved)) << what << ": " << name;
            continue;
        }
        float scale = 0, worst = 0;
        for (size_t i = 0; i < x.size(); i++) {
            scale = std::max(scale, std::fabs(x[i]));
            worst = std::max(worst, std::fabs(x[i] - y[i]));
        }
        EXPECT_LE(worst, rel * scale) << what << ": " << name;
    }
}

// G = 8 rows of T = 16, micro-batch 1 (dp=2: four micro-batches per rank); eps 1e-6 as
// tests/cli/test_data_parallel.cpp explains (for Adafactor, its eps1: with the default 1e-30 a
// gradient of rounding noise takes a whole step of the noise's sign, as Adam's with a tiny eps).
std::string train(const Case& c, const std::string& extra) {
    return kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --data-order sequential --seq 16" +
           " --global-batch 8 --micro-batch 1 --lr " + std::to_string(kLr) + " --weight-decay 0.1 --grad-clip 1.0 --threads 1" +
           " --bucket-mb 0.05 " + c.flags + " " + extra;
}

class Optimizers : public CliTest, public ::testing::WithParamInterface<Case> {
protected:
    void run(const std::string& cmd, const std::string& name) {
        CmdResult r = sh(cmd, tmp / (name + ".log"));
        ASSERT_EQ(r.code, 0) << cmd << "\n" << r.out;
    }
};

TEST_P(Optimizers, ZeroLayoutsAndResumesEqualOneProcess) {
    const Case c = GetParam();
    const fs::path one = tmp / "one", z1 = tmp / "z1", z3 = tmp / "z3", rs = tmp / "reshard", same = tmp / "same";
    run(train(c, "--steps 10 --out " + one.string()), "one");
    run(mpirun(2) + train(c, "--steps 10 --zero 1 --out " + z1.string()), "z1");
    run(mpirun(2) + train(c, "--steps 10 --zero 3 --out " + z3.string()), "z3");
    for (const auto& [dir, what] : {std::pair{z1, "dp2/zero1"}, std::pair{z3, "dp2/zero3"}}) {
        expect_same_losses(one, dir, 0, std::string(c.name) + " " + what, c.rel, false);
        expect_same(c, one / "ckpt_00000010", dir / "ckpt_00000010", std::string(c.name) + " " + what, c.rel, 10);
    }
    // dp=2 ZeRO-2 writes step 3 (each rank its optimiser shard); one process resumes it
    run(mpirun(2) + train(c, "--steps 5 --zero 2 --out " + rs.string()), "reshard5");
    run(train(c, "--steps 10 --resume --out " + rs.string()), "reshard10");
    expect_same_losses(one, rs, 0, std::string(c.name) + " dp2/zero2 -> one process", c.rel, false);
    expect_same(c, one / "ckpt_00000010", rs / "ckpt_00000010", std::string(c.name) + " dp2/zero2 -> one process", c.rel,
                10);
    // the same layout: stopping and resuming changes nothing, to the bit
    run(train(c, "--steps 5 --out " + same.string()), "same5");
    // (and one process's step 5 resumed by dp=2 ZeRO-1: each rank takes its slices of the state)
    const fs::path back = tmp / "back";
    fs::copy(same, back, fs::copy_options::recursive);
    run(mpirun(2) + train(c, "--steps 10 --zero 1 --resume --out " + back.string()), "back10");
    expect_same_losses(one, back, 0, std::string(c.name) + " one process -> dp2/zero1", c.rel, false);
    expect_same(c, one / "ckpt_00000010", back / "ckpt_00000010", std::string(c.name) + " one process -> dp2/zero1", c.rel,
                10);
    run(train(c, "--steps 10 --resume --out " + same.string()), "same10");
    expect_same_losses(one, same, 0, std::string(c.name) + " resumed in the same layout", 0.0, false);
    expect_same_params(one / "ckpt_00000010", same / "ckpt_00000010", std::string(c.name) + " resumed in the same layout",
                       0.0f);  // every element, the key bias too: one process sums in one order
}

INSTANTIATE_TEST_SUITE_P(All, Optimizers,
                         ::testing::Values(Case{"radam", "--optimizer radam --eps 1e-6 --beta2 0.9"},
                                           Case{"lion", "--optimizer lion", 1e-5f, true},
                                           Case{"adam8bit", "--optimizer adam8bit --eps 1e-6 --optim-block 256", 1e-3f,
                                                false, kQuantisedApart},
                                           Case{"adam8bit_linear",
                                                "--optimizer adam8bit --eps 1e-3 --optim-block 512 --optim-code linear",
                                                1e-3f, false, kQuantisedApart},
                                           Case{"adafactor", "--optimizer adafactor --eps 1e-6"},
                                           Case{"adafactor_rel",
                                                "--optimizer adafactor --eps 1e-6 --beta1 0.9 --relative-step "
                                                "--scale-parameter"},
                                           // the Hessian after steps 3, 6, 9: the resumes at step 5 carry it
                                           Case{"sophia", "--optimizer sophia --hess-interval 3 --rho 1", 1e-5f, true,
                                                kSophiaApart}),
                         [](const auto& info) { return std::string(info.param.name); });

// Sophia's Hessian passes draw labels from the model's softmax: by a hash of the token's place in the
// global batch, so every layout draws the same labels. The head's vocabulary split over tensor-parallel
// ranks (each rank's share of the cumulative sum, the draw by the rank whose share holds it), the head
// on the last pipeline stage, sequence parallelism and bf16 mixed precision (the chunked head of bf16
// products) against one process of the same precision: losses and parameters after 10 steps, the
// Hessian refreshed after steps 2, 4, ..., 10, which metrics.jsonl marks.
TEST_F(CliTest, SophiaDrawsTheSameLabelsInEveryLayout) {
    const Case c{"sophia", "--optimizer sophia --hess-interval 2 --rho 1", 1e-5f, true, kSophiaApart};
    auto run = [&](const std::string& cmd, const fs::path& out) {
        const CmdResult r = sh(cmd + " --steps 10 --out " + out.string(), tmp / (out.filename().string() + ".log"));
        ASSERT_EQ(r.code, 0) << cmd << "\n" << r.out;
    };
    const fs::path one = tmp / "one", one16 = tmp / "one16";
    run(train(c, ""), one);
    const std::vector<nlohmann::json> rows = metrics(one);
    ASSERT_EQ(rows.size(), 10u);
    for (size_t i = 0; i < rows.size(); i++)
        EXPECT_EQ(rows[i].value("hessian", false), i % 2 == 1) << "step " << i << ": " << rows[i].dump();
    for (const auto& [layout, name] : {std::pair{"--tp 2", "tp2"}, std::pair{"--pp 2", "pp2"},
                                       std::pair{"--tp 2 --sequence-parallel --zero 2", "tp2_sp_zero2"}}) {
        const fs::path dir = tmp / name;
        run(mpirun(2) + train(c, layout), dir);
        expect_same_losses(one, dir, 0, std::string("sophia ") + name, c.rel, false);
        expect_same(c, one / "ckpt_00000010", dir / "ckpt_00000010", std::string("sophia ") + name, c.rel, 10);
    }
    // bf16 (the chunked head of bf16 products draws the labels a block of rows at a time): layouts round
    // their 16-bit products differently where a compiler orders them otherwise (the parameters equal to
    // 2e-7 of their travel in the optimised build, but 1.2 % in the key weights under the sanitizers'
    // clang build, where Sophia divides by a Hessian of rounding noise), so the losses and gradient norms
    // are held to the 16-bit layouts' noise (test_mixed_precision.cpp: 2e-3), not the parameters
    run(train(c, "--precision bf16"), one16);
    const fs::path pp16 = tmp / "pp2_bf16";
    run(mpirun(2) + train(c, "--precision bf16 --pp 2"), pp16);
    expect_same_losses(one16, pp16, 0, "sophia bf16 pp2", 2e-3, false);
}

// --memory-report counts the bytes adam8bit keeps: one code byte per element for m and for v, one fp32
// absmax per block of each, fp32 state only for tensors under 4096 elements. On the tiny preset (3.3M
// parameters, the 3.2M of the embedding quantised) that is 2.01 bytes per parameter against AdamW's 8.
TEST_F(CliTest, Adam8bitKeepsAboutTwoBytesOfStatePerParameter) {
    auto state_mib = [&](const std::string& opt) {
        const CmdResult r = sh(kBin + " train --model tiny --data " + kFix + "/data.bin --seq 16 --global-batch 2" +
                                   " --micro-batch 2 --steps 1 --threads 1 --memory-report --optimizer " + opt,
                               tmp / (opt + ".log"));
        EXPECT_EQ(r.code, 0) << r.out;
        std::smatch m;
        EXPECT_TRUE(std::regex_search(r.out, m, std::regex("optimizer state +([0-9.]+) +([0-9.]+)"))) << r.out;
        return m.size() == 3 ? std::stod(m[1].str()) : 0.0;
    };
    const double adamw = state_mib("adamw"), q8 = state_mib("adam8bit");
    EXPECT_GT(adamw, 20.0);
    EXPECT_GE(q8 / adamw, 2.0 / 8.0);
    EXPECT_LE(q8 / adamw, 2.1 / 8.0);
}

}  // namespace
