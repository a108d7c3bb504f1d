// A mixture of experts through the binary: a tiny HF Mixtral directory (tests/fixtures/mixtral_tiny: LLaMA's
// attention, 4 experts of SwiGLU in every layer, top 2 renormalised, the balance loss and the router z-loss
// per micro-batch of 2 rows) trains 10 AdamW steps equal to a float64 PyTorch reference
// (tools/reference/llama_torch.py: SparseMoe) in one process and under tensor (with and without sequence
// parallelism), pipeline (1F1B and ZB-H1, whose W runs apart from B) and data parallelism (ZeRO-1 and 3),
// with full and selective recomputation; bf16 tracks it; the metrics carry the balance, z-loss and loads;
// a checkpoint reloads as the same model; a capacity factor drops tokens and says how many.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "cli_run.h"
#include "run_dir.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/safetensors.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
const std::string kFix = kSrc + "/tests/fixtures/mixtral_tiny";
// a dense layer, then an MoE layer with a shared expert, a sigmoid router, the top k not renormalised, capacity 0.75
const std::string kVariants = kSrc + "/tests/fixtures/moe_variants";
// an HF OLMoE: the queries and keys normalised, the experts by LLaMA's MLP names, the top k not renormalised
const std::string kOlmoe = kSrc + "/tests/fixtures/olmoe_tiny";

class Moe : public shardlm::test::CliTest {
protected:
    // the reference's hyper-parameters (expected.json "hyper"): G = 4 rows of T = 16, micro-batches of 2 rows
    static std::string train(const std::string& extra, const std::string& batch = "--global-batch 4 --micro-batch 2",
                             const std::string& fix = kFix) {
        return kBin + " train --init " + fix + " --data " + fix + "/data.bin --data-order sequential --seq 16 " + batch +
               " --optimizer adamw --lr 3e-3 --lr-schedule constant --weight-decay 0.1" +
               " --beta1 0.9 --beta2 0.95 --eps 1e-6 --grad-clip 1.0 --val-every 0 --sample-tokens 0 " + extra;
    }
    static std::string mpirun(int np) { return shardlm::test::mpirun(np); }
    std::string run(const std::string& cmd) { return CliTest::run(cmd, "run"); }
    // losses and gradient norms against the float64 reference (one process measured: 4e-7 and 1.3e-6)
    static void expect_reference(const fs::path& run, const std::string& what, double rel = 1e-5,
                                 const std::string& fix = kFix) {
        shardlm::test::expect_reference_curve(run, fix, what, rel);
    }
    struct Layout {
        const char* name;
        int np;
        const char* flags;
    };
    // The fixture's 10 steps in one layout, into out, against its float64 reference (in one process also the
    // final parameters: the reference's rounded to fp32, final.safetensors)
    void expect_layout(const Layout& l, const std::string& fix, const fs::path& out) {
        run((l.np > 1 ? mpirun(l.np) : std::string()) +
            train(std::string(l.flags) + " --steps 10 --overwrite --out " + out.string(), "--global-batch 4 --micro-batch 2", fix));
        expect_reference(out, l.name, 1e-5, fix);
        if (l.np == 1) shardlm::test::expect_reference_params(out / "ckpt_00000010", fix, tmp / "ref", l.name);
    }
};

