// cost/ against the published formulas it must reproduce: Korthikanti et al. 2022's activation
// memory per layer (tensor and sequence parallelism, selective and full recomputation, interleaved
// pipelines), the ring collectives' volumes and ZeRO's communication (Rajbhandari et al. 2020: stages
// 1 and 2 move what data parallelism moves, stage 3 1.5 times that).
#include <gtest/gtest.h>

#include "shardlm/cost/comm.h"
#include "shardlm/cost/memory.h"

namespace {

using namespace shardlm::cost;

// GPT-3 175B's block (Korthikanti et al. table 3 uses it): a = 96, h = 12288, s = 2048, b = 1.
const ModelShape kGpt3 = gpt_shape("gpt3-175b", 96, 12288, 96, 50257, 2048);
constexpr double s = 2048, b = 1, h = 12288, a = 96;

ActivationSpec spec(int tp, bool sp, Recompute r) {
    ActivationSpec x;
    x.micro_batch = 1, x.seq = 2048, x.tp = tp, x.sequence_parallel = sp, x.recompute = r;
    return x;
}

TEST(Korthikanti, ActivationBytesPerLayer) {
    for (int t : {1, 2, 4, 8}) {
        const double sbh = s * b * h;
        // eq. 1 / 2: s b h (10 + 24/t + 5 a s/(h t))
        EXPECT_DOUBLE_EQ(block_activation_bytes(kGpt3, spec(t, false, Recompute::None)), sbh * (10 + 24.0 / t + 5 * a * s / (h * t)));
        // eq. 4 (sequence parallel): s b h (34/t + 5 a s/(h t))
        EXPECT_DOUBLE_EQ(block_activation_bytes(kGpt3, spec(t, true, Recompute::None)), sbh * (34.0 / t + 5 * a * s / (h * t)));
        // eq. 6 (selective recomputation + sequence parallel): s b h 34/t
        EXPECT_DOUBLE_EQ(block_activation_bytes(kGpt3, spec(t, true, Recompute::Selective)), sbh * 34.0 / t);
        // full recomputation keeps the layer's input: 2 s b h
        EXPECT_DOUBLE_EQ(block_activation_bytes(kGpt3, spec(t, false, Recompute::Full)), 2 * sbh);
    }
    // t = 1: s b h (34 + 5 a s / h), the paper's eq. 1
    EXPECT_DOUBLE_EQ(block_activation_bytes(kGpt3, spec(1, false, Recompute::None)), s * b * h * (34 + 5 * a * s / h));
}

TEST(Korthikanti, FirstStageOfAnInterleavedPipelineHoldsL1PlusPMinus1OverPVLayers) {
    // sec. 4.2.3: with interleaving the first stage stores L (1 + (p - 1)/(p v)) layers' activations;
    // 1F1B (v = 1): L layers (p micro-batches of L/p layers); later stages fewer.
    const int L = 96, p = 8, v = 4;
    const double layers_per_chunk = double(L) / (p * v);
    EXPECT_DOUBLE_EQ(double(in_flight_chunks(Schedule::OneFOneB, 0, p, v, 64)) * layers_per_chunk, L * (1 + double(p - 1) / (p * v)));
    EXPECT_EQ(in_flight_chunks(Schedule::OneFOneB, 0, p, 1, 64), p);
    EXPECT_EQ(in_flight_chunks(Schedule::OneFOneB, p - 1, p, 1, 64), 1);
    EXPECT_EQ(in_flight_chunks(Schedule::OneFOneB, 0, p, 1, 3), 3);  // fewer micro-batches than stages
    EXPECT_EQ(in_flight_chunks(Schedule::GPipe, 0, p, 1, 64), 64);   // GPipe keeps all of them
}

TEST(Ring, BytesPerRank) {
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(Collective::AllReduce, 1000, 4), 1500);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(Collective::ReduceScatter, 1000, 4), 750);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(Collective::AllGather, 1000, 4), 750);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(Collective::AllReduce, 1000, 1), 0);
    const Link link{1e-6, 1e9};
    EXPECT_DOUBLE_EQ(collective_time_s(Collective::AllReduce, 1e9, 4, link), 6e-6 + 1.5);  // 2(n-1) steps
}

TEST(ZeroPaper, Stages1And2MoveWhatDataParallelismMovesAndStage3OneAndAHalfTimesThat) {
    const double psi = 7.5e9;
    const double dp = dp_bytes_per_rank(dp_traffic_per_step(0, psi, kAdamMixed, 1), 64);
    EXPECT_DOUBLE_EQ(dp, 2.0 * 63 / 64 * 2 * psi);  // 2 Psi (n - 1)/n, 2-byte gradients
    EXPECT_DOUBLE_EQ(dp_bytes_per_rank(dp_traffic_per_step(1, psi, kAdamMixed, 1), 64), dp);
    EXPECT_DOUBLE_EQ(dp_bytes_per_rank(dp_traffic_per_step(2, psi, kAdamMixed, 1), 64), dp);
    EXPECT_DOUBLE_EQ(dp_bytes_per_rank(dp_traffic_per_step(3, psi, kAdamMixed, 1), 64), 1.5 * dp);
}

