// cost/comm.h: bytes and time of the collectives each kind of parallelism issues.
//
// Ring algorithms over n ranks, for a buffer of B bytes (all-reduce: the buffer; reduce-scatter: its
// input; all-gather: its output), bytes each rank sends (comm/group.h counts the same):
//   all-reduce      2 (n - 1)/n B   in 2 (n - 1) steps
//   reduce-scatter    (n - 1)/n B   in n - 1 steps
//   all-gather        (n - 1)/n B   in n - 1 steps
//   send/recv               B       in 1 step
// Time on a link of latency alpha and bandwidth beta (bytes/s per rank, one direction):
//   steps * alpha + bytes_per_rank / beta           (the alpha-beta model; 0 for n = 1)
//
// What each parallelism moves (Megatron-LM; Narayanan et al. 2021, Korthikanti et al. 2022):
//   tensor   per block and micro-batch, over the t ranks: forward 2 all-reduces of the b s h activation
//            (after attention, after the MLP), backward 2 (the conjugate f operators); with sequence
//            parallelism each all-reduce is an all-gather + a reduce-scatter of the same tensor (same
//            bytes, twice the steps). A recomputed forward repeats the forward's collectives.
//   pipeline per micro-batch and stage boundary: the b s h activation forward, its gradient backward;
//            with t > 1 each tensor-parallel rank sends 1/t of it (Megatron's scatter/gather).
//   data     per step, over the dp ranks, for this rank's parameters (ZeRO: Rajbhandari et al. 2020):
//            stage 0: all-reduce the gradients once; 1: reduce-scatter the gradients once and
//            all-gather the updated parameters; 2: reduce-scatter every micro-batch (only a 1/dp
//            gradient shard persists) + the all-gather; 3: as 2, and all-gather every unit's
//            parameters before its forward and again before its backward, every micro-batch.
#pragma once
#include <cstdint>

#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"

namespace shardlm::cost {

// AllToAll: an even exchange (expert parallelism's dispatch): each rank sends (n - 1) / n of its buffer, in n - 1
// pairwise steps.
enum class Collective { AllReduce, ReduceScatter, AllGather, SendRecv, AllToAll };

double ring_bytes_per_rank(Collective c, double buffer_bytes, int n);
int ring_steps(Collective c, int n);

struct Link {
    double alpha_s = 0;      // latency per ring step, seconds
    double bytes_per_s = 1;  // bandwidth per rank, one direction
};
double collective_time_s(Collective c, double buffer_bytes, int n, const Link& link);

// Tensor parallelism: one block, one micro-batch, one direction (forward or backward).
struct TpBlockComm {
    Collective kind = Collective::AllReduce;  // AllReduce, or with sequence parallelism the pair
    int count = 0;                            // all-reduces, or all-gather + reduce-scatter pairs
    double buffer_bytes = 0;                  // b s h value_bytes per collective (each of a pair)
};
TpBlockComm tp_block_comm(const ModelShape& m, int64_t micro_batch, int seq, double value_bytes, int tp, bool sp);
double tp_block_time_s(const TpBlockComm& c, int tp, const Link& link);
double tp_block_bytes_per_rank(const TpBlockComm& c, int tp);

// Pipeline parallelism: bytes one rank sends per micro-batch across one stage boundary, one direction.
double pp_bytes_per_microbatch(const ModelShape& m, int64_t micro_batch, int seq, double value_bytes, int tp);

// Data parallelism / ZeRO: buffer bytes per step by collective (numel = this rank's parameters
// before ZeRO; per_param gives gradient and parameter bytes). Per-rank bytes: ring_bytes_per_rank.
struct DpTraffic {
    double all_reduce = 0, reduce_scatter = 0, all_gather = 0;  // buffer bytes, summed over the step
};
DpTraffic dp_traffic_per_step(int zero_stage, double numel, StateBytes per_param, int64_t micro_batches);
double dp_bytes_per_rank(const DpTraffic& t, int dp);

}  // namespace shardlm::cost
