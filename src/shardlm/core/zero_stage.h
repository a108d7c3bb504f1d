// core/zero_stage.h: the ZeRO stages (Rajbhandari et al. 2020) and where each keeps what: the one
// residency table that the ZeRO strategies (parallel/zero.h), the parameter store, the cost model's
// memory formulas (cost/memory.h) and the reports read.
//
//   stage          master (fp32)          16-bit copy (mixed)   gradients   optimiser steps
//   0 Replicate    whole                  whole                 whole       the whole layout
//   1 Optimizer    whole (fp32) | slices  whole                 whole       its slices
//   2 Gradients    whole (fp32) | slices  whole                 slices      its slices
//   3 Parameters   slices                 slices                slices      its slices
//
// In fp32 the model reads the master itself, so it stays whole up to stage 2; in mixed precision the
// master is the optimiser's state and is sliced from stage 1. The stage is a number on the command
// line and in configs (--zero 0..3).
#pragma once
#include <cstdint>
#include <string>

#include "shardlm/core/check.h"

namespace shardlm {

enum class ZeroStage : int { Replicate = 0, Optimizer = 1, Gradients = 2, Parameters = 3 };

constexpr int stage_number(ZeroStage s) { return int(s); }
// --zero n: a clear error for anything but 0..3
inline ZeroStage zero_stage(int n) {
    SHARDLM_CHECK(n >= 0 && n <= 3, "--zero must be 0, 1, 2 or 3 (got ", n, ")");
    return ZeroStage(n);
}
// As a setting: the number (--zero 3, "zero": 3).
inline int64_t setting_number(ZeroStage s) { return stage_number(s); }
inline bool setting_from_number(int64_t n, ZeroStage* out) {
    if (n < 0 || n > 3) return false;
    *out = ZeroStage(n);
    return true;
}
inline std::string setting_choices(const ZeroStage*) { return "0, 1, 2 or 3"; }

// Whether stage s shards the optimiser state (1-3), the gradients (2-3), the parameters (3).
constexpr bool shards_optimizer(ZeroStage s) { return s >= ZeroStage::Optimizer; }
constexpr bool shards_gradients(ZeroStage s) { return s >= ZeroStage::Gradients; }
constexpr bool shards_parameters(ZeroStage s) { return s == ZeroStage::Parameters; }

struct Residency {
    bool master_whole = true;     // else this rank's slices
    bool model16_whole = true;    // mixed precision: the 16-bit copy whole, else slices
    bool grads_whole = true;      // else this rank's slices of the reduced gradients
    bool optimizer_whole = true;  // the optimiser steps the whole layout (else its slices)
};

constexpr Residency residency(ZeroStage s, bool mixed) {
    Residency r;
    r.master_whole = mixed ? !shards_optimizer(s) : !shards_parameters(s);
    r.model16_whole = !shards_parameters(s);
    r.grads_whole = !shards_gradients(s);
    r.optimizer_whole = !shards_optimizer(s);
    return r;
}

}  // namespace shardlm
