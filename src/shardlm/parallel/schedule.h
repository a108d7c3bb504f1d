// parallel/schedule.h: pipeline schedules as data.
//
// A schedule is, for every pipeline rank, the list of actions it runs in one training step:
// forward or backward of (micro-batch, chunk), the send/receive of the activation or gradient that
// crosses a chunk boundary, the gradient reduction and the optimiser step. Functions below produce
// it (GPipe, 1F1B, interleaved 1F1B); parallel/pipeline.h runs it; `shardlm schedule` prints it; the
// tests simulate it (every send has its receive, no deadlock, the bubble and the micro-batches in
// flight match the theory).
//
// Chunks: with v virtual stages rank s holds v chunks; local chunk c of rank s is model chunk
// c * p + s (Megatron's interleaving), so model chunk k runs on rank k % p. Without interleaving
// v = 1 and rank s holds model chunk s.
#pragma once
#include <string>
#include <vector>

namespace shardlm::parallel {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };
// "gpipe" | "1f1b" | "interleaved"; throws a clear error otherwise.
ScheduleKind parse_schedule(const std::string& name);
const char* schedule_name(ScheduleKind k);

enum class Op { RecvAct, Forward, SendAct, RecvGrad, Backward, SendGrad, ReduceGrads, OptimizerStep };
const char* op_name(Op op);

struct Action {
    Op op;
    int micro = -1;  // micro-batch (-1 for ReduceGrads / OptimizerStep)
    int chunk = 0;   // local chunk index on this rank
    int peer = -1;   // pipeline rank at the other end of a send/receive
};

struct Schedule {
    ScheduleKind kind = ScheduleKind::OneFOneB;
    int stages = 1, micro = 1, virtual_stages = 1;
    bool forward_only = false;
    std::vector<std::vector<Action>> ranks;  // per pipeline rank, in execution order

    int model_chunk(int rank, int local) const { return local * stages + rank; }
    int num_model_chunks() const { return stages * virtual_stages; }
    // Micro-batches whose activations a chunk of a rank holds at once (at most): its activation slots.
    // Micro-batch i uses slot i % slots (passes of a chunk run in micro-batch order).
    std::vector<int> slots(int rank) const;
};

// The training step's schedule for p stages, m micro-batches and v virtual stages (interleaved
// only; it needs m a multiple of p). Throws on an invalid combination, naming the fix.
Schedule make_schedule(ScheduleKind kind, int p, int m, int v = 1);
// Forward passes only (evaluation): every micro-batch through every chunk in order.
Schedule make_forward_schedule(int p, int m, int v = 1);

// Simulation with compute times t_f (forward) and t_b (backward) per chunk, free communication,
// non-blocking sends and blocking receives: what the schedule's structure implies.
struct SimResult {
    bool ok = false;             // every rank finished and every message was received
    std::string error;           // otherwise: what went wrong (deadlock, unmatched send, ...)
    double makespan = 0;
    std::vector<double> busy;    // compute time per rank
    std::vector<double> idle;    // makespan - busy per rank
    std::vector<int> max_in_flight;  // per rank: forwards done minus backwards done, at most
    struct Span {
        Op op;
        int micro, chunk;
        double t0, t1;
    };
    std::vector<std::vector<Span>> spans;  // per rank, compute actions
};
SimResult simulate(const Schedule& s, double t_f = 1.0, double t_b = 2.0);

// The seeds' figure as text: one row per pipeline rank, one column per unit of time (t_f = 1,
// t_b = 2), "F3" for the forward of micro-batch 3, "B3 B3" for its backward, "." idle; with virtual
// stages the chunk follows the micro-batch ("F3.1"). Ends with the bubble fraction beside the theory.
std::string render_chart(const Schedule& s);

// Theory for equal stages (Narayanan et al. 2021): the bubble is (p - 1) / (v m) of the ideal
// compute time, i.e. an idle fraction of the step of (p - 1) / (v m + p - 1) ((p - 1) / (m + p - 1)
// for GPipe and 1F1B).
double bubble_fraction_theory(int p, int m, int v = 1);

}  // namespace shardlm::parallel
