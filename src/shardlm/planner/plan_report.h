// planner/plan_report.h: what `shardlm plan` shows a person: a terminal table and an SVG.
//
// The SVG has one row per policy: a stacked bar of the fullest GPU's memory (parameters, gradients,
// optimiser state, activations, buffers; a line at the GPU's capacity) and a stacked bar of the
// step time (compute, TP, CP, pipeline bubble, pipeline send/recv, exposed DP/ZeRO, optimiser).
#pragma once
#include <string>
#include <vector>

#include "shardlm/planner/search.h"

namespace shardlm::planner {

// Two header lines: the model and job, the cluster.
std::string describe_problem(const cost::ModelShape& m, const Cluster& c, const Job& job, Precision precision);
// Policy/throughput table and memory/time table for `rows` (numbered from 1).
std::string format_table(const std::vector<Estimate>& rows, const Cluster& c);
// One policy, with its reason if it is not feasible.
std::string format_estimate(const Estimate& e, const Cluster& c);
std::string plan_svg(const std::vector<Estimate>& rows, const Cluster& c, const std::string& title);

}  // namespace shardlm::planner
