// calibrate/compute.cpp: what a rank computes per second: the peak loops and the products, timed as a
// step issues them (calibrate/measure.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "shardlm/calibrate/measure.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/timer.h"
#include "shardlm/cost/shape.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/platform/peak_loops.h"

namespace shardlm::calibrate {

using platform::bf16_dot_chains;
using platform::fp32_fma_chains;
using platform::fp32_fma_flops_per_iter;
using platform::has_bf16_dot;
using platform::kBf16DotFlopsPerIter;

namespace detail {

double timed(comm::Group& world, double min_seconds, const std::function<void()>& fn, int rounds, Timing timing) {
    if (timing == Timing::Alone && world.rank() != 0) {
        for (int round = 0; round < rounds; round++) world.barrier();
        return 0;
    }
    fn();  // warm-up: first-touch, BLAS buffers
    double best = 1e30;
    for (int round = 0; round < rounds; round++) {
        world.barrier();
        const double t0 = now_s();
        long calls = 0;
        double t = 0;
        do {
            fn();
            calls++;
            t = now_s() - t0;
        } while (t < min_seconds);
        best = std::min(best, t / double(calls));
    }
    if (timing == Timing::Slowest) world.all_reduce_max(&best, 1);
    return best;
}

}  // namespace detail

using detail::Timing;
using detail::timed;

namespace {

double peak_gflops(comm::Group& world, int threads, double flops_per_iter, float (*chains)(long)) {
    const long iters = 4'000'000;
    float sink = 0;
    const double s = timed(world, 0.05, [&] {
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += chains(iters);
    });
    if (sink == 12345.0f) std::printf(" ");
    return double(iters) * flops_per_iter * threads / s / 1e9;
}

// ---- GEMMs --------------------------------------------------------------------------------------

kernels::MatmulPrecision matmul_precision(const Options& o) {
    return o.precision == planner::Precision::Fp32 ? kernels::MatmulPrecision::fp32 : kernels::MatmulPrecision::bf16;
}

// One product's operands: x (M, K), w (N, K), y and dy (M, N), dx (M, K), and a weight gradient per thread.
struct GemmOperands {
    AlignedBuffer<float> x, w, y, dy, dx;
    std::vector<AlignedBuffer<float>> dw;
    GemmOperands(int M, int K, int N, int threads) : x(size_t(M) * K), w(size_t(N) * K), y(size_t(M) * N), dy(size_t(M) * N), dx(size_t(M) * K) {
        for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 97) * 1e-3f;
        for (size_t i = 0; i < w.size(); i++) w[i] = float(i % 89) * 1e-3f;
        for (size_t i = 0; i < dy.size(); i++) dy[i] = float(i % 83) * 1e-3f;
        for (int t = 0; t < threads; t++) dw.emplace_back(size_t(N) * K);
    }
};

// The weight gradient as the engine's W phase computes it (model/unit_ops.h): over all M rows, a block of
// output rows at a time (cost::weight_block_rows), each thread single-threaded. A unit's W pools the blocks
// of all its weights, so the threads are never short of work: here every thread computes a whole gradient
// of its own and the time per gradient is the elapsed time over the threads.
double weight_gradient_s(comm::Group& world, const Options& o, GemmOperands& g, int threads, int M, int K, int N,
                         int rounds, Timing timing) {
    const int block = cost::weight_block_rows(N, 1);
    const kernels::MatmulPrecision mp = matmul_precision(o);
    return timed(world, o.min_seconds, [&] {
#pragma omp parallel num_threads(threads)
        {
            omp_set_num_threads(1);
            float* dw = g.dw[size_t(omp_get_thread_num())].data();
            for (int b = 0; b < N; b += block)
                kernels::matmul_backward_weight(dw, nullptr, g.dy.data(), g.x.data(), DType::F32, M, K, N, b,
                                                std::min(N, b + block), false, mp);
        }
    }, rounds, timing) / threads;
}

// Kernels split over the rank's threads, as a run without lanes issues them: the forward and the input
// gradient over all threads, the weight gradient as the W phase runs it; timed as `timing` says (Alone: the
// idle ranks hold no operands and answer 0 GFLOP/s).
GemmPoint gemm_point(comm::Group& world, const Options& o, int threads, int M, int K, int N, int rounds,
                     Timing timing = Timing::Slowest) {
    const bool idle = timing == Timing::Alone && world.rank() != 0;
    GemmOperands g(idle ? 0 : M, idle ? 0 : K, idle ? 0 : N, idle ? 0 : threads);
    const kernels::MatmulPrecision mp = matmul_precision(o);
    const double s = timed(world, o.min_seconds, [&] {
        kernels::matmul_forward(g.y.data(), g.x.data(), g.w.data(), nullptr, M, K, N, false, mp);
        kernels::matmul_backward(g.dx.data(), nullptr, nullptr, g.dy.data(), g.x.data(), g.w.data(), M, K, N, false, mp);
    }, rounds, timing);
    const double total = s + weight_gradient_s(world, o, g, threads, M, K, N, rounds, timing);
    return {M, N, K, idle ? 0.0 : 6.0 * M * N * K / total / 1e9};
}

// Lanes (cost::runs_lanes): every thread at once runs its share of the M rows through single-threaded
// products, as ModelPart::run_lanes does (omp_set_num_threads(1) inside one parallel region), then the
// weight gradient as the W phase runs it. The point is the whole shape's rate per rank.
GemmPoint lanes_gemm_point(comm::Group& world, const Options& o, int threads, int M, int K, int N, int rounds) {
    const int Ml = (M + threads - 1) / threads;
    GemmOperands g(M, K, N, threads);
    const kernels::MatmulPrecision mp = matmul_precision(o);
    const double s = timed(world, o.min_seconds, [&] {
#pragma omp parallel num_threads(threads)
        {
            omp_set_num_threads(1);
            const int r0 = omp_get_thread_num() * Ml, rows = std::max(0, std::min(Ml, M - r0));
            if (rows > 0) {  // (more threads than rows: the rest idle)
                const size_t x0 = size_t(r0) * K, y0 = size_t(r0) * N;
                kernels::matmul_forward(g.y.data() + y0, g.x.data() + x0, g.w.data(), nullptr, rows, K, N, false, mp);
                kernels::matmul_backward(g.dx.data() + x0, nullptr, nullptr, g.dy.data() + y0, g.x.data() + x0,
                                         g.w.data(), rows, K, N, false, mp);
            }
        }
    }, rounds);
    const double total = s + weight_gradient_s(world, o, g, threads, M, K, N, rounds, Timing::Slowest);
    return {M, N, K, 6.0 * double(M) * N * K / total / 1e9};
}

// Every shape at M = 256 and 1024 tokens, best of three passes over the whole list (a round of each
// shape in turn): a slow spell of the machine (a neighbour on a shared host: seen here to halve every
// product for seconds at a time) lowers one pass's figures, not all three of one shape's.
template <size_t Shapes, class Point>
std::vector<GemmPoint> gemm_points(const std::pair<int, int> (&io)[Shapes], Point point) {
    std::vector<GemmPoint> best;
    for (int pass = 0; pass < 3; pass++) {
        size_t i = 0;
        for (int M : {256, 1024})
            for (auto [K, Nout] : io) {
                const GemmPoint g = point(M, K, Nout, 1);
                if (pass == 0) best.push_back(g);
                else if (g.gflops > best[i].gflops) best[i] = g;
                i++;
            }
    }
    return best;
}

}  // namespace

