// Adafactor's passes over a step's pieces (kernels/optimizer_kernels.h): each pass one parallel region over every
// piece, sums in an order that depends on the pieces alone. Against a plain reference (sums in double, element by
// element), and the same bits on 1, 2 and 3 threads, with a matrix cut mid-row into two pieces that a vector's
// piece separates, padded rows (real_rows; a piece wholly inside them), an empty piece and a first moment.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "shardlm/kernels/optimizer_kernels.h"

namespace {

using namespace shardlm;

struct State {
    std::vector<float> pa, ma, pb, mb, pv, mv, v, rf, cf, rfb, cfb;
    std::vector<double> row, col, rowb, colb, out;
};

constexpr size_t kRowsA = 37, kRealA = 35, kColsA = 300, kCut = 5 * kColsA + 123, kPadded = kRealA * kColsA + 50,
                 kRowsB = 10, kColsB = 1000, kV = 10000;
constexpr float kGs = 0.7f, kBeta2t = 0.3f, kEps1 = 1e-30f;

State initial() {
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    auto fill = [&](size_t k, float scale, bool positive) {
        std::vector<float> x(k);
        for (float& e : x) e = positive ? 0.5f + std::fabs(n(rng)) * scale : n(rng) * scale;
        return x;
    };
    State s;
    s.pa = fill(kRowsA * kColsA, 0.1f, false), s.ma = fill(kRowsA * kColsA, 1e-3f, false);
    s.pb = fill(kRowsB * kColsB, 0.1f, false), s.mb = fill(kRowsB * kColsB, 1e-3f, false);
    s.pv = fill(kV, 0.1f, false), s.mv = fill(kV, 1e-3f, false), s.v = fill(kV, 1e-4f, true);
    s.rf = fill(kRowsA, 0.1f, true), s.cf = fill(kColsA, 0.1f, true), s.rfb = fill(kRowsB, 0.1f, true),
    s.cfb = fill(kColsB, 0.1f, true);
    s.row.assign(kRowsA, 0.0), s.col.assign(kColsA, 0.0), s.rowb.assign(kRowsB, 0.0), s.colb.assign(kColsB, 0.0);
    return s;
}

std::vector<float> gradient(size_t k, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> g(k);
    for (float& e : g) e = n(rng) * 1e-2f;
    return g;
}

const std::vector<float> kGa = gradient(kRowsA * kColsA, 1), kGb = gradient(kRowsB * kColsB, 2), kGv = gradient(kV, 4);

// The pieces in the order a step would give them: A's first part, the vector, B, A's second part (ending inside
// its padded rows), A's third (wholly inside them), an empty vector piece
std::vector<kernels::AdafactorPiece> pieces(State& s) {
    std::vector<kernels::AdafactorPiece> p(6);
    auto matrix = [&](kernels::AdafactorPiece& k, float* w, const float* g, float* m, size_t i0, size_t n, size_t cols,
                      size_t real, double* row, double* col, const float* rf, const float* cf) {
        k.p = w + i0, k.g = g + i0, k.m = m + i0, k.i0 = i0, k.n = n, k.cols = cols, k.real_rows = real, k.factored = true;
        k.row = row, k.col = col, k.rf = rf, k.cf = cf;
    };
    matrix(p[0], s.pa.data(), kGa.data(), s.ma.data(), 0, kCut, kColsA, kRealA, s.row.data(), s.col.data(), s.rf.data(),
           s.cf.data());
    p[1].p = s.pv.data(), p[1].g = kGv.data(), p[1].m = s.mv.data(), p[1].n = kV, p[1].cols = kV, p[1].v = s.v.data();
    matrix(p[2], s.pb.data(), kGb.data(), s.mb.data(), 0, kRowsB * kColsB, kColsB, kRowsB, s.rowb.data(), s.colb.data(),
           s.rfb.data(), s.cfb.data());
    matrix(p[3], s.pa.data(), kGa.data(), s.ma.data(), kCut, kPadded - kCut, kColsA, kRealA, s.row.data(), s.col.data(),
           s.rf.data(), s.cf.data());
    matrix(p[4], s.pa.data(), kGa.data(), s.ma.data(), kPadded, kRowsA * kColsA - kPadded, kColsA, kRealA, s.row.data(),
           s.col.data(), s.rf.data(), s.cf.data());
    p[5].p = s.pv.data(), p[5].g = kGv.data(), p[5].m = s.mv.data(), p[5].n = 0, p[5].cols = 0, p[5].v = s.v.data();
    for (auto& k : p) k.apply = {1e-2f, 0.1f, 1.5f, 0.9f, true};
    return p;
}

State run(int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    State s = initial();
    std::vector<kernels::AdafactorPiece> p = pieces(s);
    kernels::adafactor_square_sums(p.data(), p.size(), kGs);
    s.out.assign(p.size(), 0.0);
    kernels::adafactor_update(p.data(), p.size(), kGs, kBeta2t, kEps1, false, s.out.data());
    kernels::adafactor_update(p.data(), p.size(), kGs, kBeta2t, kEps1, true, nullptr);
    omp_set_num_threads(before);
    return s;
}

TEST(Adafactor, PassesGiveTheReferenceAndTheSameBitsOnAnyThreads) {
    const State one = run(1);
    for (int t : {2, 3}) {
        const State s = run(t);
        for (auto m : {&State::row, &State::col, &State::rowb, &State::colb, &State::out})
            EXPECT_EQ(s.*m, one.*m) << t;
        for (auto m : {&State::pa, &State::ma, &State::pv, &State::v, &State::pb, &State::mb, &State::mv})
            EXPECT_EQ(s.*m, one.*m) << t;
    }
    // the reference: element by element, sums in double one at a time
    State r = initial();
    auto step = [](float& p, float& m, float u, float lr, float wd, float clip_div, float beta1) {
        u = u / clip_div * lr;
        m = beta1 * m + (1.0f - beta1) * u;
        p = p + (-wd * lr) * p;
        p = p - m;
    };
    double ua = 0, ub = 0, uv = 0;
    auto matrix = [&](std::vector<float>& p, std::vector<float>& m, const std::vector<float>& g, size_t real, size_t cols,
                      std::vector<double>& row, std::vector<double>& col, const std::vector<float>& rf,
                      const std::vector<float>& cf, double& usum) {
        for (size_t i = 0; i < real * cols; i++) {  // (padded rows untouched)
            const size_t a = i / cols, c = i % cols;
            const double x = double(g[i] * kGs);
            row[a] += x * x, col[c] += x * x;
            const float u = (rf[a] * cf[c]) * (g[i] * kGs);
            usum += double(u) * u;
            step(p[i], m[i], u, 1e-2f, 0.1f, 1.5f, 0.9f);
        }
    };
    matrix(r.pa, r.ma, kGa, kRealA, kColsA, r.row, r.col, r.rf, r.cf, ua);
    matrix(r.pb, r.mb, kGb, kRowsB, kColsB, r.rowb, r.colb, r.rfb, r.cfb, ub);
    for (size_t i = 0; i < kV; i++) {
        const float gi = kGv[i] * kGs;
        r.v[i] = kBeta2t * r.v[i] + (1.0f - kBeta2t) * (gi * gi + kEps1);
        const float u = (1.0f / std::sqrt(r.v[i])) * gi;
        uv += double(u) * u;
        step(r.pv[i], r.mv[i], u, 1e-2f, 0.1f, 1.5f, 0.9f);
    }
    auto near = [](const auto& a, const auto& b, double rel, const char* what) {
        ASSERT_EQ(a.size(), b.size()) << what;
        for (size_t i = 0; i < a.size(); i++)
            ASSERT_NEAR(double(a[i]), double(b[i]), rel * std::max(1e-30, std::fabs(double(b[i])))) << what << " " << i;
    };
    // rows: eight lanes against one chain; columns: down the rows in order, as the reference (the same bits)
    near(one.row, r.row, 1e-12, "rows"), near(one.rowb, r.rowb, 1e-12, "B's rows");
    EXPECT_EQ(one.col, r.col);
    EXPECT_EQ(one.colb, r.colb);
    EXPECT_EQ(one.row[kRealA], 0.0);  // padded rows: no sums
    EXPECT_EQ(one.row[kRealA + 1], 0.0);
    EXPECT_EQ(one.out[4], 0.0);  // the piece inside the padded rows, and the empty one: nothing
    EXPECT_EQ(one.out[5], 0.0);
    EXPECT_NEAR(one.out[0] + one.out[3], ua, 1e-12 * ua);
    EXPECT_NEAR(one.out[1], uv, 1e-12 * uv);
    EXPECT_NEAR(one.out[2], ub, 1e-12 * ub);
    near(one.pa, r.pa, 1e-6, "A"), near(one.ma, r.ma, 1e-6, "A's m"), near(one.pb, r.pb, 1e-6, "B");
    near(one.pv, r.pv, 1e-6, "the vector"), near(one.v, r.v, 1e-6, "v");
    near(one.mb, r.mb, 1e-6, "B's m"), near(one.mv, r.mv, 1e-6, "the vector's m");
}

}  // namespace
