// comm/mpi_call.h: what every MPI call of the library goes through: SHARDLM_MPI_CHECK (an MPI failure
// becomes a shardlm::Error naming the call, the file and the line instead of an abort), and this
// process's world rank (0 without MPI). comm/mpi_env.h starts MPI and sets the rank.
#pragma once
#include <mpi.h>

namespace shardlm::comm {

// Throws shardlm::Error("MPI error in <call> at <file>:<line>: <MPI's error string>").
[[noreturn]] void mpi_fail(int rc, const char* call, const char* file, int line);

// World rank of this process (0 without MPI); valid once an MpiEnv exists.
int world_rank();
void set_world_rank(int rank);  // MpiEnv's

}  // namespace shardlm::comm

#define SHARDLM_MPI_CHECK(call)                                                  \
    do {                                                                         \
        int shardlm_mpi_rc_ = (call);                                            \
        if (shardlm_mpi_rc_ != MPI_SUCCESS)                                      \
            ::shardlm::comm::mpi_fail(shardlm_mpi_rc_, #call, __FILE__, __LINE__); \
    } while (0)
