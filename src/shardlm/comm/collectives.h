// comm/collectives.h: what data parallelism (Collectives) and the pipeline (Messages) need of a
// group, as interfaces.
//
// comm::Group implements both over MPI (comm/group.h). Tests implement them with ranks as threads in
// one process (tests/thread_meeting.h), so the ZeRO strategies, the parameter store and the pipeline
// executor run and are compared in-process, without mpirun. The sums' order is the implementation's; Group's is the
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

// Point-to-point messages between a group's ranks: the pipeline's activations and their gradients.
// A send's buffer belongs to the library until its Request completes; a receive blocks.
class Messages {
public:
    virtual ~Messages() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual Request isend(const void* data, size_t bytes, int dst, int tag) = 0;
    virtual void recv(void* data, size_t bytes, int src, int tag) = 0;
};

}  // namespace shardlm::comm
