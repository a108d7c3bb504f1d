#include "shardlm/train/run_dir.h"

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/core/format.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/train/checkpoint.h"
#include "shardlm/train/rank_text.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

// Files a run writes (train: config, metrics, summary, the id of its checkpoints kept in memory; report: the
// charts and the page).
const char* const kRunFiles[] = {"config.json",      "metrics.jsonl", "summary.json",  "report.html",
                                 "loss.svg",         "tokens_per_s.svg", "lr.svg",     "grad_norm.svg",
                                 "config_history.jsonl", "memory_checkpoints.json"};

// How many of dir's directories are shardlm's own of the kind k (checkpoint_dir_kind).
int count_checkpoint_dirs(const std::string& dir, CheckpointDir k) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        n += e.is_directory() && checkpoint_dir_kind(e.path().filename().string()) == k;
    return n;
}

}  // namespace

std::string existing_run(const std::string& dir, bool with_config) {
    if (!fs::is_directory(dir)) return "";
    std::string out;
    for (const char* f : {"config.json", "metrics.jsonl", "summary.json"})
        if ((with_config || std::string(f) != "config.json") && fs::exists(fs::path(dir) / f))
            out += (out.empty() ? "" : ", ") + std::string(f);
    const std::vector<std::string> ckpts = checkpoints_newest_first(dir);
    if (!ckpts.empty())
        out += (out.empty() ? "" : ", ") + std::to_string(ckpts.size()) + " checkpoint" + (ckpts.size() > 1 ? "s" : "") +
               " (latest " + fs::path(ckpts.front()).filename().string() + ")";
    if (const int damaged = count_checkpoint_dirs(dir, CheckpointDir::Damaged))
        out += (out.empty() ? "" : ", ") + std::to_string(damaged) + " damaged checkpoint" + (damaged > 1 ? "s" : "");
    if (const int temps = count_checkpoint_dirs(dir, CheckpointDir::Temporary))
        out += (out.empty() ? "" : ", ") + std::to_string(temps) + " unfinished checkpoint" + (temps > 1 ? "s" : "");
    return out;
}

void clear_run(const std::string& dir) {
    if (!fs::is_directory(dir)) return;
    for (const char* f : kRunFiles) fs::remove(fs::path(dir) / f);
    std::vector<fs::path> ours;  // (collected first: removing while iterating is unspecified)
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && checkpoint_dir_kind(e.path().filename().string()) != CheckpointDir::None) ours.push_back(e.path());
    for (const fs::path& p : ours) fs::remove_all(p);
}

namespace {

// Takes dir's locks into `locks`; "" or why not (rank 0 of the job).
std::string lock_run_dir(const std::string& dir, RunDirLocks& locks) {
    std::string holder;
    const long supervisor = supervisor_pid();
    const bool supervised = supervisor > 0 && run_lock_pid(dir, RunLockKind::Job) == supervisor &&
                            !run_lock_holder(dir, RunLockKind::Job).empty();
    if (!supervised) {
        locks.job = RunLock::try_take(dir, RunLockKind::Job, &holder);
        if (!locks.job)
            return cat("run directory '", dir, "' is in use by another job: ", holder,
                       "; two jobs in one directory would mix their checkpoints and metrics",
                       "\n---> HINT: wait for it to end (or stop it: SIGTERM to that PID ends it after a checkpoint), or "
                       "another --out");
        if (!holder.empty()) std::printf("note: %s: the lock of %s, no longer running, is taken over\n", dir.c_str(), holder.c_str());
    }
    locks.ranks = RunLock::try_take(dir, RunLockKind::Ranks, &holder);
    if (!locks.ranks)
        return cat("run directory '", dir, "' is in use: the training processes of another job still run in it (",
                   holder, ")", "\n---> HINT: wait for them to end (a job whose `launch` was killed stops after its next ",
                   "checkpoint), or another --out");
    return "";
}

}  // namespace

RunDirLocks claim_run_dir(const TrainConfig& cfg, comm::Group& world) {
    RunDirLocks locks;
    if (cfg.output.out.empty()) return locks;
    const std::string problem = all_gather_text(world, world.rank() == 0 ? lock_run_dir(cfg.output.out, locks) : "")[0];
    if (!problem.empty()) throw Error(problem);
    if (cfg.output.resume) return locks;
    const std::string held = existing_run(cfg.output.out);
    world.barrier();  // every rank has looked before rank 0 writes anything into it
    if (held.empty()) return locks;
    SHARDLM_CHECK(cfg.output.overwrite, "run directory '", cfg.output.out, "' already holds a run (", held,
                  "): training into it would mix two runs", "\n---> HINT: --resume to continue that run, --overwrite ",
                  "to delete it and start afresh, or another --out");
    if (world.rank() == 0) {
        std::printf("--overwrite: deleting the run in %s (%s)\n", cfg.output.out.c_str(), held.c_str());
        std::fflush(stdout);
        clear_run(cfg.output.out);
    }
    world.barrier();
    return locks;
}

std::string metrics_path(const TrainConfig& cfg) {
    if (!cfg.output.metrics.empty()) return cfg.output.metrics;
    return cfg.output.out.empty() ? "" : (fs::path(cfg.output.out) / "metrics.jsonl").string();
}

int MetricsFile::steps() const {
    int n = 0;
    for (const auto& r : rows) n = std::max(n, r.first + 1);
    return n;
}

