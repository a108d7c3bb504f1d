// model/lanes.h: how a unit's pass runs on a rank's threads. With one lane every kernel splits its work over
// all the threads; with several (model/units.h: lanes) the threads form a team, each thread a lane that runs
// whole sequences of the micro-batch with its kernels single-threaded, and the items they share (LaneWork)
// are taken as they come.
#pragma once
#include <omp.h>

#include <algorithm>
#include <exception>
#include <memory>

#include "shardlm/model/units.h"

namespace shardlm::model {

// A backward's phases: B and W together, B alone (the input gradients), W alone (the weight gradients).
enum class Phases { Both, Input, Weight };

class LaneRunner {
public:
    explicit LaneRunner(int lanes = 1) : lanes_(lanes) {}
    int lanes() const { return lanes_; }

    // f(context) once per lane of a B-sequence micro-batch: here with one lane, else on a team of
    // threads, each running its kernels single-threaded.
    template <class F>
    void run_lanes(const UnitContext& ctx, int B, F&& f) {
        run_team(ctx, std::min(lanes_, B), f);
    }
    // A unit's W phase (its parameter gradients): on the lanes, and with one lane (the kernel split) on
    // every thread as lanes too, each taking blocks of output rows with its kernels single-threaded (one
    // meeting of the threads for the unit's W instead of one per product); here on one thread or under
    // tensor parallelism.
    template <class F>
    void run_weight_lanes(const UnitContext& ctx, F&& f) {
        run_team(ctx, lanes_ > 1 ? lanes_ : ctx.tp_size() > 1 || omp_in_parallel() ? 1 : omp_get_max_threads(), f);
    }
    // A unit's backward in `phases`: B alone on the lanes, W alone as above, or both: on the lanes in
    // one team (`both`: B, the lanes' barrier, W), or with one lane B here, then W as above.
    template <class Both, class Input, class Weight>
    void run_unit_backward(const UnitContext& ctx, int B, Phases phases, Both&& both, Input&& input, Weight&& weight) {
        if (phases == Phases::Input) return run_lanes(ctx, B, input);
        if (phases == Phases::Weight) return run_weight_lanes(ctx, weight);
        if (std::min(lanes_, B) > 1) return run_lanes(ctx, B, both);  // B, the lanes' barrier, W: one team
        run_lanes(ctx, B, input);
        run_weight_lanes(ctx, weight);
    }

private:
    template <class F>
    void run_team(const UnitContext& ctx, int lanes, F&& f) {
        if (lanes <= 1) {
            f(ctx);
            return;
        }
        std::exception_ptr error;
        work_->reset();
#pragma omp parallel num_threads(lanes)
        {
            // every kernel, OpenBLAS and oneDNN run on this one thread (oneDNN's primitives are made and
            // cached per thread count: matmul_bf16.cpp)
            omp_set_num_threads(1);
            UnitContext c = ctx;
            c.work = work_.get();
            c.lane = omp_get_thread_num();
            c.lanes = omp_get_num_threads();  // fewer if the runtime gave fewer: the lanes follow
            try {
                f(c);
            } catch (...) {
#pragma omp critical(shardlm_lanes)
                if (!error) error = std::current_exception();
            }
        }
        if (error) std::rethrow_exception(error);
    }

    int lanes_ = 1;
    std::unique_ptr<LaneWork> work_ = std::make_unique<LaneWork>();  // the items the lanes share
};

}  // namespace shardlm::model
