// Data parallelism and ZeRO through the binary under mpirun: for dp in {2, 4} x zero in {0..3}, ten
// steps with gradient accumulation give the losses of the single-process run of the same global
// batch and the same final parameters; a run over TCP; checkpoints written by dp=4/ZeRO-3 resumed
// under dp=2/ZeRO-1 and under one process; memory and communication reports equal their formulas.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "shardlm/io/atomic_file.h"
#include "shardlm/io/safetensors.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
const std::string kFix = kSrc + "/tests/fixtures/gpt2_e2e";

class DataParallel : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_dp_" + std::to_string(::getpid()));
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }

    // G = 8 rows of T = 16, micro-batch 1: dp=2 runs 4 micro-batches per rank, dp=4 two. Adam eps 1e-6:
    // with 1e-8, Adam turns the rounding noise of gradients that are exactly 0 in theory (the key bias:
    // softmax is shift-invariant) into steps of up to lr, which differ with any change of summation order.
    static std::string train(const std::string& extra) {
        return kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --data-order sequential --seq 16" +
               " --global-batch 8 --micro-batch 1 --optimizer adamw --lr 3e-3 --weight-decay 0.1 --grad-clip 1.0" +
               " --eps 1e-6 --threads 1 --bucket-mb 0.05 " + extra;
    }
    static std::string mpirun(int np, const std::string& mca = "") {
        return std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe " + mca + " -np " + std::to_string(np) + " ";
    }
    std::string run(const std::string& cmd, const std::string& name) {
        std::string log = (tmp / (name + ".log")).string();
        int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
        std::string out = shardlm::io::read_file(log);
        EXPECT_EQ(rc, 0) << cmd << "\n" << out;
        return out;
    }
    static void expect_same_losses(const fs::path& a, const fs::path& b, size_t from, const std::string& what) {
        shardlm::test::expect_same_losses(a, b, from, what);
    }
    // The key bias apart, to 1e-5 absolute (measured up to 2.9e-7 in the sanitizers' clang build on an
    // AVX-512 Xeon; an lr-sized error would be 3e-3): see run_dir.h.
    static void expect_same_params(const fs::path& a, const fs::path& b, const std::string& what) {
        shardlm::test::expect_same_params(a / "ckpt_00000010", b / "ckpt_00000010", what, 1e-5f, 1e-5f);
    }
};

TEST_F(DataParallel, EveryZeroStageEqualsOneProcess) {
    // validation over the whole shard (43 rows: uneven over 2 and 4 ranks) every 5 steps
    const std::string val = " --val-data " + kFix + "/data.bin --val-batches 0 --val-every 5";
    const fs::path single = tmp / "single";
    run(train("--steps 10 --out " + single.string() + val), "single");
    for (int np : {2, 4})
        for (int zero : {0, 1, 2, 3}) {
            std::string name = "dp" + std::to_string(np) + "_zero" + std::to_string(zero);
            const fs::path dir = tmp / name;
            run(mpirun(np) + train("--steps 10 --zero " + std::to_string(zero) + " --out " + dir.string() + val), name);
            expect_same_losses(single, dir, 0, name);
            expect_same_params(single, dir, name);
        }
}

TEST_F(DataParallel, OverTcp) {
    const fs::path single = tmp / "single", tcp = tmp / "tcp";
    run(train("--steps 10 --out " + single.string()), "single");
    run(mpirun(2, "--mca btl self,tcp") + train("--steps 10 --zero 2 --out " + tcp.string()), "tcp");
    expect_same_losses(single, tcp, 0, "tcp");
}

TEST_F(DataParallel, CheckpointsResumeAcrossLayouts) {
    const fs::path ref = tmp / "ref", a = tmp / "a", b = tmp / "b";
    run(train("--steps 10 --out " + ref.string()), "ref");
    // dp=4 ZeRO-3 writes the step-5 checkpoint (each rank its own optimiser shard) ...
    run(mpirun(4) + train("--steps 5 --zero 3 --out " + a.string()), "a");
    EXPECT_TRUE(fs::exists(a / "ckpt_00000005" / "optimizer.rank00003-of-00004.safetensors"));
    EXPECT_TRUE(fs::exists(a / "ckpt_00000005" / "model.rank00003-of-00004.safetensors"));
    fs::copy(a, b, fs::copy_options::recursive);
    // ... and the run continues under dp=2 ZeRO-1 and under one process as if nothing had changed
    run(mpirun(2) + train("--steps 10 --zero 1 --resume --out " + a.string()), "a2");
    run(train("--steps 10 --resume --out " + b.string()), "b2");
    expect_same_losses(ref, a, 0, "dp4/zero3 -> dp2/zero1");
    expect_same_losses(ref, b, 0, "dp4/zero3 -> one process");
    expect_same_params(ref, a, "dp4/zero3 -> dp2/zero1");
    expect_same_params(ref, b, "dp4/zero3 -> one process");
}

// "  <name>   <allocated MiB>   <formula MiB>" rows of --memory-report, and the all_reduce /
// reduce_scatter / all_gather rows of --comm-report ("sent X theory Y").
TEST_F(DataParallel, MemoryAndCommunicationReportsMatchTheFormulas) {
    for (int zero : {0, 1, 2, 3}) {
        std::string out = run(mpirun(2) + train("--steps 1 --zero " + std::to_string(zero) + " --memory-report --comm-report"),
                              "report" + std::to_string(zero));
        for (const char* row : {"parameters", "gradients", "optimizer state", "communication buffers", "model states total"}) {
            std::regex re(std::string("  ") + row + R"(\s+([0-9.]+)\s+([0-9.]+))");
            int seen = 0;
            for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
                EXPECT_EQ((*it)[1].str(), (*it)[2].str()) << "ZeRO-" << zero << " " << row << "\n" << out;
                seen++;
            }
            EXPECT_EQ(seen, 2) << "ZeRO-" << zero << " row '" << row << "' on both ranks\n" << out;
        }
        // every row of every group (dp, world): sent == theory; the dp rows of each stage's ops
        std::regex comm(R"((dp|world)\s+(all_reduce|reduce_scatter|all_gather)\s+calls\s+\d+\s+sent\s+(\d+)\s+theory\s+(\d+))");
        int seen = 0;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), comm); it != std::sregex_iterator(); ++it) {
            EXPECT_EQ((*it)[3].str(), (*it)[4].str()) << "ZeRO-" << zero << " " << (*it)[1].str() << " " << (*it)[2].str()
                                                       << "\n" << out;
            seen++;
        }
        EXPECT_EQ(seen, zero == 0 ? 4 : 6) << out;  // per rank: world, and dp all-reduce or reduce-scatter + gather
    }
}

TEST_F(DataParallel, WrongFactorisationIsAClearError) {
    std::string log = (tmp / "bad.log").string();
    int rc = std::system((mpirun(4) + train("--steps 1 --dp 3") + " > " + log + " 2>&1").c_str());
    EXPECT_NE(rc, 0);
    std::string out = shardlm::io::read_file(log);
    EXPECT_NE(out.find("dp(3) * tp(1) * pp(1) = 3 != world size 4"), std::string::npos) << out;
}

}  // namespace