TEST_F(Moe, TrainsEqualToFloat64PytorchInEveryLayout) {
    const Layout layouts[] = {
        {"one process, 2 micro-batches", 1, "--threads 2"},
        {"full recomputation", 1, "--recompute full --threads 2"},
        {"selective recomputation, materialized attention", 1, "--recompute selective --attention materialized"},
        {"tp2", 2, "--tp 2 --threads 1"},
        {"tp2 + sequence parallelism", 2, "--tp 2 --sequence-parallel --threads 1"},
        {"pp2 1F1B", 2, "--pp 2 --threads 1"},
        {"pp2 ZB-H1", 2, "--pp 2 --schedule zb-h1 --threads 1"},
        {"dp2 ZeRO-1", 2, "--dp 2 --zero 1 --threads 1"},
        {"dp2 ZeRO-3", 2, "--dp 2 --zero 3 --threads 1"},
        {"tp2 x pp2", 4, "--tp 2 --pp 2 --threads 1"},
        {"dp2 ep2", 2, "--dp 2 --ep 2 --threads 1"},
        {"dp2 ep2 ZeRO-1", 2, "--dp 2 --ep 2 --zero 1 --threads 1"},
        {"dp2 ep2 ZeRO-2", 2, "--dp 2 --ep 2 --zero 2 --threads 1"},
        {"dp2 ep2 ZeRO-3", 2, "--dp 2 --ep 2 --zero 3 --threads 1"},
        {"dp2 ep2 x tp2 + sequence parallelism", 4, "--dp 2 --ep 2 --tp 2 --sequence-parallel --threads 1"},
        {"dp2 ep2 x pp2 ZB-H1", 4, "--dp 2 --ep 2 --pp 2 --schedule zb-h1 --threads 1"},
        {"dp2 ep2, full recomputation", 2, "--dp 2 --ep 2 --recompute full --threads 1"},
        // context parallelism: the balance loss's counts and probabilities summed over the cp ranks' tokens
        {"cp2", 2, "--cp 2 --threads 1"},
        {"dp2 ep2 x cp2 ZeRO-1", 4, "--dp 2 --ep 2 --cp 2 --zero 1 --threads 1"},
    };
    for (const Layout& l : layouts) expect_layout(l, kFix, tmp / "run");
}

// What Mixtral lacks, against its own float64 reference (tests/fixtures/moe_variants: about 30 % of the choices
// dropped each step): one process (and the final parameters), tp2 + sequence parallelism, pp2, dp2 ep2 ZeRO-3,
// and cp2 alone and under dp2 ep2 ZeRO-3 (the capacity ranks every cp rank's choices of a micro-batch).
TEST_F(Moe, VariantsEqualToFloat64Pytorch) {
    const Layout layouts[] = {
        {"one process", 1, "--threads 2"},
        {"tp2 + sequence parallelism", 2, "--tp 2 --sequence-parallel --threads 1"},
        {"pp2", 2, "--pp 2 --threads 1"},
        {"dp2 ep2 ZeRO-3", 2, "--dp 2 --ep 2 --zero 3 --threads 1"},
        {"cp2", 2, "--cp 2 --threads 1"},
        {"dp2 ep2 x cp2 ZeRO-3", 4, "--dp 2 --ep 2 --cp 2 --zero 3 --threads 1"},
    };
    for (const Layout& l : layouts) {
        const fs::path out = tmp / "variants";
        expect_layout(l, kVariants, out);
        const auto rows = shardlm::test::metrics(out);
        ASSERT_FALSE(rows.empty());
        EXPECT_GT(double(rows[0]["moe_dropped"]), 0.2) << l.name;
        ASSERT_EQ(rows[0]["moe_load"].size(), 1u) << l.name;  // layer 1 only
        EXPECT_EQ(rows[0]["moe_load"][0]["layer"], 1) << l.name;
    }
}

