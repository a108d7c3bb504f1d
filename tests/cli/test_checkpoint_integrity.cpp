// Checkpoints that come back, and run directories that belong to one run (issue 10):
// - meta.json records the XXH64 of every file; a flipped byte is refused naming the file, and
//   --resume falls back to the previous good checkpoint (saying so) and continues bit-exact;
// - `train --out DIR` refuses a directory that holds another run unless --resume or --overwrite;
// - resuming with --steps below the checkpoint is an error that leaves the run untouched;
// - `export` never overwrites without --force and never writes into a checkpoint or a run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.h"
#include "run_dir.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::CmdResult;
using shardlm::test::sh;
using shardlm::test::train_fixture;

class CheckpointIntegrity : public shardlm::test::CliTest {
protected:
    CmdResult train(const std::string& args) {
        return sh(train_fixture("--optimizer adamw --lr 3e-3 --data-order random --seed 9 --threads 1 " + args),
                  tmp / "log.txt");
    }
    CmdResult cmd(const std::string& args) { return sh(shardlm::test::kBin + " " + args, tmp / "log.txt"); }
};

// Flips one byte in the middle of the data of `file`.
void flip_byte(const fs::path& file) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << file;
    f.seekg(0, std::ios::end);
    const std::streamoff at = f.tellg() - std::streamoff(64);
    f.seekg(at);
    char c;
    f.get(c);
    f.seekp(at);
    f.put(char(c ^ 0x40));
}

TEST_F(CheckpointIntegrity, DamagedCheckpointFallsBackToThePreviousOne) {
    const fs::path ref = tmp / "ref", run = tmp / "run";
    ASSERT_EQ(train("--steps 6 --out " + ref.string()).code, 0);
    ASSERT_EQ(train("--steps 4 --ckpt-every 2 --out " + run.string()).code, 0);
    flip_byte(run / "ckpt_00000004" / "optimizer.rank00000-of-00001.safetensors");
    const CmdResult r = train("--steps 6 --resume --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* want : {"ckpt_00000004 is damaged", "optimizer.rank00000-of-00001.safetensors: checksum mismatch",
                             "falling back to the previous checkpoint", "ckpt_00000002, the newest good checkpoint"})
        EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
    EXPECT_TRUE(fs::exists(run.string() + "/ckpt_00000004.damaged"));
    // resumed from step 2: the same curve as the uninterrupted run, to the bit
    const auto a = shardlm::test::metrics(ref), b = shardlm::test::metrics(run);
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < 6; i++) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i;
}

// generate --ckpt RUN_DIR takes the newest good checkpoint, as --resume does, saying which it passed over
// (and renames nothing: a reader leaves the run as it is).
TEST_F(CheckpointIntegrity, GenerateFromARunDirectoryPassesOverADamagedNewestCheckpoint) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 4 --ckpt-every 2 --out " + run.string()).code, 0);
    flip_byte(run / "ckpt_00000004" / "model.rank00000-of-00001.safetensors");
    // (the fixture's 211-token vocabulary then meets the GPT-2 tokenizer's 50257: sampling itself is refused, after the choice)
    const CmdResult r = cmd("generate --ckpt " + run.string() + " --max-tokens 4 --prompt hello");
    EXPECT_NE(r.out.find("ckpt_00000004/model.rank00000-of-00001.safetensors: checksum mismatch"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the file is damaged: passed over"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sampling from " + (run / "ckpt_00000002").string() + ", the newest good checkpoint"), std::string::npos)
        << r.out;
    EXPECT_TRUE(fs::exists(run / "ckpt_00000004"));
}

