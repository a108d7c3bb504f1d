// The gradient compressors (parallel/compress.h), each against its definition: QSGD and RandK are
// unbiased (the mean of many compressions is x to within 5 standard errors of the known variance),
// QSGD rounds the course notes' example with the right frequencies and packs its codes as documented,
// Top-k selects exactly what a sort selects and is contractive, the sign compressors aggregate as their
// formulas, every aggregate is the rank-order mean of the ranks' decoded vectors to the bit, PowerSGD
// is exact on gradients of rank <= R (1 rank and 3 thread-ranks) and converges on a full-rank one
// (warm start = power iteration), and parse_compress accepts exactly the documented forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/parallel/compress.h"
#include "../thread_meeting.h"

namespace {

using namespace shardlm;
using namespace shardlm::parallel;

std::vector<float> random_vector(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    return x;
}

struct Encoded {
    std::vector<unsigned char> msg;
    std::vector<float> cx;
};
Encoded encode(const CompressSpec& s, const std::vector<float>& x, uint64_t seed) {
    Encoded e{std::vector<unsigned char>(message_bytes(s, x.size())), std::vector<float>(x.size())};
    compress(s, x.data(), x.size(), seed, e.msg.data(), e.cx.data());
    return e;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// ---- QSGD ----------------------------------------------------------------------------------------

// The mean of 4000 compressions (seeds 0..3999) is x: per element within 5 standard errors of the
// exact variance (norm/(S-1))^2 f(1-f), f the fractional part of |x_i|/norm (S-1).
TEST(QsgdTest, UnbiasedOverSeeds) {
    const CompressSpec s = parse_compress("qsgd:4:128");
    const size_t n = 300;  // buckets of 128, 128, 44
    const std::vector<float> x = random_vector(n, 1);
    const int trials = 4000;
    std::vector<double> sum(n, 0.0);
    for (int t = 0; t < trials; t++) {
        const Encoded e = encode(s, x, uint64_t(t));
        for (size_t i = 0; i < n; i++) sum[i] += e.cx[i];
    }
    for (size_t b0 = 0; b0 < n; b0 += s.bucket) {
        const size_t b1 = std::min(n, b0 + s.bucket);
        double ss = 0;
        for (size_t i = b0; i < b1; i++) ss += double(x[i]) * x[i];
        const double norm = float(std::sqrt(ss)), step = norm / (s.levels - 1);
        for (size_t i = b0; i < b1; i++) {
            const double r = std::fabs(x[i]) / step, f = r - std::floor(r);
            const double se = step * std::sqrt(f * (1 - f) / trials);
            EXPECT_NEAR(sum[i] / trials, x[i], 5 * se + 1e-6) << "element " << i;
        }
    }
}

// The course notes: levels {0, .25, .5, .75, 1} (S = 5); x = (0.6, 0.8) has norm 1, so 0.6 becomes
// 0.5 w.p. 0.6 and 0.75 w.p. 0.4, and 0.8 becomes 0.75 w.p. 0.8 and 1 w.p. 0.2.
TEST(QsgdTest, CourseNotesFiveLevels) {
    const CompressSpec s = parse_compress("qsgd:5");
    const std::vector<float> x = {0.6f, 0.8f};
    const int trials = 20000;
    int low0 = 0, low1 = 0;
    for (int t = 0; t < trials; t++) {
        const Encoded e = encode(s, x, uint64_t(1000 + t));
        ASSERT_TRUE(e.cx[0] == 0.5f || e.cx[0] == 0.75f) << e.cx[0];
        ASSERT_TRUE(e.cx[1] == 0.75f || e.cx[1] == 1.0f) << e.cx[1];
        low0 += e.cx[0] == 0.5f;
        low1 += e.cx[1] == 0.75f;
    }
    EXPECT_NEAR(double(low0) / trials, 0.6, 5 * std::sqrt(0.6 * 0.4 / trials));
    EXPECT_NEAR(double(low1) / trials, 0.8, 5 * std::sqrt(0.8 * 0.2 / trials));
}

// The message is the documented layout: the buckets' fp32 norms, then code = level << 1 | negative at
// 1 + ceil(log2 S) bits each, LSB first (packed here bit by bit, independently of the library's packer);
// each level is floor or ceil of |x_i|/norm (S-1), and the decoded value is sign norm level/(S-1).
TEST(QsgdTest, PackingRoundTrip) {
    for (int S : {2, 5, 8, 16, 256})
        for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(1025)})
            for (size_t bucket : {size_t(512), size_t(7), size_t(1)}) {
                CompressSpec s = parse_compress("qsgd:" + std::to_string(S));
                s.bucket = bucket;
                const int bits = 1 + int(std::ceil(std::log2(double(S))));
                const size_t nb = (n + bucket - 1) / bucket;
                std::vector<float> x = random_vector(n, 7 * n + size_t(S));
                if (n > 3) x[3] = 0;  // a zero codes level 0
                SCOPED_TRACE(::testing::Message() << "S " << S << " n " << n << " bucket " << bucket);
                const Encoded e = encode(s, x, 42);
                ASSERT_EQ(e.msg.size(), 4 * nb + (n * size_t(bits) + 7) / 8);
                std::vector<unsigned char> want(e.msg.size(), 0);
                for (size_t b = 0; b < nb; b++) {
                    const size_t i0 = b * bucket, i1 = std::min(n, i0 + bucket);
                    double ss = 0;
                    for (size_t i = i0; i < i1; i++) ss += double(x[i]) * x[i];
                    const float norm = float(std::sqrt(ss));
                    std::memcpy(want.data() + 4 * b, &norm, 4);
                    for (size_t i = i0; i < i1; i++) {
                        const double r = norm > 0 ? std::fabs(double(x[i])) / norm * (S - 1) : 0.0;
                        const double l = norm > 0 ? std::round(std::fabs(double(e.cx[i])) / norm * (S - 1)) : 0.0;
                        ASSERT_TRUE(l == std::floor(r) || l == std::ceil(r)) << "element " << i << ": level " << l;
                        ASSERT_EQ(e.cx[i], (x[i] < 0 && l > 0 ? -1.0f : 1.0f) * float(double(norm) * l / (S - 1)));
                        const uint32_t code = uint32_t(l) << 1 | uint32_t(x[i] < 0 && l > 0);
                        for (int t = 0; t < bits; t++)
                            if (code >> t & 1) want[4 * nb + (i * bits + t) / 8] |= uint8_t(1u << ((i * bits + t) % 8));
                    }
                }
                ASSERT_EQ(e.msg, want);
                std::vector<float> dec(n);
                decompress(s, e.msg.data(), n, 0, dec.data());
                ASSERT_TRUE(same_bits(dec, e.cx));
                ASSERT_EQ(encode(s, x, 42).msg, e.msg);  // deterministic
            }
}

