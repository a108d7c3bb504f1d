// Tensor, sequence and pipeline parallelism through the binary under mpirun (oversubscribed): every
// layout of issue 9 trains 10 steps and matches the one-process run of the same global batch (losses
// to 1e-5 relative, the gathered parameters to 1e-5 of max-abs); a checkpoint written under one
// layout resumes under another (tp2 x pp2 -> dp4 -> one process -> pp2) and the curve goes on
// unchanged; the memory and communication reports equal their formulas; `shardlm schedule` and
// --trace work.
// The model is tiny and awkward: 4 blocks, 4 heads of 12, an odd vocabulary of 211 (padded to 256 or
// 512 rows over the tensor-parallel ranks), random init from the seed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "run_dir.h"
#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
const std::string kFix = kSrc + "/tests/fixtures/gpt2_e2e";

class ParallelLayouts : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_layouts_" + std::to_string(::getpid()));
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }

    // G = 8 rows of T = 16, micro-batch 1: 8 micro-batches per step on one data-parallel rank.
    // SGD with momentum: the layouts must compute the same gradients, and the parameters then differ
    // by lr x (the gradients' rounding differences). Adam divides each gradient by its own running
    // magnitude, so for elements whose gradient is ~0 it turns a 1e-7 rounding difference into a step
    // of up to lr: with AdamW (lr 3e-3, eps 1e-6) tp2 differs from one process by 3e-4 of max-abs in
    // one such element after 10 steps, dp2 (another summation order) by 9e-6. ZeRO's Adam state
    // sharding is covered by test_data_parallel.cpp.
    static std::string train(const std::string& extra) {
        return kBin + " train --model tiny --n-layer 4 --n-head 4 --n-embd 48 --n-ctx 32 --vocab-size 211 --seed 5" +
               " --data " + kFix + "/data.bin --data-order sequential --seq 16 --global-batch 8 --micro-batch 1" +
               " --optimizer momentum --lr 0.05 --momentum 0.9 --weight-decay 0.1 --grad-clip 1.0 --threads 1" +
               " --val-data " + kFix + "/data.bin --val-batches 0 --val-every 5 " + extra;
    }
    static std::string mpirun(int np) {
        return std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
    }
    // The command fails, and says `want`.
    void fails(const std::string& cmd, const std::string& want) {
        const std::string log = (tmp / "err.log").string();
        EXPECT_NE(std::system((cmd + " > " + log + " 2>&1").c_str()), 0) << cmd;
        const std::string o = shardlm::io::read_file(log);
        EXPECT_NE(o.find(want), std::string::npos) << cmd << "\n" << o;
    }
    std::string run(const std::string& cmd, const std::string& name) {
        std::string log = (tmp / (name + ".log")).string();
        int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
        std::string out = shardlm::io::read_file(log);
        EXPECT_EQ(rc, 0) << cmd << "\n" << out;
        return out;
    }
};

struct Layout {
    const char* name;
    int np;
    const char* flags;
};

