// core/simd.h's horizontal sum and maximum and its lane-wise max and min give, on AVX-512, the bits of the
// intrinsics they replaced (the maximum: GCC's, the compiler of every product build) (_mm512_reduce_add_ps, _mm512_reduce_max_ps, _mm512_max_ps, _mm512_min_ps), whose GCC 12
// headers warn wherever they are inlined (GCC bug 105593): vectors of mixed magnitudes (where the order of the
// additions shows) and of specials (NaN, infinities, zeros of both signs, where max's argument order shows).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "shardlm/core/simd.h"

// this file alone calls the intrinsics themselves, to compare with
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

namespace simd = shardlm::simd;

#if defined(__AVX512F__)
TEST(Simd, ReductionsMaxAndMinGiveTheIntrinsicsBits) {
    std::mt19937 rng(9);
    std::normal_distribution<float> n(0.0f, 1.0f);
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {std::nanf(""), -std::nanf(""), inf, -inf, 0.0f, -0.0f, 1e-40f, -1e-40f};
    for (int trial = 0; trial < 20000; trial++) {
        alignas(64) float a[16], b[16];
        for (int i = 0; i < 16; i++) {
            a[i] = n(rng) * std::pow(10.0f, float(int(rng() % 17)) - 8.0f);
            b[i] = n(rng);
            if (trial % 3 == 1 && rng() % 4 == 0) a[i] = specials[rng() % 8];
            if (trial % 3 == 2 && rng() % 4 == 0) b[i] = specials[rng() % 8];
        }
        const __m512 va = _mm512_load_ps(a), vb = _mm512_load_ps(b);
        const simd::V16 x{va}, y{vb};
        // GCC's _mm512_reduce_add_ps and _mm512_reduce_max_ps (every product build's compiler) to the bit; clang's
        // (the sanitizer build's) take a NaN's sign, and max a zero's, from another lane
        bool nan_free = true, zero_free = true;
        for (float v : a) nan_free = nan_free && v == v, zero_free = zero_free && v != 0.0f;
#if defined(__clang__)
        if (nan_free)
#endif
            ASSERT_EQ(std::bit_cast<uint32_t>(simd::reduce_add(x)), std::bit_cast<uint32_t>(_mm512_reduce_add_ps(va)))
                << trial;
#if defined(__clang__)
        if (nan_free && zero_free)
#endif
            ASSERT_EQ(std::bit_cast<uint32_t>(simd::reduce_max(x)), std::bit_cast<uint32_t>(_mm512_reduce_max_ps(va)))
                << trial;
        alignas(64) float got[16], want[16];
        _mm512_store_ps(got, simd::max(x, y).v), _mm512_store_ps(want, _mm512_max_ps(va, vb));
        for (int i = 0; i < 16; i++) ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << trial;
        _mm512_store_ps(got, simd::min(x, y).v), _mm512_store_ps(want, _mm512_min_ps(va, vb));
        for (int i = 0; i < 16; i++) ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << trial;
    }
}
#else
TEST(Simd, ReductionsMaxAndMinGiveTheIntrinsicsBits) {
    GTEST_SKIP() << "an AVX2 build: its reductions have their own order (core/simd.h)";
}
#endif

}  // namespace