// ---- Top-k ---------------------------------------------------------------------------------------

TEST(TopKTest, ExactSelectionAndContraction) {
    for (size_t n : {size_t(1), size_t(2), size_t(10), size_t(1000), size_t(4097)})
        for (double f : {0.001, 0.01, 0.1, 0.5, 1.0})
            for (bool ties : {false, true}) {
                std::vector<float> x = random_vector(n, n + size_t(f * 1000));
                if (ties)  // magnitudes from {0, 1, 2}: the lower index wins a tie
                    for (float& v : x) v = std::round(std::clamp(v, -2.0f, 2.0f));
                CompressSpec s;
                s.kind = CompressKind::TopK;
                s.fraction = f;
                const size_t k = std::max<size_t>(1, size_t(std::llround(f * double(n))));
                SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " ties " << ties);
                ASSERT_EQ(compress_k(s, n), k);
                const Encoded e = encode(s, x, 0);
                ASSERT_EQ(e.msg.size(), 8 * k);
                std::vector<uint32_t> order(n);
                std::iota(order.begin(), order.end(), 0u);
                std::stable_sort(order.begin(), order.end(),
                                 [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
                order.resize(k);
                std::sort(order.begin(), order.end());
                std::vector<uint32_t> got(k);
                std::memcpy(got.data(), e.msg.data(), 4 * k);
                ASSERT_EQ(got, order);
                double err = 0, norm2 = 0;
                std::vector<float> want(n, 0.0f);
                for (uint32_t i : order) want[i] = x[i];
                for (size_t i = 0; i < n; i++) {
                    err += (double(e.cx[i]) - x[i]) * (double(e.cx[i]) - x[i]);
                    norm2 += double(x[i]) * x[i];
                }
                ASSERT_TRUE(same_bits(e.cx, want));
                EXPECT_LE(err, (1.0 - double(k) / double(n)) * norm2 * (1 + 1e-12));
            }
}

// ---- Rand-k --------------------------------------------------------------------------------------

TEST(RandKTest, UnbiasedSameIndicesForSameSeedDistinct) {
    const CompressSpec s = parse_compress("randk:0.1");
    const size_t n = 50, k = 5;
    ASSERT_EQ(compress_k(s, n), k);
    ASSERT_EQ(message_bytes(s, n), 4 * k);
    std::vector<float> x = random_vector(n, 3), y = random_vector(n, 4);
    const int trials = 20000;
    std::vector<double> sum(n, 0.0);
    for (int t = 0; t < trials; t++) {
        const Encoded e = encode(s, x, uint64_t(t));
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            sum[i] += e.cx[i];
            if (e.cx[i] != 0) {
                kept++;
                ASSERT_EQ(e.cx[i], float(double(x[i]) * double(n) / double(k)));  // scaled by n/k
            }
        }
        ASSERT_EQ(kept, k) << "seed " << t;  // k distinct indices (x has no zeros)
    }
    // variance of x_i (n/k) [i chosen]: x_i^2 (n/k - 1)
    for (size_t i = 0; i < n; i++)
        EXPECT_NEAR(sum[i] / trials, x[i], 5 * std::fabs(x[i]) * std::sqrt((double(n) / k - 1) / trials)) << i;
    // the indices depend on the seed only: the same for another vector, and for a second call
    size_t differ = 0;
    for (uint64_t seed = 0; seed < 20; seed++) {
        const Encoded a = encode(s, x, seed), b = encode(s, y, seed), c = encode(s, x, seed + 100);
        EXPECT_EQ(encode(s, x, seed).msg, a.msg);
        for (size_t i = 0; i < n; i++) EXPECT_EQ(a.cx[i] != 0, b.cx[i] != 0) << "seed " << seed << " element " << i;
        bool same = true;
        for (size_t i = 0; i < n; i++) same = same && ((a.cx[i] != 0) == (c.cx[i] != 0));
        differ += !same;
    }
    EXPECT_GE(differ, 15u);  // other seeds pick other indices
}

