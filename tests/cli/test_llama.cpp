// LLaMA-style models through the binary (issue 22): a tiny LLaMA with grouped-query attention
// (tests/fixtures/llama_tiny: RMSNorm, rotary embeddings, SwiGLU, no biases, untied head, 4 query
// heads sharing 2 key/value heads) trains 10 AdamW steps equal to a float64 PyTorch reference
// (tools/reference/llama_torch.py) in one process and in tp2, pp2, dp2 ZeRO-1, tp2 x pp2 and context-parallel
// layouts (cp2, cp4 all-gather, dp2 x cp2 ZeRO-3, cp2 x tp2: rotary angles at the rows' global positions); its
// checkpoints resume across layouts; an HF LLaMA directory round-trips through export bit-exact;
// the architecture errors name the fix.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "run_dir.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/safetensors.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
const std::string kFix = kSrc + "/tests/fixtures/llama_tiny";

class Llama : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_llama_" + std::to_string(::getpid()));
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }

    // the reference's hyper-parameters (expected.json "hyper"), G = 4 rows of T = 16
    static std::string train(const std::string& extra) {
        return kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --data-order sequential --seq 16" +
               " --global-batch 4 --optimizer adamw --lr 3e-3 --lr-schedule constant --weight-decay 0.1" +
               " --beta1 0.9 --beta2 0.95 --eps 1e-6 --grad-clip 1.0 " + extra;
    }
    static std::string mpirun(int np) {
        return std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
    }
    std::string run(const std::string& cmd, const std::string& name) {
        const std::string log = (tmp / (name + ".log")).string();
        const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
        const std::string out = shardlm::io::read_file(log);
        EXPECT_EQ(rc, 0) << cmd << "\n" << out;
        return out;
    }
    void fails(const std::string& cmd, const std::string& want) {
        const std::string log = (tmp / "err.log").string();
        EXPECT_NE(std::system((cmd + " > " + log + " 2>&1").c_str()), 0) << cmd;
        const std::string o = shardlm::io::read_file(log);
        EXPECT_NE(o.find(want), std::string::npos) << cmd << "\n" << o;
    }
    // the run's losses and gradient norms against the float64 reference (measured: 5e-8 and 1e-6)
    static void expect_reference(const fs::path& run, const std::string& what, size_t from = 0) {
        shardlm::test::expect_reference_curve(run, kFix, what, 1e-5, from);
    }
};

TEST_F(Llama, TrainsEqualToFloat64PytorchInEveryLayout) {
    struct L {
        const char* name;
        int np;
        const char* flags;
    };
    const L layouts[] = {
        {"one process, 2 micro-batches", 1, "--micro-batch 2 --threads 2"},
        {"tp2", 2, "--tp 2 --micro-batch 1 --threads 1"},
        {"pp2", 2, "--pp 2 --micro-batch 1 --threads 1"},
        {"dp2 ZeRO-1", 2, "--dp 2 --zero 1 --micro-batch 1 --threads 1"},
        {"tp2 x pp2", 4, "--tp 2 --pp 2 --micro-batch 1 --threads 1"},
        {"cp2", 2, "--cp 2 --micro-batch 2 --threads 1"},
        {"cp4, all-gather", 4, "--cp 4 --cp-comm allgather --micro-batch 1 --threads 1"},
        {"dp2 x cp2 ZeRO-3", 4, "--dp 2 --cp 2 --zero 3 --micro-batch 1 --threads 1"},
        {"cp2 x tp2", 4, "--cp 2 --tp 2 --micro-batch 1 --threads 1"},
    };
    for (const L& l : layouts) {
        const fs::path out = tmp / "run";
        const std::string pre = l.np > 1 ? mpirun(l.np) : "";
        run(pre + train(std::string(l.flags) + " --steps 10 --out " + out.string() + " --overwrite"), "run");
        expect_reference(out, l.name);
        if (l.np == 1) {
            // the final parameters: the reference's float64 run rounded to fp32 (final.safetensors)
            shardlm::test::expect_reference_params(out / "ckpt_00000010", kFix, tmp / "ref", l.name);
        }
    }
}

// Mixed precision on the same model: bf16 in one process, fp16 with dynamic loss scaling under tp2,
// bf16 under dp2 ZeRO-2: the losses stay within 16-bit rounding of the float64 curve (measured in one
// process: bf16 2.6e-4, fp16 5.5e-5 relative).
TEST_F(Llama, MixedPrecisionTracksTheReference) {
    const auto expected = nlohmann::json::parse(shardlm::io::read_file(kFix + "/expected.json"));
    struct M {
        const char* name;
        int np;
        const char* flags;
        double rel;
    };
    for (const M& m : {M{"bf16", 1, "--precision bf16 --micro-batch 2 --threads 2", 2e-3},
                       M{"fp16 tp2", 2, "--precision fp16 --tp 2 --micro-batch 1 --threads 1", 1e-3},
                       M{"bf16 dp2 ZeRO-2", 2, "--precision bf16 --dp 2 --zero 2 --micro-batch 1 --threads 1", 2e-3}}) {
        const fs::path out = tmp / "mixed";
        run((m.np > 1 ? mpirun(m.np) : std::string()) + train(std::string(m.flags) + " --steps 10 --overwrite --out " +
                                                               out.string()),
            "mixed");
        const auto rows = shardlm::test::metrics(out);
        ASSERT_EQ(rows.size(), 10u) << m.name;
        for (size_t s = 0; s < rows.size(); s++) {
            const double loss = rows[s]["loss"], ref = expected["losses"][s];
            EXPECT_NEAR(loss, ref, m.rel * ref) << m.name << ", step " << s;
        }
    }
}

