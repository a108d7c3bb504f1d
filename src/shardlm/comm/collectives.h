// comm/collectives.h: the non-blocking collectives data parallelism needs, as an interface.
//
// comm::Group implements it over MPI (comm/group.h). Tests implement it with ranks as threads in one
// process (tests/parallel/thread_group.h), so the ZeRO strategies and the parameter store run and
// are compared in-process, without mpirun. The sums' order is the implementation's; Group's is the
// fixed ring order that makes every rank's result bit-identical.
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::comm {

class Request;

class Collectives {
public:
    virtual ~Collectives() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // n elements of type t summed over the group, in place.
    virtual Request iall_reduce_sum(void* data, size_t n, DType t) = 0;
    // in: size() * n_per_rank elements; out (n_per_rank) receives block rank() of the sum.
    virtual Request ireduce_scatter_sum(const void* in, void* out, size_t n_per_rank, DType t) = 0;
    // out: size() * bytes_per_rank; block r of out = in of rank r (in may alias out's own block).
    virtual Request iall_gather_bytes(const void* in, void* out, size_t bytes_per_rank) = 0;
};

}  // namespace shardlm::comm
