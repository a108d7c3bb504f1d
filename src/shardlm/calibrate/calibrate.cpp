#include "shardlm/calibrate/calibrate.h"
#include "shardlm/calibrate/measure.h"

#include <malloc.h>
#include <omp.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "shardlm/platform/peak_loops.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/format.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/cost/comm.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/machine.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/planner/plan_io.h"

namespace shardlm::calibrate {

using detail::measure_gemms;
using detail::measure_peaks;
using detail::timed;
using platform::has_bf16_dot;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Median over `runs` runs (after a warm-up) of the slowest rank's time of one call of fn, the ranks
// started together.
double together(comm::Group& world, const std::function<void()>& fn, int runs = 5) {
    fn();
    std::vector<double> ts;
    for (int i = 0; i < runs; i++) {
        world.barrier();
        const double t0 = now_s();
        fn();
        double t = now_s() - t0;
        world.all_reduce_max(&t, 1);
        ts.push_back(t);
    }
    return median(ts);
}

// ---- memory-bound work --------------------------------------------------------------------------

double triad_GBps(comm::Group& world, const Options& o) {
    const size_t n = size_t(16) << 20;  // 64 MiB per array: far beyond the caches
    AlignedBuffer<float> a(n), b(n), c(n);
    std::fill(b.begin(), b.end(), 1.0f), std::fill(c.begin(), c.end(), 2.0f);
    const double s = timed(world, o.min_seconds, [&] {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    });
    return 3.0 * double(n) * sizeof(float) / s / 1e9;
}

std::vector<MemoryPoint> memory_kernels(comm::Group& world, const Options& o) {
    std::vector<MemoryPoint> out;
    const int N = 1024, C = 512;  // tokens x width: a block's activations, beyond L2
    const size_t nc = size_t(N) * C;
    AlignedBuffer<float> x(nc), y(nc), dy(nc), dx(nc), mean(N), rstd(N), g(C), bias(C), dg(C), db(C);
    for (size_t i = 0; i < nc; i++) x[i] = float(i % 101) * 1e-2f - 0.5f, dy[i] = float(i % 7) * 1e-3f;
    std::fill(g.begin(), g.end(), 1.0f), std::fill(bias.begin(), bias.end(), 0.0f);
    const double f = sizeof(float);
    out.push_back({"layernorm forward + backward", f * (2.0 * nc + 4.0 * nc), timed(world, o.min_seconds, [&] {
                       kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), bias.data(),
                                                  N, C, 1e-5f);
                       kernels::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), g.data(),
                                                   mean.data(), rstd.data(), N, C);
                   })});
    const size_t ng = 4 * nc;  // the MLP's inner activation
    AlignedBuffer<float> h(ng), hg(ng), dh(ng);
    for (size_t i = 0; i < ng; i++) h[i] = float(i % 53) * 0.1f - 2.5f, dh[i] = 1e-3f;
    out.push_back({"gelu forward + backward", f * (2.0 * ng + 3.0 * ng), timed(world, o.min_seconds, [&] {
                       kernels::gelu_forward(hg.data(), h.data(), ng);
                       kernels::gelu_backward(hg.data(), h.data(), dh.data(), ng);
                   })});
    const int rows = 256, V = 50257, Vp = 50304;  // a GPT-2 head's logits for 256 tokens
    AlignedBuffer<float> logits(size_t(rows) * Vp), losses(rows);
    for (size_t i = 0; i < logits.size(); i++) logits[i] = float(i % 31) * 0.1f;  // later calls see gradients
    std::vector<int> targets(rows);
    for (int r = 0; r < rows; r++) targets[size_t(r)] = (r * 7919) % V;
    out.push_back({"cross-entropy forward + backward", f * 2.0 * rows * Vp, timed(world, o.min_seconds, [&] {
                       kernels::crossentropy_forward_backward(logits.data(), losses.data(), targets.data(), rows, V,
                                                              Vp, 1.0f / rows);
                   })});
    const size_t np = size_t(4) << 20;
    AlignedBuffer<float> p(np), pg(np), m(np), v(np);
    std::fill(p.begin(), p.end(), 0.1f), std::fill(pg.begin(), pg.end(), 1e-3f);
    std::fill(m.begin(), m.end(), 0.0f), std::fill(v.begin(), v.end(), 0.0f);
    int step = 0;
    out.push_back({"AdamW update", f * 7.0 * double(np), timed(world, o.min_seconds, [&] {
                       kernels::adamw_update(p.data(), pg.data(), m.data(), v.data(), np, 1e-4f, 0.9f, 0.95f, 1e-8f,
                                             0.1f, ++step);
                   })});
    return out;
}

