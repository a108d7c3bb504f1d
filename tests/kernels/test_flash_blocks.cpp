// Flash attention by blocks (kernels/flash_attention.h: flash_block_*), the pieces of context
// parallelism's ring attention: a sequence cut into 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r
// (zigzag), each rank's queries attended to every rank's keys block by block and merged in its fp32
// state, give flash_attention_forward's output and log-sum-exp, and the blocks' backward (dQ on the
// query's rank, dK and dV on the key's) its gradients, to fp32 rounding: cp 1 to 4, chunks within one
// tile and across tiles, grouped-query heads. Without the causal mask, against a direct sum in double.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/flash_attention.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;
using shardlm::test::rel_diff;
using namespace shardlm;
using namespace shardlm::kernels;
using Vec = std::vector<float>;

struct Shape {
    int B, T, NH, NKV, HS;
    int C() const { return NH * HS; }
    int W() const { return C() + 2 * NKV * HS; }
};

// The positions rank r of cp holds: chunks r and 2 cp - 1 - r of T / (2 cp) rows.
std::vector<int> zigzag(int T, int cp, int r) {
    const int L = T / (2 * cp);
    std::vector<int> pos;
    for (int c : {r, 2 * cp - 1 - r})
        for (int i = 0; i < L; i++) pos.push_back(c * L + i);
    return pos;
}

// rows `pos` of each sequence of x (B, T, width) -> (B, pos.size(), width), and back (scatter)
Vec gather(const Vec& x, int B, int T, int width, const std::vector<int>& pos) {
    Vec y(size_t(B) * pos.size() * width);
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < pos.size(); i++)
            std::copy_n(x.begin() + (ptrdiff_t(b) * T + pos[i]) * width, width, y.begin() + (ptrdiff_t(b) * pos.size() + i) * width);
    return y;
}
void scatter(Vec& x, const Vec& y, int B, int T, int width, const std::vector<int>& pos) {
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < pos.size(); i++)
            std::copy_n(y.begin() + (ptrdiff_t(b) * pos.size() + i) * width, width, x.begin() + (ptrdiff_t(b) * T + pos[i]) * width);
}

struct Result {
    Vec out, lse, dqkv;
};

// Every rank's forward over all ranks' key blocks (the ring's order: its own first), the backward the same,
// each rank's dK/dV accumulated on the key block's owner; out, lse and dqkv put back in sequence order.
// starts (B, T): each row's document start (packed documents), or empty.
Result by_blocks(const Shape& s, int cp, const Vec& qkv, const Vec& dout, bool causal, const std::vector<int>& starts = {}) {
    const int B = s.B, T = s.T, C = s.C(), W = s.W(), NH = s.NH, Tl = T / cp, HS = s.HS;
    const size_t ranks = size_t(cp);
    std::vector<std::vector<int>> pos(ranks);
    std::vector<Vec> lq(ranks), ldo(ranks), lout(ranks), llse(ranks), lD(ranks), lg(ranks);
    std::vector<std::vector<int>> lstart(ranks);
    for (int r = 0; r < cp; r++) {
        pos[size_t(r)] = cp == 1 ? zigzag(T, 1, 0) : zigzag(T, cp, r);
        for (int b = 0; !starts.empty() && b < B; b++)
            for (int p : pos[size_t(r)]) lstart[size_t(r)].push_back(starts[size_t(b) * T + size_t(p)]);
        lq[size_t(r)] = gather(qkv, B, T, W, pos[size_t(r)]);
        ldo[size_t(r)] = gather(dout, B, T, C, pos[size_t(r)]);
        lg[size_t(r)].assign(size_t(B) * Tl * W, 0.0f);
    }
    // rank r's queries against rank src's keys, where both lie in their ranks' qkv
    auto pair = [&](int r, int src) {
        return FlashBlockPair{lq[size_t(r)].data(), W, lq[size_t(src)].data() + C, W, DType::F32, pos[size_t(r)].data(),
                              pos[size_t(src)].data(), B, Tl, Tl, C, NH, s.NKV, causal,
                              starts.empty() ? nullptr : lstart[size_t(r)].data()};
    };
    for (int r = 0; r < cp; r++) {
        Vec o(size_t(B) * NH * Tl * HS), m(size_t(B) * NH * Tl), l(m.size());
        const FlashState st{o.data(), m.data(), l.data()};
        flash_state_reset(st, B, NH, Tl, HS);
        for (int step = 0; step < cp; step++) {
            const int src = (r - step + cp) % cp;
            flash_block_forward(st, pair(r, src));
        }
        lout[size_t(r)].resize(size_t(B) * Tl * C);
        llse[size_t(r)].resize(m.size());
        flash_state_finish(lout[size_t(r)].data(), llse[size_t(r)].data(), st, DType::F32, B, Tl, C, NH);
        lD[size_t(r)].resize(m.size());
        flash_block_delta(lD[size_t(r)].data(), ldo[size_t(r)].data(), lout[size_t(r)].data(), DType::F32, B, Tl, C, NH);
    }
    for (int r = 0; r < cp; r++)
        for (int step = 0; step < cp; step++) {
            const int src = (r - step + cp) % cp;
            flash_block_backward(lg[size_t(r)].data(), W, lg[size_t(src)].data() + C, W, ldo[size_t(r)].data(),
                                 llse[size_t(r)].data(), lD[size_t(r)].data(), pair(r, src));
        }
    Result res{Vec(size_t(B) * T * C), Vec(size_t(B) * NH * T), Vec(qkv.size())};
    for (int r = 0; r < cp; r++) {
        scatter(res.out, lout[size_t(r)], B, T, C, pos[size_t(r)]);
        scatter(res.dqkv, lg[size_t(r)], B, T, W, pos[size_t(r)]);
        for (int bh = 0; bh < B * NH; bh++)
            for (int i = 0; i < Tl; i++) res.lse[size_t(bh) * T + size_t(pos[size_t(r)][size_t(i)])] = llse[size_t(r)][size_t(bh) * Tl + size_t(i)];
    }
    return res;
}

