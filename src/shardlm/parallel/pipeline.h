// parallel/pipeline.h: the one executor of schedules (schedule/schedule.h).
//
// It runs this rank's list of actions: forward and backward passes of its model chunks on the
// micro-batches' activation slots, the send and receive of activations and their gradients over the
// pipeline group, and the step's gradient reduction and optimiser step (callbacks). Data parallelism
// and ZeRO take part through StepHooks (parallel/zero.h): the passes' UnitHooks and the pass
// protocol. With one stage the schedule is just "forward, backward" per micro-batch and nothing is
// sent. Messages go through comm::Messages (comm::Group; threads in tests/parallel).
//
// Sends are non-blocking (their buffer is not reused before they complete) and receives block, so
// any schedule that simulate() runs without deadlock runs here without deadlock. A message a rank
// sends to itself (the turn of ZBV's V, between its two chunks) is copied, not sent.
// A split backward (schedule.h) runs as the part's backward_input (B: no hooks, nothing of the
// gradients touched) and backward_weight (W: the data-parallel hooks around each unit, as a whole
// backward has them), so data parallelism sees a W exactly as it sees a backward.
#pragma once
#include <functional>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/model/part.h"
#include "shardlm/parallel/zero.h"
#include "shardlm/schedule/schedule.h"

namespace shardlm::parallel {

class PipelineExecutor {
public:
    // pp: the pipeline group (rank = stage). The part's chunks are this rank's local chunks.
    // dp: data parallelism's hooks around every pass (parallel/zero.h: the ZeRO stage).
    PipelineExecutor(model::ModelPart& part, comm::Messages& pp, StepHooks& dp);
    ~PipelineExecutor();

    // The step's micro-batches: how many rows each has (the same on every rank of the pipeline:
    // every rank asks, to size its messages), and their token ids (inputs and targets, rows x T each,
    // row-major), which only the chunks that run the embedding or the head ask for.
    struct Batch {
        std::function<int(int micro)> rows;
        std::function<void(int micro, int* inputs, int* targets)> fill;
        // packed documents (the part's Options::doc_mask): each row's document start, for the chunks with blocks
        std::function<void(int micro, int* doc_start)> doc_starts;
    };

    struct Result {
        std::vector<double> loss_sum;  // per micro-batch: its loss sum (ranks holding the head), else 0
        double compute_s = 0;          // forward and backward passes
        double span_s = 0;             // from the first action to the last pass
        double bubble() const { return span_s > 0 ? 1.0 - compute_s / span_s : 0.0; }
    };
    // Runs `sched`'s actions for this rank. Micro-batches have at most max_rows rows of T tokens.
    // dloss scales the loss sum for the backward (0 for a forward-only schedule). on_reduce and
    // on_step run at the schedule's ReduceGrads and OptimizerStep.
    Result run(const schedule::Schedule& sched, const Batch& batch, int max_rows, int T, float dloss,
               const std::function<void(const Result&)>& on_reduce = {}, const std::function<void()>& on_step = {});

private:
    struct Pass;  // one run's state (pipeline.cpp)
    void message(Pass& p, const schedule::Action& a, int slot);   // RecvAct, SendAct, RecvGrad, SendGrad
    void forward(Pass& p, const schedule::Action& a, int slot);
    void backward(Pass& p, const schedule::Action& a, int slot);  // Backward, BackwardInput, BackwardWeight
    int tag(const schedule::Schedule& s, int micro, int model_chunk, bool grad) const;
    void wait_sends();
    // messages to this rank itself, by tag, until received
    struct Loopback {
        int tag = -1;
        std::vector<unsigned char> bytes;
    };
    void send_self(int tag, const void* data, size_t bytes);
    void recv_self(int tag, void* data, size_t bytes);
    std::vector<Loopback> loopback_;

    model::ModelPart& part_;
    comm::Messages& pp_;
    StepHooks& dp_;
    std::vector<std::vector<comm::Request>> act_sends_;  // [chunk][slot]
    std::vector<comm::Request> grad_sends_;              // [chunk]
    std::vector<int> inputs_, targets_, doc_starts_;
};

}  // namespace shardlm::parallel