// ---- links --------------------------------------------------------------------------------------

std::vector<CommPoint> collectives(comm::Group& world) {
    std::vector<CommPoint> out;
    const int n = world.size();
    if (n < 2) return out;
    for (size_t kib : {64, 256, 1024, 4096, 16384}) {
        const size_t bytes = kib << 10, count = bytes / sizeof(float), per = count / size_t(n);
        AlignedBuffer<float> buf(count), part(per);
        std::fill(buf.begin(), buf.end(), 1e-3f), std::fill(part.begin(), part.end(), 1e-3f);
        auto point = [&](const char* op, double buffer, const std::function<void()>& fn) {
            out.push_back({op, buffer, together(world, fn, 7), 0});
        };
        point("all_reduce", double(count) * 4, [&] { world.all_reduce_sum(buf.data(), count); });
        point("reduce_scatter", double(per) * n * 4, [&] { world.reduce_scatter_sum(buf.data(), part.data(), per); });
        point("all_gather", double(per) * n * 4, [&] { world.all_gather(part.data(), buf.data(), per); });
        // send/recv between ranks 0 and 1 (the others wait at the barrier)
        point("send_recv", double(bytes), [&] {
            if (world.rank() == 0) world.send(buf.data(), bytes, 1, 77);
            if (world.rank() == 1) world.recv(buf.data(), bytes, 0, 77);
        });
    }
    return out;
}

cost::Collective collective_of(const std::string& op) {
    if (op == "all_reduce") return cost::Collective::AllReduce;
    if (op == "reduce_scatter") return cost::Collective::ReduceScatter;
    if (op == "all_gather") return cost::Collective::AllGather;
    return cost::Collective::SendRecv;
}

}  // namespace

// t = steps alpha + bytes_per_rank / beta, least squares (relative: every point weighs the same).
void fit_links(Calibration& c) {
    if (c.comm.empty()) return;
    const int n = c.ranks;
    double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
    for (const CommPoint& p : c.comm) {
        const cost::Collective k = collective_of(p.op);
        const int nk = k == cost::Collective::SendRecv ? 2 : n;
        const double x1 = cost::ring_steps(k, nk) / p.seconds, x2 = cost::ring_bytes_per_rank(k, p.bytes, nk) / p.seconds;
        s11 += x1 * x1, s12 += x1 * x2, s22 += x2 * x2, r1 += x1, r2 += x2;  // rows scaled by 1/t: target 1
    }
    const double det = s11 * s22 - s12 * s12;
    double alpha = (r1 * s22 - r2 * s12) / det, inv_beta = (s11 * r2 - s12 * r1) / det;
    if (alpha < 0 || inv_beta <= 0) {  // degenerate: refit bandwidth alone
        alpha = 0;
        inv_beta = r2 / s22;
    }
    c.alpha_us = alpha * 1e6;
    c.link_GBps = 1.0 / inv_beta / 1e9;
    for (CommPoint& p : c.comm) {
        const cost::Collective k = collective_of(p.op);
        const int nk = k == cost::Collective::SendRecv ? 2 : n;
        p.fitted_seconds = cost::collective_time_s(k, p.bytes, nk, {alpha, 1.0 / inv_beta});
    }
}