// ---- Sign and majority vote ----------------------------------------------------------------------

TEST(SignTest, AggregateMatchesFormula) {
    const size_t n = 37;  // not a multiple of 8
    for (int ranks : {2, 3})
        for (const char* text : {"sign", "sign:vote"}) {
            const CompressSpec s = parse_compress(text);
            ASSERT_EQ(message_bytes(s, n), 4 + 5u);
            std::vector<unsigned char> msgs;
            std::vector<float> scale(ranks);
            std::vector<std::vector<float>> xs;
            for (int r = 0; r < ranks; r++) {
                std::vector<float> x = random_vector(n, 10 + uint64_t(r));
                x[5] = 0;  // sign(0) = +1
                double l1 = 0;
                for (float v : x) l1 += std::fabs(double(v));
                scale[r] = float(l1 / n);
                const Encoded e = encode(s, x, 0);
                for (size_t i = 0; i < n; i++) ASSERT_EQ(e.cx[i], x[i] < 0 ? -scale[r] : scale[r]);
                msgs.insert(msgs.end(), e.msg.begin(), e.msg.end());
                xs.push_back(x);
            }
            std::vector<float> out(n), want(n);
            aggregate(s, msgs.data(), ranks, n, nullptr, out.data());
            float mean_scale = 0;
            for (int r = 0; r < ranks; r++) mean_scale += scale[r];
            mean_scale /= float(ranks);
            int ties = 0;
            for (size_t i = 0; i < n; i++) {
                float acc = 0;
                int vote = 0;
                for (int r = 0; r < ranks; r++) {
                    acc += xs[r][i] < 0 ? -scale[r] : scale[r];
                    vote += xs[r][i] < 0 ? -1 : 1;
                }
                ties += vote == 0;
                want[i] = s.kind == CompressKind::Sign ? acc / float(ranks)
                                                       : (vote > 0 ? mean_scale : vote < 0 ? -mean_scale : 0.0f);
            }
            if (ranks == 2) {
                EXPECT_GT(ties, 0);  // the tie rule is exercised
            }
            EXPECT_TRUE(same_bits(out, want)) << text << " over " << ranks << " ranks";
        }
}

