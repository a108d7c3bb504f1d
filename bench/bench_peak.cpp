// bench/bench_peak.cpp: the fp32 FMA peak of this CPU, measured with our own loop: 2 x 512-bit FMA
// ports with 4-cycle latency need >= 8 independent accumulators; we use 16. Prints GFLOP/s for 1
// thread and for all threads. MFU in the other benchmarks is against the all-threads number.
// Where the CPU has AVX512_BF16, the same loop on VDPBF16PS (32 bf16 products summed into 16 fp32
// lanes = 64 flops per instruction) gives the bf16 peak that --matmul-precision bf16 runs against.
#include <immintrin.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"

// 16 independent accumulator chains, `iters` rounds; returns their sum (keeps the loop alive).
static float fma_chains(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    return s;
}

__attribute__((target("avx512bf16"))) static float dpbf16_chains(long iters) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
    const __m512bh c = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], b, c);
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    return s;
}

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
    shardlm::ensure_blas_coretype(argc, argv);
    long iters = (argc > 1 ? std::atol(argv[1]) : 200000000L) / 4;
    int all = omp_get_max_threads();
    // an FMA: 16 lanes x 2 flops; a VDPBF16PS: 16 lanes x 2 products x 2 flops
    std::printf("{\"bench\": \"fp32_fma_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                peak_gflops(1, iters, 16 * 32, fma_chains), all, peak_gflops(all, iters, 16 * 32, fma_chains));
    if (__builtin_cpu_supports("avx512bf16"))
        std::printf("{\"bench\": \"bf16_dot_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                    peak_gflops(1, iters, 16 * 64, dpbf16_chains), all, peak_gflops(all, iters, 16 * 64, dpbf16_chains));
}
