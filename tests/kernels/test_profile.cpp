// core/profile.h through the kernels that report to it: off, nothing is recorded; on, each kernel call
// is counted once with the FLOPs and bytes it states, a kernel called inside another counts as the outer
// one, and take() empties the tables.
#include <gtest/gtest.h>

#include <vector>

#include "kernel_test_util.h"
#include "shardlm/core/profile.h"
#include "shardlm/kernels/layernorm.h"
#include "shardlm/kernels/gemm/gemm.h"

namespace {

using namespace shardlm;
using shardlm::test::randn;

TEST(Profile, CountsEachKernelOnceWithItsFlopsAndBytes) {
    const int N = 8, C = 32, OC = 48;
    const auto x = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), g = randn(size_t(N) * OC, 3);
    std::vector<float> y(size_t(N) * OC), mean(N), rstd(N), ln(size_t(N) * C), dx(size_t(N) * C), dw(size_t(OC) * C),
        db(OC, 0.0f), gamma(C, 1.0f), beta(C, 0.0f);
    profile::take();
    kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);
    EXPECT_TRUE(profile::take().empty()) << "recorded while off";
    profile::enable(true);
    kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);
    kernels::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, C, 1e-5f);
    kernels::layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, C, 1e-5f);
    // matmul_backward runs bias_backward inside: counted as the matmul's
    kernels::matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, OC);
    profile::enable(false);
    const auto t = profile::take();
    ASSERT_EQ(t.count("matmul forward"), 1u);
    EXPECT_EQ(t.at("matmul forward").calls, 1);
    EXPECT_DOUBLE_EQ(t.at("matmul forward").flops, 2.0 * N * C * OC);
    EXPECT_GT(t.at("matmul forward").seconds, 0.0);
    ASSERT_EQ(t.count("layernorm forward"), 1u);
    EXPECT_EQ(t.at("layernorm forward").calls, 2);
    EXPECT_DOUBLE_EQ(t.at("layernorm forward").bytes, 2 * 8.0 * N * C);
    ASSERT_EQ(t.count("matmul backward"), 1u);
    EXPECT_DOUBLE_EQ(t.at("matmul backward").flops, 2 * 2.0 * N * C * OC);
    EXPECT_EQ(t.count("bias backward"), 0u);
    EXPECT_TRUE(profile::take().empty());
}

// By shape (bench_train_step --profile 2): the matmul kernels step aside and each product counts under its
// own shape, so the bias's sum counts on its own; off again, the kernels count as before.
TEST(Profile, ByShapeCountsEachProductUnderItsShape) {
    const int N = 8, C = 32, OC = 48;
    const auto x = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), g = randn(size_t(N) * OC, 3);
    std::vector<float> y(size_t(N) * OC), dx(size_t(N) * C), dw(size_t(OC) * C), db(OC, 0.0f);
    profile::take();
    EXPECT_EQ(profile::shape("fp32", 'N', 'T', N, OC, C), nullptr) << "a name while off";
    profile::set_by_shape(true);
    profile::enable(true);
    EXPECT_EQ(profile::shape("fp32", 'N', 'T', N, OC, C), profile::shape("fp32", 'N', 'T', N, OC, C)) << "one name a shape";
    kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);
    kernels::matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, OC);
    // a bf16 product under its shape and the library that ran it (the library default: OpenBLAS, widened)
    kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC, false, kernels::MatmulPrecision::bf16);
    profile::enable(false);
    profile::set_by_shape(false);
    const auto t = profile::take();
    ASSERT_EQ(t.count("bf16 ff>f openblas NT 8x48x32"), 1u);
    EXPECT_EQ(t.count("matmul forward"), 0u);
    EXPECT_EQ(t.count("matmul backward"), 0u);
    for (const char* name : {"fp32 NT 8x48x32", "fp32 NN 8x32x48", "fp32 TN 48x32x8"}) {
        ASSERT_EQ(t.count(name), 1u) << name;
        EXPECT_EQ(t.at(name).calls, 1) << name;
        EXPECT_DOUBLE_EQ(t.at(name).flops, 2.0 * N * C * OC) << name;
    }
    ASSERT_EQ(t.count("bias backward"), 1u);
    profile::enable(true);
    kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, OC);
    profile::enable(false);
    EXPECT_EQ(profile::take().count("matmul forward"), 1u);
}

}  // namespace