// ---- Aggregates ----------------------------------------------------------------------------------

// out = (sum in rank order of each rank's own cx, from 0) / ranks, to the bit.
TEST(CompressTest, AggregateIsRankOrderMean) {
    const size_t n = 1000;
    const int ranks = 3;  // not a power of 2: dividing by 3 and multiplying by 1/3 differ
    for (const char* text : {"topk:0.05", "qsgd:4:64", "qsgd:256", "randk:0.2", "sign", "none"}) {
        const CompressSpec s = parse_compress(text);
        std::vector<unsigned char> msgs;
        std::vector<uint64_t> seeds;
        std::vector<float> want(n, 0.0f);
        for (int r = 0; r < ranks; r++) {
            seeds.push_back(977 * uint64_t(r) + 5);
            const Encoded e = encode(s, random_vector(n, 20 + uint64_t(r)), seeds.back());
            ASSERT_EQ(e.msg.size(), message_bytes(s, n));
            msgs.insert(msgs.end(), e.msg.begin(), e.msg.end());
            for (size_t i = 0; i < n; i++) want[i] += e.cx[i];
        }
        for (float& w : want) w /= float(ranks);
        std::vector<float> out(n);
        aggregate(s, msgs.data(), ranks, n, seeds.data(), out.data());
        EXPECT_TRUE(same_bits(out, want)) << text;
    }
}

TEST(CompressTest, PowerSgdIsNotElementwise) {
    EXPECT_THROW(message_bytes(parse_compress("powersgd:2"), 10), Error);
}

// ---- PowerSGD ------------------------------------------------------------------------------------

// A flat buffer of 5 loose elements, a [20, 12] matrix, 3 loose, an [8, 30] matrix, 4 loose.
const std::vector<PowerSgdMatrix> kMatrices = {{5, 20, 12}, {248, 8, 30}};
constexpr size_t kN = 5 + 240 + 3 + 240 + 4;

// Fills matrix m of g with A B^T, A [rows, rank] (from seed_a), B [cols, rank] (from seed_b).
void fill_low_rank(std::vector<float>& g, const PowerSgdMatrix& m, size_t rank, uint64_t seed_a, uint64_t seed_b) {
    const std::vector<float> A = random_vector(m.rows * rank, seed_a), B = random_vector(m.cols * rank, seed_b);
    for (size_t a = 0; a < m.rows; a++)
        for (size_t c = 0; c < m.cols; c++) {
            double s = 0;
            for (size_t j = 0; j < rank; j++) s += double(A[a * rank + j]) * B[c * rank + j];
            g[m.offset + a * m.cols + c] = float(s);
        }
}

