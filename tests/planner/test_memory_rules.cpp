// The GPU frameworks' memory rules (docs/PLANNER.md "FP8, attention kernels and framework styles"), each on
// one configuration whose bytes are worked out by hand: Llama 3.1 8B (h 4096, 8 KV heads of 128, MLP
// 14336, vocabulary 128256, blocks of 218,112,000 parameters, embedding and head 525,336,576 each) on
// H100s, with the allocator's overheads set to 0 so that what the tensors take is compared exactly.
#include <gtest/gtest.h>

#include <string>

#include "shardlm/core/check.h"
#include "shardlm/planner/plan_io.h"
#include "shardlm/planner/stage_model.h"

namespace {

using namespace shardlm;

const cost::ModelShape kLlama8b = cost::llama_shape("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192);

planner::Cluster h100s(int nodes) {
    planner::Cluster c = planner::make_cluster(planner::find_gpu("H100-SXM"), 8, nodes);
    c.allocator_overhead = c.allocator_overhead_pytorch = 0;
    return c;
}

// torchtitan's FSDP run of the 8B (its benchmarks' table 1): 8 GPUs, 2 sequences of 8192 each, op-level
// selective checkpointing
planner::Policy fsdp8(planner::Framework f = planner::Framework::Pytorch) {
    planner::Policy p;
    p.zero_stage = 3, p.micro_batch = 2, p.recompute = cost::Recompute::Selective, p.framework = f;
    return p;
}

// The policy resolved, and the memory of one stage of it.
planner::MemoryBreakdown stage_memory(const planner::Cluster& c, const planner::Job& job, planner::Policy p, int stage) {
    const std::string why = planner::resolve_policy(kLlama8b, c, job, p);
    EXPECT_EQ(why, "");
    return planner::detail::StageModel(kLlama8b, c, job, p).memory(stage);
}

// Bytes a logit at the loss's peak (policy.cpp logits_bytes): torchtitan's eager loss, ATen's
// log_softmax backward holding its saved fp32 output, the incoming fp32 gradient and the fp32 input
// gradient (4 + 4 + 4); PyTorch's loss-parallel version under tensor parallelism (tensor/parallel/
// loss.py: (grad_input + torch.exp(x)) * grad_output, four fp32 logits at once); compiled, the bf16
// logits and their bf16 gradient (2 + 2); compiling only the blocks leaves the loss eager.
TEST(MemoryRules, TheLossTakes12BytesALogitEager16LossParallelAnd4Compiled) {
    planner::Policy p = fsdp8();
    EXPECT_EQ(planner::logits_bytes(p), 12);
    p.tp = 8;
    EXPECT_EQ(planner::logits_bytes(p), 16);
    p.compile = planner::Compile::Blocks;
    EXPECT_EQ(planner::logits_bytes(p), 16);
    p.compile = planner::Compile::BlocksAndLoss;
    EXPECT_EQ(planner::logits_bytes(p), 4);
    for (auto f : {planner::Framework::Megatron, planner::Framework::MegatronDeepspeed, planner::Framework::MegatronCore})
        EXPECT_EQ(planner::logits_bytes(fsdp8(f)), 6);  // bf16 logits and the fused cross-entropy's fp32 softmax
    EXPECT_EQ(planner::logits_bytes(fsdp8(planner::Framework::Shardlm)), 4);
}

// The loss's tensors are gone before the last block's backward begins (torchtitan's train step: `del
// pred`, then loss.backward()), and ZeRO's gradient slots exist only in that backward: the peak holds
// the fuller of the two phases. For the 8B above: the kept activations, 32 blocks of 16384 tokens x
// (input 4096 + wq 4096 + wv 1024 + w1 14336 + w2 4096 + attention output 4096) x 2 bytes + 32 heads x
// 4 bytes = 1,042,284,544 bytes, 33,353,105,408 in all; the loss 16384 x 128256 logits x 12 bytes =
// 25,216,155,648; the backward phase one block's backward, (2,283,798,528 - 1,042,284,544) +
// 2,283,798,528 = 3,525,312,512, and the gradient slots, (embedding + 2 x head) 1,576,017,920 x (1 +
// 1/8) x 2 bytes = 3,546,040,320: 7,071,352,832, less than the loss. Buffers: the CUDA context and the
// gathered-parameter slots, 1e9 + 1,576,017,920 x 2 = 4,152,035,840.
TEST(MemoryRules, TheLossAndTheBlocksBackwardDoNotMeet) {
    const planner::Cluster c = h100s(1);
    const planner::Job job{16, 8192};
    planner::MemoryBreakdown mem = stage_memory(c, job, fsdp8(), 0);
    EXPECT_DOUBLE_EQ(mem.activations, 33353105408.0 + 25216155648.0);
    EXPECT_DOUBLE_EQ(mem.buffers, 4152035840.0);
    // compiled, the loss takes 4 bytes a logit, 8,405,385,216: still the fuller phase
    planner::Policy compiled = fsdp8();
    compiled.compile = planner::Compile::BlocksAndLoss;
    mem = stage_memory(c, job, compiled, 0);
    EXPECT_DOUBLE_EQ(mem.activations, 33353105408.0 + 8405385216.0);
    // at one sequence the blocks' backward phase leads once the loss is compiled (4,202,692,608 bytes
    // against one block's backward of 1,762,656,256 and the same gradient slots): the block's backward
    // counted in activations, the slots in buffers
    compiled.micro_batch = 1;
    mem = stage_memory(c, {8, 8192}, compiled, 0);
    EXPECT_DOUBLE_EQ(mem.activations, 32 * 521142272.0 + 1762656256.0);
    EXPECT_DOUBLE_EQ(mem.buffers, 4152035840.0 + 3546040320.0);
    // this engine keeps its logits (4 bytes) and gradient buffers throughout: both phases counted
    const planner::Policy engine = fsdp8(planner::Framework::Shardlm);
    mem = stage_memory(c, job, engine, 0);
    const double kept = 32 * cost::block_activation_bytes(kLlama8b, [] {
        cost::ActivationSpec a;
        a.micro_batch = 2, a.seq = 8192, a.recompute = cost::Recompute::Selective, a.attention = cost::Attention::Flash;
        return a;
    }());
    EXPECT_DOUBLE_EQ(mem.activations, kept + 16384.0 * 128256 * 4);
    EXPECT_DOUBLE_EQ(mem.buffers, 4152035840.0 + 3546040320.0);
}

// With pipelining FSDP keeps a stage's gradients unsharded until the step's one reduce-scatter, and
// PyTorch's FSDP accumulates them between micro-batches in its reduce dtype (FSDPParam.
// to_accumulated_grad_if_needed; torchtitan reduces in float32): 4 bytes a parameter where the
// Megatron-style count has 2. The first of 2 stages holds 16 blocks and the embedding, 4,015,128,576
// parameters: 8,030,257,152 bytes more.
TEST(MemoryRules, FsdpWithPipeliningAccumulatesTheStagesGradientsInFp32) {
    const planner::Cluster c = h100s(1);
    planner::Policy p = fsdp8(planner::Framework::MegatronCore);
    p.pp = 2, p.micro_batch = 1, p.recompute = cost::Recompute::Full;
    const planner::MemoryBreakdown megatron = stage_memory(c, {8, 8192}, p, 0);
    p.framework = planner::Framework::Pytorch;
    const planner::MemoryBreakdown pytorch = stage_memory(c, {8, 8192}, p, 0);
    EXPECT_DOUBLE_EQ(pytorch.buffers - megatron.buffers, 8030257152.0);
    EXPECT_DOUBLE_EQ(pytorch.activations, megatron.activations);
}

// DeepSpeed's pipeline engine runs each backward between clear_lp_grads() and
// update_hp_grads(clear_lp_grads=False): with its bf16 optimiser every parameter's bf16 gradient stays
// beside the fp32 accumulation, unsharded: the same first stage's 4,015,128,576 parameters x 2 bytes.
TEST(MemoryRules, MegatronDeepspeedKeepsTheBf16GradientsBesideTheFp32Accumulation) {
    const planner::Cluster c = h100s(1);
    planner::Policy p = fsdp8(planner::Framework::Megatron);
    p.pp = 2, p.zero_stage = 1, p.micro_batch = 1, p.recompute = cost::Recompute::Full, p.grad_accum_fp32 = true;
    const planner::MemoryBreakdown megatron = stage_memory(c, {8, 8192}, p, 0);
    p.framework = planner::Framework::MegatronDeepspeed;
    const planner::MemoryBreakdown deepspeed = stage_memory(c, {8, 8192}, p, 0);
    EXPECT_DOUBLE_EQ(deepspeed.grads - megatron.grads, 8030257152.0);
    EXPECT_DOUBLE_EQ(deepspeed.total() - megatron.total(), 8030257152.0);
    p.grad_accum_fp32 = false;  // without the fp32 accumulation the bf16 gradients are the gradients
    EXPECT_DOUBLE_EQ(stage_memory(c, {8, 8192}, p, 0).grads, megatron.grads / 2);
}

// Transformer Engine's FP8 linear layers keep their inputs for the weight gradient cast to FP8
// (linear.py: inputmat_t, not inputmat_no_fp8): the QKV, projection, MLP and MLP-down inputs, one byte
// a value in place of two. One sequence of 8192 on one GPU: 8192 x (4096 + 2 x 4096 + 14336) values;
// under tp 4 with sequence parallelism a quarter; with op-level selective recomputation (which drops the
// norms' and the activation's outputs) the projection's input alone. torchao's float8 keeps 16 bits.
TEST(MemoryRules, TransformerEngineKeepsTheLinearInputsInFp8) {
    cost::ActivationSpec a;
    a.seq = 8192, a.attention = cost::Attention::Flash;
    auto saved = [&](cost::ActivationSpec x) {
        const double bf16 = cost::block_activation_bytes(kLlama8b, x);
        x.fp8_linear_inputs = true;
        return bf16 - cost::block_activation_bytes(kLlama8b, x);
    };
    EXPECT_DOUBLE_EQ(saved(a), 8192.0 * (4096 + 2 * 4096 + 14336));
    a.tp = 4, a.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(saved(a), 8192.0 * (4096 + 2 * 4096 + 14336) / 4);
    a.recompute = cost::Recompute::Selective;
    EXPECT_DOUBLE_EQ(saved(a), 8192.0 * 4096 / 4);
    a.recompute = cost::Recompute::Full;
    EXPECT_DOUBLE_EQ(saved(a), 0.0);  // only the block's input is kept
    // the planner sets it for FP8 runs of the Megatron styles, not the PyTorch style's
    const planner::Cluster c = h100s(1);
    planner::Policy p = fsdp8(planner::Framework::MegatronCore);
    p.precision = planner::Precision::Fp8, p.recompute = cost::Recompute::None;
    const double te = stage_memory(c, {16, 8192}, p, 0).activations;
    p.framework = planner::Framework::Pytorch;
    EXPECT_LT(te, stage_memory(c, {16, 8192}, p, 0).activations);
}

// The allocator's overhead is fitted per framework style (a constant, not a mechanism): a PyTorch-style
// run takes allocator_overhead_pytorch, the others allocator_overhead, on what the tensors take (not on
// the CUDA context).
TEST(MemoryRules, EachFrameworkStyleTakesItsOwnAllocatorOverhead) {
    planner::Cluster c = h100s(1);
    const planner::Job job{16, 8192};
    const double bare_pytorch = stage_memory(c, job, fsdp8(), 0).total() - 1e9;
    const double bare_megatron = stage_memory(c, job, fsdp8(planner::Framework::Megatron), 0).total() - 1e9;
    c.allocator_overhead = 0.1, c.allocator_overhead_pytorch = 0.3;
    EXPECT_NEAR(stage_memory(c, job, fsdp8(), 0).total() - 1e9, 1.3 * bare_pytorch, 1);
    EXPECT_NEAR(stage_memory(c, job, fsdp8(planner::Framework::Megatron), 0).total() - 1e9, 1.1 * bare_megatron, 1);
    EXPECT_EQ(planner::check_cluster([&] {
                  planner::Cluster bad = c;
                  bad.allocator_overhead_pytorch = 1;
                  return bad;
              }()).find("allocator_overhead_pytorch"),
              0u);
}

// The policy file's optional "compile" key (none by default) and framework "megatron-deepspeed".
TEST(MemoryRules, CompileAndFrameworkKeys) {
    EXPECT_EQ(planner::policy_from_json(nlohmann::json::object(), "p.json").compile, planner::Compile::None);
    EXPECT_EQ(planner::policy_from_json({{"compile", "blocks"}}, "p.json").compile, planner::Compile::Blocks);
    EXPECT_EQ(planner::policy_from_json({{"compile", "blocks_and_loss"}}, "p.json").compile,
              planner::Compile::BlocksAndLoss);
    EXPECT_EQ(planner::policy_from_json({{"framework", "megatron-deepspeed"}}, "p.json").framework,
              planner::Framework::MegatronDeepspeed);
    std::string why;
    try {
        planner::policy_from_json({{"compile", "model"}}, "p.json");
    } catch (const Error& e) {
        why = e.what();
    }
    EXPECT_NE(why.find("'compile'"), std::string::npos) << why;
    EXPECT_NE(why.find("\"blocks_and_loss\""), std::string::npos) << why;
    EXPECT_EQ(planner::cluster_from_json({{"gpu", "H100-SXM"}, {"num_gpus", 8}, {"gpus_per_node", 8},
                                          {"allocator_overhead_pytorch", 0.05}},
                                         "c.json")
                  .allocator_overhead_pytorch,
              0.05);
}

}  // namespace
