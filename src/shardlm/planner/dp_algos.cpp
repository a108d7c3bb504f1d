#include "shardlm/planner/dp_algos.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "shardlm/cost/comm.h"
#include "shardlm/cost/memory.h"

namespace shardlm::planner {

namespace {

// PowerSGD's floats per round on one rank: rank R times (rows + cols) of each of its matrices (tensor
// parallelism splits one side of each: column-parallel the outputs, row-parallel the inputs, the
// embedding its vocabulary), plus its vectors sent whole (biases, norms); pipeline stages split the layers.
// vocab_rank: the vocabulary's matrices' own rank (--compress-embedding powersgd:R).
double powersgd_floats(const cost::ModelShape& m, int tp, int pp, int rank, int vocab_rank) {
    const double h = m.hidden, f = m.ffn_hidden, kv = double(m.kv_dim()), t = tp;
    const bool swiglu = m.arch == cost::Arch::Llama;
    const double sides = (h + (h + 2 * kv) / t) + (h / t + h)                        // qkv, output projection
                         + (h + (swiglu ? 2 * f : f) / t) + (f / t + h);             // MLP in, out
    const double vectors = (m.biases ? (h + 2 * kv) / t + h + f / t + h : 0)         // biases
                           + (m.biases ? 4 * h : 2 * h);                             // norms (LayerNorm: gain and bias)
    double s = m.layers * (rank * sides + vectors) / pp;
    s += vocab_rank * (m.vocab / t + h) * (m.tied_embeddings ? 1 : 2) / (pp > 1 && m.tied_embeddings ? 1 : pp);
    if (m.learned_positions) s += rank * (m.seq_len + h) / pp;
    return s + (m.biases ? 2 * h : h) / pp;                                          // the final norm
}

// Bytes a rank sends per step and seconds it takes, for the dp group's collectives of one policy.
struct DpGroupCost {
    int n;       // ranks
    double P;    // parameters a rank holds
    cost::Link link;
    using Cost = std::pair<double, double>;  // {bytes per step, seconds per step}
    Cost all_reduce(double buffer, double every) const {
        return {cost::ring_bytes_per_rank(cost::Collective::AllReduce, buffer, n) / every,
                cost::collective_time_s(cost::Collective::AllReduce, buffer, n, link) / every};
    }
    Cost all_gather(double msg) const {  // every rank's message of msg bytes to every rank
        return {cost::ring_bytes_per_rank(cost::Collective::AllGather, msg * n, n),
                cost::collective_time_s(cost::Collective::AllGather, msg * n, n, link)};
    }
    Cost neighbours(int d) const {
        return {d * 4 * P, d * cost::collective_time_s(cost::Collective::SendRecv, 4 * P, 2, link)};
    }
};

// The algorithms whose replicas differ (ZeRO-0 only): local SGD, DiLoCo, gossip on three graphs.
std::vector<std::pair<std::string, DpGroupCost::Cost>> replica_algorithms(const DpGroupCost& g) {
    std::vector<std::pair<std::string, DpGroupCost::Cost>> r;
    for (int h : {4, 16}) r.push_back({"local-sgd H=" + std::to_string(h), g.all_reduce(4 * g.P, h)});
    for (int h : {50, 100}) r.push_back({"diloco H=" + std::to_string(h), g.all_reduce(4 * g.P, h)});
    std::set<int> peers;  // rank 0's exponential-graph neighbours: +- 2^k mod n, deduplicated (as the engine's)
    for (int k = 1; k < g.n; k *= 2) peers.insert(k % g.n), peers.insert((g.n - k) % g.n);
    peers.erase(0);
    r.push_back({"gossip ring", g.neighbours(g.n > 2 ? 2 : 1)});
    r.push_back({"gossip exp", g.neighbours(int(peers.size()))});
    r.push_back({"gossip one-peer-exp", g.neighbours(1)});
    return r;
}

// The compressed gradients' exchanges (ZeRO-0 or 1).
std::vector<std::pair<std::string, DpGroupCost::Cost>> compressed_algorithms(const DpGroupCost& g,
                                                                             const cost::ModelShape& m, const Policy& p) {
    const double P = g.P;
    return {{"topk 1% + EF", g.all_gather(8 * 0.01 * P)},
            {"qsgd 8 levels (4 bits)", g.all_gather(P * (1 + 3) / 8 + 4 * P / 512)},
            {"sign + EF", g.all_gather(P / 8 + 4)},
            {"powersgd R=4 + EF", g.all_reduce(4 * powersgd_floats(m, p.tp, p.pp, 4, 4), 1)},
            // bench/dp_algos.sh's powersgd-r8-vocab-r1-bf16
            {"powersgd R=8, vocab R=1, bf16 + EF", g.all_reduce(2 * powersgd_floats(m, p.tp, p.pp, 8, 1), 1)}};
}

}  // namespace

std::vector<DpAlgoCost> compare_dp_algos(const cost::ModelShape& m, const Cluster& c, const Estimate& e) {
    const Policy& p = e.policy;
    const DpGroupCost g{p.dp, double(cost::total_params(m)) / (double(p.tp) * p.pp), group_link(c, p.tp * p.cp * p.dp)};
    const double others = e.step_time_s - e.time.dp_comm;
    // the all-reduce: the policy's own ZeRO traffic and its exposed time
    const cost::DpTraffic t = cost::dp_traffic_per_step(p.zero_stage, g.P, p.precision == Precision::Fp32
                                                                             ? cost::StateBytes{4, 4, 0}
                                                                             : cost::StateBytes{2, 2, 0},
                                                        e.micro_batches);
    std::vector<DpAlgoCost> rows{{"allreduce (the policy's ZeRO-" + std::to_string(p.zero_stage) + ")",
                                  cost::dp_bytes_per_rank(t, g.n), e.time.dp_comm, e.step_time_s, false}};
    // local SGD, DiLoCo and gossip need ZeRO-0 (and its memory)
    for (auto& [name, cost] : replica_algorithms(g))
        rows.push_back({name + (p.zero_stage >= 1 ? " (ZeRO-0)" : ""), cost.first, cost.second, others + cost.second, false});
    // ZeRO-1 with compressed gradients gathers the updated slices every step as the all-reduce does
    const double param_bytes = p.precision == Precision::Fp32 ? 4 : 2;
    for (auto& [name, cost] : compressed_algorithms(g, m, p)) {
        DpAlgoCost r{name + (p.zero_stage >= 2 ? " (ZeRO-1)" : ""), cost.first, cost.second, others + cost.second, false};
        if (p.zero_stage == 1) {
            r.bytes_per_step += cost::ring_bytes_per_rank(cost::Collective::AllGather, param_bytes * g.P, g.n);
            r.comm_s += cost::collective_time_s(cost::Collective::AllGather, param_bytes * g.P, g.n, g.link);
            r.step_s = others + r.comm_s;
        }
        rows.push_back(r);
    }
    for (size_t i = 1; i < rows.size(); i++) rows[i].beats_allreduce = rows[i].step_s < rows[0].step_s;
    return rows;
}

std::string dp_algos_table(const std::vector<DpAlgoCost>& rows, int dp, bool in_node) {
    std::string out = "data-parallel algorithms over " + std::to_string(dp) + " ranks (" +
                      (in_node ? "within a node" : "across the network") +
                      "): bytes and time only, not the loss each reaches (bench/dp_algos.sh)\n";
    char line[256];
    std::snprintf(line, sizeof(line), "  %-34s %14s %12s %10s  %s\n", "algorithm", "MB/step/rank", "dp comm s", "step s",
                  "vs allreduce");
    out += line;
    for (const DpAlgoCost& r : rows) {
        const double ratio = rows[0].step_s / r.step_s;
        std::snprintf(line, sizeof(line), "  %-34s %14.2f %12.4f %10.4f  %s\n", r.name.c_str(), r.bytes_per_step / 1e6,
                      r.comm_s, r.step_s,
                      &r == &rows[0] ? "-" : (std::string(r.beats_allreduce ? "faster" : "slower") +
                                              (ratio != 1 ? " (" + std::to_string(ratio).substr(0, 5) + "x)" : "")).c_str());
        out += line;
    }
    return out;
}

}  // namespace shardlm::planner
