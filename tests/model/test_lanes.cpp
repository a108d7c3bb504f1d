// Lanes (model/units.h): the threads of a rank sharing a micro-batch by sequences must compute what
// one lane (every kernel over all threads) computes: the same losses and every parameter gradient, in
// every number format and recomputation mode, with gradient accumulation, for micro-batches that do
// not split evenly; and bit for bit the same from run to run, whichever lane takes which item.
// The split backward (B of two micro-batches, then their deferred W: zero-bubble pipelines) computes
// every gradient bit for bit as the whole backward does.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/model/part.h"
#include "shardlm/model/weights.h"

namespace {

using namespace shardlm;
using model::Recompute;

struct Case {
    DType precision;
    kernels::MatmulPrecision products;
    Recompute recompute;
    int B, T;
    float tol;  // of the largest gradient (measured: fp32 ~1e-6, bf16 0, fp16 ~5e-5 of it)
    std::string name() const {
        return std::string(precision == DType::F32 ? "fp32" : precision == DType::BF16 ? "bf16" : "fp16") +
               (products == kernels::MatmulPrecision::bf16 ? "_bf16products" : "") + "_" +
               model::recompute_name(recompute) + "_B" + std::to_string(B) + "_T" + std::to_string(T);
    }
};

model::GptConfig tiny(int n_embd = 80) {
    model::GptConfig c;
    c.name = "lanes-test";
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = n_embd;  // 80: head dim 20; output blocks of 16 do not divide 3C = 240 evenly into lanes
    c.vocab_size = 301;
    c.n_ctx = 64;
    return c;
}

struct Result {
    std::vector<double> losses;
    std::vector<float> grads;
};

// Two micro-batches (the second accumulates) through a part with `lanes` lanes and `threads` threads.
// split: both forwards, both B, then both W (two activation slots), as ZB-H1's last stage runs them.
Result run(const Case& k, int lanes, bool split = false, int threads = 2, int n_embd = 80) {
    struct Threads {  // the OpenMP team the part's kernels (and its W's lanes) get, restored after
        int before = omp_get_max_threads();
        explicit Threads(int n) { omp_set_num_threads(n); }
        ~Threads() { omp_set_num_threads(before); }
    } team(threads);
    const model::GptConfig cfg = tiny(n_embd);
    model::ModelPart::Options o;
    o.threads = threads;
    o.lanes = lanes;
    precision_policy_from_name(k.precision == DType::F32 ? "fp32" : k.precision == DType::BF16 ? "bf16" : "fp16",
                               &o.precision);
    o.recompute = k.recompute;
    o.defer_weight_grads = split;
    if (split) o.slots = {2};
    model::ModelPart part(cfg, o, k.B, k.T);
    if (k.precision == DType::F32) part.set_matmul_precision(k.products);
    const size_t n = part.layout().total;
    AlignedBuffer<float> params(n), grads(n);
    model::init_gpt2_weights(params.data(), part.layout(), 7);
    AlignedBuffer<unsigned char> p16(n * dtype_bytes(k.precision));
    void* bound = params.data();
    if (k.precision != DType::F32) {
        convert_from_f32(p16.data(), k.precision, params.data(), n);
        bound = p16.data();
    }
    part.bind(bound, grads.data());
    const int N = k.B * k.T;
    Result r;
    for (int micro = 0; micro < 2; micro++) {
        std::vector<int> in(size_t(N) + 1);
        for (size_t i = 0; i < in.size(); i++) in[i] = int((i * 37 + size_t(micro) * 11 + i * i) % size_t(cfg.vocab_size));
        r.losses.push_back(part.forward(0, split ? micro : 0, in.data(), in.data() + 1, k.B, k.T, 1.0f / float(N)) / N);
        if (!split) part.backward(0, 0, nullptr, micro > 0);
    }
    if (split) {
        part.backward_input(0, 0);
        part.backward_input(0, 1);
        part.backward_weight(0, 0, nullptr, false);
        part.backward_weight(0, 1, nullptr, true);
    }
    r.grads.assign(grads.data(), grads.data() + n);
    return r;
}

class Lanes : public ::testing::TestWithParam<Case> {};

TEST_P(Lanes, EqualOneLane) {
    const Case& k = GetParam();
    const Result one = run(k, 1), two = run(k, 2);
    for (size_t i = 0; i < one.losses.size(); i++)
        EXPECT_NEAR(two.losses[i], one.losses[i], k.tol * std::fabs(one.losses[i])) << "micro-batch " << i;
    float scale = 0.0f, worst = 0.0f;
    size_t at = 0;
    for (size_t i = 0; i < one.grads.size(); i++) {
        scale = std::max(scale, std::fabs(one.grads[i]));
        const float e = std::fabs(two.grads[i] - one.grads[i]);
        if (!(e <= worst)) worst = e, at = i;
    }
    ASSERT_GT(scale, 0.0f);
    EXPECT_LE(worst, k.tol * scale) << "gradient element " << at << ": two lanes " << two.grads[at] << ", one "
                                    << one.grads[at];
}

TEST_P(Lanes, BitIdenticalFromRunToRun) {
    const Case& k = GetParam();
    const Result a = run(k, 2), b = run(k, 2);
    EXPECT_EQ(a.losses, b.losses);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)));
}