namespace {

double resident_gb() {
    std::ifstream f("/proc/self/status");
    std::string key;
    for (std::string line; std::getline(f, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024 / 1e9;
    return 0;
}

// Repeated GEMMs of one training-like shape, `reps` of them (about a millisecond each).
struct GemmLoad {
    int M = 256, K = 256, N = 768;
    AlignedBuffer<float> x, w, y;
    GemmLoad() : x(size_t(M) * K), w(size_t(N) * K), y(size_t(M) * N) {
        for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 97) * 1e-3f;
        for (size_t i = 0; i < w.size(); i++) w[i] = float(i % 89) * 1e-3f;
    }
    void run(int reps) {
        for (int r = 0; r < reps; r++) kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, M, K, N);
    }
};

void measure_overlap_and_loaded_latency(comm::Group& world, Calibration& c) {
    if (c.ranks < 2) return;
    GemmLoad g;
    // overlap: 8 MiB all-reduce on the background thread behind ~ as long a stretch of GEMMs
    const size_t count = size_t(2) << 20;
    AlignedBuffer<float> buf(count);
    const double t_comm = together(world, [&] { world.iall_reduce_sum(buf.data(), count, DType::F32).wait(); });
    const double t_one = together(world, [&] { g.run(1); });
    const int reps = std::max(1, int(t_comm / std::max(t_one, 1e-6)));
    const double t_compute = together(world, [&] { g.run(reps); });
    const double t_both = together(world, [&] {
        comm::Request r = world.iall_reduce_sum(buf.data(), count, DType::F32);
        g.run(reps);
        r.wait();
    });
    c.overlap = std::clamp((t_compute + t_comm - t_both) / t_comm, 0.0, 1.0);
    // latency under load: 40 x (a GEMM stretch of ~1 ms, a 1 KiB all-reduce) against the GEMMs alone
    const int per = std::max(1, int(1e-3 / std::max(t_one, 1e-6)));
    float small[256] = {};
    const double t_plain = together(world, [&] { g.run(40 * per); });
    const double t_synced = together(world, [&] {
        for (int i = 0; i < 40; i++) {
            g.run(per);
            world.all_reduce_sum(small, 256);
        }
    });
    const double extra = std::max(0.0, t_synced - t_plain) / 40;
    c.loaded_alpha_us = extra / cost::ring_steps(cost::Collective::AllReduce, c.ranks) * 1e6;
}

double mem_total_gb() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    double kb = 0;
    while (f >> key >> kb)
        if (key == "MemTotal:") return kb * 1024 / 1e9;
    return 0;
}

}  // namespace

Calibration run(comm::Group& world, const Options& o) {
    if (o.threads > 0) set_threads(o.threads);
    Calibration c;
    c.ranks = world.size();
    c.threads = get_threads();
    c.precision = o.precision;

    cpu_set_t set;
    CPU_ZERO(&set);
    c.cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    c.memory_gb = mem_total_gb() / c.ranks;

    measure_peaks(world, c);
    measure_gemms(world, o, c);
    measure_peaks(world, c);  // again, a minute later: the better of the two
    const platform::ProductIsa isa = kernels::bf16_products_isa(kernels::gemm_backend());
    c.bf16_products_isa = platform::product_isa_name(isa);
    c.bf16_products_peak_gflops =
        platform::isa_peak(isa, c.fp32_peak_gflops, has_bf16_dot() ? c.bf16_peak_gflops : 0, c.amx_peak_gflops);
    fit_gemm_curve(c, o.precision == planner::Precision::Fp32 ? c.fp32_peak_gflops : c.bf16_products_peak_gflops);

    c.triad_GBps = triad_GBps(world, o);
    c.memory = memory_kernels(world, o);
    double bytes = 0, secs = 0;
    for (const MemoryPoint& m : c.memory) bytes += m.bytes, secs += m.seconds;
    c.memory_bound_GBps = bytes / secs / 1e9;

    c.comm = collectives(world);
    fit_links(c);
    c.idle_alpha_us = c.alpha_us;
    measure_overlap_and_loaded_latency(world, c);
    c.alpha_us = std::max(c.alpha_us, c.loaded_alpha_us);

    // what is left resident once every buffer above is freed (and the heap trimmed): the process as
    // the engine runs it, MPI's shared segments and the threads' stacks included
    malloc_trim(0);
    c.reserve_gb = resident_gb();
    world.all_reduce_max(&c.reserve_gb, 1);
    return c;
}

