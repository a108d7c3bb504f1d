// Every fast kernel against its scalar reference (kernels/reference/) on odd shapes, and the
// reference backward passes against central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/crossentropy.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/kernels/reference/reference.h"
#include "shardlm/kernels/vec_math.h"
#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;

using namespace shardlm::kernels;
namespace ref = shardlm::kernels::reference;
namespace simd = shardlm::simd;
using Vec = std::vector<float>;


// max |a - b| <= tol * max(1, max|b|)
void expect_close(const char* what, const Vec& a, const Vec& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    float scale = 1.0f, worst = 0;
    size_t wi = 0;
    for (float x : b) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < a.size(); i++)
        if (std::fabs(a[i] - b[i]) > worst) worst = std::fabs(a[i] - b[i]), wi = i;
    EXPECT_LE(worst, tol * scale) << what << " element " << wi << ": " << a[wi] << " vs " << b[wi];
}

TEST(Kernels, VectorExpAndTanh) {
    Vec x(4096);
    for (size_t i = 0; i < x.size(); i++) x[i] = -90.0f + 180.0f * float(i) / float(x.size() - 1);
    for (size_t i = 0; i < x.size(); i += 16) {
        float e[16], t[16];
        simd::storeu(e, exp16(simd::loadu(&x[i])));
        simd::storeu(t, tanh16(simd::loadu(&x[i]) * simd::set1(0.1f)));
        for (int j = 0; j < 16; j++) {
            double re = std::exp(double(x[i + j]));
            if (x[i + j] > -87.0f && x[i + j] < 88.0f) {
                EXPECT_NEAR(e[j], re, 4e-7 * re) << x[i + j];
            }
            EXPECT_NEAR(t[j], std::tanh(0.1 * x[i + j]), 2e-7) << x[i + j];
        }
    }
}

// The bias's gradient on widths around its column blocks (16 floats a vector, 128 a block), rows ld apart:
// each column the same sum as adding the rows in order to the value it held, to the bit.
TEST(Kernels, BiasBackwardSumsTheRowsInOrderOnAnyWidth) {
    const int N = 19;
    for (int OC : {7, 16, 120, 128, 131, 300}) {
        const int ld = OC + 5;
        const std::vector<float> dout = randn(size_t(N) * ld, 40 + OC), init = randn(size_t(OC), 80 + OC);
        std::vector<float> db = init, want = init;
        for (int j = 0; j < OC; j++)
            for (int n = 0; n < N; n++) want[size_t(j)] += dout[size_t(n) * ld + j];
        bias_backward(db.data(), dout.data(), N, OC, ld);
        EXPECT_EQ(db, want) << "OC " << OC;
    }
}

