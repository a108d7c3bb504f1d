#include "shardlm/comm/mpi_env.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "shardlm/comm/progress.h"
#include "shardlm/comm/group.h"

namespace shardlm::comm {

namespace {
bool g_alive = false;
}  // namespace

bool MpiEnv::launched_by_mpirun() {
    return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

MpiEnv::MpiEnv(int* argc, char*** argv) {
    SHARDLM_CHECK(!g_alive, "MpiEnv: only one MpiEnv may exist per process");
    if (launched_by_mpirun()) {
        int inited = 0;
        SHARDLM_MPI_CHECK(MPI_Initialized(&inited));
        SHARDLM_CHECK(!inited, "MpiEnv: MPI is already initialised");
        int provided = 0;
        SHARDLM_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
        SHARDLM_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        SHARDLM_CHECK(provided >= MPI_THREAD_SERIALIZED, "MpiEnv: this MPI provides thread level ", provided,
                      ", shardlm needs MPI_THREAD_SERIALIZED (", int(MPI_THREAD_SERIALIZED), ")");
        SHARDLM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
        SHARDLM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
        distributed_ = true;
        set_world_rank(rank_);
        if (const char* w = std::getenv("SHARDLM_COMM_WAIT")) {  // benchmarks: compare the wait modes
            const std::string m = w;
            SHARDLM_CHECK(m == "sleep" || m == "yield" || m == "spin", "SHARDLM_COMM_WAIT='", m,
                          "' is not known\n---> HINT: sleep (the default), yield or spin");
            set_background_wait(m == "spin" ? WaitMode::Spin : m == "yield" ? WaitMode::Yield : WaitMode::Sleep);
        }
        world_ = std::make_unique<Group>(Group::from_comm(MPI_COMM_WORLD));
    } else {
        set_world_rank(0);
        world_ = std::make_unique<Group>(Group::self());
    }
    g_alive = true;
}

MpiEnv::~MpiEnv() {
    world_.reset();
    detail::progress().shutdown();
    if (distributed_) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    g_alive = false;
}

void MpiEnv::abort(int code) const {
    std::fflush(stdout);
    std::fflush(stderr);
    if (distributed_) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

}  // namespace shardlm::comm
