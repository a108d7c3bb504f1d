// The kernels of LLaMA-style blocks (issue 22): RMSNorm, rotary embeddings, SwiGLU and grouped-query
// attention, each against an independent formula: a double-precision forward, finite differences of
// it for the backward, and multi-head attention on repeated key/value heads (transformers' repeat_kv)
// for GQA. 16-bit rows equal the fp32 kernel on the widened values, rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/rope.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;

using namespace shardlm;
using namespace shardlm::kernels;
using Vec = std::vector<float>;


float max_abs_diff(const Vec& a, const Vec& b) {
    float m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// --- RMSNorm ---------------------------------------------------------------------------------------

double rms_row(const float* x, const float* w, int C, double eps, int i) {
    double ss = 0;
    for (int j = 0; j < C; j++) ss += double(x[j]) * x[j];
    return double(x[i]) / std::sqrt(ss / C + eps) * w[i];
}

TEST(RmsNorm, ForwardAndBackwardAgainstDoubleAndFiniteDifferences) {
    const int N = 5, C = 37;  // odd width: the vector loops' tails
    const float eps = 1e-5f;
    Vec x = randn(size_t(N) * C, 1), w = randn(C, 2, 0.5f), g = randn(size_t(N) * C, 3);
    for (auto& v : w) v += 1.0f;
    Vec y(x.size()), rstd(N);
    rmsnorm_forward(y.data(), DType::F32, rstd.data(), x.data(), DType::F32, w.data(), N, C, eps);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++)
            EXPECT_NEAR(y[size_t(n) * C + i], rms_row(&x[size_t(n) * C], w.data(), C, eps, i), 1e-5);
    // L = sum(g * y): dL/dx and dL/dw by central differences of the double forward
    Vec dx(x.size(), 0.0f), dw(C, 0.0f);
    rmsnorm_backward_input(dx.data(), g.data(), x.data(), DType::F32, w.data(), rstd.data(), N, C);
    rmsnorm_backward_params(dw.data(), g.data(), x.data(), DType::F32, rstd.data(), N, C, 0, C);
    auto loss = [&](const Vec& xs, const Vec& ws) {
        double s = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) s += g[size_t(n) * C + i] * rms_row(&xs[size_t(n) * C], ws.data(), C, eps, i);
        return s;
    };
    const float h = 1e-2f;
    for (size_t k : {size_t(0), size_t(40), size_t(N * C - 1)}) {
        Vec xp = x, xm = x;
        xp[k] += h, xm[k] -= h;
        EXPECT_NEAR(dx[k], (loss(xp, w) - loss(xm, w)) / (2 * h), 2e-3) << k;
    }
    for (int k : {0, 17, C - 1}) {
        Vec wp = w, wm = w;
        wp[size_t(k)] += h, wm[size_t(k)] -= h;
        EXPECT_NEAR(dw[size_t(k)], (loss(x, wp) - loss(x, wm)) / (2 * h), 2e-3) << k;
    }
    // bf16 rows: the fp32 kernel on the widened rows, rounded once
    std::vector<unsigned short> xb(x.size()), yb(x.size());
    convert_from_f32(xb.data(), DType::BF16, x.data(), x.size());
    Vec xw(x.size()), yw(x.size()), y16(x.size()), r16(N);
    convert_to_f32(xw.data(), xb.data(), DType::BF16, x.size());
    rmsnorm_forward(yw.data(), DType::F32, rstd.data(), xw.data(), DType::F32, w.data(), N, C, eps);
    rmsnorm_forward(yb.data(), DType::BF16, r16.data(), xb.data(), DType::BF16, w.data(), N, C, eps);
    convert_to_f32(y16.data(), yb.data(), DType::BF16, x.size());
    std::vector<unsigned short> want(x.size());
    convert_from_f32(want.data(), DType::BF16, yw.data(), x.size());
    EXPECT_EQ(yb, want);
    EXPECT_EQ(r16, rstd);
}

// --- rotary embeddings -------------------------------------------------------------------------------

TEST(Rope, RotatesPairsByPositionAndBackwardIsTheInverse) {
    const int B = 2, T = 7, heads = 3, HS = 8, stride = 40, col0 = 5;  // heads inside a wider row
    const float theta = 10000.0f;
    const Vec x = randn(size_t(B) * T * stride, 4);
    Vec y = x;
    rope_forward(y.data(), DType::F32, B * T, T, 3, size_t(stride), col0, heads, HS, theta);
    for (int r = 0; r < B * T; r++) {
        const int pos = 3 + r % T;
        for (int c = 0; c < stride; c++) {
            const size_t k = size_t(r) * stride + c;
            if (c < col0 || c >= col0 + heads * HS) {
                EXPECT_EQ(y[k], x[k]) << "outside the heads";
                continue;
            }
            const int e = (c - col0) % HS, i = e % (HS / 2), base = c - e;
            const double a = pos * std::pow(double(theta), -2.0 * i / HS);
            const double x1 = x[size_t(r) * stride + base + i], x2 = x[size_t(r) * stride + base + i + HS / 2];
            const double want = e < HS / 2 ? x1 * std::cos(a) - x2 * std::sin(a) : x2 * std::cos(a) + x1 * std::sin(a);
            EXPECT_NEAR(y[k], want, 2e-6) << r << " " << c;
        }
    }
    // the rotation is orthogonal: its transpose (backward) undoes it
    rope_backward(y.data(), B * T, T, 3, size_t(stride), col0, heads, HS, theta);
    EXPECT_LE(max_abs_diff(y, x), 2e-6f);
}

