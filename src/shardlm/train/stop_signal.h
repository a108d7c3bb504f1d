// train/stop_signal.h: SIGINT / SIGTERM end a training run cleanly.
//
// SIGUSR2 asks the same: `launch` sends it to mpirun, which forwards it to every rank, where a
// SIGTERM would make mpirun kill the ranks at once.
// The handler only sets a flag (async-signal-safe). The trainer folds the flag into the step's world
// all-reduce (the one that sums the loss), so every rank learns at the same step that some rank was
// asked to stop; they finish that step, write a checkpoint together (save_checkpoint is collective)
// and return. A second signal while the first is pending exits at once (status 128 + signal), without
// a checkpoint: the previous complete checkpoint stays intact (checkpoints are written atomically).
#pragma once

namespace shardlm::train {

// Installs the handlers for its lifetime (restoring the previous ones after).
class StopSignals {
public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
};

// The signal received since the handlers were installed (0: none).
int stop_signal();
// The same after looking (at most once a second) whether the `launch` that started this process is gone
// (run_lock.h: supervisor_gone): then a stop is asked for as if by a signal, SIGHUP, so that ranks
// whose supervisor was killed write a checkpoint and end instead of training on unsupervised.
int poll_stop();
const char* signal_name(int sig);  // "SIGINT", "SIGTERM", "SIGUSR2 (a stop asked for by launch)"

}  // namespace shardlm::train
