// tests/kernels/kernel_test_util.h: what the kernel tests share: normal random vectors and the largest
// difference relative to the reference's largest magnitude.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace shardlm::test {

using Vec = std::vector<float>;

inline Vec randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    Vec v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// max |a - b| / max |b|
inline float rel_diff(const Vec& a, const Vec& b) {
    float worst = 0, scale = 1e-30f;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs(a[i] - b[i])), scale = std::max(scale, std::fabs(b[i]));
    return worst / scale;
}

}  // namespace shardlm::test
