#include "shardlm/parallel/comm_theory.h"

#include "shardlm/comm/group.h"
#include "shardlm/parallel/tensor_parallel.h"

namespace shardlm::parallel {

using schedule::Action;
using schedule::Op;
using schedule::Schedule;

std::array<size_t, 3> tp_step_bytes(const model::ModelPart& part, int micro, int rows, int T, ZeroStage zero) {
    const model::UnitContext& u = part.context();
    const int t = u.tp_size(), r = u.tp->rank();
    std::array<size_t, 3> b{0, 0, 0};
    if (t == 1) return b;
    const size_t N = size_t(rows) * size_t(T), C = size_t(part.config().n_embd);
    const size_t Nl = size_t(u.rows(int(N)));
    const size_t m = size_t(micro);
    auto ar = [&](size_t count) { return comm::ring_bytes_rank(comm::OpKind::AllReduce, count, 4, t, r); };
    // all-gather / reduce-scatter of this rank's (Nl, C) rows: activations in their stored type (16 bits in
    // mixed precision), gradients and the reductions' partial sums in fp32
    const size_t act = dtype_bytes(u.prec.activation);
    auto gather = [&](size_t bytes) { return comm::ring_bytes_rank(comm::OpKind::AllGather, Nl * C * size_t(t), bytes, t, r); };
    const size_t ag_act = gather(act), ag = gather(4);
    const size_t rs = comm::ring_bytes_rank(comm::OpKind::ReduceScatter, Nl * C * size_t(t), 4, t, r);
    // full recomputation runs each block's forward again before its backward, communication included
    const size_t fwd_passes = u.recompute == model::Recompute::Full ? 2 : 1;
    for (int c = 0; c < part.num_chunks(); c++) {
        if (part.has_embedding(c)) {  // g forward (SP: reduce-scatter; its backward all-gathers the gradient)
            if (u.sp) b[1] += m * rs, b[2] += m * ag;
            else b[0] += m * ar(N * C);
        }
        const size_t blocks = size_t(part.blocks(c));
        if (u.sp) {
            // forward: 2 all-gathers of LayerNorm outputs + 2 reduce-scatters; backward: the 2 LayerNorm
            // outputs gathered again, 2 gradients gathered, 2 reduce-scatters
            b[2] += blocks * m * (fwd_passes * 2 * ag_act + 2 * ag_act + 2 * ag);
            b[1] += blocks * m * (fwd_passes * 2 + 2) * rs;
        } else {
            b[0] += blocks * m * (fwd_passes * 2 + 2) * ar(N * C);
        }
        if (part.has_head(c)) {  // cross-entropy statistics, and f's backward
            b[0] += m * (ar(N) + ar(2 * N));
            if (u.sp) b[2] += m * 2 * ag_act, b[1] += m * rs;  // the final LayerNorm's output, forward and backward
            else b[0] += m * ar(N * C);
        }
    }
    if (u.sp) {  // the replicated parameters' gradients: once per step (ZeRO 0-1) or per micro-batch
        const size_t times = shards_gradients(zero) ? m : 1;
        const model::Layout& layout = part.layout();
        for (size_t unit = 0; unit < layout.units.size(); unit++)
            for (auto [lo, hi] : replicated_runs(layout, int(unit))) b[0] += times * ar(hi - lo);
    }
    return b;
}

size_t pp_step_bytes(const model::ModelPart& part, const Schedule& s, int rank, int rows, int T) {
    size_t out = 0;
    for (int c = 0; c < s.virtual_stages; c++) {
        const int mc = s.model_chunk(rank, c);
        if (mc < s.num_model_chunks() - 1) out += size_t(s.micro) * part.boundary_bytes(rows, T);  // activations
        if (mc > 0) out += size_t(s.micro) * part.grad_bytes(rows, T);  // their gradients, fp32
    }
    return out;
}

}  // namespace shardlm::parallel
