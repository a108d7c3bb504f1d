#include "shardlm/parallel/tensor_parallel.h"

namespace shardlm::parallel {

std::vector<std::pair<size_t, size_t>> replicated_runs(const model::Layout& layout, int unit) {
    const model::Unit& u = layout.units[size_t(unit)];
    std::vector<std::pair<size_t, size_t>> runs;
    bool open = false;
    for (int i = 0; i < u.num_params; i++) {
        const model::ParamSpec& p = layout.params[size_t(u.first_param + i)];
        const size_t b = p.offset - u.offset, e = b + p.numel;
        if (p.tp_axis >= 0) {
            open = false;
            continue;
        }
        if (open) runs.back().second = e;  // the alignment gap in between is zero and stays zero
        else runs.push_back({b, e});
        open = true;
    }
    return runs;
}

void sync_replicated_grads(comm::Group& tp, const model::Layout& layout, int unit, float* grad) {
    if (tp.size() == 1) return;
    for (auto [b, e] : replicated_runs(layout, unit)) tp.all_reduce_sum(grad + b, e - b);
}

}  // namespace shardlm::parallel