namespace {

// Least squares in log space of eff(d) = gmax d / (d + half) over half in [0, 4096]; gmax closed-form.
void fit_curve(const std::vector<GemmPoint>& points, double peak_gflops, double* gmax, double* half_dim, double* rms_out) {
    double best = 1e30;
    for (double half = 0; half <= 4096; half += 1) {
        double sum = 0;
        for (const GemmPoint& g : points) {
            const double d = std::min({g.M, g.N, g.K});
            sum += std::log(g.gflops / peak_gflops) - std::log(d / (d + half));
        }
        const double log_gmax = sum / double(points.size());
        double err = 0;
        for (const GemmPoint& g : points) {
            const double d = std::min({g.M, g.N, g.K});
            const double r = std::log(g.gflops / peak_gflops) - log_gmax - std::log(d / (d + half));
            err += r * r;
        }
        if (err < best) best = err, *half_dim = half, *gmax = std::exp(log_gmax);
    }
    *gmax = std::min(*gmax, 1.0);  // a cluster file's gemm_max is a fraction of peak
    double rms = 0;
    for (const GemmPoint& g : points) {
        const double d = std::min({g.M, g.N, g.K});
        const double model = peak_gflops * *gmax * d / (d + *half_dim);
        rms += std::pow(model / g.gflops - 1, 2);
    }
    *rms_out = std::sqrt(rms / double(points.size()));
}

}  // namespace

