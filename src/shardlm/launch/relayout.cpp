#include "shardlm/launch/relayout.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <tuple>
#include <vector>

#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"

namespace shardlm::launch {

std::string describe(const Layout& l) {
    return "dp" + std::to_string(l.dp) + " tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp) +
           (l.cp > 1 ? " cp" + std::to_string(l.cp) : std::string());
}

double rank_bytes(const train::TrainConfig& cfg, const model::GptConfig& mc, const Layout& l) {
    const cost::ModelShape shape = model::cost_shape(mc, cfg.data.seq);
    const double numel = double(cost::total_params(shape)) / double(l.tp * l.pp);
    const bool mixed = cfg.precision.resolved().activation != DType::F32;
    const cost::ModelStateBytes states =
        cost::model_state_bytes(numel, mixed ? cost::kAdamMixedFp32Grads : cost::kAdamFp32, stage_number(cfg.parallel.zero),
                                l.dp * l.cp);
    // the first stage keeps up to pp micro-batches in flight (1F1B), each 1/pp of the blocks, 1/tp wide
    const int64_t micro = cfg.data.global_batch / (int64_t(l.dp) * cfg.data.micro_batch);
    const double in_flight = double(std::min<int64_t>(l.pp, micro));
    const double act =
        cost::activation_bytes_seed002(shape, cfg.data.micro_batch, cfg.data.seq) / double(l.pp * l.tp * l.cp) * in_flight;
    return states.total() + act;
}

std::optional<Layout> choose_layout(const train::TrainConfig& cfg, const model::GptConfig& mc, int ranks,
                                    double available_bytes, std::string* why) {
    const int micro_total = cfg.data.global_batch / cfg.data.micro_batch;  // micro-batches of the global batch
    const int cp = cfg.parallel.cp;
    auto best_dp = [&](int tp, int pp) {
        for (int d = ranks / (tp * pp * cp); d >= 1; d--)
            if (micro_total % d == 0) return d;
        return 0;
    };
    auto fits = [&](const Layout& l) {
        train::TrainConfig c = cfg;  // the settings must hold on the layout (micro-batches, schedule)
        c.parallel.dp = l.dp, c.parallel.tp = l.tp, c.parallel.pp = l.pp;
        if (l.pp != cfg.parallel.pp) c.parallel.pp_split.clear();
        try {
            c.validate();
        } catch (const std::exception&) {
            return false;
        }
        return available_bytes <= 0 || rank_bytes(cfg, mc, l) * l.ranks() <= available_bytes;
    };
    const int tp0 = cfg.parallel.tp, pp0 = cfg.parallel.pp;
    if (tp0 * pp0 * cp <= ranks) {
        Layout l{best_dp(tp0, pp0), tp0, pp0, cp};
        if (l.dp > 0 && fits(l)) return l;
    }
    std::vector<std::tuple<double, int, Layout>> cands;  // (distance, -ranks used, layout)
    for (int t = 1; t <= ranks; t++) {
        if (mc.n_head % t != 0) continue;
        for (int p = 1; t * p * cp <= ranks && p <= mc.n_layer; p++) {
            const Layout l{best_dp(t, p), t, p, cp};
            if (l.dp == 0 || !fits(l)) continue;
            const double dist = std::fabs(std::log2(double(t) / tp0)) + std::fabs(std::log2(double(p) / pp0));
            cands.emplace_back(dist, -l.ranks(), l);
        }
    }
    if (cands.empty()) {
        if (why)
            *why = "no layout of at most " + std::to_string(ranks) + " ranks holds the model (" +
                   std::to_string(mc.n_layer) + " blocks, " + std::to_string(mc.n_head) + " heads) with global batch " +
                   std::to_string(cfg.data.global_batch) + " in micro-batches of " + std::to_string(cfg.data.micro_batch) +
                   (available_bytes > 0 ? " within the machine's available memory" : "");
        return std::nullopt;
    }
    std::stable_sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) {
        return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    return std::get<2>(cands.front());
}

}  // namespace shardlm::launch
