// kernels/rope.h: rotary position embeddings (Su et al. 2021) as HF's LLaMA applies them
// (`rotate_half`): head dimension d splits into halves [x1 | x2]; for i < d/2, with
// angle = position * theta^(-2i/d) (computed in fp32 as HF computes it),
//   out[i]       = x1[i] cos - x2[i] sin
//   out[i + d/2] = x2[i] cos + x1[i] sin
// Its backward is the inverse rotation (angle -> -angle) of the output gradient.
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"

namespace shardlm::kernels {

// x: N rows of `stride` elements (type t), row r at position pos0 + r % T, or pos[r % T] (a
// context-parallel rank's slice of each sequence: T positions); in each row the heads [0, n_heads) of HS
// elements start at column col0. In place; 16-bit rows are rotated in fp32 and rounded back.
void rope_forward(void* x, DType t, int N, int T, int pos0, size_t stride, int col0, int n_heads, int HS, float theta,
                  const int* pos = nullptr);
// dx (fp32, same geometry): the gradient w.r.t. the rotated values becomes the gradient w.r.t. the
// values before rotation. In place.
void rope_backward(float* dx, int N, int T, int pos0, size_t stride, int col0, int n_heads, int HS, float theta,
                   const int* pos = nullptr);

}  // namespace shardlm::kernels
