#include "shardlm/train/health.h"

#include <cmath>
#include <cstring>

#include "shardlm/core/format.h"

namespace shardlm::train {

std::vector<std::string> unit_names(int n_layer) {
    std::vector<std::string> n = {"embedding"};
    for (int l = 0; l < n_layer; l++) n.push_back("block " + std::to_string(l));
    n.push_back("head");
    return n;
}

void UpdateProbe::before(parallel::ParamStore& store) {
    copy_.clear();
    store.for_each_counted_master([&](int, float* d, size_t n) { copy_.insert(copy_.end(), d, d + n); });
    armed_ = true;
}

void UpdateProbe::after(parallel::ParamStore& store, double* update_sq, double* param_sq) {
    size_t at = 0;
    store.for_each_counted_master([&](int unit, float* d, size_t n) {
        double du = 0, p = 0;
        const float* old = copy_.data() + at;
        for (size_t i = 0; i < n; i++) {
            const double diff = double(d[i]) - double(old[i]);
            du += diff * diff;
            p += double(old[i]) * double(old[i]);
        }
        update_sq[unit] += du;
        param_sq[unit] += p;
        at += n;
    });
    armed_ = false;
}

double SpikeWatch::Window::mean() const {
    double m = 0;
    for (double x : v) m += x;
    return v.empty() ? 0 : m / double(v.size());
}

double SpikeWatch::Window::sd(double mean) const {
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    return v.size() > 1 ? std::sqrt(var / double(v.size() - 1)) : 0;
}

int SpikeWatch::largest_rise(const std::vector<double>& unit_norms, double* ratio) const {
    int best = -1;
    *ratio = 0;
    for (size_t u = 0; u < units_.size() && u < unit_norms.size(); u++) {
        const double m = units_[u].mean();
        if (units_[u].v.size() < window_ || !(m > 0) || !std::isfinite(unit_norms[u])) continue;
        if (unit_norms[u] / m > *ratio) *ratio = unit_norms[u] / m, best = int(u);
    }
    return best;
}

SpikeWatch::Verdict SpikeWatch::check(int step, double loss, double grad_norm, const std::vector<double>& unit_norms) {
    Verdict v;
    if (sigma_ <= 0 || !std::isfinite(loss)) return v;
    if (units_.size() != unit_norms.size()) units_.assign(unit_norms.size(), Window{});
    const bool full = loss_.v.size() == window_;
    std::string what;
    if (full) {
        const double lm = loss_.mean(), ls = loss_.sd(lm), gm = norm_.mean(), gs = norm_.sd(gm);
        if (loss > lm + sigma_ * ls)
            what = format("loss spike: %.4f > mean %.4f + %.1f x sigma %.4f", loss, lm, sigma_, ls);
        else if (std::isfinite(grad_norm) && grad_norm > gm + sigma_ * gs)
            what = format("gradient-norm spike: %.4g > mean %.4g + %.1f x sigma %.4g", grad_norm, gm, sigma_, gs);
    }
    if (!what.empty()) {
        double ratio = 0;
        v.spike = true;
        v.unit = largest_rise(unit_norms, &ratio);
        v.message = format("warning: step %d: %s of the last %zu steps", step + 1, what.c_str(), window_);
        if (v.unit >= 0)
            v.message += format("; the largest rise of a unit's gradient norm: %s (%.4g, %.1fx its mean)",
                                names_[size_t(v.unit)].c_str(), unit_norms[size_t(v.unit)], ratio);
        return v;  // (a spike stays out of the windows)
    }
    auto push = [&](Window& w, double x) {
        if (w.v.size() == window_) w.v.pop_front();
        w.v.push_back(x);
    };
    push(loss_, loss);
    if (std::isfinite(grad_norm)) push(norm_, grad_norm);
    for (size_t u = 0; u < unit_norms.size(); u++)
        if (std::isfinite(unit_norms[u])) push(units_[u], unit_norms[u]);
    return v;
}

}  // namespace shardlm::train
