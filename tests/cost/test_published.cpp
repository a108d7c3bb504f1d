// The seeds' published statements (issue 12, item 3) against cost/: parameter counts, model-state
// and activation bytes, the utilisation estimate. Expected values are the published numbers, not
// the formulas re-typed.
#include <gtest/gtest.h>

#include "shardlm/cost/flops.h"
#include "shardlm/cost/memory.h"
#include "shardlm/cost/shape.h"

namespace {

using namespace shardlm::cost;

const ModelShape kGpt3 = gpt_shape("gpt3-175b", 96, 12288, 96, 50257, 2048);  // seed 002, table 2.1

TEST(Seed002, Gpt3Has700GBOfFp32ParametersAnd700GBOfGradientsAnd1point4TBOfAdamState) {
    // "its model consumes 4 x 175 x 10^9 Bytes = 700 GB. Its gradient takes 700 GB; optimizer states 1.4 TB"
    const ModelStateBytes b = model_state_bytes(double(total_params(kGpt3)), kAdamFp32, 0, 1);
    EXPECT_NEAR(b.params / 1e9, 700, 7);
    EXPECT_NEAR(b.grads / 1e9, 700, 7);
    EXPECT_NEAR(b.optimizer / 1e12, 1.4, 0.014);
}

TEST(Seed002, Gpt3ActivationsAre444GBAtBatch1) {
    // "GPT has sequence length s = 2048. When b = 1, its activation takes 444 GB, 63% of the model.
    //  When b = 128, its activation is 81 times of the model size"
    const double model = 4 * double(total_params(kGpt3));
    const double act1 = activation_bytes_seed002(kGpt3, 1, 2048);
    EXPECT_NEAR(act1 / 1e9, 444, 1);
    EXPECT_NEAR(act1 / model, 0.63, 0.01);
    EXPECT_NEAR(activation_bytes_seed002(kGpt3, 128, 2048) / model, 81, 0.5);
}

TEST(Seed000, TenBillionParametersInPureBf16Take80GBOfModelStates) {
    // table 1: parameters 20 GB, gradients 20 GB, first and second moments 20 GB each, total 80 GB
    const ModelStateBytes b = model_state_bytes(10e9, kAdamPure16, 0, 1);
    EXPECT_DOUBLE_EQ(b.params / 1e9, 20);
    EXPECT_DOUBLE_EQ(b.grads / 1e9, 20);
    EXPECT_DOUBLE_EQ(b.optimizer / 1e9, 40);
    EXPECT_DOUBLE_EQ(b.total() / 1e9, 80);
}

TEST(Seed001, OneBillionParametersWithMixedPrecisionAdamTake20GBPerGpu) {
    // "FP16 parameter: 2M bytes, FP16 gradients: 2M bytes, FP32 optimizer states (gradients, variance,
    //  momentum, parameters): 16M bytes. Example 1B parameter model -> 20GB/GPU" (no ZeRO)
    EXPECT_DOUBLE_EQ(model_state_bytes(1e9, kAdamMixedFp32Grads, 0, 8).total() / 1e9, 20);
    // The ZeRO paper's accounting (K = 12: no fp32 gradient copy) gives 16 GB; that is the planner's.
    EXPECT_DOUBLE_EQ(model_state_bytes(1e9, kAdamMixed, 0, 8).total() / 1e9, 16);
}

TEST(ZeroPaper, SevenPointFiveBillionOn64GpusTakes120And31point4And16point6And1point9GB) {
    // Rajbhandari et al. 2020, figure 1 (seed 001's ZeRO stages): Psi = 7.5B, K = 12, N_d = 64
    const double expected[4] = {120, 31.4, 16.6, 1.9};
    for (int stage = 0; stage < 4; stage++)
        EXPECT_NEAR(model_state_bytes(7.5e9, kAdamMixed, stage, 64).total() / 1e9, expected[stage], 0.05) << stage;
}

TEST(Seed002, LlamaParameterEstimatesAndActualCounts) {
    // seed 002's table: 12 l h^2 + 2 v h ("预估参数量") and the actual sizes ("实际参数量")
    struct Row {
        int layers, hidden, heads, ffn;
        int64_t estimate;
        double actual_billions;
    };
    const Row rows[] = {{32, 4096, 32, 11008, 6704594944, 6.7},
                        {40, 5120, 40, 13824, 12910592000, 13.0},
                        {60, 6656, 52, 17920, 32323665920, 32.5},
                        {80, 8192, 64, 22016, 64948797440, 65.2}};
    for (const Row& r : rows) {
        const ModelShape m = llama_shape("llama", r.layers, r.hidden, r.heads, r.heads, r.ffn, 32000, 2048);
        EXPECT_EQ(estimate_params_12lh2_2vh(m), r.estimate) << r.hidden;
        // SwiGLU, RMSNorm, untied head; the table truncates to one decimal (65,285,660,672 -> 65.2B)
        const double billions = double(total_params(m)) / 1e9;
        EXPECT_GE(billions, r.actual_billions) << r.hidden;
        EXPECT_LT(billions, r.actual_billions + 0.1) << r.hidden;
        EXPECT_EQ(llama_default_ffn(r.hidden), r.ffn) << r.hidden;
    }
}

TEST(Seed002, Gpt3UtilisationEstimateIs0point44) {
    // "GPT3-175B: 1024 A100 GPUs, 300B tokens, training time is 35 days:
    //  U = 8 x (300 x 10^9) x (175 x 10^9) / (1024 x (312 x 10^12) x (35 x 24 x 3600)) = 0.44"
    const double days = 24 * 3600.0;
    EXPECT_NEAR(utilisation_from_time(300e9, 175e9, 1024, 312e12, 35 * days), 0.44, 0.006);
    EXPECT_NEAR(training_time_s(300e9, 175e9, 1024, 312e12, 0.44) / days, 35, 0.5);
}

TEST(Megatron, HardwareFlopsWithFullRecomputationAreThePapersFormula) {
    // Narayanan et al. 2021, eq. 3 for GPT-3 175B at batch 1536: ours counts block by block
    const double tokens = 1536.0 * 2048;
    EXPECT_NEAR(hardware_flops_per_token(kGpt3, 2048, Recompute::Full) * tokens / megatron_flops_per_step(kGpt3, 1536, 2048),
                1.0, 1e-12);
    // and without recomputation PaLM's MFU convention 6 N + 12 l h s per token (Chowdhery et al. 2022,
    // appendix B), N without the position table (a lookup; the tied embedding counts once, as the head)
    const double N = double(total_params(kGpt3)) - 2048.0 * 12288;
    EXPECT_NEAR(model_flops_per_token(kGpt3, 2048) / (6 * N + 12.0 * 96 * 12288 * 2048), 1.0, 0.001);
}

}  // namespace
