// Issue 12's contract at the library level: the JSON files, the answer's keys, defaults, and that an
// infeasible or inconsistent policy is an answer (feasible false + reason), never an exception.
#include <gtest/gtest.h>

#include <functional>

#include "shardlm/core/check.h"
#include "shardlm/planner/plan_io.h"
#include "shardlm/planner/search.h"

namespace {

using namespace shardlm;
using nlohmann::json;

const json kModel = {{"layers", 96}, {"hidden", 12288}, {"heads", 96}, {"kv_heads", 96}, {"ffn_hidden", 49152},
                     {"vocab", 50257}, {"seq_len", 2048}, {"arch", "gpt"}};
const json kCluster = {{"gpu", "A100-80GB"}, {"num_gpus", 1024}, {"gpus_per_node", 8}, {"peak_tflops", 312},
                       {"memory_gb", 80}, {"intra_node_GBps", 300}, {"inter_node_GBps", 25}};

planner::Estimate run(const json& policy, int64_t global_batch = 1536, const json& cluster = kCluster) {
    const cost::ModelShape m = planner::model_from_json(kModel, "model.json");
    const planner::Cluster c = planner::cluster_from_json(cluster, "cluster.json");
    return planner::evaluate(m, c, {global_batch, 2048}, planner::policy_from_json(policy, "policy.json"));
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Contract, AnswerHasEveryKey) {
    const json j = planner::estimate_to_json(run({{"tp", 8}, {"pp", 8}, {"micro_batch", 1}, {"zero_stage", 1}}));
    for (const char* k : {"feasible", "reason", "memory_gb_per_gpu", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
                          "tflops_per_gpu", "hfu_tflops_per_gpu", "mfu"})
        EXPECT_TRUE(j.contains(k)) << k;
    const json& mem = j["memory_gb_per_gpu"];
    double sum = 0;
    for (const char* k : {"params", "grads", "optimizer", "activations", "buffers"}) {
        ASSERT_TRUE(mem.contains(k)) << k;
        sum += mem[k].get<double>();
    }
    EXPECT_NEAR(mem["total"].get<double>(), sum, 1e-9);
    EXPECT_TRUE(j["feasible"].get<bool>()) << j.dump(2);
    EXPECT_EQ(j["policy"]["dp"], 16);
    EXPECT_NEAR(j["tokens_per_s_per_gpu"].get<double>() * 1024, j["tokens_per_s"].get<double>(), 1e-6);
    EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["step_time_s"].get<double>(), 1536.0 * 2048, 1e-3);
    EXPECT_NEAR(j["mfu"].get<double>(), j["tflops_per_gpu"].get<double>() / 312, 1e-12);
}

TEST(Contract, PolicyScheduleKey) {
    EXPECT_EQ(run({{"pp", 8}, {"schedule", "zb-h1"}}).policy.schedule, cost::Schedule::ZeroBubbleH1);
    const planner::Estimate v = run({{"pp", 8}, {"schedule", "zbv"}});
    EXPECT_EQ(v.policy.schedule, cost::Schedule::ZeroBubbleV);
    EXPECT_EQ(v.policy.virtual_stages, 2);  // implied
    const planner::Estimate i = run({{"pp", 8}, {"schedule", "interleaved"}, {"virtual_stages", 2}});
    EXPECT_EQ(i.policy.schedule, cost::Schedule::OneFOneB);
    EXPECT_EQ(planner::policy_to_json(i.policy)["schedule"], "interleaved");
    EXPECT_EQ(planner::policy_to_json(v.policy)["schedule"], "zbv");
    EXPECT_NE(error_of([] { run({{"schedule", "zigzag"}}); }).find("schedule"), std::string::npos);
}

TEST(Contract, MissingPolicyKeysTakeTheDefaults) {
    const planner::Estimate e = run(json::object(), 1024);
    EXPECT_EQ(e.policy.dp, 1024);  // num_gpus / (tp pp cp)
    EXPECT_EQ(e.policy.zero_stage, 0);
    EXPECT_EQ(e.policy.virtual_stages, 1);
    EXPECT_EQ(e.policy.recompute, cost::Recompute::None);
    EXPECT_EQ(e.policy.precision, planner::Precision::Bf16);
    EXPECT_TRUE(e.consistent);
    EXPECT_FALSE(e.feasible);  // 175B replicated on every GPU
    EXPECT_NE(e.reason.find("GB"), std::string::npos) << e.reason;
    EXPECT_GT(e.memory.total(), 80e9);
}

