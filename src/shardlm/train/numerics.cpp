#include "shardlm/train/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "shardlm/train/rank_text.h"

namespace shardlm::train {

namespace {

// Index of the first non-finite element of x[0, n), or n.
size_t first_nonfinite(const float* x, size_t n) {
    float acc = 0;  // x * 0 is 0 for finite x, NaN for NaN and inf
#pragma omp parallel for simd reduction(+ : acc) schedule(static)
    for (size_t i = 0; i < n; i++) acc += x[i] * 0.0f;
    if (acc == 0) return n;
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite(x[i])) return i;
    return n;
}

// The parameter holding flat element i.
const model::ParamSpec* param_at(const model::Layout& l, size_t i) {
    for (const model::ParamSpec& p : l.params)
        if (i >= p.offset && i < p.offset + p.numel) return &p;
    return nullptr;
}

// "<kind> <compute> <unit> <param>" of the first non-finite element over the ranges (forward order
// for parameters; for gradients the last unit's first, their backward order), or "".
template <typename T>
std::string scan(const char* kind, const OwnedTensors& m, const std::vector<T*>& data, bool backward) {
    const model::Layout& l = *m.layout;
    int best = backward ? -1 : INT32_MAX;
    std::string found;
    for (size_t k = 0; k < m.ranges.size() && k < data.size(); k++) {
        const optim::Range& r = m.ranges[k];
        // unit by unit, so that the first element found per unit is compared across units
        for (const model::Unit& u : l.units) {
            const size_t b = std::max(r.begin, u.offset), e = std::min(r.end, u.offset + u.numel);
            if (b >= e) continue;
            const size_t at = first_nonfinite(data[k] + (b - r.begin), e - b);
            if (at == e - b) continue;
            if (backward ? u.compute <= best : u.compute >= best) continue;
            best = u.compute;
            const model::ParamSpec* p = param_at(l, b + at);
            found = std::string(kind) + " " + std::to_string(u.compute) + " " + u.name + " " +
                    (p ? p->name : std::string("(padding)"));
        }
    }
    return found;
}

}  // namespace

NonFiniteReport find_nonfinite(comm::Group& world, const OwnedTensors& mine, bool loss_finite) {
    std::string text = scan("param", mine, mine.params, false);
    if (!mine.grads.empty()) {
        const std::string g = scan("grad", mine, mine.grads, true);
        if (!g.empty()) text += (text.empty() ? "" : "\n") + g;
    }
    // (kind, compute, unit, param, rank) of the earliest parameter and the latest gradient finding
    struct Finding {
        int compute = -1, rank = -1;
        std::string unit, param;
    } param, grad;
    const std::vector<std::string> all = all_gather_text(world, text);
    for (size_t r = 0; r < all.size(); r++) {
        std::istringstream in(all[r]);
        std::string kind, unit, name;
        int compute;
        while (in >> kind >> compute >> unit >> name) {
            Finding& f = kind == "param" ? param : grad;
            const bool better = f.rank < 0 || (kind == "param" ? compute < f.compute : compute > f.compute);
            if (better) f = {compute, world.members()[r], unit, name};
        }
    }
    NonFiniteReport rep;
    rep.params = param.rank >= 0;
    auto where = [](const Finding& f) { return "unit " + f.unit + " (" + f.param + ", rank " + std::to_string(f.rank) + ")"; };
    if (param.rank >= 0) rep.message = "first non-finite tensor: parameters of " + where(param);
    else if (!loss_finite) rep.message = "first non-finite tensor: the loss";
    else if (grad.rank >= 0) rep.message = "first non-finite tensor: gradient of " + where(grad);
    else rep.message = "first non-finite tensor: the gradient norm (its sum overflowed)";
    if (!loss_finite && param.rank < 0 && grad.rank >= 0) rep.message += "; first non-finite gradient: " + where(grad);
    return rep;
}

bool params_finite(comm::Group& world, const OwnedTensors& mine) {
    double bad = 0;
    for (size_t k = 0; k < mine.ranges.size(); k++)
        if (first_nonfinite(mine.params[k], mine.ranges[k].size()) < mine.ranges[k].size()) bad = 1;
    world.all_reduce_max(&bad, 1);
    return bad == 0;
}

std::string json_number(double x, const char* fmt) {
    if (!std::isfinite(x)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, x);
    return buf;
}

}  // namespace shardlm::train
