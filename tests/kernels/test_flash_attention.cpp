// The fused causal attention (kernels/flash_attention.h) against the materialized kernel
// (kernels/attention.h): the same output and gradients to fp32 rounding, on shapes that do and do
// not fill the 64 x 96 tiles, with multi-head and grouped-query heads, in fp32 and with bf16 inputs,
// its tiles on the native kernels (packed operands) and on sgemm_tile (OpenBLAS); and the row statistics
// it keeps are the log-sum-exp of the scaled scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "shardlm/core/dtype.h"
#include "shardlm/kernels/attention.h"
#include "shardlm/kernels/flash_attention.h"
#include "shardlm/kernels/gemm/gemm.h"

#include "kernel_test_util.h"

namespace {

using shardlm::test::randn;
using shardlm::test::rel_diff;

using namespace shardlm;
using namespace shardlm::kernels;
using Vec = std::vector<float>;



class FlashAttention : public ::testing::TestWithParam<std::tuple<int, int, int, int>> {};  // B, T, NH, NKV

TEST_P(FlashAttention, EqualsTheMaterializedKernelToFp32Rounding) {
  for (GemmBackend be : {GemmBackend::OpenBlas, GemmBackend::Native}) {
    const GemmBackend saved = gemm_backend();
    set_gemm_backend(be);
    SCOPED_TRACE(setting_text(be));
    const auto [B, T, NH, NKV] = GetParam();
    const int HS = T > 100 ? 64 : 16, C = NH * HS, KVC = NKV * HS, W = C + 2 * KVC;
    const Vec qkv = randn(size_t(B) * T * W, 7 + T, 1.0f), dout = randn(size_t(B) * T * C, 11 + T, 1.0f);
    Vec out_m(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv_m(qkv.size());
    Vec out_f(out_m.size()), lse(size_t(B) * NH * T), dqkv_f(qkv.size(), 123.0f);  // dqkv: every entry written
    Vec scratch(attention_scratch_floats(T, 64));
    attention_forward(out_m.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    attention_backward(dqkv_m.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
    flash_attention_forward(out_f.data(), lse.data(), qkv.data(), DType::F32, B, T, C, NH, NKV);
    flash_attention_backward(dqkv_f.data(), dout.data(), qkv.data(), out_f.data(), lse.data(), DType::F32, B, T, C, NH,
                             NKV);
    EXPECT_LT(rel_diff(out_f, out_m), 2e-6f);
    EXPECT_LT(rel_diff(dqkv_f, dqkv_m), 1e-5f);
    // lse: log sum_j<=i exp(q_i . k_j / sqrt(HS)), from the scores directly
    const float scale = 1.0f / std::sqrt(float(HS));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i : {0, T / 2, T - 1}) {
                double m = -1e30, s = 0;
                std::vector<double> sc(size_t(i) + 1);
                for (int j = 0; j <= i; j++) {
                    double x = 0;
                    for (int e = 0; e < HS; e++)
                        x += double(qkv[(size_t(b) * T + i) * W + size_t(h) * HS + e]) *
                             qkv[(size_t(b) * T + j) * W + C + size_t(h / (NH / NKV)) * HS + e];
                    sc[size_t(j)] = x * scale, m = std::max(m, sc[size_t(j)]);
                }
                for (double x : sc) s += std::exp(x - m);
                EXPECT_NEAR(lse[(size_t(b) * NH + h) * T + i], m + std::log(s), 1e-4) << b << " " << h << " " << i;
            }
    set_gemm_backend(saved);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttention,
                         ::testing::Values(std::make_tuple(1, 1, 2, 2), std::make_tuple(2, 5, 2, 2),
                                           std::make_tuple(1, 64, 4, 4), std::make_tuple(2, 65, 4, 2),
                                           std::make_tuple(1, 97, 2, 2), std::make_tuple(1, 130, 4, 1),
                                           std::make_tuple(2, 200, 6, 3), std::make_tuple(1, 257, 2, 2)));

// bf16 inputs: the same as the fp32 kernels fed the rounded values, to fp32 rounding (the output,
// itself rounded to bf16, within a bf16 step)
TEST(FlashAttentionMixed, Bf16InputsEqualTheFp32KernelOnTheRoundedValues) {
    const int B = 2, T = 150, NH = 4, NKV = 2, HS = 16, C = NH * HS, W = C + 2 * NKV * HS;
    Vec qkv = randn(size_t(B) * T * W, 3, 1.0f);
    std::vector<uint16_t> q16(qkv.size());
    for (size_t i = 0; i < qkv.size(); i++) q16[i] = f32_to_bf16(qkv[i]), qkv[i] = bf16_to_f32(q16[i]);
    const Vec dout = randn(size_t(B) * T * C, 5, 1.0f);
    Vec out(size_t(B) * T * C), lse(size_t(B) * NH * T), dqkv(qkv.size());
    flash_attention_forward(out.data(), lse.data(), qkv.data(), DType::F32, B, T, C, NH, NKV);
    flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), DType::F32, B, T, C, NH, NKV);
    std::vector<uint16_t> out16(out.size());
    Vec lse16(lse.size()), dqkv16(qkv.size());
    flash_attention_forward(out16.data(), lse16.data(), q16.data(), DType::BF16, B, T, C, NH, NKV);
    Vec out16f(out.size());
    for (size_t i = 0; i < out.size(); i++) out16f[i] = bf16_to_f32(out16[i]);
    EXPECT_LT(rel_diff(out16f, out), 1.0f / 128);
    EXPECT_LT(rel_diff(lse16, lse), 1e-6f);
    flash_attention_backward(dqkv16.data(), dout.data(), q16.data(), out16.data(), lse16.data(), DType::BF16, B, T, C, NH,
                             NKV);
    // D = dO . O uses the rounded output: the gradients move by about a bf16 step of it
    EXPECT_LT(rel_diff(dqkv16, dqkv), 2e-2f);
}

}  // namespace