// 5 steps under tp2 x pp2 (sequence parallel), then 5 more resumed under dp2 ZeRO-2 and under one
// process (full recomputation): the curve goes on as the reference's.
TEST_F(Llama, CheckpointsResumeAcrossLayouts) {
    const fs::path a = tmp / "a";
    run(mpirun(4) + train("--tp 2 --pp 2 --sequence-parallel --micro-batch 1 --threads 1 --steps 5 --out " + a.string()), "a");
    for (const char* second : {"dp2", "one"}) {
        const fs::path b = tmp / second;
        fs::remove_all(b);
        fs::copy(a, b, fs::copy_options::recursive);
        const bool dp = std::string(second) == "dp2";
        run((dp ? mpirun(2) : std::string()) +
                train(std::string(dp ? "--dp 2 --zero 2 --micro-batch 1 --threads 1" : "--micro-batch 4 --recompute full") +
                      " --steps 10 --resume --out " + b.string()),
            second);
        expect_reference(b, second);
    }
}

// A checkpoint exports to an HF LLaMA directory (HF names, nn.Linear [out, in], LLaMA config keys),
// which loads back bit-exact, also stored as BF16 (decoding with the GQA cache: tests/model/test_inference.cpp).
TEST_F(Llama, HfDirectoryRoundTripsBitExact) {
    const fs::path run_dir = tmp / "run", hf = tmp / "hf", hf2 = tmp / "hf2", hf16 = tmp / "hf16", back = tmp / "back";
    run(train("--micro-batch 4 --steps 3 --out " + run_dir.string()), "train");
    const fs::path ckpt = run_dir / "ckpt_00000003";
    run(kBin + " export --init " + ckpt.string() + " --out " + hf.string(), "export");
    const auto cfg = nlohmann::json::parse(shardlm::io::read_file((hf / "config.json").string()));
    EXPECT_EQ(cfg["model_type"], "llama");
    EXPECT_EQ(cfg["num_key_value_heads"], 2);
    EXPECT_EQ(cfg["intermediate_size"], 128);
    EXPECT_EQ(cfg["tie_word_embeddings"], false);
    EXPECT_EQ(cfg["rms_norm_eps"], 1e-5);
    shardlm::io::SafetensorsReader st((hf / "model.safetensors").string());
    const auto* k = st.find("model.layers.1.self_attn.k_proj.weight");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->shape, (std::vector<int64_t>{24, 48}));  // [n_kv_head * head_dim, hidden]
    ASSERT_NE(st.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
    ASSERT_NE(st.find("lm_head.weight"), nullptr);
    EXPECT_EQ(st.find("lm_head.weight")->shape, (std::vector<int64_t>{211, 48}));
    // the checkpoint, the HF directory and its re-export hold the same values to the bit
    const auto p_ckpt = shardlm::test::checkpoint_params(ckpt), p_hf = shardlm::test::checkpoint_params(hf);
    EXPECT_EQ(p_ckpt, p_hf);
    run(kBin + " export --init " + hf.string() + " --out " + hf2.string(), "export2");
    EXPECT_EQ(shardlm::io::read_file((hf / "model.safetensors").string()),
              shardlm::io::read_file((hf2 / "model.safetensors").string()));
    EXPECT_EQ(shardlm::io::read_file((hf / "config.json").string()), shardlm::io::read_file((hf2 / "config.json").string()));
    // BF16: every value is the fp32 one rounded to bf16, and training starts from it
    run(kBin + " export --init " + hf.string() + " --dtype BF16 --out " + hf16.string(), "export16");
    const auto p16 = shardlm::test::checkpoint_params(hf16);
    for (const auto& [name, x] : p_hf) {
        const std::vector<float>& y = p16.at(name);
        for (size_t i = 0; i < x.size(); i++)
            ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) * (1.0f / 256)) << name << " " << i;
    }
    run(kBin + " train --init " + hf16.string() + " --data " + kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 4 --steps 1 " +
            "--threads 1 --out " + back.string(),
        "from_bf16");
}

TEST_F(Llama, ArchitectureErrorsNameTheFix) {
    const std::string base = " --data " + kFix + "/data.bin --seq 16 --steps 1 --out " + (tmp / "e").string();
    fails(mpirun(4) + kBin + " train --init " + kFix + " --tp 4" + base,
          "--tp 4 must divide the number of key/value heads (n_kv_head 2)");
    fails(kBin + " train --model llama-tiny --n-kv-head 3" + base, "n_kv_head (3) must divide n_head (4)");
    fails(kBin + " train --model llama-tiny --mlp relu" + base, "--mlp 'relu' is not known");
    fails(kBin + " train --init " + kFix + " --norm layernorm" + base, "with --init the architecture comes from");
    // an HF config with what shardlm does not compute
    const fs::path bad = tmp / "bad";
    fs::create_directories(bad);
    auto cfg = nlohmann::json::parse(shardlm::io::read_file(kFix + "/config.json"));
    cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    shardlm::io::write_file_atomic((bad / "config.json").string(), cfg.dump());
    fs::copy_file(kFix + "/model.safetensors", bad / "model.safetensors");
    fails(kBin + " train --init " + bad.string() + base, "rope_scaling");
    // a LLaMA-named model HF cannot express does not export
    const fs::path run_dir = tmp / "gqa_gpt";
    run(kBin + " train --model tiny --n-layer 1 --n-kv-head 2 --data " + kFix + "/data.bin --seq 16 --global-batch 1 " +
            "--micro-batch 1 --steps 1 --threads 1 --out " + run_dir.string(),
        "gqa_gpt");
    fails(kBin + " export --init " + (run_dir / "ckpt_00000001").string() + " --out " + (tmp / "x").string(),
          "HF has no architecture for this model: norm is layernorm");
}

}  // namespace