// The metrics: the balance loss (1 when balanced, near 1 at initialisation), the z-loss, each layer's
// loads as shares (summing to 1 over its experts: min <= 1/E <= max), nothing dropped without a capacity;
// the same values under dp2 and cp2 as in one process (the statistics cover the global batch).
TEST_F(Moe, MetricsCarryTheBalanceAndTheLoads) {
    const fs::path one = tmp / "one", dp = tmp / "dp", cp = tmp / "cp";
    run(train("--steps 3 --threads 2 --out " + one.string()));
    run(mpirun(2) + train("--dp 2 --threads 1 --steps 3 --out " + dp.string()));
    run(mpirun(2) + train("--cp 2 --threads 1 --steps 3 --out " + cp.string()));
    const auto a = shardlm::test::metrics(one);
    ASSERT_EQ(a.size(), 3u);
    for (size_t s = 0; s < a.size(); s++) {
        const double aux = a[s]["aux_loss"], z = a[s]["z_loss"];
        EXPECT_GT(aux, 0.99);
        EXPECT_LT(aux, 1.2);
        EXPECT_GT(z, 0.0);
        EXPECT_EQ(a[s]["moe_dropped"], 0.0);
        ASSERT_EQ(a[s]["moe_load"].size(), 2u);
        for (const auto& l : a[s]["moe_load"]) {
            EXPECT_LE(double(l["min"]), 0.25);
            EXPECT_GE(double(l["max"]), 0.25);
            EXPECT_LE(double(l["min"]), double(l["median"]));
            EXPECT_LE(double(l["median"]), double(l["max"]));
        }
    }
    for (const fs::path& dir : {dp, cp}) {
        const auto b = shardlm::test::metrics(dir);
        ASSERT_EQ(b.size(), 3u) << dir;
        for (size_t s = 0; s < a.size(); s++) {
            SCOPED_TRACE(dir.filename().string() + " step " + std::to_string(s));
            EXPECT_NEAR(double(b[s]["aux_loss"]), double(a[s]["aux_loss"]), 1e-6 * double(a[s]["aux_loss"]));
            EXPECT_NEAR(double(b[s]["z_loss"]), double(a[s]["z_loss"]), 1e-6 * double(a[s]["z_loss"]));
            for (size_t l = 0; l < 2; l++) EXPECT_EQ(b[s]["moe_load"][l]["max"], a[s]["moe_load"][l]["max"]) << "layer " << l;
        }
    }
    // the report draws the balance and the largest load beside the loss
    run(kBin + " report " + one.string());
    for (const char* f : {"moe_balance.svg", "moe_load.svg"}) EXPECT_TRUE(fs::exists(one / f)) << f;
    EXPECT_NE(shardlm::io::read_file((one / "report.html").string()).find("1 when even"), std::string::npos);
}

// A capacity factor of 0.5 keeps at most half of an even share per expert: at least half the choices
// are dropped, the dropped share is logged, and the run is the same under tp2 (every rank drops alike).
TEST_F(Moe, CapacityDropsTheLowestProbabilities) {
    const fs::path one = tmp / "one", tp = tmp / "tp";
    run(train("--capacity-factor 0.5 --steps 3 --threads 2 --out " + one.string()));
    run(mpirun(2) + train("--capacity-factor 0.5 --tp 2 --threads 1 --steps 3 --out " + tp.string()));
    const auto a = shardlm::test::metrics(one), b = shardlm::test::metrics(tp);
    ASSERT_EQ(a.size(), 3u);
    for (size_t s = 0; s < a.size(); s++) {
        EXPECT_GE(double(a[s]["moe_dropped"]), 0.5) << "step " << s;
        EXPECT_NEAR(double(b[s]["loss"]), double(a[s]["loss"]), 1e-5 * double(a[s]["loss"])) << "step " << s;
        EXPECT_EQ(b[s]["moe_dropped"], a[s]["moe_dropped"]) << "step " << s;
    }
}

// bf16 mixed precision follows the float64 curve within 16-bit rounding (the router stays fp32).
TEST_F(Moe, Bf16TracksTheReference) {
    const auto expected = nlohmann::json::parse(shardlm::io::read_file(kFix + "/expected.json"));
    const fs::path out = tmp / "bf16";
    run(train("--precision bf16 --threads 2 --steps 10 --out " + out.string()));
    const auto rows = shardlm::test::metrics(out);
    ASSERT_EQ(rows.size(), 10u);
    for (size_t s = 0; s < rows.size(); s++)
        EXPECT_NEAR(double(rows[s]["loss"]), double(expected["losses"][s]), 3e-3 * double(expected["losses"][s])) << s;
}

