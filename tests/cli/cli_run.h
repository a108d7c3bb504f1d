// tests/cli/cli_run.h: running the `shardlm` binary from the tests: a shell command with its output
// captured and its exit status (128 + signal when a signal ended it), and the mpirun prefix.
#pragma once
#include <spawn.h>
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/io/atomic_file.h"

extern char** environ;

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

// Starts `cmd` in the background (exec'd by sh, so it is the child itself and inherits our signal
// dispositions), its output into log.
inline pid_t spawn(const std::string& cmd, const std::filesystem::path& log) {
    const std::string line = "exec " + cmd + " < /dev/null > " + log.string() + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    return pid;
}
// Its exit status (128 + signal when a signal ended it).
inline int wait_status(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
// The objects of a JSONL file (metrics.jsonl, launch.jsonl), one per non-empty line.
inline std::vector<nlohmann::json> jsonl(const std::filesystem::path& p) {
    std::vector<nlohmann::json> v;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) v.push_back(nlohmann::json::parse(line));
    return v;
}
// Waits (at most 60 s) until done() holds.
template <class Done>
void wait_until(const Done& done) {
    for (int i = 0; i < 6000 && !done(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}
// Waits until the file holds `text`.
inline void wait_for_text(const std::filesystem::path& file, const std::string& text) {
    wait_until([&] { return std::filesystem::exists(file) && io::read_file(file.string()).find(text) != std::string::npos; });
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
    void TearDown() override {
        remove_memory_checkpoints(tmp);
        std::filesystem::remove_all(tmp);
    }
    // The checkpoints kept in memory of the runs under dir (train/memory_checkpoint.h: each run directory's
    // memory_checkpoints.json names them): a run that did not end at --steps leaves them in /dev/shm.
    static void remove_memory_checkpoints(const std::filesystem::path& dir) {
        std::error_code ec;
        for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::recursive_directory_iterator();
             it.increment(ec))
            if (it->path().filename() == "memory_checkpoints.json") {
                const nlohmann::json j = nlohmann::json::parse(io::read_file(it->path().string()), nullptr, false);
                std::error_code gone;
                if (j.is_object() && j.contains("dir") && j["dir"].is_string()) std::filesystem::remove_all(j["dir"].get<std::string>(), gone);
            }
    }

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
