// Mixed-precision kernels: with operands and activations stored in bf16 or fp16, every kernel equals
// the fp32 kernel run on the widened values and rounded the same way: to the bit where the fp32
// arithmetic is the same (LayerNorm, GELU, residual adds, embeddings, conversions), to fp32 rounding
// noise where the product runs on other kernels (oneDNN's bf16 GEMMs against sgemm) or the
// attention's probabilities are rounded before they multiply V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/dtype.h"
#include "shardlm/core/dtype_simd.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/encoder.h"
#include "shardlm/kernels/gelu.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"
#include "shardlm/kernels/optimizer_kernels.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;

using namespace shardlm;
using namespace shardlm::kernels;
using Vec = std::vector<float>;
using H = std::vector<unsigned short>;


H narrow(const Vec& x, DType t) {
    H h(x.size());
    convert_from_f32(h.data(), t, x.data(), x.size());
    return h;
}

Vec widen(const H& h, DType t) {
    Vec x(h.size());
    convert_to_f32(x.data(), h.data(), t, h.size());
    return x;
}

void expect_close(const char* what, const Vec& a, const Vec& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    float scale = 1.0f, worst = 0;
    size_t wi = 0;
    for (float x : b) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < a.size(); i++)
        if (std::fabs(a[i] - b[i]) > worst) worst = std::fabs(a[i] - b[i]), wi = i;
    EXPECT_LE(worst, tol * scale) << what << " element " << wi << ": " << a[wi] << " vs " << b[wi];
}

class Mixed : public ::testing::TestWithParam<DType> {};

TEST_P(Mixed, ConversionsMatchTheScalarOnesIncludingSpecials) {
    const DType t = GetParam();
    Vec x = randn(1000, 1, 3.0f);
    for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, 1e-30f, 7e4f, -1e9f, 65504.0f, 6e-8f}) x.push_back(s);
    const H h = narrow(x, t);
    for (size_t i = 0; i < x.size(); i++)
        EXPECT_EQ(h[i], t == DType::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i])) << x[i];
    const Vec back = widen(h, t);
    for (size_t i = 0; i < x.size(); i++)
        EXPECT_EQ(back[i], t == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i])) << x[i];
}

TEST_P(Mixed, LayerNormAndGeluEqualTheFp32KernelsOnWidenedValues) {
    const DType t = GetParam();
    const int N = 37, C = 71;
    const H x = narrow(randn(size_t(N) * C, 2, 2.0f), t);
    const Vec xw = widen(x, t), w = randn(C, 3), b = randn(C, 4);
    // forward: 16-bit in and out
    H y(x.size());
    Vec mean(N), rstd(N), ym(N), rm(N), yf(x.size());
    layernorm_forward(y.data(), t, mean.data(), rstd.data(), x.data(), t, w.data(), b.data(), N, C, 1e-5f);
    layernorm_forward(yf.data(), ym.data(), rm.data(), xw.data(), w.data(), b.data(), N, C, 1e-5f);
    EXPECT_EQ(y, narrow(yf, t));
    EXPECT_EQ(mean, ym);
    EXPECT_EQ(rstd, rm);
    // backward: 16-bit input, fp32 gradients (row blocks: the same column sums to rounding)
    const Vec dout = randn(x.size(), 5);
    Vec dx(x.size(), 0.5f), dw(C, 0.25f), db(C, 0.125f), dxf = dx, dwf = dw, dbf = db;
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), t, w.data(), mean.data(), rstd.data(), N, C);
    layernorm_backward(dxf.data(), dwf.data(), dbf.data(), dout.data(), xw.data(), w.data(), mean.data(), rstd.data(), N, C);
    EXPECT_EQ(dx, dxf);
    expect_close("dweight", dw, dwf, 1e-6f);
    expect_close("dbias", db, dbf, 1e-6f);
    // GELU
    H g(x.size());
    Vec gf(x.size()), dg(x.size()), dgf(x.size());
    gelu_forward(g.data(), x.data(), t, x.size());
    gelu_forward(gf.data(), xw.data(), x.size());
    EXPECT_EQ(g, narrow(gf, t));
    gelu_backward(dg.data(), x.data(), t, dout.data(), x.size());
    gelu_backward(dgf.data(), xw.data(), dout.data(), x.size());
    EXPECT_EQ(dg, dgf);
}