// What a policy file leaves out is the planner's: the micro-batch (the fastest that fits, the rest as
// named), the framework (the one such a policy runs with) and that framework's attention kernel and
// gradient accumulation; null leaves a published case's unstated fields open too.
TEST(Contract, WhatAPolicyLeavesOutThePlannerChooses) {
    const planner::PolicyRequest none = planner::policy_request_from_json(json::object(), "p.json");
    EXPECT_TRUE(none.open.micro_batch && none.open.framework && none.open.attention && none.open.grad_accum_fp32);
    EXPECT_FALSE(none.open.virtual_stages || none.open.recompute || none.open.sequence_parallel);  // the contract's defaults
    const planner::PolicyRequest named = planner::policy_request_from_json(
        {{"micro_batch", 2}, {"framework", "megatron"}, {"attention", "flash"}, {"grad_accum_fp32", false}}, "p.json");
    EXPECT_FALSE(named.open.micro_batch || named.open.framework || named.open.attention || named.open.grad_accum_fp32);
    EXPECT_EQ(named.policy.micro_batch, 2);
    const planner::PolicyRequest nulls = planner::policy_request_from_json(
        {{"virtual_stages", nullptr}, {"recompute", nullptr}, {"sequence_parallel", nullptr}, {"micro_batch", 4}}, "p.json");
    EXPECT_TRUE(nulls.open.virtual_stages && nulls.open.recompute && nulls.open.sequence_parallel);
    EXPECT_FALSE(nulls.open.micro_batch);

    const cost::ModelShape m = planner::model_from_json(kModel, "model.json");
    const planner::Cluster a100 = planner::cluster_from_json(kCluster, "cluster.json");
    const planner::Cluster h100 = planner::make_cluster(planner::find_gpu("H100-SXM"), 8, 128);
    planner::Policy p;
    EXPECT_EQ(planner::default_framework(a100, p), planner::Framework::Megatron);
    EXPECT_EQ(planner::default_framework(h100, p), planner::Framework::MegatronCore);
    p.zero_stage = 3;
    EXPECT_EQ(planner::default_framework(h100, p), planner::Framework::Pytorch);  // FSDP
    planner::Cluster cpu = a100;
    cpu.threads_per_rank = 2;
    EXPECT_EQ(planner::default_framework(cpu, p), planner::Framework::Shardlm);
    EXPECT_EQ(planner::default_attention(planner::Framework::Megatron), cost::Attention::Naive);
    EXPECT_EQ(planner::default_attention(planner::Framework::MegatronCore), cost::Attention::Flash);
    EXPECT_TRUE(planner::default_grad_accum_fp32(planner::Framework::MegatronCore, planner::Precision::Bf16));
    EXPECT_FALSE(planner::default_grad_accum_fp32(planner::Framework::Megatron, planner::Precision::Fp16));
    EXPECT_FALSE(planner::default_grad_accum_fp32(planner::Framework::Pytorch, planner::Precision::Bf16));

    // the open micro-batch: as fast as every micro-batch that fits, with the named fields kept
    const planner::PolicyRequest r =
        planner::policy_request_from_json({{"tp", 8}, {"pp", 8}, {"zero_stage", 1}, {"recompute", "full"}}, "p.json");
    const planner::Job job{1536, 2048};
    const planner::Estimate chosen = planner::evaluate_request(m, h100, job, r);
    ASSERT_TRUE(chosen.feasible) << chosen.reason;
    EXPECT_EQ(chosen.policy.tp, 8);
    EXPECT_EQ(chosen.policy.pp, 8);
    EXPECT_EQ(chosen.policy.zero_stage, 1);
    EXPECT_EQ(chosen.policy.framework, planner::Framework::MegatronCore);
    EXPECT_TRUE(chosen.policy.grad_accum_fp32);
    int fits = 0;
    for (int64_t mb : {1, 2, 3, 4, 6, 8}) {
        planner::Policy q = chosen.policy;
        q.micro_batch = mb;
        const planner::Estimate e = planner::evaluate(m, h100, job, q);
        if (!e.feasible) continue;
        fits++;
        EXPECT_LE(e.tokens_per_s, chosen.tokens_per_s * (1 + 1e-12)) << "micro-batch " << mb;
    }
    EXPECT_GE(fits, 2);
    const json chose = planner::chosen_json(r, h100, chosen.policy);
    EXPECT_EQ(chose["framework"]["value"], "megatron-core");
    EXPECT_NE(chose["framework"]["why"].get<std::string>().find("Hopper"), std::string::npos);
    EXPECT_EQ(chose["micro_batch"]["value"], chosen.policy.micro_batch);
    EXPECT_FALSE(chose.contains("recompute"));
}