TEST_F(ParallelLayouts, EveryLayoutEqualsOneProcess) {
    const fs::path single = tmp / "single";
    run(train("--steps 10 --out " + single.string()), "single");
    const Layout layouts[] = {
        {"tp2", 2, "--tp 2"},
        {"tp4", 4, "--tp 4"},
        {"tp2_sp", 2, "--tp 2 --sequence-parallel"},
        {"pp2_gpipe", 2, "--pp 2 --schedule gpipe"},
        {"pp2_1f1b", 2, "--pp 2 --schedule 1f1b"},
        {"pp4_1f1b", 4, "--pp 4 --schedule 1f1b"},
        {"pp2_interleaved", 2, "--pp 2 --schedule interleaved --virtual-stages 2"},
        {"tp2_pp2", 4, "--tp 2 --pp 2"},
        {"dp2_tp2_zero1", 4, "--dp 2 --tp 2 --zero 1"},
        {"dp2_pp2_zero2", 4, "--dp 2 --pp 2 --zero 2"},
        {"dp2_tp2_pp2", 8, "--dp 2 --tp 2 --pp 2"},
    };
    for (const Layout& l : layouts) {
        const fs::path dir = tmp / l.name;
        run(mpirun(l.np) + train(std::string("--steps 10 ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000010", dir / "ckpt_00000010", l.name);
    }
}

TEST_F(ParallelLayouts, ZeroThreeComposesWithTensorAndPipeline) {
    const fs::path single = tmp / "single";
    run(train("--steps 6 --out " + single.string()), "single");
    for (const Layout& l : {Layout{"dp2_tp2_zero3_sp", 4, "--dp 2 --tp 2 --zero 3 --sequence-parallel"},
                            Layout{"dp2_pp2_zero3", 4, "--dp 2 --pp 2 --zero 3"}}) {
        const fs::path dir = tmp / l.name;
        run(mpirun(l.np) + train(std::string("--steps 6 ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
}

// Lanes (2 threads sharing each micro-batch by sequences) beside ZeRO-3's gathers and a 1F1B schedule
// compute what one process with one thread does.
TEST_F(ParallelLayouts, LanesInDataAndPipelineLayouts) {
    const fs::path single = tmp / "single";
    run(train("--steps 6 --out " + single.string()), "single");
    auto with_lanes = [](std::string cmd, int micro) {
        cmd = std::regex_replace(cmd, std::regex("--micro-batch 1 "), "--micro-batch " + std::to_string(micro) + " ");
        return std::regex_replace(cmd, std::regex("--threads 1 "), "--threads 2 --thread-split batch ");
    };
    for (const auto& [l, micro] : {std::pair{Layout{"one_process", 1, ""}, 4},
                                   std::pair{Layout{"dp2_zero3", 2, "--dp 2 --zero 3"}, 2},
                                   std::pair{Layout{"pp2_1f1b", 2, "--pp 2 --schedule 1f1b"}, 2}}) {
        const fs::path dir = tmp / (std::string(l.name) + "_lanes");
        const std::string cmd = with_lanes(train(std::string("--steps 6 ") + l.flags + " --out " + dir.string()), micro);
        ASSERT_NE(cmd.find("--thread-split batch"), std::string::npos) << cmd;
        run((l.np > 1 ? mpirun(l.np) : std::string()) + cmd, l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
}

// The fused attention kernel (the default) against the materialized one: the same losses and
// parameters to fp32 rounding on one process, under full and selective recomputation, with tensor and
// sequence parallelism (the heads split over the ranks), in a pipeline, and with lanes; in bf16
// within the 16-bit layouts' noise. The layout tests above all run fused.
TEST_F(ParallelLayouts, FusedAttentionEqualsMaterialized) {
    const fs::path single = tmp / "materialized";
    run(train("--steps 6 --attention materialized --out " + single.string()), "materialized");
    const Layout layouts[] = {
        {"fused", 1, "--attention fused"},
        {"fused_recompute_full", 1, "--attention fused --recompute full"},
        {"fused_recompute_selective", 1, "--attention fused --recompute selective"},
        {"fused_tp2_sp", 2, "--attention fused --tp 2 --sequence-parallel"},
        {"fused_pp2", 2, "--attention fused --pp 2 --schedule 1f1b"},
    };
    for (const Layout& l : layouts) {
        const fs::path dir = tmp / l.name;
        run((l.np > 1 ? mpirun(l.np) : std::string()) + train(std::string("--steps 6 ") + l.flags + " --out " + dir.string()),
            l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
    // lanes: two threads, each running whole sequences through the fused kernel
    std::string lanes = train("--steps 6 --attention fused --out " + (tmp / "fused_lanes").string());
    lanes = std::regex_replace(lanes, std::regex("--micro-batch 1 "), "--micro-batch 4 ");
    lanes = std::regex_replace(lanes, std::regex("--threads 1 "), "--threads 2 --thread-split batch ");
    run(lanes, "fused_lanes");
    shardlm::test::expect_same_losses(single, tmp / "fused_lanes", 0, "fused_lanes");
    // bf16: both kernels on the same 16-bit activations
    const fs::path m16 = tmp / "materialized_bf16", f16 = tmp / "fused_bf16";
    run(train("--steps 6 --precision bf16 --attention materialized --out " + m16.string()), "materialized_bf16");
    run(train("--steps 6 --precision bf16 --attention fused --out " + f16.string()), "fused_bf16");
    shardlm::test::expect_same_losses(m16, f16, 0, "bf16", 2e-3);
}

// --collectives mpi (the MPI library's all-reduce, reduce-scatter, all-gather) trains the layouts
// that use each of them to the one-process run, as the ring does (the sums to rounding, not bits).
TEST_F(ParallelLayouts, MpiCollectivesEqualOneProcess) {
    const fs::path single = tmp / "single";
    run(train("--steps 6 --out " + single.string()), "single");
    for (const Layout& l : {Layout{"dp2_zero1_mpi", 2, "--dp 2 --zero 1 --collectives mpi"},
                            Layout{"tp2_sp_mpi", 2, "--tp 2 --sequence-parallel --collectives mpi"},
                            Layout{"dp2_tp2_zero3_mpi", 4, "--dp 2 --tp 2 --zero 3 --collectives mpi"}}) {
        const fs::path dir = tmp / l.name;
        run(mpirun(l.np) + train(std::string("--steps 6 ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
}

TEST_F(ParallelLayouts, CheckpointsResumeAcrossLayouts) {
    const fs::path ref = tmp / "ref", run_dir = tmp / "chain";
    run(train("--steps 10 --out " + ref.string()), "ref");
    const std::string out = " --ckpt-every 1 --out " + run_dir.string();
    run(mpirun(4) + train("--steps 3 --tp 2 --pp 2" + out), "tp2pp2");                  // writes steps 1..3
    run(mpirun(4) + train("--steps 5 --dp 4 --zero 1 --resume" + out), "dp4");            // 4, 5
    run(train("--steps 7 --resume" + out), "one");                                       // 6, 7
    run(mpirun(2) + train("--steps 10 --pp 2 --schedule gpipe --resume" + out), "pp2");  // 8, 9, 10
    // (each run of the chain also validates at its own last step: compare the training curve)
    shardlm::test::expect_same_losses(ref, run_dir, 0, "tp2xpp2 -> dp4 -> one process -> pp2", 1e-5, false);
    shardlm::test::expect_same_params(ref / "ckpt_00000010", run_dir / "ckpt_00000010", "the chain's final weights");
    // the final checkpoint is pieces written by the two pipeline ranks; export assembles an HF directory
    EXPECT_TRUE(fs::exists(run_dir / "ckpt_00000010" / "model.rank00001-of-00002.safetensors"));
    run(kBin + " export --init " + (run_dir / "ckpt_00000010").string() + " --out " + (tmp / "hf").string(), "export");
    shardlm::test::expect_same_params(ref / "ckpt_00000010", tmp / "hf", "exported");
}

// Rows "  <name>  <allocated> <formula>" of --memory-report and "<group> <op> calls n sent X theory Y"
// of --comm-report: equal, on every rank.
TEST_F(ParallelLayouts, ReportsMatchTheFormulas) {
    const Layout layouts[] = {
        {"tp2", 2, "--tp 2"},
        {"tp2_full", 2, "--tp 2 --recompute full"},  // the recomputed forward's all-reduces count too
        {"tp2_sp_zero2", 4, "--dp 2 --tp 2 --sequence-parallel --zero 2"},
        {"tp2_sp_bf16", 2, "--tp 2 --sequence-parallel --precision bf16"},  // 16-bit activations gathered at 2 bytes
        {"tp2_sp_full", 2, "--tp 2 --sequence-parallel --recompute full"},
        {"pp2_gpipe", 2, "--pp 2 --schedule gpipe"},
        {"pp4_1f1b", 4, "--pp 4"},
        {"dp2_tp2_pp2_zero1", 8, "--dp 2 --tp 2 --pp 2 --zero 1"},
        {"dp2_pp2_zero3_zbh1", 4, "--dp 2 --pp 2 --zero 3 --schedule zb-h1"},  // chunks gathered per step
    };
    for (const Layout& l : layouts) {
        const std::string out =
            run(mpirun(l.np) + train(std::string("--steps 1 --memory-report --comm-report ") + l.flags), l.name);
        std::regex mem(R"(\n  (parameters|gradients|optimizer state|communication buffers|model states total|tensor-parallel shard|micro-batches held)\s+([0-9.]+)\s+([0-9.]+))");
        int rows = 0;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), mem); it != std::sregex_iterator(); ++it, rows++)
            EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << l.name << ": " << (*it)[1].str() << "\n" << out;
        EXPECT_GE(rows, 6 * l.np) << l.name << "\n" << out;
        std::regex comm(R"(\n  (\w+)\s+(\w+)\s+calls\s+\d+\s+sent\s+(\d+)\s+theory\s+(\d+))");
        std::set<std::string> groups;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), comm); it != std::sregex_iterator(); ++it) {
            EXPECT_EQ((*it)[3].str(), (*it)[4].str()) << l.name << ": " << (*it)[1].str() << " " << (*it)[2].str() << "\n"
                                                      << out;
            groups.insert((*it)[1].str() + " " + (*it)[2].str());
        }
        const std::string name = l.name;
        if (name.find("tp2") == 0 || name.find("_tp2") != std::string::npos) {
            const bool sp = name.find("sp") != std::string::npos;
            EXPECT_TRUE(groups.count(sp ? "tp all_gather" : "tp all_reduce")) << l.name << "\n" << out;
        }
        if (name.find("pp") != std::string::npos) {
            EXPECT_TRUE(groups.count("pp send_recv")) << l.name << "\n" << out;
        }
    }
    // GPipe holds all 8 micro-batches on both stages; 1F1B at most p - stage
    const std::string g = run(mpirun(2) + train("--steps 1 --memory-report --pp 2 --schedule gpipe"), "gpipe_slots");
    EXPECT_NE(g.find("micro-batches held                8            8"), std::string::npos) << g;
    const std::string f = run(mpirun(4) + train("--steps 1 --memory-report --pp 4"), "1f1b_slots");
    for (const char* held : {"held                4            4", "held                3            3",
                             "held                2            2", "held                1            1"})
        EXPECT_NE(f.find(held), std::string::npos) << held << "\n" << f;
}

TEST_F(ParallelLayouts, TraceAndBubble) {
    const std::string trace = (tmp / "trace.json").string();
    const std::string out = run(mpirun(4) + train("--steps 2 --pp 4 --trace " + trace), "trace");
    EXPECT_NE(out.find("pipeline bubble (last step, mean over ranks): measured"), std::string::npos) << out;
    EXPECT_NE(out.find("theory (p-1)/(v m + p-1) = 0.273"), std::string::npos) << out;
    const nlohmann::json j = nlohmann::json::parse(shardlm::io::read_file(trace));
    std::set<int> pids;
    std::set<std::string> names;
    for (const auto& e : j["traceEvents"]) {
        pids.insert(e["pid"].get<int>());
        names.insert(e["name"].get<std::string>());
    }
    EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
    for (const char* n : {"F0", "B7", "send_recv", "all_reduce", "optimizer step"})
        EXPECT_TRUE(names.count(n)) << n;
    EXPECT_NEAR(j["otherData"]["bubble_theory"].get<double>(), 3.0 / 11.0, 1e-4);
}

TEST_F(ParallelLayouts, ScheduleVerbAndLayoutErrors) {
    const std::string c = run(kBin + " schedule --pp 4 --micro-batches 8 --schedule 1f1b", "schedule");
    EXPECT_NE(c.find("stage 3 |.   .   .   F0  B0  B0"), std::string::npos) << c;
    fails(mpirun(3) + train("--steps 1 --tp 3"), "--tp 3 must divide the number of attention heads (4)");
    auto replace = [](std::string cmd, const std::string& from, const std::string& to) {
        return cmd.replace(cmd.find(from), from.size(), to);
    };
    fails(replace(mpirun(2) + train("--steps 1 --pp 2 --schedule interleaved --virtual-stages 2"), "--global-batch 8",
                  "--global-batch 7"),
          "multiple of --pp");
    fails(mpirun(4) + train("--steps 1 --pp 2 --pp-split 1,2"), "--pp-split '1,2' gives 2 chunks of 3 blocks");
    fails(replace(mpirun(2) + train("--steps 1 --tp 2 --sequence-parallel"), "--seq 16", "--seq 15"),
          "--seq 15 must be a multiple of 2");
}

// Checkpoints written under every ZeRO stage (2 data-parallel ranks) resume under several other
// layouts: one process, two data-parallel ranks at the next ZeRO stage, tensor parallel, pipeline
// parallel. Every reader's curve and final weights equal the uninterrupted run's.
TEST_F(ParallelLayouts, EveryZeroStageWriterResumesUnderEveryReader) {
    const fs::path ref = tmp / "ref";
    run(train("--steps 5 --out " + ref.string()), "ref");
    for (int z = 0; z <= 3; z++) {
        const std::string writer = "dp2_zero" + std::to_string(z);
        const fs::path w = tmp / writer;
        run(mpirun(2) + train("--steps 3 --dp 2 --zero " + std::to_string(z) + " --out " + w.string()), writer);
        const Layout readers[] = {{"one_process", 1, ""},
                                  {"dp2_next_zero", 2, ""},
                                  {"tp2", 2, "--tp 2"},
                                  {"pp2", 2, "--pp 2 --schedule 1f1b"}};
        for (const Layout& r : readers) {
            const std::string name = writer + "_to_" + r.name;
            const fs::path dir = tmp / name;
            fs::copy(w, dir, fs::copy_options::recursive);
            std::string flags = r.flags;
            if (std::string(r.name) == "dp2_next_zero") flags = "--dp 2 --zero " + std::to_string((z + 1) % 4);
            run((r.np > 1 ? mpirun(r.np) : "") + train("--steps 5 --resume " + flags + " --out " + dir.string()), name);
            shardlm::test::expect_same_losses(ref, dir, 0, name, 1e-5, false);
            shardlm::test::expect_same_params(ref / "ckpt_00000005", dir / "ckpt_00000005", name);
        }
    }
}

}  // namespace

namespace {

// Every byte of every tensor file of two checkpoints equal (model and optimiser state of every rank).
void expect_identical_tensors(const fs::path& a, const fs::path& b, const std::string& what) {
    int files = 0;
    for (const auto& e : fs::directory_iterator(a)) {
        if (e.path().extension() != ".safetensors") continue;
        files++;
        EXPECT_EQ(shardlm::io::read_file(e.path().string()),
                  shardlm::io::read_file((b / e.path().filename()).string()))
            << what << ": " << e.path().filename();
    }
    EXPECT_GE(files, 2) << what;
}

}  // namespace

// Zero-bubble pipelines (Qi et al. 2023): W only moves in time, so ZB-H1 equals 1F1B of the same layout
// to the bit (model and optimiser state); ZB-H1 and ZBV compose with data parallelism (ZeRO-1/2) and
// tensor/sequence parallelism and match the one-process run; ZeRO-3 and full recomputation are refused
// with the reason; the schedule verb prints them with their bubble.
TEST_F(ParallelLayouts, ZeroBubbleSchedules) {
    const fs::path single = tmp / "single";
    run(train("--steps 6 --out " + single.string()), "single");
    const Layout pairs[] = {
        {"pp2", 2, "--pp 2"},
        {"pp4", 4, "--pp 4"},
        {"dp2_pp2_zero1", 4, "--dp 2 --pp 2 --zero 1"},
        {"tp2_pp2", 4, "--tp 2 --pp 2"},
        // ZeRO-3: zb-h1 gathers a chunk at the schedule's Unshard actions, 1F1B a unit per pass
        {"dp2_pp2_zero3", 4, "--dp 2 --pp 2 --zero 3"},
    };
    for (const Layout& l : pairs) {
        const fs::path ref = tmp / (std::string(l.name) + "_1f1b"), zb = tmp / (std::string(l.name) + "_zbh1");
        run(mpirun(l.np) + train(std::string("--steps 6 --schedule 1f1b ") + l.flags + " --out " + ref.string()),
            ref.filename().string());
        run(mpirun(l.np) + train(std::string("--steps 6 --schedule zb-h1 ") + l.flags + " --out " + zb.string()),
            zb.filename().string());
        shardlm::test::expect_same_losses(ref, zb, 0, zb.filename().string(), 0.0);  // to the bit
        expect_identical_tensors(ref / "ckpt_00000006", zb / "ckpt_00000006", zb.filename().string());
        shardlm::test::expect_same_losses(single, zb, 0, zb.filename().string());
        shardlm::test::expect_same_params(single / "ckpt_00000006", zb / "ckpt_00000006", zb.filename().string());
    }
    const Layout others[] = {
        {"dp2_pp2_zero2_zbh1", 4, "--dp 2 --pp 2 --zero 2 --schedule zb-h1"},
        {"tp2_sp_pp2_zbh1_selective", 4, "--tp 2 --sequence-parallel --pp 2 --schedule zb-h1 --recompute selective"},
        {"pp2_zbv", 2, "--pp 2 --schedule zbv"},
        {"tp2_pp2_zbv", 4, "--tp 2 --pp 2 --schedule zbv"},
        {"dp2_pp2_zero2_zbv", 4, "--dp 2 --pp 2 --zero 2 --schedule zbv"},
        {"dp2_pp2_zero1_zbv", 4, "--dp 2 --pp 2 --zero 1 --schedule zbv"},
        {"dp2_pp2_zero3_zbv", 4, "--dp 2 --pp 2 --zero 3 --schedule zbv"},
    };
    for (const Layout& l : others) {
        const fs::path dir = tmp / l.name;
        run(mpirun(l.np) + train(std::string("--steps 6 ") + l.flags + " --out " + dir.string()), l.name);
        shardlm::test::expect_same_losses(single, dir, 0, l.name);
        shardlm::test::expect_same_params(single / "ckpt_00000006", dir / "ckpt_00000006", l.name);
    }
    // a ZBV checkpoint (the first rank's tied copy is not saved) resumes in one process and goes on unchanged
    const fs::path cont = tmp / "pp2_zbv_then_one";
    fs::copy(tmp / "pp2_zbv", cont, fs::copy_options::recursive);
    run(train("--steps 8 --resume --out " + cont.string()), "zbv_resume");
    const fs::path single8 = tmp / "single8";
    run(train("--steps 8 --out " + single8.string()), "single8");
    shardlm::test::expect_same_losses(single8, cont, 0, "zbv -> one process", 1e-5, /*val=*/false);

    fails(mpirun(2) + train("--steps 1 --pp 2 --recompute full --schedule zbv"), "--recompute selective or none");
    fails(mpirun(4) + train("--steps 1 --pp 4 --schedule zbv"), "chunks");  // 8 chunks of a 6-unit model

    const std::string h = run(kBin + " schedule --pp 4 --micro-batches 8 --schedule zb-h1", "zbh1_chart");
    EXPECT_NE(h.find("bubble 0.111"), std::string::npos) << h;
    EXPECT_NE(h.find("W0"), std::string::npos) << h;
    const std::string v = run(kBin + " schedule --pp 4 --micro-batches 8 --schedule zbv", "zbv_chart");
    EXPECT_NE(v.find("bubble 0.059"), std::string::npos) << v;
}

// The memory report counts ZB-H1's slots (p on every stage: a micro-batch lives until its W) and the
// buffers B keeps for W; the trace shows B and W as separate spans.
TEST_F(ParallelLayouts, ZeroBubbleReportsAndTrace) {
    const std::string trace = (tmp / "zb_trace.json").string();
    const std::string out =
        run(mpirun(2) + train("--steps 2 --memory-report --pp 2 --schedule zb-h1 --trace " + trace), "zb_report");
    EXPECT_NE(out.find("theory 1 - 3m/max(3m + p-1, 2m + 2p-1) = 0.040"), std::string::npos) << out;
    std::regex held(R"(micro-batches held\s+(\d+)\s+(\d+))");
    int rows = 0;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), held); it != std::sregex_iterator(); ++it, rows++) {
        EXPECT_EQ((*it)[1].str(), "2") << out;
        EXPECT_EQ((*it)[2].str(), "2") << out;
    }
    EXPECT_EQ(rows, 2) << out;
    EXPECT_NE(out.find("W deferred: one set per slot"), std::string::npos) << out;
    const nlohmann::json j = nlohmann::json::parse(shardlm::io::read_file(trace));
    std::set<std::string> names;
    for (const auto& e : j["traceEvents"]) names.insert(e["name"].get<std::string>());
    for (const char* n : {"F7", "B7", "W7", "W0"}) EXPECT_TRUE(names.count(n)) << n;
}