TEST_P(Mixed, ResidualAddAndEmbeddingsRoundOnce) {
    const DType t = GetParam();
    const int N = 13, C = 45, V = 17, T = 13;
    const H x = narrow(randn(size_t(N) * C, 6), t);
    const Vec bias = randn(C, 7), y = randn(size_t(N) * C, 8), xw = widen(x, t);
    H out(x.size());
    residual_add(out.data(), x.data(), t, bias.data(), y.data(), N, C);
    Vec ref(x.size());
    residual_add(ref.data(), xw.data(), bias.data(), y.data(), N, C);
    EXPECT_EQ(out, narrow(ref, t));
    // token + position embedding from a 16-bit copy of the tables
    const H wte = narrow(randn(size_t(V) * C, 9), t), wpe = narrow(randn(size_t(T) * C, 10), t);
    std::vector<int> tok(N);
    for (int i = 0; i < N; i++) tok[size_t(i)] = (i * 7 + 3) % V;
    H e(x.size());
    Vec ef(x.size());
    encoder_forward(e.data(), t, tok.data(), wte.data(), wpe.data(), t, 1, T, C);
    encoder_forward(ef.data(), tok.data(), widen(wte, t).data(), widen(wpe, t).data(), 1, T, C);
    EXPECT_EQ(e, narrow(ef, t));
}

TEST_P(Mixed, MatmulForwardAndBackwardOn16BitOperands) {
    const DType t = GetParam();
    const int N = 33, C = 50, OC = 47;
    const H in = narrow(randn(size_t(N) * C, 11), t), w = narrow(randn(size_t(OC) * C, 12, 0.2f), t);
    const Vec inw = widen(in, t), ww = widen(w, t), bias = randn(OC, 13);
    // forward into fp32 and into the 16-bit type
    Vec y(size_t(N) * OC), yf(y.size());
    matmul_forward(y.data(), DType::F32, in.data(), w.data(), t, bias.data(), N, C, OC);
    matmul_forward(yf.data(), inw.data(), ww.data(), bias.data(), N, C, OC);
    expect_close("forward", y, yf, 1e-5f);
    H y16(y.size());
    matmul_forward(y16.data(), t, in.data(), w.data(), t, bias.data(), N, C, OC);
    expect_close("forward, 16-bit out", widen(y16, t), yf, t == DType::BF16 ? 8e-3f : 1e-3f);
    // backward: fp32 dout, rounded to the operands' type for the bf16 products (fp16 ones are widened)
    const Vec dout = randn(y.size(), 14);
    Vec dx(size_t(N) * C), dw(size_t(OC) * C, 0.5f), db(OC, 0.25f), dxf = dx, dwf = dw, dbf = db;
    matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), t, N, C, OC, true);
    const Vec dq = t == DType::BF16 ? widen(narrow(dout, t), t) : dout;
    matmul_backward(dxf.data(), dwf.data(), nullptr, dq.data(), inw.data(), ww.data(), N, C, OC, true);
    bias_backward(dbf.data(), dout.data(), N, OC);
    expect_close("dinp", dx, dxf, 1e-5f);
    expect_close("dweight", dw, dwf, 1e-5f);
    EXPECT_EQ(db, dbf);
}

