// schedule/schedule.h: pipeline schedules as data.
//
// A schedule is, for every pipeline rank, the list of actions it runs in one training step:
// forward or backward of (micro-batch, chunk), the send/receive of the activation or gradient that
// crosses a chunk boundary, the gradient reduction and the optimiser step. Functions below produce
// it (GPipe, 1F1B, interleaved 1F1B, and the zero-bubble ZB-H1 and ZBV of Qi et al. 2023);
// parallel/pipeline.h runs it; `shardlm schedule` prints it; the tests simulate it (every send has
// its receive, no deadlock, the bubble and the micro-batches in flight match the theory).
//
// A backward is one action (Backward: every unit's B then W, model/units.h) or two: BackwardInput
// (B: the input gradients, which the previous stage waits for) and BackwardWeight (W: the weight
// gradients, which nobody waits for). The zero-bubble schedules move W later to fill the bubble; a
// chunk's W always run in micro-batch order, so the gradients' sums keep 1F1B's order to the bit.
//
// Chunks (placement): with v virtual stages rank s holds v chunks. Looped (Megatron's interleaving):
// local chunk c of rank s is model chunk c * p + s, so model chunk k runs on rank k % p; without
// interleaving v = 1 and rank s holds model chunk s. V (ZBV): two chunks per rank, chunk 0 down the
// ranks and chunk 1 back up: rank s holds model chunks s and 2p - 1 - s, so the first rank holds both
// the embedding and the head, and the last rank passes model chunk p - 1's output to itself.
#pragma once
#include <string>
#include <vector>

#include "shardlm/cost/memory.h"

namespace shardlm::schedule {

// The one enum of the concept lives with the cost model (the planner reads it too).
using ScheduleKind = cost::Schedule;
using cost::parse_schedule;
using cost::schedule_name;

enum class Op { RecvAct, Forward, SendAct, RecvGrad, Backward, BackwardInput, BackwardWeight, SendGrad, ReduceGrads,
                OptimizerStep, Unshard, Reshard };
const char* op_name(Op op);
enum class Placement { Looped, V };

struct Action {
    Op op;
    int micro = -1;  // micro-batch (-1 for ReduceGrads / OptimizerStep)
    int chunk = 0;   // local chunk index on this rank
    int peer = -1;   // pipeline rank at the other end of a send/receive
};

struct Schedule {
    ScheduleKind kind = ScheduleKind::OneFOneB;
    Placement placement = Placement::Looped;
    int stages = 1, micro = 1, virtual_stages = 1;
    bool forward_only = false;
    std::vector<std::vector<Action>> ranks;  // per pipeline rank, in execution order

