// launch/supervisor.h: `shardlm launch`, a supervisor around mpirun that restarts a training job on
// the ranks left after one dies or hangs.
//
// One attempt is one `mpirun -np N shardlm train ...`. Its output passes through (and is scanned), from
// <out>/launch.attempt-<n>.log; a SIGINT/SIGTERM to the supervisor asks the ranks for a checkpoint.
// When it fails, the supervisor names the reason from what mpirun and the ranks printed:
//   - a rank killed by a signal (mpirun: "process rank R ... exited on signal S"): that rank is lost
//     (with --hostfile, the next attempt's hostfile has one slot fewer on its node);
//   - a collective that did not finish within --comm-timeout: the ranks' flight records
//     (comm/flight.h) name the rank that did not enter it; that rank is lost;
//   - anything else (a bad flag, a diverged loss, a failed write) is not a lost rank: restarting
//     would fail the same way, so the supervisor stops with the attempt's exit code.
// Every attempt keeps a checkpoint in memory after each step (train --mem-ckpt-every 1 unless the flags
// set it, or a --dp-algo whose replicas differ would average them at every step; train/memory_checkpoint.h):
// the next attempt resumes from it, from the ranks' memory and, for a
// lost node's part, over MPI from its replica, when it is newer than the newest on disk.
// It then picks the largest layout that fits the ranks left (launch/relayout.h: the same tp x pp if
// it fits, else the nearest that holds the model; the global batch unchanged) and starts the next
// attempt with --resume, which continues from the newest checkpoint whose checksums hold (the
// killed attempt's later metrics rows are dropped, so metrics.jsonl holds every step once). At
// most --max-restarts restarts; never below --min-np ranks.
//
// Growing back (--max-np N; off without it): without --hostfile, when the lost ranks ran on this machine, a
// restart takes N ranks at once (their CPUs are free again as soon as they died); while an attempt runs on
// fewer than N ranks, at each new
// checkpoint the supervisor looks whether more can run (on this machine they can at once: a killed rank's
// CPU is free again; with --hostfile a lost node counts again when `mpirun --host NODE -np 1 true` succeeds
// on it), and if so asks the ranks to stop after a checkpoint and starts the next attempt on the largest
// layout that fits (launch.jsonl: "grow"). Growing is not a failure: it does not count as a restart.
//
// Every event goes to stdout ("launch: ...") and, one JSON object a line, to <out>/launch.jsonl:
// {"event": "start" | "failure" | "restart" | "grow" | "done" | "gave_up", "attempt", "time" (Unix seconds),
//  "np", "layout", and for a start "log" (<out>/launch.attempt-<n>.log, the attempt's output); for a
//  failure "reason", "lost_ranks", "exit_code"; for a restart "old_layout", "new_layout", "resume_step",
//  "resume_from" ("memory" or "disk"), "last_step", "steps_lost"; for a grow "old_layout", "new_layout", "resume_step"}.
//
// Fault injection (tests): SHARDLM_TEST_* variables reach the first attempt only.
#pragma once
#include <string>
#include <vector>

#include "shardlm/launch/relayout.h"
#include "shardlm/train/train_config.h"

namespace shardlm::launch {

struct LaunchOptions {
    int np = 0;                           // ranks of the first attempt
    int min_np = 1;                       // fewest ranks to go on with
    int max_restarts = 3;
    int max_np = 0;                       // grow back up to this many ranks at a checkpoint (0: never grow)
    std::string hostfile;                 // passed to mpirun
    std::string mpirun = "mpirun";
    std::vector<std::string> mpi_args;    // more mpirun arguments (e.g. --oversubscribe)
    std::string exe;                      // the shardlm binary (default: this one)
    std::vector<std::string> train_args;  // the flags after `-- train` (with --mem-ckpt-every 1 added unless they
                                          // or their --config set it, or replicas differ: cli/cmd_launch.cpp)
};

// Why an attempt failed, from its output.
struct Failure {
    bool rank_lost = false;         // a rank died or stalled: restarting on the others may help
    std::vector<int> lost;          // world ranks lost (may be empty when unknown: one is assumed)
    std::vector<std::string> nodes; // the node of each killed rank, as mpirun names it (hang: unknown)
    std::string reason;             // one line
};
// Reads an attempt's output (the tail is enough) and, for a timeout, the flight records in flight_dir.
Failure diagnose(const std::string& output, const std::string& flight_dir);

// The train flags of the next attempt: --dp/--tp/--pp set to l, --resume added, --overwrite
// removed (it would delete the run), --pp-split removed when pp changes.
std::vector<std::string> next_train_args(const std::vector<std::string>& args, const Layout& l, bool pp_changed);

// A hostfile ("host [slots=N] ..." lines, # comments) with one slot fewer on the node of each lost
// rank (a node left with no slot is dropped). Lines it does not understand are kept as they are.
std::string shrink_hostfile(const std::string& text, const std::vector<std::string>& lost_nodes);

// The layout of the first attempt: cfg's tp and pp, dp = np / (tp pp) unless given.
Layout first_layout(const train::TrainConfig& cfg, int np);

// Runs the job to the end; returns the exit code for `shardlm launch` (0: trained to --steps).
int supervise(const LaunchOptions& o, const train::TrainConfig& cfg);

}  // namespace shardlm::launch