// plan --explain's terms: compute piece by piece adds up to the estimate's compute, the exposed
// collectives to its communication, under every kind of policy; each product names its shape and the
// share of the peak it runs at.
TEST(Contract, ExplainTermsAddUpToTheStep) {
    const cost::ModelShape m = planner::model_from_json(kModel, "model.json");
    const planner::Cluster h100 = planner::make_cluster(planner::find_gpu("H100-SXM"), 8, 128);
    const planner::Cluster a100 = planner::cluster_from_json(kCluster, "cluster.json");
    const std::pair<json, const planner::Cluster*> policies[] = {
        {{{"zero_stage", 3}, {"micro_batch", 1}, {"recompute", "full"}, {"framework", "pytorch"}}, &h100},
        {{{"tp", 8}, {"pp", 8}, {"virtual_stages", 4}, {"zero_stage", 1}, {"sequence_parallel", true},
          {"precision", "fp8"}, {"framework", "megatron-core"}, {"recompute", "selective"}}, &h100},
        {{{"tp", 8}, {"pp", 16}, {"zero_stage", 0}, {"attention", "naive"}, {"recompute", "selective"},
          {"precision", "fp16"}}, &a100},
        {{{"tp", 8}, {"pp", 8}, {"cp", 2}, {"cp_comm", "ring"}, {"zero_stage", 2}, {"sequence_parallel", true}}, &h100},
        {{{"tp", 4}, {"pp", 8}, {"zero_stage", 3}, {"framework", "pytorch"}, {"recompute", "selective"}}, &h100},
    };
    for (const auto& [policy, cluster] : policies) {
        const planner::Job job{1024, 2048};
        const planner::Estimate e = planner::evaluate(m, *cluster, job, planner::policy_from_json(policy, "p.json"));
        ASSERT_TRUE(e.consistent) << policy.dump() << ": " << e.reason;
        const planner::Terms t = planner::explain_terms(m, *cluster, job, e);
        double compute = 0, comm = 0;
        for (const planner::Term& x : t.compute) {
            compute += x.seconds;
            if (!x.shape.empty()) {
                EXPECT_TRUE(x.efficiency > 0 && x.efficiency <= 1) << x.what;
            }
        }
        for (const planner::Term& x : t.communication) comm += x.seconds;
        const planner::TimeBreakdown& b = e.time;
        EXPECT_NEAR(compute, b.compute, 1e-9 * b.compute) << policy.dump();
        EXPECT_NEAR(comm, b.tp_comm + b.cp_comm + b.ep_comm + b.dp_comm + b.pp_comm, 1e-9 * e.step_time_s) << policy.dump();
        EXPECT_EQ(t.pipeline_bubble_s, b.pp_bubble);
        EXPECT_EQ(t.optimizer_s, b.optimizer);
        EXPECT_NE(t.compute.front().shape, "") << "a product leads the compute of a 175B model: " << t.compute.front().what;
        const json j = planner::terms_to_json(t, e.step_time_s);
        EXPECT_EQ(j["compute"].size(), t.compute.size());
        EXPECT_TRUE(j["compute"][0].contains("shape") && j["compute"][0].contains("efficiency"));
    }
}

TEST(Contract, InconsistentPoliciesGiveAReasonNotAnException) {
    const std::pair<json, const char*> cases[] = {
        {{{"tp", 7}}, "tp*pp*cp"},                    // does not divide 1024
        {{{"tp", 16}, {"pp", 5}}, "tp*pp*cp"},
        {{{"tp", 0}}, "tp, pp and cp"},
        {{{"tp", -2}}, "tp, pp and cp"},
        {{{"tp", 8}, {"dp", 4}}, "dp*tp*pp*cp"},      // 32 GPUs of 1024
        {{{"tp", 8}, {"pp", 128}}, "layers"},         // 96 layers over 128 stages (64 would be uneven: allowed)
        {{{"pp", 32}, {"virtual_stages", 4}}, "layers"},
        {{{"tp", 8}, {"virtual_stages", 2}}, "pp > 1"},
        {{{"tp", 8}, {"micro_batch", 5}}, "global batch"},
        {{{"zero_stage", 4}}, "zero_stage"},
        {{{"micro_batch", 0}}, "micro_batch"},
        {{{"cp", 3}}, "tp*pp*cp"},
        {{{"tp", 1 << 30}, {"pp", 1 << 30}, {"cp", 1 << 30}}, "exceeds"},  // no overflow
        {{{"micro_batch", int64_t(1) << 40}}, "larger than the global batch"},
    };
    for (const auto& [policy, needle] : cases) {
        planner::Estimate e;
        ASSERT_NO_THROW(e = run(policy)) << policy.dump();
        EXPECT_FALSE(e.feasible) << policy.dump();
        EXPECT_FALSE(e.consistent) << policy.dump();
        EXPECT_NE(e.reason.find(needle), std::string::npos) << policy.dump() << ": " << e.reason;
        const json j = planner::estimate_to_json(e);
        EXPECT_FALSE(j["feasible"].get<bool>());
        EXPECT_EQ(j["memory_gb_per_gpu"]["total"], 0.0);
    }
    // 96 heads are not split 64 ways (1024 = 64 x 16)
    EXPECT_NE(run({{"tp", 64}}).reason.find("heads"), std::string::npos);
}

