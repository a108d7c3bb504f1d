// model/router.cpp: an MoE layer's router (model/router.h).
#include "shardlm/model/router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/model/context_parallel.h"

namespace shardlm::model::detail {

// The router's weight in fp32 (from the matrices' stored type).
const float* router_f32(const UnitContext& u, const MoeWeights& w, MoeScratch& s) {
    convert_to_f32(s.router.data(), w.router, u.prec.param, s.router.size());
    return s.router.data();
}

// Row i of x (act) in fp32: x itself, or converted into row.
const float* row_f32(const void* x, DType t, size_t i, int C, float* row) {
    if (t == DType::F32) return static_cast<const float*>(x) + i * size_t(C);
    convert_to_f32(row, at(x, t, i * size_t(C)), t, size_t(C));
    return row;
}

// One token's routing: its logits z (E), into p its probabilities (softmax) or scores (sigmoid), the
// log-sum-exp, and the top k by score (ties: the lower expert) with their gate weights.
static float route_token(const MoeConfig& m, int E, int K, float* z, float* p, int* choice, float* gate, const float* bias) {
    float mx = z[0];
    for (int e = 1; e < E; e++) mx = std::max(mx, z[e]);
    float sum = 0;
    for (int e = 0; e < E; e++) sum += (p[e] = std::exp(z[e] - mx));
    for (int e = 0; e < E; e++) p[e] = m.router == Router::Softmax ? p[e] / sum : 1.0f / (1.0f + std::exp(-z[e]));
    float total = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        auto score = [&](int e) { return bias ? p[e] + bias[e] : p[e]; };
        for (int e = 0; e < E; e++) {
            if (std::find(choice, choice + k, e) != choice + k) continue;
            if (best < 0 || score(e) > score(best)) best = e;
        }
        choice[k] = best, gate[k] = p[best], total += p[best];
    }
    if (m.norm_topk)
        for (int k = 0; k < K; k++) gate[k] /= total;
    return mx + std::log(sum);
}

void route(const UnitContext& u, const MoeDims& d, MoeActs& a, const float* wr, const float* bias, const void* x, int N) {
    const int C = u.cfg->n_embd, E = d.E, K = d.K;
    const DType t = u.prec.activation;
#pragma omp parallel
    {
        std::vector<float> row(static_cast<size_t>(C));
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const float* xr = row_f32(x, t, size_t(i), C, row.data());
            float* z = a.logits.data() + size_t(i) * E;
            for (int e = 0; e < E; e++) {
                const float* w = wr + size_t(e) * C;
                float s = 0;
                for (int c = 0; c < C; c++) s += xr[c] * w[c];
                z[e] = s;
            }
            a.lse[size_t(i)] = route_token(u.cfg->moe, E, K, z, a.probs.data() + size_t(i) * E,
                                           a.choice.data() + size_t(i) * K, a.gate.data() + size_t(i) * K, bias);
        }
    }
}

// The share of a token's probability P_i the balance loss reads: the softmax's, or the sigmoid scores
// normalised over the experts.
static void balance_probs(const MoeConfig& m, const float* p, int E, float* P) {
    float s = 1.0f;
    if (m.router == Router::Sigmoid) {
        s = 0;
        for (int e = 0; e < E; e++) s += p[e];
    }
    for (int e = 0; e < E; e++) P[e] = p[e] / s;
}

// Context parallelism spreads a micro-batch's tokens over the cp ranks: the loads, the summed probabilities
// and the squared log-sum-exps are summed over the group (gathered and added in rank order: the same bits on
// every rank).
static void sum_over_cp(ContextParallel& cp, std::vector<double>& load, std::vector<double>& P, double& zsq) {
    const size_t E = load.size(), n = 2 * E + 1;
    std::vector<double> mine(n), all(n * size_t(cp.size()));
    std::copy(load.begin(), load.end(), mine.begin());
    std::copy(P.begin(), P.end(), mine.begin() + long(E));
    mine[2 * E] = zsq;
    cp.all_gather_bytes(mine.data(), all.data(), n * sizeof(double));
    std::fill(load.begin(), load.end(), 0.0), std::fill(P.begin(), P.end(), 0.0), zsq = 0;
    for (int q = 0; q < cp.size(); q++) {
        const double* x = all.data() + size_t(q) * n;
        for (size_t e = 0; e < E; e++) load[e] += x[e], P[e] += x[E + e];
        zsq += x[2 * E];
    }
}

// One choice as the capacity ranks it: its expert, its router probability, and its place in the one-process
// order of the micro-batch's choices (token-major; under context parallelism the token's global position).
struct Ranked {
    int expert;
    float prob;
    long key;
    int rank, j;  // the cp rank that made it and its index there
};

static std::vector<Ranked> ranked_choices(const UnitContext& u, const MoeDims& d, const MoeActs& a, int N) {
    const int E = d.E, K = d.K, cp = u.cp_size();
    std::vector<Ranked> mine(static_cast<size_t>(N) * K);
    const int Tl = cp > 1 ? u.split->local() : N, T = cp > 1 ? u.split->T() : N;
    const int* pos = u.positions();
    for (int j = 0; j < N * K; j++) {
        const int i = j / K, e = a.choice[size_t(j)];
        const long t = pos ? pos[i % Tl] : i % Tl;
        mine[size_t(j)] = {e, a.probs[size_t(i) * E + e], (long(i / Tl) * T + t) * K + j % K, cp > 1 ? u.cp->rank() : 0, j};
    }
    if (cp == 1) return mine;
    std::vector<Ranked> all(mine.size() * size_t(cp));
    u.cp->all_gather_bytes(mine.data(), all.data(), mine.size() * sizeof(Ranked));
    return all;
}