TEST(Kernels, Matmul) {
    const int N = 37, C = 45, OC = 67;
    Vec inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
    Vec out(N * OC), out_ref(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    ref::matmul_forward(out_ref.data(), inp.data(), w.data(), b.data(), N, C, OC);
    expect_close("matmul out", out, out_ref, 1e-5f);
    // accumulate onto an existing residual
    Vec acc = randn(N * OC, 5), acc_ref = acc;
    matmul_forward(acc.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
    ref::matmul_forward(acc_ref.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
    expect_close("matmul accumulate", acc, acc_ref, 1e-5f);
    // backward: dweight/dbias accumulate onto non-zero values
    Vec dinp(N * C), dinp_ref(N * C), dw = randn(OC * C, 6), dw_ref = dw, db = randn(OC, 7), db_ref = db;
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    ref::matmul_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    expect_close("matmul dinp", dinp, dinp_ref, 1e-5f);
    expect_close("matmul dweight", dw, dw_ref, 1e-5f);
    expect_close("matmul dbias", db, db_ref, 1e-5f);
}

// bf16 rounding of every element (what matmul_precision bf16 does to the operands).
Vec round_bf16(Vec v) {
    for (float& x : v) x = shardlm::bf16_to_f32(shardlm::f32_to_bf16(x));
    return v;
}

TEST(Kernels, ConvertToBf16MatchesScalar) {
    Vec v = randn(1000 + 7, 11, 100.0f);  // not a multiple of 16: the scalar tail runs too
    float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie: rounds to even */, 1.01171875f /* tie, odd */,
                        1e-40f, -1e-40f, 3.4e38f, INFINITY, -INFINITY, NAN, -NAN};
    for (size_t i = 0; i < sizeof(specials) / sizeof(float); i++) v[i * 37] = specials[i];
    std::vector<unsigned short> got(v.size());
    shardlm::convert_from_f32(got.data(), shardlm::DType::BF16, v.data(), v.size());
    for (size_t i = 0; i < v.size(); i++)
        ASSERT_EQ(got[i], shardlm::f32_to_bf16(v[i])) << "element " << i << " = " << v[i];
}

// Every kind of bit pattern, whole vectors of each: normals of any exponent (with AVX512_BF16 one instruction
// rounds those), denormals alone or one among normals (that instruction would flush it), NaNs quiet and
// signalling with payloads, infinities, zeros, and random words.
TEST(Kernels, ConvertToBf16MatchesScalarOnEveryKindOfBits) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> word;
    std::vector<uint32_t> bits;
    auto vec = [&](auto gen) {
        for (int i = 0; i < 16; i++) bits.push_back(gen(i));
    };
    for (int r = 0; r < 400; r++) {
        vec([&](int) { return (word(rng) & 0x807fffffu) | ((1u + word(rng) % 254u) << 23); });  // normals
        vec([&](int) { return word(rng) & 0x807fffffu; });                                        // denormals, zeros
        const int odd = int(word(rng) % 16);
        vec([&](int i) {  // one denormal among normals
            return i == odd ? (word(rng) & 0x807fffffu) | 1u : (word(rng) & 0x807fffffu) | (100u << 23);
        });
        vec([&](int) { return 0x7f800000u | (word(rng) & 0x807fffffu) | 1u; });  // NaNs (and a few infinities' neighbours)
        vec([&](int) { return word(rng); });
    }
    for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00800000u, 0x007fffffu,
                       0x7f800001u, 0x7fc00000u, 0xffbfffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu})
        bits.push_back(b);
    std::vector<float> v(bits.size());
    std::memcpy(v.data(), bits.data(), bits.size() * sizeof(float));
    std::vector<unsigned short> got(v.size());
    shardlm::convert_from_f32(got.data(), shardlm::DType::BF16, v.data(), v.size());
    for (size_t i = 0; i < v.size(); i++)
        ASSERT_EQ(got[i], shardlm::f32_to_bf16(v[i])) << "element " << i << ", bits " << std::hex << bits[i];
}

// bf16 precision: equal to the fp32 reference run on bf16-rounded operands (fp32 accumulation), and
// measurably not the fp32 product of the unrounded ones (the rounding really happens).
class MatmulBf16 : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MatmulBf16, EqualsFp32OnRoundedOperands) {
    const auto [N, C, OC] = GetParam();
    const MatmulPrecision bf16 = MatmulPrecision::bf16;
    Vec inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
    Vec inp_r = round_bf16(inp), w_r = round_bf16(w), dout_r = round_bf16(dout);
    Vec out(N * OC), out_ref(N * OC), out_fp32(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC, false, bf16);
    ref::matmul_forward(out_ref.data(), inp_r.data(), w_r.data(), b.data(), N, C, OC);
    expect_close("bf16 matmul out", out, out_ref, 1e-5f);
    ref::matmul_forward(out_fp32.data(), inp.data(), w.data(), b.data(), N, C, OC);
    float diff = 0;
    for (int i = 0; i < N * OC; i++) diff = std::max(diff, std::fabs(out[i] - out_fp32[i]));
    EXPECT_GT(diff, 1e-3f) << "bf16 product equals the fp32 one: operands were not rounded";
    Vec acc = randn(N * OC, 5), acc_ref = acc;
    matmul_forward(acc.data(), inp.data(), w.data(), b.data(), N, C, OC, true, bf16);
    ref::matmul_forward(acc_ref.data(), inp_r.data(), w_r.data(), b.data(), N, C, OC, true);
    expect_close("bf16 matmul accumulate", acc, acc_ref, 1e-5f);
    for (bool accumulate : {false, true}) {
        Vec dinp(N * C), dinp_ref(N * C), dw = randn(OC * C, 6), dw_ref = dw, db = randn(OC, 7), db_ref = db;
        if (!accumulate) std::fill(dw_ref.begin(), dw_ref.end(), 0.0f);
        matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC, accumulate,
                        bf16);
        // bias gradients are fp32 sums of the unrounded dout
        Vec db_only = db_ref;
        ref::matmul_backward(dinp_ref.data(), dw_ref.data(), db_only.data(), dout_r.data(), inp_r.data(), w_r.data(),
                             N, C, OC);
        ref::matmul_backward(nullptr, nullptr, db_ref.data(), dout.data(), inp.data(), w.data(), N, C, OC);
        expect_close("bf16 matmul dinp", dinp, dinp_ref, 1e-5f);
        expect_close("bf16 matmul dweight", dw, dw_ref, 1e-5f);
        expect_close("bf16 matmul dbias", db, db_ref, 1e-5f);
    }
}

