#include "shardlm/kernels/gemm_balanced.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>

namespace shardlm::kernels {

void sgemm_balanced(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    constexpr int kAlign = 64;  // block width: whole AVX-512 microkernel panels
    // blocks per thread: 2 by default (bench/RESULTS.md); SHARDLM_GEMM_BLOCKS overrides it for measuring
    static const int per = [] {
        const char* e = std::getenv("SHARDLM_GEMM_BLOCKS");
        const int v = e ? std::atoi(e) : 0;
        return v >= 1 && v <= 64 ? v : 2;
    }();
    const int width = std::max(kAlign, (N + per * threads - 1) / (per * threads) + kAlign - 1) / kAlign * kAlign;
    const int blocks = (N + width - 1) / width;
    if (threads == 1 || blocks < 2) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < blocks; b++) {
        const int j0 = b * width, n = std::min(width, N - j0);
        // columns j0.. of op(B): B's columns when not transposed, its rows when transposed
        const float* Bj = tb == CblasNoTrans ? B + j0 : B + size_t(j0) * size_t(ldb);
        cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda, Bj, ldb, beta, C + j0, ldc);
    }
}

}  // namespace shardlm::kernels
