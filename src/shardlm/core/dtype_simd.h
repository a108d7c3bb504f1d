// core/dtype_simd.h: the vector form (core/simd.h) of core/dtype.h's conversions, for bulk conversion
// (convert_from_f32) and for kernels that read and write activations of any storage type: 16 values
// at a time are loaded as fp32 and stored back rounded (bf16: nearest even, NaN kept quiet; fp16:
// nearest even, IEEE overflow to inf).
#pragma once
#include <cstddef>

#include "shardlm/core/dtype.h"
#include "shardlm/core/simd.h"

namespace shardlm {

// Element i.. i+15 of an array of storage type D, under a prefix mask m, as fp32 (masked-off lanes
// 0); and the store back, rounded.
template <DType D>
inline simd::V16 load16(const void* p, size_t i, simd::M16 m) {
    if constexpr (D == DType::F32) {
        return simd::load(m, static_cast<const float*>(p) + i);
    } else {
        const __m256i h = simd::load_u16(m, static_cast<const unsigned short*>(p) + i);
        if constexpr (D == DType::BF16) return simd::bf16_widen(h);
        else return simd::f16_widen(h);
    }
}

template <DType D>
inline void store16(void* p, size_t i, simd::M16 m, simd::V16 v) {
    if constexpr (D == DType::F32) {
        simd::store(m, static_cast<float*>(p) + i, v);
    } else {
        const __m256i h = D == DType::BF16 ? simd::bf16_round(v) : simd::f16_round(v);
        simd::store_u16(m, static_cast<unsigned short*>(p) + i, h);
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
            const simd::M16 m = simd::mask_below(i, n);
            simd::store(m, dst + i, load16<D>(src, i, m));
        }
    })
}

inline void store_row(void* dst, DType t, const float* src, size_t n) {
    SHARDLM_DTYPE_SWITCH(t, D, {
        for (size_t i = 0; i < n; i += 16) {
            const simd::M16 m = simd::mask_below(i, n);
            store16<D>(dst, i, m, simd::load(m, src + i));
        }
    })
}

}  // namespace shardlm
