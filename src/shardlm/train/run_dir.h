// train/run_dir.h: a run directory (--out) belongs to one run.
//
// Training into a directory that holds another run (its config.json, metrics.jsonl, summary.json or
// checkpoints) would mix two runs' metrics, overwrite the first run's summary and let the first run's
// higher-numbered checkpoints prune the new run's away. So `train --out DIR` refuses such a directory
// unless it is told what to do: --resume continues that run, --overwrite deletes what a run wrote
// there (only those files: checkpoints, metrics, config, summary, report) and starts afresh.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardlm/comm/group.h"
#include "shardlm/train/run_lock.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

// What a run left in dir, e.g. "config.json, metrics.jsonl, 2 checkpoints (latest ckpt_00000010)";
// "" if nothing. with_config false: config.json alone does not count (an HF directory has one too).
std::string existing_run(const std::string& dir, bool with_config = true);
// Deletes the files and checkpoints a run and `shardlm report` write into dir: the files by name, the
// checkpoint directories by their exact patterns (checkpoint_dir_kind), nothing else.
void clear_run(const std::string& dir);
// The locks a job holds on its run directory (train/run_lock.h): on world rank 0 only.
struct RunDirLocks {
    std::unique_ptr<RunLock> job, ranks;
};
// Collective over world: takes the run directory's locks on rank 0 (under `launch` only the ranks lock,
// once the supervisor is seen to hold the job lock), checks cfg.out as above (throwing the same error
// on every rank) and, with --overwrite, clears it on rank 0. Hold the result for the run's life.
RunDirLocks claim_run_dir(const TrainConfig& cfg, comm::Group& world);
// The run's metrics file: --metrics, else <out>/metrics.jsonl, else "" (none).
std::string metrics_path(const TrainConfig& cfg);

// A metrics file as a resume reads it.
struct MetricsFile {
    std::vector<std::pair<int, std::string>> rows;  // (step, the line) of each row, in the file's order
    std::vector<int> bad_lines;                     // line numbers (from 1) that are not a step's row
    double step_ms = 0;                             // the rows' step times, summed
    int steps() const;                              // the largest step recorded + 1 (0: none)
};
MetricsFile read_metrics_file(const std::string& path);

// A resume that would start at start_step (0: no checkpoint) must not rewind what the run directory
// shows was trained further: a finished run (summary.json) past start_step, or metrics that reach a
// step at which the run wrote a checkpoint that is gone (--ckpt-every / --ckpt-every-seconds). Throws
// naming the records, the missing checkpoint and the fix.
void check_resume_keeps_records(const TrainConfig& cfg, int start_step);

// The flight recorder's dump directory: --flight-dir, else <out>/flight, else none.
std::string flight_dir(const TrainConfig& cfg);
// Points the flight recorder (comm/flight.h) at flight_dir(cfg), removes the dumps a previous
// attempt left there (this rank's; rank 0 also those of ranks beyond the world), and installs the
// SIGUSR1 dump.
void start_flight_recorder(const TrainConfig& cfg, const comm::Group& world);

}  // namespace shardlm::train
