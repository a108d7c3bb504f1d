// comm/mpi_collectives.h (internal): Group's collectives on the MPI library's own algorithms
// (`--collectives mpi`: MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast), so
// that a cluster's tuned MPI (UCX/UCC, HCOLL, in-network reduction) serves. Same signatures and
// semantics as comm/ring.h, waited on by comm/progress.h like the ring's messages (so timeouts and the
// flight recorder behave alike). Differences from the ring: the sums are MPI's (the same on every
// rank, but not necessarily in the ring's order: results agree to rounding, not to the bit), and
// op.bytes_sent counts what the ring would have sent (the library's own traffic is not visible).
// bf16/fp16 sums use an MPI_Op that adds in fp32 and rounds to nearest even, as the ring does.
#pragma once
#include <mpi.h>

#include <cstddef>

#include "shardlm/comm/progress.h"
#include "shardlm/comm/ring.h"

namespace shardlm::comm::detail {

template <typename T, typename F>
void mpi_all_reduce(Op& op, MPI_Comm c, int r, int n, T* data, size_t count, F f);
template <typename T, typename F>
void mpi_reduce_scatter(Op& op, MPI_Comm c, int r, int n, const T* in, T* out, size_t m, F f);
void mpi_all_gather(Op& op, MPI_Comm c, int r, int n, const void* in, void* out, size_t b);
void mpi_broadcast(Op& op, MPI_Comm c, int r, int n, void* data, size_t bytes, int root);

}  // namespace shardlm::comm::detail
