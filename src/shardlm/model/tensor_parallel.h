// model/tensor_parallel.h: what a tensor-parallel unit needs from its group, without MPI.
//
// model/ knows no MPI: parallel/tensor_parallel.h implements this interface over a comm::Group,
// no_tensor_parallel() is the group of one (every operation the identity), and the tests run ranks as
// threads that meet in memory (tests/model/test_tensor_parallel.cpp). Where tensor parallelism lives:
//   - which axis of each tensor is cut: the layout (model/layout.cpp): c_attn (whole heads) and c_fc
//     by output columns, the two projections by input rows, wte by vocabulary rows; LayerNorms,
//     row-parallel biases and wpe replicated;
//   - Megatron's conjugate operators (model/unit_ops.h, units.cpp):
//       f (forward identity, backward all-reduce): gather_input, and in backward reduce_input_grad
//       g (forward all-reduce, backward identity): row_parallel_residual, and in backward
//         row_parallel_dout
//     with sequence parallelism (Korthikanti et al. 2022, rows of (B*T, C) split into tp blocks) f
//     becomes an all-gather forward and a reduce-scatter backward, g a reduce-scatter forward and an
//     all-gather backward;
//   - the units that call them: block.cpp (B and W), head.cpp (the vocabulary-parallel
//     cross-entropy: all-reduces of the row maxima and of the sums), units.cpp (the
//     vocabulary-parallel embedding).
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
