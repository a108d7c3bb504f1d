// The planner against published training runs it was not tuned on (docs/PLANNER.md, "Validation").
// tests/planner/published_runs.json (gathered from papers and repositories; every case cites its
// source and says what it assumed) is split in two: the rules and the per-generation constants of the
// GPU presets are chosen on the "fit" cases only (planner::fit_constants, bench/fit_planner.cpp --fit),
// and the error is reported on the "held_out" cases, gathered after the rules' round began. Each case is
// read as its source states it and as a user who names only the plan contract's keys would ask it.
// These tests hold the presets to the fit and the errors to what they reached.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "shardlm/planner/validation.h"

namespace {

using namespace shardlm;

std::vector<planner::PublishedCase> cases(planner::Reading reading = planner::Reading::Stated) {
    return planner::load_published_cases(std::string(SHARDLM_SOURCE_DIR) + "/tests/planner/published_runs.json",
                                         reading);
}

TEST(PublishedRuns, EveryCaseIsAConsistentPolicyWithASourceAndASplit) {
    const auto all = cases();
    ASSERT_GE(all.size(), 290u);
    std::map<std::string, int> held_out;
    for (planner::Reading reading : {planner::Reading::Stated, planner::Reading::Contract})
        for (const auto& c : cases(reading)) {
            EXPECT_FALSE(c.source.empty()) << c.id;
            const planner::CaseResult r = planner::predict(c);
            EXPECT_TRUE(r.estimate.consistent) << c.id << ": " << r.estimate.reason;
            EXPECT_TRUE(c.tokens_per_s_per_gpu > 0 || c.memory_bytes > 0) << c.id;
            if (c.split == "held_out" && reading == planner::Reading::Stated) held_out[c.family]++;
        }
    for (const char* family : {"nanotron", "megatron-bridge", "zero-bubble", "fms-fsdp", "olmo", "mosaic"})
        EXPECT_GE(held_out[family], 3) << family << ": too few held-out cases to say anything";
}

// The next round's held-out set (docs/PLANNER.md, "The split"), sealed: gathered from sources no case above
// came from and committed before any rule of its round. Only that it loads and that every case is a policy
// the planner can price, in both readings; its errors are read once, when the round ends.
TEST(PublishedRuns, TheSealedNextRoundLoads) {
    const std::string path = std::string(SHARDLM_SOURCE_DIR) + "/tests/planner/published_runs_round4.json";
    std::set<std::string> earlier;
    for (const auto& c : cases()) earlier.insert(c.id);
    for (planner::Reading reading : {planner::Reading::Stated, planner::Reading::Contract}) {
        const auto sealed = planner::load_published_cases(path, reading);
        ASSERT_EQ(sealed.size(), 55u);
        for (const auto& c : sealed) {
            EXPECT_EQ(c.split, "held_out") << c.id;
            EXPECT_EQ(earlier.count(c.id), 0u) << c.id;
            EXPECT_TRUE(planner::predict(c).estimate.consistent) << c.id;
        }
    }
}

// The presets' constants are what the fit cases give: nobody tuned them on the held-out ones.
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

// One split's throughput and memory scores in one reading, printed.
std::pair<planner::Score, planner::Score> scores(planner::Reading reading, const std::string& split) {
    planner::Score time, memory;
    for (const auto& c : cases(reading)) {
        if (c.split != split) continue;
        const planner::CaseResult r = planner::predict(c);
        time.add(r.throughput_ratio, 0.15);
        memory.add(r.memory_ratio, 0.10);
    }
    std::printf("  %s %s: throughput %d of %d within 15 %% (median %.1f %%), memory %d of %d within 10 %%\n",
                split.c_str(), reading == planner::Reading::Stated ? "stated" : "contract", time.within, time.total,
                100 * time.median_error(), memory.within, memory.total);
    return {time, memory};
}

// The fit cases' error in both readings, held where it is (docs/PLANNER.md): a change that loses
// ground on the cases the rules were chosen on fails.
TEST(PublishedRuns, FitError) {
    for (planner::Reading reading : {planner::Reading::Stated, planner::Reading::Contract}) {
        const bool stated = reading == planner::Reading::Stated;
        const auto [time, memory] = scores(reading, "fit");
        EXPECT_GE(time.within, stated ? 147 : 130) << "of " << time.total << " fit throughput figures within 15 %";
        EXPECT_LE(time.median_error(), stated ? 0.084 : 0.094);
        EXPECT_GE(memory.within, stated ? 33 : 20) << "of " << memory.total << " fit memory figures within 10 %";
    }
}

// The held-out error in both readings, as reported at the end of the round (docs/PLANNER.md: 38 and
// 51 of 98 throughput figures within 15 %, 4 and 3 of 26 memory figures within 10 %; the goals, 80 %
// and a median of 8 %, are far off): a change that loses held-out ground fails.
TEST(PublishedRuns, HeldOutError) {
    for (planner::Reading reading : {planner::Reading::Stated, planner::Reading::Contract}) {
        const bool stated = reading == planner::Reading::Stated;
        const auto [time, memory] = scores(reading, "held_out");
        EXPECT_EQ(time.total, 98);
        EXPECT_GE(time.within, stated ? 38 : 51) << "of " << time.total << " held-out throughput figures within 15 %";
        EXPECT_LE(time.median_error(), stated ? 0.184 : 0.145);
        EXPECT_GE(memory.within, stated ? 4 : 3) << "of " << memory.total << " held-out memory figures within 10 %";
    }
}

}  // namespace
