#include "shardlm/comm/mpi_call.h"

#include <cstdio>

#include "shardlm/core/check.h"

namespace shardlm::comm {

namespace {
int g_world_rank = 0;
}  // namespace

void mpi_fail(int rc, const char* call, const char* file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) std::snprintf(msg, sizeof msg, "error code %d", rc);
    fail("MPI error in ", call, " at ", file, ":", line, ": ", msg);
}

int world_rank() { return g_world_rank; }
void set_world_rank(int rank) { g_world_rank = rank; }

}  // namespace shardlm::comm
