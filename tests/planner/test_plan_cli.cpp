// `shardlm plan` through the binary: the contract command (model, cluster and policy files, --json),
// the search table, --svg, and errors that name the file, the key and the fix.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";

class PlanCli : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_plan_" + std::to_string(::getpid()));
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }

    std::string write(const std::string& name, const std::string& text) {
        const std::string path = (tmp / name).string();
        std::ofstream(path) << text;
        return path;
    }
    // Runs `shardlm plan ARGS`; stdout and stderr into *out; returns the exit status.
    int plan(const std::string& args, std::string* out) {
        const std::string log = (tmp / "out.log").string();
        const int rc = std::system((kBin + " plan " + args + " > " + log + " 2>&1").c_str());
        *out = shardlm::io::read_file(log);
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);  // the exit code
    }
    std::string model() {
        return write("model.json", R"({"layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn_hidden": 49152,
                                       "vocab": 50257, "seq_len": 2048, "arch": "gpt"})");
    }
    // The JSON of `plan --policy` for the test model and cluster, G 1536, T 2048, with --optimizer opt.
    nlohmann::json plan_policy(const std::string& policy, const std::string& opt) {
        std::string out;
        EXPECT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                           " --global-batch 1536 --seq 2048 --json --optimizer " + opt, &out), 0) << out;
        return nlohmann::json::parse(out);
    }
    std::string cluster() {
        return write("cluster.json", R"({"gpu": "A100-80GB", "num_gpus": 1024, "gpus_per_node": 8, "peak_tflops": 312,
                                         "memory_gb": 80, "intra_node_GBps": 300, "inter_node_GBps": 25})");
    }
};

TEST_F(PlanCli, ContractCommandPrintsOneJsonObject) {
    const std::string policy = write("policy.json", R"({"tp": 8, "pp": 8, "zero_stage": 1, "micro_batch": 1,
        "virtual_stages": 4, "recompute": "selective", "sequence_parallel": true, "precision": "bf16"})");
    std::string out;
    ASSERT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                       " --global-batch 1536 --seq 2048 --json", &out), 0) << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    for (const char* k : {"feasible", "reason", "memory_gb_per_gpu", "step_time_s", "tokens_per_s",
                          "tokens_per_s_per_gpu", "tflops_per_gpu", "hfu_tflops_per_gpu", "mfu"})
        EXPECT_TRUE(j.contains(k)) << k;
    for (const char* k : {"params", "grads", "optimizer", "activations", "buffers", "total"})
        EXPECT_TRUE(j["memory_gb_per_gpu"].contains(k)) << k;
    EXPECT_TRUE(j["feasible"].get<bool>()) << j.dump(2);
    EXPECT_EQ(j["policy"]["dp"], 16);
    // the file names no framework: the answer says which it took and why (Megatron-LM on A100s), and
    // names nothing it did not choose
    EXPECT_EQ(j["planner_chose"]["framework"]["value"], "megatron") << j["planner_chose"].dump();
    EXPECT_EQ(j["policy"]["framework"], "megatron");
    EXPECT_FALSE(j["planner_chose"].contains("micro_batch"));
    EXPECT_EQ(j["policy"]["micro_batch"], 1);
}

// A policy that cannot run (inconsistent, impossible values such as tp 0 or ZeRO stage 5, or too large) is a
// full answer, the JSON with its reason, and exits 3 as the search does when no policy fits.
TEST_F(PlanCli, APolicyThatCannotRunIsAnAnswerThatExitsThree) {
    std::string out;
    const std::string policy = write("p.json", R"({"tp": 3})");
    ASSERT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                       " --global-batch 1536 --seq 2048 --json", &out), 3) << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    EXPECT_FALSE(j["feasible"].get<bool>());
    EXPECT_NE(j["reason"].get<std::string>().find("tp*pp*cp = 3"), std::string::npos) << j["reason"];
    for (const auto& [bad, want] : {std::pair{R"({"tp": 0})", "tp, pp and cp"}, {R"({"zero_stage": 5})", "zero_stage"},
                                    {R"({"micro_batch": 0})", "micro_batch"}}) {
        const std::string f = write("bad.json", bad);
        EXPECT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + f + " --global-batch 1536 --seq 2048", &out), 3)
            << bad << "\n" << out;
        EXPECT_NE(out.find(want), std::string::npos) << bad << "\n" << out;
    }
}