// Expert parallelism over 4 ranks and carved out of dp 4 (ep 2), with micro-batches of one row: equal to one
// process on the same global batch (the reference's micro-batches are 2 rows); --comm-report's rows match their
// formulas (the all-to-all's: the rows each exchange sent to the other ep ranks, the experts' reductions over
// the ranks holding them); checkpoints reshard from ep 2 into one process and into ep 4 ZeRO-3.
TEST_F(Moe, ExpertParallelEqualsOneProcess) {
    const std::string batch = "--global-batch 8 --micro-batch 1";
    const std::string common = " --threads 1 --ckpt-every 5 --steps 10 --stop-after 5 --out ";
    const fs::path one = tmp / "one";
    run(train(common + one.string(), batch));
    run(train(" --resume --steps 10 --threads 1 --out " + one.string(), batch));
    const auto ref = shardlm::test::metrics(one);
    ASSERT_EQ(ref.size(), 10u);
    auto same = [&](const fs::path& run_dir, const std::string& what) {
        const auto rows = shardlm::test::metrics(run_dir);
        ASSERT_EQ(rows.size(), ref.size()) << what;
        for (size_t s = 0; s < rows.size(); s++) {
            EXPECT_NEAR(double(rows[s]["loss"]), double(ref[s]["loss"]), 1e-5 * double(ref[s]["loss"])) << what << " " << s;
            EXPECT_NEAR(double(rows[s]["grad_norm"]), double(ref[s]["grad_norm"]), 1e-5 * double(ref[s]["grad_norm"]))
                << what << " " << s;
            EXPECT_NEAR(double(rows[s]["aux_loss"]), double(ref[s]["aux_loss"]), 1e-6) << what << " " << s;
        }
    };
    for (const char* flags : {"--dp 4 --ep 4", "--dp 4 --ep 2 --zero 2"}) {
        const fs::path out = tmp / "ep";
        fs::remove_all(out);
        const std::string out_text =
            run(mpirun(4) + train(std::string(flags) + " --comm-report" + common + out.string(), batch));
        const std::regex row(R"(\n  (\S+)\s+(\w+)\s+calls\s+\d+\s+sent\s+(\d+)\s+theory\s+(\d+))");
        int ep_rows = 0;
        for (auto it = std::sregex_iterator(out_text.begin(), out_text.end(), row); it != std::sregex_iterator(); ++it) {
            const std::smatch& m = *it;
            EXPECT_EQ(m[3].str(), m[4].str()) << flags << ": " << m[0].str();
            if (m[1].str() == "ep" && m[2].str() == "all_to_all") {
                ep_rows++;
                EXPECT_NE(m[3].str(), "0") << flags;
            }
        }
        EXPECT_EQ(ep_rows, 4) << out_text;
        // the second half resumed in one process, or under ep 4 with ZeRO-3
        const bool into_one = std::string(flags).find("--ep 4") != std::string::npos;
        run((into_one ? std::string() : mpirun(4)) +
            train(std::string(into_one ? "" : "--dp 4 --ep 4 --zero 3 ") + " --resume --steps 10 --threads 1 --out " +
                      out.string(), batch));
        same(out, flags);
    }
}

