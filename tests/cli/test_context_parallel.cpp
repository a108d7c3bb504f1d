// Context parallelism through the binary under mpirun (oversubscribed): each sequence split over cp
// ranks (zigzag) trains what one process trains on the same global batch, alone (cp 2, 3, 4, ring and
// all-gather) and with data parallelism and ZeRO 0-3, tensor parallelism with sequence parallelism,
// every pipeline schedule and recomputation (20 steps: losses, gradient norms and validation losses to
// 1e-5 relative, the final parameters to 1e-5 of each tensor's largest); a checkpoint resumes bit-exactly in
// its layout and into others; bf16 stays within 16-bit noise; the keys and values sent per step equal
// --comm-report's formula; bad layouts are refused by name. LLaMA (rotary positions, grouped-query heads)
// against PyTorch is in test_llama.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::kBin;
using shardlm::test::kFix;
using shardlm::test::mpirun;

class ContextParallel : public shardlm::test::CliTest {
protected:

    // G = 8 rows of T = 24 (a multiple of 2 cp for cp 2, 3 and 4), 4 blocks of 4 heads of 12, an odd
    // vocabulary; SGD with momentum (see test_parallel_layouts.cpp for why not Adam here)
    static std::string train(const std::string& extra, const std::string& seq = "24",
                             const std::string& optimizer = "--optimizer momentum --lr 0.05 --momentum 0.9") {
        return kBin + " train --model tiny --n-layer 4 --n-head 4 --n-embd 48 --n-ctx 32 --vocab-size 211 --seed 5" +
               " --data " + kFix + "/data.bin --data-order sequential --seq " + seq + " --global-batch 8 --micro-batch 1 " +
               optimizer + " --weight-decay 0.1 --grad-clip 1.0 --threads 1" + " --val-data " + kFix +
               "/data.bin --val-batches 4 --val-every 4 " + extra;
    }
};

struct Layout {
    const char* name;
    int np;
    const char* flags;
};