TEST_P(Mixed, AttentionMatchesFp32OnWidenedInputs) {
    const DType t = GetParam();
    const int B = 2, T = 70, C = 24, NH = 3;  // T over one 64-query block
    const H qkv = narrow(randn(size_t(B) * T * 3 * C, 15), t);
    const Vec qkvw = widen(qkv, t);
    H out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
    Vec outf(out.size()), attf(att.size());
    attention_forward(out.data(), att.data(), t, qkv.data(), t, B, T, C, NH);
    attention_forward(outf.data(), attf.data(), qkvw.data(), B, T, C, NH);
    // probabilities: rounded once
    const Vec attw = widen(att, t);
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) {
                const size_t k = (size_t(bh) * T + i) * T + j;
                ASSERT_EQ(attw[k], t == DType::BF16 ? bf16_to_f32(f32_to_bf16(attf[k])) : f16_to_f32(f32_to_f16(attf[k])));
            }
    // the output uses the rounded probabilities: 16-bit noise
    expect_close("attention output", widen(out, t), outf, t == DType::BF16 ? 2e-2f : 2e-3f);
    // backward from the same (rounded) probabilities equals the fp32 kernel on widened values
    const Vec dout = randn(outf.size(), 16);
    Vec dqkv(qkvw.size()), dqkvf(qkvw.size()), scratch(attention_scratch_floats(T, 4));
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), t, att.data(), t, B, T, C, NH);
    attention_backward(dqkvf.data(), scratch.data(), dout.data(), qkvw.data(), attw.data(), B, T, C, NH);
    expect_close("attention backward", dqkv, dqkvf, 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Types, Mixed, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace

// The software fp16 conversions (used where the compiler has no _Float16) equal the compiler's:
// every half widened, and narrowing on every float pattern with a stride, plus the boundaries.
TEST(Fp16Soft, EqualsTheCompilersConversions) {
#if defined(__FLT16_MAX__)
    auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
    for (uint32_t h = 0; h < 0x10000; h++) {
        const uint16_t h16 = uint16_t(h);
        _Float16 hf;
        std::memcpy(&hf, &h16, 2);
        const float want = static_cast<float>(hf), got = f16_to_f32_soft(h16);
        if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << h;
        else ASSERT_EQ(bits(got), bits(want)) << h;
    }
    auto narrow = [&](uint32_t u) {
        float f;
        std::memcpy(&f, &u, 4);
        _Float16 w = static_cast<_Float16>(f);
        uint16_t want;
        std::memcpy(&want, &w, 2);
        const uint16_t got = f32_to_f16_soft(f);
        if (std::isnan(f)) ASSERT_EQ(got & 0x7e00u, 0x7e00u) << std::hex << u;  // a quiet NaN
        else ASSERT_EQ(got, want) << std::hex << u;
    };
    for (uint64_t u = 0; u < 0x100000000ull; u += 997) narrow(uint32_t(u));
    // around every half's rounding boundary (ties, the largest finite, the subnormal range)
    for (uint32_t h = 0; h < 0x7c00; h++)
        for (uint32_t s : {0u, 0x80000000u}) {
            const uint32_t mid = bits(f16_to_f32_soft(uint16_t(h))) + (1u << 12);  // roughly halfway up
            for (int d = -2; d <= 2; d++) narrow((mid + uint32_t(d)) | s);
        }
    for (int q = 0; q < 1024; q++)  // subnormal ties: (q + 1/2) 2^-24
        for (float sgn : {1.0f, -1.0f}) narrow(bits(sgn * std::ldexp(float(q) + 0.5f, -24)));
    for (uint32_t u : {0x33000000u, 0x33000001u, 0x387fffffu, 0x38800000u, 0x477fefffu, 0x477ff000u, 0x7f800000u})
        narrow(u);
#else
    GTEST_SKIP() << "no _Float16 in this compiler to compare with";
#endif
}

// Adam and AdamW write the 16-bit copy of the parameters in their own pass: the same bits as the update
// followed by convert_from_f32, on slices whose heads and tails are not whole vectors.
TEST(MixedKernels, AdamWritesTheSixteenBitCopyInItsPass) {
    for (DType t : {DType::BF16, DType::F16})
        for (bool decoupled : {true, false})
            for (size_t n : {size_t(1), size_t(37), size_t(1000), size_t(4099)}) {
                const size_t skew = 3;  // p not 64-byte aligned
                Vec p0 = randn(n + skew, 1), g = randn(n + skew, 2), m0 = randn(n + skew, 3), v0 = randn(n + skew, 4);
                for (float& x : v0) x = x * x;
                Vec p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
                std::vector<uint16_t> fused(n + skew, 0), separate(n + skew, 0);
                auto update = [&](Vec& p, Vec& m, Vec& v, void* p16) {
                    auto f = decoupled ? adamw_update : adam_update;
                    f(p.data() + skew, g.data() + skew, m.data() + skew, v.data() + skew, n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                      0.1f, 3, 0.7f, p16, t);
                };
                update(p1, m1, v1, fused.data() + skew);
                update(p2, m2, v2, nullptr);
                convert_from_f32(separate.data() + skew, t, p2.data() + skew, n);
                EXPECT_EQ(p1, p2);
                EXPECT_EQ(m1, m2);
                EXPECT_EQ(v1, v2);
                EXPECT_EQ(fused, separate) << dtype_name(t) << " n " << n;
            }
}

// A step over many slices at once (the optimiser's one pass) gives each slice the bits of its own call: slices
// of any length and alignment, each with its weight decay and with or without a 16-bit copy, in Adam and AdamW.
// p, m and v start 64-byte aligned, so a slice's offset sets its head (peeled until p is aligned) and its body
// is streamed, except where m is one float off (mskew: not streamed).
TEST(MixedKernels, AdamOverManySlicesEqualsEachSliceAlone) {
    struct Part {
        size_t at, n;
        float wd;
        bool copy;
        size_t mskew = 0;
    };
    const std::vector<Part> parts = {
        {0, 1, 0.1f, false},       // aligned: a tail of one
        {5, 37, 0.0f, true},       // a head of 11, a body, a tail
        {49, 5, 0.1f, false},      // shorter than its head (15)
        {64, 16, 0.1f, true},      // a body only
        {90, 0, 0.1f, false},      // empty
        {97, 70000, 0.05f, true},  // a head of 15, then three runs of the body, streamed
        {70100, 4099, 0.0f, false},
        {74213, 33, 0.1f, true},
        {74400, 100, 0.1f, true, 1},  // m not aligned with p: the body not streamed
    };
    const size_t total = 74600;
    auto aligned = [&](const Vec& x) {  // a 64-byte aligned copy
        AlignedBuffer<float> b(total);
        std::copy(x.begin(), x.end(), b.data());
        return b;
    };
    auto same = [&](const AlignedBuffer<float>& a, const AlignedBuffer<float>& b) {
        return std::equal(a.data(), a.data() + total, b.data());
    };
    for (bool decoupled : {true, false}) {
        const Vec p0 = randn(total, 1), g = randn(total, 2), m0 = randn(total, 3);
        Vec v0 = randn(total, 4);
        for (float& x : v0) x = x * x;
        AlignedBuffer<float> p1 = aligned(p0), m1 = aligned(m0), v1 = aligned(v0);
        AlignedBuffer<float> p2 = aligned(p0), m2 = aligned(m0), v2 = aligned(v0);
        std::vector<uint16_t> c1(total, 0), c2(total, 0);
        std::vector<AdamSlice> slices;
        for (const Part& x : parts) {
            slices.push_back({p1.data() + x.at, g.data() + x.at, m1.data() + x.at + x.mskew, v1.data() + x.at, x.n, x.wd,
                              x.copy ? c1.data() + x.at : nullptr});
            auto one = decoupled ? adamw_update : adam_update;
            one(p2.data() + x.at, g.data() + x.at, m2.data() + x.at + x.mskew, v2.data() + x.at, x.n, 1e-3f, 0.9f, 0.95f,
                1e-8f, x.wd, 3, 0.7f, x.copy ? c2.data() + x.at : nullptr, DType::BF16);
        }
        adam_update_slices(slices.data(), slices.size(), decoupled, 1e-3f, 0.9f, 0.95f, 1e-8f, 3, 0.7f, DType::BF16);
        EXPECT_TRUE(same(p1, p2)) << "decoupled " << decoupled;
        EXPECT_TRUE(same(m1, m2));
        EXPECT_TRUE(same(v1, v2));
        EXPECT_EQ(c1, c2);
        EXPECT_FALSE(std::equal(p0.begin(), p0.end(), p1.data()));  // (the step did something)
    }
}

// Each rule's loop body as the one-tensor kernels had it (torch.optim's single-tensor algorithm, operation for
// operation), one element at a time
void reference_rule(const RuleArgs& a, float* p, const float* g, float* s0, float* s1, size_t n, float wd) {
    const float lr = a.lr, gs = a.gs, beta1 = a.beta1, beta2 = a.beta2, a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    const float decay = float(1.0 - double(lr) * wd);
    const double bc1 = 1.0 - std::pow(double(beta1), a.step), bc2 = 1.0 - std::pow(double(beta2), a.step);
    const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
    const double rho_t = rho_inf - 2.0 * a.step * std::pow(double(beta2), a.step) / bc2;
    const bool rectified = rho_t > 5.0;
    const float rect = rectified ? float(std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)))
                                 : 1.0f;
    const float bc1f = float(bc1), bc2_sqrt = float(std::sqrt(bc2));
    for (size_t i = 0; i < n; i++) {
        switch (a.rule) {
            case Rule::SGD: {
                float d = g[i] * gs + wd * p[i];
                p[i] -= lr * d;
                break;
            }
            case Rule::Momentum: {
                float d = g[i] * gs + wd * p[i];
                float b = a.momentum * s0[i] + d;
                s0[i] = b;
                p[i] -= lr * b;
                break;
            }
            case Rule::AdaGrad: {
                float d = g[i] * gs + wd * p[i];
                float s = s0[i] + d * d;
                s0[i] = s;
                p[i] -= lr * (d / (std::sqrt(s) + a.eps));
                break;
            }
            case Rule::RAdam: {
                const float d = g[i] * gs + wd * p[i];
                const float mi = beta1 * s0[i] + a1 * d, vi = beta2 * s1[i] + a2 * d * d;
                s0[i] = mi, s1[i] = vi;
                const float step_i = (mi / bc1f) * lr;
                p[i] -= rectified ? step_i * (bc2_sqrt / (std::sqrt(vi) + a.eps)) * rect : step_i;
                break;
            }
            case Rule::Lion: {
                const float gi = g[i] * gs, mi = s0[i];
                const float c = beta1 * mi + a1 * gi;
                const float sign = float(c > 0.0f) - float(c < 0.0f);
                p[i] = p[i] * decay - lr * sign;
                s0[i] = beta2 * mi + a2 * gi;
                break;
            }
            case Rule::Sophia: {
                const float mi = beta1 * s0[i] + a1 * (g[i] * gs);
                s0[i] = mi;
                const float ratio = std::min(std::fabs(mi) / (a.rho_bs * s1[i] + kSophiaEps), 1.0f);
                const float sign = float(mi > 0.0f) - float(mi < 0.0f);
                p[i] = p[i] * decay - lr * (sign * ratio);
                break;
            }
            case Rule::SophiaHessian: {
                const float gi = g[i] * gs;
                s1[i] = beta2 * s1[i] + a2 * (gi * gi);
                break;
            }
        }
    }
}

