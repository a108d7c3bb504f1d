#include "shardlm/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "shardlm/core/check.h"

namespace shardlm::optim {

LossScaler::LossScaler(const std::string& spec, int window) : window_(window) {
    SHARDLM_CHECK(window > 0, "--scale-window must be > 0 (got ", window, ")");
    if (spec.empty()) return;
    enabled_ = true;
    if (spec == "dynamic") {
        dynamic_ = true;
        scale_ = kInitialScale;
        return;
    }
    char* end = nullptr;
    const double v = std::strtod(spec.c_str(), &end);
    SHARDLM_CHECK(end && *end == '\0' && std::isfinite(v) && v > 0, "--loss-scale '", spec,
                  "' is neither 'dynamic' nor a positive number\n---> HINT: --loss-scale dynamic, or e.g. --loss-scale 1024");
    scale_ = float(v);
}

bool LossScaler::update(bool finite) {
    if (!dynamic_) return finite;
    if (!finite) {
        scale_ = std::max(1.0f, scale_ * 0.5f);
        clean_ = 0;
        return false;
    }
    if (++clean_ >= window_) {
        scale_ *= 2.0f;
        clean_ = 0;
    }
    return true;
}

void LossScaler::restore(float scale, int clean_steps) {
    if (!enabled_) return;
    scale_ = scale;
    clean_ = clean_steps;
}

}  // namespace shardlm::optim