TEST_F(ContextParallel, EveryLayoutEqualsOneProcess) {
    const fs::path single = tmp / "single";
    run(train("--steps 20 --out " + single.string()), "single");
    const Layout layouts[] = {
        {"cp2", 2, "--cp 2"},
        {"cp3", 3, "--cp 3"},
        {"cp4", 4, "--cp 4"},
        {"cp2_allgather", 2, "--cp 2 --cp-comm allgather"},
        {"cp3_allgather", 3, "--cp 3 --cp-comm allgather"},
        {"cp2_zero2", 2, "--cp 2 --zero 2"},
        {"dp2_cp2_zero1", 4, "--dp 2 --cp 2 --zero 1"},
        {"dp2_cp2_zero3_allgather", 4, "--dp 2 --cp 2 --zero 3 --cp-comm allgather"},
        {"cp2_tp2_sp", 4, "--cp 2 --tp 2 --sequence-parallel"},
        {"cp2_pp2_1f1b", 4, "--cp 2 --pp 2 --schedule 1f1b"},
        {"cp2_pp2_interleaved", 4, "--cp 2 --pp 2 --schedule interleaved --virtual-stages 2"},
        {"cp2_pp2_zbh1", 4, "--cp 2 --pp 2 --schedule zb-h1"},
        {"cp2_pp2_zbv", 4, "--cp 2 --pp 2 --schedule zbv"},
        {"cp3_recompute_full", 3, "--cp 3 --recompute full"},
        {"cp2_recompute_selective", 2, "--cp 2 --recompute selective"},
        {"dp2_cp2_tp2_zero3", 8, "--dp 2 --cp 2 --tp 2 --zero 3"},
        {"cp2_tp2_pp2", 8, "--cp 2 --tp 2 --pp 2"},
    };
    for (const Layout& l : layouts) {
        const fs::path dir = tmp / l.name;
        run(mpirun(l.np) + train(std::string("--steps 20 ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000020", dir / "ckpt_00000020", l.name);
    }
}

// A run stopped at step 4 and resumed in its own layout continues bit-exactly; its checkpoint resumed
// in other layouts (one process, cp 4, dp2 x tp2) goes on as the one-process run does, and the one
// process's checkpoint resumes under cp.
TEST_F(ContextParallel, ResumesBitExactAndReshards) {
    const fs::path single = tmp / "single", straight = tmp / "cp2";
    run(train("--steps 8 --ckpt-every 4 --out " + single.string()), "single");
    run(mpirun(2) + train("--steps 8 --cp 2 --out " + straight.string()), "cp2");
    const fs::path part = tmp / "cp2_resumed";
    run(mpirun(2) + train("--steps 8 --cp 2 --ckpt-every 4 --stop-after 4 --out " + part.string()), "cp2_first");
    run(mpirun(2) + train("--steps 8 --cp 2 --resume --out " + part.string()), "cp2_second");
    const auto a = shardlm::test::metrics(straight), b = shardlm::test::metrics(part);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++) {
        EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i;
        EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i;
    }
    shardlm::test::expect_same_params(straight / "ckpt_00000008", part / "ckpt_00000008", "cp2 resumed", 0.0f);
    for (const Layout& l : {Layout{"to_one_process", 1, ""}, Layout{"to_cp4", 4, "--cp 4"},
                            Layout{"to_dp2_tp2_zero3", 4, "--dp 2 --tp 2 --zero 3"}}) {
        const fs::path dir = tmp / l.name;
        fs::create_directories(dir);
        fs::copy(part / "ckpt_00000004", dir / "ckpt_00000004", fs::copy_options::recursive);
        fs::copy_file(part / "metrics.jsonl", dir / "metrics.jsonl");
        run(mpirun(l.np) + train(std::string("--steps 8 --resume ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 4, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000008", dir / "ckpt_00000008", l.name);
    }
    const fs::path into = tmp / "from_one_process";
    fs::create_directories(into);
    fs::copy(single / "ckpt_00000004", into / "ckpt_00000004", fs::copy_options::recursive);
    fs::copy_file(single / "metrics.jsonl", into / "metrics.jsonl");
    run(mpirun(4) + train("--steps 8 --resume --dp 2 --cp 2 --zero 1 --out " + into.string()), "from_one_process");
    shardlm::test::expect_same_losses(single, into, 4, "one process -> dp2 x cp2");
    shardlm::test::expect_same_params(single / "ckpt_00000008", into / "ckpt_00000008", "one process -> dp2 x cp2");
}

// bf16 activations and products: the same layout twice is identical, and cp 2 stays within the 16-bit
// noise of one process (the bounds of test_mixed_precision.cpp's layouts).
TEST_F(ContextParallel, Bf16StaysWithinNoise) {
    const std::string base = "--steps 8 --precision bf16 ", adamw = "--optimizer adamw --lr 3e-3";
    const fs::path single = tmp / "bf16", a = tmp / "bf16_cp2", b = tmp / "bf16_cp2_again";
    run(train(base + "--out " + single.string(), "24", adamw), "bf16");
    for (const fs::path& d : {a, b})
        run(mpirun(2) + train(base + "--cp 2 --out " + d.string(), "24", adamw), d.filename().string());
    const auto ms = shardlm::test::metrics(single), ma = shardlm::test::metrics(a), mb = shardlm::test::metrics(b);
    ASSERT_EQ(ms.size(), ma.size());
    for (size_t i = 0; i < ma.size(); i++) {
        EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "run to run, step " << i;
        const double ls = ms[i]["loss"], la = ma[i]["loss"], gs = ms[i]["grad_norm"], ga = ma[i]["grad_norm"];
        EXPECT_NEAR(la, ls, 2e-3 * ls) << "step " << i;
        EXPECT_NEAR(ga, gs, 2e-2 * gs) << "step " << i;
    }
}

// The cp rows of --comm-report (the keys and values sent per step, and their gradients) equal the
// formula on every rank, ring and all-gather, beside the gradients' dp x cp reduction; --memory-report's
// model states (ZeRO over dp x cp) and one block's activations (seq / cp rows) equal theirs.
TEST_F(ContextParallel, ReportsMatchTheFormulas) {
    for (const Layout& l : {Layout{"ring", 2, "--cp 2"}, Layout{"ring_full", 4, "--cp 4 --recompute full"},
                            Layout{"allgather", 4, "--dp 2 --cp 2 --cp-comm allgather --zero 2"},
                            Layout{"tp2_sp_bf16", 4, "--cp 2 --tp 2 --sequence-parallel --precision bf16 --zero 1"}}) {
        const std::string out =
            run(mpirun(l.np) + train(std::string("--steps 1 --comm-report --memory-report ") + l.flags), l.name);
        const std::regex mem(R"(\n  (parameters|gradients|master weights|optimizer state|model states total|block activations)\s+([0-9.]+)\s+([0-9.]+))");
        int mem_rows = 0;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), mem); it != std::sregex_iterator(); ++it, mem_rows++)
            EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << l.name << ": " << (*it)[1].str() << "\n" << out;
        EXPECT_GE(mem_rows, 5 * l.np) << l.name << "\n" << out;
        const std::regex row(R"(\n  (\S+)\s+(\w+)\s+calls\s+\d+\s+sent\s+(\d+)\s+theory\s+(\d+))");
        int cp_rows = 0;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), row); it != std::sregex_iterator(); ++it) {
            const std::smatch& m = *it;
            EXPECT_EQ(m[3].str(), m[4].str()) << l.name << ": " << m[0].str();
            if (m[1].str() == "cp") {
                cp_rows++;
                EXPECT_NE(m[3].str(), "0") << l.name;
            }
        }
        EXPECT_EQ(cp_rows, l.np * (std::string(l.name) == "allgather" ? 2 : 1)) << out;
    }
}

