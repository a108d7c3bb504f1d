// kernels/gemm_balanced.h: an fp32 GEMM whose work follows the threads that actually run.
//
// OpenBLAS splits a GEMM into one static part per thread: when another process takes one of the two
// cores, the thread sharing that core finishes its half at half speed and the step waits for it
// (bench/RESULTS.md: 3x slower with one busy process). Here the columns of C are cut into blocks
// (2 per CPU of the machine, multiples of 64 columns; the environment variable
// SHARDLM_GEMM_BLOCKS sets another count, for measuring) that the OpenMP threads take dynamically,
// each block one single-threaded sgemm (OpenBLAS runs single-threaded inside a parallel region): a
// thread that gets less CPU simply takes fewer blocks. Every element is computed by one sgemm call
// over the whole K on the same block of columns whatever the thread count (one thread runs the
// blocks in turn), so the result does not depend on the threads.
#pragma once
#include <cblas.h>

namespace shardlm::kernels {

// cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), balanced as above
// (the blocks in turn with one thread or inside a parallel region; a plain call when N is too small to cut).
void sgemm_balanced(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace shardlm::kernels
