// Bad input gets one clear line naming the file, the field and the fix, and a non-zero exit.
#include <gtest/gtest.h>

#include <cstdint>
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

struct Result {
    int code;
    std::string out;
};

class CliErrors : public ::testing::Test {
protected:
    fs::path tmp = fs::temp_directory_path() / ("shardlm_errors_" + std::to_string(::getpid()));
    void SetUp() override { fs::create_directories(tmp); }
    void TearDown() override { fs::remove_all(tmp); }
    Result run(const std::string& args, const std::string& stdin_text = "") {
        std::string log = (tmp / "log.txt").string(), in = (tmp / "in.txt").string();
        shardlm::io::write_file_atomic(in, stdin_text);
        int rc = std::system((kBin + " " + args + " < " + in + " > " + log + " 2>&1").c_str());
        return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, shardlm::io::read_file(log)};
    }
    std::string file(const std::string& name, const std::string& content) {
        std::string p = (tmp / name).string();
        shardlm::io::write_file_atomic(p, content);
        return p;
    }
    std::string train_args() const {
        return "train --init " + kFix + " --data " + kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 2 --steps 1";
    }
};

#define EXPECT_ERROR(r, ...)                                                             \
    do {                                                                                 \
        EXPECT_NE((r).code, 0) << (r).out;                                               \
        for (const char* s : {__VA_ARGS__}) EXPECT_NE((r).out.find(s), std::string::npos) \
            << "missing '" << s << "' in: " << (r).out;                                  \
    } while (0)

TEST_F(CliErrors, ConfigTypoSuggestsTheClosestKey) {
    std::string cfg = file("c.json", R"({"model": "tiny", "stpes": 10})");
    auto r = run("train --config " + cfg + " --data " + kFix + "/data.bin");
    EXPECT_ERROR(r, "c.json", "unknown key 'stpes'", "did you mean 'steps'");
}

TEST_F(CliErrors, ConfigWrongTypeNamesKeyAndType) {
    std::string cfg = file("c.json", R"({"model": "tiny", "steps": "ten"})");
    auto r = run("train --config " + cfg + " --data " + kFix + "/data.bin");
    EXPECT_ERROR(r, "c.json", "'steps'", "must be an integer");
    cfg = file("d.json", R"({"lr": [1]})");
    EXPECT_ERROR(run("train --config " + cfg), "d.json", "'lr'", "must be a number");
    cfg = file("e.json", "{not json");
    EXPECT_ERROR(run("train --config " + cfg), "e.json", "not valid JSON");
}

TEST_F(CliErrors, FlagsOutOfRange) {
    EXPECT_ERROR(run("train --init " + kFix + " --data " + kFix + "/data.bin --seq 100 --global-batch 2 --micro-batch 2"),
                 "--seq 100", "n_ctx = 64");
    EXPECT_ERROR(run("train --init " + kFix + " --data " + kFix + "/data.bin --global-batch 5 --micro-batch 2"),
                 "--global-batch (5)", "multiple of --micro-batch (2)");
    EXPECT_ERROR(run(train_args() + " --optimizer adamx"), "unknown optimizer 'adamx'", "adamw");
    EXPECT_ERROR(run(train_args() + " --lr-schedule linear"), "--lr-schedule 'linear'");
    EXPECT_ERROR(run("train --model gpt5 --data " + kFix + "/data.bin"), "unknown model preset 'gpt5'", "gpt2");
    EXPECT_ERROR(run("train --data " + kFix + "/data.bin"), "--init DIR or --model PRESET");
    // shape overrides: only for a preset, and they must make a consistent model
    EXPECT_ERROR(run(train_args() + " --n-layer 3"), "--n-layer", "config.json", "use --model");
    EXPECT_ERROR(run("train --model tiny --n-embd 66 --data " + kFix + "/data.bin --seq 16"), "--model tiny",
                 "n_embd");
    EXPECT_ERROR(run("train --model tiny --n-ctx 8 --data " + kFix + "/data.bin --seq 16"), "--seq 16", "n_ctx = 8");
}

TEST_F(CliErrors, BadShards) {
    EXPECT_ERROR(run("train --init " + kFix + " --data /nonexistent/x.bin --seq 16 --global-batch 2 --micro-batch 2"),
                 "/nonexistent/x.bin", "cannot open", "shardlm tokenize");
    std::string good = shardlm::io::read_file(kFix + "/data.bin");
    std::string bad = good;
    bad[0] = 1;  // magic
    std::string p = file("bad.bin", bad);
    EXPECT_ERROR(run("train --init " + kFix + " --data " + p + " --seq 16 --global-batch 2 --micro-batch 2"), "bad.bin",
                 "bad magic");
    p = file("short.bin", good.substr(0, good.size() - 10));
    EXPECT_ERROR(run("train --init " + kFix + " --data " + p + " --seq 16 --global-batch 2 --micro-batch 2"), "short.bin",
                 "truncated");
    p = file("header.bin", good.substr(0, 100));
    EXPECT_ERROR(run("train --init " + kFix + " --data " + p + " --seq 16 --global-batch 2 --micro-batch 2"),
                 "header.bin", "truncated header");
}

TEST_F(CliErrors, InitShapesThatDoNotMatch) {
    fs::path d = tmp / "model";
    fs::create_directories(d);
    fs::copy_file(kFix + "/model.safetensors", d / "model.safetensors");
    std::string cfg = shardlm::io::read_file(kFix + "/config.json");
    auto pos = cfg.find("\"n_embd\": 48");
    ASSERT_NE(pos, std::string::npos) << cfg;
    cfg.replace(pos, 12, "\"n_embd\": 64");
    file("model/config.json", cfg);
    auto r = run("train --init " + d.string() + " --data " + kFix + "/data.bin --seq 16 --global-batch 2 --micro-batch 2");
    EXPECT_ERROR(r, "model.safetensors", "transformer.wte.weight", "expected [211, 64]");
    fs::remove(d / "config.json");
    EXPECT_ERROR(run("train --init " + d.string() + " --data " + kFix + "/data.bin"), "no config.json");
}

TEST_F(CliErrors, VocabMissing) {
    EXPECT_ERROR(run("encode --vocab /nonexistent/gpt2", "hello"), "/nonexistent/gpt2", "fetch_assets.sh");
}

TEST_F(CliErrors, FailedRunLeavesNoHalfWrittenFiles) {
    // A run that fails at start-up (bad shard) writes nothing into its run directory.
    std::string out = (tmp / "run").string();
    run("train --init " + kFix + " --data /nonexistent/x.bin --out " + out);
    EXPECT_FALSE(fs::exists(out));
}

}  // namespace
