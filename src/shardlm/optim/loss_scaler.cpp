#include "shardlm/optim/loss_scaler.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>

#include "shardlm/core/check.h"

namespace shardlm::optim {

std::string setting_text(const LossScale& s) {
    if (s.mode == LossScale::Mode::Default) return "";
    if (s.mode == LossScale::Mode::Dynamic) return "dynamic";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", double(s.scale));
    return buf;
}

bool setting_parse(std::string_view s, LossScale* out) {
    if (s.empty() || s == "dynamic") {
        *out = {s.empty() ? LossScale::Mode::Default : LossScale::Mode::Dynamic, 0};
        return true;
    }
    const std::string text(s);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (!(end && *end == '\0' && std::isfinite(v) && v > 0 && v <= 3.4e38)) return false;
    *out = LossScale::fixed(float(v));
    return true;
}

std::string setting_choices(const LossScale*) { return "dynamic or a positive number (a static scale, e.g. 1024)"; }

LossScaler::LossScaler(LossScale spec, int window) : window_(window) {
    SHARDLM_CHECK(window > 0, "--scale-window must be > 0 (got ", window, ")");
    if (spec.mode == LossScale::Mode::Default) return;
    enabled_ = true;
    dynamic_ = spec.mode == LossScale::Mode::Dynamic;
    scale_ = dynamic_ ? kInitialScale : spec.scale;
    SHARDLM_CHECK(scale_ > 0 && std::isfinite(scale_), "loss scale ", scale_, " must be a positive number");
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
