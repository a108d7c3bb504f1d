// bench/bench_gemm.cpp: GFLOP/s of the GEMM shapes of one GPT-2 124M training step on the engine's own
// paths (kernels/gemm/gemm.h), on each library side by side in one run: fp32 (OpenBLAS and oneDNN in column
// blocks the threads take, each a single-threaded product; the native kernels in their own cut) and the
// mixed-precision bf16 products as the engine calls them (fp32 gradients rounded as they are read: a pass
// of their own on OpenBLAS and oneDNN, in the packing on the native kernels), each against the peak of the
// instruction set it ran on, measured in the same run (fp32 FMA, AVX512_BF16's dot product, AMX's tiles); and what --gemm auto keeps for each shape (its own
// timing, cached per CPU model: SHARDLM_CACHE_DIR to start from an empty cache).
// Usage: bench_gemm [tokens=1024] [threads=all] [n_embd=768] (64: the small model's narrow products, its head's
// weight gradient a 50304 x 64 product over the tokens)
#include <cblas.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_options.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/gemm/tuner.h"
#include "shardlm/kernels/machine.h"
#include "shardlm/platform/peaks.h"

namespace {

using shardlm::DType;
using shardlm::kernels::GemmBackend;
namespace kn = shardlm::kernels;

struct Shape {
    const char* name;
    char ta, tb;  // row-major op(A) (M x K), op(B) (K x N)
    int M, N, K;
    DType a_t = DType::F32, b_t = DType::F32, c_t = DType::F32;  // bf16 section: the operand types the engine passes
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

const GemmBackend kLibs[] = {GemmBackend::OpenBlas, GemmBackend::OneDnn, GemmBackend::Native};

// One table: each shape on each library (t[lib] seconds), then auto's choice (run once through the
// dispatcher, then read back from its table). Each library's rate is a share of the peak of the instruction
// set it runs these products on (kernels/machine.h: product_isa), auto's of the one its choice runs on.
void table(const char* title, const std::vector<Shape>& shapes, bool bf16, const kn::MachineInfo& m) {
    const kn::GemmKind kind = bf16 ? kn::GemmKind::Bf16 : kn::GemmKind::Fp32;
    auto peak = [&](GemmBackend lib) { return m.peak(kn::product_isa(lib, kind)); };
    std::printf("\n%s; peaks measured now (GFLOP/s) of the ISA each library runs them on:", title);
    for (GemmBackend lib : kLibs)
        std::printf(" %s %s %.0f", shardlm::setting_text(lib).c_str(), shardlm::platform::product_isa_name(kn::product_isa(lib, kind)),
                    peak(lib));
    std::printf("\n%-30s %10s %10s %10s %9s %9s  (GFLOP/s; %% of the peak of the ISA that ran)\n", "shape", "openblas",
                "onednn", "native", "auto", "auto %");
    double tot[3] = {0, 0, 0}, tot_auto = 0, flops_all = 0;
    double peak_seconds[3] = {0, 0, 0}, auto_peak_seconds = 0;  // the shapes' seconds at the peak of the ISA that ran
    for (const Shape& s : shapes) {
        const int a_rows = s.ta == 'N' ? s.M : s.K, a_cols = s.ta == 'N' ? s.K : s.M;
        const int b_rows = s.tb == 'N' ? s.K : s.N, b_cols = s.tb == 'N' ? s.N : s.K;
        std::vector<float> A(size_t(a_rows) * a_cols, 0.01f), B(size_t(b_rows) * b_cols, 0.02f), Cm(size_t(s.M) * s.N);
        std::vector<unsigned short> A16(A.size(), shardlm::f32_to_bf16(0.01f)), B16(B.size(), shardlm::f32_to_bf16(0.02f));
        const double flops = 2.0 * s.M * s.N * s.K;
        const CBLAS_TRANSPOSE ta = s.ta == 'N' ? CblasNoTrans : CblasTrans, tb = s.tb == 'N' ? CblasNoTrans : CblasTrans;
        auto operand = [](char t, DType type, const float* f, const unsigned short* h, int ld) {
            const void* d = type == DType::F32 ? static_cast<const void*>(f) : static_cast<const void*>(h);
            return t == 'N' ? kn::native::Operand{d, type, ld, 1} : kn::native::Operand{d, type, 1, ld};
        };
        const kn::native::Operand a = operand(s.ta, s.a_t, A.data(), A16.data(), a_cols);
        const kn::native::Operand b = operand(s.tb, s.b_t, B.data(), B16.data(), b_cols);
        auto run = [&] {
            if (bf16) kn::gemm_mixed(Cm.data(), s.c_t, a, b, s.M, s.N, s.K, false, nullptr);
            else kn::sgemm_balanced(ta, tb, s.M, s.N, s.K, 1.0f, A.data(), a_cols, B.data(), b_cols, 0.0f, Cm.data(), s.N);
        };
        double t[3];
        for (int l = 0; l < 3; l++) {
            const bool have = kLibs[l] != GemmBackend::Native || (!bf16 || kn::gemm_has_native_bf16());
            kn::set_gemm_backend(kLibs[l]);
            t[l] = have ? time_best(run, 3) : 0;
        }
        // auto: the first call times every library (or reads the cache) and keeps one
        kn::set_gemm_backend(GemmBackend::Auto);
        run();
        const double ta_s = time_best(run, 3);
        const double auto_peak = peak(kn::gemm_last_library());
        for (int l = 0; l < 3; l++) tot[l] += t[l];
        tot_auto += ta_s, flops_all += flops;
        auto rate = [&](double sec) { return sec > 0 ? flops / sec / 1e9 : 0.0; };
        std::printf("%-30s %10.1f %10.1f %10.1f %9.1f %8.0f%%\n", s.name, rate(t[0]), rate(t[1]), rate(t[2]), rate(ta_s),
                    100 * rate(ta_s) / auto_peak);
        for (int l = 0; l < 3; l++)
            if (t[l] > 0) peak_seconds[l] += flops / (peak(kLibs[l]) * 1e9);
        auto_peak_seconds += flops / (auto_peak * 1e9);
    }
    auto all = [&](double sec) { return sec > 0 ? flops_all / sec / 1e9 : 0.0; };
    std::printf("%-30s %10.1f %10.1f %10.1f %9.1f %8.0f%%   (GFLOP/s over all shapes)\n", "all", all(tot[0]), all(tot[1]),
                all(tot[2]), all(tot_auto), 100 * auto_peak_seconds / tot_auto);
    std::printf("%-30s", "% of its ISA's peak, all");
    for (int l = 0; l < 3; l++) std::printf(" %9.0f%%", tot[l] > 0 ? 100 * peak_seconds[l] / tot[l] : 0.0);
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    // at most three arguments, each a positive whole number, or the usage (an `--help` had been taken for 0 tokens)
    for (int i = 1; i < argc; i++) {
        if (i > 3 || !whole_number(argv[i], 1, 1 << 20)) {
            std::fprintf(stderr,
                         "usage: bench_gemm [tokens=1024] [threads=all] [n_embd=768]: positive whole numbers (n_embd 64: "
                         "the small model's narrow products)\n");
            return std::string(argv[i]) == "--help" ? 0 : 2;
        }
    }
    shardlm::ensure_blas_coretype(argc, argv);
    int N = argc > 1 ? std::atoi(argv[1]) : 1024;
    if (argc > 2) shardlm::set_threads(std::atoi(argv[2]));
    const int C = argc > 3 ? std::atoi(argv[3]) : 768, V = 50304, threads = omp_get_max_threads();
    const kn::MachineInfo m = kn::machine_info(threads, 0.4);
    std::printf("OpenBLAS core %s, threads %d, tokens %d, n_embd %d\n", openblas_get_corename(), threads, N, C);
    const std::vector<Shape> fp32 = {
        {"qkv fwd  (N,C)x(3C,C)^T", 'N', 'T', N, 3 * C, C},
        {"fc fwd   (N,C)x(4C,C)^T", 'N', 'T', N, 4 * C, C},
        {"proj fwd (N,4C)x(C,4C)^T", 'N', 'T', N, C, 4 * C},
        {"fc dinp  (N,4C)x(4C,C)", 'N', 'N', N, C, 4 * C},
        {"fc dW    (4C,N)x(N,C)", 'T', 'N', 4 * C, C, N},
        {"lm_head fwd (N,C)x(V,C)^T", 'N', 'T', N, V, C},
        {"lm_head dinp (N,V)x(V,C)", 'N', 'N', N, C, V},
        {"lm_head dW (V,N)x(N,C)", 'T', 'N', V, C, N},
    };
    table("fp32 products", fp32, false, m);
    if (m.bf16_peak_gflops > 0 || kn::onednn_makes_bf16()) {
        const DType f = DType::F32, h = DType::BF16;
        const std::vector<Shape> bf16 = {
            {"qkv fwd  bf16 -> bf16", 'N', 'T', N, 3 * C, C, h, h, h},
            {"fc fwd   bf16 -> bf16", 'N', 'T', N, 4 * C, C, h, h, h},
            {"proj fwd bf16 -> fp32", 'N', 'T', N, C, 4 * C, h, h, f},
            {"fc dinp  fp32 dout x bf16 W", 'N', 'N', N, C, 4 * C, f, h, f},
            {"fc dW    fp32 dout^T x bf16 x", 'T', 'N', 4 * C, C, N, f, h, f},
            {"lm_head fwd bf16 -> fp32", 'N', 'T', N, V, C, h, h, f},
            {"lm_head dinp bf16 x bf16", 'N', 'N', N, C, V, h, h, f},
            {"lm_head dW bf16^T x bf16", 'T', 'N', V, C, N, h, h, f},
        };
        table("bf16 products (mixed precision, as the engine passes them)", bf16, true, m);
    }
    std::printf("\ncache: %s\n", kn::gemm_cache_report().c_str());
}