class FlashBlocks : public ::testing::TestWithParam<std::tuple<int, Shape>> {};  // cp, shape

TEST_P(FlashBlocks, ZigzagBlocksEqualTheWholeSequence) {
    const auto [cp, s] = GetParam();
    const Vec qkv = randn(size_t(s.B) * s.T * s.W(), 3 + s.T, 1.0f), dout = randn(size_t(s.B) * s.T * s.C(), 5 + s.T, 1.0f);
    Result whole{Vec(dout.size()), Vec(size_t(s.B) * s.NH * s.T), Vec(qkv.size())};
    flash_attention_forward(whole.out.data(), whole.lse.data(), qkv.data(), DType::F32, s.B, s.T, s.C(), s.NH, s.NKV);
    flash_attention_backward(whole.dqkv.data(), dout.data(), qkv.data(), whole.out.data(), whole.lse.data(), DType::F32,
                             s.B, s.T, s.C(), s.NH, s.NKV);
    const Result blocks = by_blocks(s, cp, qkv, dout, true);
    EXPECT_LT(rel_diff(blocks.out, whole.out), 2e-6f);
    EXPECT_LT(rel_diff(blocks.lse, whole.lse), 2e-6f);
    EXPECT_LT(rel_diff(blocks.dqkv, whole.dqkv), 1e-5f);
}

// chunks of T / 2 cp rows: 4-6 (within a tile) and 33-66 (across tiles of 64)
INSTANTIATE_TEST_SUITE_P(All, FlashBlocks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Shape{2, 48, 4, 2, 16}, Shape{1, 264, 2, 1, 16})));

