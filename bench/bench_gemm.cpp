// bench/bench_gemm.cpp: sgemm GFLOP/s on the GPT-2 124M shapes of one training step, OpenBLAS (the
// library shardlm links, OpenMP build) against oneDNN's dnnl_sgemm, side by side in one run.
// Usage: bench_gemm [tokens=1024] [threads=all]
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"

struct Shape {
    const char* name;
    char ta, tb;  // row-major op(A) (M x K), op(B) (K x N)
    int M, N, K;
};

template <typename F>
double time_best(F f, int reps) {
    f();
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = shardlm::now_s();
        f();
        double t = shardlm::now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    int N = argc > 1 ? std::atoi(argv[1]) : 1024;
    if (argc > 2) shardlm::set_threads(std::atoi(argv[2]));
    const int C = 768, V = 50304;
    std::vector<Shape> shapes = {
        {"qkv fwd  (N,C)x(3C,C)^T", 'N', 'T', N, 3 * C, C},
        {"fc fwd   (N,C)x(4C,C)^T", 'N', 'T', N, 4 * C, C},
        {"proj fwd (N,4C)x(C,4C)^T", 'N', 'T', N, C, 4 * C},
        {"fc dinp  (N,4C)x(4C,C)", 'N', 'N', N, C, 4 * C},
        {"fc dW    (4C,N)x(N,C)", 'T', 'N', 4 * C, C, N},
        {"lm_head fwd (N,C)x(V,C)^T", 'N', 'T', N, V, C},
        {"lm_head dinp (N,V)x(V,C)", 'N', 'N', N, C, V},
        {"lm_head dW (V,N)x(N,C)", 'T', 'N', V, C, N},
    };
    std::printf("OpenBLAS core %s, threads %d, tokens %d\n", openblas_get_corename(), omp_get_max_threads(), N);
    std::printf("%-28s %10s %10s %8s\n", "shape", "openblas", "onednn", "ratio");
    double tot_ob = 0, tot_dn = 0, flops_all = 0;
    for (const Shape& s : shapes) {
        size_t a_rows = s.ta == 'N' ? s.M : s.K, a_cols = s.ta == 'N' ? s.K : s.M;
        size_t b_rows = s.tb == 'N' ? s.K : s.N, b_cols = s.tb == 'N' ? s.N : s.K;
        std::vector<float> A(a_rows * a_cols, 0.01f), B(b_rows * b_cols, 0.02f), Cm(size_t(s.M) * s.N);
        double flops = 2.0 * s.M * s.N * s.K;
        double t_ob = time_best([&] {
            cblas_sgemm(CblasRowMajor, s.ta == 'N' ? CblasNoTrans : CblasTrans, s.tb == 'N' ? CblasNoTrans : CblasTrans,
                        s.M, s.N, s.K, 1.0f, A.data(), int(a_cols), B.data(), int(b_cols), 0.0f, Cm.data(), s.N);
        }, 3);
        double t_dn = time_best([&] {
            dnnl_sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), int(a_cols), B.data(), int(b_cols), 0.0f, Cm.data(),
                       s.N);
        }, 3);
        tot_ob += t_ob, tot_dn += t_dn, flops_all += flops;
        std::printf("%-28s %10.1f %10.1f %8.2f\n", s.name, flops / t_ob / 1e9, flops / t_dn / 1e9, t_dn / t_ob);
    }
    std::printf("%-28s %10.1f %10.1f %8.2f   (GFLOP/s over all shapes; ratio = oneDNN time / OpenBLAS time)\n",
                "all", flops_all / tot_ob / 1e9, flops_all / tot_dn / 1e9, tot_dn / tot_ob);
}
