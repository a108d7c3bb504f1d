// kernels/peak_loops.h: the loops that measure a core's peak arithmetic rate, 16 independent
// accumulator chains per thread on AVX-512, 12 on AVX2 (its 16 registers; 2 FMA ports x 4-cycle latency
// need >= 8), as `shardlm calibrate`
// and bench/bench_peak.cpp use them. Each returns the sum of its chains (keeps the loop alive).
#pragma once

namespace shardlm::kernels {

// fp32 FMAs: 512-bit where the CPU has AVX-512F, else 256-bit (AVX2 + FMA).
float fp32_fma_chains(long iters);
double fp32_fma_flops_per_iter();  // per thread: chains x lanes x 2

// VDPBF16PS (32 bf16 products summed into 16 fp32 lanes = 64 flops per instruction); only where
// the CPU has AVX512_BF16.
bool has_bf16_dot();
float bf16_dot_chains(long iters);
inline constexpr double kBf16DotFlopsPerIter = 16.0 * 64;

}  // namespace shardlm::kernels
