// parallel/pipeline.h: the one executor of schedules (parallel/schedule.h).
//
// It runs this rank's list of actions: forward and backward passes of its model chunks on the
// micro-batches' activation slots, the send and receive of activations and their gradients over the
// pipeline group, and the step's gradient reduction and optimiser step (callbacks). Data parallelism
// and ZeRO take part through the passes' UnitHooks (parallel/data_parallel.h). With one stage the
// schedule is just "forward, backward" per micro-batch and nothing is sent.
//
// Sends are non-blocking (their buffer is not reused before they complete) and receives block, so
// any schedule that simulate() runs without deadlock runs here without deadlock.
#pragma once
#include <functional>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/model/part.h"
#include "shardlm/parallel/data_parallel.h"
#include "shardlm/parallel/schedule.h"

namespace shardlm::parallel {

class PipelineExecutor {
public:
    // pp: the pipeline group (rank = stage). The part's chunks are this rank's local chunks.
    PipelineExecutor(model::ModelPart& part, comm::Group& pp, DataParallel& dp);
    ~PipelineExecutor();

    // Fills micro-batch `micro`'s token ids (inputs and targets, rows x T each, row-major) and
    // returns its number of rows (the same on every rank of the pipeline).
    using Batch = std::function<int(int micro, int* inputs, int* targets)>;

    struct Result {
        std::vector<double> loss_sum;  // per micro-batch: its loss sum (ranks holding the head), else 0
        double compute_s = 0;          // forward and backward passes
        double span_s = 0;             // from the first action to the last pass
        double bubble() const { return span_s > 0 ? 1.0 - compute_s / span_s : 0.0; }
    };
    // Runs `sched`'s actions for this rank. Micro-batches have at most max_rows rows of T tokens.
    // dloss scales the loss sum for the backward (0 for a forward-only schedule). on_reduce and
    // on_step run at the schedule's ReduceGrads and OptimizerStep.
    Result run(const Schedule& sched, const Batch& batch, int max_rows, int T, float dloss,
               const std::function<void(const Result&)>& on_reduce = {}, const std::function<void()>& on_step = {});

private:
    int tag(const Schedule& s, int micro, int model_chunk, bool grad) const;
    void wait_sends();

    model::ModelPart& part_;
    comm::Group& pp_;
    DataParallel& dp_;
    std::vector<std::vector<comm::Request>> act_sends_;  // [chunk][slot]
    std::vector<comm::Request> grad_sends_;              // [chunk]
    std::vector<int> inputs_, targets_;
};

}  // namespace shardlm::parallel
