// Bad input gets one clear line naming the file, the field and the fix, and a non-zero exit.
#include <gtest/gtest.h>
#include <link.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
    // A shell test that process $p is shardlm after its re-exec: its executable is the binary (not the
    // `env` that started it) and SHARDLM_NO_REEXEC=1 is in its environment.
    static std::string is_reexeced_shardlm() {
        return "[ \"$(readlink /proc/$p/exe)\" = \"" + fs::canonical(kBin).string() +
               "\" ] && tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -q SHARDLM_NO_REEXEC=1";
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
    EXPECT_ERROR(run(train_args() + " --optimizer adamx"), "--optimizer 'adamx' is not known", "adamw");
    EXPECT_ERROR(run(train_args() + " --lr-schedule exponential"), "--lr-schedule 'exponential'");
    EXPECT_ERROR(run("train --model gpt5 --data " + kFix + "/data.bin"), "unknown model preset 'gpt5'", "gpt2");
    EXPECT_ERROR(run("train --data " + kFix + "/data.bin"), "--init DIR or --model PRESET");
    // shape overrides: only for a preset, and they must make a consistent model
    EXPECT_ERROR(run(train_args() + " --n-layer 3"), "--n-layer", "config.json", "use --model");
    EXPECT_ERROR(run("train --model tiny --n-embd 66 --data " + kFix + "/data.bin --seq 16"), "--model tiny",
                 "n_embd");
    EXPECT_ERROR(run("train --model tiny --n-ctx 8 --data " + kFix + "/data.bin --seq 16"), "--seq 16", "n_ctx = 8");
    // how the threads share a micro-batch
    EXPECT_ERROR(run(train_args() + " --thread-split rows"), "--thread-split 'rows'", "auto, batch or kernel");
    EXPECT_ERROR(run(train_args() + " --thread-split batch --tp 2"), "--thread-split batch", "--tp 1",
                 "--thread-split kernel");
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


// ---- issue 10: each bad input of the reliability issue gets one clear line ------------------------

TEST_F(CliErrors, ScheduleAndDecayOutOfRange) {
    EXPECT_ERROR(run(train_args() + " --lr 1e-3 --lr-min 1e-2 --lr-schedule cosine"), "--lr-min 0.01 must be in [0, --lr 0.001]",
                 "decay from --lr down to --lr-min");
    EXPECT_ERROR(run(train_args() + " --weight-decay -0.1"), "--weight-decay must be >= 0 (got -0.1)");
}

TEST_F(CliErrors, ModelLargerThanTheMachineSaysHowMuchItNeeds) {
    auto r = run("train --model gpt3-175b --data " + kFix + "/data.bin --seq 16 --global-batch 1 --micro-batch 1");
    EXPECT_ERROR(r, "model gpt3-175b does not fit in this machine's memory", "the run needs 2.8 TB",
                 "parameters 698.4 GB, gradients 698.4 GB, optimizer state 1.4 TB", "available (MemAvailable in /proc/meminfo",
                 "shardlm plan");
    EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
}

TEST_F(CliErrors, DirectoryAsDataNamesItsShards) {
    EXPECT_ERROR(run("train --init " + kFix + " --data " + kFix + " --seq 16 --global-batch 2 --micro-batch 2"),
                 "is a directory, not a shard file", "pass one of its shards", "data.bin");
}

TEST_F(CliErrors, NoOutSaysNothingIsSaved) {
    auto r = run(train_args());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("note: no --out: this run saves nothing"), std::string::npos) << r.out;
}

