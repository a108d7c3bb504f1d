// model/router.h: an MoE layer's router (model/moe.h), for moe.cpp only: the fp32 logits, probabilities and
// top-k choices of each token, the micro-batch's loads and the capacity's drops, and the gradient of the
// objective (the gate weights' gradients, the balance and z-losses) with respect to the logits.
#pragma once
#include "shardlm/model/moe.h"
#include "shardlm/model/units.h"

namespace shardlm::model::detail {

// The router's weight in fp32 (from the matrices' stored type), in s.router.
const float* router_f32(const UnitContext& u, const MoeWeights& w, MoeScratch& s);
// Row i of x (act) in fp32: x itself, or converted into row.
const float* row_f32(const void* x, DType t, size_t i, int C, float* row);
// a.logits, a.probs, a.lse, a.choice, a.gate of the N rows of x (act) from the fp32 router weight wr; bias (E,
// or null) is added to the scores for the choice only.
void route(const UnitContext& u, const MoeDims& d, MoeActs& a, const float* wr, const float* bias, const void* x, int N);
// The micro-batch's statistics (loads before the capacity), and with a capacity factor each expert's choices
// beyond its capacity dropped (slot -1, gate 0: those of the smallest router probability, the later token on
// a tie); every other choice's slot 0.
void count_and_drop(const UnitContext& u, const MoeDims& d, MoeActs& a, int N);
// dz (N, E) = d(objective)/d(logits) from the gate weights' gradients dgate (N, K), with the balance loss's
// and the z-loss's terms at w.objective_scale.
void router_backward(const UnitContext& u, const MoeDims& d, const MoeWeights& w, const MoeActs& a, const float* dgate,
                     float* dz, int N);

}  // namespace shardlm::model::detail
