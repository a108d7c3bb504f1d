// kernels/encoder.h: token + position embedding.
#pragma once

namespace shardlm::kernels {

// out(B,T,C) = wte[tokens[b,t]] + wpe[t]. out =.
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);

// dwte[tokens[b,t]] += dout[b,t], dwpe[t] += dout[b,t]  (+=). Rows are added in (b,t) order and the
// work is split by columns: bit-identical for any thread count.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);

}  // namespace shardlm::kernels
