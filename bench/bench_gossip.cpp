// bench/bench_gossip.cpp: seed 002's claim measured: global averaging costs more as the rank count
// grows, partial averaging with neighbours does not. Under mpirun with N ranks, for a replica of
// --mib MiB of fp32 parameters, the median time of one synchronisation of:
//   allreduce       the ring all-reduce of the replica (comm/group.h: what local SGD's averaging and
//                   every all-reduce step send: 2(N-1)/N of it per rank)
//   gossip ring     the replica to both ring neighbours and theirs received (point to point), mixed
//   one-peer        the replica to one peer (i XOR 2^k, or i + 2^k) and the peer's received, mixed
// (parallel::gossip_round, what --dp-algo gossip runs). Rank 0 prints one line per kind with the
// bytes each rank sent, and then the planner's alpha-beta model (cost/comm.h) of the same
// synchronisations for N = 2 ... 256 ranks across a network link (--gbps GB/s per rank, --alpha-us).
//   mpirun --allow-run-as-root --oversubscribe -np N ./bench_gossip [--mib 16] [--iters 9] [--gbps 25]
//          [--alpha-us 6]         (add --mca btl self,tcp for TCP instead of shared memory)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_options.h"
#include "shardlm/comm/group.h"
#include "shardlm/comm/mpi_env.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/timer.h"
#include "shardlm/cost/comm.h"
#include "shardlm/parallel/dp_algo.h"

using namespace shardlm;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    comm::MpiEnv env(&argc, &argv);
    double mib = 16, gbps = 25, alpha_us = 6;
    int iters = 9;
    if (!options_paired("bench_gossip", argc, argv)) return 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--mib") mib = std::atof(argv[i + 1]);
        else if (k == "--iters") iters = std::atoi(argv[i + 1]);
        else if (k == "--gbps") gbps = std::atof(argv[i + 1]);
        else if (k == "--alpha-us") alpha_us = std::atof(argv[i + 1]);
        else {
            std::fprintf(stderr, "bench_gossip: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    comm::Group& world = env.world();
    const int N = world.size();
    const size_t n = size_t(mib * 1024 * 1024 / sizeof(float));
    AlignedBuffer<float> x(n);
    for (size_t i = 0; i < n; i++) x.data()[i] = float(world.rank() + 1) * 1e-3f * float(i % 1000);
    std::vector<AlignedBuffer<float>> recv;
    struct Kind {
        const char* name;
        std::function<void(int)> run;
    };
    const Kind kinds[] = {
        {"allreduce", [&](int) { world.all_reduce_sum(x.data(), n); }},
        {"gossip ring", [&](int s) { parallel::gossip_round(world, parallel::Topology::Ring, s, x.data(), n, recv); }},
        {"one-peer", [&](int s) { parallel::gossip_round(world, parallel::Topology::OnePeerExp, s, x.data(), n, recv); }},
    };
    if (world.rank() == 0)
        std::printf("bench_gossip: %d ranks, a replica of %.1f MiB (fp32), median of %d synchronisations\n", N, mib, iters);
    for (const Kind& k : kinds) {
        std::vector<double> t;
        uint64_t bytes = 0;
        for (int it = 0; it <= iters; it++) {
            world.barrier();
            world.reset_stats();
            const double t0 = now_s();
            k.run(it);
            double dt = now_s() - t0;
            world.all_reduce_max(&dt, 1);  // the slowest rank's
            if (it > 0) t.push_back(dt);   // the first is a warm-up
            bytes = world.stats().total_bytes_sent();
        }
        if (world.rank() == 0)
            std::printf("  %-12s %8.2f ms   sent %10.2f MiB per rank\n", k.name, 1e3 * median(t), double(bytes) / (1 << 20));
    }
    if (world.rank() == 0) {
        const cost::Link link{alpha_us * 1e-6, gbps * 1e9};
        const double B = double(n) * 4;
        std::printf("planner (alpha-beta, %g GB/s, %g us per step): ms per synchronisation of the same replica\n",
                    gbps, alpha_us);
        std::printf("  %6s %12s %12s %12s\n", "ranks", "allreduce", "gossip ring", "one-peer");
        for (int r : {2, 4, 8, 16, 32, 64, 128, 256}) {
            const double ar = cost::collective_time_s(cost::Collective::AllReduce, B, r, link);
            const double one = cost::collective_time_s(cost::Collective::SendRecv, B, 2, link);
            std::printf("  %6d %12.2f %12.2f %12.2f\n", r, 1e3 * ar, 1e3 * (r > 2 ? 2 : 1) * one, 1e3 * one);
        }
    }
    return 0;
}
