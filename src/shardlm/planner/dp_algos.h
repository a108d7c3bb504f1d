// planner/dp_algos.h: what the communication-efficient data-parallel algorithms of `train --dp-algo`
// (parallel/dp_algo.h) would send and cost on a cluster, beside the all-reduce of a planned policy:
// `plan --dp-algos`. The bytes are the engine's formulas (its --comm-report checks them against what
// it sends), per data-parallel rank and step, averaged over a synchronisation period:
//   allreduce             the policy's ZeRO traffic (cost/comm.h)
//   local-sgd H           2(N-1)/N 4P / H           (the parameters averaged every H steps)
//   diloco H              2(N-1)/N 4P / H           (the outer delta, fp32)
//   gossip ring / exp     d 4P                      (the replica to each of d neighbours)
//   gossip one-peer-exp   4P
//   topk F + EF           (N-1) 8 F P               (indices and values, all-gathered)
//   qsgd S                (N-1) P (1 + ceil log2 S) / 8 + 4P/512
//   sign                  (N-1) P / 8
//   powersgd R            2(N-1)/N 4 R sum over matrices (rows + cols)   (the factors, all-reduced)
// where P is one rank's parameters (total / (tp pp)) and N the data-parallel size. Time: the alpha-beta
// model on the data-parallel group's link, not overlapped with compute (the engine runs these after
// the step's passes); the step's other terms are the policy's. Bytes and time only: the loss each
// reaches in a budget is an experiment's (bench/dp_algos.sh), not the planner's.
#pragma once
#include <string>
#include <vector>

#include "shardlm/cost/shape.h"
#include "shardlm/planner/evaluate.h"
#include "shardlm/planner/hardware.h"
#include "shardlm/planner/policy.h"

namespace shardlm::planner {

struct DpAlgoCost {
    std::string name;          // "local-sgd H=16", ...
    double bytes_per_step = 0;  // one data-parallel rank, per step (mean over a period)
    double comm_s = 0;          // its data-parallel communication per step
    double step_s = 0;          // the policy's step with this communication instead of its dp_comm
    bool beats_allreduce = false;
};

// For the estimate of a feasible policy (its dp_comm is the all-reduce's): the standard algorithms of
// the experiment, the all-reduce first.
std::vector<DpAlgoCost> compare_dp_algos(const cost::ModelShape& m, const Cluster& c, const Estimate& e);
std::string dp_algos_table(const std::vector<DpAlgoCost>& rows, int dp, bool in_node);

}  // namespace shardlm::planner