// --- SwiGLU ------------------------------------------------------------------------------------------

TEST(SwiGlu, ForwardAndBackwardAgainstFiniteDifferences) {
    const int N = 3, F = 21;
    const Vec gu = randn(size_t(N) * 2 * F, 5, 2.0f), dh = randn(size_t(N) * F, 6);
    Vec h(size_t(N) * F), dgu(gu.size());
    swiglu_forward(h.data(), gu.data(), DType::F32, N, F);
    swiglu_backward(dgu.data(), dh.data(), gu.data(), DType::F32, N, F);
    auto f = [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; };
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            const double g = gu[size_t(n) * 2 * F + i], u = gu[size_t(n) * 2 * F + F + i], d = dh[size_t(n) * F + i];
            EXPECT_NEAR(h[size_t(n) * F + i], f(g, u), 1e-5 * (1 + std::fabs(f(g, u))));
            const double e = 1e-4;
            EXPECT_NEAR(dgu[size_t(n) * 2 * F + i], d * (f(g + e, u) - f(g - e, u)) / (2 * e), 1e-4);
            EXPECT_NEAR(dgu[size_t(n) * 2 * F + F + i], d * (f(g, u + e) - f(g, u - e)) / (2 * e), 1e-4);
        }
}

// --- grouped-query attention ---------------------------------------------------------------------------

// qkv rows [q (NH HS) | k (NKV HS) | v (NKV HS)] -> multi-head rows [q | k repeated | v repeated]
Vec repeat_kv(const Vec& qkv, int N, int NH, int NKV, int HS) {
    const int C = NH * HS, KVC = NKV * HS, W = C + 2 * KVC, G = NH / NKV;
    Vec out(size_t(N) * 3 * C);
    for (int r = 0; r < N; r++) {
        const float* src = &qkv[size_t(r) * W];
        float* dst = &out[size_t(r) * 3 * C];
        std::copy(src, src + C, dst);
        for (int h = 0; h < NH; h++)
            for (int e = 0; e < HS; e++) {
                dst[C + h * HS + e] = src[C + (h / G) * HS + e];
                dst[2 * C + h * HS + e] = src[C + KVC + (h / G) * HS + e];
            }
    }
    return out;
}

TEST(GroupedQueryAttention, EqualsMultiHeadOnRepeatedKeysAndValues) {
    const int B = 2, T = 70, NH = 6, NKV = 2, HS = 8, C = NH * HS, KVC = NKV * HS, W = C + 2 * KVC, G = NH / NKV;
    const int N = B * T;
    const Vec qkv = randn(size_t(N) * W, 7), dout = randn(size_t(N) * C, 8);
    const Vec mha = repeat_kv(qkv, N, NH, NKV, HS);
    Vec out(size_t(N) * C), ref(size_t(N) * C), att(size_t(B) * NH * T * T), att_ref(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    attention_forward(ref.data(), att_ref.data(), mha.data(), B, T, C, NH);
    EXPECT_LE(max_abs_diff(out, ref), 1e-6f);
    Vec scratch(attention_scratch_floats(T, 8)), d(size_t(N) * W), dref(size_t(N) * 3 * C);
    attention_backward(d.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
    attention_backward(dref.data(), scratch.data(), dout.data(), mha.data(), att_ref.data(), B, T, C, NH);
    float worst = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < W; c++) {
            double want = 0;
            if (c < C) {
                want = dref[size_t(r) * 3 * C + c];
            } else {  // a key/value head's gradient: the sum over the query heads that share it
                const bool k = c < C + KVC;
                const int kh = (c - C - (k ? 0 : KVC)) / HS, e = (c - C) % HS;
                for (int h = kh * G; h < (kh + 1) * G; h++) want += dref[size_t(r) * 3 * C + (k ? C : 2 * C) + h * HS + e];
            }
            worst = std::max(worst, float(std::fabs(d[size_t(r) * W + c] - want)));
        }
    EXPECT_LE(worst, 1e-5f);
    // decoding: the cached kernel over the key/value heads only, one position at a time
    const int T1 = 9;
    Vec kc(size_t(T1) * KVC), vc(size_t(T1) * KVC), scores(T1), o1(static_cast<size_t>(C)), full(size_t(T1) * C),
        a1(size_t(NH) * T1 * T1);
    attention_forward(full.data(), a1.data(), qkv.data(), 1, T1, C, NH, NKV);
    for (int t = 0; t < T1; t++) {
        attention_forward_cached(o1.data(), &qkv[size_t(t) * W], kc.data(), vc.data(), t, 1, C, NH, scores.data(), NKV);
        for (int c = 0; c < C; c++) EXPECT_NEAR(o1[size_t(c)], full[size_t(t) * C + c], 1e-5) << t;
    }
}

}  // namespace
