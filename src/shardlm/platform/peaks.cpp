#include "shardlm/platform/peaks.h"

#include <algorithm>
#include <cstdio>

#include "shardlm/core/timer.h"

namespace shardlm::platform {

const char* product_isa_name(ProductIsa isa) {
    switch (isa) {
        case ProductIsa::Fp32Fma: return "fp32 FMA";
        case ProductIsa::Bf16Dot: return "AVX512_BF16";
        case ProductIsa::AmxBf16: return "AMX";
    }
    return "?";
}

double isa_peak(ProductIsa isa, double fp32_fma, double bf16_dot, double amx) {
    if (isa == ProductIsa::AmxBf16 && amx > 0) return amx;
    if (isa != ProductIsa::Fp32Fma && bf16_dot > 0) return bf16_dot;
    return fp32_fma;
}

// GFLOP/s of `threads` threads running chains(iters) each: iters grown until a run lasts a quarter of
// `seconds`, then such runs until `seconds` have passed, the fastest kept. (The first run long enough, kept
// alone, read a Zen 3 guest's peak at 61-65 GFLOP/s against bench_peak's 95: the cores were not yet at
// speed, or a neighbour had them for a moment.)
double measure_peak(int threads, double seconds, double flops_per_iter, float (*chains)(long)) {
    long iters = 20000;
    float sink = 0;
    double best = 0, spent = 0;
    for (;;) {
        const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += chains(iters);
        const double t = now_s() - t0;
        spent += t;
        if (t >= seconds / 4 || iters > (1L << 40)) best = std::max(best, double(iters) * flops_per_iter * threads / t / 1e9);
        if (best > 0 && spent >= seconds) {
            if (sink == 12345.0f) std::printf(" ");  // keep the loops
            return best;
        }
        if (t < seconds / 4) iters = long(double(iters) * std::clamp(0.3 * seconds / std::max(t, 1e-6), 1.5, 100.0));
    }
}

}  // namespace shardlm::platform
