// parallel/data_parallel_report.cpp: what DataParallel allocated beside the model-state formulas
// of the shared cost model (cost/memory.h), and the bytes it should send per step.
#include <algorithm>
#include <cstdio>

#include "shardlm/cost/memory.h"
#include "shardlm/parallel/data_parallel.h"

namespace shardlm::parallel {

MemoryReport DataParallel::memory(const optim::Optimizer& opt) const {
    MemoryReport m;
    const bool mixed = pt_ != DType::F32;
    m.params = mixed ? model16_.bytes() : master_.bytes();
    m.master = mixed ? master_.bytes() : 0;
    m.grads = grads_.bytes() + grad_shards_.bytes();
    m.optimizer = opt.state_bytes();
    m.activations = part_.activation_bytes();
    m.comm_buffers = comm_buffer_bytes();
    return m;
}

std::string DataParallel::memory_report(const optim::Optimizer& opt) const {
    const MemoryReport m = memory(opt);
    const double psi = double(part_.layout().total);
    const bool mixed = pt_ != DType::F32;
    // optimiser state bytes per parameter: SGD 0, momentum/AdaGrad 4, Adam(W) 8
    const double k = opt.owned_elems() ? double(opt.state_bytes()) / double(opt.owned_elems()) : 0.0;
    // fp32: params 4, grads 4, optimiser k; mixed: the 16-bit copy 2, fp32 grads 4, master 4 + k
    const cost::StateBytes per{mixed ? 2.0 : 4.0, 4.0, (mixed ? 4.0 : 0.0) + k};
    const cost::ModelStateBytes f = cost::model_state_bytes(psi, per, zero_, dp_.size());
    const double master_f = per.optimizer > 0 ? f.optimizer * (mixed ? 4.0 : 0.0) / per.optimizer : 0.0;
    const double opt_f = f.optimizer - master_f;
    cost::ZeroBufferSpec zb;
    for (size_t u = 0; u < units_.size(); u++) {
        double& slot = int(u) == wte_unit_ ? zb.embedding_numel : zb.largest_unit;
        slot = std::max(slot, double(units_[u].numel));
    }
    zb.total_numel = psi, zb.dp = dp_.size(), zb.zero_stage = zero_;
    zb.param_bytes = double(dtype_bytes(pt_)), zb.grad_bytes = 4, zb.reduce_bytes = double(dtype_bytes(rt_));
    const double buffers_f = cost::zero_buffer_bytes(zb);
    auto mib = [](double b) { return b / (1024.0 * 1024.0); };
    char buf[2048];
    int n = std::snprintf(
        buf, sizeof(buf),
        "  ZeRO-%d over %d data-parallel ranks, %s (per parameter: %s; k = %.0f bytes of optimiser state; P = %.0f "
        "elements of this rank's part, incl. padding; formulas: cost/memory.h)\n"
        "  %-22s %12s %12s\n"
        "  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n"
        "  %-22s %12.2f %12.2f\n  %-22s %12.2f %12.2f\n",
        zero_, dp_.size(), mixed ? std::string(dtype_name(pt_)).c_str() : "fp32",
        mixed ? "a 16-bit copy 2, fp32 gradients 4, fp32 master 4, state k" : "parameters 4, gradients 4, state k", k,
        psi, "MiB", "allocated", "formula", "parameters", mib(double(m.params)), mib(f.params), "gradients",
        mib(double(m.grads)), mib(f.grads), "master weights", mib(double(m.master)), mib(master_f), "optimizer state",
        mib(double(m.optimizer)), mib(opt_f), "communication buffers", mib(double(m.comm_buffers)), mib(buffers_f),
        "model states total", mib(double(m.params + m.grads + m.master + m.optimizer)), mib(f.total()));
    if (mixed && n > 0 && size_t(n) < sizeof(buf)) {
        // the seeds' table (ZeRO paper: 2 + 2 + K with 16-bit gradients) beside ours
        const cost::ModelStateBytes seed = cost::model_state_bytes(psi, cost::StateBytes{2, 2, 4 + k}, zero_, dp_.size());
        std::snprintf(buf + n, sizeof(buf) - size_t(n),
                      "  seeds' 2 + 2 + %.0f (16-bit gradients): %.2f MiB; shardlm accumulates gradients in fp32 "
                      "(2 + 4 + %.0f): %.2f MiB\n",
                      4 + k, mib(seed.total()), 4 + k, mib(f.total()));
    }
    return buf;
}

std::array<size_t, 3> DataParallel::expected_step_bytes(int micro) const {
    const int n = dp_.size();
    const size_t rb = dtype_bytes(rt_), pb = dtype_bytes(pt_);  // reduced and gathered element bytes
    std::array<size_t, 3> b{0, 0, 0};  // all-reduce, reduce-scatter, all-gather
    auto rs = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::ReduceScatter, elems, rb, n, dp_.rank()); };
    auto ag = [&](size_t elems) { return comm::Group::ring_bytes_rank(comm::OpKind::AllGather, elems, pb, n, dp_.rank()); };
    if (zero_ == 0) {
        for (const optim::Range& r : buckets_)
            b[0] += comm::Group::ring_bytes_rank(comm::OpKind::AllReduce, r.size(), rb, n, dp_.rank());
        return b;
    }
    // ZeRO-3 with one stage: the backward starts with what the forward left gathered: wte (its own
    // slot) and the last two other units (the last block and the head).
    std::vector<bool> resident(units_.size(), false);
    if (single_stage_) {
        int seen = 0;
        for (size_t u = units_.size(); u-- > 0;) {
            if (int(u) == wte_unit_) resident[u] = true;
            else if (seen < 2) resident[u] = true, seen++;
        }
    }
    for (size_t u = 0; u < units_.size(); u++) {
        const size_t e = units_[u].numel;
        b[1] += rs(e) * size_t(zero_ == 1 ? 1 : micro);
        if (zero_ < 3) {
            b[2] += ag(e);
        } else {
            b[2] += ag(e) * size_t(micro);                   // forward
            if (!resident[u]) b[2] += ag(e) * size_t(micro);  // backward
        }
    }
    return b;
}

}  // namespace shardlm::parallel
