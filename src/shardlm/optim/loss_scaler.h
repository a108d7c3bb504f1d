// optim/loss_scaler.h: dynamic loss scaling (Micikevicius et al. 2018), for fp16 training.
//
// The loss is multiplied by the scale before backward, so small gradients stay representable, and
// the optimiser divides it out. Dynamic: start at 2^16; after `window` steps in a row with finite
// gradients double it; on any inf/NaN gradient halve it and skip the step. The decision is taken
// on a value every rank holds the same (the all-reduced squared gradient norm), so every rank of
// every parallel dimension skips together. Static: a fixed scale (a step with non-finite gradients
// is still skipped).
#pragma once
#include <string>
#include <string_view>

namespace shardlm::optim {

// --loss-scale: "" (the precision's default: dynamic for fp16, off otherwise), "dynamic", or a
// positive number (a static scale).
struct LossScale {
    enum class Mode { Default, Dynamic, Static };
    Mode mode = Mode::Default;
    float scale = 0;  // Static
    static LossScale dynamic() { return {Mode::Dynamic, 0}; }
    static LossScale fixed(float s) { return {Mode::Static, s}; }
};
std::string setting_text(const LossScale& s);  // "", "dynamic", "1024"
bool setting_parse(std::string_view s, LossScale* out);
std::string setting_choices(const LossScale*);

class LossScaler {
public:
    // spec: Default (off: scale 1), Dynamic, or Static. window: clean steps before the dynamic
    // scale doubles.
    LossScaler(LossScale spec, int window);

    bool enabled() const { return enabled_; }
    bool dynamic() const { return dynamic_; }
    float scale() const { return scale_; }
    int clean_steps() const { return clean_; }
    // The step's outcome: finite gradients -> true (take the step; the scale may grow); else false
    // (skip it; a dynamic scale halves).
    bool update(bool finite);
    void restore(float scale, int clean_steps);  // from a checkpoint

    static constexpr float kInitialScale = 65536.0f;  // 2^16

private:
    bool enabled_ = false, dynamic_ = false;
    float scale_ = 1.0f;
    int window_ = 1000, clean_ = 0;
};

}  // namespace shardlm::optim
