// kernels/attention.h: causal multi-head self-attention on BLAS, softmax in fp32, scale 1/sqrt(HS).
// Rows are processed in blocks of kAttnBlock queries, and each block multiplies only the keys it can
// see (columns < block end), so the masked upper triangle costs no FLOPs.
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

inline constexpr int kAttnBlock = 64;

// qkv: (B,T,C + 2 KVC) = [q | k | v] with C = NH HS query columns and KVC = NKV HS key (and value)
// columns; query head h in columns h*HS..(h+1)*HS of q, its key/value head h / (NH / NKV) likewise in
// k and v (grouped-query attention; NKV = 0 or NH: multi-head, qkv (B,T,3C)).
// out: (B,T,C) =.  att: (B,NH,T,T) =, softmax probabilities cached for backward; only entries
// (i, j < block end of row i) are written (j > i holds 0), the rest is never read.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, int NKV = 0);

// dqkv: (B,T,C + 2 KVC) =: the query heads that share a key/value head sum into its dk, dv.
// scratch: attention_scratch_floats(T, threads) floats.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, int NKV = 0);
size_t attention_scratch_floats(int T, int threads);

// Mixed precision: qkv and out stored as t, the probabilities as att_t (F32, BF16 or F16); each
// (batch, head) is widened to fp32, computed as above, and rounded back. dout, dqkv fp32.
void attention_forward(void* out, void* att, DType att_t, const void* qkv, DType t, int B, int T, int C, int NH,
                       int NKV = 0);
void attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkv, DType t, const void* att,
                        DType att_t, int B, int T, int C, int NH, int NKV = 0);

// Incremental decoding of one sequence with a key/value cache: qkv (T, C + 2 KVC) holds T new
// positions pos .. pos+T-1; their keys and values are appended to k_cache / v_cache ((n_ctx, KVC)
// each: grouped-query attention caches NKV heads), and row i attends to cache positions 0 .. pos+i.
// out (T, C) =. scores: pos + T floats of scratch.
void attention_forward_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int pos, int T, int C,
                              int NH, float* scores, int NKV = 0);

}  // namespace shardlm::kernels