MetricsFile read_metrics_file(const std::string& path) {
    MetricsFile m;
    std::ifstream in(path);
    std::string line;
    for (int no = 1; std::getline(in, line); no++) {
        if (line.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || j["step"] < 0) {
            m.bad_lines.push_back(no);
            continue;
        }
        m.rows.emplace_back(j["step"].get<int>(), line);
        if (j.contains("step_ms") && j["step_ms"].is_number()) m.step_ms += j["step_ms"].get<double>();
    }
    return m;
}

namespace {

// The newest checkpoint step the run's own schedule wrote, as its records prove (0: none proven). The
// settings are those the run wrote them with (its config.json: this resume may change them). The row of
// step s is written before the checkpoint after it, so a row past a multiple of --ckpt-every N proves
// that checkpoint; with --async-ckpt it is published a step later. --ckpt-every-seconds S: once the
// recorded step times pass 2 S, one was written.
struct Proven {
    int step = 0;     // 0: none proven
    std::string why;  // "--ckpt-every 2", "--ckpt-every-seconds 30"
};
Proven proven_checkpoint(const TrainConfig& cfg, int steps, double step_ms) {
    OutputSettings o = cfg.output;
    const fs::path config = fs::path(cfg.output.out) / "config.json";
    const nlohmann::json was = fs::exists(config) ? nlohmann::json::parse(io::read_file(config.string()), nullptr, false)
                                                  : nlohmann::json();
    try {
        if (was.is_object()) {
            o.ckpt_every = was.value("ckpt_every", o.ckpt_every);
            o.ckpt_every_seconds = was.value("ckpt_every_seconds", o.ckpt_every_seconds);
            o.async_ckpt = was.value("async_ckpt", o.async_ckpt);
        }
    } catch (const nlohmann::json::exception&) {  // a hand-edited config.json: this run's settings
        o = cfg.output;
    }
    const int after = steps - (o.async_ckpt ? 2 : 1);  // the steps trained before the newest provable one
    Proven p;
    if (o.ckpt_every > 0 && after >= o.ckpt_every)
        p = {after / o.ckpt_every * o.ckpt_every, format("--ckpt-every %d", o.ckpt_every)};
    else if (o.ckpt_every_seconds > 0 && step_ms >= 2e3 * o.ckpt_every_seconds && after > 0)
        p = {1, format("--ckpt-every-seconds %g, and its rows' step times add up to %.0f s", double(o.ckpt_every_seconds), step_ms / 1e3)};
    return p;
}

}  // namespace

void check_resume_keeps_records(const TrainConfig& cfg, int start_step) {
    if (cfg.output.out.empty() || !fs::is_directory(cfg.output.out)) return;
    // a checkpoint set aside as damaged accounts for the steps up to it: they can only be trained again
    int accounted = start_step;
    for (const auto& e : fs::directory_iterator(cfg.output.out))
        if (checkpoint_dir_kind(e.path().filename().string()) == CheckpointDir::Damaged)
            accounted = std::max(accounted, std::atoi(e.path().filename().string().c_str() + 5));
    const fs::path summary = fs::path(cfg.output.out) / "summary.json";
    if (fs::exists(summary)) {
        const nlohmann::json j = nlohmann::json::parse(io::read_file(summary.string()), nullptr, false);
        const int finished = j.is_object() && j.contains("steps") && j["steps"].is_number_integer() ? j["steps"].get<int>() : -1;
        SHARDLM_CHECK(finished <= accounted, "--resume: ", summary.string(), " records a run finished at step ", finished,
                      " but the newest checkpoint in ", cfg.output.out, start_step > 0 ? " is at step " + std::to_string(start_step)
                                                                                         : std::string(" is gone (none is left)"),
                      ": resuming would train those steps again and rewrite the run's metrics.jsonl and summary.json",
                      "\n---> HINT: restore the checkpoint of step ", finished, " (ckpt_", format("%08d", finished),
                      "), or --overwrite to start afresh, or another --out");
    }
    const std::string path = metrics_path(cfg);
    if (path.empty() || !fs::exists(path)) return;
    const MetricsFile m = read_metrics_file(path);
    const Proven proven = proven_checkpoint(cfg, m.steps(), m.step_ms);
    SHARDLM_CHECK(proven.step <= accounted, "--resume: ", path, " records ", m.steps(), " steps, so this run wrote a checkpoint",
                  proven.step > 1 ? " at step " + std::to_string(proven.step) : std::string(), " (", proven.why, "), but the newest checkpoint left is ",
                  start_step > 0 ? "at step " + std::to_string(start_step) : std::string("none"),
                  ": resuming would train those steps again and drop their rows from the metrics",
                  "\n---> HINT: restore the missing checkpoint, or --overwrite to start afresh, or another --out");
}

std::string flight_dir(const TrainConfig& cfg) {
    if (!cfg.reliability.flight_dir.empty()) return cfg.reliability.flight_dir;
    return cfg.output.out.empty() ? "" : (fs::path(cfg.output.out) / "flight").string();
}

void start_flight_recorder(const TrainConfig& cfg, const comm::Group& world) {
    const std::string dir = flight_dir(cfg);
    comm::flight::set_dump_dir(dir);
    if (dir.empty() || !fs::is_directory(dir)) return comm::flight::install_signal_dump();
    std::error_code ec;
    const int me = world.members().empty() ? 0 : world.members()[size_t(world.rank())];
    fs::remove(fs::path(dir) / ("rank" + std::to_string(me) + ".json"), ec);
    if (world.rank() == 0)
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (n.rfind("rank", 0) == 0 && e.path().extension() == ".json" &&
                std::atoi(n.c_str() + 4) >= world.size())
                fs::remove(e.path(), ec);
        }
    comm::flight::install_signal_dump();
}

}  // namespace shardlm::train
