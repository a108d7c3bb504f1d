// train/engine.h: build_engine(config, world): the parallel machine of a run, wired in one place
// (torchtitan's parallelize step): the dp x cp x tp x pp grid and its groups (the tied embedding's too),
// the pipeline schedule and the model chunks this rank holds, its ModelPart (tensor parallelism,
// lanes, recomputation, precision, deferred W), the data-parallel seam (ZeRO, the dp algorithm, the
// tied embedding), the pipeline executor and the optimiser over this rank's ranges. The Trainer
// keeps the loop, metrics and checkpoints.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "shardlm/comm/grid.h"
#include "shardlm/model/part.h"
#include "shardlm/optim/optimizer.h"
#include "shardlm/parallel/context_parallel.h"
#include "shardlm/parallel/expert_parallel.h"
#include "shardlm/parallel/grad_sync.h"
#include "shardlm/parallel/pipeline.h"
#include "shardlm/schedule/schedule.h"
#include "shardlm/parallel/tensor_parallel.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

struct Engine {
    std::unique_ptr<comm::Grid> grid;
    schedule::Schedule schedule;
    std::vector<std::pair<int, int>> all_chunks;  // compute units of every model chunk
    int micro = 1;                                // micro-batches per step per data-parallel rank
    int seq_local = 0;                            // rows of each sequence on this rank (--seq / --cp)
    std::unique_ptr<parallel::GroupTensorParallel> tp;
    std::unique_ptr<parallel::GroupContextParallel> cp;  // --cp > 1 only
    std::unique_ptr<parallel::GroupExpertParallel> ep;   // --ep > 1 only
    std::unique_ptr<model::ModelPart> part;
    std::unique_ptr<parallel::GradSync> sync;  // the data-parallel seam (parallel/grad_sync.h)
    std::unique_ptr<parallel::PipelineExecutor> exec;
    std::unique_ptr<optim::Optimizer> optimizer;
    // the dp group's ranks again, for measurements whose traffic is not the algorithm's (consensus)
    std::unique_ptr<comm::Group> dp_metrics;
};

// Collective over world. cfg validated; model: cfg.model.config(). Throws a clear error for a layout
// that does not fit the world, the batch, the model or this machine's memory.
Engine build_engine(const TrainConfig& cfg, const model::GptConfig& model, comm::Group& world);

}  // namespace shardlm::train