TEST_F(PlanCli, InconsistentModelIsAReasonWhenEvaluatingAPolicy) {
    std::string out;
    const std::string m = write("m.json", R"({"layers": 4, "hidden": 100, "heads": 3, "vocab": 1000, "seq_len": 128})");
    const std::string policy = write("p.json", "{}");
    ASSERT_EQ(plan("--model " + m + " --cluster " + cluster() + " --policy " + policy + " --global-batch 1024 --json", &out), 3)
        << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    EXPECT_FALSE(j["feasible"].get<bool>());
    EXPECT_NE(j["reason"].get<std::string>().find("not a multiple of heads"), std::string::npos) << j["reason"];
    const std::string zero = write("z.json", R"({"layers": 0, "hidden": 64, "heads": 0, "kv_heads": 0, "vocab": 10, "seq_len": 8})");
    for (const char* flags : {" --json", ""}) {
        ASSERT_EQ(plan("--model " + zero + " --cluster " + cluster() + " --policy " + policy + " --global-batch 8" + flags, &out), 3)
            << out;
        EXPECT_NE(out.find("must be > 0"), std::string::npos) << out;
    }
    EXPECT_NE(plan("--model " + m + " --cluster " + cluster() + " --global-batch 1024", &out), 0);  // search: an error
    EXPECT_NE(out.find("HINT"), std::string::npos) << out;
}

TEST_F(PlanCli, SearchPrintsTheTopPoliciesAndWritesAnSvg) {
    std::string out;
    const std::string svg = (tmp / "plan.svg").string();
    ASSERT_EQ(plan("--model gpt3-175b --gpu A100-80GB --gpus-per-node 8 --nodes 128 --global-batch 1536 --seq 2048 "
                   "--top 5 --svg " + svg, &out), 0) << out;
    EXPECT_NE(out.find("why #1: tp="), std::string::npos) << out;
    EXPECT_NE(out.find("\n  5 "), std::string::npos) << out;  // five rows
    const std::string s = shardlm::io::read_file(svg);
    EXPECT_EQ(s.rfind("<svg", 0), 0u);
    EXPECT_NE(s.find("activations"), std::string::npos);
    EXPECT_NE(s.find("PP bubble"), std::string::npos);
}

TEST_F(PlanCli, SearchJsonAndPresets) {
    std::string out;
    ASSERT_EQ(plan("--model llama2-70b --gpu H100-SXM --nodes 8 --global-batch 512 --json --top 3", &out), 0) << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    EXPECT_EQ(j["policies"].size(), 3u);
    EXPECT_EQ(j["model"]["kv_heads"], 8);
    EXPECT_EQ(j["seq"], 4096);
    EXPECT_LT(j["search_time_s"].get<double>(), 2.0);
}

TEST_F(PlanCli, BadInputNamesTheFileTheKeyAndTheFix) {
    std::string out;
    const std::string bad = write("bad.json", R"({"tp": 8, "zero": 1})");
    EXPECT_NE(plan("--model " + model() + " --cluster " + cluster() + " --policy " + bad + " --global-batch 8", &out), 0);
    EXPECT_NE(out.find(bad), std::string::npos) << out;
    EXPECT_NE(out.find("unknown key 'zero'"), std::string::npos) << out;
    EXPECT_NE(out.find("HINT"), std::string::npos) << out;
    EXPECT_NE(plan("--model gpt3-175b --cluster /nonexistent.json --global-batch 8", &out), 0);
    EXPECT_NE(out.find("/nonexistent.json"), std::string::npos) << out;
    EXPECT_NE(plan("--model gpt9 --global-batch 8", &out), 0);
    EXPECT_NE(out.find("llama-65b"), std::string::npos) << out;  // the hint lists the presets
    EXPECT_NE(plan("--model gpt2", &out), 0);
    EXPECT_NE(out.find("--global-batch"), std::string::npos) << out;
}

}  // namespace

