#include "shardlm/kernels/gemm_balanced.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <thread>

namespace shardlm::kernels {

void sgemm_balanced(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
    constexpr int kAlign = 64;  // block width: whole AVX-512 microkernel panels
    // blocks per processor: 2 by default (bench/RESULTS.md); SHARDLM_GEMM_BLOCKS overrides it for measuring
    static const int per = [] {
        const char* e = std::getenv("SHARDLM_GEMM_BLOCKS");
        const int v = e ? std::atoi(e) : 0;
        return v >= 1 && v <= 64 ? v : 2;
    }();
    // The cut depends on N and the machine only, never on the threads running or the CPUs this
    // process may use (mpirun binds a rank to one): OpenBLAS's AVX2 kernels round a column block
    // differently from the same columns inside a wider call, so a cut that followed the thread count
    // would make one thread's product differ from two threads', and a rank's from one process's.
    static const int procs = int(std::max(1u, std::thread::hardware_concurrency()));
    const int width = std::max(kAlign, (N + per * procs - 1) / (per * procs) + kAlign - 1) / kAlign * kAlign;
    const int blocks = (N + width - 1) / width;
    if (blocks < 2) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const bool parallel = !omp_in_parallel() && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int b = 0; b < blocks; b++) {
        const int j0 = b * width, n = std::min(width, N - j0);
        // columns j0.. of op(B): B's columns when not transposed, its rows when transposed
        const float* Bj = tb == CblasNoTrans ? B + j0 : B + size_t(j0) * size_t(ldb);
        cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda, Bj, ldb, beta, C + j0, ldc);
    }
}

}  // namespace shardlm::kernels
