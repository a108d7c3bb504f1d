// kernels/reference/reference.h: plain scalar loops, the oracle the fast kernels are tested
// against (llm.c's CPU reference idea). Same signatures and +=/= contracts as the fast kernels;
// accumulations in double where that makes the oracle exact enough to judge the fast version.
#pragma once
#include <cstddef>

namespace shardlm::kernels::reference {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    bool accumulate = false);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);
void crossentropy_forward_backward(float* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss);
// att: (B,NH,T,T), full rows (0 above the diagonal).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH);

}  // namespace shardlm::kernels::reference
