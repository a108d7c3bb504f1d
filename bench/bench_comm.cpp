// bench/bench_comm.cpp: communication layer benchmarks. Run under mpirun (2 ranks on this machine):
//   mpirun --allow-run-as-root -np 2 ./bench_comm [--sizes-mib 1,16,64] [--iters 5] [--overlap-mib 16]
//                                              [--segment-kib K] [--skip-overlap 1]
// 1b. The alpha-beta fit (calibrate's) of the collectives through the engine with each backend,
//    --collectives ring (ours) and mpi (the MPI library's).
// 1. Bus bandwidth (NCCL-tests convention: all-reduce algbw * 2(n-1)/n, reduce-scatter and
//    all-gather algbw * (n-1)/n, algbw = whole buffer / time) of our ring collectives vs Open MPI's
//    MPI_Allreduce (in place) / MPI_Reduce_scatter_block / MPI_Allgather. Median of --iters.
// 2. Overlap: one GEMM thread per rank (the training loop's situation) with a non-blocking
//    all-reduce running meanwhile: time of compute alone, all-reduce alone, and
//    (start, compute, wait); hidden = (t_compute + t_comm - t_overlap) / t_comm (median over
//    iterations of the per-iteration value). For each wait
//    mode of the communication thread, and for MPI_Iallreduce + compute + MPI_Wait as the baseline.
#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shardlm/calibrate/calibrate.h"
#include "bench_options.h"
#include "shardlm/comm/group.h"
#include "shardlm/comm/mpi_env.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/gemm/gemm.h"

using namespace shardlm;
using namespace shardlm::comm;

namespace {

double cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Times fn (collective) over iters after one warm-up; the time of an iteration is the slowest
// rank's (max over ranks), as in nccl-tests.
double time_collective(Group& world, int iters, const std::function<void()>& fn) {
    fn();
    std::vector<double> ts;
    for (int i = 0; i < iters; i++) {
        world.barrier();
        double t0 = now_s();
        fn();
        double t = now_s() - t0;
        world.all_reduce_max(&t, 1);
        ts.push_back(t);
    }
    return median(ts);
}

struct Gemm {
    int N = 256, C = 768, OC = 768;
    AlignedBuffer<float> a, w, out;
    Gemm() : a(size_t(N) * C), w(size_t(OC) * C), out(size_t(N) * OC) {
        for (size_t i = 0; i < a.size(); i++) a[i] = float(i % 97) * 1e-3f;
        for (size_t i = 0; i < w.size(); i++) w[i] = float(i % 89) * 1e-3f;
    }
    void run(int reps) {
        for (int r = 0; r < reps; r++) kernels::matmul_forward(out.data(), a.data(), w.data(), nullptr, N, C, OC);
    }
};

}  // namespace