// Auxiliary-loss-free balancing (DeepSeek-V3's expert bias, here without the balance loss): the bias moves by
// the rate each step (after step s its largest magnitude is a multiple of the rate, at most s + 1 of them), the run is the same under dp2 ep2 and tp2 (the bias comes from the global loads), and a
// resumed run continues bit-exact (the bias is in the checkpoint).
TEST_F(Moe, ExpertBiasBalancesWithoutTheAuxiliaryLoss) {
    const std::string flags = " --aux-loss-coef 0 --expert-bias-rate 0.01 --steps 8 ";
    const fs::path one = tmp / "one", dp = tmp / "dp", tp = tmp / "tp", half = tmp / "half";
    run(train(flags + "--threads 2 --out " + one.string()));
    run(mpirun(2) + train(flags + "--dp 2 --ep 2 --threads 1 --out " + dp.string()));
    run(mpirun(2) + train(flags + "--tp 2 --sequence-parallel --threads 1 --out " + tp.string()));
    run(train(flags + "--threads 2 --ckpt-every 4 --stop-after 4 --out " + half.string()));
    run(train(" --aux-loss-coef 0 --expert-bias-rate 0.01 --steps 8 --threads 2 --resume --out " + half.string()));
    const auto a = shardlm::test::metrics(one), b = shardlm::test::metrics(dp), c = shardlm::test::metrics(tp),
               h = shardlm::test::metrics(half);
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(h.size(), 8u);
    for (size_t s = 0; s < a.size(); s++) {
        for (const auto& l : a[s]["moe_load"]) {  // steps of the rate: a multiple of it, at most one a step
            const double steps = double(l["bias_max"]) / 0.01;
            EXPECT_NEAR(steps, std::round(steps), 1e-3) << "step " << s;
            EXPECT_LE(steps, double(s + 1) + 1e-3) << "step " << s;
            if (s == 0) {
                EXPECT_NEAR(steps, 1.0, 1e-3) << "the first step's loads are uneven";
            }
        }
        for (const auto* other : {&b, &c})
            EXPECT_NEAR(double((*other)[s]["loss"]), double(a[s]["loss"]), 1e-5 * double(a[s]["loss"])) << "step " << s;
        EXPECT_EQ(h[s]["loss"], a[s]["loss"]) << "resumed, step " << s;
        EXPECT_EQ(h[s]["moe_load"], a[s]["moe_load"]) << "resumed, step " << s;
    }
}

// The experts are parameter units like any other to the optimisers and the schedules: every other optimiser
// under dp2 ep2 (ZeRO 0-3), and the GPipe, interleaved and ZBV pipelines, equal one process's run of the same
// optimiser. 8-bit Adam to 1e-3: its states are rounded to 8-bit codes, and another summation order moves a
// value across a code's midpoint now and then (tests/cli/test_optimizers.cpp: kQuantisedApart).
TEST_F(Moe, OtherOptimisersAndSchedulesEqualOneProcess) {
    struct C {
        const char* name;
        const char* common;  // both runs
        int np;
        const char* layout;
        double rel = 1e-5;
    };
    const C cases[] = {
        {"sgd, dp2 ep2 ZeRO-1", "--optimizer sgd --lr 0.05 --momentum 0.9 --lr-schedule constant", 2,
         "--dp 2 --ep 2 --zero 1"},
        {"adafactor, dp2 ep2 ZeRO-3", "--optimizer adafactor --eps 1e-6 --lr 3e-3 --lr-schedule constant", 2,
         "--dp 2 --ep 2 --zero 3"},
        {"adam8bit, dp2 ep2 ZeRO-2", "--optimizer adam8bit --eps 1e-6 --optim-block 256 --lr 3e-3 --lr-schedule constant",
         2, "--dp 2 --ep 2 --zero 2", 1e-3},
        {"gpipe pp2", "", 2, "--pp 2 --schedule gpipe"},
        {"lion, dp2 ep2 ZeRO-1", "--optimizer lion --lr 3e-4 --lr-schedule constant", 2, "--dp 2 --ep 2 --zero 1"},
        {"radam, dp2 ep2", "--optimizer radam --lr 3e-3 --lr-schedule constant", 2, "--dp 2 --ep 2"},
        {"sophia, dp2 ep2 ZeRO-2", "--optimizer sophia --lr 3e-4 --hess-interval 2 --lr-schedule constant", 2,
         "--dp 2 --ep 2 --zero 2"},
        {"interleaved pp2 v2", "", 2, "--pp 2 --schedule interleaved --virtual-stages 2"},
        {"zbv pp2", "", 2, "--pp 2 --schedule zbv"},
    };
    // the reference's optimiser flags replaced by the case's
    auto with = [](std::string cmd, const std::string& optimiser) {
        const std::string adamw =
            "--optimizer adamw --lr 3e-3 --lr-schedule constant --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-6";
        if (!optimiser.empty()) cmd.replace(cmd.find(adamw), adamw.size(), optimiser);
        return cmd;
    };
    for (const C& c : cases) {
        const fs::path one = tmp / "one", other = tmp / "other";
        fs::remove_all(one), fs::remove_all(other);
        run(with(train("--steps 6 --threads 1 --out " + one.string()), c.common));
        run(mpirun(c.np) + with(train(std::string(c.layout) + " --steps 6 --threads 1 --out " + other.string()), c.common));
        const auto a = shardlm::test::metrics(one), b = shardlm::test::metrics(other);
        ASSERT_EQ(a.size(), 6u) << c.name;
        ASSERT_EQ(b.size(), 6u) << c.name;
        for (size_t s = 0; s < a.size(); s++) {
            EXPECT_NEAR(double(b[s]["loss"]), double(a[s]["loss"]), c.rel * double(a[s]["loss"])) << c.name << " " << s;
            EXPECT_NEAR(double(b[s]["grad_norm"]), double(a[s]["grad_norm"]), c.rel * double(a[s]["grad_norm"]))
                << c.name << " " << s;
        }
    }
}

