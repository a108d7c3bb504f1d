// train/run_dir.h: a run directory (--out) belongs to one run.
//
// Training into a directory that holds another run (its config.json, metrics.jsonl, summary.json or
// checkpoints) would mix two runs' metrics, overwrite the first run's summary and let the first run's
// higher-numbered checkpoints prune the new run's away. So `train --out DIR` refuses such a directory
// unless it is told what to do: --resume continues that run, --overwrite deletes what a run wrote
// there (only those files: checkpoints, metrics, config, summary, report) and starts afresh.
#pragma once
#include <string>

#include "shardlm/comm/group.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

// What a run left in dir, e.g. "config.json, metrics.jsonl, 2 checkpoints (latest ckpt_00000010)";
// "" if nothing. with_config false: config.json alone does not count (an HF directory has one too).
std::string existing_run(const std::string& dir, bool with_config = true);
// Deletes the files and checkpoints a run and `shardlm report` write into dir.
void clear_run(const std::string& dir);
// Collective over world: checks cfg.out as above (throwing the same error on every rank) and, with
// --overwrite, clears it on rank 0.
void claim_run_dir(const TrainConfig& cfg, comm::Group& world);
// The flight recorder's dump directory: --flight-dir, else <out>/flight, else none.
std::string flight_dir(const TrainConfig& cfg);
// Points the flight recorder (comm/flight.h) at flight_dir(cfg), removes the dumps a previous
// attempt left there (this rank's; rank 0 also those of ranks beyond the world), and installs the
// SIGUSR1 dump.
void start_flight_recorder(const TrainConfig& cfg, const comm::Group& world);

}  // namespace shardlm::train
