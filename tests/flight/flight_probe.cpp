// tests/flight/flight_probe.cpp: a job that goes wrong in one communication, for the flight
// recorder's tests (tests/cli/test_flight.cpp). Under mpirun with 2+ ranks:
//   flight_probe <all_reduce|reduce_scatter|all_gather|broadcast|barrier|send_recv> <stall|mismatch> <dir>
// Every rank runs the operation twice on a group named "probe"; then, the third time,
//   stall:    world rank 1 sleeps instead (it never enters the operation),
//   mismatch: world rank 1 runs a different collective (an all-gather, or an all-reduce for
//             all_gather) and the others the named one.
// --comm-timeout is 2 s: a rank whose operation times out dumps its flight record into <dir> and
// aborts the job; mpirun's SIGTERM makes the others dump theirs. A rank whose operation completed
// dumps its record and exits.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "shardlm/comm/flight.h"
#include "shardlm/comm/group.h"
#include "shardlm/comm/mpi_env.h"

using namespace shardlm::comm;

namespace {
void on_term(int) { flight::poke("SIGTERM"); }
}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: flight_probe KIND stall|mismatch DIR\n");
        return 2;
    }
    const std::string kind = argv[1], mode = argv[2];
    MpiEnv env(&argc, &argv);
    Group g = env.world().split(0, env.world_rank());
    g.set_name("probe");
    flight::set_dump_dir(argv[3]);
    flight::install_signal_dump();
    std::signal(SIGTERM, on_term);
    set_timeout(2);
    const size_t n = 256;
    std::vector<float> buf(n * size_t(g.size()), 1.0f), out(n * size_t(g.size()));
    auto run = [&](const std::string& k) {
        if (k == "all_reduce") g.all_reduce_sum(buf.data(), n);
        else if (k == "reduce_scatter") g.reduce_scatter_sum(buf.data(), out.data(), n);
        else if (k == "all_gather") g.all_gather(buf.data(), out.data(), n);
        else if (k == "broadcast") g.broadcast(buf.data(), n, 0);
        else if (k == "barrier") g.barrier();
        else if (k == "send_recv") {  // world rank 0 receives from world rank 1 (a send this small is eager)
            if (g.rank() == 0) g.recv(out.data(), n * sizeof(float), 1, 7);
            else if (g.rank() == 1) g.send(buf.data(), n * sizeof(float), 0, 7);
        } else {
            std::fprintf(stderr, "flight_probe: unknown kind %s\n", k.c_str());
            std::exit(2);
        }
    };
    try {
        run(kind);
        run(kind);
        if (env.world_rank() == 1 && mode == "stall") {
            ::sleep(120);  // mpirun ends this rank once rank 0 has timed out
        } else if (env.world_rank() == 1 && mode == "mismatch") {
            run(kind == "all_gather" ? "all_reduce" : "all_gather");
        } else {
            run(kind);
        }
        flight::dump("completed");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "flight_probe (rank %d): %s\n", env.world_rank(), e.what());
        flight::dump(e.what());
        env.abort(1);
    }
    return 0;
}