int main(int argc, char** argv) {
    ensure_blas_coretype(argc, argv);
    MpiEnv env(&argc, &argv);
    Group& world = env.world();
    const int n = world.size(), me = world.rank();
    std::vector<size_t> sizes_mib = {1, 16, 64};
    int iters = 5;
    size_t overlap_mib = 16;
    bool skip_overlap = false;
    if (!options_paired("bench_comm", argc, argv)) return 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--sizes-mib") {
            sizes_mib.clear();
            for (const char* p = argv[i + 1]; *p;) {
                sizes_mib.push_back(std::strtoull(p, const_cast<char**>(&p), 10));
                if (*p == ',') p++;
            }
        } else if (k == "--skip-overlap") {
            skip_overlap = std::atoi(argv[i + 1]) != 0;
        } else if (k == "--iters") {
            iters = std::atoi(argv[i + 1]);
        } else if (k == "--segment-kib") {
            set_segment_bytes(std::strtoull(argv[i + 1], nullptr, 10) << 10);
        } else if (k == "--overlap-mib") {
            overlap_mib = std::strtoull(argv[i + 1], nullptr, 10);
        } else {
            std::fprintf(stderr, "bench_comm: unknown option %s (see the comment at the top of bench/bench_comm.cpp)\n",
                         k.c_str());
            return 2;
        }
    }
    set_threads(1);  // one compute thread per rank: 2 ranks on 2 cores
    if (n < 2 && me == 0) std::printf("note: world size 1 (run under mpirun -np 2 for meaningful numbers)\n");
    MPI_Comm comm = world.raw_comm();
    const bool mpi = comm != MPI_COMM_NULL;

    // ---- 1. bus bandwidth ----------------------------------------------------------------------
    if (me == 0) {
        std::printf("\nbus bandwidth, %d ranks, GB/s (median of %d; NCCL-tests convention; segments %zu KiB)\n", n,
                    iters, segment_bytes() >> 10);
        std::printf("%-16s %8s %12s %12s %10s\n", "collective", "MiB", "ours(ring)", "Open MPI", "ours/MPI");
    }
    for (size_t mib : sizes_mib) {
        const size_t bytes = mib << 20, count = bytes / 4, m = count / size_t(n);
        AlignedBuffer<float> buf(count), in(count), out(m);
        for (size_t i = 0; i < count; i++) in[i] = buf[i] = float(i % 1000) * 1e-3f;
        const double ar_f = 2.0 * (n - 1) / n, rs_f = double(n - 1) / n;
        struct Row {
            const char* name;
            double factor;
            std::function<void()> ours, theirs;
        };
        std::vector<Row> rows = {
            {"all_reduce", ar_f, [&] { world.all_reduce_sum(buf.data(), count); },
             [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM, comm); }},
            {"reduce_scatter", rs_f, [&] { world.reduce_scatter_sum(in.data(), out.data(), m); },
             [&] { MPI_Reduce_scatter_block(in.data(), out.data(), int(m), MPI_FLOAT, MPI_SUM, comm); }},
            {"all_gather", rs_f, [&] { world.all_gather(out.data(), buf.data(), m); },
             [&] { MPI_Allgather(out.data(), int(m), MPI_FLOAT, buf.data(), int(m), MPI_FLOAT, comm); }},
        };
        for (auto& row : rows) {
            const double total = double(m * size_t(n) * 4);
            double t_ours = time_collective(world, iters, row.ours);
            double t_mpi = mpi ? time_collective(world, iters, row.theirs) : 0;
            double bw_ours = total / t_ours / 1e9 * row.factor, bw_mpi = mpi ? total / t_mpi / 1e9 * row.factor : 0;
            if (me == 0)
                std::printf("%-16s %8zu %12.2f %12.2f %10.2f\n", row.name, mib, bw_ours, bw_mpi,
                            bw_mpi > 0 ? bw_ours / bw_mpi : 0.0);
        }
    }

    // ---- 1b. the alpha-beta model of each backend (--collectives ring | mpi) ------------------------
    // Through the Group (the engine, as training calls it), 64 KiB - 16 MiB, fitted as `calibrate`
    // fits its links: t = ring steps x alpha + bytes per rank / beta (cost/comm.h).
    if (n > 1) {
        if (me == 0)
            std::printf("\nalpha-beta fit per backend, %d ranks (through the engine; calibrate's fit of cost/comm.h's "
                        "ring model)\n%-8s %10s %10s\n",
                        n, "backend", "alpha us", "beta GB/s");
        for (CollectivesBackend b : {CollectivesBackend::Ring, CollectivesBackend::Mpi}) {
            set_collectives(b);
            shardlm::calibrate::Calibration c;
            c.ranks = n;
            for (size_t kib : {64, 256, 1024, 4096, 16384}) {
                const size_t count = (kib << 10) / 4, per = count / size_t(n);
                std::vector<float> buf(count, 1e-3f), part(per, 1e-3f);
                c.comm.push_back({"all_reduce", double(count) * 4,
                                  time_collective(world, iters, [&] { world.all_reduce_sum(buf.data(), count); }), 0});
                c.comm.push_back({"reduce_scatter", double(per) * n * 4,
                                  time_collective(world, iters, [&] { world.reduce_scatter_sum(buf.data(), part.data(), per); }), 0});
                c.comm.push_back({"all_gather", double(per) * n * 4,
                                  time_collective(world, iters, [&] { world.all_gather(part.data(), buf.data(), per); }), 0});
            }
            shardlm::calibrate::fit_links(c);
            if (me == 0)
                std::printf("%-8s %10.1f %10.2f\n", b == CollectivesBackend::Ring ? "ring" : "mpi", c.alpha_us, c.link_GBps);
        }
        set_collectives(CollectivesBackend::Ring);
    }

    // ---- 2. overlap ----------------------------------------------------------------------------
    if (skip_overlap) return 0;
    const size_t count = (overlap_mib << 20) / 4;
    AlignedBuffer<float> grad(count);
    Gemm gemm;
    // Calibrate: enough GEMMs to take about twice the all-reduce time.
    double t_gemm = time_collective(world, 3, [&] { gemm.run(1); });
    double t_ar = time_collective(world, iters, [&] { world.all_reduce_sum(grad.data(), count); });
    int reps = std::max(1, int(2.0 * t_ar / t_gemm + 0.5));
    world.broadcast_bytes(&reps, sizeof reps, 0);
    if (me == 0) {
        std::printf("\noverlap: %zu MiB all-reduce with %d x GEMM(%dx%dx%d) on one thread per rank (ms, median of %d)\n",
                    overlap_mib, reps, gemm.N, gemm.C, gemm.OC, iters);
        std::printf("%-28s %10s %10s %10s %8s\n", "mode", "compute", "comm", "overlap", "hidden");
    }
    struct Mode {
        const char* name;
        std::function<void()> start, wait;
    };
    Request rq;
    MPI_Request mrq = MPI_REQUEST_NULL;
    auto ours = [&](WaitMode wm) {
        return std::function<void()>([&, wm] {
            set_background_wait(wm);
            rq = world.iall_reduce_sum(grad.data(), count);
        });
    };
    std::vector<Mode> modes = {
        {"ring + comm thread (sleep)", ours(WaitMode::Sleep), [&] { rq.wait(); }},
        {"ring + comm thread (yield)", ours(WaitMode::Yield), [&] { rq.wait(); }},
        {"ring + comm thread (spin)", ours(WaitMode::Spin), [&] { rq.wait(); }},
    };
    if (mpi)
        modes.push_back({"MPI_Iallreduce + MPI_Wait",
                         [&] { MPI_Iallreduce(MPI_IN_PLACE, grad.data(), int(count), MPI_FLOAT, MPI_SUM, comm, &mrq); },
                         [&] { MPI_Wait(&mrq, MPI_STATUS_IGNORE); }});
    for (auto& mode : modes) {
        std::vector<double> tc, ta, to, th;
        for (int it = 0; it < iters; it++) {
            tc.push_back(time_collective(world, 1, [&] { gemm.run(reps); }));
            ta.push_back(time_collective(world, 1, [&] { mode.start(); mode.wait(); }));
            to.push_back(time_collective(world, 1, [&] {
                mode.start();
                gemm.run(reps);
                mode.wait();
            }));
            th.push_back((tc.back() + ta.back() - to.back()) / ta.back());
        }
        // hidden: median of the per-iteration fractions (the three timings of an iteration are
        // taken back to back, so a change of background load affects them alike).
        double c = median(tc), a = median(ta), o = median(to), hidden = median(th);
        if (me == 0)
            std::printf("%-28s %10.2f %10.2f %10.2f %7.0f%%\n", mode.name, c * 1e3, a * 1e3, o * 1e3, hidden * 100);
    }
    // How much CPU the communication itself needs: process CPU time of a non-blocking all-reduce
    // while the main thread sleeps in wait() (so the CPU time is the communication thread's).
    set_background_wait(WaitMode::Sleep);
    {
        std::vector<double> cpu, wall;
        for (int it = 0; it < iters; it++) {
            world.barrier();
            double c0 = cpu_s(), t0 = now_s();
            world.iall_reduce_sum(grad.data(), count).wait();
            cpu.push_back(cpu_s() - c0);
            wall.push_back(now_s() - t0);
        }
        if (me == 0)
            std::printf("\ncommunication thread (sleep mode) during a %zu MiB all-reduce: %.2f ms CPU of %.2f ms wall "
                        "(rank 0, medians)\n",
                        overlap_mib, median(cpu) * 1e3, median(wall) * 1e3);
    }
    world.reset_stats();
    world.all_reduce_sum(grad.data(), count);
    if (me == 0) std::printf("\nstats of one %zu MiB all-reduce on rank 0:\n%s", overlap_mib, world.stats_table().c_str());
    return 0;
}
