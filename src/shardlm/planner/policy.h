// planner/policy.h: a parallel training policy, and whether it is consistent with a model and cluster.
//
// Ranks are laid out tp fastest, then cp, then dp, then pp (Megatron's order): a tensor-parallel group
// is tp consecutive ranks, a data-parallel group strides over tp*cp, a pipeline boundary crosses
// tp*cp*dp ranks. The step runs global_batch sequences: every (dp, cp) replica of the pipeline runs
// micro_batches = global_batch / (dp * micro_batch) micro-batches of micro_batch sequences.
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/cost/flops.h"
#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"
#include "shardlm/planner/hardware.h"

namespace shardlm::planner {

struct Policy {
    int tp = 1;
    int pp = 1;
    int dp = 0;  // 0: num_gpus / (tp * pp * cp)
    int cp = 1;  // context parallelism: the sequence split cp ways
    int zero_stage = 0;
    int64_t micro_batch = 1;  // sequences
    int virtual_stages = 1;   // > 1: interleaved 1F1B, each stage holds this many model chunks
    // OneFOneB (Interleaved with virtual_stages > 1), or the zero-bubble ZeroBubbleH1 (v = 1) and
    // ZeroBubbleV (v = 2, two chunks per stage in a V): schedule/schedule.h
    cost::Schedule schedule = cost::Schedule::OneFOneB;
    cost::Recompute recompute = cost::Recompute::None;
    bool sequence_parallel = false;
    Precision precision = Precision::Bf16;
};
// "tp=8 pp=16 dp=8 cp=1 v=3 mb=1 zero=1 recompute=selective sp=on bf16"
std::string describe(const Policy& p);

struct Job {
    int64_t global_batch = 0;  // sequences per step
    int seq = 0;               // tokens per sequence
    // Bytes of optimiser state per parameter beside any fp32 master copy: Adam's m and v 8; `plan
    // --optimizer` sets another optimiser's (optim::Optimizer::state_bytes_per_param).
    double optimizer_state = 8;
    // Sophia: one more forward and backward every this many steps (its Hessian estimate); 0: none.
    int hessian_interval = 0;
};

// Checks the policy against the model, cluster and job; fills p.dp when it is 0. Returns "" if
// consistent, else the reason (names the numbers and the rule). Never throws.
std::string resolve_policy(const cost::ModelShape& m, const Cluster& c, const Job& job, Policy& p);
// Micro-batches per step of a resolved policy.
int64_t micro_batches(const Job& job, const Policy& p);

}  // namespace shardlm::planner