TEST(FlashBlocks, WithoutTheMaskEveryQueryAttendsToEveryKey) {
    const Shape s{2, 40, 4, 2, 8};
    const int C = s.C(), W = s.W(), HS = s.HS, G = s.NH / s.NKV;
    const Vec qkv = randn(size_t(s.B) * s.T * W, 17, 1.0f), dout = randn(size_t(s.B) * s.T * C, 19, 1.0f);
    const Result one = by_blocks(s, 1, qkv, dout, false), four = by_blocks(s, 4, qkv, dout, false);
    EXPECT_LT(rel_diff(four.out, one.out), 2e-6f);
    EXPECT_LT(rel_diff(four.dqkv, one.dqkv), 1e-5f);
    // the output as a direct sum in double
    double worst = 0, scale = 0;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < s.T; i++) {
                const float* q = &qkv[(size_t(b) * s.T + i) * W + size_t(h) * HS];
                std::vector<double> w(size_t(s.T));
                double mx = -1e300, sum = 0;
                for (int j = 0; j < s.T; j++) {
                    const float* k = &qkv[(size_t(b) * s.T + j) * W + C + size_t(h / G) * HS];
                    double x = 0;
                    for (int e = 0; e < HS; e++) x += double(q[e]) * k[e];
                    w[size_t(j)] = x / std::sqrt(double(HS));
                    mx = std::max(mx, w[size_t(j)]);
                }
                for (double& x : w) sum += (x = std::exp(x - mx));
                for (int e = 0; e < HS; e++) {
                    double o = 0;
                    for (int j = 0; j < s.T; j++)
                        o += w[size_t(j)] / sum * qkv[(size_t(b) * s.T + j) * W + C + size_t(s.NKV * HS) + size_t(h / G) * HS + e];
                    const double got = one.out[(size_t(b) * s.T + i) * C + size_t(h) * HS + e];
                    worst = std::max(worst, std::fabs(got - o));
                    scale = std::max(scale, std::fabs(o));
                }
            }
    EXPECT_LT(worst, 2e-6 * scale);
}

// Packed documents: with each row's document start, the blocks give what the whole-sequence kernel gives
// on every document alone (each sequence cut at its documents' starts, run as sequences of their own).
TEST(FlashBlocks, DocumentStartsEqualEachDocumentAlone) {
    const Shape s{2, 48, 4, 2, 8};
    const int C = s.C(), W = s.W(), NH = s.NH;
    const Vec qkv = randn(size_t(s.B) * s.T * W, 23, 1.0f), dout = randn(size_t(s.B) * s.T * C, 29, 1.0f);
    // documents: sequence 0 at 0, 5, 6 (a one-token document), 29; sequence 1 one document
    const std::vector<std::vector<int>> docs = {{0, 5, 6, 29}, {0}};
    std::vector<int> starts(size_t(s.B) * s.T);
    Result alone{Vec(dout.size()), Vec(size_t(s.B) * NH * s.T), Vec(qkv.size())};
    for (int b = 0; b < s.B; b++) {
        const std::vector<int>& d = docs[size_t(b)];
        for (size_t k = 0; k < d.size(); k++) {
            const int t0 = d[k], t1 = k + 1 < d.size() ? d[k + 1] : s.T, n = t1 - t0;
            for (int t = t0; t < t1; t++) starts[size_t(b) * s.T + size_t(t)] = t0;
            Vec q(qkv.begin() + (ptrdiff_t(b) * s.T + t0) * W, qkv.begin() + (ptrdiff_t(b) * s.T + t1) * W);
            Vec g(dout.begin() + (ptrdiff_t(b) * s.T + t0) * C, dout.begin() + (ptrdiff_t(b) * s.T + t1) * C);
            Vec o(size_t(n) * C), l(size_t(NH) * n), dq(q.size());
            flash_attention_forward(o.data(), l.data(), q.data(), DType::F32, 1, n, C, NH, s.NKV);
            flash_attention_backward(dq.data(), g.data(), q.data(), o.data(), l.data(), DType::F32, 1, n, C, NH, s.NKV);
            std::copy(o.begin(), o.end(), alone.out.begin() + (ptrdiff_t(b) * s.T + t0) * C);
            std::copy(dq.begin(), dq.end(), alone.dqkv.begin() + (ptrdiff_t(b) * s.T + t0) * W);
            for (int h = 0; h < NH; h++)
                std::copy_n(l.begin() + ptrdiff_t(h) * n, n, alone.lse.begin() + (ptrdiff_t(b) * NH + h) * s.T + t0);
        }
    }
    for (int cp : {1, 2, 3, 4}) {
        const Result blocks = by_blocks(s, cp, qkv, dout, true, starts);
        EXPECT_LT(rel_diff(blocks.out, alone.out), 2e-6f) << "cp " << cp;
        EXPECT_LT(rel_diff(blocks.lse, alone.lse), 2e-6f) << "cp " << cp;
        EXPECT_LT(rel_diff(blocks.dqkv, alone.dqkv), 1e-5f) << "cp " << cp;
    }
    // and the mask matters: without it the first document's rows see the others
    EXPECT_GT(rel_diff(by_blocks(s, 2, qkv, dout, true).out, alone.out), 1e-2f);
}

}  // namespace
