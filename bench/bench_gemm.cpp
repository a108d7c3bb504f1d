// bench/bench_gemm.cpp: GFLOP/s of the GEMM shapes of one GPT-2 124M training step on the engine's own
// fp32 path (kernels/gemm.h: columns cut into blocks the threads take, each a single-threaded product)
// with OpenBLAS and with oneDNN, side by side in one run, and what --gemm auto keeps for each shape (its
// own timing, cached per CPU model: SHARDLM_CACHE_DIR to start from an empty cache).
// Usage: bench_gemm [tokens=1024] [threads=all]
#include <cblas.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/gemm.h"

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
    using shardlm::kernels::GemmBackend;
    std::printf("OpenBLAS core %s, threads %d, tokens %d\n", openblas_get_corename(), omp_get_max_threads(), N);
    std::printf("%-28s %10s %10s %8s %9s\n", "shape", "openblas", "onednn", "ratio", "auto");
    double tot_ob = 0, tot_dn = 0, tot_auto = 0, flops_all = 0;
    shardlm::kernels::set_gemm_backend(GemmBackend::Auto);
    for (const Shape& s : shapes) {
        const int a_rows = s.ta == 'N' ? s.M : s.K, a_cols = s.ta == 'N' ? s.K : s.M;
        const int b_rows = s.tb == 'N' ? s.K : s.N, b_cols = s.tb == 'N' ? s.N : s.K;
        std::vector<float> A(size_t(a_rows) * a_cols, 0.01f), B(size_t(b_rows) * b_cols, 0.02f), Cm(size_t(s.M) * s.N);
        const double flops = 2.0 * s.M * s.N * s.K;
        const CBLAS_TRANSPOSE ta = s.ta == 'N' ? CblasNoTrans : CblasTrans, tb = s.tb == 'N' ? CblasNoTrans : CblasTrans;
        double t[2];
        for (GemmBackend b : {GemmBackend::OpenBlas, GemmBackend::OneDnn})
            t[b == GemmBackend::OneDnn] = time_best([&] {
                shardlm::kernels::sgemm_balanced_on(b, ta, tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols, B.data(), b_cols,
                                                    0.0f, Cm.data(), s.N);
            }, 3);
        // auto: the first call times both (or reads the cache) and keeps one
        shardlm::kernels::sgemm_balanced(ta, tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols, B.data(), b_cols, 0.0f, Cm.data(), s.N);
        const std::string key = shardlm::kernels::gemm_key(shardlm::kernels::GemmKind::Fp32, s.ta, s.tb, s.M, s.N, s.K,
                                                           a_cols, b_cols, s.N, 0);
        const bool onednn = shardlm::kernels::gemm_choice(key, [](double*, double*) {}) == GemmBackend::OneDnn;
        tot_ob += t[0], tot_dn += t[1], tot_auto += t[onednn], flops_all += flops;
        std::printf("%-28s %10.1f %10.1f %8.2f %9s\n", s.name, flops / t[0] / 1e9, flops / t[1] / 1e9, t[1] / t[0],
                    onednn ? "onednn" : "openblas");
    }
    std::printf("%-28s %10.1f %10.1f %8.2f %9.1f   (GFLOP/s over all shapes; ratio = oneDNN time / OpenBLAS time; auto: "
                "its choices timed here)\n",
                "all", flops_all / tot_ob / 1e9, flops_all / tot_dn / 1e9, tot_dn / tot_ob, flops_all / tot_auto / 1e9);
    std::printf("cache: %s\n", shardlm::kernels::gemm_cache_report().c_str());
}
