// planner/search.h: exhaustive search of parallel policies for a model, cluster and batch.
//
// Every factorisation num_gpus = tp x cp x pp x dp (tp dividing the heads, KV heads and MLP; pp and
// pp x virtual_stages dividing the layers) x micro-batch (dividing global_batch / dp) x virtual
// stages x ZeRO stage x recomputation x sequence parallelism (x with cp > 1 the all-gather and the
// ring) is evaluated (evaluate.h), except
// that micro-batches are tried from small to large and the first one that does not fit in memory
// ends that series (a larger micro-batch only needs more memory). Feasible policies are ranked by
// predicted tokens/s; ties go to the one using less memory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardlm/planner/evaluate.h"

namespace shardlm::planner {

// Restrictions of the search; an empty list means every value that fits.
struct SearchSpace {
    std::vector<int> tp, pp, cp, ep, zero_stage, virtual_stages;
    std::vector<int64_t> micro_batch;
    std::vector<cost::Recompute> recompute;
    std::vector<bool> sequence_parallel;
    std::vector<cost::CpComm> cp_comm;  // with cp > 1; empty: the all-gather and the ring
    // empty: 1F1B and its interleaving (Megatron's); the zero-bubble ones when named
    std::vector<cost::Schedule> schedule;
    Precision precision = Precision::Bf16;
    // none: each policy's default_framework (policy.h), and that framework's attention kernel and
    // gradient accumulation (default_attention, default_grad_accum_fp32)
    std::optional<Framework> framework;
    std::optional<cost::Attention> attention;
    std::optional<bool> grad_accum_fp32;
    Compile compile = Compile::None;
    int64_t max_micro_batch = 16;  // when micro_batch is empty
    int max_virtual_stages = 8;    // when virtual_stages is empty
};

struct SearchResult {
    std::vector<Estimate> top;  // best first, at most top_k
    int64_t evaluated = 0;      // policies evaluated (consistent ones)
    int64_t feasible = 0;       // of which fit in memory
    double seconds = 0;         // wall time of the search
    std::string explanation;    // one line: why the best wins
    Estimate leanest;           // the consistent policy needing the least memory (consistent = false if none)
};

SearchResult search(const cost::ModelShape& m, const Cluster& c, const Job& job, const SearchSpace& space, int top_k);

// A policy file's request evaluated: an open framework is default_framework's; with open choices, the
// fastest feasible policy that keeps every named field (the leanest consistent one if none fits, the
// request with its plain defaults if none is consistent: its reason says why).
Estimate evaluate_request(const cost::ModelShape& m, const Cluster& c, const Job& job, const PolicyRequest& r);

}  // namespace shardlm::planner
