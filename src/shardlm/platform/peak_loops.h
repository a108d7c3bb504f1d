// platform/peak_loops.h: the loops that measure a core's peak arithmetic rate per instruction set (fp32 FMA,
// AVX512_BF16's VDPBF16PS, AMX's TDPBF16PS), 16 independent
// accumulator chains per thread on AVX-512, 12 on AVX2 (its 16 registers; 2 FMA ports x 4-cycle latency
// need >= 8), as `shardlm calibrate`
// and bench/bench_peak.cpp use them. Each returns the sum of its chains (keeps the loop alive).
#pragma once

namespace shardlm::platform {

// fp32 FMAs: 512-bit where the CPU has AVX-512F, else 256-bit (AVX2 + FMA).
float fp32_fma_chains(long iters);
double fp32_fma_flops_per_iter();  // per thread: chains x lanes x 2

// VDPBF16PS (32 bf16 products summed into 16 fp32 lanes = 64 flops per instruction); only where
// the CPU has AVX512_BF16.
bool has_bf16_dot();
float bf16_dot_chains(long iters);
inline constexpr double kBf16DotFlopsPerIter = 16.0 * 64;

// AMX (Intel Sapphire Rapids and later): TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into a
// 16 x 16 fp32 tile (16,384 flops); four accumulator tiles fed by two A and two B tiles, as oneDNN's 2 x 2
// blocking runs them. Only where the CPU has AMX-TILE and AMX-BF16, the kernel enables the tile state in
// XCR0, and Linux grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here).
bool has_amx_bf16();
// Why the AMX loop cannot run here ("" if it can): no AMX in CPUID, not enabled by the kernel, refused.
const char* amx_unavailable();
float amx_bf16_chains(long iters);
inline constexpr double kAmxFlopsPerIter = 4.0 * 16 * 16 * 32 * 2;

}  // namespace shardlm::platform
