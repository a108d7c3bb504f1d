// planner/stage_model.h (internal to planner/): one pipeline stage of a resolved policy, what its GPU
// holds and how long its work takes for one micro-batch. evaluate.cpp combines the stages into a step.
#pragma once
#include <cstdint>

#include "shardlm/cost/memory.h"
#include "shardlm/planner/evaluate.h"

namespace shardlm::planner::detail {

struct StageModel {
    const cost::ModelShape& m;
    const Cluster& c;
    const Job& job;
    const Policy& p;  // resolved
    int64_t micro_batches = 0;

    StageModel(const cost::ModelShape& m, const Cluster& c, const Job& job, const Policy& p);

    double value_bytes() const { return p.precision == Precision::Fp32 ? 4 : 2; }
    // Adam: cost::kAdamFp32 / kAdamMixed; another optimiser's state in place of Adam's 8 bytes
    cost::StateBytes state_bytes() const {
        return p.precision == Precision::Fp32 ? cost::StateBytes{4, 4, job.optimizer_state}
                                              : cost::StateBytes{2, 2, 4 + job.optimizer_state};
    }
    int layers_per_stage() const { return m.layers / p.pp; }
    int zero_group() const { return p.dp * p.cp; }  // ZeRO shards over data and context ranks
    double padded_vocab() const;                     // a multiple of 128 t (Megatron pads the vocabulary)
    cost::ActivationSpec activation_spec(cost::Recompute r) const;

    // Parameters on one GPU of `stage`, before ZeRO (elements).
    double block_params() const;  // one block's tensor-parallel shard
    double stage_params(int stage) const;
    MemoryBreakdown memory(int stage) const;

    // One micro-batch on one GPU of `stage`, seconds.
    struct MicroBatch {
        double forward = 0, backward = 0;  // compute; backward includes the recomputed forward
        double tp = 0, cp = 0;             // exposed communication
        double total() const { return forward + backward + tp + cp; }
    };
    MicroBatch micro_batch_time(int stage) const;
    // Exposed data-parallel communication per step, given the stage's micro-batch times.
    double dp_exposed_s(int stage, const MicroBatch& mb) const;
    double optimizer_s(int stage) const;
    double pp_comm_s() const;

private:
    double gemm_s(double M, double N, double K) const;  // one (M x K) @ (K x N) product
    double block_gemm_s() const;                        // forward matrices of one block
    double attention_gemm_s() const;                    // forward Q K^T and P V of one block
    double block_memory_bound_s() const;                // forward memory-bound work of one block
    double attention_memory_bound_s() const;            // its attention-core part
    double head_forward_s() const;                      // logits GEMM + softmax/cross-entropy
};

}  // namespace shardlm::planner::detail