// The other rules (SGD, momentum, AdaGrad, RAdam in both phases, Lion, Sophia and its Hessian):
// - a buffer stepped as one slice and the same buffer cut into slices of odd lengths (other run boundaries,
//   other vector tails) get the same bits;
// - slices with their own weight decays, in one call or a call each, get the bits of the element-by-element
//   reference, except RAdam's parameters: compiled apart, the two loops round its last product and difference
//   differently (one FMA or two roundings: up to 224 units in the last place of a parameter near 0), so those
//   are held to 1e-6 absolute (the kernel's bits are the one-tensor kernel's before it: checkpoints compared
//   byte for byte, bench/RESULTS.md).
TEST(MixedKernels, RulesGiveTheSameBitsHoweverTheBufferIsSliced) {
    const size_t total = 74600;
    const std::vector<size_t> cuts = {0, 1, 6, 43, 43, 90, 70097, 70100, 74213, 74246, total};  // (one empty)
    const std::vector<float> wds = {0.1f, 0.0f, 0.05f, 0.1f, 0.0f, 0.3f, 0.1f, 0.0f, 0.02f, 0.1f};
    struct Case {
        Rule rule;
        int step;
    };
    for (const Case c : {Case{Rule::SGD, 1}, Case{Rule::Momentum, 1}, Case{Rule::AdaGrad, 1}, Case{Rule::RAdam, 2},
                         Case{Rule::RAdam, 9}, Case{Rule::Lion, 1}, Case{Rule::Sophia, 1}, Case{Rule::SophiaHessian, 1}}) {
        RuleArgs a;
        a.rule = c.rule, a.step = c.step, a.lr = 1e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.momentum = 0.9f;
        a.rho_bs = 0.04f * 256, a.gs = 0.7f;
        const Vec p0 = randn(total, 1), g = randn(total, 2);
        Vec m0 = randn(total, 3), v0 = randn(total, 4);
        for (float& x : v0) x = x * x;
        if (c.rule == Rule::AdaGrad) m0 = v0;  // (its state is a sum of squares)
        Vec p[5] = {p0, p0, p0, p0, p0}, m[5] = {m0, m0, m0, m0, m0}, v[5] = {v0, v0, v0, v0, v0};
        auto slice = [&](int k, size_t b, size_t e, float wd) {
            return RuleSlice{p[k].data() + b, g.data() + b, m[k].data() + b, v[k].data() + b, e - b, wd};
        };
        // 0: the reference, 1: one call, 2: a call per slice (each slice its own decay); 3: one slice, 4: the slices
        // in one call (one decay)
        std::vector<RuleSlice> parts, same_wd;
        for (size_t j = 0; j + 1 < cuts.size(); j++) {
            const RuleSlice x = slice(0, cuts[j], cuts[j + 1], wds[j]);
            reference_rule(a, x.p, x.g, x.s0, x.s1, x.n, x.wd);
            parts.push_back(slice(1, cuts[j], cuts[j + 1], wds[j]));
            const RuleSlice one = slice(2, cuts[j], cuts[j + 1], wds[j]);
            rule_update_slices(a, &one, 1);
            same_wd.push_back(slice(4, cuts[j], cuts[j + 1], 0.1f));
        }
        rule_update_slices(a, parts.data(), parts.size());
        const RuleSlice whole = slice(3, 0, total, 0.1f);
        rule_update_slices(a, &whole, 1);
        rule_update_slices(a, same_wd.data(), same_wd.size());
        const int r = int(c.rule);
        const std::string what = "rule " + std::to_string(r) + " step " + std::to_string(c.step);
        EXPECT_EQ(p[1], p[2]) << what << ": one call, a call per slice";
        EXPECT_EQ(p[3], p[4]) << what << ": one slice, its slices";
        EXPECT_EQ(m[3], m[4]) << what;
        EXPECT_EQ(v[3], v[4]) << what;
        for (int k : {1, 2}) {
            EXPECT_EQ(m[k], m[0]) << what << ": the reference's";
            EXPECT_EQ(v[k], v[0]) << what << ": the reference's";
        }
        if (c.rule != Rule::RAdam) {
            EXPECT_EQ(p[1], p[0]) << what << ": the reference's";
        } else {
            for (size_t i = 0; i < total; i++)
                ASSERT_NEAR(p[1][i], p[0][i], 1e-6f * std::max(1.0f, std::fabs(p[0][i]))) << what << " element " << i;
        }
        EXPECT_TRUE(p[0] != p0 || v[0] != v0) << what;  // (the step did something: the Hessian's moves only v)
        EXPECT_TRUE(p[3] != p0 || v[3] != v0) << what;
    }
}
