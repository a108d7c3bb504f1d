// The search: fast enough (issue 12: under 2 s for a 175B model on 1024 GPUs), ranked, explained;
// and the simulator's structure: the pipeline bubble is (p - 1)/(m v) of the pipelined work, TP
// across nodes costs more than inside one, overlap hides DP communication, recomputation trades
// memory for time.
#include <gtest/gtest.h>

#include "shardlm/planner/model_presets.h"
#include "shardlm/planner/search.h"

namespace {

using namespace shardlm;

const cost::ModelShape kGpt3 = cost::gpt_shape("gpt3-175b", 96, 12288, 96, 50257, 2048);

planner::Cluster a100s(int nodes) { return planner::make_cluster(planner::find_gpu("A100-80GB"), 8, nodes); }

// The bound holds for the optimised build; AddressSanitizer's checks make every access several times
// slower (2.6 s measured on a Zen 3 guest with another test beside it), so there it only guards
// against a search gone quadratic.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSearchLimitS = 10.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kSearchLimitS = 10.0;
#else
constexpr double kSearchLimitS = 2.0;
#endif
#else
constexpr double kSearchLimitS = 2.0;
#endif

TEST(Search, Gpt3On1024GpusAnswersInUnderTwoSeconds) {
    const planner::SearchResult r = planner::search(kGpt3, a100s(128), {1536, 2048}, {}, 5);
    EXPECT_LT(r.seconds, kSearchLimitS);
    ASSERT_EQ(r.top.size(), 5u);
    EXPECT_GT(r.evaluated, 1000);
    for (size_t i = 0; i < r.top.size(); i++) {
        EXPECT_TRUE(r.top[i].feasible);
        EXPECT_LE(r.top[i].memory.total(), 80e9);
        if (i) {
            EXPECT_GE(r.top[i - 1].tokens_per_s, r.top[i].tokens_per_s);
        }
    }
    // tensor parallelism stays inside the 8-GPU node: across nodes its per-layer all-reduces would
    // run on the network
    EXPECT_LE(r.top[0].policy.tp, 8);
    EXPECT_NE(r.explanation.find("inside the node"), std::string::npos) << r.explanation;
    // a plausible MFU for a 175B model on A100s (Megatron-LM reports 44-52 % counting recomputation)
    EXPECT_GT(r.top[0].mfu, 0.35);
    EXPECT_LT(r.top[0].mfu, 0.66);
}

TEST(Search, RestrictionsAreHonoured) {
    planner::SearchSpace s;
    s.tp = {8}, s.pp = {16}, s.zero_stage = {1}, s.recompute = {cost::Recompute::Full};
    const planner::SearchResult r = planner::search(kGpt3, a100s(128), {1536, 2048}, s, 3);
    ASSERT_FALSE(r.top.empty());
    for (const auto& e : r.top) {
        EXPECT_EQ(e.policy.tp, 8);
        EXPECT_EQ(e.policy.pp, 16);
        EXPECT_EQ(e.policy.zero_stage, 1);
        EXPECT_EQ(e.policy.recompute, cost::Recompute::Full);
    }
}

TEST(Search, NothingFitsGivesAnEmptyAnswer) {
    const planner::SearchResult r = planner::search(kGpt3, a100s(1), {8, 2048}, {}, 5);  // 175B on 8 GPUs
    EXPECT_TRUE(r.top.empty());
    EXPECT_EQ(r.feasible, 0);
    EXPECT_EQ(r.explanation, "");
}

planner::Estimate eval(const planner::Policy& p, int nodes = 128, int64_t batch = 1536) {
    return planner::evaluate(kGpt3, a100s(nodes), {batch, 2048}, p);
}

// The bubble is one micro-batch through every stage but the slowest, / v: (p - 1)/(m v) of the
// pipelined work when the stages are balanced (GPT-3's head adds ~3 % to the last stage), much less
// when the head dominates the last stage (a small model with a large vocabulary).
TEST(Simulator, BubbleIsPMinus1OverMVOfThePipelinedWorkWhenStagesAreBalanced) {
    for (int v : {1, 2, 4}) {
        planner::Policy p;
        p.tp = 8, p.pp = 8, p.virtual_stages = v, p.recompute = cost::Recompute::Full;
        const planner::Estimate e = eval(p);
        ASSERT_TRUE(e.consistent) << e.reason;
        const double work = e.time.compute + e.time.tp_comm + e.time.cp_comm, balanced = 7.0 / (double(e.micro_batches) * v);
        EXPECT_LE(e.time.pp_bubble / work, balanced * (1 + 1e-12)) << v;
        EXPECT_GE(e.time.pp_bubble / work, balanced * 0.95) << v;
    }
    const cost::ModelShape small = cost::gpt_shape("small", 4, 256, 4, 50257, 128);
    planner::Policy p;
    p.pp = 2, p.micro_batch = 2, p.precision = planner::Precision::Fp32;
    const planner::Estimate e = planner::evaluate(small, planner::make_cluster(planner::find_gpu("A100-80GB"), 2, 1),
                                                  {8, 128}, p);
    ASSERT_TRUE(e.consistent) << e.reason;
    EXPECT_LT(e.time.pp_bubble / e.time.compute, 0.5 / double(e.micro_batches));  // vs 1/m balanced
}

// Zero-bubble schedules (Qi et al. 2023): W (half the backward) fills the bubble. ZB-H1 leaves
// F / (F + backward) of 1F1B's bubble (a third with F = B = W), ZBV half of that; ZB-H1 holds
// min(p, m) micro-batches on every stage, so its fullest stage needs what 1F1B's first does (the last
// stage's logits aside); ZBV 2p chunks of half a stage. The search takes them when asked, and a policy file names them.
TEST(Simulator, ZeroBubbleSchedulesShrinkTheBubble) {
    planner::Policy p;
    p.tp = 8, p.pp = 8, p.recompute = cost::Recompute::Selective;
    const planner::Estimate one = eval(p);
    p.schedule = cost::Schedule::ZeroBubbleH1;
    const planner::Estimate h1 = eval(p);
    p.schedule = cost::Schedule::ZeroBubbleV, p.virtual_stages = 2;
    const planner::Estimate v = eval(p);
    ASSERT_TRUE(one.consistent && h1.consistent && v.consistent) << one.reason << h1.reason << v.reason;
    // F / (F + backward): a third when the backward is twice the forward (here a little less: the
    // backward's share of the stage time is a little more than 2/3 with selective recomputation)
    EXPECT_GT(h1.time.pp_bubble / one.time.pp_bubble, 0.3);
    EXPECT_LE(h1.time.pp_bubble / one.time.pp_bubble, 1.0 / 3.0 + 1e-12);
    EXPECT_NEAR(v.time.pp_bubble / h1.time.pp_bubble, 0.5, 1e-12);
    EXPECT_NEAR(h1.time.compute, one.time.compute, 1e-12);
    EXPECT_GT(h1.tokens_per_s, one.tokens_per_s);
    // p micro-batches held on every stage: the fullest is 1F1B's first, or the last with its logits
    EXPECT_GE(h1.memory.activations, one.memory.activations * (1 - 1e-12));
    EXPECT_LE(h1.memory.activations, one.memory.activations * 1.05);
    EXPECT_EQ(planner::describe(h1.policy).find("zb-h1") != std::string::npos, true);
    p.virtual_stages = 3;
    EXPECT_NE(eval(p).reason.find("virtual_stages must be 2"), std::string::npos);

    planner::SearchSpace space;
    space.tp = {8}, space.pp = {8}, space.schedule = {cost::Schedule::ZeroBubbleH1};
    const planner::SearchResult r = planner::search(kGpt3, a100s(128), {1536, 2048}, space, 3);
    ASSERT_FALSE(r.top.empty());
    for (const planner::Estimate& e : r.top) {
        EXPECT_EQ(e.policy.schedule, cost::Schedule::ZeroBubbleH1);
        EXPECT_EQ(e.policy.virtual_stages, 1);
    }
}

TEST(Simulator, TensorParallelAcrossNodesIsSlower) {
    planner::Policy in, across;
    in.tp = 8, in.pp = 16, in.recompute = across.recompute = cost::Recompute::Full;
    across.tp = 16, across.pp = 8;
    const planner::Estimate a = eval(in), b = eval(across);
    EXPECT_TRUE(a.tp_in_node);
    EXPECT_FALSE(b.tp_in_node);
    EXPECT_GT(b.time.tp_comm, 5 * a.time.tp_comm);
}

TEST(Simulator, RecomputationTradesMemoryForTime) {
    planner::Policy p;
    p.tp = 8, p.pp = 8;
    planner::Estimate none = eval(p);
    p.recompute = cost::Recompute::Selective;
    planner::Estimate sel = eval(p);
    p.recompute = cost::Recompute::Full;
    planner::Estimate full = eval(p);
    EXPECT_GT(none.memory.activations, sel.memory.activations);
    EXPECT_GT(sel.memory.activations, full.memory.activations);
    EXPECT_LT(none.time.compute, sel.time.compute);
    EXPECT_LT(sel.time.compute, full.time.compute);
    // model FLOPs per second fall with recomputation; hardware FLOPs count it
    EXPECT_GT(full.hfu_tflops_per_gpu, full.tflops_per_gpu * 1.25);
    // flash attention (the default) recomputes Q K^T in its backward: hardware FLOPs above model FLOPs
    // even without recomputation; an unfused kernel does no more than the model needs
    EXPECT_GT(none.hfu_tflops_per_gpu, none.tflops_per_gpu);
    p.recompute = cost::Recompute::None, p.attention = cost::Attention::Naive;
    const planner::Estimate naive = eval(p);
    EXPECT_DOUBLE_EQ(naive.hfu_tflops_per_gpu, naive.tflops_per_gpu);
    EXPECT_GT(naive.memory.activations, none.memory.activations);  // the s x s probabilities kept
}

// Ranks that share a CPU (calibrate's clusters) compute faster while the others idle: in a pipeline whose
// last stage carries a large head, that stage computes alone for the part of its time the first stage
// idles, and only its compute there is faster; one stage is not touched.
TEST(Simulator, APipelinesSlowStageComputesAloneWhereRanksShareACpu) {
    const cost::ModelShape small = cost::gpt_shape("small", 4, 256, 4, 50257, 128);
    planner::Cluster cpu = planner::make_cluster(planner::find_gpu("A100-80GB"), 2, 1);
    planner::Policy p;
    p.pp = 2, p.micro_batch = 2, p.precision = planner::Precision::Fp32;
    const planner::Job job{8, 128};
    const planner::Estimate together = planner::evaluate(small, cpu, job, p);
    cpu.alone_speedup = 1.25;
    const planner::Estimate alone = planner::evaluate(small, cpu, job, p);
    ASSERT_TRUE(together.consistent && alone.consistent) << together.reason << alone.reason;
    // the head's stage is the slow one: alone / together = f + (1 - f) / s, f the first stage's compute over
    // the last's, the same f whatever s
    const double f = (alone.time.compute / together.time.compute - 1 / 1.25) / (1 - 1 / 1.25);
    EXPECT_GT(f, 0.05);
    EXPECT_LT(f, 0.9);
    cpu.alone_speedup = 2;
    EXPECT_NEAR(planner::evaluate(small, cpu, job, p).time.compute / together.time.compute, f + (1 - f) / 2, 1e-9);
    cpu.alone_speedup = 1.25;
    planner::Policy one = p;
    one.pp = 1;
    // one stage: every rank computes all the time
    planner::Cluster shared = cpu;
    shared.alone_speedup = 1;
    EXPECT_DOUBLE_EQ(planner::evaluate(small, shared, job, one).time.compute, planner::evaluate(small, cpu, job, one).time.compute);
    // the explanation's compute adds up to the estimate's, no efficiency above the peak
    const planner::Terms t = planner::explain_terms(small, cpu, job, alone);
    double sum = 0;
    for (const planner::Term& x : t.compute) {
        sum += x.seconds;
        EXPECT_LE(x.efficiency, 1.0) << x.what;
    }
    EXPECT_NEAR(sum, alone.time.compute, 1e-9 * alone.time.compute);
}

TEST(Simulator, ZeroShardsStatesOverDataParallelRanks) {
    // 7.5B (Megatron's shape) on 64 GPUs, pure data parallelism: the ZeRO paper's 31.4 / 16.6 / 1.9 GB
    // of model states (the count here is the model's exact 7.46B parameters)
    const cost::ModelShape m = *planner::find_model_preset("megatron-7.5b");
    const double expected[4] = {119.5, 31.3, 16.6, 1.87};
    for (int z = 0; z < 4; z++) {
        planner::Policy p;
        p.zero_stage = z;
        const planner::Estimate e =
            planner::evaluate(m, planner::make_cluster(planner::find_gpu("A100-80GB"), 8, 8), {64, 2048}, p);
        ASSERT_TRUE(e.consistent) << e.reason;
        EXPECT_NEAR((e.memory.params + e.memory.grads + e.memory.optimizer) / 1e9, expected[z], 0.15) << z;
    }
}

// The optimiser's state in the memory: bytes per parameter as the engine keeps them (cost/memory.h,
// shared with optim::Optimizer), plus the fp32 master copy of mixed precision.
TEST(Simulator, OptimizerStateFollowsTheOptimizer) {
    EXPECT_EQ(cost::optimizer_state_bytes("sgd"), 0);
    EXPECT_EQ(cost::optimizer_state_bytes("lion"), 4);
    EXPECT_NEAR(cost::optimizer_state_bytes("adam8bit"), 2.0039, 1e-4);
    EXPECT_LT(cost::optimizer_state_bytes("shampoo"), 0);
    const cost::ModelShape m = *planner::find_model_preset("llama-7b");
    planner::Policy p;
    p.zero_stage = 0;
    double optim[3];
    const char* names[3] = {"adam", "lion", "adam8bit"};
    for (int i = 0; i < 3; i++) {
        const planner::Estimate e = planner::evaluate(m, planner::make_cluster(planner::find_gpu("A100-80GB"), 8, 1),
                                                      {64, 2048, cost::optimizer_state_bytes(names[i])}, p);
        ASSERT_TRUE(e.consistent) << e.reason;
        optim[i] = e.memory.optimizer;
    }
    const double P = double(cost::total_params(m));
    EXPECT_NEAR(optim[0], 12 * P, 0.01 * P);  // m, v and the master copy
    EXPECT_NEAR(optim[1], 8 * P, 0.01 * P);
    EXPECT_NEAR(optim[2], 6.0039 * P, 0.01 * P);
}

TEST(Simulator, DataParallelCommunicationHidesBehindBackward) {
    planner::Policy p;
    p.tp = 8, p.pp = 1, p.zero_stage = 1, p.recompute = cost::Recompute::Full;
    p.micro_batch = 12;  // one micro-batch per step: the whole backward overlaps the gradient reduce-scatter
    const planner::Estimate e = eval(p);
    ASSERT_TRUE(e.consistent) << e.reason;
    EXPECT_LT(e.time.dp_comm, 0.1 * e.time.compute);
}

// Context parallelism's two exchanges: the all-gather moves the whole sequence's keys and values a layer,
// the ring one block a step behind 1/cp of the attention each. On a long sequence the attention hides
// the ring's steps; the search tries both where cp > 1, and a restriction to one is honoured.
TEST(Simulator, ContextParallelRingHidesBehindTheAttentionTiles) {
    const cost::ModelShape m = *planner::find_model_preset("llama-7b");
    const planner::Cluster c = planner::make_cluster(planner::find_gpu("A100-80GB"), 8, 2);
    planner::Policy p;
    p.tp = 2, p.cp = 8, p.zero_stage = 1, p.recompute = cost::Recompute::Full;
    double exposed[2];
    for (cost::CpComm cc : {cost::CpComm::AllGather, cost::CpComm::Ring}) {
        p.cp_comm = cc;
        const planner::Estimate e = planner::evaluate(m, c, {8, 65536}, p);
        ASSERT_TRUE(e.consistent) << e.reason;
        exposed[int(cc)] = e.time.cp_comm;
        EXPECT_GT(e.time.cp_comm, 0.0) << "the ring's last dK/dV always goes home after the tiles";
    }
    EXPECT_LT(exposed[int(cost::CpComm::Ring)], exposed[int(cost::CpComm::AllGather)]);
    p.cp = 1;
    EXPECT_EQ(planner::evaluate(m, c, {8, 65536}, p).time.cp_comm, 0.0);

    planner::SearchSpace s;
    s.tp = {2}, s.cp = {8}, s.recompute = {cost::Recompute::Full};
    const planner::SearchResult both = planner::search(m, c, {8, 65536}, s, 1000);
    bool ring = false, gather = false;
    for (const planner::Estimate& e : both.top) (e.policy.cp_comm == cost::CpComm::Ring ? ring : gather) = true;
    EXPECT_TRUE(ring && gather);
    s.cp_comm = {cost::CpComm::Ring};
    for (const planner::Estimate& e : planner::search(m, c, {8, 65536}, s, 1000).top)
        EXPECT_EQ(e.policy.cp_comm, cost::CpComm::Ring);
}

// A mixture of experts: Mixtral's published counts; expert parallelism divides the experts' memory by ep and
// adds its all-to-alls; the search offers ep layouts; the FLOPs a token costs are the active parameters'.
TEST(Simulator, ExpertParallelismSplitsTheExpertsAndPaysTheAllToAll) {
    // Mixtral 8x7B's shape: 8 experts of 14336, top 2, GQA
    cost::ModelShape m = cost::llama_shape("mixtral", 32, 4096, 32, 8, 14336, 32000, 4096);
    m.experts = 8, m.top_k = 2, m.expert_ffn = 14336;
    EXPECT_NEAR(double(cost::total_params(m)), 46.7e9, 0.1e9);   // Mixtral's published 46.7B
    EXPECT_NEAR(double(cost::active_params(m)), 12.9e9, 0.1e9);  // and 12.9B active
    const planner::Cluster c = planner::make_cluster(planner::find_gpu("H100-SXM"), 8, 2);
    planner::Policy p;
    p.tp = 2, p.zero_stage = 1, p.recompute = cost::Recompute::Full;
    planner::Estimate e[2];
    for (int i = 0; i < 2; i++) {
        p.ep = i == 0 ? 1 : 8;
        e[i] = planner::evaluate(m, c, {64, 4096}, p);
        ASSERT_TRUE(e[i].consistent) << e[i].reason;
    }
    EXPECT_EQ(e[0].time.ep_comm, 0.0);
    EXPECT_GT(e[1].time.ep_comm, 0.0);
    EXPECT_LT(e[1].memory.params, 0.3 * e[0].memory.params);  // the experts, most of the parameters, split 8 ways
    EXPECT_NE(planner::describe(e[1].policy).find("ep=8"), std::string::npos);
    p.ep = 3;
    EXPECT_FALSE(planner::evaluate(m, c, {64, 4096}, p).consistent);  // ep must divide dp and the experts
    planner::SearchSpace s;
    s.tp = {2}, s.pp = {1}, s.recompute = {cost::Recompute::Full}, s.zero_stage = {1};
    bool split = false;
    for (const planner::Estimate& x : planner::search(m, c, {64, 4096}, s, 1000).top) split = split || x.policy.ep > 1;
    EXPECT_TRUE(split);
    // the FLOPs a token costs: the active parameters' (2 per parameter of the matrices, about)
    const double dense_equivalent = cost::model_flops_per_token(m, 4096) / 6;
    EXPECT_LT(dense_equivalent, 0.4 * double(cost::total_params(m)));
}

}  // namespace