// A trained Mixtral exports as an HF Mixtral directory (Mixtral's keys and names), holding the checkpoint's values
// to the bit, and re-exports unchanged; a model Mixtral cannot express (shared experts) is refused with the reason.
TEST_F(Moe, HfMixtralRoundTripsBitExact) {
    const fs::path run_dir = tmp / "run", hf = tmp / "hf", hf2 = tmp / "hf2";
    run(train("--steps 3 --threads 2 --out " + run_dir.string()));
    const fs::path ckpt = run_dir / "ckpt_00000003";
    run(kBin + " export --init " + ckpt.string() + " --out " + hf.string());
    const auto cfg = nlohmann::json::parse(shardlm::io::read_file((hf / "config.json").string()));
    EXPECT_EQ(cfg["model_type"], "mixtral");
    EXPECT_EQ(cfg["num_local_experts"], 4);
    EXPECT_EQ(cfg["num_experts_per_tok"], 2);
    EXPECT_EQ(cfg["router_aux_loss_coef"], 0.01);
    EXPECT_EQ(cfg["intermediate_size"], 32);
    shardlm::io::SafetensorsReader st((hf / "model.safetensors").string());
    ASSERT_NE(st.find("model.layers.1.block_sparse_moe.gate.weight"), nullptr);
    EXPECT_EQ(st.find("model.layers.1.block_sparse_moe.gate.weight")->shape, (std::vector<int64_t>{4, 48}));
    ASSERT_NE(st.find("model.layers.0.block_sparse_moe.experts.3.w2.weight"), nullptr);
    EXPECT_EQ(st.find("model.layers.0.block_sparse_moe.experts.3.w2.weight")->shape, (std::vector<int64_t>{48, 32}));
    EXPECT_EQ(shardlm::test::checkpoint_params(ckpt), shardlm::test::checkpoint_params(hf));
    run(kBin + " export --init " + hf.string() + " --out " + hf2.string());
    EXPECT_EQ(shardlm::io::read_file((hf / "model.safetensors").string()),
              shardlm::io::read_file((hf2 / "model.safetensors").string()));
    fails(kBin + " export --init " + kVariants + " --out " + (tmp / "refused").string(), "shared experts");
}

