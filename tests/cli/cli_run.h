// tests/cli/cli_run.h: running the `shardlm` binary from the tests: a shell command with its output
// captured and its exit status (128 + signal when a signal ended it), and the mpirun prefix.
#pragma once
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "shardlm/io/atomic_file.h"

namespace shardlm::test {

inline const std::string kSrc = SHARDLM_SOURCE_DIR;
inline const std::string kBin = std::string(SHARDLM_BINARY_DIR) + "/shardlm";
inline const std::string kFix = kSrc + "/tests/fixtures/gpt2_e2e";

struct CmdResult {
    int code = 0;     // exit status; 128 + signal if a signal ended the command
    std::string out;  // stdout and stderr
};

// Runs `cmd` through the shell with stdin from /dev/null; log receives its output.
inline CmdResult sh(const std::string& cmd, const std::filesystem::path& log) {
    const int rc = std::system((cmd + " < /dev/null > " + log.string() + " 2>&1").c_str());
    CmdResult r;
    r.code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    r.out = std::filesystem::exists(log) ? io::read_file(log.string()) : "";
    return r;
}

// "mpirun --allow-run-as-root --oversubscribe -np N " (extra: more mpirun flags, e.g. -x VAR=value).
inline std::string mpirun(int np, const std::string& extra = "") {
    return std::string(SHARDLM_MPIEXEC) + " --allow-run-as-root --oversubscribe " + extra + " -np " + std::to_string(np) +
           " ";
}

// The tiny fixture model of tests/fixtures/gpt2_e2e, G = 4 rows of T = 16.
inline std::string train_fixture(const std::string& extra) {
    return kBin + " train --init " + kFix + " --data " + kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 2 " +
           extra;
}

// A test with its own empty temporary directory `tmp` (named after the suite and the process),
// removed afterwards.
class CliTest : public ::testing::Test {
protected:
    std::filesystem::path tmp =
        std::filesystem::temp_directory_path() /
        ("shardlm_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name()) + "_" +
         std::to_string(::getpid()));
    void SetUp() override {
        std::filesystem::remove_all(tmp);
        std::filesystem::create_directories(tmp);
    }
    void TearDown() override { std::filesystem::remove_all(tmp); }

    // Runs cmd (its output in tmp/<name>.log) and expects it to succeed; returns the output.
    std::string run(const std::string& cmd, const std::string& name) {
        const CmdResult r = sh(cmd, tmp / (name + ".log"));
        EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
        return r.out;
    }
    // The command fails, and says `want`.
    void fails(const std::string& cmd, const std::string& want) {
        const CmdResult r = sh(cmd, tmp / "err.log");
        EXPECT_NE(r.code, 0) << cmd;
        EXPECT_NE(r.out.find(want), std::string::npos) << cmd << "\n" << r.out;
    }
};

}  // namespace shardlm::test
