// Issue 24's validation protocol: the planner against published training runs it was not tuned on.
// tests/planner/published_runs.json (gathered from papers and repositories; every case cites its
// source and says what it assumed) is split in two: the per-generation constants of the GPU presets
// are chosen on the "fit" half only (planner::fit_constants, bench/fit_planner.cpp --fit), and the
// error is reported on the "held_out" half (docs/PLANNER.md). These tests hold the presets to that fit
// and the held-out error to what it reached.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "shardlm/planner/validation.h"

namespace {

using namespace shardlm;

std::vector<planner::PublishedCase> cases() {
    return planner::load_published_cases(std::string(SHARDLM_SOURCE_DIR) + "/tests/planner/published_runs.json");
}

TEST(PublishedRuns, EveryCaseIsAConsistentPolicyWithASourceAndASplit) {
    const auto all = cases();
    ASSERT_GE(all.size(), 80u);
    std::map<std::string, int> held_out;
    for (const auto& c : all) {
        EXPECT_FALSE(c.source.empty()) << c.id;
        const planner::CaseResult r = planner::predict(c);
        EXPECT_TRUE(r.estimate.consistent) << c.id << ": " << r.estimate.reason;
        EXPECT_TRUE(c.tokens_per_s_per_gpu > 0 || c.memory_bytes > 0) << c.id;
        if (c.split == "held_out") held_out[c.family]++;
    }
    for (const char* family : {"megatron-a100", "zero3-scale", "megatron-h100", "fp8", "fsdp-few-nodes", "torchtitan",
                               "torchtitan-memory"})
        EXPECT_GE(held_out[family], 3) << family << ": too few held-out cases to say anything";
}

// The presets' constants are what the fit half gives: nobody tuned them on the held-out half.
TEST(PublishedRuns, ThePresetsConstantsAreTheFitHalfsFit) {
    const planner::FittedConstants f = planner::fit_constants(cases());
    std::printf("%s", f.log.c_str());
    EXPECT_NEAR(f.allocator_overhead, planner::kGpuAllocatorOverhead, 1e-9);
    EXPECT_NEAR(f.allocator_overhead_pytorch, planner::kGpuAllocatorOverheadPytorch, 1e-9);
    for (const char* gpu : {"A100-80GB", "H100-SXM"}) {
        const planner::GpuSpec g = planner::find_gpu(gpu);
        const planner::Cluster c = planner::make_cluster(g, 8, 1);
        const auto& k = f.generations.at(planner::generation(c));
        EXPECT_NEAR(k.gemm_max, g.efficiency.gemm_max, 1e-9) << gpu;
        EXPECT_NEAR(k.gemm_half_dim, g.efficiency.gemm_half_dim, 1e-9) << gpu;
        EXPECT_NEAR(k.flash_pytorch, g.efficiency.flash_pytorch, 1e-9) << gpu;
        if (g.peak_tflops_fp8 > 0) {
            EXPECT_NEAR(k.fp8_gemm_max, g.efficiency.fp8_gemm_max, 1e-9) << gpu;
            EXPECT_NEAR(k.fp8_gemm_max_pytorch, g.efficiency.fp8_gemm_max_pytorch, 1e-9) << gpu;
        }
    }
}

// The held-out error, per family. The goal is 80 % of throughput figures within +-15 % and
// 80 % of memory figures within +-10 %; this holds what the planner reaches today (docs/PLANNER.md:
// 38 of 45 and 12 of 12, both goals met), so a change that loses ground fails.
TEST(PublishedRuns, HeldOutError) {
    std::map<std::string, std::pair<planner::Score, planner::Score>> by;
    for (const auto& c : cases()) {
        if (c.split != "held_out") continue;
        const planner::CaseResult r = planner::predict(c);
        for (const std::string& key : {c.family, std::string("all")}) {
            by[key].first.add(r.throughput_ratio, 0.15);
            by[key].second.add(r.memory_ratio, 0.10);
        }
    }
    for (const auto& [family, s] : by)
        std::printf("  %-18s throughput %2d of %2d within 15 %%, memory %2d of %2d within 10 %%\n", family.c_str(),
                    s.first.within, s.first.total, s.second.within, s.second.total);
    const auto& all = by["all"];
    EXPECT_GE(all.first.within, 36) << "(the goal: 80 %) " << "of " << all.first.total << " held-out throughput figures within 15 %";
    EXPECT_GE(all.second.within, 12) << "(the goal: 80 %) of " << all.second.total << " held-out memory figures within 10 %";
    EXPECT_EQ(by["megatron-a100"].first.within, by["megatron-a100"].first.total);
}

}  // namespace