// An HF OLMoE (tests/fixtures/olmoe_tiny: the queries and keys RMS-normalised over all heads before the rotary
// embeddings, 8 experts under mlp. by LLaMA's MLP names, the top 2 not renormalised) against its float64
// reference: one process (and the final parameters), full recomputation, tp2 (the norms' sums over the group),
// tp2 + SP, pp2, dp2 ep2 ZeRO-1, cp2 and dp2 ep2 x tp2 ZeRO-3, and bf16 (tp2) near it. It exports as an OLMoE
// directory bit for bit and re-exports unchanged; a preset with the norms generates.
TEST_F(Moe, OlmoeEqualsFloat64PytorchAndRoundTrips) {
    const Layout layouts[] = {
        {"one process", 1, "--threads 2"},
        {"full recomputation", 1, "--recompute full --threads 2"},
        {"tp2", 2, "--tp 2 --threads 1"},
        {"tp2 + sequence parallelism", 2, "--tp 2 --sequence-parallel --threads 1"},
        {"pp2", 2, "--pp 2 --threads 1"},
        {"dp2 ep2 ZeRO-1", 2, "--dp 2 --ep 2 --zero 1 --threads 1"},
        {"cp2", 2, "--cp 2 --threads 1"},
        {"dp2 ep2 x tp2 ZeRO-3", 4, "--dp 2 --ep 2 --tp 2 --zero 3 --threads 1"},
    };
    const std::string batch = "--global-batch 4 --micro-batch 2";
    const fs::path out = tmp / "olmoe";
    for (const Layout& l : layouts) expect_layout(l, kOlmoe, out);
    // bf16 (the gains widened as a packed run: mixed precision once widened only q's and read zeros for k's)
    const auto expected = nlohmann::json::parse(shardlm::io::read_file(kOlmoe + "/expected.json"));
    const fs::path bf16 = tmp / "olmoe_bf16";
    run(mpirun(2) + train("--precision bf16 --tp 2 --threads 1 --steps 10 --out " + bf16.string(), batch, kOlmoe));
    const auto rows = shardlm::test::metrics(bf16);
    ASSERT_EQ(rows.size(), 10u);
    for (size_t s = 0; s < rows.size(); s++)
        EXPECT_NEAR(double(rows[s]["loss"]), double(expected["losses"][s]), 3e-3 * double(expected["losses"][s])) << s;
    const fs::path ckpt = out / "ckpt_00000010", hf = tmp / "hf", hf2 = tmp / "hf2";
    run(kBin + " export --init " + ckpt.string() + " --out " + hf.string());
    const auto cfg = nlohmann::json::parse(shardlm::io::read_file((hf / "config.json").string()));
    EXPECT_EQ(cfg["model_type"], "olmoe");
    EXPECT_EQ(cfg["num_experts"], 8);
    EXPECT_EQ(cfg["num_experts_per_tok"], 2);
    EXPECT_EQ(cfg["norm_topk_prob"], false);
    EXPECT_FALSE(cfg.contains("num_local_experts"));
    shardlm::io::SafetensorsReader st((hf / "model.safetensors").string());
    for (const auto& [name, shape] : {std::pair{"model.layers.0.self_attn.q_norm.weight", std::vector<int64_t>{48}},
                                      std::pair{"model.layers.0.self_attn.k_norm.weight", std::vector<int64_t>{24}},
                                      std::pair{"model.layers.1.mlp.gate.weight", std::vector<int64_t>{8, 48}},
                                      std::pair{"model.layers.1.mlp.experts.7.down_proj.weight", std::vector<int64_t>{48, 32}}}) {
        ASSERT_NE(st.find(name), nullptr) << name;
        EXPECT_EQ(st.find(name)->shape, shape) << name;
    }
    EXPECT_EQ(shardlm::test::checkpoint_params(ckpt), shardlm::test::checkpoint_params(hf));
    run(kBin + " export --init " + hf.string() + " --out " + hf2.string());
    EXPECT_EQ(shardlm::io::read_file((hf / "model.safetensors").string()),
              shardlm::io::read_file((hf2 / "model.safetensors").string()));
    // a preset with the norms and experts is an OLMoE and generates (the key/value cache holds the normalised keys);
    // without experts HF has no such model: export refuses it with the reason
    const fs::path preset = tmp / "preset", dense = tmp / "dense";
    const std::string base = kBin + " train --model llama-tiny --n-ctx 64 --qk-norm true --data " + kFix +
                             "/data.bin --seq 16 --global-batch 4 --micro-batch 2 --val-every 0 --sample-tokens 0 "
                             "--threads 2 --steps 2 --out ";
    run(base + preset.string() + " --n-experts 4");
    EXPECT_NE(shardlm::io::read_file((preset / "ckpt_00000002" / "config.json").string()).find("\"olmoe\""), std::string::npos);
    run(kBin + " generate --ckpt " + preset.string() + " --prompt a --max-tokens 4");
    run(base + dense.string());
    fails(kBin + " export --init " + (dense / "ckpt_00000002").string() + " --out " + (tmp / "refused").string(),
          "q/k norms without experts");
    run(kBin + " generate --ckpt " + dense.string() + " --prompt a --max-tokens 4");  // (its config.json reads back)
    // what shardlm cannot compute is refused, naming the file and the key
    const fs::path clipped = tmp / "clipped";
    fs::copy(kOlmoe, clipped);
    auto j = nlohmann::json::parse(shardlm::io::read_file((clipped / "config.json").string()));
    j["clip_qkv"] = 8.0;
    shardlm::io::write_file_atomic((clipped / "config.json").string(), j.dump());
    fails(kBin + " export --init " + clipped.string() + " --out " + (tmp / "refused2").string(), "clip_qkv 8.0 is not supported");
    j.erase("clip_qkv"), j.erase("num_experts");
    shardlm::io::write_file_atomic((clipped / "config.json").string(), j.dump());
    fails(kBin + " export --init " + clipped.string() + " --out " + (tmp / "refused2").string(), "missing key 'num_experts'");
}