namespace {

// Issue 21, item 8: what no policy can meet is said, with the reason, and does not exit 0.
TEST_F(PlanCli, SaysWhyNothingFitsAndRefusesImpossibleRestrictions) {
    std::string out;
    const std::string gpt3 = "--model gpt3-175b --gpu A100-80GB --gpus-per-node 8 --nodes 128 --global-batch 1536 ";
    int rc = plan(gpt3 + "--tp 5", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--tp 5 does not divide the 96 attention heads of gpt3-175b"), std::string::npos) << out;
    rc = plan(gpt3 + "--tp 3", &out);  // 96 heads split 3 ways, but 1024 GPUs do not
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--tp 3 does not divide the cluster's 1024 GPUs"), std::string::npos) << out;
    rc = plan(gpt3 + "--pp 5", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--pp 5 does not divide the 96 layers"), std::string::npos) << out;
    // 175B parameters on one 80 GB GPU: nothing fits, and the exit status says so
    rc = plan("--model gpt3-175b --gpu A100-80GB --gpus-per-node 1 --nodes 1 --global-batch 8", &out);
    EXPECT_EQ(rc, 3) << out;
    EXPECT_NE(out.find("no policy fits: the leanest, "), std::string::npos) << out;
    EXPECT_NE(out.find("GB per GPU of 80"), std::string::npos) << out;
    rc = plan("--model gpt3-175b --gpu A100-80GB --gpus-per-node 1 --nodes 1 --global-batch 8 --json", &out);
    EXPECT_EQ(rc, 3) << out;
    EXPECT_NE(out.find("\"reason\": \"the leanest, "), std::string::npos) << out;
    // sequence lengths: 0 is not the default, and a learned position table has no rows past its context
    rc = plan(gpt3 + "--seq 0", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--seq must be > 0 (got 0)"), std::string::npos) << out;
    rc = plan(gpt3 + "--seq 1000000", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--seq 1000000 is longer than gpt3-175b's context of 2048 tokens"), std::string::npos) << out;
    rc = plan("--model " + model() + " --cluster " + cluster() + " --global-batch 1536 --seq 4096", &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("context of 2048 tokens"), std::string::npos) << out;
    // shorter is fine, and rotary positions have no table
    EXPECT_EQ(plan(gpt3 + "--seq 1024 --top 1", &out), 0) << out;
    EXPECT_EQ(plan("--model llama2-70b --gpu H100-SXM --nodes 8 --global-batch 512 --seq 8192 --top 1", &out), 0) << out;
}

// --optimizer counts that optimiser's state as `train --memory-report` does: adam8bit's 2 bytes
// (+ absmax) per parameter instead of Adam's 8, Adafactor's none (no first moment by default).
TEST_F(PlanCli, TheOptimiserStateFollowsOptimizer) {
    const std::string policy = write("policy.json", R"({"tp": 8, "pp": 8, "zero_stage": 0, "micro_batch": 1,
        "recompute": "selective", "sequence_parallel": true, "precision": "fp32"})");
    auto optimizer_gb = [&](const std::string& opt) {
        return plan_policy(policy, opt)["memory_gb_per_gpu"]["optimizer"].get<double>();
    };
    const double adamw = optimizer_gb("adamw"), q8 = optimizer_gb("adam8bit"), af = optimizer_gb("adafactor");
    EXPECT_GT(adamw, 1.0);
    EXPECT_NEAR(q8 / adamw, (2.0 + 8.0 / 2048) / 8.0, 1e-6);
    EXPECT_EQ(af, 0.0);
    EXPECT_EQ(optimizer_gb("sophia"), adamw);  // m and the Hessian estimate h
    std::string out;
    EXPECT_NE(plan("--model " + model() + " --cluster " + cluster() + " --global-batch 1536 --optimizer adamz", &out), 0);
    EXPECT_NE(out.find("--optimizer 'adamz' is not known"), std::string::npos) << out;
}

// Sophia runs one more forward and backward (its Hessian estimate) every 10 steps, with that pass's
// communication and bubble: on average 1.1 times every term of the step but the optimiser's own.
TEST_F(PlanCli, SophiaAddsItsHessianPassToTheStep) {
    const std::string policy = write("policy.json", R"({"tp": 8, "pp": 8, "zero_stage": 1, "micro_batch": 1,
        "recompute": "selective", "sequence_parallel": true, "precision": "bf16"})");
    const nlohmann::json a = plan_policy(policy, "adamw"), s = plan_policy(policy, "sophia");
    for (const char* k : {"compute", "tp_comm", "pp_bubble", "pp_comm", "dp_comm"})
        EXPECT_NEAR(s["time_s"][k].get<double>(), 1.1 * a["time_s"][k].get<double>(), 1e-9) << k;
    EXPECT_EQ(s["time_s"]["optimizer"], a["time_s"]["optimizer"]);
    EXPECT_GT(a["time_s"]["compute"].get<double>(), 0.0);
    EXPECT_NEAR(s["tflops_per_gpu"].get<double>() * s["step_time_s"].get<double>(),
                a["tflops_per_gpu"].get<double>() * a["step_time_s"].get<double>(), 1e-6);  // the same model FLOPs
    std::string out;
    EXPECT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                       " --global-batch 1536 --seq 2048 --optimizer sophia", &out), 0) << out;
    EXPECT_NE(out.find("a Hessian forward and backward every 10 steps"), std::string::npos) << out;
}

// --dp-algos: the data-parallel algorithms beside the policy's all-reduce, by their bytes on the dp
// group's link. GPT-2 on 4 nodes x 8 GPUs, data parallelism across the nodes: on a 25 GB/s network the
// all-reduce (overlapped with the backward) is the fastest but for the rarest synchronisations; on
// 1 Gbit/s (0.125 GB/s) averaging every 16 steps, DiLoCo and PowerSGD beat it, gossip on a ring does
// not (a whole replica to each of two neighbours every step).
TEST_F(PlanCli, DpAlgosShowWhenEachBeatsTheAllReduce) {
    const std::string policy = write("dp.json", R"({"tp": 1, "pp": 1, "zero_stage": 0, "micro_batch": 4,
        "recompute": "none", "sequence_parallel": false, "precision": "bf16", "framework": "megatron",
        "attention": "flash", "grad_accum_fp32": false})");
    auto table = [&](double gbps) {
        const std::string cl = write("net.json", R"({"gpu": "A100-80GB", "num_gpus": 32, "gpus_per_node": 8,
            "peak_tflops": 312, "memory_gb": 80, "intra_node_GBps": 300, "inter_node_link_efficiency": 1,
            "inter_node_GBps": )" + std::to_string(gbps) + "}");
        std::string out;
        EXPECT_EQ(plan("--model gpt2 --cluster " + cl + " --policy " + policy + " --global-batch 512 --seq 1024 --dp-algos",
                       &out), 0) << out;
        return out;
    };
    auto verdict = [](const std::string& out, const std::string& algo) {
        const size_t at = out.find("\n  " + algo + " ");
        EXPECT_NE(at, std::string::npos) << algo << "\n" << out;
        const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
        return line.find("faster") != std::string::npos;
    };
    const std::string fast = table(25), slow = table(0.125);
    EXPECT_NE(fast.find("data-parallel algorithms over 32 ranks (across the network)"), std::string::npos) << fast;
    for (const char* a : {"local-sgd H=4", "gossip ring", "topk 1% + EF", "qsgd 8 levels (4 bits)"}) EXPECT_FALSE(verdict(fast, a)) << a;
    for (const char* a : {"local-sgd H=16", "diloco H=50", "diloco H=100", "powersgd R=4 + EF", "powersgd R=8, vocab R=1, bf16 + EF"})
        EXPECT_TRUE(verdict(slow, a)) << a;
    EXPECT_FALSE(verdict(slow, "gossip ring"));
    // the bytes are the engine's formulas: local SGD every 16 steps sends 2(N-1)/N 4P / 16 per step
    std::smatch m;
    ASSERT_TRUE(std::regex_search(slow, m, std::regex("local-sgd H=16 +([0-9.]+)"))) << slow;
    const double P = 124439808;  // GPT-2's parameters
    EXPECT_NEAR(std::stod(m[1].str()), 2.0 * 31 / 32 * 4 * P / 16 / 1e6, 0.01);
}

}  // namespace

