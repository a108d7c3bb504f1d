// kernels/matmul.h: linear layers on BLAS (OpenBLAS sgemm, row-major).
// Weights are stored [OC, C] (out, in), like torch.nn.Linear; HF's Conv1D [in, out] is transposed
// on import/export only.
#pragma once

namespace shardlm::kernels {

// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC)      (bias may be null)
// accumulate: false -> out =, true -> out += (used to add a projection onto the residual stream).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate = false);

// dinp(N,C) = dout(N,OC) @ weight(OC,C)        (=, overwritten; null to skip)
// dweight(OC,C) += dout^T @ inp (= if !accumulate_dweight: saves zeroing the gradient buffer on the
// first micro-batch), dbias(OC) += column sums of dout (dbias may be null). Column sums run over rows
// in order: bit-identical for any thread count.
void matmul_backward(float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight,
                     int N, int C, int OC, bool accumulate_dweight = true);

}  // namespace shardlm::kernels
