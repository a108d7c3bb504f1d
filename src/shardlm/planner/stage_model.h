// planner/stage_model.h (internal to planner/): one pipeline stage of a resolved policy, what its GPU
// holds and how long its work takes for one micro-batch. evaluate.cpp combines the stages into a step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"
#include "shardlm/planner/hardware.h"
#include "shardlm/planner/policy.h"

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
                                              : cost::StateBytes{2, p.grad_accum_fp32 ? 4.0 : 2.0, 4 + job.optimizer_state};
    }
    // Layers per stage and per chunk, l / p and l / (p v). They need not divide evenly (Llama 3 405B's
    // 126 over 16 stages, BLOOM's 70 over 12): such runs balance the stages by giving the first and
    // last fewer blocks beside the embedding and the head, so the average is what a stage holds and does.
    double layers_per_chunk() const { return double(m.layers) / (p.pp * p.virtual_stages); }
    double layers_per_stage() const { return double(m.layers) / p.pp; }
    int zero_group() const { return p.dp * p.cp; }  // ZeRO shards over data and context ranks
    int expert_zero_group() const { return zero_group() / p.ep; }  // the experts': the ranks holding the same ones
    double padded_vocab() const;                     // a multiple of 128 t (Megatron pads the vocabulary)
    cost::ActivationSpec activation_spec(cost::Recompute r) const;

    // Parameters on one GPU of `stage`, before ZeRO (elements).
    double block_params() const;   // one block's tensor-parallel shard (its experts: those of this ep rank)
    double block_experts() const;  // of which the routed experts (0 for a dense model)
    double stage_params(int stage) const;
    double stage_experts(int stage) const { return layers_per_stage() * block_experts(); }
    MemoryBreakdown memory(int stage) const;

    // One piece of a micro-batch's compute on one GPU of `stage`: seconds forward and backward (the
    // backward with its recomputation), and for a product its shape per layer, (M x K) @ (K x N), and
    // the fraction of its precision's peak it runs at (attention's kernel: its efficiency too).
    struct Work {
        const char* what = "";  // a literal: the search builds these for every policy it evaluates
        double forward = 0, backward = 0;
        double M = 0, N = 0, K = 0;
        double efficiency = 0;
    };
    // Every piece, in the block's order, then the head on the last stage; their sums are
    // micro_batch_time's forward and backward.
    std::vector<Work> compute_work(int stage) const;
    // The factor on a stage's compute for the time it computes alone (Cluster::alone_speedup): in a
    // pipeline whose stages differ, the slow stage's ranks compute while the others idle for 1 - f of
    // their time, f the other stages' compute over theirs: f + (1 - f) / s, s the speed-up measured with
    // one rank busy scaled to a stage's share of the ranks, 1 + (alone_speedup - 1)(1 - 1/pp)/(1 - 1/ranks).
    // 1 elsewhere.
    double alone_factor(int stage) const;

    // One micro-batch on one GPU of `stage`, seconds.
    struct MicroBatch {
        double forward = 0, backward = 0;  // compute; backward includes the recomputed forward
        double tp = 0, cp = 0, ep = 0;     // exposed communication
        double total() const { return forward + backward + tp + cp + ep; }
    };
    MicroBatch micro_batch_time(int stage) const;
    // Exposed data-parallel communication per step, given the stage's micro-batch times, by collective.
    struct DpExposed {
        double all_reduce = 0, reduce_scatter = 0, all_gather = 0;
        double total() const { return all_reduce + reduce_scatter + all_gather; }
    };
    DpExposed dp_exposed(int stage, const MicroBatch& mb) const;
    double dp_exposed_s(int stage, const MicroBatch& mb) const { return dp_exposed(stage, mb).total(); }
    double optimizer_s(int stage) const;
    double pp_comm_s() const;

    // Bytes of FP8 weight casts this stage keeps (Transformer Engine caches them across micro-batches).
    double fp8_weight_bytes(int stage) const;

private:
    bool flash() const { return p.attention == cost::Attention::Flash; }
    std::vector<Work> work_of(int stage) const;  // compute_work before alone_factor
    double work_total_s(int stage) const;         // its forward and backward, summed
    // one (M x K) @ (K x N) product in precision `prec` (the linear layers run in the policy's, fp8
    // included; attention and the head in compute_precision)
    double gemm_s(double M, double N, double K, Precision prec) const;
    double gemm_efficiency(double M, double N, double K, Precision prec) const;  // of prec's peak
    double block_gemm_s() const;                        // forward matrices of one block
    double fp8_cast_s(bool backward) const;             // FP8 casts of one block, forward or backward
    // forward Q K^T and P V of one block: the whole square in separate GEMMs (naive), or the causal
    // half in one fused kernel at the generation's flash efficiency
    double attention_gemm_s() const;
    double block_memory_bound_s() const;                // forward memory-bound work of one block
    double attention_memory_bound_s() const;            // its attention-core part
    double cp_layer_s(double attn) const;                // context parallelism's exposed messages a layer
    double ep_layer_s() const;                           // expert parallelism's all-to-alls a layer, forward and backward
    double mlp_gemm_s() const;                           // forward products of one block's MLP (or experts)
    // the exposed reductions of numel parameters over a group of n ranks
    DpExposed reduction_exposed(double numel, int n, const cost::Link& link, const MicroBatch& mb) const;
    double head_forward_s() const;                      // logits GEMM + softmax/cross-entropy
};

}  // namespace shardlm::planner::detail