TEST_P(Lanes, SplitBackwardEqualsWholeBackwardToTheBit) {
    const Case& k = GetParam();
    if (k.recompute == Recompute::Full) GTEST_SKIP() << "a deferred W needs the block's activations: refused";
    for (int lanes : {1, 2}) {
        const Result whole = run(k, lanes), split = run(k, lanes, true);
        EXPECT_EQ(whole.losses, split.losses) << lanes << " lanes";
        ASSERT_EQ(whole.grads.size(), split.grads.size());
        EXPECT_EQ(0, std::memcmp(whole.grads.data(), split.grads.data(), whole.grads.size() * sizeof(float)))
            << lanes << " lanes";
    }
}

// One lane (the kernel split: every kernel over the threads; the weight gradients on the threads as
// lanes) gives the same bits on one thread and on two: fp32 products and every other kernel do not
// depend on the threads, and the weight gradients' blocks do not depend on the lanes (C = 272: the MLP's
// 1088 output rows in blocks of 512, 512 and 64).
TEST_P(Lanes, KernelSplitBitsDoNotDependOnTheThreads) {
    const Case& k = GetParam();
    if (k.precision != DType::F32 || k.products != kernels::MatmulPrecision::fp32)
        GTEST_SKIP() << "16-bit products on oneDNN run on its own threads: held to their noise (EqualOneLane)";
    const Result one = run(k, 1, false, 1, 272), two = run(k, 1, false, 2, 272);
    EXPECT_EQ(one.losses, two.losses);
    ASSERT_EQ(one.grads.size(), two.grads.size());
    EXPECT_EQ(0, std::memcmp(one.grads.data(), two.grads.data(), one.grads.size() * sizeof(float)));
}

TEST(SplitBackward, RefusesFullRecomputationAndOutOfOrderCalls) {
    model::ModelPart::Options o;
    o.recompute = Recompute::Full;
    o.defer_weight_grads = true;
    try {
        model::ModelPart part(tiny(), o, 2, 8);
        FAIL() << "full recomputation with a deferred W was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--recompute selective"), std::string::npos) << e.what();
    }
    o.recompute = Recompute::None;
    model::ModelPart part(tiny(), o, 2, 8);
    AlignedBuffer<float> params(part.layout().total), grads(part.layout().total);
    model::init_gpt2_weights(params.data(), part.layout(), 7);
    part.bind(params.data(), grads.data());
    std::vector<int> in(17, 3);
    EXPECT_THROW(part.backward_weight(0, 0, nullptr, false), Error);  // no B yet
    part.forward(0, 0, in.data(), in.data() + 1, 2, 8, 1.0f);
    part.backward_input(0, 0);
    EXPECT_THROW(part.forward(0, 0, in.data(), in.data() + 1, 2, 8, 1.0f), Error);  // its W is pending
    part.backward_weight(0, 0, nullptr, false);
    part.forward(0, 0, in.data(), in.data() + 1, 2, 8, 1.0f);
}

using kernels::MatmulPrecision;
INSTANTIATE_TEST_SUITE_P(
    All, Lanes,
    ::testing::Values(Case{DType::F32, MatmulPrecision::fp32, Recompute::None, 6, 40, 1e-5f},
                      Case{DType::F32, MatmulPrecision::fp32, Recompute::None, 3, 13, 1e-5f},  // groups 2 + 1
                      Case{DType::F32, MatmulPrecision::fp32, Recompute::Full, 5, 32, 1e-5f},
                      Case{DType::F32, MatmulPrecision::fp32, Recompute::Selective, 4, 24, 1e-5f},
                      // bf16 products: an fp32 difference upstream can flip an operand's bf16 rounding
                      // (measured 2e-4 of the largest gradient with the AVX2 machines' sgemm-widened products, < 1e-5 on oneDNN's)
                      Case{DType::F32, MatmulPrecision::bf16, Recompute::None, 4, 40, 5e-4f},
                      Case{DType::BF16, MatmulPrecision::fp32, Recompute::None, 6, 40, 1e-3f},
                      Case{DType::BF16, MatmulPrecision::fp32, Recompute::Selective, 3, 40, 1e-3f},
                      Case{DType::F16, MatmulPrecision::fp32, Recompute::Full, 4, 40, 2e-3f},
                      Case{DType::F32, MatmulPrecision::fp32, Recompute::None, 1, 40, 0.0f}),  // one lane
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

}  // namespace
