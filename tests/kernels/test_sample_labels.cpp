// Labels drawn from the model's softmax (kernels/sample_labels.h, Sophia's Gauss-Newton-Bartlett
// estimator): the draws follow the softmax (a chi-square-free bound per class), the vocabulary-parallel
// draw (each rank's share of the cumulative sum, claimed by one rank) gives the one-rank labels for any
// split, padding columns are never drawn, and the uniforms are those optim_torch.py computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shardlm/kernels/sample_labels.h"

namespace {

using namespace shardlm::kernels;

std::vector<float> logits_rows(int N, int Vp, int V, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> x(size_t(N) * size_t(Vp), 1e30f);  // padding: huge, never to be drawn
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) x[size_t(n) * Vp + v] = d(rng);
    return x;
}

// One row repeated N times with keys 0..N-1: each class drawn with its softmax probability, within five
// standard deviations of the binomial count.
TEST(SampleLabels, FollowTheSoftmax) {
    const int V = 37, Vp = 48, N = 40000;
    std::vector<float> row = logits_rows(1, Vp, V, 7, 1.5f), x;
    for (int n = 0; n < N; n++) x.insert(x.end(), row.begin(), row.end());
    std::vector<int> keys(N), labels(N);
    for (int n = 0; n < N; n++) keys[size_t(n)] = n;
    sample_labels(labels.data(), x.data(), keys.data(), N, V, Vp, label_sample_seed(1337, 3));
    double mx = *std::max_element(row.begin(), row.begin() + V), z = 0;
    for (int v = 0; v < V; v++) z += std::exp(double(row[size_t(v)]) - mx);
    std::vector<int> count(Vp, 0);
    for (int l : labels) count[size_t(l)]++;
    for (int v = 0; v < Vp; v++) {
        const double p = v < V ? std::exp(double(row[size_t(v)]) - mx) / z : 0.0;
        const double sd = std::sqrt(N * p * (1 - p));
        EXPECT_LE(std::fabs(count[size_t(v)] - N * p), 5 * sd + 1e-9) << "class " << v << " p " << p;
    }
    // another step's seed draws other labels
    std::vector<int> other(N);
    sample_labels(other.data(), x.data(), keys.data(), N, V, Vp, label_sample_seed(1337, 4));
    EXPECT_NE(other, labels);
}

// The vocabulary split over tp ranks (Megatron's: rank r holds columns [r Vt, (r + 1) Vt) of the padded
// vocabulary, the last ranks' tails padding) draws the labels one rank draws.
TEST(SampleLabels, VocabularyParallelDrawsTheOneRankLabels) {
    const int V = 101, N = 3000;
    for (int tp : {2, 3, 4}) {
        const int Vt = (V + tp * 16 - 1) / (tp * 16) * 16, Vp = Vt * tp;
        const std::vector<float> x = logits_rows(N, Vp, V, 11 + uint32_t(tp), 3.0f);
        std::vector<int> keys(N), one(N);
        for (int n = 0; n < N; n++) keys[size_t(n)] = 5 * n + 2;  // any keys
        const uint64_t seed = label_sample_seed(99, 17);
        sample_labels(one.data(), x.data(), keys.data(), N, V, Vp, seed);
        // each rank's logits, the global max (the all-reduce max), the gathered sums, the claims
        std::vector<std::vector<float>> part(size_t(tp), std::vector<float>(size_t(N) * Vt));
        std::vector<float> mx(N, -INFINITY), all(size_t(tp) * N), claims(N, 0.0f);
        for (int r = 0; r < tp; r++)
            for (int n = 0; n < N; n++)
                for (int j = 0; j < Vt; j++) {
                    const float v = x[size_t(n) * Vp + size_t(r) * Vt + j];
                    part[size_t(r)][size_t(n) * Vt + j] = v;
                    if (r * Vt + j < V) mx[size_t(n)] = std::max(mx[size_t(n)], v);
                }
        auto vreal = [&](int r) { return std::max(0, std::min(Vt, V - r * Vt)); };
        for (int r = 0; r < tp; r++) sample_local_sums(all.data() + size_t(r) * N, part[size_t(r)].data(), mx.data(), N, vreal(r), Vt);
        std::vector<int> claimed(N, 0);
        for (int r = 0; r < tp; r++) {
            std::vector<float> c(N);
            sample_claim(c.data(), part[size_t(r)].data(), mx.data(), all.data(), tp, r, keys.data(), N, vreal(r), Vt,
                         r * Vt, seed);
            for (int n = 0; n < N; n++) claims[size_t(n)] += c[size_t(n)], claimed[size_t(n)] += c[size_t(n)] != 0;
        }
        int differ = 0;
        for (int n = 0; n < N; n++) {
            ASSERT_EQ(claimed[size_t(n)], 1) << "tp " << tp << ": token " << n << " claimed by " << claimed[size_t(n)] << " ranks";
            const int label = int(claims[size_t(n)]) - 1;
            ASSERT_GE(label, 0);
            ASSERT_LT(label, V) << "a padding column drawn";
            differ += label != one[size_t(n)];
        }
        // equal unless a uniform falls within rounding of a class boundary (the split sums in another order)
        EXPECT_LE(differ, 1) << "tp " << tp;
    }
}

// The uniforms are the ones tools/reference/optim_torch.py computes (label_uniform there), and they
// look uniform: mean 1/2, variance 1/12.
TEST(SampleLabels, UniformsAreTheReferences) {
    EXPECT_EQ(mix64(0), 0u);
    EXPECT_EQ(mix64(1), 0x5692161d100b05e5ULL);  // splitmix64's finaliser of 1
    // printed by optim_torch.py: label_sample_seed(1337, 0), label_uniform(that, 5)
    EXPECT_EQ(label_sample_seed(1337, 0), 12904748435108286265ULL);
    EXPECT_EQ(label_uniform(label_sample_seed(1337, 0), 5), 0.44465019779640436);
    double s = 0, s2 = 0;
    const int n = 100000;
    const uint64_t seed = label_sample_seed(1337, 0);
    for (int k = 0; k < n; k++) {
        const double u = label_uniform(seed, k);
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        s += u, s2 += u * u;
    }
    EXPECT_NEAR(s / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
    EXPECT_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12, 2e-3);
}

}  // namespace