// ZeRO's unit slots (the engine's parallel/zero.cpp): the embedding's and two of the largest other unit,
// 100 + 2 x 50 = 200 elements. Stage 3 gathers parameters into them (200 x 2 bytes) and stages 2-3
// reduce gradients through them, the unit's and this rank's quarter (250 x 4 bytes): only that part
// is the gradients', which the planner counts in the backward phase. Stage 1 with a narrower (2-byte)
// reduction stages the whole gradient, 1000 elements: 2000 bytes.
TEST(ZeroBuffers, TheGradientPartIsTheSlotsGradientAndSlice) {
    ZeroBufferSpec z;
    z.embedding_numel = 100, z.largest_unit = 50, z.total_numel = 1000, z.dp = 4, z.zero_stage = 3;
    z.param_bytes = 2, z.grad_bytes = z.reduce_bytes = 4;
    EXPECT_DOUBLE_EQ(zero_gradient_buffer_bytes(z), 1000);
    EXPECT_DOUBLE_EQ(zero_buffer_bytes(z), 400 + 1000);
    z.zero_stage = 1, z.reduce_bytes = 2;
    EXPECT_DOUBLE_EQ(zero_gradient_buffer_bytes(z), 2000);
    EXPECT_DOUBLE_EQ(zero_buffer_bytes(z), 2000);
}

TEST(Megatron, TensorParallelMovesFourActivationsPerLayerAndSequenceParallelTheSameBytes) {
    // Narayanan et al. 2021 sec. 3.3 / Korthikanti sec. 4.2.2: 2 all-reduces forward, 2 backward per
    // layer; sequence parallelism replaces each by an all-gather + reduce-scatter of equal volume.
    const TpBlockComm ar = tp_block_comm(kGpt3, 1, 2048, 2, 8, false);
    const TpBlockComm sp = tp_block_comm(kGpt3, 1, 2048, 2, 8, true);
    EXPECT_EQ(ar.count, 2);
    EXPECT_DOUBLE_EQ(ar.buffer_bytes, s * b * h * 2);
    EXPECT_DOUBLE_EQ(tp_block_bytes_per_rank(ar, 8), 2 * 2.0 * 7 / 8 * s * b * h * 2);
    EXPECT_DOUBLE_EQ(tp_block_bytes_per_rank(sp, 8), tp_block_bytes_per_rank(ar, 8));
    EXPECT_EQ(tp_block_comm(kGpt3, 1, 2048, 2, 1, false).count, 0);
}

TEST(Shape, GptBlockIs12h2Plus13hAndGqaShrinksAttention) {
    EXPECT_EQ(unit_params(kGpt3).block, 12 * int64_t(12288) * 12288 + 13 * 12288);
    // Llama-2 70B: 80 layers, h 8192, 64 heads, 8 KV heads, ffn 28672, vocab 32000: 68.98B parameters
    const ModelShape l70 = llama_shape("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096);
    EXPECT_NEAR(double(total_params(l70)) / 1e9, 68.98, 0.01);
    EXPECT_EQ(check_shape(l70), "");
    ModelShape bad = l70;
    bad.kv_heads = 6;
    EXPECT_NE(check_shape(bad).find("kv_heads"), std::string::npos);
}

}  // namespace

namespace {

// torchtitan's op-level selective checkpointing (cost/memory.h every_other_gemm_saved_bytes): Llama 3.1
// 8B keeps its block's input, wq, wv, w1 and w2's outputs (the 1st, 3rd, 5th and 7th of wq, wk, wv, wo,
// w1, w3, w2), the attention output and its fp32 log-sum-exp per head; backward redoes wk, wo and w3.
TEST(TorchtitanOpSac, KeepsEveryOtherGemmOutputAndRedoesTheRest) {
    const ModelShape m = llama_shape("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192);
    ActivationSpec a;
    a.micro_batch = 2, a.seq = 8192, a.recompute = Recompute::Selective, a.attention = Attention::Flash;
    a.every_other_gemm = true;
    const double tokens = 2 * 8192.0, hh = 4096, kv = 1024, f = 14336;
    const double kept = tokens * ((hh + hh + kv + f + hh + hh) * 2 + 4 * 32);
    EXPECT_DOUBLE_EQ(every_other_gemm_saved_bytes(m, a), kept);
    EXPECT_DOUBLE_EQ(block_activation_bytes(m, a), kept);
    EXPECT_DOUBLE_EQ(every_other_gemm_recomputed_flops_per_token(m, 1), 2 * hh * kv + 2 * hh * hh + 2 * hh * f);
    // less than the element-wise rule keeps (norm outputs and SwiGLU's product dropped, every GEMM kept)
    a.every_other_gemm = false;
    EXPECT_LT(kept, block_activation_bytes(m, a));
    // tensor and sequence parallelism: the input and the reduce-scatters' outputs split by sequence, the
    // column-parallel outputs t ways, w2's row-parallel partial sum whole
    a.every_other_gemm = true, a.tp = 8, a.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(every_other_gemm_saved_bytes(m, a),
                     tokens * ((hh / 8 + hh / 8 + kv / 8 + f / 8 + hh + hh / 8 + 2 * hh / 8) * 2 + 4 * 32 / 8.0));
    // GPT's block: QKV and the MLP's first GEMM are kept, the projections redone
    EXPECT_DOUBLE_EQ(every_other_gemm_recomputed_flops_per_token(kGpt3, 1), 2 * h * h + 2 * h * 4 * h);
}

}  // namespace
