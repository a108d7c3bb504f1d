#include "shardlm/train/run_dir.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/train/checkpoint.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

// Files a run writes (train: config, metrics, summary; report: the charts and the page).
const char* const kRunFiles[] = {"config.json", "metrics.jsonl",    "summary.json", "report.html",  "loss.svg",
                                 "tokens_per_s.svg", "lr.svg", "grad_norm.svg", "config_history.jsonl"};

bool is_checkpoint_name(const std::string& n) {
    return n.rfind("ckpt_", 0) == 0 || (n.rfind(".ckpt_", 0) == 0 && n.find(".tmp.") != std::string::npos);
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
    return out;
}

void clear_run(const std::string& dir) {
    if (!fs::is_directory(dir)) return;
    for (const char* f : kRunFiles) fs::remove(fs::path(dir) / f);
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && is_checkpoint_name(e.path().filename().string())) fs::remove_all(e.path());
}

void claim_run_dir(const TrainConfig& cfg, comm::Group& world) {
    if (cfg.output.out.empty() || cfg.output.resume) return;
    const std::string held = existing_run(cfg.output.out);
    world.barrier();  // every rank has looked before rank 0 writes anything into it
    if (held.empty()) return;
    SHARDLM_CHECK(cfg.output.overwrite, "run directory '", cfg.output.out, "' already holds a run (", held,
                  "): training into it would mix two runs", "\n---> HINT: --resume to continue that run, --overwrite ",
                  "to delete it and start afresh, or another --out");
    if (world.rank() == 0) {
        std::printf("--overwrite: deleting the run in %s (%s)\n", cfg.output.out.c_str(), held.c_str());
        std::fflush(stdout);
        clear_run(cfg.output.out);
    }
    world.barrier();
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
