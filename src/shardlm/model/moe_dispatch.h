// model/moe_dispatch.h: a micro-batch's tokens to their experts and back. The dispatched rows are the kept
// choices' input rows grouped by expert (tokens in order). Under expert parallelism each rank's rows for an
// ep rank's experts travel there in one all-to-all (the counts all-gathered first), arrive rank by rank and
// are regrouped expert by expert (within an expert, rank by rank: the expert side's order); the experts'
// rows travel back by the same blocks the other way. Rows are bytes of the caller's width: the activations'
// type on the way in, fp32 for the outputs and the gradients.
//
// Sending rows to the experts and returning them is the identity on every row (tests/model/
// test_moe_dispatch.cpp); the combination adds each token's kept choices in the order of its choices.
#pragma once
#include <cstddef>

#include "shardlm/model/moe.h"

namespace shardlm::model {

// From a.choice and a.slot (>= 0: kept): each expert's first dispatched row (a.offsets), each kept choice's
// row (a.slot), and its token's row of x (N rows of row_bytes) copied there (a.xe).
void dispatch_rows(const MoeDims& d, MoeActs& a, MoeScratch& s, const void* x, size_t row_bytes, int N);

// Every ep rank's loads of this rank's experts (a.from; the counts all-gathered), the grouped order the rows
// they send take (a.loffsets, a.place) and how many arrive (a.received).
void plan_exchange(ExpertParallel& ep, const MoeDims& d, MoeActs& a, MoeScratch& s);
// Dispatched rows (`row` bytes each, a.offsets' order) to the experts' ranks, arriving grouped at `grouped`.
void send_to_experts(ExpertParallel& ep, const MoeDims& d, const MoeActs& a, MoeScratch& s, const void* rows,
                     void* grouped, size_t row);
// The experts' rows (grouped) back to the ranks that dispatched them, into `rows` (a.offsets' order).
void return_from_experts(ExpertParallel& ep, const MoeDims& d, const MoeActs& a, MoeScratch& s, void* grouped,
                         void* rows, size_t row);

// out (N, C) += for each token, over its kept choices j in order, weight[j] * y[a.slot[j]] (y: the dispatched
// rows, fp32); weight null: 1 (the input gradients' way back).
void combine_rows(const MoeActs& a, const float* y, const float* weight, float* out, int N, int K, int C);

}  // namespace shardlm::model
