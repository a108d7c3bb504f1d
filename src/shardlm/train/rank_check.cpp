#include "shardlm/train/rank_check.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/hash.h"
#include "shardlm/train/rank_text.h"

namespace shardlm::train {

void check_same_config(comm::Group& world, const TrainConfig& cfg) {
    if (world.size() == 1) return;
    nlohmann::json mine = config_to_json(cfg);
    // the same path may hold different files on different machines: compare what they hold
    mine["data_contents"] = io::file_fingerprint(cfg.data.train);
    if (!cfg.data.val_data.empty()) mine["val_data_contents"] = io::file_fingerprint(cfg.data.val_data);
    const std::string text = mine.dump();
    const uint64_t h = io::xxh64(text);
    std::vector<uint64_t> all(size_t(world.size()));
    world.all_gather_bytes(&h, all.data(), sizeof(h));
    bool same = true;
    for (uint64_t x : all) same = same && x == all[0];
    if (same) return;
    const std::vector<std::string> texts = all_gather_text(world, text);
    const nlohmann::json ref = nlohmann::json::parse(texts[0]);
    std::string diff;
    for (size_t r = 1; r < texts.size(); r++) {
        if (all[r] == all[0]) continue;
        const nlohmann::json other = nlohmann::json::parse(texts[r], nullptr, false);
        std::string keys;
        for (auto it = ref.begin(); it != ref.end(); ++it) {
            const nlohmann::json v = other.is_object() && other.contains(it.key()) ? other[it.key()] : nlohmann::json();
            if (v != it.value())
                keys += (keys.empty() ? "" : ", ") + it.key() + " = " + v.dump() + " (rank 0: " + it.value().dump() + ")";
        }
        if (other.is_object())
            for (auto it = other.begin(); it != other.end(); ++it)
                if (!ref.contains(it.key())) keys += (keys.empty() ? "" : ", ") + it.key() + " only on this rank";
        diff += "\n  rank " + std::to_string(r) + ": " + (keys.empty() ? "(same keys, different encoding)" : keys);
    }
    fail("the ranks were started with different settings:", diff,
         "\n---> HINT: give every rank the same flags and --config (mpirun -np N shardlm train ...), and the same "
         "data files (data_contents: size and a sampled hash of --data)");
}

namespace {

// Which parameters a group's replicas share: all (tensor parallelism's replicated ones), or, between data-parallel
// ranks, those outside the MoE layers' experts (expert parallelism gives each ep rank its own) or only the experts
// (between the ranks that hold the same ones).
enum class Shared { All, TpReplicated, NotExperts, Experts };

// Per-parameter hashes of this rank's copy of the parameters `which` covers (0 for the others).
std::vector<uint64_t> param_hashes(const model::Layout& layout, const float* params, Shared which) {
    std::vector<uint64_t> h(layout.params.size(), 0);
    for (const model::Unit& u : layout.units) {
        const bool experts = u.kind == model::UnitKind::Experts;
        if ((which == Shared::NotExperts && experts) || (which == Shared::Experts && !experts)) continue;
        for (int i = u.first_param; i < u.first_param + u.num_params; i++) {
            const model::ParamSpec& p = layout.params[size_t(i)];
            if (which != Shared::TpReplicated || p.tp_axis < 0)
                h[size_t(i)] = io::xxh64(params + p.offset, p.numel * sizeof(float), 0);
        }
    }
    return h;
}

// The first parameter whose hash differs from group rank 0's, as a message, or "".
std::string compare(comm::Group& g, const model::Layout& layout, const std::vector<uint64_t>& mine, const char* what,
                    int step) {
    if (g.size() == 1) return "";
    const size_t n = mine.size();
    std::vector<uint64_t> all(n * size_t(g.size()));
    g.all_gather_bytes(mine.data(), all.data(), n * sizeof(uint64_t));
    for (size_t i = 0; i < n; i++)
        for (int r = 1; r < g.size(); r++)
            if (all[size_t(r) * n + i] != all[i])
                return cat("step ", step, ": --check-replicas: ", layout.params[i].name, " differs between ", what,
                           " ranks 0 and ", r, " (world ranks ", g.members()[0], " and ", g.members()[size_t(r)],
                           "): the replicas have diverged");
    return "";
}

}  // namespace

void check_replicas(comm::Group& world, comm::Grid& grid, const model::Layout& layout, const float* full_params,
                    int step, bool dp_differ) {
    std::string problem;
    if (full_params) {
        const bool ep = grid.ep_size() > 1;
        if (!dp_differ)
            problem = compare(grid.dp_cp(), layout, param_hashes(layout, full_params, ep ? Shared::NotExperts : Shared::All),
                              grid.cp_size() > 1 ? "data- and context-parallel" : "data-parallel", step);
        if (!dp_differ && ep && problem.empty())
            problem = compare(grid.edp(), layout, param_hashes(layout, full_params, Shared::Experts), "expert-data-parallel", step);
        const std::string tp = compare(grid.tp(), layout, param_hashes(layout, full_params, Shared::TpReplicated), "tensor-parallel", step);
        if (problem.empty()) problem = tp;
    }
    for (const std::string& p : all_gather_text(world, problem))
        SHARDLM_CHECK(p.empty(), p,
                      "\n---> HINT: replicas that take the same updates stay bit-identical; a difference means "
                      "faulty memory or a bug (resume from the last checkpoint)");
}

}  // namespace shardlm::train
