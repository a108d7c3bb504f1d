// kernels/encoder.h: token + position embedding, whole or vocabulary-parallel.
#pragma once

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// Positions: row t of a sequence is at position t, or pos[t] where a sequence's rows are a context-parallel
// rank's slice of it (pos: T positions, those of every sequence of the batch).
// out(B,T,C) = wte[tokens[b,t]] + wpe[pos(t)]. out =.
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     const int* pos = nullptr);

// dwte[tokens[b,t]] += dout[b,t], dwpe[pos(t)] += dout[b,t]  (+=). Rows are added in (b,t) order and the
// work is split by columns: bit-identical for any thread count.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                      const int* pos = nullptr);

// Vocabulary-parallel pieces (this rank holds rows [v0, v1) of wte as wte_local):
// out(N,C) = wte_local[tokens[n] - v0] for tokens in [v0, v1), 0 for the others.  out =.
void embedding_forward(float* out, const int* tokens, const float* wte_local, int v0, int v1, int N, int C);
// dwte_local[tokens[n] - v0] += dout[n] for tokens in [v0, v1) (+=, rows in order, split by columns).
void embedding_backward(float* dwte_local, const float* dout, const int* tokens, int v0, int v1, int N, int C);
// Rows n0 .. n0+N-1 of the (B*T, C) activations: out[i] += wpe[pos((n0 + i) % T)]; and its backward
// dwpe[pos((n0 + i) % T)] += dout[i] (rows in order, split by columns).
void position_forward(float* out, const float* wpe, int n0, int N, int T, int C, const int* pos = nullptr);
void position_backward(float* dwpe, const float* dout, int n0, int N, int T, int C, const int* pos = nullptr);

// Mixed precision: the embeddings stored as w_t (a 16-bit copy of the parameters), added in fp32,
// the output stored as out_t.
void encoder_forward(void* out, DType out_t, const int* tokens, const void* wte, const void* wpe, DType w_t, int B,
                     int T, int C, const int* pos = nullptr);
void embedding_forward(float* out, const int* tokens, const void* wte_local, DType w_t, int v0, int v1, int N, int C);
void position_forward(float* out, const void* wpe, DType w_t, int n0, int N, int T, int C, const int* pos = nullptr);

}  // namespace shardlm::kernels
