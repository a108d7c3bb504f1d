// train/stop_signal.h: SIGINT / SIGTERM end a training run cleanly.
//
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
const char* signal_name(int sig);  // "SIGINT", "SIGTERM"

}  // namespace shardlm::train