    int model_chunk(int rank, int local) const {
        return placement == Placement::V && local == 1 ? 2 * stages - 1 - rank : local * stages + rank;
    }
    int rank_of(int model_chunk) const {
        return placement == Placement::V && model_chunk >= stages ? 2 * stages - 1 - model_chunk
                                                                  : model_chunk % stages;
    }
    int num_model_chunks() const { return stages * virtual_stages; }
    // Whether some backward runs as B and W apart, anywhere or on this rank (whose model part then
    // keeps each slot's B -> W buffers).
    bool splits_backward() const;
    bool splits_backward(int rank) const;
    // Micro-batches whose activations a chunk of a rank holds at once (at most): its activation slots
    // (a slot is busy from its forward to its backward's W). Micro-batch i uses slot i % slots
    // (passes of a chunk run in micro-batch order).
    std::vector<int> slots(int rank) const;
};

// The training step's schedule for p stages, m micro-batches and v virtual stages (interleaved
// only; it needs m a multiple of p; zbv implies v = 2). Throws on an invalid combination, naming the fix.
Schedule make_schedule(ScheduleKind kind, int p, int m, int v = 1);
// Sharded parameters as schedule actions (PyTorch pipelining's UNSHARD/RESHARD): on every rank,
// Unshard(chunk) before the chunk's first pass of the step and Reshard(chunk) after its last, so the
// chunk's parameters are gathered once per step and stay so between a backward's B and its deferred
// W (ZeRO-3 with the zero-bubble schedules). They take no time in simulate().
void add_unshard_actions(Schedule& s);
// Forward passes only (evaluation): every micro-batch through every chunk in order, on the chunks
// of a training schedule's placement (V: ZBV's).
Schedule make_forward_schedule(int p, int m, int v = 1, Placement placement = Placement::Looped);

// Simulation with compute times t_f (forward) and t_b (backward: B and W together) per chunk, W
// taking t_w of t_b when run apart (t_w < 0: half, Qi et al.'s F = B = W with t_f = 1, t_b = 2), free
// communication, non-blocking sends and blocking receives: what the schedule's structure implies.
struct SimResult {
    bool ok = false;             // every rank finished and every message was received
    std::string error;           // otherwise: what went wrong (deadlock, unmatched send, ...)
    double makespan = 0;
    std::vector<double> busy;    // compute time per rank
    std::vector<double> idle;    // makespan - busy per rank
    std::vector<int> max_in_flight;  // per rank: forwards done minus backwards (W) done, at most
    struct Span {
        Op op;
        int micro, chunk;
        double t0, t1;
    };
    std::vector<std::vector<Span>> spans;  // per rank, compute actions
};
SimResult simulate(const Schedule& s, double t_f = 1.0, double t_b = 2.0, double t_w = -1.0);
// The same with each pipeline rank's own times per chunk (uneven stages: the planner's first and
// last stages, which hold the embedding and the head).
struct PassTimes {
    double f = 1.0, b = 2.0, w = -1.0;  // forward, backward (B and W), W when apart (< 0: half of b)
};
SimResult simulate(const Schedule& s, const std::vector<PassTimes>& per_rank);
// A schedule's dependency order found once (by a simulation) and replayed with other times: the
// planner's inner loop. Every action waits only for the one before it on its rank and, if it is a
// receive, for its send, so the order does not depend on the times and run() gives simulate()'s
// makespan, busy and idle times to the bit, without spans and without looking messages up.
class SimPlan {
public:
    explicit SimPlan(const Schedule& s);  // fails if the schedule does not run
    SimResult run(const std::vector<PassTimes>& per_rank) const;

private:
    struct Step {
        int rank;
        Op op;
        int message;  // sends: the message they post; receives: the one they wait for; else -1
    };
    int stages_ = 0, messages_ = 0;
    std::vector<Step> steps_;  // every rank's actions, merged in an order that respects them
};
// The idle fraction of the step, averaged over ranks.
double bubble_fraction(const SimResult& r);
// Micro-batches from which on every rank's idle time no longer grows with m (the schedule's steady
// state), with equal stages and with a slower first or last stage: p for GPipe, 1F1B and ZB-H1, 2p
// for interleaving and ZBV (tests/schedule/test_schedule.cpp). The planner simulates no more.
int steady_micro_batches(ScheduleKind kind, int p);

// The seeds' figure as text: one row per pipeline rank, one column per unit of time (t_f = 1,
// t_b = 2), "F3" for the forward of micro-batch 3, "B3 B3" for its backward, or "B3" and "W3" for
// its two halves when they run apart, "." idle; with virtual stages the chunk follows the
// micro-batch ("F3.1"). Ends with the bubble fraction beside the theory.
std::string render_chart(const Schedule& s);

// Theory for equal stages, as an idle fraction of the step:
//   GPipe, 1F1B, interleaved (Narayanan et al. 2021): the bubble is (p - 1) / (v m) of the ideal
//     compute time, an idle fraction of (p - 1) / (v m + p - 1);
//   ZB-H1 (Qi et al. 2023, sec. 3.1): (p - 1)(F + B - W) of idle per rank against m (F + B + W) of
//     compute: (p - 1) / (3 m + p - 1) with F = B = W, a third of 1F1B's idle time, for m >= p. With
//     fewer micro-batches than stages the deferred W's cannot fill the drain: the last stage alternates
//     F and B (2m units after the first forward's p - 1), the last B walks back p - 1 stages and the
//     first stage ends on its W, a step of 2m + 2p - 1 units: 1 - 3m / max(3m + p - 1, 2m + 2p - 1);
//   ZBV (sec. 6): with F = B = W = 1 per chunk (half a stage) a rank has 6m units of work, and the
//     last rank cannot start before the first forward has crossed the p - 1 ranks before it: at
//     least p - 1 idle units per rank, (p - 1) / (6 m + p - 1), half of ZB-H1's; the schedule reaches
//     it for m >= 2p - 1, and for m >= p up to p = 4. For m <= p the V's own critical paths bound the
//     step: a micro-batch crosses 2p chunks forward and 2p back (4p - 1 units, plus 2 for each
//     further micro-batch through the turning rank), or the first rank's 4m units of its two chunks'
//     F and B behind the 3p - 1 of the first V: 1 - 6m / max(6m + p - 1, 4m + 3p - 1, 2m + 4p - 1).
//   Both equal the simulated schedules with unit times (tests/schedule/test_schedule.cpp).
double bubble_fraction_theory(ScheduleKind kind, int p, int m, int v = 1);
// The formula bubble_fraction_theory uses for a kind, as text ("(p-1)/(v m + p-1)").
const char* bubble_theory_formula(ScheduleKind kind);
// The same for GPipe / 1F1B / interleaved (kept for callers that have no kind).
double bubble_fraction_theory(int p, int m, int v = 1);

}  // namespace shardlm::schedule
