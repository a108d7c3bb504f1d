// planner/explain.h: one line on why the best policy of a search wins.
//   "tp=8 inside the node: TP traffic stays on NVLink; less model parallelism does not fit: the leanest
//    such policy (tp 8 -> 4, ...) needs 93.1 GB of 80; pp=16 x v=3: bubble 4.1 % of the step; ZeRO-1 over
//    8 ranks: model states 24.3 GB per GPU, 0.12 s of DP/ZeRO traffic left exposed; #2 (zero 1 -> 2) is
//    0.3 % slower"
#pragma once
#include <string>
#include <vector>

#include "shardlm/planner/evaluate.h"

namespace shardlm::planner {

// ranked: the feasible policies, best first. leanest: for each (tp, cp, pp) grid the consistent
// policy needing the least memory (feasible or not). Empty if nothing is feasible.
std::string explain_best(const std::vector<Estimate>& ranked, const std::vector<Estimate>& leanest, const Cluster& c);

// The dominant terms of one estimate's step time and memory, largest first, each with its share:
//   "step 12.3 s: compute 9.1 s (74 %), exposed DP communication 1.9 s (15 %), pipeline bubble 1.2 s (10 %);
//    memory 71.2 GB: activations 38.0 GB (53 %), optimizer 18.2 GB (26 %), ..."
// (terms under 1 % are left out). The first term of each is the one to attack.
std::string dominant_terms(const Estimate& e);
// The terms of explain_terms as a table, each with its share of the step:
//   compute 9.1 s (74 %)
//     MLP up projection            8192 x 3072 x 12288   at 51 % of peak   2.9 s (24 %)
//     ...
//   exposed communication 1.9 s (15 %)
//     ZeRO-1 reduce-scatter of the gradients                                1.2 s (10 %)
//   pipeline bubble 1.2 s (10 %), optimizer 0.01 s
std::string format_terms(const Terms& t, const Estimate& e);
// Just the two leaders: "step: compute 74 %; memory: activations 53 %".
std::string dominant_summary(const Estimate& e);

// The fields in which b differs from a: "tp 8 -> 4, pp 16 -> 32".
std::string policy_diff(const Policy& a, const Policy& b);
// The step-time component where b loses most against a: "exposed DP communication +1.20 s".
std::string biggest_loss(const TimeBreakdown& a, const TimeBreakdown& b);

}  // namespace shardlm::planner
