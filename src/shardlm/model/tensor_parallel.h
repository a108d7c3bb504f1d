// model/tensor_parallel.h: what a tensor-parallel unit needs from its group, without MPI.
//
// model/ knows no MPI: parallel/tensor_parallel.h implements this interface over a comm::Group, and
// no_tensor_parallel() is the group of one (every operation the identity). The Megatron conjugate
// operators are written with it, named after the region they cross:
//
//   f  copy_to_tp_region           forward identity            backward all-reduce
//   g  reduce_from_tp_region       forward all-reduce          backward identity
// and with sequence parallelism (Korthikanti et al. 2022), rows of (B*T, C) split into tp blocks:
//   gather_from_sequence_region    forward all-gather          backward reduce-scatter
//   scatter_to_sequence_region     forward reduce-scatter      backward all-gather
// A unit calls the forward half in its forward and the backward half in its backward.
#pragma once
#include <cstddef>

namespace shardlm::model {

class TensorParallel {
public:
    virtual ~TensorParallel() = default;
    virtual int size() const = 0;
    virtual int rank() const = 0;
    virtual void all_reduce_sum(float* x, size_t n) = 0;
    virtual void all_reduce_max(float* x, size_t n) = 0;
    // out: size() * n_per_rank floats; block r = rank r's in.
    virtual void all_gather(const float* in, float* out, size_t n_per_rank) = 0;
    // The same for any element type (16-bit activations): bytes_per_rank bytes each.
    virtual void all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) = 0;
    // in: size() * n_per_rank floats; out = block rank() of the sum over ranks.
    virtual void reduce_scatter_sum(const float* in, float* out, size_t n_per_rank) = 0;
};

// The group of one: every collective is a copy or nothing.
TensorParallel& no_tensor_parallel();

}  // namespace shardlm::model
