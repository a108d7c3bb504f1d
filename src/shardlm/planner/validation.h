// planner/validation.h: the planner against published training runs (docs/PLANNER.md, "Validation against published runs").
//
// tests/planner/published_runs.json holds cases gathered from papers and repositories: the model, the
// cluster (a GPU preset, GPUs, GPUs per node), the policy the run used, the batch and sequence, and
// what the source printed (throughput as tokens/s per GPU, TFLOP/s per GPU or MFU; peak memory in GiB
// or GB), with the source's FLOP convention so that a printed TFLOP/s or MFU becomes tokens/s without
// the planner's own FLOP count in between. Each case is in the "fit" or the "held_out" split: the
// per-generation constants (hardware.cpp) are chosen on the fit cases only (bench/fit_planner.cpp),
// and the error reported (docs/PLANNER.md) and tested (tests/planner/test_published_runs.cpp) is the
// held-out one.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "shardlm/planner/evaluate.h"

namespace shardlm::planner {

// How a source counts the FLOPs of one token (forward and backward), for converting its TFLOP/s or
// MFU to tokens/s:
//   megatron        96 l h^2 (1 + s/6h + V/16lh): Narayanan et al. 2021, eq. 3 (recomputation included)
//   megatron-core   12 l h^2 [(1 + g/a + s/h) + (f/h)(1.5 if gated)] + 6 h V: Megatron-Core's
//                   num_floating_point_operations (training.py; full-square attention)
//   6N+12lhs        6 N + 12 l h s, N all parameters (PaLM's MFU, llm-foundry)
//   6Nne+12lhs      the same with N less the input embedding (torchtitan)
//   6N              6 N
double published_flops_per_token(const std::string& convention, const cost::ModelShape& m, int seq);
bool known_convention(const std::string& convention);

struct PublishedCase {
    std::string id, family, source, split, convention, assumed;
    cost::ModelShape model;
    Cluster cluster;
    Policy policy;
    // what the source leaves out ("null" in the file): the planner's best choice is taken (searched
    // with everything else pinned: search.h evaluate_request), and the case says so in "assumed"
    OpenChoices open;
    Job job;
    double tokens_per_s_per_gpu = 0;  // the source's throughput as tokens/s per GPU (0: none printed)
    double memory_bytes = 0;          // its peak memory per GPU (0: none printed)
    // PyTorch's reported peaks (max reserved) leave out the CUDA context and library workspaces; the
    // planner's reserve_gb is subtracted before comparing
    bool memory_has_context = false;
};

// How a case is read:
//   Stated    as the source states it: every policy key (framework, attention, compile, ...) and the
//             cluster's own hardware (a power-capped host's HBM, say)
//   Contract  as a user who writes only the plan contract's keys would ask (issue 12's: tp, pp, dp, cp,
//             zero_stage, micro_batch, virtual_stages, recompute, sequence_parallel, precision; an
//             unstated one not named) on the GPU preset by name: the planner's defaults decide the rest
enum class Reading { Stated, Contract };

// Every case, checked: unknown GPU, model or policy keys, an unknown convention or split name an error
// with the case's id and the fix.
std::vector<PublishedCase> load_published_cases(const std::string& path, Reading reading = Reading::Stated);

struct CaseResult {
    Estimate estimate;
    double throughput_ratio = 0;  // predicted / published tokens/s per GPU (0: no throughput case)
    double memory_ratio = 0;      // predicted / published peak memory (0: no memory case)
};
// The case on its own cluster (or `cluster`, the same GPUs with other constants: the fit). With free
// policy fields, the fastest feasible policy that keeps the stated ones (the leanest if none fits).
CaseResult predict(const PublishedCase& c);
CaseResult predict(const PublishedCase& c, const Cluster& cluster);

// ---- the fit (bench/fit_planner.cpp --fit; tested: tests/planner/test_published_runs.cpp) ----------

// Cases within the bound of 1 (throughput +-15 %, memory +-10 %), the sum of |log ratio|, and each
// case's absolute error |ratio - 1| for the median and mean.
struct Score {
    int within = 0, total = 0;
    double log_err = 0;
    std::vector<double> errors;
    void add(double ratio, double bound);
    bool better_than(const Score& o) const;
    double median_error() const;  // 0 without cases
    double mean_error() const;
};

// The constants chosen on the "fit" cases only, in this order: the allocator's overhead of each
// framework style (the Megatron styles' and the PyTorch style's, each on that style's memory cases),
// then per generation gemm_max and gemm_half_dim on the Megatron-style 16-bit cases (whose every other
// term has a source: flash attention's efficiency and the links, hardware.cpp), flash_pytorch on the
// PyTorch-style 16-bit cases, fp8_gemm_max (Megatron-style FP8) and fp8_gemm_max_pytorch, each on a
// grid, each the one with the most cases within bounds (ties: the least log error).
struct FittedConstants {
    struct Generation {
        double gemm_max = 0, gemm_half_dim = 0, flash_pytorch = 0, fp8_gemm_max = 0, fp8_gemm_max_pytorch = 0;
    };
    std::map<std::string, Generation> generations;
    double allocator_overhead = 0, allocator_overhead_pytorch = 0;
    std::string log;  // one line per fitted constant: its value and its fit cases within bounds
};
FittedConstants fit_constants(const std::vector<PublishedCase>& cases);
// c with the fitted constants of its generation (those fitted; the rest as they are).
Cluster with_constants(const Cluster& c, const FittedConstants& f);

}  // namespace shardlm::planner