// Each expert's choices beyond its capacity dropped (those of the smallest router probability, the later token
// on a tie), over the whole micro-batch (every cp rank's choices); this rank's marked (slot -1, gate 0). Returns
// how many were dropped in the micro-batch.
static double drop_over_capacity(const UnitContext& u, const MoeDims& d, MoeActs& a, int N, size_t cap) {
    std::vector<std::vector<Ranked>> chosen(static_cast<size_t>(d.E));
    for (const Ranked& c : ranked_choices(u, d, a, N)) chosen[size_t(c.expert)].push_back(c);
    const int me = u.cp_size() > 1 ? u.cp->rank() : 0;
    double dropped = 0;
    for (std::vector<Ranked>& c : chosen) {
        if (c.size() <= cap) continue;
        std::sort(c.begin(), c.end(), [](const Ranked& x, const Ranked& y) { return x.prob != y.prob ? x.prob > y.prob : x.key < y.key; });
        for (size_t r = cap; r < c.size(); r++)
            if (c[r].rank == me) a.slot[size_t(c[r].j)] = -1, a.gate[size_t(c[r].j)] = 0.0f;
        dropped += double(c.size() - cap);
    }
    return dropped;
}

// The micro-batch's statistics (loads before the capacity, over every cp rank's tokens), and with a capacity
// factor each expert's choices beyond its capacity dropped.
void count_and_drop(const UnitContext& u, const MoeDims& d, MoeActs& a, int N) {
    const MoeConfig& m = u.cfg->moe;
    const int E = d.E, K = d.K;
    std::fill(a.load.begin(), a.load.end(), 0.0);
    std::vector<double> P(static_cast<size_t>(E), 0.0);
    std::vector<float> Pt(static_cast<size_t>(E));
    double zsq = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < K; k++) a.load[size_t(a.choice[size_t(i) * K + k])] += 1;
        balance_probs(m, a.probs.data() + size_t(i) * E, E, Pt.data());
        for (int e = 0; e < E; e++) P[size_t(e)] += Pt[size_t(e)];
        zsq += double(a.lse[size_t(i)]) * a.lse[size_t(i)];
    }
    if (u.cp_size() > 1) sum_over_cp(*u.cp, a.load, P, zsq);
    const double Nt = double(N) * u.cp_size();
    double balance = 0;
    for (int e = 0; e < E; e++) balance += a.load[size_t(e)] / (Nt * K) * (P[size_t(e)] / Nt);
    a.balance = balance * E, a.zsq = zsq / Nt, a.dropped = 0;
    std::fill(a.slot.data(), a.slot.data() + size_t(N) * K, 0);
    if (m.capacity_factor <= 0) return;
    a.dropped = drop_over_capacity(u, d, a, N, size_t(std::ceil(double(m.capacity_factor) * Nt * K / E)));
}

// d(objective)/d(logits) of one token from its gate weights' gradients dg (K), the balance loss's
// factors on each expert's probability (coef E f_e / N, times the objective's scale) and the z-loss's.
static void router_token_backward(const MoeConfig& m, int E, int K, const float* z, const float* p, float lse, const int* choice,
                           const float* dg, const float* aux, float zfactor, float* dz) {
    float dp[256];
    std::fill(dp, dp + E, 0.0f);
    if (m.norm_topk) {
        float S = 0, gdg = 0;
        for (int k = 0; k < K; k++) S += p[choice[k]];
        for (int k = 0; k < K; k++) gdg += p[choice[k]] / S * dg[k];
        for (int k = 0; k < K; k++) dp[choice[k]] += (dg[k] - gdg) / S;
    } else {
        for (int k = 0; k < K; k++) dp[choice[k]] += dg[k];
    }
    if (m.router == Router::Softmax) {
        for (int e = 0; e < E; e++) dp[e] += aux[e];
        float pdp = 0;
        for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (int e = 0; e < E; e++) dz[e] = p[e] * (dp[e] - pdp);
    } else {
        float S = 0, cP = 0;
        for (int e = 0; e < E; e++) S += p[e];
        for (int e = 0; e < E; e++) cP += aux[e] * p[e] / S;
        for (int e = 0; e < E; e++) dz[e] = (dp[e] + (aux[e] - cP) / S) * p[e] * (1.0f - p[e]);
    }
    if (zfactor != 0)
        for (int e = 0; e < E; e++) dz[e] += zfactor * lse * std::exp(z[e] - lse);
}

void router_backward(const UnitContext& u, const MoeDims& d, const MoeWeights& w, const MoeActs& a, const float* dgate,
                     float* dz, int N) {
    const MoeConfig& m = u.cfg->moe;
    const int E = d.E, K = d.K;
    SHARDLM_CHECK(E <= 256, "moe: at most 256 experts (got ", E, ")");
    // the balance loss's factor on each expert's probabilities: aux_coef E f_e / N, over the micro-batch's N
    // tokens on every cp rank
    const double Nt = double(N) * u.cp_size();
    std::vector<float> aux(static_cast<size_t>(E));
    for (int e = 0; e < E; e++)
        aux[size_t(e)] = w.objective_scale * m.aux_coef * E * float(a.load[size_t(e)] / (Nt * K)) / float(Nt);
    const float zfactor = w.objective_scale * m.z_coef * 2.0f / float(Nt);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const size_t z0 = size_t(i) * E, c0 = size_t(i) * K;
        router_token_backward(m, E, K, a.logits.data() + z0, a.probs.data() + z0, a.lse[size_t(i)], a.choice.data() + c0,
                              dgate + c0, aux.data(), zfactor, dz + z0);
    }
}

}  // namespace shardlm::model::detail
