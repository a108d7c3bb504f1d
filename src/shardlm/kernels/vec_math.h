// kernels/vec_math.h: AVX-512 exp and tanh for the softmax, cross-entropy and GELU kernels.
// Accuracy ~1-2 ulp over the range we use (Cephes expf polynomial); kernels/reference/ uses std::exp
// and std::tanh, and tests/kernels/test_vec_math.cpp bounds the difference.
#pragma once
#include <immintrin.h>

namespace shardlm::kernels {

// exp(x) for 16 floats. Inputs below -87.3 flush towards 0, above 88.7 saturate at ~FLT_MAX.
inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.72283f));
    // x = n*ln2 + r, |r| <= ln2/2, ln2 split in two for an exact product.
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); exact limits +-1 for large |x|.
inline __m512 tanh512(__m512 x) {
    __m512 e = exp512(_mm512_add_ps(x, x));
    __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

// Mask of the first n (< 16) lanes, for loop tails.
inline __mmask16 tail_mask(int n) { return __mmask16((1u << n) - 1u); }

}  // namespace shardlm::kernels
