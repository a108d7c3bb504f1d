// kernels/layernorm.h: LayerNorm and RMSNorm over the last dimension (eps as given; GPT-2 uses 1e-5).
// LayerNorm's bias may be null (a model without biases), and then so may its gradient.
#pragma once

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// out, inp: (N,C); mean, rstd: (N), cached for backward. out =.
void layernorm_forward(float* out, float* mean, float* rstd,
                       const float* inp, const float* weight, const float* bias,
                       int N, int C, float eps);

// dinp: += (it sits on the residual stream). dweight, dbias: += (gradient accumulation), summed
// over rows in order: bit-identical for any thread count.
void layernorm_backward(float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C);

// Mixed precision: inp and out stored as in_t / out_t (F32, BF16, F16); statistics, weights,
// gradients fp32. Each row is widened to fp32, normalised as above, and rounded back.
void layernorm_forward(void* out, DType out_t, float* mean, float* rstd, const void* inp, DType in_t,
                       const float* weight, const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const void* inp, DType in_t,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

// The two halves of layernorm_backward, for lanes (model/units.h) that each run the row-local half on
// their own rows and split the other by columns: dinp += over N rows; and dweight[c0:c1], dbias[c0:c1]
// += sums over all N rows, in order (the same sums as layernorm_backward's). mean null: 0 (RMSNorm's).
void layernorm_backward_input(float* dinp, const float* dout, const void* inp, DType in_t, const float* weight,
                              const float* mean, const float* rstd, int N, int C);
void layernorm_backward_params(float* dweight, float* dbias, const float* dout, const void* inp, DType in_t,
                               const float* mean, const float* rstd, int N, int C, int c0, int c1);

// RMSNorm (Zhang & Sennrich 2019; LLaMA's, as HF's LlamaRMSNorm): out = (x * rstd) * weight with
// rstd = 1 / sqrt(mean(x^2) + eps), in fp32 (16-bit rows widened and the output rounded back). rstd
// (N) is kept for backward. dinp += (row-local); dweight[c0:c1] += over all N rows, in order.
void rmsnorm_forward(void* out, DType out_t, float* rstd, const void* inp, DType in_t, const float* weight, int N,
                     int C, float eps);
void rmsnorm_backward_input(float* dinp, const float* dout, const void* inp, DType in_t, const float* weight,
                            const float* rstd, int N, int C);
void rmsnorm_backward_params(float* dweight, const float* dout, const void* inp, DType in_t, const float* rstd, int N,
                             int C, int c0, int c1);

}  // namespace shardlm::kernels
