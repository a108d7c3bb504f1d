// calibrate/: the two fits recover known constants from points made by their own models, and
// `shardlm calibrate` under mpirun writes a cluster file that `shardlm plan` reads and answers with.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "shardlm/calibrate/calibrate.h"
#include "shardlm/cost/comm.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/planner/plan_io.h"

namespace {

using namespace shardlm;
namespace fs = std::filesystem;

TEST(Calibrate, GemmCurveFitRecoversTheConstants) {
    calibrate::Calibration c;
    const double peak = 200, gmax = 0.71, half = 48;
    for (int M : {256, 1024})
        for (auto [K, N] : {std::pair{32, 256}, {64, 192}, {128, 512}, {256, 1024}, {1024, 1024}, {256, 8192}}) {
            const double d = std::min({M, N, K});
            c.gemm.push_back({M, N, K, peak * gmax * d / (d + half)});
        }
    calibrate::fit_gemm_curve(c, peak);
    EXPECT_NEAR(c.gemm_max, gmax, 1e-3);
    EXPECT_NEAR(c.gemm_half_dim, half, 0.5);
    EXPECT_LT(c.gemm_fit_rms, 1e-3);
    // noisy points: the fit stays near, and the rms reports the noise
    for (size_t i = 0; i < c.gemm.size(); i++) c.gemm[i].gflops *= i % 2 ? 1.05 : 0.95;
    calibrate::fit_gemm_curve(c, peak);
    EXPECT_NEAR(c.gemm_max, gmax, 0.05);
    EXPECT_NEAR(c.gemm_fit_rms, 0.05, 0.02);
}

TEST(Calibrate, LinkFitRecoversAlphaAndBeta) {
    calibrate::Calibration c;
    c.ranks = 4;
    const cost::Link link{3e-6, 5e9};
    for (double kib : {64.0, 256.0, 1024.0, 4096.0, 16384.0})
        for (auto [op, k] : {std::pair{"all_reduce", cost::Collective::AllReduce},
                             {"reduce_scatter", cost::Collective::ReduceScatter},
                             {"all_gather", cost::Collective::AllGather}, {"send_recv", cost::Collective::SendRecv}}) {
            const int n = k == cost::Collective::SendRecv ? 2 : c.ranks;
            c.comm.push_back({op, kib * 1024, cost::collective_time_s(k, kib * 1024, n, link), 0});
        }
    calibrate::fit_links(c);
    EXPECT_NEAR(c.alpha_us, 3.0, 1e-6);
    EXPECT_NEAR(c.link_GBps, 5.0, 1e-6);
    for (const auto& p : c.comm) EXPECT_NEAR(p.fitted_seconds / p.seconds, 1.0, 1e-9) << p.op;
}

struct Result {
    int code = 0;
    std::string out;
};
Result sh(const std::string& cmd, const fs::path& log) {
    const int rc = std::system((cmd + " < /dev/null > " + log.string() + " 2>&1").c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), fs::exists(log) ? io::read_file(log.string()) : ""};
}

class CalibrateCli : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_calibrate_" + std::to_string(::getpid()));
    const std::string bin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }
};

