#include "shardlm/train/memory_check.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "shardlm/core/check.h"
#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"
#include "shardlm/optim/optimizer.h"

namespace shardlm::train {

namespace {

std::string human(double bytes) {
    char buf[32];
    if (bytes >= 1e12) std::snprintf(buf, sizeof(buf), "%.1f TB", bytes / 1e12);
    else if (bytes >= 1e9) std::snprintf(buf, sizeof(buf), "%.1f GB", bytes / 1e9);
    else std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
    return buf;
}

}  // namespace

MemoryNeed estimate_rank_memory(const TrainConfig& cfg, const model::GptConfig& mc, const model::Layout& layout,
                                int dp, int tp, int cp, const std::vector<std::pair<int, int>>& chunks,
                                const std::vector<int>& slots) {
    const double total = double(layout.total) * sizeof(float);
    dp *= cp;  // the ranks that share one replica's state: ZeRO shards over dp x cp
    MemoryNeed m;
    m.params = shards_parameters(cfg.parallel.zero) ? total / dp : total;
    m.grads = shards_gradients(cfg.parallel.zero) ? total / dp : total;
    m.optimizer = optim::Optimizer::state_bytes_per_param(cfg.optim_config()) / sizeof(float) *
                  (shards_optimizer(cfg.parallel.zero) ? total / dp : total);
    cost::ModelShape shape = model::cost_shape(mc, cfg.data.seq);
    shape.dropout = false;  // the engine has no dropout: no masks, no dropped copies of the probabilities
    cost::ActivationSpec a;
    a.micro_batch = cfg.data.micro_batch;
    a.seq = cfg.data.seq;
    a.cp = cp;  // this rank holds seq / cp rows of each sequence
    a.ep = cfg.parallel.ep;
    a.expert_rows_for_every_rank = true;
    a.tp = tp;
    a.sequence_parallel = cfg.parallel.sequence_parallel;
    a.value_bytes = 4;
    a.attention = cfg.runtime.attention == AttentionKernel::Fused ? cost::Attention::Flash : cost::Attention::Naive;
    const double block = cost::block_activation_bytes(shape, a);
    const double tokens = double(cfg.data.micro_batch) * a.seq / cp;
    const double padded_vocab = double((mc.vocab_size + 127) / 128 * 128);
    for (size_t c = 0; c < chunks.size(); c++) {
        const auto [first, last] = chunks[c];
        double per_slot = 0;
        for (int u = first; u <= last; u++) {
            if (model::compute_kind(mc.n_layer, u) == model::ComputeKind::Block) per_slot += block;
            per_slot += tokens * mc.n_embd * 4;  // the unit's input
        }
        if (model::compute_kind(mc.n_layer, last) == model::ComputeKind::Head) per_slot += tokens * padded_vocab / tp * 4;  // the logits
        m.activations += per_slot * (c < slots.size() ? slots[c] : 1);
    }
    return m;
}

std::pair<double, double> machine_memory() {
    std::ifstream f("/proc/meminfo");
    double avail = 0, total = 0;
    for (std::string line; std::getline(f, line);) {
        std::istringstream in(line);
        std::string key;
        double kb = 0;
        in >> key >> kb;
        if (key == "MemAvailable:") avail = kb * 1024;
        if (key == "MemTotal:") total = kb * 1024;
    }
    return {avail, total};
}

void check_memory_fits(const MemoryNeed& need, int ranks_here, const std::string& model_name) {
    const auto [avail, total] = machine_memory();
    if (avail <= 0) return;  // no /proc/meminfo: nothing to compare with
    const double want = need.total() * ranks_here;
    SHARDLM_CHECK(want <= avail, "model ", model_name, " does not fit in this machine's memory: the run needs ",
                  human(want), " (", ranks_here, " rank", ranks_here > 1 ? "s" : "", " here x ", human(need.total()),
                  ": parameters ", human(need.params), ", gradients ", human(need.grads), ", optimizer state ",
                  human(need.optimizer), ", activations ", human(need.activations), "), and the machine has ",
                  human(avail), " available (MemAvailable in /proc/meminfo; ", human(total), " in all)",
                  "\n---> HINT: a smaller --model (`shardlm info --list`), a smaller --micro-batch or --seq, or more ",
                  "machines with --zero 3 / --tp / --pp (`shardlm plan` predicts the memory of a layout)");
}

}  // namespace shardlm::train
