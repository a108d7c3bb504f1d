// Checkpoints resume bit-exact: a run of 2N steps, and a run killed by SIGKILL right after its
// step-N checkpoint (and again while writing its step-2N checkpoint) then resumed to 2N, write the
// same losses and gradient norms to the last bit and the same final weights, byte for byte.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
const std::string kFix = kSrc + "/tests/fixtures/gpt2_e2e";

int run(const std::string& args, const std::string& env = "") {
    std::string cmd = env + " " + kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --data-order random" +
                      " --seq 16 --global-batch 4 --micro-batch 2 --optimizer adamw --lr 3e-3 --lr-schedule cosine" +
                      " --warmup 2 --weight-decay 0.1 --grad-clip 1.0 --val-data " + kFix + "/data.bin --val-every 2" +
                      " --val-batches 2 --seed 7 --threads 2 " + args + " > /dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

std::vector<std::string> lines(const std::string& path) {
    std::vector<std::string> out;
    std::ifstream f(path);
    for (std::string l; std::getline(f, l);)
        if (!l.empty()) out.push_back(l);
    return out;
}

// fp32 and bf16 matmuls (the default config's) alike.
class Resume : public ::testing::TestWithParam<std::string> {};

TEST_P(Resume, KilledAndResumedRunIsBitExact) {
    fs::path tmp = fs::temp_directory_path() / ("shardlm_resume_" + GetParam() + "_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    const std::string a = (tmp / "a").string(), b = (tmp / "b").string();
    const std::string flags = "--steps 8 --ckpt-every 4 --matmul-precision " + GetParam();
    ASSERT_EQ(run(flags + " --out " + a), 0);
    // killed right after the step-4 checkpoint
    EXPECT_EQ(run(flags + " --out " + b, "SHARDLM_TEST_KILL_AFTER_CKPT=4"), 128 + SIGKILL);
    ASSERT_TRUE(fs::exists(fs::path(b) / "ckpt_00000004" / "meta.json"));
    // resumed, and killed again half-way through writing the step-8 checkpoint
    EXPECT_EQ(run(flags + " --resume --out " + b, "SHARDLM_TEST_KILL_IN_CKPT=8"), 128 + SIGKILL);
    EXPECT_FALSE(fs::exists(fs::path(b) / "ckpt_00000008"));
    // resumed again from step 4: completes
    ASSERT_EQ(run(flags + " --resume --out " + b), 0);

    auto ma = lines(a + "/metrics.jsonl"), mb = lines(b + "/metrics.jsonl");
    ASSERT_EQ(ma.size(), 8u);
    ASSERT_EQ(mb.size(), 8u);
    for (size_t i = 0; i < 8; i++) {
        auto ja = nlohmann::json::parse(ma[i]), jb = nlohmann::json::parse(mb[i]);
        EXPECT_EQ(ja["step"], jb["step"]);
        EXPECT_EQ(ja["loss"].get<double>(), jb["loss"].get<double>()) << "step " << i;  // bit-exact
        EXPECT_EQ(ja["grad_norm"].get<double>(), jb["grad_norm"].get<double>()) << "step " << i;
        EXPECT_EQ(ja.contains("val_loss"), jb.contains("val_loss"));
        if (ja.contains("val_loss")) {
            EXPECT_EQ(ja["val_loss"].get<double>(), jb["val_loss"].get<double>());
        }
    }
    for (const char* f : {"model.rank00000-of-00001.safetensors", "optimizer.rank00000-of-00001.safetensors"})
        EXPECT_EQ(shardlm::io::read_file(a + "/ckpt_00000008/" + f), shardlm::io::read_file(b + "/ckpt_00000008/" + f))
            << f;
    // no temporary checkpoint directory is left behind
    for (const auto& e : fs::directory_iterator(b)) EXPECT_NE(e.path().filename().string().rfind(".ckpt_", 0), 0u) << e.path();
    fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(MatmulPrecision, Resume, ::testing::Values("fp32", "bf16"));

// --stop-after N runs the first N steps of the --steps schedule (the learning rate as the whole run has it),
// checkpoints and stops; --resume continues it to the end, to the bytes of the run that never stopped.
TEST(StopAfter, RunsTheFirstStepsOfTheScheduleAndResumesToTheWholeRun) {
    fs::path tmp = fs::temp_directory_path() / ("shardlm_stop_after_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    const std::string a = (tmp / "a").string(), b = (tmp / "b").string();
    ASSERT_EQ(run("--steps 8 --ckpt-every 4 --out " + a), 0);
    ASSERT_EQ(run("--steps 8 --ckpt-every 4 --stop-after 3 --out " + b), 0);
    EXPECT_TRUE(fs::exists(fs::path(b) / "ckpt_00000003" / "meta.json"));
    const auto ma = lines(a + "/metrics.jsonl"), stopped = lines(b + "/metrics.jsonl");
    ASSERT_EQ(stopped.size(), 3u);
    for (size_t i = 0; i < 3; i++) {
        const auto ja = nlohmann::json::parse(ma[i]), jb = nlohmann::json::parse(stopped[i]);
        EXPECT_EQ(ja["lr"].get<double>(), jb["lr"].get<double>()) << "step " << i;  // the 8-step schedule's
        EXPECT_EQ(ja["loss"].get<double>(), jb["loss"].get<double>()) << "step " << i;
    }
    EXPECT_TRUE(nlohmann::json::parse(stopped[2]).contains("val_loss"));  // the last step is evaluated
    ASSERT_EQ(run("--steps 8 --ckpt-every 4 --resume --out " + b), 0);
    ASSERT_EQ(lines(b + "/metrics.jsonl").size(), 8u);
    for (const char* f : {"model.rank00000-of-00001.safetensors", "optimizer.rank00000-of-00001.safetensors"})
        EXPECT_EQ(shardlm::io::read_file(a + "/ckpt_00000008/" + f), shardlm::io::read_file(b + "/ckpt_00000008/" + f))
            << f;
    EXPECT_NE(run("--steps 8 --stop-after 9 --out " + (tmp / "c").string()), 0);  // past the schedule: refused
    fs::remove_all(tmp);
}

TEST(ResumeErrors, IncompatibleCheckpointIsAClearError) {
    fs::path tmp = fs::temp_directory_path() / ("shardlm_resume_bad_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    ASSERT_EQ(run("--steps 2 --out " + tmp.string()), 0);
    std::string log = (tmp / "log.txt").string();
    std::string cmd = kBin + " train --model tiny --data " + kFix + "/data.bin --seq 16 --global-batch 2 --micro-batch 2" +
                      " --steps 4 --resume --out " + tmp.string() + " > " + log + " 2>&1";
    EXPECT_NE(std::system(cmd.c_str()), 0);
    std::string msg = shardlm::io::read_file(log);
    for (const char* want : {"ckpt_00000002 holds a GPT-2 family, 2 layers x 4 heads, width 48",
                             "resuming would change ffn_hidden, n_ctx, n_embd, vocab_size", "n_embd: checkpoint 48, this run 64",
                             "--n-embd 48"})
        EXPECT_NE(msg.find(want), std::string::npos) << want << "\n" << msg;
    fs::remove_all(tmp);
}

}  // namespace