void fit_gemm_curve(Calibration& c, double peak_gflops) {
    fit_curve(c.gemm, peak_gflops, &c.gemm_max, &c.gemm_half_dim, &c.gemm_fit_rms);
    if (!c.lanes_gemm.empty())
        fit_curve(c.lanes_gemm, peak_gflops, &c.lanes_gemm_max, &c.lanes_gemm_half_dim, &c.lanes_gemm_fit_rms);
}

namespace detail {

// The fp32 FMA, AVX512_BF16 and AMX peaks per rank, each the better of this and any earlier measurement
// (calibrate measures them before and after the GEMMs: a slow spell of the machine lowers one, not both).
void measure_peaks(comm::Group& world, Calibration& c) {
    const auto better = [](double& have, double now) { have = std::max(have, now); };
    better(c.fp32_peak_gflops, peak_gflops(world, c.threads, fp32_fma_flops_per_iter(), fp32_fma_chains));
    better(c.bf16_peak_gflops,
           has_bf16_dot() ? peak_gflops(world, c.threads, kBf16DotFlopsPerIter, bf16_dot_chains) : c.fp32_peak_gflops);
    if (platform::has_amx_bf16())
        better(c.amx_peak_gflops, peak_gflops(world, c.threads, platform::kAmxFlopsPerIter, platform::amx_bf16_chains));
}

// GEMMs: tokens x (in, out) of the linear layers of small and mid-size GPTs, whole and cut by tensor
// parallelism, the head's long vocabulary side (8192 cut by tp, 32768 whole: its weight streams from
// memory), thin attention-like shapes
void measure_gemms(comm::Group& world, const Options& o, Calibration& c) {
    const std::pair<int, int> io[] = {{64, 192},   {64, 256},    {128, 384},  {128, 512}, {256, 768},
                                      {256, 1024}, {512, 512},   {512, 2048}, {1024, 1024}, {128, 8192},
                                      {256, 8192}, {256, 32768}, {32, 256}};
    c.gemm = gemm_points(io, [&](int M, int K, int N, int rounds) { return gemm_point(world, o, c.threads, M, K, N, rounds); });
    // more than one rank: the tokens x 1024 and x 32768 products on rank 0, every rank computing and then
    // the others idle (a pipeline's slow stage computes so part of the time), in the same passes
    if (c.ranks > 1) {
        const std::pair<int, int> alone_io[] = {{256, 1024}, {1024, 1024}, {256, 32768}};
        const std::vector<GemmPoint> own = gemm_points(
            alone_io, [&](int M, int K, int N, int rounds) { return gemm_point(world, o, c.threads, M, K, N, rounds, Timing::Own); });
        c.alone_gemm = gemm_points(
            alone_io, [&](int M, int K, int N, int rounds) { return gemm_point(world, o, c.threads, M, K, N, rounds, Timing::Alone); });
        double log_sum = 0;
        for (size_t i = 0; i < own.size(); i++)  // (rank 0's figures; the others' alone ones are 0)
            if (c.alone_gemm[i].gflops > 0 && own[i].gflops > 0) log_sum += std::log(c.alone_gemm[i].gflops / own[i].gflops);
        c.alone_speedup = std::clamp(std::exp(log_sum / double(c.alone_gemm.size())), 1.0, 4.0);
    }
    // the same shapes as lanes run them (more than one thread: a run with lanes uses these)
    if (c.threads > 1)
        c.lanes_gemm = gemm_points(
            io, [&](int M, int K, int N, int rounds) { return lanes_gemm_point(world, o, c.threads, M, K, N, rounds); });
}

}  // namespace detail

}  // namespace shardlm::calibrate
