// kernels/vec_math.h: vector exp and tanh (core/simd.h) for the softmax, cross-entropy and GELU kernels, and a row's max.
// Accuracy ~1-2 ulp over the range we use (Cephes expf polynomial); kernels/reference/ uses std::exp
// and std::tanh, and tests/kernels/test_kernels.cpp bounds the difference.
#pragma once
#include <cmath>
#include <cstddef>

#include "shardlm/core/simd.h"

namespace shardlm::kernels {

using simd::M16;
using simd::V16;

// exp(x) for 16 floats. Inputs below -87.3 flush towards 0, above 88.7 saturate at ~FLT_MAX.
inline V16 exp16(V16 x) {
    using namespace simd;
    x = min(max(x, set1(-87.33654f)), set1(88.72283f));
    // x = n*ln2 + r, |r| <= ln2/2, ln2 split in two for an exact product.
    const V16 n = round_nearest(x * set1(1.44269504088896341f));
    V16 r = fnmadd(n, set1(0.693359375f), x);
    r = fnmadd(n, set1(-2.12194440e-4f), r);
    V16 p = set1(1.9875691500e-4f);
    p = fmadd(p, r, set1(1.3981999507e-3f));
    p = fmadd(p, r, set1(8.3334519073e-3f));
    p = fmadd(p, r, set1(4.1665795894e-2f));
    p = fmadd(p, r, set1(1.6666665459e-1f));
    p = fmadd(p, r, set1(5.0000001201e-1f));
    const V16 r2 = r * r;
    p = fmadd(p, r2, r + set1(1.0f));
    return scalef(p, n);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); exact limits +-1 for large |x|.
inline V16 tanh16(V16 x) {
    using namespace simd;
    const V16 e = exp16(x + x), one = set1(1.0f);
    return one - set1(2.0f) / (e + one);
}

// The largest of x[0, V) (-inf for V = 0): a softmax row's maximum.
inline float row_max(const float* x, int V) {
    using namespace simd;
    V16 mx = set1(-INFINITY);
    for (int j = 0; j < V; j += 16) {
        const M16 m = mask_below(size_t(j), size_t(V));
        mx = mask_max(mx, m, mx, load(m, x + j));
    }
    return reduce_max(mx);
}

}  // namespace shardlm::kernels
