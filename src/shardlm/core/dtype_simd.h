// core/dtype_simd.h: the AVX-512 form of core/dtype.h's fp32 -> bf16 rounding, for the bulk
// conversion (convert_from_f32) and for kernels that round as they write (the bf16 head gradient).
#pragma once
#include <immintrin.h>

namespace shardlm {

// 16 floats to bf16, rounded to nearest even, NaN kept quiet: bit-identical to shardlm::f32_to_bf16
// (u + 0x7fff + ((u >> 16) & 1)) >> 16, with AVX-512F integer ops only.
inline __m256i f32x16_to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

}  // namespace shardlm
