// What a run directory guards: one job at a time (train/run_lock.h), a resume that keeps the model it
// trained (model/architecture.h) and never rewinds the run's records, an --overwrite that deletes only
// what shardlm wrote, and a resume that says what is wrong with the metrics it keeps.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::kBin;
using shardlm::test::kFix;
using shardlm::test::sh;

class RunGuard : public shardlm::test::CliTest {
protected:
    CmdResult train(const std::string& args) {
        return sh(shardlm::test::train_fixture("--optimizer adamw --lr 1e-3 --threads 1 " + args), tmp / "log.txt");
    }
    CmdResult llama(const std::string& args) {
        return sh(kBin + " train --model llama-tiny --data " + kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 2 " +
                      "--threads 1 " + args,
                  tmp / "log.txt");
    }
    static size_t rows(const fs::path& run) { return shardlm::test::metrics(run).size(); }
};

// A second job on a run directory in use is refused naming the live PID (train and launch alike) and
// changes nothing there; once the first has ended, its lock file is free; a lock file left by a
// process that no longer runs is taken over and said so.
TEST_F(RunGuard, OneJobPerRunDirectory) {
    const fs::path run = tmp / "run";
    const pid_t first = shardlm::test::spawn(shardlm::test::train_fixture("--threads 1 --steps 1000000 --ckpt-every 50 --out " + run.string()),
                                             tmp / "first.txt");
    shardlm::test::wait_until([&] { return rows(run) >= 60; });
    const std::string pid = std::to_string(first);
    const std::string config = shardlm::io::read_file((run / "config.json").string());
    CmdResult r = sh(shardlm::test::train_fixture("--threads 1 --steps 1000000 --resume --lr 3e-3 --out " + run.string()),
                     tmp / "second.txt");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("run directory '" + run.string() + "' is in use by another job: PID " + pid + " on "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(shardlm train, since "), std::string::npos) << r.out;
    r = sh(kBin + " launch -np 1 -- train " + shardlm::test::train_fixture("--steps 10 --resume --out " + run.string()).substr(kBin.size() + 7),
           tmp / "launch.txt");
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("launch: run directory '" + run.string() + "' is in use by another job: PID " + pid), std::string::npos) << r.out;
    EXPECT_EQ(shardlm::io::read_file((run / "config.json").string()), config);  // the refused runs wrote nothing
    EXPECT_FALSE(fs::exists(run / "config_history.jsonl"));
    ASSERT_EQ(kill(first, SIGTERM), 0);
    EXPECT_EQ(shardlm::test::wait_status(first), 128 + SIGTERM);
    const size_t done = rows(run);
    // the lock file stays with the dead PID in it: taken over, and said so
    ASSERT_TRUE(fs::exists(run / ".shardlm-job.lock"));
    r = train("--steps " + std::to_string(done + 2) + " --resume --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("the lock of PID " + pid + " on "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no longer running, is taken over"), std::string::npos) << r.out;
    EXPECT_EQ(rows(run), done + 2);
}