// max |out - want| over a matrix, relative to max |want|
double matrix_error(const std::vector<float>& out, const std::vector<float>& want, const PowerSgdMatrix& m) {
    double e = 0, w = 0;
    for (size_t i = m.offset; i < m.offset + m.rows * m.cols; i++) {
        e = std::max(e, std::fabs(double(out[i]) - want[i]));
        w = std::max(w, std::fabs(double(want[i])));
    }
    return e / w;
}

bool is_loose(size_t i) {
    for (const PowerSgdMatrix& m : kMatrices)
        if (i >= m.offset && i < m.offset + m.rows * m.cols) return false;
    return true;
}

// R = 3; the first matrix has rank 2 (< R: Gram-Schmidt meets a dependent column), the second rank 3.
TEST(PowerSgdTest, ExactOnLowRankOneRank) {
    std::vector<float> g = random_vector(kN, 30);
    fill_low_rank(g, kMatrices[0], 2, 31, 32);
    fill_low_rank(g, kMatrices[1], 3, 33, 34);
    PowerSgd p(3, kMatrices, kN, 7);
    // P: 20x3 + 8x3, Q: 12x3 + 30x3, loose: 12
    ASSERT_EQ(p.floats_per_round(), 60u + 24 + 36 + 90 + 12);
    ASSERT_EQ(p.q_state().size(), 36u + 90);
    size_t handed = 0, calls = 0;
    std::vector<float> out = g;  // in place: out aliases g
    for (int round = 0; round < 2; round++) {
        p.reduce(out.data(), out.data(), 1, [&](float*, size_t count) { handed += count, calls++; });
        for (const PowerSgdMatrix& m : kMatrices) EXPECT_LT(matrix_error(out, g, m), 1e-5) << "round " << round;
        for (size_t i = 0; i < kN; i++)
            if (is_loose(i)) {
                EXPECT_EQ(out[i], g[i]) << i;
            }
        out = g;
    }
    EXPECT_EQ(handed, 2 * p.floats_per_round());
    EXPECT_EQ(calls, 4u);
}

// A matrix's own rank (--compress-embedding powersgd:R) overrides the class's: the factors take its
// columns, and it is exact on a gradient of that rank while a rank-1 matrix beside it is not.
TEST(PowerSgdTest, AMatrixOwnRankOverridesTheClassRank) {
    std::vector<PowerSgdMatrix> mats = kMatrices;
    mats[1].rank = 3;  // the class's rank 1 for the first, 3 for the second
    std::vector<float> g = random_vector(kN, 80);
    fill_low_rank(g, mats[0], 3, 81, 82);
    fill_low_rank(g, mats[1], 3, 83, 84);
    PowerSgd p(1, mats, kN, 13);
    // P: 20x1 + 8x3, Q: 12x1 + 30x3, loose: 12
    ASSERT_EQ(p.floats_per_round(), 20u + 24 + 12 + 90 + 12);
    ASSERT_EQ(p.q_state().size(), 12u + 90);
    std::vector<float> out(kN);
    for (int round = 0; round < 2; round++) p.reduce(g.data(), out.data(), 1, [](float*, size_t) {});
    EXPECT_LT(matrix_error(out, g, mats[1]), 1e-5);
    EXPECT_GT(matrix_error(out, g, mats[0]), 1e-2);  // rank 3 through a rank-1 projection
}

// A zero matrix (P = 0: every column replaced by a unit vector) decodes to 0 without NaN, and PowerSGD
// recovers: the next round starts from Q = 0 (not exact), the one after is exact again.
TEST(PowerSgdTest, ZeroGradientKeepsRank) {
    std::vector<float> g(kN, 0.0f), out(kN);
    PowerSgd p(3, kMatrices, kN, 9);
    p.reduce(g.data(), out.data(), 1, [](float*, size_t) {});
    for (size_t i = 0; i < kN; i++) ASSERT_EQ(out[i], 0.0f) << i;
    g = random_vector(kN, 35);
    fill_low_rank(g, kMatrices[0], 3, 36, 37);
    fill_low_rank(g, kMatrices[1], 2, 38, 39);
    for (int round = 0; round < 2; round++) p.reduce(g.data(), out.data(), 1, [](float*, size_t) {});
    for (const PowerSgdMatrix& m : kMatrices) EXPECT_LT(matrix_error(out, g, m), 1e-5);
    for (float q : p.q_state()) ASSERT_TRUE(std::isfinite(q));
}