TEST_F(CliErrors, GenerateBeyondTheContext) {
    const std::string out = (tmp / "run").string();
    ASSERT_EQ(run("train --model tiny --n-ctx 32 --data " + kFix + "/data.bin --seq 16 --global-batch 2 --micro-batch 2 "
                  "--steps 1 --out " + out).code, 0);
    const std::string gen = "generate --ckpt " + out + " --vocab " + kSrc + "/data/gpt2 --prompt \"Hello world\"";
    EXPECT_ERROR(run(gen + " --max-tokens 40"), "--max-tokens 40 with a prompt of 2 tokens goes beyond the model's context",
                 "(n_ctx = 32)", "at most 31 new tokens fit");
    auto r = run(gen + " --max-tokens 31");
    EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(CliErrors, TokenizeRefusesAnEmptyTrainingSplitAndBinaryFiles) {
    const std::string vocab = " --vocab " + kSrc + "/data/gpt2";
    const std::string one = file("one.txt", "Four score and seven years ago.\n");
    EXPECT_ERROR(run("tokenize " + one + " --out " + (tmp / "a").string() + vocab), "1 document",
                 "leaves the training shard empty", "--val-fraction 0");
    EXPECT_FALSE(fs::exists(tmp / "a" / "sotu_train.bin"));
    EXPECT_EQ(run("tokenize " + one + " --val-fraction 0 --out " + (tmp / "a").string() + vocab).code, 0);
    fs::create_directories(tmp / "docs");
    for (int i = 0; i < 4; i++) file("docs/" + std::to_string(i) + ".txt", "Document " + std::to_string(i) + " says hello.\n");
    std::string binary;
    for (int i = 0; i < 4096; i++) binary += char((i * 7919) % 256);
    file("docs/zz.txt", binary);
    EXPECT_ERROR(run("tokenize " + (tmp / "docs").string() + " --out " + (tmp / "b").string() + vocab),
                 "docs/zz.txt' is not UTF-8 text", "NUL byte");
    EXPECT_FALSE(fs::exists(tmp / "b"));
    binary.erase(std::remove(binary.begin(), binary.end(), '\0'), binary.end());
    file("docs/zz.txt", binary);
    EXPECT_ERROR(run("tokenize " + (tmp / "docs").string() + " --out " + (tmp / "b").string() + vocab),
                 "docs/zz.txt' is not UTF-8 text", "of its bytes are control characters or invalid UTF-8");
    // a large last document would make most of the tokens validation
    fs::remove(tmp / "docs" / "zz.txt");
    std::string big;
    for (int i = 0; i < 200; i++) big += "The last speech is very long. ";
    file("docs/zz.txt", big);
    EXPECT_ERROR(run("tokenize " + (tmp / "docs").string() + " --out " + (tmp / "b").string() + vocab),
                 "the validation split would hold", "docs/zz.txt' alone has");
}

TEST_F(CliErrors, ProcessesAreNamedShardlmAfterTheBlasReexec) {
    // without GOMP_SPINCOUNT shardlm re-execs itself (SHARDLM_NO_REEXEC=1 then shows in its environ; the
    // `env` that starts it has it too, inherited from this test binary's own re-exec: wait for shardlm)
    const std::string script = "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u SHARDLM_NO_REEXEC " + kBin + " train --init " + kFix +
                               " --data " + kFix + "/data.bin --seq 16 --steps 100000000 > /dev/null 2>&1 & p=$!; "
                               "for i in $(seq 200); do " + is_reexeced_shardlm() + " && break; sleep 0.02; done; "
                               "cat /proc/$p/comm; kill -KILL $p; wait $p";
    const std::string log = (tmp / "comm.txt").string();
    std::system(("(" + script + ") > " + log + " 2>&1").c_str());
    const std::string out = shardlm::io::read_file(log);
    EXPECT_EQ(out.substr(0, out.find('\n')), "shardlm") << out;  // the shell may add "Killed" after it
}

// With OMP_PROC_BIND, libgomp binds the first thread to one place before main() runs; the re-exec'd
// image must still spread its threads over the places (it once inherited that one CPU as its whole
// CPU set, and every thread ran on one core). Counted: the CPUs the running threads may use.
TEST_F(CliErrors, TheReexecKeepsEveryOpenMpPlace) {
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2) GTEST_SKIP() << "fewer than 2 CPUs";
    // clang's builds (tools/sanitize.sh) run LLVM's libomp beside the libgomp that OpenBLAS loads;
    // libgomp then binds the first thread before main() and libomp builds its places from that one
    // CPU, in either image. The product is built with g++ and libgomp alone.
    const auto has_libomp = [] {
        return dl_iterate_phdr([](dl_phdr_info* i, size_t, void*) { return std::strstr(i->dlpi_name, "/libomp.so") ? 1 : 0; },
                               nullptr) != 0;
    };
    if (has_libomp()) GTEST_SKIP() << "two OpenMP runtimes in this build (libomp and OpenBLAS's libgomp)";
    const std::string cpus = "grep -h Cpus_allowed_list /proc/$p/task/*/status 2>/dev/null | awk '{ n = split($2, r, \",\"); "
                             "for (i = 1; i <= n; i++) { m = split(r[i], e, \"-\"); for (c = e[1]; c <= e[m]; c++) u[c] = 1 } } "
                             "END { k = 0; for (c in u) k++; print k }'";
    const std::string script = "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u SHARDLM_NO_REEXEC OMP_PROC_BIND=spread "
                               "OMP_PLACES=threads " + kBin + " train --init " + kFix + " --data " + kFix +
                               "/data.bin --seq 16 --steps 100000000 --threads 2 > /dev/null 2>&1 & p=$!; n=0; "
                               "for i in $(seq 250); do if " + is_reexeced_shardlm() + "; then n=$(" + cpus +
                               "); fi; [ \"$n\" -ge 2 ] && break; "
                               "sleep 0.04; done; echo \"cpus $n\"; kill -KILL $p; wait $p";
    const std::string log = (tmp / "cpus.txt").string();
    std::system(("(" + script + ") > " + log + " 2>&1").c_str());
    const std::string out = shardlm::io::read_file(log);
    EXPECT_EQ(out.substr(0, out.find('\n')), "cpus 2") << out;
}

}  // namespace
