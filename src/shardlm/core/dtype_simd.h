// core/dtype_simd.h: the AVX-512 form of core/dtype.h's conversions, for bulk conversion
// (convert_from_f32) and for kernels that read and write activations of any storage type: 16 values
// at a time are loaded as fp32 and stored back rounded (bf16: nearest even, NaN kept quiet; fp16:
// nearest even, IEEE overflow to inf).
#pragma once
#include <immintrin.h>

#include <cstddef>

#include "shardlm/core/dtype.h"

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

inline __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Element i.. i+15 of an array of storage type D, masked, as fp32; and the store back.
template <DType D>
inline __m512 load16(const void* p, size_t i, __mmask16 m) {
    if constexpr (D == DType::F32) {
        return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const unsigned short*>(p) + i);
        if constexpr (D == DType::BF16) return bf16x16_to_f32(h);
        else return _mm512_cvtph_ps(h);
    }
}

template <DType D>
inline void store16(void* p, size_t i, __mmask16 m, __m512 v) {
    if constexpr (D == DType::F32) {
        _mm512_mask_storeu_ps(static_cast<float*>(p) + i, m, v);
    } else {
        const __m256i h = D == DType::BF16 ? f32x16_to_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(static_cast<unsigned short*>(p) + i, m, h);
    }
}

// One element, scalar.
template <DType D>
inline float load1(const void* p, size_t i) {
    if constexpr (D == DType::F32) return static_cast<const float*>(p)[i];
    else if constexpr (D == DType::BF16) return bf16_to_f32(static_cast<const unsigned short*>(p)[i]);
    else return f16_to_f32(static_cast<const unsigned short*>(p)[i]);
}

// n values on this thread (no OpenMP): widen src (type t) into dst, or round src into dst (type t).
inline void load_row(float* dst, const void* src, DType t, size_t n);
inline void store_row(void* dst, DType t, const float* src, size_t n);

}  // namespace shardlm

// Runs `body` with the compile-time DType D set to dt's value, e.g.
//   SHARDLM_DTYPE_SWITCH(t, D, layernorm_impl<D>(out, ...));
#define SHARDLM_DTYPE_SWITCH(dt, D, ...)                 \
    switch (dt) {                                        \
    case ::shardlm::DType::F32: {                        \
        constexpr ::shardlm::DType D = ::shardlm::DType::F32; \
        __VA_ARGS__;                                     \
        break;                                           \
    }                                                    \
    case ::shardlm::DType::BF16: {                       \
        constexpr ::shardlm::DType D = ::shardlm::DType::BF16; \
        __VA_ARGS__;                                     \
        break;                                           \
    }                                                    \
    case ::shardlm::DType::F16: {                        \
        constexpr ::shardlm::DType D = ::shardlm::DType::F16; \
        __VA_ARGS__;                                     \
        break;                                           \
    }                                                    \
    }

namespace shardlm {

inline void load_row(float* dst, const void* src, DType t, size_t n) {
    SHARDLM_DTYPE_SWITCH(t, D, {
        for (size_t i = 0; i < n; i += 16) {
            const __mmask16 m = i + 16 <= n ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
            _mm512_mask_storeu_ps(dst + i, m, load16<D>(src, i, m));
        }
    })
}

inline void store_row(void* dst, DType t, const float* src, size_t n) {
    SHARDLM_DTYPE_SWITCH(t, D, {
        for (size_t i = 0; i < n; i += 16) {
            const __mmask16 m = i + 16 <= n ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
            store16<D>(dst, i, m, _mm512_maskz_loadu_ps(m, src + i));
        }
    })
}

}  // namespace shardlm