// Three thread-ranks whose all_reduce_sum meets in memory (tests/thread_meeting.h, fp32 in rank order):
// rank r's matrices are A B_r^T with A shared, so their mean has rank <= R and PowerSGD returns it.
TEST(PowerSgdTest, ExactOnLowRankThreeRanks) {
    const int ranks = 3;
    std::vector<std::vector<float>> g(ranks), out(ranks), q(ranks);
    for (int r = 0; r < ranks; r++) {
        g[r] = random_vector(kN, 40 + uint64_t(r));
        fill_low_rank(g[r], kMatrices[0], 1, 50, 60 + uint64_t(r));
        fill_low_rank(g[r], kMatrices[1], 3, 51, 70 + uint64_t(r));
        out[r].resize(kN);
    }
    std::vector<float> mean(kN);
    for (size_t i = 0; i < kN; i++) mean[i] = (g[0][i] + g[1][i] + g[2][i]) / 3.0f;
    test::Meeting meet(ranks);
    test::run_ranks(ranks, [&](int r) {
        PowerSgd p(3, kMatrices, kN, 11);
        size_t handed = 0;
        auto sum = [&](float* data, size_t count) {
            const std::vector<float> s = meet.sum(data, 0, count, DType::F32, r);
            std::copy(s.begin(), s.end(), data);
            handed += count;
        };
        p.reduce(g[r].data(), out[r].data(), ranks, sum);
        q[r] = p.q_state();
        EXPECT_EQ(handed, p.floats_per_round());
    });
    for (int r = 0; r < ranks; r++) {
        for (const PowerSgdMatrix& m : kMatrices) EXPECT_LT(matrix_error(out[r], mean, m), 1e-5) << "rank " << r;
        for (size_t i = 0; i < kN; i++)
            if (is_loose(i)) {
                EXPECT_EQ(out[r][i], mean[i]) << "rank " << r << " element " << i;
            }
        EXPECT_TRUE(same_bits(out[r], out[0])) << "rank " << r;  // every rank decodes the same bits
        EXPECT_TRUE(same_bits(q[r], q[0])) << "rank " << r;
    }
}

// A full-rank [24, 16] matrix U diag(s) V^T with s_k = 2^-k: repeated rounds on the same gradient
// are subspace iteration, so the error ||out - M||_F decreases toward the best rank-2 error
// sqrt(sum_{k >= 2} s_k^2) (Eckart-Young), at the rate s_3 / s_2 = 1/2 a round.
TEST(PowerSgdTest, WarmStartConverges) {
    const size_t rows = 24, cols = 16;
    auto orthonormal = [](size_t dim, size_t count, uint64_t seed) {  // columns, Gram-Schmidt twice
        std::vector<double> U(dim * count);
        const std::vector<float> x = random_vector(dim * count, seed);
        for (size_t j = 0; j < count; j++) {
            std::vector<double> v(dim);
            for (size_t a = 0; a < dim; a++) v[a] = x[a * count + j];
            for (int pass = 0; pass < 2; pass++)
                for (size_t c = 0; c < j; c++) {
                    double d = 0;
                    for (size_t a = 0; a < dim; a++) d += U[a * count + c] * v[a];
                    for (size_t a = 0; a < dim; a++) v[a] -= d * U[a * count + c];
                }
            double nv = 0;
            for (double e : v) nv += e * e;
            for (size_t a = 0; a < dim; a++) U[a * count + j] = v[a] / std::sqrt(nv);
        }
        return U;
    };
    const std::vector<double> U = orthonormal(rows, cols, 80), V = orthonormal(cols, cols, 81);
    std::vector<float> M(rows * cols);
    double best2 = 0;
    for (size_t k = 0; k < cols; k++) best2 += k >= 2 ? std::ldexp(1.0, -2 * int(k)) : 0.0;
    for (size_t a = 0; a < rows; a++)
        for (size_t c = 0; c < cols; c++) {
            double s = 0;
            for (size_t k = 0; k < cols; k++) s += U[a * cols + k] * std::ldexp(1.0, -int(k)) * V[c * cols + k];
            M[a * cols + c] = float(s);
        }
    PowerSgd p(2, {{0, rows, cols}}, rows * cols, 3);
    std::vector<float> out(rows * cols);
    std::vector<double> err;
    for (int round = 0; round < 30; round++) {
        p.reduce(M.data(), out.data(), 1, [](float*, size_t) {});
        double e = 0;
        for (size_t i = 0; i < M.size(); i++) e += (double(out[i]) - M[i]) * (double(out[i]) - M[i]);
        err.push_back(std::sqrt(e));
        if (round > 0) {
            EXPECT_LE(err[round], err[round - 1] + 1e-6) << "round " << round;
        }
    }
    const double best = std::sqrt(best2);
    EXPECT_GT(err[0], 1.05 * best);  // a random start is not yet the best
    EXPECT_LT(err[3], err[0]);
    EXPECT_LT(err.back(), 1.001 * best);
}

