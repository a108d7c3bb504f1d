// launch/relayout.h: the layout a job continues on after it lost ranks (`shardlm launch`).
//
// The global batch never changes (so the continuation trains on the same rows, in the same order,
// with the same update: data order and RNG depend only on the step and the global batch); the
// micro-batch stays, so each data-parallel rank runs more micro-batches per step. The rules:
//   1. the same tp x pp if it fits in the ranks left: dp = the largest that divides the global
//      batch's micro-batches (G / micro_batch) and fits;
//   2. else the (tp, pp) nearest to the old one (|log2 tp'/tp| + |log2 pp'/pp|) that the model allows
//      (tp divides the heads, pp at most the blocks), fits in the ranks left, and whose per-rank
//      memory by the cost model (cost/memory.h: model states over ZeRO, activations of the
//      micro-batches in flight) fits in this machine's available memory shared by the ranks;
//      among equals, the one that uses the most ranks.
#pragma once
#include <optional>
#include <string>

#include "shardlm/model/config.h"
#include "shardlm/train/train_config.h"

namespace shardlm::launch {

struct Layout {
    int dp = 1, tp = 1, pp = 1;
    int cp = 1;  // the run's, kept by every new layout (a sequence's split is the run's choice)
    int ranks() const { return dp * tp * pp * cp; }
};
std::string describe(const Layout& l);  // "dp2 tp1 pp2" (and " cp2" with context parallelism)

// The per-rank bytes the cost model predicts for cfg's model, batch, precision and ZeRO stage on l.
double rank_bytes(const train::TrainConfig& cfg, const model::GptConfig& mc, const Layout& l);

// The layout for `ranks` ranks after cfg's; nullopt (with *why) when none fits. available_bytes:
// the memory the ranks share (0: do not check memory).
std::optional<Layout> choose_layout(const train::TrainConfig& cfg, const model::GptConfig& mc, int ranks,
                                    double available_bytes, std::string* why);

}  // namespace shardlm::launch