namespace {

// Issue 24's contract: policy "precision": "fp8" and "attention", cluster "peak_tflops_fp8"; the
// output keys unchanged. FP8 runs the linear layers at the FP8 peak (faster than bf16, same model
// FLOPs), flash attention keeps no s x s activations, and an A100 (no FP8) is a reason that names it.
TEST_F(PlanCli, Fp8AndFlashAttentionThroughTheContractCommand) {
    const std::string h100 = write("h100.json", R"({"gpu": "H100-SXM", "num_gpus": 1024, "gpus_per_node": 8,
        "peak_tflops_fp8": 1979})");
    auto run = [&](const std::string& cluster_file, const std::string& precision, const std::string& attention) {
        const std::string policy = write("p.json", R"({"tp": 8, "pp": 8, "zero_stage": 1, "micro_batch": 1,
            "virtual_stages": 4, "recompute": "none", "sequence_parallel": true, "precision": ")" + precision +
            R"(", "attention": ")" + attention + R"("})");
        std::string out;
        const int code = plan("--model " + model() + " --cluster " + cluster_file + " --policy " + policy +
                              " --global-batch 1536 --seq 2048 --json", &out);
        const nlohmann::json j = nlohmann::json::parse(out);
        EXPECT_EQ(code, j["feasible"].get<bool>() ? 0 : 3) << out;
        return j;
    };
    const nlohmann::json bf16 = run(h100, "bf16", "flash"), fp8 = run(h100, "fp8", "flash");
    const nlohmann::json naive = run(h100, "bf16", "naive");
    for (const char* k : {"feasible", "reason", "policy", "memory_gb_per_gpu", "time_s", "step_time_s", "tokens_per_s",
                          "tokens_per_s_per_gpu", "tflops_per_gpu", "hfu_tflops_per_gpu", "mfu", "micro_batches",
                          "fullest_stage", "links", "model", "cluster", "global_batch", "seq"})
        EXPECT_TRUE(fp8.contains(k)) << k;
    EXPECT_EQ(fp8["policy"]["precision"], "fp8");
    EXPECT_EQ(naive["policy"]["attention"], "naive");
    EXPECT_EQ(fp8["cluster"]["peak_tflops_fp8"], 1979);
    EXPECT_LT(fp8["time_s"]["compute"].get<double>(), 0.8 * bf16["time_s"]["compute"].get<double>());
    // MFU against each precision's own peak: FP8's is twice bf16's
    EXPECT_NEAR(fp8["mfu"].get<double>() / fp8["tflops_per_gpu"].get<double>(), 1.0 / 1979, 1e-9);
    EXPECT_NEAR(bf16["mfu"].get<double>() / bf16["tflops_per_gpu"].get<double>(), 1.0 / 989, 1e-9);
    // the s x s probabilities: naive attention keeps a s^2 b per layer, flash only row statistics
    EXPECT_GT(naive["memory_gb_per_gpu"]["activations"].get<double>(),
              1.3 * bf16["memory_gb_per_gpu"]["activations"].get<double>());
    // an A100 has no FP8: a reason, no numbers
    const nlohmann::json a100 = run(cluster(), "fp8", "flash");
    EXPECT_FALSE(a100["feasible"].get<bool>());
    EXPECT_NE(a100["reason"].get<std::string>().find("needs FP8 tensor cores"), std::string::npos) << a100["reason"];
    // a bad attention value names the key and the choices
    const std::string bad = write("bad.json", R"({"attention": "paged"})");
    std::string out;
    EXPECT_NE(plan("--model " + model() + " --cluster " + h100 + " --policy " + bad + " --global-batch 1536 --seq 2048",
                   &out), 0);
    EXPECT_NE(out.find("'attention'"), std::string::npos) << out;
    EXPECT_NE(out.find("\"flash\", \"naive\""), std::string::npos) << out;
}