// ---- Parsing -------------------------------------------------------------------------------------

TEST(CompressParseTest, AcceptsTheFormsAndRoundTrips) {
    const CompressSpec t = parse_compress("topk:0.01");
    EXPECT_EQ(t.kind, CompressKind::TopK);
    EXPECT_EQ(t.fraction, 0.01);
    const CompressSpec q = parse_compress("qsgd:16");
    EXPECT_EQ(q.kind, CompressKind::Qsgd);
    EXPECT_EQ(q.levels, 16);
    EXPECT_EQ(q.bucket, 512u);
    EXPECT_EQ(parse_compress("qsgd:5:128").bucket, 128u);
    EXPECT_EQ(parse_compress("powersgd:4").rank, 4);
    EXPECT_EQ(parse_compress("randk:1").kind, CompressKind::RandK);
    EXPECT_EQ(parse_compress("sign").kind, CompressKind::Sign);
    EXPECT_EQ(parse_compress("sign:vote").kind, CompressKind::SignVote);
    EXPECT_EQ(parse_compress("none").kind, CompressKind::None);
    for (const char* text : {"none", "topk:0.01", "randk:1", "randk:0.125", "qsgd:2", "qsgd:256", "qsgd:5:128", "sign",
                             "sign:vote", "powersgd:1", "powersgd:4"})
        EXPECT_EQ(compress_text(parse_compress(text)), text);
    EXPECT_TRUE(is_unbiased(parse_compress("qsgd:4")));
    EXPECT_TRUE(is_unbiased(parse_compress("randk:0.1")));
    EXPECT_FALSE(is_unbiased(parse_compress("topk:0.1")));
    EXPECT_FALSE(is_unbiased(parse_compress("sign")));
    EXPECT_FALSE(is_unbiased(parse_compress("powersgd:2")));
}

TEST(CompressParseTest, RejectsBadTextNamingTheFlag) {
    for (const char* text : {"topk:0", "topk:1.5", "qsgd:1", "qsgd:x", "foo", "powersgd:0", "", "topk", "topk:",
                             "randk:nan", "randk:-0.5", "qsgd:257", "qsgd:4:0", "sign:foo", "none:1", "powersgd:2.5"}) {
        try {
            parse_compress(text);
            ADD_FAILURE() << "'" << text << "' was accepted";
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("--compress '" + std::string(text) + "'"), std::string::npos) << m;
            EXPECT_NE(m.find("---> HINT"), std::string::npos) << m;
            EXPECT_NE(m.find("topk:F"), std::string::npos) << m;
            EXPECT_NE(m.find("powersgd:R"), std::string::npos) << m;
        }
    }
}

}  // namespace
