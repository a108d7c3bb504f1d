// The peak loops (kernels/peak_loops.h) and the instruction set a product's share of the peak is measured
// against (kernels/machine.h: product_isa): each loop runs where its ISA is, its rate is what its ISA can
// do, and a bf16 product is measured against the peak of what ran it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/machine.h"
#include "shardlm/platform/peak_loops.h"

namespace {

using namespace shardlm::kernels;
using namespace shardlm::platform;

// GFLOP/s of one thread running chains(iters) once
double one_run(float (*chains)(long), double flops_per_iter, long iters) {
    const auto t0 = std::chrono::steady_clock::now();
    const float s = chains(iters);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(std::isfinite(s));
    return double(iters) * flops_per_iter / t / 1e9;
}

// Each loop's best of five runs of about 20 ms, the loops taking turns (a neighbour's burst slows them alike).
// Which run: the fp32 FMA, VDPBF16PS where the CPU has AVX512_BF16, AMX's tiles where it has them.
TEST(PeakLoops, EachRunsWhereItsIsaIsAndOrdersAsTheIsasDo) {
    struct Loop {
        float (*chains)(long);
        double flops;
        long iters;
        double best = 0;
    };
    std::vector<Loop> loops = {{fp32_fma_chains, fp32_fma_flops_per_iter(), 0}};
    if (has_bf16_dot()) loops.push_back({bf16_dot_chains, kBf16DotFlopsPerIter, 0});
    if (has_amx_bf16()) loops.push_back({amx_bf16_chains, kAmxFlopsPerIter, 0});
    for (Loop& l : loops) l.iters = std::max(1000L, long(0.02 * one_run(l.chains, l.flops, 10000) * 1e9 / l.flops));
    for (int r = 0; r < 5; r++)
        for (Loop& l : loops) l.best = std::max(l.best, one_run(l.chains, l.flops, l.iters));
    const double fma = loops[0].best;
    EXPECT_GT(fma, 1.0);  // any x86-64 core of this decade: tens of GFLOP/s
    if (!has_bf16_dot()) {
        GTEST_SKIP() << "no AVX512_BF16 on this CPU: the VDPBF16PS and AMX loops do not run (the fp32 FMA loop ran at "
                     << fma << " GFLOP/s)";
    }
    // VDPBF16PS: 64 flops an instruction against the FMA's 32: half to twice the FMA's rate (Intel Xeons issue it
    // at half the FMA's rate, Zen 4/5 at the same)
    const double dot = loops[1].best;
    EXPECT_GT(dot, 0.3 * fma);
    EXPECT_LT(dot, 3.0 * fma);
    if (!has_amx_bf16()) GTEST_SKIP() << "AMX: " << amx_unavailable();
    // a TDPBF16PS tile product: 16,384 flops; AMX's bf16 rate is several times VDPBF16PS's
    EXPECT_GT(loops[2].best, 2.0 * dot) << "AMX " << loops[2].best << " GFLOP/s, VDPBF16PS " << dot;
}

// What each library runs bf16 products on here, and whose peak a share of it is taken against.
TEST(PeakLoops, ABf16ProductIsMeasuredAgainstThePeakOfTheIsaThatRanIt) {
    EXPECT_EQ(product_isa(GemmBackend::OpenBlas, GemmKind::Bf16), ProductIsa::Fp32Fma);  // widened to fp32
    for (GemmBackend lib : {GemmBackend::OpenBlas, GemmBackend::OneDnn, GemmBackend::Native})
        EXPECT_EQ(product_isa(lib, GemmKind::Fp32), ProductIsa::Fp32Fma);
    EXPECT_EQ(product_isa(GemmBackend::Native, GemmKind::Bf16),
              gemm_has_native_bf16() ? ProductIsa::Bf16Dot : ProductIsa::Fp32Fma);
    const std::string isa = onednn_isa();
    const ProductIsa dnnl = product_isa(GemmBackend::OneDnn, GemmKind::Bf16);
    if (!onednn_makes_bf16()) {
        EXPECT_EQ(dnnl, ProductIsa::Fp32Fma);
    } else if (isa == "avx512_core_amx") {
        EXPECT_EQ(dnnl, ProductIsa::AmxBf16);
    } else if (isa == "avx512_core_bf16") {
        EXPECT_EQ(dnnl, ProductIsa::Bf16Dot);
    }
    // auto: the best of the libraries here
    EXPECT_EQ(bf16_products_isa(GemmBackend::Auto), std::max(dnnl, product_isa(GemmBackend::Native, GemmKind::Bf16)));
    MachineInfo m;
    m.fp32_peak_gflops = 100, m.bf16_peak_gflops = 200, m.amx_peak_gflops = 1600;
    EXPECT_EQ(m.peak(ProductIsa::Fp32Fma), 100);
    EXPECT_EQ(m.peak(ProductIsa::Bf16Dot), 200);
    EXPECT_EQ(m.peak(ProductIsa::AmxBf16), 1600);
    m.amx_peak_gflops = 0, m.bf16_peak_gflops = 0;  // not measured: the fp32 peak stands in
    EXPECT_EQ(m.peak(ProductIsa::AmxBf16), 100);
}

// An oversubscribed node's fix is what would help: fewer threads where the ranks alone fit the CPUs,
// fewer ranks where they do not (never --threads 1 to a run that has it).
TEST(MachineFindings, OversubscriptionSuggestsWhatWouldHelp) {
    MachineInfo m;
    m.cpus_online = m.cpus_allowed = 2;
    m.gemm = GemmBackend::OneDnn;
    auto one = [&](int threads, int ranks) {
        std::string all;
        for (const std::string& f : findings(m, threads, ranks, false)) all += f + "\n";
        return all;
    };
    EXPECT_NE(one(1, 4).find("4 ranks x 1 thread on 2 CPUs: the node is oversubscribed"), std::string::npos) << one(1, 4);
    EXPECT_NE(one(1, 4).find("fix: at most 2 ranks on this node"), std::string::npos) << one(1, 4);
    EXPECT_EQ(one(1, 4).find("--threads 1"), std::string::npos) << one(1, 4);
    EXPECT_NE(one(2, 2).find("fix: --threads 1, or fewer ranks"), std::string::npos) << one(2, 2);
    EXPECT_NE(one(2, 4).find("fix: at most 2 ranks on this node and --threads 1"), std::string::npos) << one(2, 4);
    EXPECT_EQ(one(1, 2), "");
}

}  // namespace
