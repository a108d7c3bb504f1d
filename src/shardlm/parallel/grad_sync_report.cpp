// parallel/grad_sync_report.cpp: what the data-parallel seam allocated beside the model-state formulas
// of the shared cost model (cost/memory.h).
#include <algorithm>
#include <cstdio>

#include "shardlm/cost/memory.h"
#include "shardlm/parallel/grad_sync.h"

namespace shardlm::parallel {

MemoryReport GradSync::memory(const optim::Optimizer& opt) const {
    MemoryReport m;
    m.params = store_.param_bytes();
    m.master = store_.master_bytes();
    m.grads = store_.grad_bytes();
    m.optimizer = opt.state_bytes();
    m.activations = part_.activation_bytes();
    m.comm_buffers = zero_->comm_buffer_bytes();
    return m;
}

std::string GradSync::memory_report(const optim::Optimizer& opt) const {
    const MemoryReport m = memory(opt);
    const double psi = double(part_.layout().total);
    const bool mixed = store_.mixed();
    const DType pt = store_.param_type();
    const int stage = stage_number(zero_->stage());
    const auto& units = store_.units();
    // optimiser state bytes per parameter: SGD 0, momentum/AdaGrad 4, Adam(W) 8
    const double k = opt.owned_elems() ? double(opt.state_bytes()) / double(opt.owned_elems()) : 0.0;
    // fp32: params 4, grads 4, optimiser k; mixed: the 16-bit copy 2, fp32 grads 4, master 4 + k
    const cost::StateBytes per{mixed ? 2.0 : 4.0, 4.0, (mixed ? 4.0 : 0.0) + k};
    const cost::ModelStateBytes f = cost::model_state_bytes(psi, per, stage, dp_.size());
    const double master_f = per.optimizer > 0 ? f.optimizer * (mixed ? 4.0 : 0.0) / per.optimizer : 0.0;
    const double opt_f = f.optimizer - master_f;
    cost::ZeroBufferSpec zb;
    const int wte = part_.layout().unit_of(model::UnitKind::TokenEmbedding);
    for (size_t u = 0; u < units.size(); u++) {
        double& slot = int(u) == wte ? zb.embedding_numel : zb.largest_unit;
        slot = std::max(slot, double(units[u].numel));
    }
    zb.total_numel = psi, zb.dp = dp_.size(), zb.zero_stage = stage, zb.gathered_per_chunk = zero_->needs_unshard_actions();
    zb.param_bytes = double(dtype_bytes(pt)), zb.grad_bytes = 4, zb.reduce_bytes = double(dtype_bytes(store_.reduce_type()));
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
        stage, dp_.size(), mixed ? std::string(dtype_name(pt)).c_str() : "fp32",
        mixed ? "a 16-bit copy 2, fp32 gradients 4, fp32 master 4, state k" : "parameters 4, gradients 4, state k", k,
        psi, "MiB", "allocated", "formula", "parameters", mib(double(m.params)), mib(f.params), "gradients",
        mib(double(m.grads)), mib(f.grads), "master weights", mib(double(m.master)), mib(master_f), "optimizer state",
        mib(double(m.optimizer)), mib(opt_f), "communication buffers", mib(double(m.comm_buffers)), mib(buffers_f),
        "model states total", mib(double(m.params + m.grads + m.master + m.optimizer)), mib(f.total()));
    if (mixed && n > 0 && size_t(n) < sizeof(buf)) {
        // the seeds' table (ZeRO paper: 2 + 2 + K with 16-bit gradients) beside ours
        const cost::ModelStateBytes seed = cost::model_state_bytes(psi, cost::StateBytes{2, 2, 4 + k}, stage, dp_.size());
        std::snprintf(buf + n, sizeof(buf) - size_t(n),
                      "  seeds' 2 + 2 + %.0f (16-bit gradients): %.2f MiB; shardlm accumulates gradients in fp32 "
                      "(2 + 4 + %.0f): %.2f MiB\n",
                      4 + k, mib(seed.total()), 4 + k, mib(f.total()));
    }
    return buf;
}

}  // namespace shardlm::parallel