// (N, C, OC): odd sizes, the shapes of a GPT block (C, 3C, 4C) and a head.
INSTANTIATE_TEST_SUITE_P(Shapes, MatmulBf16,
                         ::testing::Values(std::make_tuple(37, 45, 67), std::make_tuple(39, 60, 180),
                                           std::make_tuple(39, 240, 60), std::make_tuple(39, 60, 128),
                                           std::make_tuple(256, 128, 1001)));

TEST(Kernels, LayerNorm) {
    const int N = 29, C = 77;
    Vec x = randn(N * C, 1, 3.0f), w = randn(C, 2), b = randn(C, 3), dout = randn(N * C, 4);
    Vec out(N * C), mean(N), rstd(N), out_r(N * C), mean_r(N), rstd_r(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    expect_close("ln out", out, out_r, 1e-5f);
    expect_close("ln rstd", rstd, rstd_r, 1e-5f);
    Vec dx = randn(N * C, 5), dx_r = dx, dw = randn(C, 6), dw_r = dw, db = randn(C, 7), db_r = db;
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    ref::layernorm_backward(dx_r.data(), dw_r.data(), db_r.data(), dout.data(), x.data(), w.data(), mean_r.data(),
                            rstd_r.data(), N, C);
    expect_close("ln dinp", dx, dx_r, 1e-5f);
    expect_close("ln dweight", dw, dw_r, 1e-5f);
    expect_close("ln dbias", db, db_r, 1e-5f);
}

TEST(Kernels, Gelu) {
    const size_t n = 16 * 300 + 13;  // a tail
    Vec x = randn(n, 1, 3.0f), g = randn(n, 2);
    Vec y(n), y_r(n), dx(n), dx_r(n);
    gelu_forward(y.data(), x.data(), n);
    ref::gelu_forward(y_r.data(), x.data(), n);
    expect_close("gelu", y, y_r, 1e-6f);
    gelu_backward(dx.data(), x.data(), g.data(), n);
    ref::gelu_backward(dx_r.data(), x.data(), g.data(), n);
    expect_close("gelu backward", dx, dx_r, 1e-6f);
}

TEST(Kernels, Encoder) {
    const int B = 3, T = 11, C = 35, V = 19;
    Vec wte = randn(V * C, 1), wpe = randn(T * C, 2), dout = randn(B * T * C, 3);
    std::vector<int> tok(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % V;
    Vec out(B * T * C), out_r(B * T * C);
    encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    ref::encoder_forward(out_r.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    expect_close("encoder", out, out_r, 0.0f);
    Vec dwte(V * C), dwpe(T * C), dwte_r(V * C), dwpe_r(T * C);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    ref::encoder_backward(dwte_r.data(), dwpe_r.data(), dout.data(), tok.data(), B, T, C);
    expect_close("encoder dwte", dwte, dwte_r, 0.0f);  // same summation order: exact
    expect_close("encoder dwpe", dwpe, dwpe_r, 0.0f);
}

TEST(Kernels, CrossEntropy) {
    const int N = 23, V = 101, Vp = 128;
    Vec logits = randn(N * Vp, 1, 4.0f), logits_r = logits, logits_f = logits;
    std::vector<int> t(N);
    for (int i = 0; i < N; i++) t[i] = (i * 13) % V;
    Vec loss(N), loss_r(N), loss_f(N);
    crossentropy_forward_backward(logits.data(), loss.data(), t.data(), N, V, Vp, 0.25f);
    ref::crossentropy_forward_backward(logits_r.data(), loss_r.data(), t.data(), N, V, Vp, 0.25f);
    crossentropy_forward(loss_f.data(), logits_f.data(), t.data(), N, V, Vp);
    expect_close("ce loss", loss, loss_r, 1e-6f);
    expect_close("ce loss (forward only)", loss_f, loss_r, 1e-6f);
    expect_close("ce dlogits", logits, logits_r, 1e-6f);
    // the bf16 copy of the gradient (for the bf16 head backward) is the rounding of the fp32 one
    Vec logits_b = randn(N * Vp, 1, 4.0f), loss_b(N);
    std::vector<unsigned short> d_bf16(N * Vp, 0xffff);
    crossentropy_forward_backward(logits_b.data(), loss_b.data(), t.data(), N, V, Vp, 0.25f, d_bf16.data());
    for (int i = 0; i < N * Vp; i++) ASSERT_EQ(d_bf16[i], shardlm::f32_to_bf16(logits[i])) << "element " << i;
}

// The chunked head's cross-entropy, a block of columns at a time (online softmax over the blocks),
// against the reference on whole rows: blocks of 64 columns, the last real one partial, the last one
// all padding, a target in each real block, a late maximum, a target with most of the probability (its
// gradient a difference of nearly equal numbers), the bf16 gradient on and off cache-line boundaries.
TEST(Kernels, CrossEntropyByColumnBlocks) {
    const int N = 9, V = 141, Vp = 256, W = 64, blocks = Vp / W;  // blocks 0-1 real, 2 partial, 3 padding
    Vec logits = randn(N * Vp, 3, 4.0f);
    for (int j = 0; j < 29; j++) logits[5 * Vp + 70 + j] = 40.0f + j;  // a late maximum in block 1
    logits[5 * Vp + 99] = 73.6f;  // row 5's target: softmax 0.994
    Vec logits_r = logits;
    std::vector<int> t(N);
    for (int i = 0; i < N; i++) t[i] = (i * 37) % V;
    t[5] = 99, t[8] = V - 1;  // the dominant target; one in the partial block
    Vec loss_r(N);
    ref::crossentropy_forward_backward(logits_r.data(), loss_r.data(), t.data(), N, V, Vp, 0.25f);
    // the gradient's place: 64-byte aligned (streamed), then one element off (ordinary stores)
    shardlm::AlignedBuffer<unsigned short> dbuf(size_t(N) * Vp + 32);
    for (int run = 0; run < 3; run++) {
        const bool keep = run < 2;
        unsigned short* d = dbuf.data() + (run == 1 ? 1 : 0);
        std::fill(dbuf.begin(), dbuf.end(), 0xffff);
        // the blocks as the head computes them: block b's (N, W) tile alone
        Vec tile(N * W), mb(N * blocks), stats(4 * N), loss(N);
        const CeRowStats st{stats.data(), stats.data() + N, stats.data() + 2 * N, stats.data() + 3 * N};
        ce_rows_start(st, N);
        for (int b = 0; b < blocks; b++) {
            for (int i = 0; i < N; i++) std::memcpy(&tile[i * W], &logits[i * Vp + b * W], sizeof(float) * W);
            ce_block_stats(tile.data(), keep ? d + b * W : nullptr, Vp, &mb[b * N], st, t.data(), N,
                           std::clamp(V - b * W, 0, W), W, b * W);
        }
        ce_rows_loss(loss.data(), st, N);
        expect_close(keep ? "blocked ce loss" : "blocked ce loss (forward only)", loss, loss_r, 2e-6f);
        if (!keep) continue;
        ce_rows_grad(d, Vp, mb.data(), W, st, t.data(), N, V, 0.25f);
        for (int i = 0; i < N * Vp; i++) {
            if (i % Vp >= V) {
                ASSERT_EQ(d[i], 0) << "padding element " << i;
            }
            const float g = shardlm::bf16_to_f32(d[i]), r = logits_r[i];
            if (i % Vp == t[i / Vp]) {  // from the unrounded exponential: one rounding, at most one bf16 step off
                ASSERT_LE(std::abs(int(d[i]) - int(shardlm::f32_to_bf16(r))), 1) << "target " << i << ": " << g << " " << r;
            } else {  // rounded to bf16 twice: within 2^-8 + 2^-9 of the fp32 gradient
                ASSERT_NEAR(g, r, std::fabs(r) * (1.0f / 256 + 1.0f / 512) + 1e-9f) << "element " << i;
            }
        }
    }
}

TEST(Kernels, AttentionAcrossBlocks) {
    // T = 150 spans three query blocks of 64; head dim 10.
    const int B = 2, T = 150, C = 40, NH = 4;
    Vec qkv = randn(size_t(B) * T * 3 * C, 1), dout = randn(size_t(B) * T * C, 2);
    Vec out(size_t(B) * T * C), out_r(out.size()), att(size_t(B) * NH * T * T), att_r(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    ref::attention_forward(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH);
    expect_close("attention out", out, out_r, 1e-5f);
    for (int bh = 0; bh < B * NH; bh++)  // compare the causal part of the probabilities
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) {
                size_t k = (size_t(bh) * T + i) * T + j;
                ASSERT_NEAR(att[k], att_r[k], 1e-6f) << bh << " " << i << " " << j;
            }
    Vec dqkv(qkv.size()), dqkv_r(qkv.size());
    Vec scratch(attention_scratch_floats(T, 8));
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    ref::attention_backward(dqkv_r.data(), dout.data(), qkv.data(), att_r.data(), B, T, C, NH);
    expect_close("attention dqkv", dqkv, dqkv_r, 1e-5f);
}

// The references' backward passes against central differences of L = sum(out * R), in float with
// a step large enough for float rounding; this checks the oracle itself.
void finite_diff_check(const char* what, Vec& x, const Vec& analytic, const std::function<double()>& loss,
                       float h, float tol) {
    for (size_t i = 0; i < x.size(); i += std::max<size_t>(1, x.size() / 40)) {
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = loss();
        x[i] = x0 - h;
        double lm = loss();
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * h);
        EXPECT_NEAR(analytic[i], fd, tol * std::max(1.0, std::fabs(fd))) << what << " element " << i;
    }
}

TEST(KernelsReference, BackwardMatchesFiniteDifferences) {
    {  // layernorm, d/dx
        const int N = 3, C = 7;
        Vec x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), R = randn(N * C, 4);
        Vec out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
        auto loss = [&] {
            ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
            double s = 0;
            for (int i = 0; i < N * C; i++) s += double(out[i]) * R[i];
            return s;
        };
        loss();
        ref::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                N, C);
        finite_diff_check("layernorm dinp", x, dx, loss, 1e-2f, 2e-3f);
    }
    {  // gelu
        Vec x = randn(50, 5, 2.0f), R = randn(50, 6), y(50), dx(50);
        auto loss = [&] {
            ref::gelu_forward(y.data(), x.data(), 50);
            double s = 0;
            for (int i = 0; i < 50; i++) s += double(y[i]) * R[i];
            return s;
        };
        ref::gelu_backward(dx.data(), x.data(), R.data(), 50);
        finite_diff_check("gelu", x, dx, loss, 1e-2f, 2e-3f);
    }
    {  // attention, d/dqkv
        const int B = 1, T = 5, C = 6, NH = 2;
        Vec qkv = randn(size_t(B) * T * 3 * C, 7), R = randn(size_t(B) * T * C, 8);
        Vec out(R.size()), att(size_t(B) * NH * T * T), dqkv(qkv.size());
        auto loss = [&] {
            ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
            double s = 0;
            for (size_t i = 0; i < out.size(); i++) s += double(out[i]) * R[i];
            return s;
        };
        loss();
        ref::attention_backward(dqkv.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
        finite_diff_check("attention dqkv", qkv, dqkv, loss, 1e-2f, 2e-3f);
    }
}

TEST(Kernels, SumSquaresIsThreadCountIndependent) {
    Vec x = randn(300000, 9);
    double a = sum_squares(x.data(), x.size());
    double r = 0;
    for (float v : x) r += double(v) * v;
    EXPECT_NEAR(a, r, 1e-9 * r);
}

// Many slices' sums of squares in one pass: each the bits of its own sum_squares, whatever its length (chunks of
// 65536 and their remainders).
TEST(Kernels, SumSquaresOfManySlicesEqualsEachAlone) {
    Vec x = randn(400000, 10);
    const std::vector<std::pair<size_t, size_t>> parts = {{0, 1}, {3, 65536}, {70000, 0}, {70001, 200001}, {300000, 99999}};
    std::vector<std::span<const float>> slices;
    for (auto [at, n] : parts) slices.emplace_back(x.data() + at, n);
    std::vector<double> out(slices.size(), -1.0);
    sum_squares(slices.data(), slices.size(), out.data());
    for (size_t j = 0; j < parts.size(); j++) {
        EXPECT_EQ(out[j], sum_squares(x.data() + parts[j].first, parts[j].second)) << "slice " << j;
        double r = 0;
        for (size_t i = 0; i < parts[j].second; i++) r += double(x[parts[j].first + i]) * x[parts[j].first + i];
        EXPECT_NEAR(out[j], r, 1e-9 * r) << "slice " << j;
    }
}

}  // namespace