TEST(Contract, BadFilesNameTheFileTheKeyAndTheFix) {
    std::string m = error_of([] { planner::policy_from_json({{"tp", 8}, {"zero", 1}}, "p.json"); });
    EXPECT_NE(m.find("p.json"), std::string::npos) << m;
    EXPECT_NE(m.find("'zero'"), std::string::npos) << m;
    EXPECT_NE(m.find("zero_stage"), std::string::npos) << m;  // the hint lists the keys
    EXPECT_NE(m.find("HINT"), std::string::npos) << m;
    m = error_of([] { planner::policy_from_json({{"tp", "8"}}, "p.json"); });
    EXPECT_NE(m.find("'tp' must be an integer"), std::string::npos) << m;
    m = error_of([] { planner::policy_from_json({{"recompute", "some"}}, "p.json"); });
    EXPECT_NE(m.find("selective"), std::string::npos) << m;
    m = error_of([] { planner::model_from_json({{"layers", 2}, {"hidden", 64}}, "m.json"); });
    EXPECT_NE(m.find("missing key 'heads'"), std::string::npos) << m;
    m = error_of([] { planner::cluster_from_json({{"gpu", "TPU"}, {"num_gpus", 8}, {"gpus_per_node", 8}}, "c.json"); });
    EXPECT_NE(m.find("missing key 'peak_tflops'"), std::string::npos) << m;
    m = error_of([] { planner::load_policy_file("/nonexistent/policy.json"); });
    EXPECT_NE(m.find("/nonexistent/policy.json"), std::string::npos) << m;
}

TEST(Contract, ClusterFileOfAnUnknownGpuNeedsOnlyTheContractKeys) {
    const json c = {{"gpu", "MI300X"}, {"num_gpus", 16}, {"gpus_per_node", 8}, {"peak_tflops", 1307},
                    {"memory_gb", 192}, {"intra_node_GBps", 448}, {"inter_node_GBps", 50}};
    const planner::Cluster cl = planner::cluster_from_json(c, "c.json");
    EXPECT_EQ(cl.nodes(), 2);
    EXPECT_GT(cl.gpu.hbm_GBps, 0);
    // round trip: what cluster_to_json writes (the format `calibrate` will write) reads back
    const planner::Cluster back = planner::cluster_from_json(planner::cluster_to_json(cl), "back.json");
    EXPECT_EQ(planner::cluster_to_json(back), planner::cluster_to_json(cl));
}