TEST_F(CalibrateCli, TwoRanksWriteAClusterFileThePlannerReads) {
    const std::string out = (tmp / "cpu.json").string();
    const Result r = sh(std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " + bin +
                            " calibrate --threads 1 --min-seconds 0.002 --out " + out,
                        tmp / "cal.log");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("calibrated 2 rank(s) x 1 thread(s)"), std::string::npos) << r.out;
    const planner::Cluster c = planner::load_cluster_file(out);
    EXPECT_EQ(c.num_gpus, 2);
    EXPECT_EQ(c.gpus_per_node, 2);
    EXPECT_GT(c.gpu.peak_tflops_fp32, 0);
    // the 16-bit peak is that of the ISA the bf16 products run on: the bf16 dot product's (twice the fp32 FMA's
    // on Zen 4/5, half of it on the Intel Xeons seen: vdpbf16ps at 0.5 a cycle, ../shared/MACHINE.md), AMX's
    // where oneDNN runs them on its tiles (several times more), the FMA's where they are widened
    const nlohmann::json m = nlohmann::json::parse(io::read_file(out))["measured"];
    const std::string isa = m["bf16_products_isa"];
    EXPECT_NEAR(c.gpu.peak_tflops * 1e3, m["bf16_products_peak_gflops"].get<double>(), 1e-6) << isa;
    if (isa == "AMX") {
        EXPECT_GT(m["amx_peak_gflops"].get<double>(), 2 * m["bf16_peak_gflops"].get<double>());
    } else {
        EXPECT_TRUE(isa == "AVX512_BF16" || isa == "fp32 FMA") << isa;
        EXPECT_GE(c.gpu.peak_tflops, 0.25 * c.gpu.peak_tflops_fp32);
        EXPECT_LE(c.gpu.peak_tflops, 4.0 * c.gpu.peak_tflops_fp32);
    }
    EXPECT_GT(c.efficiency.gemm_max, 0);
    EXPECT_LE(c.efficiency.gemm_max, 1);
    EXPECT_GT(c.gpu.intra_node_GBps, 0);
    EXPECT_GT(c.reserve_gb, 0.001);
    const nlohmann::json j = nlohmann::json::parse(io::read_file(out));
    EXPECT_EQ(j["measured"]["collectives"].size(), 20u);  // 4 operations x 5 sizes
    EXPECT_EQ(j["measured"]["gemm"].size(), 26u);
    // each product's own efficiency, for the planner's correction of the curve near it
    ASSERT_TRUE(c.efficiency.gemm_shapes);
    EXPECT_EQ(c.efficiency.gemm_shapes->size(), 26u);
    for (const planner::MeasuredGemm& g : *c.efficiency.gemm_shapes) {
        EXPECT_GT(g.efficiency, 0);
        EXPECT_LE(g.efficiency, 1);
    }
    EXPECT_FALSE(c.efficiency.lanes_gemm_shapes);  // one thread a rank: no lanes
    // each shape's efficiency is its measured rate over the peak of the precision it ran in
    const nlohmann::json& points = j["measured"]["gemm"];
    for (size_t i = 0; i < points.size(); i++)
        EXPECT_NEAR((*c.efficiency.gemm_shapes)[i].efficiency,
                    std::min(1.0, points[i]["gflops"].get<double>() / m["fp32_peak_gflops"].get<double>()), 1e-9);
    // rank 0's products with the other rank idle: 6 shapes measured, each one of the together list's
    const nlohmann::json& alone = j["measured"]["alone_gemm"];
    ASSERT_EQ(alone.size(), 6u);
    for (const nlohmann::json& a : alone) {
        EXPECT_GT(a["gflops"].get<double>(), 0);
        bool listed = false;
        for (const nlohmann::json& g : j["measured"]["gemm"]) listed |= g["M"] == a["M"] && g["N"] == a["N"] && g["K"] == a["K"];
        EXPECT_TRUE(listed) << a.dump();
    }
    EXPECT_EQ(j["alone_speedup"].get<double>(), c.alone_speedup);
    EXPECT_EQ(j["measured"]["collectives_backend"], "ring");
    // --collectives mpi: the links measured through the MPI library's collectives, as train would use them
    const std::string out_mpi = (tmp / "cpu-mpi.json").string();
    const Result rm = sh(std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " + bin +
                             " calibrate --threads 1 --min-seconds 0.002 --collectives mpi --out " + out_mpi,
                         tmp / "cal-mpi.log");
    ASSERT_EQ(rm.code, 0) << rm.out;
    const nlohmann::json jm = nlohmann::json::parse(io::read_file(out_mpi));
    EXPECT_EQ(jm["measured"]["collectives_backend"], "mpi");
    EXPECT_EQ(jm["measured"]["collectives"].size(), 20u);
    EXPECT_GT(planner::load_cluster_file(out_mpi).gpu.intra_node_GBps, 0);

    io::write_file_atomic((tmp / "m.json").string(),
                          R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 512, "seq_len": 32})");
    io::write_file_atomic((tmp / "p.json").string(), R"({"tp": 2, "precision": "fp32"})");
    const Result p = sh(bin + " plan --model " + (tmp / "m.json").string() + " --cluster " + out + " --policy " +
                            (tmp / "p.json").string() + " --global-batch 4 --seq 32 --json",
                        tmp / "plan.log");
    ASSERT_EQ(p.code, 0) << p.out;
    const nlohmann::json e = nlohmann::json::parse(p.out);
    EXPECT_TRUE(e["feasible"].get<bool>()) << p.out;
    EXPECT_GT(e["step_time_s"].get<double>(), 0);
}

TEST_F(CalibrateCli, BadFlagsAreNamed) {
    const Result r = sh(bin + " calibrate --precision fp8", tmp / "bad.log");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("--precision 'fp8'"), std::string::npos) << r.out;
}

}  // namespace