TEST_F(ContextParallel, BadLayoutsAreRefusedByName) {
    fails(mpirun(3) + train("--steps 1 --cp 3", "20"), "--seq 20 is not a multiple of 2 x --cp = 6");
    fails(mpirun(2) + train("--steps 1 --cp 2 --dp-algo local-sgd"), "--cp 2 with --dp-algo local-sgd");
    fails(mpirun(2) + train("--steps 1 --cp 2 --attention materialized"), "--attention fused");
    fails(mpirun(3) + train("--steps 1 --cp 2"), "cp(2) = 2 does not divide world size 3");
    fails(train("--steps 1 --cp 2 --cp-comm ulysses"), "--cp-comm");
}

// Packed documents (--doc-mask): token 200 begins 20 documents of the fixture's 700 tokens. The mask
// changes what one process learns (and the header says how much attention it skips); every cp layout
// (any document lengths: they cross the zigzag chunks) equals the one-process masked run, GPT-2 and LLaMA.
TEST_F(ContextParallel, DocumentMasksEqualOneProcessUnderEveryLayout) {
    const std::string mask = "--doc-mask --eot-token 200 ";
    const fs::path plain = tmp / "plain", single = tmp / "masked";
    run(train("--steps 6 --out " + plain.string()), "plain");
    const std::string out = run(train("--steps 6 " + mask + "--out " + single.string()), "masked");
    EXPECT_NE(out.find("doc mask: 20 documents begin at token 200"), std::string::npos) << out;
    // the share of causal pairs across a boundary, counted here over the shard's rows of 24 tokens
    const std::string bin = shardlm::io::read_file(kFix + "/data.bin");
    const auto* tok = reinterpret_cast<const uint16_t*>(bin.data() + 1024);
    const int n = reinterpret_cast<const int32_t*>(bin.data())[2], T = 24;
    double skipped = 0, pairs = 0;
    for (int r = 0; r < (n - 1) / T; r++)
        for (int t = 0, start = 0; t < T; t++) {
            if (tok[r * T + t] == 200) start = t;
            skipped += start, pairs += t + 1;
        }
    const auto summary = nlohmann::json::parse(shardlm::io::read_file((single / "summary.json").string()));
    EXPECT_NEAR(summary["doc_mask_skipped"].get<double>(), skipped / pairs, 1e-12);
    EXPECT_GT(skipped / pairs, 0.1);
    // the mask changes what is learned: by far more than the layouts differ below (1e-5)
    const auto a = shardlm::test::metrics(plain), b = shardlm::test::metrics(single);
    EXPECT_GT(std::fabs(a[5]["loss"].get<double>() - b[5]["loss"].get<double>()), 2e-4) << "the mask changed nothing";
    for (const Layout& l : {Layout{"cp2", 2, "--cp 2"}, Layout{"cp3", 3, "--cp 3"},
                            Layout{"cp4_allgather", 4, "--cp 4 --cp-comm allgather"},
                            Layout{"dp2_cp2_zero3", 4, "--dp 2 --cp 2 --zero 3"}, Layout{"cp2_pp2", 4, "--cp 2 --pp 2"},
                            Layout{"cp2_tp2_sp_full", 4, "--cp 2 --tp 2 --sequence-parallel --recompute full"}}) {
        const fs::path dir = tmp / (std::string("masked_") + l.name);
        run(mpirun(l.np) + train(std::string("--steps 6 ") + mask + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
    // LLaMA: rotary positions and grouped-query heads under the mask
    const std::string llama = kBin + " train --init " + shardlm::test::kSrc + "/tests/fixtures/llama_tiny --data " +
                              shardlm::test::kSrc + "/tests/fixtures/llama_tiny/data.bin --data-order sequential --seq 16" +
                              " --global-batch 4 --micro-batch 1 --threads 1 --optimizer momentum --lr 0.05 --steps 4 " + mask;
    const fs::path l1 = tmp / "llama_masked", l2 = tmp / "llama_masked_cp2";
    run(llama + "--out " + l1.string(), "llama_masked");
    run(mpirun(2) + llama + "--cp 2 --out " + l2.string(), "llama_masked_cp2");
    shardlm::test::expect_same_losses(l1, l2, 0, "llama, cp2, doc mask", 1e-5, false);
}

}  // namespace