// A cluster file's measured products correct the curve where they were measured and leave it far away;
// a bad entry is named.
TEST(Contract, MeasuredGemmShapesCorrectTheCurveNearThem) {
    json c = {{"gpu", "cpu-1x2"}, {"num_gpus", 1}, {"gpus_per_node", 1}, {"peak_tflops", 0.4}, {"peak_tflops_fp32", 0.2},
              {"memory_gb", 16}, {"intra_node_GBps", 30}, {"inter_node_GBps", 30}, {"gemm_max", 0.8},
              {"gemm_half_dim", 0}};
    const planner::Cluster plain = planner::cluster_from_json(c, "c.json");
    const auto P = planner::Precision::Fp32;
    EXPECT_DOUBLE_EQ(planner::gemm_efficiency_at(plain, P, 1024, 50304, 256), 0.8);  // the curve alone
    c["gemm_shapes"] = json::array({{{"M", 1024}, {"N", 32768}, {"K", 256}, {"efficiency", 0.6}},
                                    {{"M", 1024}, {"N", 1024}, {"K", 256}, {"efficiency", 0.8}}});
    const planner::Cluster measured = planner::cluster_from_json(c, "c.json");
    EXPECT_NEAR(planner::gemm_efficiency_at(measured, P, 1024, 32768, 256), 0.6, 1e-12);  // its measurement
    EXPECT_NEAR(planner::gemm_efficiency_at(measured, P, 1024, 1024, 256), 0.8, 1e-12);
    const double head = planner::gemm_efficiency_at(measured, P, 1024, 50304, 256);  // near the slow one
    EXPECT_GT(head, 0.6);
    EXPECT_LT(head, 0.7);
    EXPECT_DOUBLE_EQ(planner::gemm_efficiency_at(measured, P, 1 << 20, 1 << 20, 1 << 20), 0.8);  // far: the curve
    // calibrate's 26 shapes, all measured at 0.6: within a factor of 4 of one of them the correction, past
    // every one the curve, however many there are
    json many = c;
    many["gemm_shapes"] = json::array();
    for (int M : {256, 1024})
        for (auto [K, N] : {std::pair{64, 192}, {64, 256}, {128, 384}, {128, 512}, {256, 768}, {256, 1024}, {512, 512},
                            {512, 2048}, {1024, 1024}, {128, 8192}, {256, 8192}, {256, 32768}, {32, 256}})
            many["gemm_shapes"].push_back({{"M", M}, {"N", N}, {"K", K}, {"efficiency", 0.6}});
    const planner::Cluster all = planner::cluster_from_json(many, "c.json");
    EXPECT_DOUBLE_EQ(planner::gemm_efficiency_at(all, P, 8192, 4096, 4096), 0.8);
    EXPECT_NEAR(planner::gemm_efficiency_at(all, P, 1024, 768, 256), 0.6, 1e-12);
    const double between = planner::gemm_efficiency_at(all, P, 2048, 1024, 256);
    EXPECT_GT(between, 0.6);
    EXPECT_LT(between, 0.75);
    // the lanes' own list serves ranks that run lanes, the other one the rest
    c["threads_per_rank"] = 2, c["lanes_gemm_max"] = 0.5, c["lanes_gemm_half_dim"] = 0;
    c["lanes_gemm_shapes"] = json::array({{{"M", 1024}, {"N", 32768}, {"K", 256}, {"efficiency", 0.25}}});
    const planner::Cluster lanes = planner::cluster_from_json(c, "c.json");
    EXPECT_NEAR(planner::gemm_efficiency_at(lanes, P, 1024, 32768, 256, true), 0.25, 1e-12);
    EXPECT_NEAR(planner::gemm_efficiency_at(lanes, P, 1024, 32768, 256, false), 0.6, 1e-12);
    // written back as read
    const planner::Cluster back = planner::cluster_from_json(planner::cluster_to_json(lanes), "back.json");
    EXPECT_EQ(planner::cluster_to_json(back), planner::cluster_to_json(lanes));
    EXPECT_FALSE(planner::cluster_to_json(plain).contains("gemm_shapes"));
    // bad entries: the file, the entry and the fix
    auto error_of = [](const json& bad) {
        try {
            planner::cluster_from_json(bad, "cpu.json");
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    json bad = c;
    bad["gemm_shapes"][1]["efficiency"] = 1.5;
    std::string m = error_of(bad);
    EXPECT_NE(m.find("cpu.json: gemm_shapes[1].efficiency is 1.5, above the peak"), std::string::npos) << m;
    EXPECT_NE(m.find("HINT"), std::string::npos) << m;
    bad = c, bad["lanes_gemm_shapes"][0].erase("K");
    m = error_of(bad);
    EXPECT_NE(m.find("lanes_gemm_shapes[0] needs a positive number 'K'"), std::string::npos) << m;
    bad = c, bad["alone_speedup"] = 0.5;
    m = error_of(bad);
    EXPECT_NE(m.find("alone_speedup must be in [1, 4] (got 0.5"), std::string::npos) << m;
    bad = c, bad["gemm_shapes"] = 3;
    m = error_of(bad);
    EXPECT_NE(m.find("'gemm_shapes' must be a list"), std::string::npos) << m;
}

TEST(Contract, LlamaModelFile) {
    const json j = {{"layers", 80}, {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"ffn_hidden", 28672},
                    {"vocab", 32000}, {"seq_len", 4096}, {"arch", "llama"}};
    const cost::ModelShape m = planner::model_from_json(j, "llama.json");
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_FALSE(m.biases);
    EXPECT_NEAR(double(cost::total_params(m)) / 1e9, 68.98, 0.01);  // Llama-2 70B
}

}  // namespace