// --explain names every term of the chosen policy's step time and memory, the dominant one first;
// without it the "why #1" line still names the two leaders. A search for FP8 on an A100 is an error.
TEST_F(PlanCli, ExplainNamesTheDominantTerms) {
    std::string out;
    ASSERT_EQ(plan("--model llama3-70b --gpu H100-SXM --nodes 8 --global-batch 512 --seq 8192 --precision fp8 --top 2 "
                   "--explain", &out), 0) << out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("explain #1: step [0-9.]+ s: ([a-zA-Z /]+) [0-9.]+ s \\(([0-9]+) %\\)")))
        << out;
    EXPECT_GE(std::stoi(m[2].str()), 34) << "the first term is the largest: " << m[1];
    EXPECT_NE(out.find("; memory "), std::string::npos) << out;
    EXPECT_NE(out.find("dominant terms: step: "), std::string::npos) << out;
    EXPECT_NE(plan("--model llama3-70b --gpu A100-80GB --nodes 8 --global-batch 512 --precision fp8", &out), 0);
    EXPECT_NE(out.find("no FP8 tensor cores"), std::string::npos) << out;
    EXPECT_NE(out.find("H100-SXM"), std::string::npos) << out;
    // one policy: every term, the products with their shapes, in the table and in the JSON
    const std::string policy = write("p.json", R"({"tp": 8, "pp": 8, "zero_stage": 1, "micro_batch": 1,
        "virtual_stages": 4, "recompute": "selective", "sequence_parallel": true})");
    ASSERT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                   " --global-batch 1536 --seq 2048 --explain", &out), 0) << out;
    for (const char* k : {"\ncompute ", "MLP up projection", " x 6144 x 12288", "% of peak", "exposed communication ",
                          "TP all-gathers and reduce-scatters", "ZeRO-1 reduce-scatter of the gradients",
                          "pipeline bubble ", "\nmemory "})
        EXPECT_NE(out.find(k), std::string::npos) << k << "\n" << out;
    ASSERT_EQ(plan("--model " + model() + " --cluster " + cluster() + " --policy " + policy +
                   " --global-batch 1536 --seq 2048 --explain --json", &out), 0) << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    ASSERT_TRUE(j.contains("terms")) << out;
    double sum = 0;
    for (const auto& t : j["terms"]["compute"]) sum += t["seconds"].get<double>();
    EXPECT_NEAR(sum, j["time_s"]["compute"].get<double>(), 1e-9 * sum);
    EXPECT_EQ(j["terms"]["compute"][0]["shape"].get<std::string>().find(" x "), 4u) << j["terms"].dump(1);
}

}  // namespace

