// kernels/attention.h: causal multi-head self-attention on BLAS, softmax in fp32, scale 1/sqrt(HS).
// Rows are processed in blocks of kAttnBlock queries, and each block multiplies only the keys it can
// see (columns < block end), so the masked upper triangle costs no FLOPs.
#pragma once
#include <cstddef>

namespace shardlm::kernels {

inline constexpr int kAttnBlock = 64;

// qkv: (B,T,3C) = [q | k | v], head h in columns h*HS..(h+1)*HS of each part (HS = C/NH).
// out: (B,T,C) =.  att: (B,NH,T,T) =, softmax probabilities cached for backward; only entries
// (i, j < block end of row i) are written (j > i holds 0), the rest is never read.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// dqkv: (B,T,3C) =.  scratch: attention_scratch_floats(T, threads) floats.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);
size_t attention_scratch_floats(int T, int threads);

}  // namespace shardlm::kernels
