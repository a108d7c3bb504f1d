// train/health.h: training-health telemetry, always on.
//
// Per compute unit (model::Unit::compute: the embedding, each block, the head; named by unit_names):
//   grad_norm     every step: its gradient's norm, from the global norm's own pass
//                 (ParamStore::grad_norm_sq_local) and summed over the world in the step's one all-reduce;
//   update_ratio  every --health-every N steps: ||theta_after - theta_before|| / ||theta_before|| of the
//                 optimiser's update (UpdateProbe: this rank's master copied before the update, compared after);
//   act_rms       every N steps: the root mean square of what the unit writes into the residual stream, over
//                 the step's micro-batches (model::ActivationProbe; not the head, which writes a loss).
// They go into metrics.jsonl ("unit_grad_norm" every step, "health" every N) and report.html's plots. A
// spike (SpikeWatch: the loss or the gradient norm above its window's mean + --spike-sigma sigma) is named
// with the unit whose gradient norm rose most against its own mean; --on-spike skip also skips that step's
// update on every rank alike (the sums it reads are the world's, the same everywhere). A spike's step stays
// out of the window.
#pragma once
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "shardlm/parallel/param_store.h"

namespace shardlm::train {

// "embedding", "block 0", ..., "head": the compute units of a model of n_layer blocks, by index.
std::vector<std::string> unit_names(int n_layer);

// The optimiser's update per unit on a due step: before() copies the counted parts of this rank's master,
// after() adds each unit's squared update and squared parameters (before the update) at its index.
class UpdateProbe {
public:
    void before(parallel::ParamStore& store);
    void after(parallel::ParamStore& store, double* update_sq, double* param_sq);
    bool armed() const { return armed_; }

private:
    std::vector<float> copy_;
    bool armed_ = false;
};

class SpikeWatch {
public:
    SpikeWatch(double sigma, int window, int n_layer) : sigma_(sigma), window_(size_t(window)), names_(unit_names(n_layer)) {}
    struct Verdict {
        bool spike = false;
        std::string message;  // "warning: step 21: loss spike: ...; largest rise: block 1 ..." ("" without a spike)
        int unit = -1;        // the unit named (-1: none)
    };
    // The step's loss, gradient norm and each unit's gradient norm (the world's: the same on every rank).
    Verdict check(int step, double loss, double grad_norm, const std::vector<double>& unit_norms);

private:
    struct Window {
        std::deque<double> v;
        double mean() const;
        double sd(double mean) const;
    };
    // the unit whose norm is the largest multiple of its window's mean (-1 without a full window)
    int largest_rise(const std::vector<double>& unit_norms, double* ratio) const;
    double sigma_;
    size_t window_;
    std::vector<std::string> names_;
    Window loss_, norm_;
    std::vector<Window> units_;
};

}  // namespace shardlm::train