planner::Cluster to_cluster(const Calibration& c) {
    planner::Cluster cl;
    planner::GpuSpec& g = cl.gpu;
    char name[64];
    std::snprintf(name, sizeof(name), "cpu-%dx%d", c.ranks, c.threads);
    g.name = name;
    g.peak_tflops = (c.bf16_products_peak_gflops > 0 ? c.bf16_products_peak_gflops : c.bf16_peak_gflops) / 1e3;
    g.peak_tflops_tf32 = g.peak_tflops_fp32 = c.fp32_peak_gflops / 1e3;
    g.memory_gb = c.memory_gb;
    g.hbm_GBps = c.triad_GBps;
    // one node: nothing crosses a network, so both links are the one measured
    const double link = c.link_GBps > 0 ? c.link_GBps : c.triad_GBps;
    g.intra_node_GBps = g.inter_node_GBps = link;
    cl.num_gpus = cl.gpus_per_node = c.ranks;
    cl.intra_node_alpha_us = cl.inter_node_alpha_us = c.alpha_us;
    cl.reserve_gb = c.reserve_gb;
    cl.comm_overlap = c.overlap;
    cl.efficiency.gemm_max = c.gemm_max;
    cl.efficiency.gemm_half_dim = c.gemm_half_dim;
    cl.threads_per_rank = c.threads;
    cl.efficiency.lanes_gemm_max = c.lanes_gemm_max;
    cl.efficiency.lanes_gemm_half_dim = c.lanes_gemm_half_dim;
    cl.efficiency.memory = std::clamp(c.memory_bound_GBps / c.triad_GBps, 0.01, 1.0);
    cl.alone_speedup = c.alone_speedup;
    // each shape's own measurement, for what the curve cannot say (hardware.h gemm_efficiency_at)
    const double peak = c.precision == planner::Precision::Fp32 ? c.fp32_peak_gflops : c.bf16_products_peak_gflops;
    const auto shapes = [&](const std::vector<GemmPoint>& points) -> std::shared_ptr<const std::vector<planner::MeasuredGemm>> {
        if (points.empty() || peak <= 0) return nullptr;
        auto v = std::make_shared<std::vector<planner::MeasuredGemm>>();
        for (const GemmPoint& g : points) v->push_back({double(g.M), double(g.N), double(g.K), std::min(1.0, g.gflops / peak)});
        return v;
    };
    cl.efficiency.gemm_shapes = shapes(c.gemm);
    cl.efficiency.lanes_gemm_shapes = shapes(c.lanes_gemm);
    return cl;
}

nlohmann::json to_json(const Calibration& c) {
    nlohmann::json j = planner::cluster_to_json(to_cluster(c));
    nlohmann::json gemm = nlohmann::json::array(), mem = nlohmann::json::array(), links = nlohmann::json::array();
    nlohmann::json lanes = nlohmann::json::array();
    for (const GemmPoint& g : c.gemm) gemm.push_back({{"M", g.M}, {"N", g.N}, {"K", g.K}, {"gflops", g.gflops}});
    for (const GemmPoint& g : c.lanes_gemm) lanes.push_back({{"M", g.M}, {"N", g.N}, {"K", g.K}, {"gflops", g.gflops}});
    nlohmann::json alone = nlohmann::json::array();
    for (const GemmPoint& g : c.alone_gemm) alone.push_back({{"M", g.M}, {"N", g.N}, {"K", g.K}, {"gflops", g.gflops}});
    for (const MemoryPoint& m : c.memory)
        mem.push_back({{"kernel", m.kernel}, {"bytes", m.bytes}, {"seconds", m.seconds}, {"GBps", m.bytes / m.seconds / 1e9}});
    for (const CommPoint& p : c.comm)
        links.push_back({{"op", p.op}, {"bytes", p.bytes}, {"seconds", p.seconds}, {"fitted_seconds", p.fitted_seconds}});
    j["measured"] = {{"ranks", c.ranks},
                     {"threads_per_rank", c.threads},
                     {"gemm_precision", planner::precision_name(c.precision)},
                     {"fp32_peak_gflops", c.fp32_peak_gflops},
                     {"bf16_peak_gflops", c.bf16_peak_gflops},
                     {"amx_peak_gflops", c.amx_peak_gflops},
                     {"bf16_products_isa", c.bf16_products_isa},
                     {"bf16_products_peak_gflops", c.bf16_products_peak_gflops},
                     {"gemm", gemm},
                     {"gemm_fit_rms_relative_error", c.gemm_fit_rms},
                     {"lanes_gemm", lanes},
                     {"lanes_gemm_fit_rms_relative_error", c.lanes_gemm_fit_rms},
                     {"alone_gemm", alone},
                     {"triad_GBps", c.triad_GBps},
                     {"memory_bound_kernels", mem},
                     {"memory_bound_GBps", c.memory_bound_GBps},
                     {"collectives", links},
                     {"alpha_us_fitted_idle", c.idle_alpha_us},
                     {"alpha_us_under_load", c.loaded_alpha_us},
                     {"cpus_per_rank", c.cpus},
                     {"collectives_backend", enum_name(comm::kCollectivesNames, comm::collectives())}};
    return j;
}

