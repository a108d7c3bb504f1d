#include "shardlm/planner/explain.h"

#include <algorithm>
#include <cstdio>

#include "shardlm/core/check.h"

namespace shardlm::planner {

namespace {

std::string fmt(const char* f, double x) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), f, x);
    return buf;
}

int64_t model_parallel(const Policy& p) { return int64_t(p.tp) * p.pp * p.cp; }

std::string tp_sentence(const Estimate& b) {
    const Policy& p = b.policy;
    if (p.tp == 1) return "tp=1: no per-layer tensor-parallel all-reduces";
    if (b.tp_in_node) return cat("tp=", p.tp, " inside the node: TP traffic stays on NVLink");
    return cat("tp=", p.tp, " spans nodes: its TP traffic crosses the network");
}

std::string slower(const Estimate& best, const Estimate& e) {
    const double loss = 1 - e.tokens_per_s / best.tokens_per_s;
    const double more_gb = (e.memory.total() - best.memory.total()) / 1e9;
    if (loss < 0.0005) return more_gb < 0.05 ? std::string("as fast") : fmt("as fast but needs %.1f GB more", more_gb);
    return fmt("%.1f %% slower", 100 * loss);
}

// Why not less model parallelism (fewer GPUs per model replica, more data parallelism)?
std::string model_parallel_sentence(const std::vector<Estimate>& ranked, const std::vector<Estimate>& leanest,
                                    const Cluster& c) {
    const Estimate& best = ranked.front();
    const int64_t mp = model_parallel(best.policy);
    for (const Estimate& e : ranked)
        if (model_parallel(e.policy) < mp)
            return cat("the fastest with less model parallelism (", policy_diff(best.policy, e.policy), ") is ",
                       slower(best, e), " (", biggest_loss(best.time, e.time), ")");
    const Estimate* lean = nullptr;
    for (const Estimate& e : leanest)
        if (model_parallel(e.policy) < mp && (!lean || e.memory.total() < lean->memory.total())) lean = &e;
    if (!lean) return "";
    return cat("less model parallelism does not fit: the leanest such policy (", policy_diff(best.policy, lean->policy),
               ") needs ", fmt("%.1f", lean->memory.total() / 1e9), " GB of ", c.gpu.memory_gb);
}

std::string zero_sentence(const Estimate& b) {
    const Policy& p = b.policy;
    const double states = (b.memory.params + b.memory.grads + b.memory.optimizer) / 1e9;
    const std::string what = p.zero_stage == 0 ? "no ZeRO" : cat("ZeRO-", p.zero_stage, " over ", p.dp * p.cp, " ranks");
    return cat(what, ": model states ", fmt("%.1f", states), " GB per GPU, ", fmt("%.2f", b.time.dp_comm),
               " s of DP/ZeRO traffic left exposed");
}

using NamedValues = std::vector<std::pair<const char*, double>>;

NamedValues time_terms(const TimeBreakdown& t) {
    NamedValues v = {{"compute", t.compute},          {"TP communication", t.tp_comm},
               {"CP communication", t.cp_comm}, {"EP all-to-all", t.ep_comm}, {"pipeline bubble", t.pp_bubble},
               {"pipeline send/recv", t.pp_comm}, {"exposed DP communication", t.dp_comm},
               {"optimizer", t.optimizer}};
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return v;
}

NamedValues memory_terms(const MemoryBreakdown& m) {
    NamedValues v = {{"parameters", m.params}, {"gradients", m.grads}, {"optimizer state", m.optimizer},
               {"activations", m.activations}, {"buffers", m.buffers}};
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return v;
}

std::string list_terms(const NamedValues& v, double total, double scale, const char* unit) {
    std::string out;
    for (const auto& [name, x] : v)
        if (x >= 0.01 * total)
            out += (out.empty() ? "" : ", ") + cat(name, " ", fmt("%.3g", x / scale), unit, " (",
                                                   fmt("%.0f", 100 * x / total), " %)");
    return out;
}

}  // namespace

std::string dominant_terms(const Estimate& e) {
    if (!e.consistent) return "";
    const double step = e.time.total(), mem = e.memory.total();
    return cat("step ", fmt("%.3g", step), " s: ", list_terms(time_terms(e.time), step, 1, " s"), "; memory ",
               fmt("%.3g", mem / 1e9), " GB: ", list_terms(memory_terms(e.memory), mem, 1e9, " GB"));
}

std::string dominant_summary(const Estimate& e) {
    if (!e.consistent) return "";
    const auto t = time_terms(e.time).front(), m = memory_terms(e.memory).front();
    return cat("step: ", t.first, " ", fmt("%.0f", 100 * t.second / e.time.total()), " %; memory: ", m.first, " ",
               fmt("%.0f", 100 * m.second / e.memory.total()), " %");
}

