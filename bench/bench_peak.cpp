// bench/bench_peak.cpp: the fp32 FMA peak of this CPU, measured with our own loop: 2 x 512-bit FMA
// ports with 4-cycle latency need >= 8 independent accumulators; we use 16. Prints GFLOP/s for 1
// thread and for all threads. MFU in the other benchmarks is against the all-threads number.
// Where the CPU has AVX512_BF16, the same loop on VDPBF16PS (32 bf16 products summed into 16 fp32
// lanes = 64 flops per instruction) gives the bf16 dot-product peak; where it has AMX, TDPBF16PS on four
// accumulator tiles the AMX peak (oneDNN's bf16 products run there: kernels/machine.h, product_isa).
#include <omp.h>

#include <cstdio>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "bench_options.h"
#include "shardlm/platform/peak_loops.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"

// Best of 3 GFLOP/s of chains(iters) on `threads` threads at once; flops_per_iter per thread.
static double peak_gflops(int threads, long iters, double flops_per_iter, float (*chains)(long)) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = 0, t1 = 0;
        float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
#pragma omp barrier
#pragma omp master
            t0 = shardlm::now_s();
            sink += chains(iters);
#pragma omp barrier
#pragma omp master
            t1 = shardlm::now_s();
        }
        if (sink == 12345.0f) std::printf("%f\n", sink);
        double g = double(iters) * flops_per_iter * threads / (t1 - t0) / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

int main(int argc, char** argv) {
    const std::optional<long> arg = argc > 1 ? whole_number(argv[1], 4, LONG_MAX) : std::optional<long>(200000000L);
    if (argc > 2 || !arg) {  // (an `--help` had run 0 iterations: 0 GFLOP/s)
        std::fprintf(stderr, "usage: bench_peak [iterations=200000000]: a whole number of FMA iterations, at least 4\n");
        return argc == 2 && std::string(argv[1]) == "--help" ? 0 : 2;
    }
    shardlm::ensure_blas_coretype(argc, argv);
    long iters = *arg / 4;
    int all = omp_get_max_threads();
    using namespace shardlm::platform;  // the loops `shardlm calibrate` measures with
    const double fma = fp32_fma_flops_per_iter();
    std::printf("{\"bench\": \"fp32_fma_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                peak_gflops(1, iters, fma, fp32_fma_chains), all, peak_gflops(all, iters, fma, fp32_fma_chains));
    if (has_bf16_dot())
        std::printf("{\"bench\": \"bf16_dot_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                    peak_gflops(1, iters, kBf16DotFlopsPerIter, bf16_dot_chains), all,
                    peak_gflops(all, iters, kBf16DotFlopsPerIter, bf16_dot_chains));
    // AMX: a tile instruction does 64x the flops of an FMA iteration's: as many seconds with fewer iterations
    if (has_amx_bf16())
        std::printf("{\"bench\": \"amx_bf16_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                    peak_gflops(1, iters / 64, kAmxFlopsPerIter, amx_bf16_chains), all,
                    peak_gflops(all, iters / 64, kAmxFlopsPerIter, amx_bf16_chains));
    else if (has_bf16_dot())
        std::printf("{\"bench\": \"amx_bf16_peak\", \"skipped\": \"%s\"}\n", amx_unavailable());
}
