#include "shardlm/cost/comm.h"

namespace shardlm::cost {

double ring_bytes_per_rank(Collective c, double buffer_bytes, int n) {
    if (n <= 1) return 0;
    switch (c) {
        case Collective::AllReduce: return 2.0 * (n - 1) / n * buffer_bytes;
        case Collective::ReduceScatter:
        case Collective::AllGather:
        case Collective::AllToAll: return double(n - 1) / n * buffer_bytes;
        case Collective::SendRecv: return buffer_bytes;
    }
    return 0;
}

int ring_steps(Collective c, int n) {
    if (n <= 1) return 0;
    switch (c) {
        case Collective::AllReduce: return 2 * (n - 1);
        case Collective::ReduceScatter:
        case Collective::AllGather:
        case Collective::AllToAll: return n - 1;
        case Collective::SendRecv: return 1;
    }
    return 0;
}

double collective_time_s(Collective c, double buffer_bytes, int n, const Link& link) {
    if (n <= 1 || buffer_bytes <= 0) return 0;
    return ring_steps(c, n) * link.alpha_s + ring_bytes_per_rank(c, buffer_bytes, n) / link.bytes_per_s;
}

TpBlockComm tp_block_comm(const ModelShape& m, int64_t micro_batch, int seq, double value_bytes, int tp, bool sp) {
    TpBlockComm c;
    if (tp <= 1) return c;
    c.kind = sp ? Collective::AllGather : Collective::AllReduce;
    c.count = 2;  // after attention and after the MLP (forward); their conjugates (backward)
    c.buffer_bytes = double(micro_batch) * seq * m.hidden * value_bytes;
    return c;
}

double tp_block_time_s(const TpBlockComm& c, int tp, const Link& link) {
    if (c.kind == Collective::AllReduce) return c.count * collective_time_s(Collective::AllReduce, c.buffer_bytes, tp, link);
    // sequence parallelism: an all-gather into each column-parallel GEMM, a reduce-scatter out of each
    // row-parallel GEMM
    return c.count * (collective_time_s(Collective::AllGather, c.buffer_bytes, tp, link) +
                      collective_time_s(Collective::ReduceScatter, c.buffer_bytes, tp, link));
}

double tp_block_bytes_per_rank(const TpBlockComm& c, int tp) {
    if (c.kind == Collective::AllReduce) return c.count * ring_bytes_per_rank(Collective::AllReduce, c.buffer_bytes, tp);
    return c.count * (ring_bytes_per_rank(Collective::AllGather, c.buffer_bytes, tp) +
                      ring_bytes_per_rank(Collective::ReduceScatter, c.buffer_bytes, tp));
}

double pp_bytes_per_microbatch(const ModelShape& m, int64_t micro_batch, int seq, double value_bytes, int tp) {
    return double(micro_batch) * seq * m.hidden * value_bytes / tp;
}

DpTraffic dp_traffic_per_step(int zero_stage, double numel, StateBytes per_param, int64_t micro_batches) {
    const double grads = numel * per_param.grads, params = numel * per_param.params, mb = double(micro_batches);
    DpTraffic t;
    switch (zero_stage) {
        case 0: t.all_reduce = grads; break;
        case 1: t.reduce_scatter = grads, t.all_gather = params; break;
        case 2: t.reduce_scatter = mb * grads, t.all_gather = params; break;
        default: t.reduce_scatter = mb * grads, t.all_gather = 2 * mb * params; break;
    }
    return t;
}

double dp_bytes_per_rank(const DpTraffic& t, int dp) {
    return ring_bytes_per_rank(Collective::AllReduce, t.all_reduce, dp) +
           ring_bytes_per_rank(Collective::ReduceScatter, t.reduce_scatter, dp) +
           ring_bytes_per_rank(Collective::AllGather, t.all_gather, dp);
}

}  // namespace shardlm::cost
