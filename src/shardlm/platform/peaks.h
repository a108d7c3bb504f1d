// platform/peaks.h: a core's peak arithmetic rate per instruction set, measured with the loops of
// platform/peak_loops.h (`shardlm calibrate`, `shardlm doctor`, bench/bench_peak.cpp), and which peak a
// product is held against: a bf16 product on AMX tiles against AMX's, one on AVX512_BF16 against
// VDPBF16PS's, one widened to fp32 against the FMA peak.
#pragma once

namespace shardlm::platform {

// The instruction sets whose peaks are measured, one per kind of product kernel.
enum class ProductIsa { Fp32Fma, Bf16Dot, AmxBf16 };
const char* product_isa_name(ProductIsa isa);  // "fp32 FMA", "AVX512_BF16", "AMX"

// The peak of `isa` among measured peaks (GFLOP/s, 0: not measured); one not measured falls back to the next
// below it (AMX to the bf16 dot product, that to the fp32 FMA).
double isa_peak(ProductIsa isa, double fp32_fma, double bf16_dot, double amx);
// GFLOP/s of `threads` threads running chains(iters) each (a peak loop): iters grown until a run lasts a
// quarter of `seconds`, then such runs until `seconds` have passed, the fastest kept.
double measure_peak(int threads, double seconds, double flops_per_iter, float (*chains)(long));

}  // namespace shardlm::platform
