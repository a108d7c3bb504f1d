// The gossip topologies of --dp-algo gossip (parallel/dp_algo.h): every mixing matrix is doubly
// stochastic (symmetric where the graph is undirected: Metropolis-Hastings), each rank's view of a
// round agrees with its peers' (whom it sends to receive from it), repeated mixing shrinks the
// consensus error geometrically at the rate of the matrix's second singular value, one-peer
// exponential mixing averages exactly in log2(n) rounds on a power of two, and D-PSGD on quadratics
// f_i(x) = |x - b_i|^2 / 2 drives the average of the iterates to the optimum geometrically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shardlm/parallel/dp_algo.h"

namespace {

using namespace shardlm::parallel;
using shardlm::setting_text;
using Mat = std::vector<double>;

constexpr Topology kAll[] = {Topology::Ring, Topology::Torus, Topology::Exp, Topology::OnePeerExp};

std::vector<double> mix(const Mat& w, int n, const std::vector<double>& x, int dim) {
    std::vector<double> y(x.size(), 0.0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int d = 0; d < dim; d++) y[size_t(i) * dim + d] += w[size_t(i) * n + j] * x[size_t(j) * dim + d];
    return y;
}

// sum_i |x_i - mean x|^2
double consensus_sq(const std::vector<double>& x, int n, int dim) {
    double s = 0;
    for (int d = 0; d < dim; d++) {
        double m = 0;
        for (int i = 0; i < n; i++) m += x[size_t(i) * dim + d] / n;
        for (int i = 0; i < n; i++) s += (x[size_t(i) * dim + d] - m) * (x[size_t(i) * dim + d] - m);
    }
    return s;
}

// The second largest singular value of W (the largest on the space orthogonal to the ones vector) by
// power iteration on W^T W restricted to that space.
double second_singular(const Mat& w, int n) {
    std::vector<double> v(static_cast<size_t>(n));
    std::mt19937 rng(5);
    std::normal_distribution<double> g;
    for (double& x : v) x = g(rng);
    double s = 0;
    for (int it = 0; it < 2000; it++) {
        double m = 0;
        for (double x : v) m += x / n;
        for (double& x : v) x -= m;
        std::vector<double> a = mix(w, n, v, 1), b(static_cast<size_t>(n), 0.0);  // W^T (W v)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) b[size_t(j)] += w[size_t(i) * n + j] * a[size_t(i)];
        double norm = 0;
        for (double x : b) norm += x * x;
        norm = std::sqrt(norm);
        if (norm == 0) return 0;
        s = std::sqrt(norm);
        for (size_t i = 0; i < v.size(); i++) v[i] = b[i] / norm;
    }
    return s;
}

TEST(GossipMixing, DoublyStochasticAndConsistentForEveryTopology) {
    for (Topology t : kAll)
        for (int n : {2, 3, 4, 5, 6, 8, 9, 12, 16}) {
            for (int step = 0; step < 5; step++) {
                const Mat w = mixing_matrix(t, n, step);
                for (int i = 0; i < n; i++) {
                    double row = 0, col = 0;
                    for (int j = 0; j < n; j++) {
                        row += w[size_t(i) * n + j], col += w[size_t(j) * n + i];
                        EXPECT_GE(w[size_t(i) * n + j], 0.0);
                        const bool undirected = t != Topology::OnePeerExp || (n & (n - 1)) == 0;
                        if (undirected) {
                            EXPECT_NEAR(w[size_t(i) * n + j], w[size_t(j) * n + i], 1e-15) << n << " " << i << " " << j;
                        }
                    }
                    EXPECT_NEAR(row, 1.0, 1e-12) << setting_text(t) << " n " << n << " row " << i;
                    EXPECT_NEAR(col, 1.0, 1e-12) << setting_text(t) << " n " << n << " column " << i;
                }
                // whom a rank sends to receives from it, in the same round
                for (int i = 0; i < n; i++)
                    for (int j : gossip_mixing(t, n, i, step).send_to) {
                        const auto from = gossip_mixing(t, n, j, step).recv_from;
                        EXPECT_NE(std::find(from.begin(), from.end(), i), from.end())
                            << setting_text(t) << " n " << n << ": " << i << " sends to " << j << " who does not receive";
                    }
            }
        }
    // Metropolis-Hastings on the ring: 1/3 to each neighbour and to itself
    const Mat ring = mixing_matrix(Topology::Ring, 5, 0);
    EXPECT_NEAR(ring[0], 1.0 / 3, 1e-15);
    EXPECT_NEAR(ring[1], 1.0 / 3, 1e-15);
    EXPECT_NEAR(ring[4], 1.0 / 3, 1e-15);
    EXPECT_EQ(ring[2], 0.0);
    EXPECT_EQ(torus_rows(12), 3);
    EXPECT_EQ(gossip_mixing(Topology::Torus, 12, 5, 0).send_to.size(), 4u);
}

// Mixing alone: |x_t - mean|^2 <= sigma_2^(2t) |x_0 - mean|^2, and sigma_2 < 1 (a connected graph).
TEST(GossipMixing, ConsensusErrorShrinksGeometrically) {
    for (Topology t : {Topology::Ring, Topology::Torus, Topology::Exp})
        for (int n : {4, 6, 8, 9}) {
            const Mat w = mixing_matrix(t, n, 0);
            const double s2 = second_singular(w, n);
            EXPECT_LT(s2, 1.0 - 1e-3) << setting_text(t) << " n " << n;
            std::mt19937 rng(static_cast<uint32_t>(n));
            std::normal_distribution<double> g;
            const int dim = 3;
            std::vector<double> x(size_t(n) * dim);
            for (double& v : x) v = g(rng);
            const double e0 = consensus_sq(x, n, dim);
            for (int it = 1; it <= 30; it++) {
                x = mix(w, n, x, dim);
                EXPECT_LE(consensus_sq(x, n, dim), std::pow(s2, 2 * it) * e0 * (1 + 1e-6) + 1e-24 * e0)
                    << setting_text(t) << " n " << n << " round " << it;
            }
            EXPECT_LT(consensus_sq(x, n, dim), 0.5 * e0);
        }
}

// One peer per round at distance 2^(t mod log2 n): the hypercube's rounds average exactly.
TEST(GossipMixing, OnePeerExponentialAveragesExactlyInLogRounds) {
    for (int n : {2, 4, 8, 16}) {
        std::vector<double> x(static_cast<size_t>(n));
        for (int i = 0; i < n; i++) x[size_t(i)] = double(i * i) - 3.0;
        const double e0 = consensus_sq(x, n, 1);
        int rounds = 0;
        while ((1 << rounds) < n) x = mix(mixing_matrix(Topology::OnePeerExp, n, rounds), n, x, 1), rounds++;
        EXPECT_LE(consensus_sq(x, n, 1), 1e-24 * e0) << "n " << n;
    }
    // not a power of two: every rank still sends to one and receives from one, and the error shrinks
    std::vector<double> x = {1, -2, 3, 0.5, 7, -1};
    const double e0 = consensus_sq(x, 6, 1);
    for (int t = 0; t < 30; t++) x = mix(mixing_matrix(Topology::OnePeerExp, 6, t), 6, x, 1);
    EXPECT_LT(consensus_sq(x, 6, 1), 1e-6 * e0);
}

// D-PSGD (Lian et al. 2017) on f_i(x) = |x - b_i|^2 / 2: x_i <- sum_j W_ij x_j - g (x_i - b_i). The
// average iterate obeys xbar <- xbar - g (xbar - bbar) exactly (W doubly stochastic), so it reaches
// the optimum bbar geometrically at rate 1 - g; the consensus error settles at a bounded level.
TEST(GossipMixing, DecentralisedSgdOnQuadratics) {
    const int n = 8, dim = 4;
    const double lr = 0.1;
    for (Topology t : kAll) {
        std::mt19937 rng(7);
        std::normal_distribution<double> g;
        std::vector<double> b(size_t(n) * dim), x(size_t(n) * dim, 0.0), opt(size_t(dim), 0.0);
        for (double& v : b) v = g(rng);
        for (int i = 0; i < n; i++)
            for (int d = 0; d < dim; d++) opt[size_t(d)] += b[size_t(i) * dim + d] / n;
        auto mean_err = [&] {
            double e = 0;
            for (int d = 0; d < dim; d++) {
                double m = 0;
                for (int i = 0; i < n; i++) m += x[size_t(i) * dim + d] / n;
                e += (m - opt[size_t(d)]) * (m - opt[size_t(d)]);
            }
            return std::sqrt(e);
        };
        const double e0 = mean_err();
        for (int it = 1; it <= 200; it++) {
            std::vector<double> y = mix(mixing_matrix(t, n, it), n, x, dim);
            for (size_t k = 0; k < y.size(); k++) y[k] -= lr * (x[k] - b[k]);
            x = y;
            if (it % 20 == 0) {
                EXPECT_LE(mean_err(), std::pow(1 - lr, it) * e0 * (1 + 1e-6) + 1e-12) << setting_text(t);
            }
        }
        EXPECT_LT(mean_err(), 1e-8) << setting_text(t);
        EXPECT_LT(consensus_sq(x, n, dim), consensus_sq(b, n, dim)) << setting_text(t);
    }
}

}  // namespace
