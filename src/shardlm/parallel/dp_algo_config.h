// parallel/dp_algo_config.h: the settings of the data-parallel algorithms (parallel/dp_algo.h), apart
// from their machinery so that train/train_config.h can hold them without MPI's headers.
#pragma once
#include <cstdint>
#include <optional>

#include "shardlm/core/dtype.h"
#include "shardlm/core/enum_names.h"
#include "shardlm/parallel/compress.h"

namespace shardlm::parallel {

enum class DpAlgo { AllReduce, Compressed, LocalSgd, Diloco, Gossip };
inline constexpr EnumName<DpAlgo> kDpAlgoNames[] = {{DpAlgo::AllReduce, "allreduce"},
                                                    {DpAlgo::Compressed, "compressed"},
                                                    {DpAlgo::LocalSgd, "local-sgd"},
                                                    {DpAlgo::Diloco, "diloco"},
                                                    {DpAlgo::Gossip, "gossip"}};
constexpr const auto& enum_names(DpAlgo) { return kDpAlgoNames; }

enum class Topology { Ring, Torus, Exp, OnePeerExp };
inline constexpr EnumName<Topology> kTopologyNames[] = {
    {Topology::Ring, "ring"}, {Topology::Torus, "torus"}, {Topology::Exp, "exp"}, {Topology::OnePeerExp, "one-peer-exp"}};
constexpr const auto& enum_names(Topology) { return kTopologyNames; }

// Auto: ef for the biased (contractive) compressors, none for the unbiased ones (TrainConfig resolves it).
enum class ErrorFeedback { Auto, None, Ef, Ef21 };
inline constexpr EnumName<ErrorFeedback> kErrorFeedbackNames[] = {
    {ErrorFeedback::Auto, "auto"}, {ErrorFeedback::None, "none"}, {ErrorFeedback::Ef, "ef"}, {ErrorFeedback::Ef21, "ef21"}};
constexpr const auto& enum_names(ErrorFeedback) { return kErrorFeedbackNames; }

// Whether the replicas of a dp group hold different parameters between synchronisations.
inline bool replicas_differ(DpAlgo a) { return a == DpAlgo::LocalSgd || a == DpAlgo::Diloco || a == DpAlgo::Gossip; }

struct DpAlgoConfig {
    DpAlgo algo = DpAlgo::AllReduce;
    int local_steps = 1;             // local-sgd, diloco: H
    bool average_optimizer = false;  // local-sgd: also average the optimiser's state every H steps
    float outer_lr = 0.7f, outer_momentum = 0.9f;  // diloco (Douillard et al.'s Nesterov outer step)
    DType outer_dtype = DType::F32;  // diloco: the averaged delta's type on the wire
    Topology topology = Topology::Ring;
    int global_avg_every = 0;        // gossip: every K steps a global average instead (0: never)
    CompressSpec compress;           // compressed
    // compressed: the vocabulary's matrices (the token embedding, its tied copy, an untied LM head) by
    // their own compressor (unset: by `compress`); with powersgd, powersgd:R or none (sent whole)
    std::optional<CompressSpec> compress_embedding;
    DType compress_dtype = DType::F32;  // compressed, powersgd: its factors' (and whole elements') type on the wire
    ErrorFeedback error_feedback = ErrorFeedback::None;  // resolved (never Auto)
    // compressed, top-k with ef: Deep Gradient Compression's momentum correction m (Lin et al. 2018; 0: off):
    // each rank compresses its own momentum u <- m u + g accumulated with the error, and what it sends leaves u
    float momentum_correction = 0.0f;
    uint64_t seed = 0;               // compressors' randomness
};

}  // namespace shardlm::parallel
