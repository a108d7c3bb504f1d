// `shardlm generate` samples from a checkpoint directory or from a run directory (its latest
// checkpoint), deterministically for a seed. Needs the GPT-2 vocabulary (tools/fetch_assets.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "shardlm/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;
const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";

std::string run(const std::string& args, const fs::path& log, int* rc) {
    *rc = std::system((kBin + " " + args + " > " + log.string() + " 2>&1").c_str());
    return shardlm::io::read_file(log.string());
}

TEST(Generate, FromRunDirectoryAndCheckpoint) {
    fs::path tmp = fs::temp_directory_path() / ("shardlm_generate_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    int rc;
    std::string out = run("train --model tiny --data " + kSrc + "/tests/fixtures/gpt2_e2e/data.bin --seq 16" +
                              " --global-batch 2 --micro-batch 2 --steps 2 --out " + (tmp / "run").string(),
                          tmp.string() + ".log", &rc);
    ASSERT_EQ(rc, 0) << out;
    const std::string args = " --prompt \"Hello world\" --max-tokens 8 --seed 3 --vocab " + kSrc + "/data/gpt2";
    std::string a = run("generate --ckpt " + (tmp / "run").string() + args, tmp.string() + ".a", &rc);
    ASSERT_EQ(rc, 0) << a;
    EXPECT_EQ(a.rfind("Hello world", 0), 0u) << a;
    EXPECT_GT(a.size(), std::string("Hello world").size() + 1) << a;
    std::string b = run("generate --ckpt " + (tmp / "run" / "ckpt_00000002").string() + args, tmp.string() + ".b", &rc);
    ASSERT_EQ(rc, 0) << b;
    EXPECT_EQ(a, b);  // the run directory means its latest checkpoint; same seed, same text
    std::string c = run("generate --ckpt " + tmp.string() + args, tmp.string() + ".c", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(c.find("train with --out RUN_DIR first"), std::string::npos) << c;
    fs::remove_all(tmp);
    for (const char* s : {".log", ".a", ".b", ".c"}) fs::remove(tmp.string() + s);
}

}  // namespace
