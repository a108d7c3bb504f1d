// planner/evaluate.h: per-GPU memory and step time of one policy (the planner's simulator).
//
// Memory is that of the fullest GPU (pipeline stage 0 holds the embedding and the most micro-batches
// in flight; the last stage the head and the logits): model states (cost/memory.h, ZeRO over the
// dp*cp ranks), activations of the micro-batch chunks in flight under 1F1B / interleaved 1F1B,
// buffers (pipeline send/receive, the sequence-parallel gather, ZeRO-2/3 unit buffers, and the
// cluster's reserve for the CUDA context and library workspaces).
//
// Step time, on the slowest stage (seconds per step, what is exposed on the critical path):
//   compute    m micro-batches x (forward + backward + recomputed forward): GEMMs at the shape's
//              efficiency (hardware.h) plus memory-bound work (2 x the bytes a block saves, at HBM
//              speed; backward 2 x forward)
//   tp_comm    the Megatron all-reduces (or SP all-gather/reduce-scatter pairs) of every block, not
//              overlapped; a fully recomputed forward repeats them
//   cp_comm    the K, V all-gather (forward) and all-gather + reduce-scatter (backward) over the cp
//              ranks, less the attention compute it overlaps
//   pp_bubble  the slowest rank's idle time when the policy's schedule runs in the schedule simulator
//              (schedule/schedule.h) on every rank's pass times; with balanced stages (p - 1)/v
//              micro-batch stage times = (p - 1)/(m v) of the pipelined work (1F1B, interleaving),
//              (p - 1) F for ZB-H1, half that for ZBV once m >= 2p - 1
//   pp_comm    2 (m v + p - 1) point-to-point transfers of b s h / t values on the stage link
//   dp_comm    ZeRO's collectives (cost/comm.h), overlapped with the backward of the last micro-batch
//              (gradients), with the next forward (parameter all-gather of stages 1-2), with each
//              micro-batch (stages 2-3); the last unit's share is never hidden
//   optimizer  Adam over this rank's owned parameters at HBM speed
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/cost/shape.h"
#include "shardlm/planner/hardware.h"
#include "shardlm/planner/policy.h"

namespace shardlm::planner {

struct Estimate {
    Policy policy;              // resolved: dp filled in
    bool consistent = false;    // the policy fits the model, cluster and batch (else all numbers are 0)
    bool feasible = false;      // consistent and fits in the GPU's memory
    std::string reason;         // why not feasible; empty if feasible
    int64_t micro_batches = 0;  // per step, per pipeline
    int fullest_stage = 0;      // the stage whose GPU `memory` describes
    MemoryBreakdown memory;
    TimeBreakdown time;
    double step_time_s = 0, tokens_per_s = 0, tokens_per_s_per_gpu = 0;
    double tflops_per_gpu = 0;      // model FLOPs (no recomputation) per second per GPU, 1e12
    double hfu_tflops_per_gpu = 0;  // hardware FLOPs (recomputation counted)
    double mfu = 0;                 // tflops_per_gpu / peak of the precision
    bool tp_in_node = true, dp_in_node = true, pp_in_node = true;  // which link each group uses
};

Estimate evaluate(const cost::ModelShape& m, const Cluster& c, const Job& job, Policy p);

// The terms that decide an estimate (`plan --explain`), seconds per step on the stage that sets the
// pace: compute piece by piece (each product with its shape per layer and the share of its precision's
// peak it runs at), exposed communication collective by collective, the pipeline's bubble and the
// optimiser. compute sums to the estimate's time.compute, communication to its tp, cp, ep, dp and pp
// transfers.
struct Term {
    std::string what;
    double seconds = 0;
    std::string shape;      // a product's "M x N x K" ((M x K) @ (K x N)) per layer; empty otherwise
    double efficiency = 0;  // of the precision's peak (products, attention's kernel); 0 otherwise
};
struct Terms {
    std::vector<Term> compute, communication;
    double pipeline_bubble_s = 0, optimizer_s = 0;
};
Terms explain_terms(const cost::ModelShape& m, const Cluster& c, const Job& job, const Estimate& e);

}  // namespace shardlm::planner