namespace {

// The optional policy key "compile" through the contract command (the answer's keys unchanged) and
// `--compile` on a search: torchtitan's FSDP run of Llama 3 8B on 8 H100s, whose peak is its loss:
// compiled, 4 bytes a logit in place of eager's 12 (16384 x 128256 logits: 16.8 GB less before the
// allocator's overhead). A bad value names the choices.
TEST_F(PlanCli, CompileKeyAndFlag) {
    const std::string h100 = write("h100.json", R"({"gpu": "H100-SXM", "num_gpus": 8, "gpus_per_node": 8})");
    auto activations = [&](const std::string& compile) {
        const std::string policy = write("p.json", R"({"zero_stage": 3, "micro_batch": 2, "recompute": "selective",
            "framework": "pytorch", "compile": ")" + compile + R"("})");
        std::string out;
        const int code = plan("--model llama3-8b --cluster " + h100 + " --policy " + policy + " --global-batch 16 --seq 8192 --json", &out);
        const nlohmann::json j = nlohmann::json::parse(out);
        EXPECT_EQ(code, j["feasible"].get<bool>() ? 0 : 3) << out;
        EXPECT_FALSE(j["policy"].contains("compile"));
        return j["memory_gb_per_gpu"]["activations"].get<double>();
    };
    EXPECT_NEAR(activations("none") - activations("blocks_and_loss"), 16384.0 * 128256 * 8 / 1e9, 1e-6);
    EXPECT_DOUBLE_EQ(activations("blocks"), activations("none"));
    std::string out;
    EXPECT_NE(plan("--model llama3-8b --gpu H100-SXM --nodes 1 --global-batch 16 --seq 8192 --compile model", &out), 0);
    EXPECT_NE(out.find("none, blocks or blocks_and_loss"), std::string::npos) << out;
    EXPECT_EQ(plan("--model llama3-8b --gpu H100-SXM --nodes 1 --global-batch 16 --seq 8192 --framework pytorch "
                   "--compile blocks_and_loss --top 1", &out), 0) << out;
}

}  // namespace

namespace {

// Clusters no one can have are refused by name: a part of a node, a peak of 1e-300 TFLOP/s, a billion
// nodes (whose GPU count once overflowed into a negative number).
TEST_F(PlanCli, ImpossibleClustersAreErrors) {
    std::string out;
    for (const auto& [file, want] :
         {std::pair{R"({"gpu": "A100-80GB", "num_gpus": 7, "gpus_per_node": 8})",
                    "num_gpus (7) is not a whole number of nodes of 8 GPUs (for one node of 7, say gpus_per_node 7)"},
          {R"({"gpu": "A100-80GB", "num_gpus": 8, "gpus_per_node": 8, "peak_tflops": 1e-300})",
           "peak_tflops must be in [0.001, 1e6] (got 1e-300)"}}) {
        const std::string c = write("c.json", file);
        EXPECT_EQ(plan("--model gpt2 --cluster " + c + " --global-batch 8 --seq 1024", &out), 1) << file;
        EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
    }
    EXPECT_EQ(plan("--model gpt2 --gpu A100-80GB --nodes 1000000000 --global-batch 8 --seq 1024", &out), 1);
    EXPECT_NE(out.find("--nodes 1000000000 x --gpus-per-node 8 is 8000000000 GPUs, above the planner's 10000000"),
              std::string::npos) << out;
}

}  // namespace