// A preset turned into an MoE model trains, checkpoints its experts, and generates from the checkpoint;
// what cannot run is refused with the fix.
TEST_F(Moe, PresetsCheckpointsAndRefusals) {
    const fs::path out = tmp / "preset";
    const std::string data = kFix + "/data.bin";
    const std::string base = kBin + " train --model llama-tiny --n-ctx 64 --data " + data +
                             " --seq 16 --global-batch 4 --micro-batch 2 --val-every 0 --sample-tokens 0 --threads 2";
    run(base + " --n-experts 4 --top-k 1 --shared-experts 1 --moe-ffn 32 --router sigmoid --moe-layers every:2 --steps 4 "
               "--out " + out.string());
    const std::string cfg = shardlm::io::read_file((out / "ckpt_00000004" / "config.json").string());
    EXPECT_NE(cfg.find("\"num_local_experts\": 4"), std::string::npos) << cfg;
    EXPECT_NE(cfg.find("\"shardlm_moe_layers\": \"every:2\""), std::string::npos) << cfg;
    const std::string gen = run(kBin + " generate --ckpt " + out.string() + " --prompt a --max-tokens 4");
    fails(base + " --n-experts 4 --moe-layers 7 --steps 1 --out " + (tmp / "bad").string(), "moe_layers '7'");
    fails(base + " --n-experts 4 --top-k 5 --steps 1 --out " + (tmp / "bad").string(), "top_k (5)");
    fails(mpirun(2) + base + " --n-experts 4 --dp 2 --ep 3 --steps 1 --out " + (tmp / "bad").string(), "ep(3) must divide dp(2)");
    fails(mpirun(2) + base + " --dp 2 --ep 2 --steps 1 --out " + (tmp / "bad").string(), "--ep 2 with a dense model");
    fails(mpirun(2) + base + " --n-experts 3 --dp 2 --ep 2 --steps 1 --out " + (tmp / "bad").string(),
          "n_experts = 3 does not split into 2 expert-parallel ranks");
}

}  // namespace
