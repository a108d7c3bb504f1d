// bench/bench_peak.cpp: the fp32 FMA peak of this CPU, measured with our own loop: 2 x 512-bit FMA
// ports with 4-cycle latency need >= 8 independent accumulators; we use 16. Prints GFLOP/s for 1
// thread and for all threads. MFU in the other benchmarks is against the all-threads number.
#include <immintrin.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"

static double fma_gflops(int threads, long iters) {
    double t0 = 0, t1 = 0;
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        __m512 a[16];
        for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
        const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#pragma omp barrier
#pragma omp master
        t0 = shardlm::now_s();
        for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
        }
#pragma omp barrier
#pragma omp master
        t1 = shardlm::now_s();
        float s = 0;
        for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
        sink += s;
    }
    if (sink == 12345.0f) std::printf("%f\n", sink);  // keep the loop alive
    return double(iters) * 16 * 16 * 2 * threads / (t1 - t0) / 1e9;
}

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    long iters = argc > 1 ? std::atol(argv[1]) : 200000000L;
    int all = omp_get_max_threads();
    double best1 = 0, bestn = 0;
    for (int rep = 0; rep < 3; rep++) {
        double g1 = fma_gflops(1, iters / 4), gn = fma_gflops(all, iters / 4);
        best1 = g1 > best1 ? g1 : best1;
        bestn = gn > bestn ? gn : bestn;
    }
    std::printf("{\"bench\": \"fp32_fma_peak\", \"gflops_1_thread\": %.1f, \"threads\": %d, \"gflops_all_threads\": %.1f}\n",
                best1, all, bestn);
}