std::string summary(const Calibration& c) {
    std::ostringstream s;
    char buf[256];
    auto line = [&](const char* f, auto... a) {
        std::snprintf(buf, sizeof(buf), f, a...);
        s << buf << "\n";
    };
    line("calibrated %d rank(s) x %d thread(s), measured on every rank at once:", c.ranks, c.threads);
    line("  peaks per rank      fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, AMX %s", c.fp32_peak_gflops, c.bf16_peak_gflops,
         c.amx_peak_gflops > 0 ? shardlm::format("%.1f GFLOP/s", c.amx_peak_gflops).c_str() : "none");
    line("  bf16 products on    %s (their curve and the planner's 16-bit peak: %.1f GFLOP/s)", c.bf16_products_isa.c_str(),
         c.bf16_products_peak_gflops);
    line("  %s GEMMs         %zu shapes; fit gemm_max %.3f, gemm_half_dim %.0f (rms error %.1f %%)",
         planner::precision_name(c.precision).c_str(), c.gemm.size(), c.gemm_max, c.gemm_half_dim, 100 * c.gemm_fit_rms);
    for (const GemmPoint& g : c.gemm)
        line("      M %5d  N %5d  K %5d  %7.1f GFLOP/s", g.M, g.N, g.K, g.gflops);
    if (!c.lanes_gemm.empty()) {
        line("  lanes GEMMs         %d single-threaded products at once; fit lanes_gemm_max %.3f, lanes_gemm_half_dim "
             "%.0f (rms error %.1f %%)", c.threads, c.lanes_gemm_max, c.lanes_gemm_half_dim, 100 * c.lanes_gemm_fit_rms);
        for (const GemmPoint& g : c.lanes_gemm)
            line("      M %5d  N %5d  K %5d  %7.1f GFLOP/s", g.M, g.N, g.K, g.gflops);
    }
    if (!c.alone_gemm.empty()) {
        line("  alone               rank 0's products with the other ranks idle: alone_speedup %.3f", c.alone_speedup);
        for (const GemmPoint& g : c.alone_gemm)
            line("      M %5d  N %5d  K %5d  %7.1f GFLOP/s", g.M, g.N, g.K, g.gflops);
    }
    line("  memory              triad %.1f GB/s; the engine's memory-bound kernels %.1f GB/s (efficiency %.2f)",
         c.triad_GBps, c.memory_bound_GBps, c.memory_bound_GBps / c.triad_GBps);
    for (const MemoryPoint& m : c.memory) line("      %-34s %6.1f GB/s", m.kernel.c_str(), m.bytes / m.seconds / 1e9);
    if (c.comm.empty()) line("  links               %s", "one rank: nothing to measure");
    else {
        line("  links               alpha %.1f us per ring step (idle fit %.1f, under load %.1f), %.2f GB/s per rank "
             "(fit of %zu points); overlap with compute %.2f",
             c.alpha_us, c.idle_alpha_us, c.loaded_alpha_us, c.link_GBps, c.comm.size(), c.overlap);
        for (const CommPoint& p : c.comm)
            line("      %-15s %9.0f KiB  %8.1f us  fit %8.1f us", p.op.c_str(), p.bytes / 1024, p.seconds * 1e6,
                 p.fitted_seconds * 1e6);
    }
    line("  reserve             %.3f GB per rank without a model; machine %.1f GB per rank", c.reserve_gb, c.memory_gb);
    if (c.cpus > 0 && c.cpus < c.threads)
        line("  WARNING: this rank may run on %d CPU(s) only but has %d threads (mpirun binds each rank to a core by "
             "default: add --bind-to none, or run one rank without mpirun)", c.cpus, c.threads);
    return s.str();
}

}  // namespace shardlm::calibrate
