// kernels/gelu.h: the MLP's activations. GELU, tanh approximation:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); SwiGLU (Shazeer 2020, LLaMA's MLP): silu(gate) * up
// with silu(x) = x sigmoid(x).
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

void gelu_forward(float* out, const float* inp, size_t n);           // out =
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);  // dinp = (may alias dout)

// Mixed precision: inp and out stored as t (F32, BF16, F16), computed in fp32; dout, dinp fp32.
void gelu_forward(void* out, const void* inp, DType t, size_t n);
void gelu_backward(float* dinp, const void* inp, DType t, const float* dout, size_t n);

// SwiGLU over N rows of gu = [gate (F) | up (F)] (row stride 2F, type t): h (N, F) = silu(gate) * up
// (=, type t). Backward: dgu (N, 2F) fp32 = [dh up silu'(gate) | dh silu(gate)] (=), from dh (N, F) fp32.
void swiglu_forward(void* h, const void* gu, DType t, int N, int F);
void swiglu_backward(float* dgu, const float* dh, const void* gu, DType t, int N, int F);

}  // namespace shardlm::kernels