std::string policy_diff(const Policy& a, const Policy& b) {
    std::string out;
    auto add = [&](const char* name, const std::string& x, const std::string& y) {
        if (x != y) out += (out.empty() ? "" : ", ") + cat(name, " ", x, " -> ", y);
    };
    auto s = [](auto v) { return cat(v); };
    add("tp", s(a.tp), s(b.tp));
    add("pp", s(a.pp), s(b.pp));
    add("dp", s(a.dp), s(b.dp));
    add("cp", s(a.cp), s(b.cp));
    add("ep", s(a.ep), s(b.ep));
    add("v", s(a.virtual_stages), s(b.virtual_stages));
    add("mb", s(a.micro_batch), s(b.micro_batch));
    add("zero", s(a.zero_stage), s(b.zero_stage));
    add("recompute", cost::recompute_name(a.recompute), cost::recompute_name(b.recompute));
    add("sp", a.sequence_parallel ? "on" : "off", b.sequence_parallel ? "on" : "off");
    return out.empty() ? "same policy" : out;
}

std::string biggest_loss(const TimeBreakdown& a, const TimeBreakdown& b) {
    const std::pair<const char*, double> deltas[] = {
        {"compute", b.compute - a.compute},
        {"TP communication", b.tp_comm - a.tp_comm},
        {"CP communication", b.cp_comm - a.cp_comm},
        {"EP all-to-all", b.ep_comm - a.ep_comm},
        {"pipeline bubble", b.pp_bubble - a.pp_bubble},
        {"pipeline send/recv", b.pp_comm - a.pp_comm},
        {"exposed DP communication", b.dp_comm - a.dp_comm},
        {"optimizer", b.optimizer - a.optimizer},
    };
    const auto* worst = &deltas[0];
    for (const auto& d : deltas)
        if (d.second > worst->second) worst = &d;
    return cat(worst->first, " ", fmt("%+.3f s", worst->second));
}

std::string explain_best(const std::vector<Estimate>& ranked, const std::vector<Estimate>& leanest, const Cluster& c) {
    if (ranked.empty()) return "";
    const Estimate& best = ranked.front();
    std::vector<std::string> parts{tp_sentence(best)};
    if (std::string s = model_parallel_sentence(ranked, leanest, c); !s.empty()) parts.push_back(s);
    if (best.policy.pp > 1)
        parts.push_back(cat("pp=", best.policy.pp, " x v=", best.policy.virtual_stages, ": bubble ",
                            fmt("%.1f", 100 * best.time.pp_bubble / best.step_time_s), " % of the step"));
    else
        parts.push_back("pp=1: no pipeline bubble");
    parts.push_back(zero_sentence(best));
    parts.push_back("dominant terms: " + dominant_summary(best));
    if (ranked.size() > 1)
        parts.push_back(cat("#2 (", policy_diff(best.policy, ranked[1].policy), ") is ", slower(best, ranked[1])));
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
}

std::string format_terms(const Terms& t, const Estimate& e) {
    const double step = e.step_time_s;
    auto share = [&](double x) { return cat(fmt("%.3g s", x), " (", fmt("%.0f %%", step > 0 ? 100 * x / step : 0), ")"); };
    auto sum = [](const std::vector<Term>& v) {
        double s = 0;
        for (const Term& x : v) s += x.seconds;
        return s;
    };
    std::string out = cat("compute ", share(sum(t.compute)), "\n");
    char line[256];
    for (const Term& x : t.compute) {
        const std::string eff = x.efficiency > 0 ? cat("at ", fmt("%.0f", 100 * x.efficiency), " % of peak") : "";
        std::snprintf(line, sizeof(line), "  %-62s %-22s %-17s %s\n", x.what.c_str(), x.shape.c_str(), eff.c_str(),
                      share(x.seconds).c_str());
        out += line;
    }
    out += cat("exposed communication ", share(sum(t.communication)), "\n");
    for (const Term& x : t.communication) {
        std::snprintf(line, sizeof(line), "  %-102s %s\n", x.what.c_str(), share(x.seconds).c_str());
        out += line;
    }
    out += cat("pipeline bubble ", share(t.pipeline_bubble_s), ", optimizer ", share(t.optimizer_s), "\n");
    const MemoryBreakdown& m = e.memory;
    out += cat("memory ", fmt("%.1f GB", m.total() / 1e9), " (stage ", e.fullest_stage, "): parameters ",
               fmt("%.1f", m.params / 1e9), ", gradients ", fmt("%.1f", m.grads / 1e9), ", optimizer state ",
               fmt("%.1f", m.optimizer / 1e9), ", activations ", fmt("%.1f", m.activations / 1e9), ", buffers ",
               fmt("%.1f", m.buffers / 1e9), "\n");
    return out;
}

}  // namespace shardlm::planner
