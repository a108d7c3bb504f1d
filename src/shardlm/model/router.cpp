// model/router.cpp: an MoE layer's router (model/router.h).
#include "shardlm/model/router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "shardlm/core/check.h"

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

// The micro-batch's statistics (loads before the capacity), and with a capacity factor each expert's
// choices beyond its capacity dropped (those of the smallest router probability, the later token on a tie).
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
    double balance = 0;
    for (int e = 0; e < E; e++) balance += a.load[size_t(e)] / (double(N) * K) * (P[size_t(e)] / N);
    a.balance = balance * E, a.zsq = zsq / N, a.dropped = 0;
    std::fill(a.slot.data(), a.slot.data() + size_t(N) * K, 0);
    if (m.capacity_factor <= 0) return;
    const size_t cap = size_t(std::ceil(double(m.capacity_factor) * N * K / E));
    std::vector<std::vector<int>> chosen(static_cast<size_t>(E));
    for (int j = 0; j < N * K; j++) chosen[size_t(a.choice[size_t(j)])].push_back(j);
    for (int e = 0; e < E; e++) {
        std::vector<int>& c = chosen[size_t(e)];
        if (c.size() <= cap) continue;
        auto prob = [&](int j) { return a.probs[size_t(j / K) * E + e]; };
        std::stable_sort(c.begin(), c.end(), [&](int x, int y) { return prob(x) > prob(y); });
        for (size_t r = cap; r < c.size(); r++) a.slot[size_t(c[r])] = -1, a.gate[size_t(c[r])] = 0.0f;
        a.dropped += double(c.size() - cap);
    }
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
    // the balance loss's factor on each expert's probabilities: aux_coef E f_e / N
    std::vector<float> aux(static_cast<size_t>(E));
    for (int e = 0; e < E; e++)
        aux[size_t(e)] = w.objective_scale * m.aux_coef * E * float(a.load[size_t(e)] / (double(N) * K)) / N;
    const float zfactor = w.objective_scale * m.z_coef * 2.0f / N;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const size_t z0 = size_t(i) * E, c0 = size_t(i) * K;
        router_token_backward(m, E, K, a.logits.data() + z0, a.probs.data() + z0, a.lse[size_t(i)], a.choice.data() + c0,
                              dgate + c0, aux.data(), zfactor, dz + z0);
    }
}

}  // namespace shardlm::model::detail