TEST_F(CheckpointIntegrity, DamagedCheckpointIsRefusedAsWeights) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 2 --out " + run.string()).code, 0);
    const fs::path ckpt = run / "ckpt_00000002";
    flip_byte(ckpt / "model.rank00000-of-00001.safetensors");
    const char* file = "model.rank00000-of-00001.safetensors: checksum mismatch";
    CmdResult r = cmd("export --init " + ckpt.string() + " --out " + (tmp / "hf").string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find(file), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(tmp / "hf"));
    r = cmd("train --init " + ckpt.string() + " --data " + shardlm::test::kFix + "/data.bin --seq 16 --steps 1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find(file), std::string::npos) << r.out;
    // every checkpoint of the run damaged: resuming is an error, not a silent fresh start
    r = train("--steps 4 --resume --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("every checkpoint in " + run.string() + " is damaged"), std::string::npos) << r.out;
    // and a second --resume (a scheduler's retry) does not start again from step 0 over the run's metrics
    const std::string metrics = shardlm::io::read_file((run / "metrics.jsonl").string());
    r = train("--steps 4 --resume --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("holds no good checkpoint, only damaged ones set aside earlier (ckpt_00000002.damaged)"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--overwrite"), std::string::npos) << r.out;
    EXPECT_EQ(shardlm::io::read_file((run / "metrics.jsonl").string()), metrics);
    // --overwrite starts afresh
    r = train("--steps 1 --overwrite --out " + run.string());
    EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(CheckpointIntegrity, ResumeWithOtherTrainingSettingsWarnsAndKeepsTheHistory) {
    const fs::path run = tmp / "run";
    auto job = [&](const std::string& args) {
        return sh(shardlm::test::kBin + " train --init " + shardlm::test::kFix + " --data " + shardlm::test::kFix +
                      "/data.bin --seq 16 --micro-batch 2 --threads 1 --out " + run.string() + " " + args,
                  tmp / "log.txt");
    };
    ASSERT_EQ(job("--steps 2 --ckpt-every 2 --global-batch 4 --seed 9").code, 0);
    CmdResult r = job("--steps 4 --global-batch 8 --seed 10 --resume");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: --resume with other settings than the run's (seed 9 -> 10, global_batch 4 -> 8)"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("from step 2 on, this run trains differently"), std::string::npos) << r.out;
    std::ifstream in(run / "config_history.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const nlohmann::json h = nlohmann::json::parse(line);
    EXPECT_EQ(h["replaced_at_step"], 2);
    EXPECT_EQ(h["config"]["seed"], 9);
    EXPECT_EQ(h["config"]["global_batch"], 4);
    // a resume with only more steps or other logging: no warning (the history still grows)
    r = job("--steps 5 --global-batch 8 --seed 10 --log-every 1 --resume");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("warning: --resume with other settings"), std::string::npos) << r.out;
}

TEST_F(CheckpointIntegrity, ARunDirectoryGivenAsWeightsNamesItsCheckpoints) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 2 --ckpt-every 1 --out " + run.string()).code, 0);
    const std::string want = "'" + run.string() + "' is a training run's directory, not weights: its checkpoints are "
                             "ckpt_00000001, ckpt_00000002";
    CmdResult r = cmd("export --init " + run.string() + " --out " + (tmp / "hf").string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
    EXPECT_NE(r.out.find((run / "ckpt_00000002").string() + " (the newest)"), std::string::npos) << r.out;
    r = cmd("train --init " + run.string() + " --data " + shardlm::test::kFix + "/data.bin --seq 16 --steps 1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
}

TEST_F(CheckpointIntegrity, AFullDiskStopsTheRunAndATornRowIsDroppedOnResume) {
    const fs::path run = tmp / "run";
    // /dev/full: every write fails with ENOSPC
    CmdResult r = train("--steps 3 --metrics /dev/full --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("cannot write the metrics of step 1 to '/dev/full': No space left on device"), std::string::npos)
        << r.out;
    // a torn last row (a disk that filled mid-line) is dropped when the run resumes
    fs::remove_all(run);
    ASSERT_EQ(train("--steps 2 --ckpt-every 2 --out " + run.string()).code, 0);
    {
        std::ofstream m(run / "metrics.jsonl", std::ios::app);
        m << "{\"step\": 2, \"loss\": 5.3";
    }
    r = train("--steps 4 --resume --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream in(run / "metrics.jsonl");
    int n = 0;
    for (std::string line; std::getline(in, line); n++)
        EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int>(), n) << line;
    EXPECT_EQ(n, 4);
}

TEST_F(CheckpointIntegrity, AnotherRunIsNeverTrainedIntoSilently) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 6 --ckpt-every 2 --out " + run.string()).code, 0);
    const std::string metrics = shardlm::io::read_file((run / "metrics.jsonl").string());
    const std::string summary = shardlm::io::read_file((run / "summary.json").string());
    CmdResult r = train("--steps 2 --out " + run.string());
    EXPECT_NE(r.code, 0);
    for (const char* want : {"already holds a run", "2 checkpoints (latest ckpt_00000006)", "--resume", "--overwrite"})
        EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
    EXPECT_EQ(shardlm::io::read_file((run / "metrics.jsonl").string()), metrics);
    EXPECT_EQ(shardlm::io::read_file((run / "summary.json").string()), summary);
    // --overwrite: the old run's files go, the new run's checkpoint stays (older, higher-numbered ones
    // would have pruned it)
    r = train("--steps 2 --overwrite --out " + run.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(fs::exists(run / "ckpt_00000002"));
    EXPECT_FALSE(fs::exists(run / "ckpt_00000004"));
    EXPECT_FALSE(fs::exists(run / "ckpt_00000006"));
    EXPECT_EQ(shardlm::test::metrics(run).size(), 2u);
    EXPECT_NE(train("--steps 2 --overwrite --resume --out " + run.string()).code, 0);
}

TEST_F(CheckpointIntegrity, ResumingBelowTheCheckpointIsAnError) {
    const fs::path run = tmp / "run";
    ASSERT_EQ(train("--steps 5 --out " + run.string()).code, 0);
    const std::string summary = shardlm::io::read_file((run / "summary.json").string());
    CmdResult r = train("--steps 3 --resume --out " + run.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("--steps 3 is below the step of the checkpoint to resume (5"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("trained -2 steps"), std::string::npos) << r.out;
    r = train("--steps 5 --resume --out " + run.string());
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("is at step 5, its --steps 5: nothing to train"), std::string::npos) << r.out;
    EXPECT_EQ(shardlm::io::read_file((run / "summary.json").string()), summary);
    EXPECT_EQ(shardlm::test::metrics(run).size(), 5u);
}

TEST_F(CheckpointIntegrity, ExportNeverOverwritesWithoutForceNorWritesIntoACheckpoint) {
    const fs::path run = tmp / "run", ckpt = run / "ckpt_00000002", hf = tmp / "hf";
    ASSERT_EQ(train("--steps 2 --out " + run.string()).code, 0);
    const std::string weights = shardlm::io::read_file((ckpt / "model.rank00000-of-00001.safetensors").string());
    ASSERT_EQ(cmd("export --init " + ckpt.string() + " --out " + hf.string()).code, 0);
    CmdResult r = cmd("export --init " + ckpt.string() + " --out " + hf.string() + " --dtype BF16");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("already exists and is not empty"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
    EXPECT_EQ(cmd("export --init " + ckpt.string() + " --out " + hf.string() + " --dtype BF16 --force").code, 0);
    // into the checkpoint itself, or into the run directory: never, not even with --force
    r = cmd("export --init " + ckpt.string() + " --out " + ckpt.string() + " --dtype BF16 --force");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("is a shardlm checkpoint"), std::string::npos) << r.out;
    r = cmd("export --init " + ckpt.string() + " --out " + run.string() + " --force");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("is a training run directory"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(ckpt / "model.safetensors"));
    EXPECT_EQ(shardlm::io::read_file((ckpt / "model.rank00000-of-00001.safetensors").string()), weights);
    EXPECT_EQ(train("--steps 3 --resume --out " + run.string()).code, 0);
}

}  // namespace
