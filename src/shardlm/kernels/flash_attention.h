// kernels/flash_attention.h: fused causal attention (FlashAttention-2's algorithm, Dao 2023, on the
// CPU): tiles of kFlashRows queries against tiles of kFlashCols keys, an online softmax (running row
// maximum and sum, the output rescaled as the maximum grows), no T x T buffer. Forward keeps only the
// output and each row's log-sum-exp; backward recomputes every tile's probabilities from them.
// Memory per sequence: O(T C) (the row statistics are NH T floats) instead of the materialized
// kernel's NH T^2 probabilities (kernels/attention.h). Layouts, grouped-query attention, the scale
// 1/sqrt(HS) and the causal mask are attention.h's; the result equals it to fp32 rounding (the
// softmax's sums are taken tile by tile).
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// Keys a tile: one of the native kernels' 64-column panels
inline constexpr int kFlashRows = 64, kFlashCols = 64;

// qkv (B,T,C + 2 KVC) as attention.h, stored as t; out (B,T,C) = in t; lse (B,NH,T) = fp32: row i's
// log sum_j exp(s_ij) over its visible keys, s the scaled scores.
void flash_attention_forward(void* out, float* lse, const void* qkv, DType t, int B, int T, int C, int NH, int NKV = 0);

// dqkv (B,T,C + 2 KVC) = fp32 (the query heads sharing a key/value head sum into its dk, dv); dout
// (B,T,C) fp32; out and lse: the forward's (out stored as t).
void flash_attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out, const float* lse,
                              DType t, int B, int T, int C, int NH, int NKV = 0);

}  // namespace shardlm::kernels
