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

}  // namespace

std::vector<DpAlgoCost> compare_dp_algos(const cost::ModelShape& m, const Cluster& c, const Estimate& e) {
    const Policy& p = e.policy;
    const int n = p.dp;
    const double P = double(cost::total_params(m)) / (double(p.tp) * p.pp);
    const cost::Link link = group_link(c, p.tp * p.cp * p.dp);
    const double others = e.step_time_s - e.time.dp_comm;
    std::vector<DpAlgoCost> rows;
    // compressed: the gradients' exchange (ZeRO-1 allowed) rather than the replicas' (ZeRO-0 only)
    std::vector<bool> compressed;
    auto add = [&](std::string name, double bytes, double seconds, bool is_compressed = false) {
        rows.push_back({std::move(name), bytes, seconds, others + seconds, false});
        compressed.resize(rows.size(), false);
        compressed.back() = is_compressed;
    };
    using cost::Collective;
    auto all_reduce = [&](double buffer, double every) {
        return std::pair{cost::ring_bytes_per_rank(Collective::AllReduce, buffer, n) / every,
                         cost::collective_time_s(Collective::AllReduce, buffer, n, link) / every};
    };
    auto all_gather = [&](double msg) {  // every rank's message of msg bytes to every rank
        return std::pair{cost::ring_bytes_per_rank(Collective::AllGather, msg * n, n),
                         cost::collective_time_s(Collective::AllGather, msg * n, n, link)};
    };
    auto neighbours = [&](int d) {
        return std::pair{d * 4 * P, d * cost::collective_time_s(Collective::SendRecv, 4 * P, 2, link)};
    };
    // the all-reduce: the policy's own ZeRO traffic and its exposed time
    const cost::DpTraffic t = cost::dp_traffic_per_step(p.zero_stage, P, p.precision == Precision::Fp32
                                                                           ? cost::StateBytes{4, 4, 0}
                                                                           : cost::StateBytes{2, 2, 0},
                                                        e.micro_batches);
    rows.push_back({"allreduce (the policy's ZeRO-" + std::to_string(p.zero_stage) + ")", cost::dp_bytes_per_rank(t, n),
                    e.time.dp_comm, e.step_time_s, false});
    for (int h : {4, 16}) {
        auto [b, s] = all_reduce(4 * P, h);
        add("local-sgd H=" + std::to_string(h), b, s);
    }
    for (int h : {50, 100}) {
        auto [b, s] = all_reduce(4 * P, h);
        add("diloco H=" + std::to_string(h), b, s);
    }
    const int ring = n > 2 ? 2 : 1;
    std::set<int> peers;  // rank 0's exponential-graph neighbours: +- 2^k mod n, deduplicated (as the engine's)
    for (int k = 1; k < n; k *= 2) peers.insert(k % n), peers.insert((n - k) % n);
    peers.erase(0);
    const int exp = int(peers.size());
    {
        auto [b, s] = neighbours(ring);
        add("gossip ring", b, s);
    }
    {
        auto [b, s] = neighbours(exp);
        add("gossip exp", b, s);
    }
    {
        auto [b, s] = neighbours(1);
        add("gossip one-peer-exp", b, s);
    }
    {
        auto [b, s] = all_gather(8 * 0.01 * P);
        add("topk 1% + EF", b, s, true);
    }
    {
        auto [b, s] = all_gather(P * (1 + 3) / 8 + 4 * P / 512);
        add("qsgd 8 levels (4 bits)", b, s, true);
    }
    {
        auto [b, s] = all_gather(P / 8 + 4);
        add("sign + EF", b, s, true);
    }
    {
        auto [b, s] = all_reduce(4 * powersgd_floats(m, p.tp, p.pp, 4, 4), 1);
        add("powersgd R=4 + EF", b, s, true);
    }
    {  // bench/dp_algos.sh's powersgd-r8-vocab-r1-bf16
        auto [b, s] = all_reduce(2 * powersgd_floats(m, p.tp, p.pp, 8, 1), 1);
        add("powersgd R=8, vocab R=1, bf16 + EF", b, s, true);
    }
    // ZeRO-1 with compressed gradients gathers the updated slices every step as the all-reduce does;
    // local SGD, DiLoCo and gossip need ZeRO-0 (and its memory)
    compressed.resize(rows.size(), false);
    for (size_t i = 1; i < rows.size(); i++) {
        if (p.zero_stage == 1 && compressed[i]) {
            const double param_bytes = p.precision == Precision::Fp32 ? 4 : 2;
            rows[i].bytes_per_step += cost::ring_bytes_per_rank(Collective::AllGather, param_bytes * P, n);
            rows[i].comm_s += cost::collective_time_s(Collective::AllGather, param_bytes * P, n, link);
            rows[i].step_s = others + rows[i].comm_s;
        }
        if (p.zero_stage >= 1 && !compressed[i]) rows[i].name += " (ZeRO-0)";
        if (p.zero_stage >= 2 && compressed[i]) rows[i].name += " (ZeRO-1)";
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