// Every knob that changes what a checkpoint's tensors mean is recorded, and a resume that changes any is
// refused naming each key with both values and the flags that keep them.
TEST_F(RunGuard, ResumeRefusesAChangedArchitecture) {
    const fs::path run = tmp / "llama";
    ASSERT_EQ(llama("--steps 2 --out " + run.string()).code, 0);
    const nlohmann::json meta = nlohmann::json::parse(shardlm::io::read_file((run / "ckpt_00000002" / "meta.json").string()));
    for (const char* k : {"norm", "position", "rope_theta", "mlp", "ffn_hidden", "bias", "tie_embeddings", "n_kv_head", "qk_norm",
                          "n_experts", "ln_eps"})
        EXPECT_TRUE(meta["model"].contains(k)) << k;
    for (const auto& [flags, want] :
         {std::pair{"--mlp gelu", "mlp: checkpoint swiglu, this run gelu"},
          {"--tie-embeddings true", "tie_embeddings: checkpoint false, this run true"},
          {"--rope-theta 500000", "rope_theta: checkpoint 10000.0, this run 500000.0"},
          {"--rms-norm-eps 1e-6", "ln_eps: checkpoint "},
          {"--n-kv-head 4", "n_kv_head: checkpoint 2, this run 4"},
          {"--qk-norm true", "qk_norm: checkpoint false, this run true"}}) {
        const CmdResult r = llama(std::string("--steps 4 --resume ") + flags + " --out " + run.string());
        EXPECT_NE(r.code, 0) << flags;
        EXPECT_NE(r.out.find("resuming would change"), std::string::npos) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find(want), std::string::npos) << flags << "\n" << r.out;
        EXPECT_NE(r.out.find("HINT: resume with the checkpoint's settings"), std::string::npos) << r.out;
    }
    EXPECT_EQ(rows(run), 2u);  // the refusals trained nothing
    ASSERT_EQ(llama("--steps 4 --resume --out " + run.string()).code, 0);  // the same model resumes
    EXPECT_EQ(rows(run), 4u);
    // a GPT-2 checkpoint resumed as LLaMA: what each is
    const fs::path gpt = tmp / "gpt";
    ASSERT_EQ(train("--steps 2 --out " + gpt.string()).code, 0);
    const CmdResult r = llama("--steps 4 --resume --out " + gpt.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("ckpt_00000002 holds a GPT-2 family, 2 layers x 4 heads, width 48"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("this run asks for a LLaMA family"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("norm: checkpoint layernorm, this run rmsnorm"), std::string::npos) << r.out;
}

// A resume never rewinds what the run directory shows was trained: a finished run whose checkpoints are
// gone, or metrics past a checkpoint the run's --ckpt-every must have written, are refused and left as
// they are; a run killed before its first checkpoint starts again from step 0.
TEST_F(RunGuard, AResumeNeverRewindsTheRunsRecords) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 6 --ckpt-every 2 --keep-ckpts 1 --out " + run.string()).code, 0);
    const std::string metrics = shardlm::io::read_file((run / "metrics.jsonl").string());
    const std::string summary = shardlm::io::read_file((run / "summary.json").string());
    fs::remove_all(run / "ckpt_00000006");
    CmdResult r = train("--steps 6 --resume --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("summary.json records a run finished at step 6 but the newest checkpoint in"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("restore the checkpoint of step 6 (ckpt_00000006)"), std::string::npos) << r.out;
    fs::remove(run / "summary.json");
    r = train("--steps 6 --resume --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("metrics.jsonl records 6 steps, so this run wrote a checkpoint at step 4 (--ckpt-every 2), but the "
                         "newest checkpoint left is none"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(shardlm::io::read_file((run / "metrics.jsonl").string()), metrics);  // untouched
    // killed before its first checkpoint (--ckpt-every 4, one row): a resume starts afresh
    const fs::path early = tmp / "early";
    ASSERT_EQ(train("--steps 1 --ckpt-every 4 --out " + early.string()).code, 0);
    fs::remove_all(early / "ckpt_00000001");
    fs::remove(early / "summary.json");
    r = train("--steps 3 --ckpt-every 4 --resume --out " + early.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("starting from step 0"), std::string::npos) << r.out;
    EXPECT_EQ(rows(early), 3u);
    (void)summary;
}

// --overwrite deletes the files and directories shardlm wrote, by their exact names (checkpoints, their
// temporaries and the damaged ones set aside), and nothing else: a user's ckpt_backup/ stays.
TEST_F(RunGuard, OverwriteDeletesOnlyWhatShardlmWrote) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 4 --ckpt-every 2 --out " + run.string()).code, 0);
    fs::create_directories(run / "ckpt_backup");
    std::ofstream(run / "ckpt_backup" / "notes.txt") << "mine\n";
    fs::create_directories(run / "ckpt_2024");
    fs::rename(run / "ckpt_00000002", run / "ckpt_00000002.damaged");
    fs::create_directories(run / ".ckpt_00000006.tmp.0");
    const CmdResult r = train("--steps 2 --overwrite --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("1 checkpoint (latest ckpt_00000004), 1 damaged checkpoint, 1 unfinished checkpoint"), std::string::npos)
        << r.out;
    EXPECT_TRUE(fs::exists(run / "ckpt_backup" / "notes.txt"));
    EXPECT_TRUE(fs::exists(run / "ckpt_2024"));
    EXPECT_FALSE(fs::exists(run / "ckpt_00000002.damaged"));
    EXPECT_FALSE(fs::exists(run / "ckpt_00000004"));
    EXPECT_FALSE(fs::exists(run / ".ckpt_00000006.tmp.0"));
    EXPECT_EQ(rows(run), 2u);
}

// A resume keeps the rows the checkpoint covers and says what is wrong with them: a line that is not a
// row (dropped), steps with no row, steps twice (the first kept).
TEST_F(RunGuard, ResumeSaysWhatIsWrongWithTheMetrics) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 8 --ckpt-every 8 --out " + run.string()).code, 0);
    std::vector<std::string> lines;
    {
        std::ifstream in(run / "metrics.jsonl");
        for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    ASSERT_EQ(lines.size(), 8u);
    {
        std::ofstream out(run / "metrics.jsonl");  // rows 2, 3 (twice), 4..7; garbage in the middle; 0, 1, missing
        out << lines[2] << "\n{\"step\": 3, \"loss\n" << lines[3] << "\n" << lines[3] << "\n";
        for (size_t i = 4; i < 8; i++) out << lines[i] << "\n";
    }
    fs::remove(run / "summary.json");
    const CmdResult r = train("--steps 10 --resume --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("metrics.jsonl: line 2 is not a step's row (not JSON with an integer \"step\"): dropped"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("metrics.jsonl has no row for steps 0-1 of the 8 the checkpoint covers"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("metrics.jsonl holds step 3 more than once: the first row of each is kept"), std::string::npos) << r.out;
    EXPECT_EQ(rows(run), 8u);  // 2..7 once, then 8, 9
}

// --steps 0 trains nothing: its summary has no loss to report (null, not 0).
TEST_F(RunGuard, StepsZeroReportsNoLoss) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 0 --out " + run.string()).code, 0);
    const nlohmann::json s = nlohmann::json::parse(shardlm::io::read_file((run / "summary.json").string()));
    EXPECT_TRUE(s["final_loss"].is_null()) << s.dump();
    EXPECT_EQ(s["steps"], 0);
}

}  // namespace
