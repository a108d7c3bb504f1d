// model/qk_norm.h: OLMoE's normalisation of the queries and keys (GptConfig::qk_norm): each token's whole query
// projection (every head's columns) and whole key projection scaled to unit root mean square and by learned
// gains, after the projection's bias and before the rotary embeddings (HF OlmoeAttention's q_norm and k_norm).
// The norm spans all heads, so under tensor parallelism, where a rank holds some heads' columns, each row's sum
// of squares and, in the backward, its dot product are summed over the group (2 N floats each).
#pragma once
#include "shardlm/model/units.h"

namespace shardlm::model {

// q and k columns of [q | k | v] rows (stride d.Wqkv): q [0, Ct), k [Ct, Ct + KVt HS).
// Forward: pre (n, Ct + KVt HS, act) receives the columns as projected, rstd (n, 2) each row's two scales, and the
// columns of qkv become pre * rstd * gain (gain: this rank's [q | k] gains, fp32).
void qk_norm_forward(const UnitContext& u, const BlockDims& d, const float* gain, void* qkv, void* pre, float* rstd,
                     int n);
// B: dqkv (n, Wqkv) fp32 holds the normalised columns' gradients; kept (n, Ct + KVt HS) receives them (for the
// gains' gradients) and dqkv's q and k columns become the gradients of the columns as projected.
void qk_norm_backward_input(const UnitContext& u, const BlockDims& d, const float* gain, const void* pre,
                            const float* rstd, float* dqkv, float* kept, int n);
// W: columns [b, e) of the gains' gradient (n rows): dgain += sum over rows of kept * pre * rstd.
void qk_norm_backward_params(const UnitContext& u, const BlockDims& d, float* dgain, const float* kept, const void* pre,
                             const float* rstd, int n, int b, int e);

}  // namespace shardlm::model
